"""Workdirs, sweep roots and data in a bucket (``gs://``), against a local Google Cloud
Storage (tests/gcs_emulator.py): the same files, guarantees and results as on local disk."""

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from transformer_jax.config import resume
from transformer_jax.data import sources, text
from transformer_jax.errors import DataError, UserError
from transformer_jax.io import checkpoints, layout, storage, strict_json, workdirs
from transformer_jax.sweeps.experiment import load_experiment
from transformer_jax.sweeps.report import build as compare
from transformer_jax.sweeps.run import run_sweep
from transformer_jax.sweeps.status import status_lines
from transformer_jax.training import faults, train

from ..helpers import ROOT, tiny_config, tiny_experiment
from ..integration.test_quiet_output import library_lines


def test_files_are_written_whole_locally_and_in_a_bucket(tmp_path, bucket):
    for where in (tmp_path, f"{bucket}/run"):
        target = storage.path(where) / "final_metrics.json"
        storage.path(where).mkdir(parents=True, exist_ok=True)
        storage.write_atomically(target, '{"step": 1}')
        storage.write_atomically(target, '{"step": 2}')
        assert strict_json.read(target) == {"step": 2}
        assert [p.name for p in storage.path(where).iterdir()] == ["final_metrics.json"]


def test_a_log_in_a_bucket_is_rewritten_whole_when_flushed(bucket):
    path = storage.path(f"{bucket}/run/metrics.jsonl")
    path.write_text('{"step": 1}\n{"step": 2, "lo')  # a killed writer's partial last line
    log = storage.LineLog(path, flush_s=3600)
    log.write('{"step": 3}\n')
    log.flush()  # the first flush writes; the next waits flush_s unless forced
    log.write('{"step": 4}\n')
    log.flush()
    assert path.read_text().splitlines()[-1] == '{"step": 3}'
    log.close()
    assert path.read_text().splitlines() == ['{"step": 1}', '{"step": 2, "lo', '{"step": 3}',
                                             '{"step": 4}']
    assert [r["step"] for r in workdirs.read_metric_records(path.parent)] == []  # no split
    storage.append_line(path, '{"split": "train", "step": 5}')
    assert workdirs.read_metric_records(path.parent) == [{"split": "train", "step": 5}]


