"""The MarianMT export of the tiny trained model, checked by an independent path: MarianMT's
forward pass written in numpy from the architecture's description (marian_numpy.py) runs on
the exported safetensors and gives our logits, and on a MarianMT directory of random weights
read in with --from_hf gives the imported model's; against transformers' MarianMT itself (slow,
needs the hf extra) the logits agree both ways and greedy search gives our ids."""

import json
import os
import shutil
import subprocess
import sys
from importlib import metadata

import jax
import numpy as np
import pytest

from .. import needs

needs.require("safetensors", "the test extra: pip install -e '.[test]'")

from transformer_jax.data.batching import pad_batch  # noqa: E402
from transformer_jax.data.tokenizer import EOS_ID  # noqa: E402
from transformer_jax.decoding import decode  # noqa: E402
from transformer_jax.exports import hf, mapping  # noqa: E402
from transformer_jax.model.transformer import Transformer, shift_right  # noqa: E402

from ..helpers import run_command, workdir_spec  # noqa: E402
from . import marian_numpy  # noqa: E402

# A padded batch of several lengths: sources and targets ending with EOS.
SOURCES = [[5, 6, 7, 8, 9, 10, EOS_ID], [11, 12, EOS_ID], [13, EOS_ID], [14, 15, 16, 17, EOS_ID]]
TARGETS = [[20, 21, 22, EOS_ID], [23, EOS_ID], [24, 25, 26, 27, 28, EOS_ID], [29, 30, EOS_ID]]


def _logits(loaded):
    src = pad_batch(SOURCES, max(map(len, SOURCES)))
    tgt = pad_batch(TARGETS, max(map(len, TARGETS)))
    model = Transformer(loaded.model_config.replace(deterministic=True))
    return np.asarray(model.apply({"params": loaded.params}, src, tgt)), np.asarray(tgt) != 0


@pytest.fixture(scope="module")
def exported(trained_workdir, tmp_path_factory):
    out = tmp_path_factory.mktemp("hf") / "marian"
    ran = run_command("export", "hf", f"--workdir={trained_workdir}", f"--out={out}",
                      "--average=1")
    assert ran.returncode == 0, ran.stderr
    return out


def test_the_directory_holds_what_marian_reads(exported):
    config = json.loads((exported / "config.json").read_text())
    assert (config["activation_function"], config["scale_embedding"],
            config["pad_token_id"], config["eos_token_id"],
            config["decoder_start_token_id"]) == ("relu", True, 0, 1, 0)
    vocab = json.loads((exported / "vocab.json").read_text())
    assert (vocab["<pad>"], vocab["</s>"], vocab["<unk>"]) == (0, 1, 2)
    assert len(vocab) == config["vocab_size"]
    assert (exported / "source.spm").read_bytes() == (exported / "target.spm").read_bytes()
    card = (exported / "README.md").read_text()
    assert "## Provenance" in card and "## Final metrics" in card


def _marian(directory, sd=None):
    """MarianMT's logits (the numpy pass) of the batch from a directory's config.json and
    model.safetensors (or the state dict ``sd``)."""
    from safetensors.numpy import load_file

    config = json.loads((directory / "config.json").read_text())
    sd = load_file(directory / "model.safetensors") if sd is None else sd
    src = np.asarray(pad_batch(SOURCES, max(map(len, SOURCES))))
    tgt = pad_batch(TARGETS, max(map(len, TARGETS)))
    return marian_numpy.logits(sd, config, src, np.asarray(shift_right(tgt)))


def test_marian_computed_from_the_export_gives_our_logits(trained_workdir, exported):
    from safetensors.numpy import load_file

    sd = load_file(exported / "model.safetensors")
    config = json.loads((exported / "config.json").read_text())
    assert {k: v.shape for k, v in sd.items()} == marian_numpy.state_dict_shapes(config)
    table = marian_numpy.position_table(config["max_position_embeddings"], config["d_model"])
    for side in ("encoder", "decoder"):
        np.testing.assert_allclose(sd[f"model.{side}.embed_positions.weight"], table,
                                   atol=1e-6)
    ours, mask = _logits(mapping.load(trained_workdir, workdir_spec(trained_workdir), 1))
    gap = np.abs(_marian(exported, sd) - ours)[mask].max()
    # LayerNorm's epsilon, 1e-5 in MarianMT and 1e-6 in ours, is the only difference.
    assert gap < 1e-4, gap


