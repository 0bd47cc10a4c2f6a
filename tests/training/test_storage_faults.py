"""Storage failing in the middle of a run (marked ``faults``, run by ``make faults``): a disk
that fills after the workdir's pre-flight check passed, on a small tmpfs each test mounts
(root only: tests/needs.py). The run stops in one line naming the path, nothing half-written
is left where a later run reads, and once there is room the same command resumes to the
losses of a run never interrupted."""

import fcntl
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import termios
import time

import pytest

from transformer_jax.io import layout, workdirs
from transformer_jax.training import faults, train

from .. import needs
from ..helpers import command_line, tiny_config
from .test_faults import ROOT, assert_every_checkpoint_whole, logged_losses, start

# The pre-flight check wants room for the checkpoints kept plus a margin of 256 MiB: the
# tmpfs passes it with a few MiB to spare, and ballast written after the first checkpoint
# takes that room away.
DISK_BYTES = faults.FREE_SPACE_MARGIN_BYTES + 16 * 2**20


def straight_config(data_dir):
    """straight_run's config (conftest.py): 20 steps, each logged, a checkpoint every 10."""
    return tiny_config(data_dir, num_steps=20, log_every=1)


def fill_after_first_checkpoint(process, disk, workdir, leave, step=10, timeout=300):
    """Pauses the run (``process``, or a list of a run's processes) once checkpoint ``step``
    is complete, fills ``disk`` but ``leave`` bytes with a ballast file, and lets the run go
    on. Returns the ballast's path."""
    processes = process if isinstance(process, list) else [process]
    deadline = time.time() + timeout
    while not (workdir / layout.CHECKPOINTS / str(step)).is_dir():
        for p in processes:
            assert p.poll() is None, (p.communicate()[0] or "")[-3000:]
        assert time.time() < deadline, f"no checkpoint {step} after {timeout} s"
        time.sleep(0.002)
    for p in processes:
        p.send_signal(signal.SIGSTOP)
    ballast = disk / "ballast"
    try:
        with open(ballast, "wb") as f:
            f.write(b"\0" * (shutil.disk_usage(disk).free - leave))
    finally:
        for p in processes:
            p.send_signal(signal.SIGCONT)
    return ballast


def event_records(path):
    """The records of a TensorBoard event file, read by their TFRecord framing (a length,
    its checksum, the data, its checksum); AssertionError if the file ends inside one."""
    data, at, records = path.read_bytes(), 0, []
    while at < len(data):
        assert at + 12 <= len(data), f"{path}: a record cut short at byte {at}"
        (length,) = struct.unpack("<Q", data[at:at + 8])
        assert at + 16 + length <= len(data), f"{path}: a record cut short at byte {at}"
        records.append(data[at + 12:at + 12 + length])
        at += 16 + length
    return records


def assert_nothing_half_written(workdir, config):
    """Every checkpoint listed restores whole and no unfinished one is left; metrics.jsonl
    and the TensorBoard files end in whole records; no temporary file of an atomic write."""
    steps = assert_every_checkpoint_whole(workdir, config)
    left = [p.name for p in (workdir / layout.CHECKPOINTS).iterdir()
            if not p.name.isdigit()]
    assert not left, f"unfinished checkpoints left: {left}"
    text = (workdir / layout.METRICS).read_text()
    assert text.endswith("\n")
    assert all(isinstance(json.loads(line), dict) for line in text.splitlines())
    events = sorted((workdir / layout.TENSORBOARD).glob("events.out.tfevents.*"))
    assert events and all(event_records(path) for path in events)
    assert not [p for p in workdir.rglob("*.partial")]
    assert not (workdir / layout.FINAL_METRICS).exists()
    return steps


def one_error_line(output, returncode):
    lines = output.strip().splitlines()
    assert returncode == 2, output[-3000:]
    assert "Traceback" not in output, output[-5000:]
    assert [line for line in lines if line.startswith("error:")] == [lines[-1]], output[-3000:]
    return lines[-1]


def resume_and_compare(config, workdir, straight):
    """The same command once there is room: it finishes, and every loss any run logged
    equals the uninterrupted run's, bitwise."""
    final = subprocess.run([sys.executable, "-m", "transformer_jax.main", *command_line(config),
                            f"--workdir={workdir}"], cwd=ROOT, capture_output=True, text=True,
                           timeout=600)
    assert final.returncode == 0, final.stderr[-3000:]
    assert json.loads((workdir / layout.FINAL_METRICS).read_text())["step"] == 20
    expected = dict(logged_losses(straight))
    logged = logged_losses(workdir)
    assert {step for step, _ in logged} == set(range(1, 21))
    assert [(s, loss) for s, loss in logged if loss != expected[s]] == []