def test_a_local_log_ends_a_killed_writers_partial_line_and_appends(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n{"step": 2, "lo')
    with storage.LineLog(path) as log:
        log.write('{"step": 3}\n')
        log.flush()
        assert path.read_text().endswith('"lo\n{"step": 3}\n')  # on disk at each flush
    storage.append_line(path, '{"step": 4}')
    assert path.read_text().splitlines() == ['{"step": 1}', '{"step": 2, "lo', '{"step": 3}',
                                             '{"step": 4}']
    storage.append_line(tmp_path / "new.jsonl", "x")
    assert (tmp_path / "new.jsonl").read_text() == "x\n"


def test_a_missing_bucket_and_an_unsupported_scheme_are_named_in_one_line(gcs_server):
    with pytest.raises(UserError, match=r"^workdir gs://no-such-bucket-here/run is not "
                                        r"writable: the bucket does not exist \("):
        faults.check_workdir("gs://no-such-bucket-here/run", checkpoint_bytes=1, keep=1)
    with pytest.raises(UserError, match=r"s3://b/run: only local paths and gs:// buckets"):
        storage.path("s3://b/run")


@pytest.mark.parametrize("error, cause", [
    (OSError("Forbidden: https://storage.googleapis.com/upload/storage/v1/b/x/o\nAnonymous "
             "caller does not have storage.objects.create access to the Google Cloud Storage "
             "object."), "no credentials"),
    (OSError("Forbidden: https://storage.googleapis.com/upload/storage/v1/b/x/o\nrunner@p.iam"
             ".gserviceaccount.com does not have storage.objects.create access"),
     "no permission to write there"),
    (FileNotFoundError("b/x/o"), "the bucket does not exist"),
    (OSError("Cannot connect to host storage.googleapis.com:443 ssl:default [Name or service "
             "not known]"), "the storage service cannot be reached"),
])
def test_what_a_bucket_answers_is_said_in_words(error, cause):
    # GCS's own answers (gcsfs raises them as these exceptions): the emulator checks no
    # credentials or permissions, so their words are tested here.
    assert storage.describe_error(error, "gs://x/run").startswith(cause)


def test_text_files_in_a_bucket_are_read_and_their_errors_name_the_file(bucket):
    pairs = storage.path(f"{bucket}/corpus/train.tsv")
    pairs.parent.mkdir(parents=True, exist_ok=True)
    pairs.write_text("ein Haus\ta house\nzwei Häuser\ttwo houses\n")
    loaded = text.load_pairs(str(pairs))
    assert [loaded[i] for i in range(len(loaded))] == [("ein Haus", "a house"),
                                                       ("zwei Häuser", "two houses")]
    broken = storage.path(f"{bucket}/corpus/broken.tsv")
    broken.write_text("ein Haus\ta house\nno tab here\n")
    with pytest.raises(DataError, match=f"^{broken}:2: expected 2 tab-separated fields"):
        text.load_pairs(str(broken))
    with pytest.raises(DataError, match=f"no such file {bucket}/corpus/missing.tsv"):
        text.load_pairs(f"{bucket}/corpus/missing.tsv")


def test_only_finished_checkpoints_in_a_bucket_are_listed(bucket):
    workdir = storage.path(f"{bucket}/run")
    state = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "step": np.int32(7)}
    ckpts = checkpoints.Checkpoints(workdir, keep=2)
    for step in (10, 20, 30):
        ckpts.save(step, state, None, {"step": step})
    ckpts.wait()
    # A checkpoint being written: objects under its step, no commit file yet.
    (workdir / "checkpoints" / "40" / "state").mkdir(parents=True)
    (workdir / "checkpoints" / "40" / "state" / "_METADATA").write_text("{}")
    assert workdirs.checkpoint_steps_on_disk(workdir) == [20, 30]
    restored, meta = checkpoints.Checkpoints(workdir, keep=2).restore(30, state)
    np.testing.assert_array_equal(restored["w"], state["w"])
    assert meta["step"] == 30
    ckpts.close()


def test_a_workdirs_config_and_its_changes_live_in_the_bucket(bucket):
    workdir = f"{bucket}/run"
    saved = {"train": {"num_steps": 10}, "model": {"d_model": 32}}
    resume.remember_config(workdir, saved, resuming=False)
    changes = resume.remember_config(workdir, {**saved, "train": {"num_steps": 20}},
                                       resuming=True)
    assert changes == {"train.num_steps": (10, 20)}
    assert workdirs.read_config(workdir)["train"]["num_steps"] == 20


@pytest.fixture(scope="module")
def bucket_data_dir(gcs_server):
    """The built-in corpus prepared into a bucket (written locally, then copied up)."""
    data_dir = gcs_server.create_bucket(f"data-{os.getpid()}") + "/tfds"
    sources.prepare_builtin(data_dir)
    return data_dir


def logged_losses(workdir):
    return [(r["step"], r["loss"]) for r in workdirs.read_metric_records(workdir)
            if r["split"] == "train"]


@pytest.mark.slow
def test_a_run_in_a_bucket_stopped_and_resumed_gives_the_losses_of_a_local_run(
        tmp_path, builtin_data_dir, bucket_data_dir, bucket, monkeypatch):
    config = tiny_config(builtin_data_dir, num_steps=12, log_every=1, checkpoint_every=10,
                         bleu_sentences=4)
    train.train_and_evaluate(config, tmp_path / "local")

    in_bucket = tiny_config(bucket_data_dir, num_steps=12, log_every=1, checkpoint_every=10,
                            bleu_sentences=4)
    workdir = f"{bucket}/run"
    real_step = train.Run._train_step

    def step_then_signal(run):
        real_step(run)
        if run.step == 7:
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(train.Run, "_train_step", step_then_signal)
    assert train.train_and_evaluate(in_bucket, workdir) == {"preempted_at_step": 7}
    assert workdirs.checkpoint_steps_on_disk(workdir) == [7]
    monkeypatch.setattr(train.Run, "_train_step", real_step)
    train.train_and_evaluate(in_bucket, workdir)
    assert logged_losses(workdir) == logged_losses(tmp_path / "local")  # bitwise
    assert workdirs.checkpoint_steps_on_disk(workdir) == [7, 10, 12]
    run = storage.path(workdir)
    for name in ("config.json", "final_metrics.json", "provenance.json", "vocab/spm.model",
                 layout.FINAL_HYPOTHESES, layout.FINAL_REFERENCES):
        assert (run / name).exists(), name
    assert [p.name for p in (run / "tb").iterdir() if p.name.startswith("events")]
    assert not (run / layout.HOLD).exists()

    # evaluate and translate read the workdir from the bucket, as commands do.
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-m", "transformer_jax.evaluate", f"--workdir={workdir}",
         "--split=validation", "--limit=4", "--average=1"],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert library_lines(out.stderr) == []
    written = [p for p in (run / "eval").iterdir() if p.name.startswith("validation-")]
    assert json.loads(next(p for p in written if p.suffix == ".json").read_text()
                      )["sentences"] == 4
    source = storage.path(f"{bucket}/in.txt")
    source.write_text("Das ist gut.\nIch sehe ein Haus.\n")
    out = subprocess.run(
        [sys.executable, "-m", "transformer_jax.translate", f"--workdir={workdir}",
         f"--input={source}", f"--output={bucket}/out.txt"],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert library_lines(out.stderr) == []
    assert len(storage.path(f"{bucket}/out.txt").read_text().splitlines()) == 2


@pytest.mark.slow
def test_a_sweep_root_in_a_bucket_runs_with_the_local_launcher(tmp_path, bucket_data_dir,
                                                              bucket, monkeypatch):
    experiment = tiny_experiment(tmp_path / "tiny.py", bucket_data_dir,
                                 points="{'variant': 'base'}, {'variant': 'D_ls0'}")
    root = f"{bucket}/sweep"
    monkeypatch.chdir(ROOT)
    outcome = run_sweep(load_experiment(experiment), root, "local", parallel=2)
    assert outcome == {"base": "finished", "D_ls0": "finished"}
    lines = status_lines(load_experiment(experiment), root)
    assert sum("finished" in line for line in lines[:2]) == 2, lines
    for point in ("base", "D_ls0"):
        log = (storage.path(root) / point / "train.log").read_text()
        assert "test BLEU" in log
    assert (storage.path(root) / "sweep.json").exists()
    definition, rows = compare.collect(root)
    assert definition["name"] == "tiny"
    assert sorted(r["point"] for r in rows) == ["D_ls0", "base"]
    assert all(r["test_bleu"] is not None for r in rows)