def test_an_export_without_the_channel_permutation_fails_the_check(trained_workdir, exported,
                                                                   tmp_path, monkeypatch):
    # Our interleaved sines and cosines written as they are: MarianMT's table would add the
    # wrong position to every channel (the check above must be able to fail).
    monkeypatch.setattr(hf, "channels", lambda d: np.arange(d))
    unpermuted = tmp_path / "unpermuted"
    ran = run_command("export", "hf", f"--workdir={trained_workdir}", f"--out={unpermuted}",
                      "--average=1")
    assert ran.returncode == 0, ran.stderr
    ours, mask = _logits(mapping.load(trained_workdir, workdir_spec(trained_workdir), 1))
    assert np.abs(_marian(unpermuted) - ours)[mask].max() > 1e-2


def test_a_marian_directory_of_random_weights_is_read_in_as_marian_computes_it(exported,
                                                                              tmp_path):
    # A MarianMT directory not made by our export: random weights under MarianMT's names
    # and no run config (as a directory from elsewhere comes).
    config = json.loads((exported / "config.json").read_text())
    rng = np.random.default_rng(0)
    sd = {name: rng.normal(1.0 if "layer_norm.weight" in name else 0.0, 0.3, shape)
          .astype(np.float32) for name, shape in marian_numpy.state_dict_shapes(config).items()}
    for name in sd:
        if ".k_proj.bias" in name:  # our attention has no key bias (the import refuses one)
            sd[name] = np.zeros_like(sd[name])
    table = marian_numpy.position_table(config["max_position_embeddings"], config["d_model"])
    sd["model.encoder.embed_positions.weight"] = sd["model.decoder.embed_positions.weight"] = table
    foreign = tmp_path / "foreign"
    shutil.copytree(exported, foreign)
    (foreign / hf.RUN_CONFIG).unlink()
    from safetensors.numpy import save_file

    save_file(sd, foreign / "model.safetensors", metadata={"format": "pt"})
    workdir = tmp_path / "in"
    ran = run_command("export", "hf", f"--from_hf={foreign}", f"--out={workdir}")
    assert ran.returncode == 0, ran.stderr
    ours, mask = _logits(mapping.load(workdir, workdir_spec(workdir), 1))
    theirs = _marian(foreign, sd)
    assert np.abs(theirs).max() > 1  # logits far from zero: the comparison means something
    assert np.abs(theirs - ours)[mask].max() < 1e-4


def test_the_channel_permutation_puts_sines_first():
    # Worked out by hand for d = 6: MarianMT's channels 0-2 are our sines 0, 2, 4.
    assert hf.channels(6).tolist() == [0, 2, 4, 1, 3, 5]


def test_a_damaged_marian_directory_is_one_line(exported, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(exported, broken)
    (broken / "model.safetensors").write_bytes(b"not safetensors")
    ran = run_command("export", "hf", f"--from_hf={broken}", f"--out={tmp_path / 'w'}")
    assert ran.returncode == 2
    assert "model.safetensors: damaged" in ran.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "w").exists()
    gelu = tmp_path / "gelu"
    shutil.copytree(exported, gelu)
    config = json.loads((gelu / "config.json").read_text())
    (gelu / "config.json").write_text(json.dumps({**config, "activation_function": "gelu"}))
    ran = run_command("export", "hf", f"--from_hf={gelu}", f"--out={tmp_path / 'w'}")
    assert ran.returncode == 2 and "activation_function='gelu'" in ran.stderr