@pytest.mark.faults
@pytest.mark.parametrize("leave, where", [
    # 96 KiB left: the log lines of steps 11-20 fit, checkpoint 20 (about 450 KiB) does not;
    # which write meets the full disk first, the checkpoint's or a log's while it is in
    # flight, is the threads' race.
    (96 * 1024, "checkpoint"),
    # Nothing left: the next log write (metrics.jsonl or the TensorBoard file, whichever
    # outgrows its last page first) is refused, perhaps after part of it was written.
    (0, "logs"),
])
def test_a_disk_full_mid_run_stops_in_one_line_and_resumes_to_the_same_losses(
        tmp_path, builtin_data_dir, straight_run, leave, where):
    config = straight_config(builtin_data_dir)
    with needs.tmpfs(tmp_path / "disk", DISK_BYTES) as disk:
        workdir = disk / "run"
        process = start(config, workdir)
        ballast = fill_after_first_checkpoint(process, disk, workdir, leave)
        began = time.monotonic()
        output = process.communicate(timeout=300)[0]
        stopped_s = time.monotonic() - began
        error = one_error_line(output, process.returncode)
        assert "No space left on device" in error and f"{workdir}/" in error, error
        if where == "logs":
            assert error.startswith((f"error: {workdir / layout.METRICS}: ",
                                     f"error: {workdir / layout.TENSORBOARD}/events.")), error
        steps = assert_nothing_half_written(workdir, config)
        assert steps == [10], steps
        assert error.endswith("the last complete checkpoint is 10: run the same command again "
                              "to resume from it once there is room"), error
        print(f"{where}: stopped {stopped_s:.1f} s after the disk filled: {error}")
        ballast.unlink()
        resume_and_compare(config, workdir, straight_run)


