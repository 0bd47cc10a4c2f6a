"""Workdirs written before the train step summed accumulated micro-batches itself (made by
the code of then: tests/fixtures/old_workdirs/README.md): the defaults of then resume on
today's default path and repeat the run they were part of; an accumulating one, whose
checkpoints count micro-batches and hold optax.MultiSteps's state, is refused in one line
and changed in nothing."""

import json
import shutil
from pathlib import Path

import jax
import pytest

from transformer_jax import config as config_lib
from transformer_jax.config import resume
from transformer_jax.evaluation import restore
from transformer_jax.io import layout, workdirs
from transformer_jax.training import train

from ..helpers import command_line, run_command, workdir_spec

OLD = Path(__file__).resolve().parents[1] / "fixtures" / "old_workdirs"


def old_workdir(name, tmp_path):
    """A copy of the old workdir ``name`` (a run writes into it)."""
    workdir = tmp_path / name
    shutil.copytree(OLD / name, workdir)
    return workdir


def train_losses(records):
    return {r["step"]: r["loss"] for r in records if r["split"] == "train"}


@pytest.mark.slow
def test_a_workdir_of_the_old_defaults_resumes_on_the_sharded_path_and_repeats_its_run(
        tmp_path, builtin_data_dir, monkeypatch):
    workdir = old_workdir("accum1", tmp_path)
    # Its config names the corpus "tfds", relative to where it was made: here that is the
    # session's built-in corpus.
    assert json.loads((workdir / layout.CONFIG).read_text())["data"]["data_dir"] == "tfds"
    monkeypatch.chdir(builtin_data_dir.parent)
    assert builtin_data_dir.name == "tfds"
    # Its command run again today: the same settings, and train.parallel, which it never
    # named, now the default's.
    config = resume.workdir_config(workdir)
    assert config.train.parallel == "pmap" and config_lib.base_config().train.parallel == (
        "sharded")
    config.train.parallel = "sharded"
    config.train.num_steps = 20
    train.train_and_evaluate(config, workdir)

    changes = [json.loads(line)["changes"]
               for line in (workdir / layout.CONFIG_CHANGES).read_text().splitlines()]
    assert changes == [{"train.parallel": ["pmap", "sharded"], "train.num_steps": [10, 20]}]
    assert workdirs.checkpoint_steps_on_disk(workdir) == [10, 20]
    # Steps 11-20 repeat the old code's run that was never stopped (same batches, same
    # dropout masks, the same arithmetic on one device).
    straight = train_losses(workdirs.read_metric_records(OLD / "accum1")) | train_losses(
        json.loads(line) for line in
        (OLD / "accum1_uninterrupted_metrics.jsonl").read_text().splitlines())
    resumed = train_losses(workdirs.read_metric_records(workdir))
    assert sorted(resumed) == sorted(straight) == list(range(1, 21))
    for step in range(11, 21):
        assert resumed[step] == pytest.approx(straight[step], rel=1e-5), step
    assert json.loads((workdir / layout.FINAL_METRICS).read_text())["step"] == 20


def test_an_old_accumulating_workdir_is_refused_in_one_line_and_left_as_it_was(tmp_path):
    workdir = old_workdir("accum2", tmp_path)
    before = {p.relative_to(workdir): p.read_bytes() for p in workdir.rglob("*") if p.is_file()}
    config = resume.workdir_config(workdir)
    assert config.optim.grad_accum_steps == 2
    config.train.num_steps = 8
    ran = run_command("main", *command_line(config), f"--workdir={workdir}")
    assert ran.returncode == 2, ran.stderr
    assert "Traceback" not in ran.stderr
    assert ran.stderr.strip().splitlines()[-1] == (
        f"error: {workdir}: checkpoint 8 was written by an older version that numbered "
        "checkpoints in micro-batches (8 = 4 optimizer steps of optim.grad_accum_steps=2) "
        "and saved optax.MultiSteps's state; this version counts optimizer steps and cannot "
        "resume it: train in a new --workdir (evaluate and translate still read its "
        "checkpoints)")
    after = {p.relative_to(workdir): p.read_bytes() for p in workdir.rglob("*") if p.is_file()}
    assert after == before
    # Its parameters still load for decoding, as the refusal says.
    loaded = restore.load_workdir(workdir, workdir_spec(workdir), average=1)
    assert loaded.steps == [8]
    assert loaded.params["shared_embedding"]["embedding"].shape == (200, 16)
    assert all(leaf.dtype == "float32" for leaf in jax.tree.leaves(loaded.params))