# transformers' MarianMT in its Flax port (transformers 4.x, the last release with Flax
# models: the hf extra), which reads the PyTorch-layout safetensors through transformers' own
# conversion and runs on JAX, so that no PyTorch build is needed (PyPI's for Linux is CUDA's,
# 5.6 GB). Its own process: transformers' imports stay out of the test worker, and
# USE_TORCH=0 keeps an installed PyTorch out of it.
MARIAN = """
import sys
import numpy as np
import transformers

exported, arrays, out, max_len = sys.argv[1:]
a = np.load(arrays)
model = transformers.FlaxMarianMTModel.from_pretrained(exported, from_pt=True)
src = a["src"]
logits = model(input_ids=src, attention_mask=src != 0,
               decoder_input_ids=a["decoder_inputs"]).logits
generated = model.generate(src, attention_mask=src != 0, num_beams=1, do_sample=False,
                           max_length=int(max_len) + 1).sequences  # + the start token
np.savez(out, logits=np.asarray(logits), generated=np.asarray(generated))
"""


@pytest.mark.slow
def test_transformers_gives_our_logits_and_greedy_ids(trained_workdir, exported, tmp_path):
    try:
        version = metadata.version("transformers")
    except metadata.PackageNotFoundError:
        needs.missing("transformers is not installed (the hf extra: pip install -e '.[hf]')")
    if int(version.split(".")[0]) >= 5:
        needs.missing(f"transformers {version} has no Flax models (the hf extra's "
                      "transformers<5 has: pip install -e '.[hf]')")
    loaded = mapping.load(trained_workdir, workdir_spec(trained_workdir), 1)
    ours, mask = _logits(loaded)
    src = np.asarray(pad_batch(SOURCES, max(map(len, SOURCES))))
    tgt = pad_batch(TARGETS, max(map(len, TARGETS)))
    max_len = 20
    np.savez(tmp_path / "in.npz", src=src, decoder_inputs=np.asarray(shift_right(tgt)))
    ran = subprocess.run([sys.executable, "-c", MARIAN, str(exported), str(tmp_path / "in.npz"),
                          str(tmp_path / "out.npz"), str(max_len)],
                         capture_output=True, text=True, timeout=600,
                         env={**os.environ, "USE_TORCH": "0", "USE_TF": "0"})
    assert ran.returncode == 0, ran.stderr
    theirs = np.load(tmp_path / "out.npz")
    gap = np.abs(theirs["logits"] - ours)[mask].max()
    print(f"max |logit difference| on a padded batch: {gap:.3g}")
    assert gap < 1e-4
    # Back: the directory read into our model gives transformers' logits.
    assert run_command("export", "hf", f"--from_hf={exported}",
                       f"--out={tmp_path / 'back'}").returncode == 0
    back, _ = _logits(mapping.load(tmp_path / "back", workdir_spec(tmp_path / "back"), 1))
    gap = np.abs(theirs["logits"] - back)[mask].max()
    print(f"read back: max |logit difference| against transformers: {gap:.3g}")
    assert gap < 1e-4
    greedy = np.asarray(decode.greedy_decode(loaded.params, src, config=loaded.model_config,
                                             max_len=max_len))
    for row, out in zip(greedy, theirs["generated"], strict=True):
        mine = row.tolist()[: row.tolist().index(EOS_ID) + 1 if EOS_ID in row else max_len]
        assert out[1:1 + len(mine)].tolist() == mine


@pytest.mark.slow
def test_training_resumes_from_the_read_back_workdir(exported, tmp_path):
    from transformer_jax.config import resume
    from transformer_jax.training import train

    workdir = tmp_path / "back"
    assert run_command("export", "hf", f"--from_hf={exported}",
                       f"--out={workdir}").returncode == 0
    imported = mapping.load(workdir, workdir_spec(workdir), 1).params
    config = resume.workdir_config(workdir)
    config.train.update(num_steps=1, bleu_every=0)
    train.train_and_evaluate(config, workdir)
    assert sorted(p.name for p in (workdir / "checkpoints").iterdir()) == ["0", "1"]
    stepped = mapping.load(workdir, workdir_spec(workdir), 1)
    assert stepped.steps == [1]
    # One Adam step of the warmup's first learning rate (d_model^-0.5 x warmup^-1.5 =
    # 0.002 here) moves no parameter further than that: training went on from the import.
    lr = config.model.d_model ** -0.5 * config.optim.warmup_steps ** -1.5
    moved = max(float(np.abs(a - b).max()) for a, b in zip(
        jax.tree.leaves(imported), jax.tree.leaves(stepped.params), strict=True))
    assert 0 < moved <= lr * 1.01