@pytest.mark.faults
def test_whole_files_and_appended_logs_on_a_full_disk_are_left_as_they_were(tmp_path):
    # What every record a run or a sweep writes whole goes through (final_metrics.json,
    # config.json, sweep.json, sweep_point.json), and the appended logs, on 64 KiB.
    from transformer_jax.errors import DiskFull
    from transformer_jax.io import storage

    with needs.tmpfs(tmp_path / "disk", 64 * 1024) as disk:
        record = disk / "sweep_point.json"
        storage.write_atomically(record, '{"attempts": 1}')
        with pytest.raises(DiskFull, match=f"^{re.escape(str(record))}: No space left on "
                                           "device: the write was undone"):
            storage.write_atomically(record, "x" * 128 * 1024)
        assert record.read_text() == '{"attempts": 1}'
        line = '{"split": "train", "step": 1, "loss": 4.5}\n'
        full = pytest.raises(DiskFull, match=f"^{re.escape(str(disk / 'metrics.jsonl'))}: ")
        with storage.LineLog(disk / "metrics.jsonl") as log, full:
            for _ in range(64 * 1024):  # more lines than the disk holds
                log.write(line)
        text = (disk / "metrics.jsonl").read_text()
        assert text == line * (len(text) // len(line)) and len(text) > 16 * 1024
        assert sorted(p.name for p in disk.iterdir()) == ["metrics.jsonl", "sweep_point.json"]


@pytest.mark.faults
def test_a_token_cache_on_a_full_disk_is_not_written_and_the_run_loses_nothing(
        tmp_path, builtin_data_dir, straight_run, caplog):
    # The training split's cache (about 6 MiB of ids) on a file system of 1 MiB: written
    # until the disk is full, then given up; the run tokenizes on the fly (the same batches).
    config = straight_config(builtin_data_dir)
    config.data.token_cache = True
    with needs.tmpfs(tmp_path / "cache", 2**20) as cache:
        config.data.token_cache_dir = str(cache)
        train.train_and_evaluate(config, tmp_path / "run")
        refused = [r.getMessage() for r in caplog.records
                   if "cannot write the token cache" in r.getMessage()]
        assert len(refused) == 1 and refused[0].startswith(f"{cache}/train-"), refused
        assert refused[0].endswith("(no space left on device); tokenizing on the fly")
        assert sorted(p.name for p in cache.iterdir() if not p.name.endswith(".lock")) == [
            next(p.name for p in cache.iterdir() if p.name.startswith("validation-"))]
    assert logged_losses(tmp_path / "run") == logged_losses(straight_run)
    assert os.listdir(tmp_path / "cache") == []  # unmounted
    assert workdirs.checkpoint_steps_on_disk(tmp_path / "run") == [10, 20]


# ----------------------------------------------------------------------------------------
# A write that stalls


def stalled_metrics(workdir):
    """metrics.jsonl made a named pipe that nobody reads, its buffer one page: the run's
    writes to it return until about 4 KiB of lines are in the pipe, and then hang (a write
    a signal can interrupt, as to a stalled file server). Returns the file descriptor that
    keeps the pipe open (and says how full it is)."""
    workdir.mkdir(parents=True)
    os.mkfifo(workdir / layout.METRICS)
    pipe = os.open(workdir / layout.METRICS, os.O_RDWR | os.O_NONBLOCK)
    fcntl.fcntl(pipe, fcntl.F_SETPIPE_SZ, 4096)
    return pipe


def wait_for_the_stall(process, pipe, quiet_s=1.0, timeout=600):
    """Returns once the pipe has held the same bytes for ``quiet_s`` while the run is alive
    (its writer blocked on the full pipe): the moment the stall began, by time.monotonic."""
    deadline, held, since = time.time() + timeout, -1, time.monotonic()
    while True:
        assert process.poll() is None, process.communicate()[0][-3000:]
        assert time.time() < deadline, "the metrics write never stalled"
        now_held = struct.unpack("i", fcntl.ioctl(pipe, termios.FIONREAD, b"\0" * 4))[0]
        if now_held != held:
            held, since = now_held, time.monotonic()
        elif held > 4096 - 1024 and time.monotonic() - since >= quiet_s:  # lines < 1 KiB
            return since
        time.sleep(0.02)


def stall_config(data_dir, **train_fields):
    # straight_run's run with a checkpoint every 2 steps: the stall (about step 11) comes
    # shortly after one; checkpoints change none of the losses.
    return tiny_config(data_dir, num_steps=20, log_every=1, checkpoint_every=2, **train_fields)


@pytest.mark.faults
@pytest.mark.parametrize("stop", ["timeout", "SIGTERM"])
def test_a_stalled_metrics_write_stops_the_run_in_one_line_and_loses_nothing(
        tmp_path, builtin_data_dir, straight_run, stop):
    # Stopped by train.write_timeout_s (5 s here), or, with its default of 120 s, by SIGTERM
    # sent a second into the stall, which must end the run within 60 s: the write is given
    # stalls.SIGNAL_GRACE_S (30 s) from the signal, as a healthy one would have finished.
    config = stall_config(builtin_data_dir, write_timeout_s=5.0 if stop == "timeout" else 120.0)
    workdir = tmp_path / "run"
    pipe = stalled_metrics(workdir)
    try:
        process = start(config, workdir)
        stalled_at = wait_for_the_stall(process, pipe)
        if stop == "SIGTERM":
            signalled = time.monotonic()
            process.send_signal(signal.SIGTERM)
        output = process.communicate(timeout=300)[0]
        ended = time.monotonic()
    finally:
        os.close(pipe)
    error = one_error_line(output, process.returncode)
    steps = assert_every_checkpoint_whole(workdir, config)
    assert steps and steps[-1] >= 2, steps
    what = f"the write of step \\d+'s metrics to {workdir / layout.METRICS} and "
    if stop == "timeout":
        assert re.fullmatch(f"error: {what}.* did not return within train.write_timeout_s=5 s "
                            r"\(a stalled disk or file server\?\): stopped; the last complete "
                            f"checkpoint is {steps[-1]}: run the same command again to resume "
                            "from it once the disk answers", error), error
        assert 5 <= ended - stalled_at < 5 + 30, ended - stalled_at
    else:
        assert re.fullmatch(f"error: SIGTERM received while {what}.* had not returned for "
                            r"\d+ s; waited 30 s more for it \(a stalled disk or file "
                            r"server\?\): stopped without a new "
                            f"checkpoint; the last complete checkpoint is {steps[-1]}: .*",
                            error), error
        assert 30 <= ended - signalled < 60, ended - signalled
    print(f"{stop}: stopped {ended - stalled_at:.1f} s after the stall began: {error}")
    # Once the disk answers (the pipe gone), the same command resumes to the same losses.
    (workdir / layout.METRICS).unlink()
    final = subprocess.run([sys.executable, "-m", "transformer_jax.main", *command_line(config),
                            f"--workdir={workdir}"], cwd=ROOT, capture_output=True, text=True,
                           timeout=600)
    assert final.returncode == 0, final.stderr[-3000:]
    logged = logged_losses(workdir)
    assert [step for step, _ in logged] == list(range(steps[-1] + 1, 21))
    assert logged == logged_losses(straight_run)[steps[-1]:]
