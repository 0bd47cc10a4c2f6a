"""The decoding strategies' registry: a strategy in one new module is chosen by
``decode.strategy`` on the command line, and an unknown name is refused in one line naming
every registered one."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import sentencepiece

from transformer_jax.data.tokenizer import EOS_ID
from transformer_jax.decoding import strategies
from transformer_jax.io import layout

ROOT = Path(__file__).resolve().parents[2]

# The whole definition of a new strategy: every sentence translated as the pieces 10 and 11.
CONSTANT = f"""
import jax.numpy as jnp

from transformer_jax.decoding.strategies import Traits

TRAITS = Traits(beams=False)


def search(step, cache, key, max_lengths, max_len, decoding, eos_id, phases):
    row = jnp.zeros((max_len,), jnp.int32).at[:3].set(jnp.array([10, 11, {EOS_ID}]))
    return jnp.tile(row, (max_lengths.shape[0], 1))


def describe(decoding):
    return "pieces 10 and 11"
"""


def _translate(workdir, env, strategy):
    return subprocess.run([sys.executable, "-m", "transformer_jax.translate",
                           f"--workdir={workdir}", f"--config.decode.strategy={strategy}"],
                          cwd=ROOT, env=env, input=b"the teacher sees the bird\n\nthe bird\n",
                          capture_output=True, timeout=600)


@pytest.mark.slow
def test_a_strategy_in_one_new_module_is_used_from_the_command_line(trained_workdir, tmp_path):
    (tmp_path / "more").mkdir()
    (tmp_path / "more" / "constant.py").write_text(CONSTANT)
    env = {**os.environ, strategies.REGISTRY.variable: str(tmp_path / "more")}
    out = _translate(trained_workdir, env, "constant")
    assert out.returncode == 0, out.stderr.decode()[-3000:]
    sp = sentencepiece.SentencePieceProcessor(
        model_file=str(Path(trained_workdir) / layout.VOCAB / layout.VOCAB_MODEL))
    expected = sp.decode([10, 11])
    assert expected.strip()
    # The empty line stays empty: the strategy decodes the two sentences alone.
    assert out.stdout.decode().split("\n") == [expected, "", expected, ""]
    unknown = _translate(trained_workdir, env, "nucleus")
    assert unknown.returncode == 2
    assert unknown.stderr.decode().strip().splitlines() == [
        "error: decode.strategy='nucleus' is not one of greedy, beam, constant, sample"]
