"""What a new user sees: a fresh training run and ``translate`` print the project's log and
none of the libraries' warnings that are not the user's business. Each command runs as a
process of its own, from a fresh data directory (so the built-in corpus is written) and with
JAX_PLATFORMS unset (so JAX finds its plugins as a user's command does)."""

import os
import subprocess
import sys

import pytest

from ..helpers import ROOT, command_line, tiny_config
from ..needs import require

# What the libraries printed before (2026-12-06, a 2-core CPU): TFDS while the built-in
# corpus is written, orbax when a checkpoint's parameters are read back, and with the aot
# extra (JAX's CUDA plugin and libtpu) on a machine with neither a GPU nor a TPU, the
# plugins' start-up.
LIBRARY_MESSAGES = (
    "has no dataset_info.json",  # TFDS, asked whether the corpus is written yet
    "Downloading and preparing dataset",  # TFDS, on stdout
    "downloaded and prepared to",  # TFDS, on stdout
    "Metadata file does not exist",  # orbax, reading a checkpoint's state on its own
    "Unable to load cuDNN",  # the CUDA plugin, without a GPU
    "AdaptiveReadaheadCache",  # fsspec, at INFO, each time a file in a bucket is opened
    "Traceback",
    "libtpu",
    "TPU",
)


def _env():
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    env.pop("TRANSFORMER_JAX_TRACEBACK", None)
    return env


def _run(*args, stdin=""):
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, env=_env(), input=stdin,
                          capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def fresh_run(tmp_path_factory):
    """(training, translate): a 4-step run from a fresh data directory, then one sentence
    translated from its workdir; each a finished process."""
    tmp = tmp_path_factory.mktemp("fresh")
    config = tiny_config(tmp / "data", num_steps=4, log_every=2, eval_every=4,
                         checkpoint_every=4, keep_checkpoints=1)
    workdir = tmp / "run"
    trained = _run("transformer_jax.main", *command_line(config), f"--workdir={workdir}")
    assert trained.returncode == 0, trained.stderr[-3000:]
    translated = _run("transformer_jax.translate", f"--workdir={workdir}",
                      "--config.decode.strategy=greedy", stdin="the teacher sees the bird\n")
    assert translated.returncode == 0, translated.stderr[-3000:]
    return trained, translated


def library_lines(text):
    return [line for line in text.splitlines()
            if any(message in line for message in LIBRARY_MESSAGES)]


@pytest.mark.slow
def test_a_fresh_run_and_translate_print_no_library_warnings(fresh_run):
    trained, translated = fresh_run
    # The corpus is written once, in one line of the project's own.
    assert "writing the generated dataset builtin_corpus to " in trained.stderr
    assert trained.stdout == ""  # TFDS's two lines on stdout are gone
    assert library_lines(trained.stderr) == []
    assert "eval  step 4" in trained.stderr  # the run's own log is all there
    assert library_lines(translated.stderr) == []
    assert len(translated.stdout.splitlines()) == 1  # one translation, nothing else


@pytest.mark.slow
def test_the_accelerator_plugins_are_installed_yet_silent_on_a_cpu(fresh_run):
    """With the aot extra, as CI installs it: the CUDA plugin and libtpu are there, and a
    machine without a GPU or TPU gets none of their start-up messages; JAX runs on the CPU."""
    require("jax_plugins.xla_cuda13", "the aot extra: pip install -e '.[aot]'")
    require("libtpu", "the aot extra: pip install -e '.[aot]'")
    trained, translated = fresh_run
    assert library_lines(trained.stderr + translated.stderr) == []
    assert trained.stdout == ""
