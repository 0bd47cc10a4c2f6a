"""A bucket that fails requests (tests/flaky_proxy.py in front of the local Google Cloud
Storage): transient failures are retried, counted and reported, training loses nothing; a
bucket that keeps failing stops the run in one line, and the same command resumes it."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from transformer_jax.io import bucket_retries, workdirs

from .. import gcs_emulator
from ..flaky_proxy import FAILURES, Proxy
from ..helpers import ROOT, command_line, tiny_config

# What gcsfs and TensorStore said when the proxy failed their requests (2026-12-06).
GCSFS_503 = "injected by the test proxy, 503"
GCSFS_RESET = ("Response payload is not completed: <ContentLengthError: 400, message='Not "
               "enough data to satisfy content length header (received 0 of 1000 bytes).'>. "
               "ConnectionResetError(104, 'Connection reset by peer')")


@pytest.mark.parametrize("message, cause", [
    (GCSFS_503, "503"), ("injected by the test proxy, 429", "429"),
    (GCSFS_RESET, "a reset connection"), ("Server disconnected", "a reset connection"),
    ("Bad Request: b/x/o", "other")])
def test_the_cause_of_a_failed_request_is_read_from_the_clients_words(message, cause):
    assert bucket_retries.cause(message) == cause


def test_orbax_gives_tensorstore_the_retries_of_gcsfs():
    # orbax offers no setting: a later orbax that builds its contexts otherwise fails here.
    import tensorstore as ts
    from orbax.checkpoint._src.serialization import tensorstore_utils

    from transformer_jax.io import checkpoints  # noqa: F401 -- configures it when imported

    # TensorStore's own: 32 retries, up to 32 s apart (a quarter of an hour).
    assert ts.Context()["gcs_request_retries"].to_json(include_defaults=True) == {
        "max_retries": 32, "initial_delay": "1s", "max_delay": "32s"}
    for ocdbt in (True, False):
        context = tensorstore_utils.get_ts_context(use_ocdbt=ocdbt)
        assert context["gcs_request_retries"].to_json(include_defaults=True) == {
            "max_retries": 5, "initial_delay": "1s", "max_delay": "32s"}


@pytest.fixture
def proxy(gcs_server):
    started = []

    def start(**schedule):
        started.append(Proxy(gcs_server.url, **schedule))
        return started[-1]

    yield start
    for p in started:
        p.stop()


def main_command(config, workdir, proxy):
    """(the training command's arguments, its environment): its storage clients sent
    through ``proxy``."""
    env = {**os.environ, **gcs_emulator.environment(proxy.port), "PYTHONPATH": str(ROOT)}
    return [sys.executable, "-m", "transformer_jax.main", *command_line(config),
            f"--workdir={workdir}"], env


def run_main(config, workdir, proxy, timeout=600):
    """The training command run through ``proxy``: (exit status, stderr, seconds)."""
    args, env = main_command(config, workdir, proxy)
    start = time.monotonic()
    out = subprocess.run(args, capture_output=True, text=True, env=env, cwd=ROOT,
                         timeout=timeout)
    return out.returncode, out.stderr, time.monotonic() - start


def start_main(config, workdir, proxy):
    """The training command started through ``proxy``, its stderr piped."""
    args, env = main_command(config, workdir, proxy)
    return subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def reported_retries(stderr):
    """The sum of the run's "bucket: N failed request(s) retried" lines."""
    return sum(int(n) for n in re.findall(r"bucket: (\d+) failed request\(s\) retried", stderr))


def losses(workdir):
    """Each step's last logged train loss (a resumed run logs some steps twice)."""
    return {r["step"]: r["loss"] for r in workdirs.read_metric_records(workdir)
            if r["split"] == "train"}


@pytest.mark.faults
def test_a_gcsfs_request_that_fails_for_a_while_is_retried_and_counted(gcs_server, proxy):
    import gcsfs

    bucket = gcs_server.create_bucket(f"retried-{os.getpid()}")
    flaky = proxy(every=2, kinds=("503", "429"))
    fs = gcsfs.GCSFileSystem(endpoint_url=flaky.url, token="anon", skip_instance_cache=True)
    bucket_retries.take()
    for i in range(3):
        fs.pipe_file(f"{bucket}/x.txt", f"text {i}".encode())
        assert fs.cat_file(f"{bucket}/x.txt") == f"text {i}".encode()
    counted = bucket_retries.take()
    # Six calls: the first answered, then every second request failed (requests 2, 4, 6, 8,
    # 10), each retried once (after 1-2 s) and then answered (3, 5, 7, 9, 11).
    assert flaky.requests == 11 and flaky.failed() == 5
    assert sum(counted.values()) == 5, counted
    assert set(counted) <= {"503", "429"}


# In a process of its own, as a run's: a file written as etils.epath writes (gcsfs's resumable
# upload, from a memoryview of its buffer), one written whole (a multipart upload) and one
# read, then the garbage collector; prints the retries counted.
RESET_CLIENT = """
import gc, json, sys
import gcsfs
from transformer_jax.io import bucket_retries
bucket_retries.watch()
fs = gcsfs.GCSFileSystem(endpoint_url=sys.argv[1], token="anon", skip_instance_cache=True)
with fs.open(sys.argv[2] + "/written.txt", "wb") as f:
    f.write(b"w" * 1000)
fs.pipe_file(sys.argv[2] + "/whole.txt", b"p" * 1000)
read = fs.cat_file(sys.argv[2] + "/written.txt")
gc.collect()
print(json.dumps({"retries": bucket_retries.take(), "read": read.decode()}))
"""


@pytest.mark.faults
def test_a_reset_connection_is_retried_counted_and_survived(gcs_server, proxy):
    bucket = gcs_server.create_bucket(f"reset-{os.getpid()}")
    # The first request of each: the upload of the written file's content, the whole file's
    # upload, the read (each reset, as the proxy resets an upload or another request).
    flaky = proxy(kinds=("reset",), fail_first=("upload_id=", "uploadType=multipart",
                                                 "alt=media"))
    out = subprocess.run([sys.executable, "-c", RESET_CLIENT, flaky.url, bucket],
                         capture_output=True, text=True, cwd=ROOT, timeout=300,
                         env={**os.environ, **gcs_emulator.environment(flaky.port)})
    assert out.returncode == 0, out.stderr[-3000:]  # -11: CPython's gh-111049 (docs/faults.md)
    said = json.loads(out.stdout.splitlines()[-1])
    assert said == {"retries": {"a reset connection": 3}, "read": "w" * 1000}, said
    assert flaky.failed() == 3 and flaky.counts["reset", "gcsfs"] == 3, flaky.counts


@pytest.mark.faults
def test_a_run_whose_bucket_fails_now_and_then_logs_the_losses_of_a_healthy_one(
        builtin_data_dir, bucket, proxy, straight_run):
    config = tiny_config(builtin_data_dir, num_steps=20, log_every=1)  # straight_run's
    # Every 25th request, and the first of each file a run writes: a 503, a 429, a reset
    # connection or a delay.
    flaky = proxy(seed=47, every=25, kinds=("503", "429", "reset", "delay"),
                  fail_first=("metrics.jsonl", "events.out.tfevents", "checkpoints%2F10%2F",
                              "config.json", "hold.json"))
    status, stderr, seconds = run_main(config, f"{bucket}/run", flaky)
    assert status == 0, stderr[-3000:]
    assert "Traceback" not in stderr
    assert losses(f"{bucket}/run") == losses(straight_run)  # bitwise, every step
    failed = flaky.failed()
    assert failed >= 5 and flaky.counts["delay", "gcsfs"] + flaky.counts["delay",
                                                                          "tensorstore"] > 0
    # Every failed request was retried, and the run's log says so: one line at each
    # checkpoint and one at the end. Their counts hold every 503 and 429 gcsfs was answered,
    # and never more than the proxy failed; TensorStore's and the resets may fall short of
    # the proxy's (curl re-sends a request whose connection closed before any answer without
    # telling TensorStore; 17, 18 and 19 of 19 logged in three runs of 2026-12-06).
    lines = [line for line in stderr.splitlines() if "bucket:" in line]
    reported, seen = reported_retries(stderr), flaky.counts["503", "gcsfs"] + flaky.counts[
        "429", "gcsfs"]
    assert seen <= reported <= failed, (
        [line.split("bucket: ", 1)[1] for line in lines], sorted(flaky.counts.items()))
    failed_paths = " ".join(p for _, _, p, kind in flaky.log if kind in FAILURES)
    for written in ("metrics.jsonl", "events.out.tfevents", "checkpoints%2F10%2F"):
        assert written in failed_paths
    assert workdirs.checkpoint_steps_on_disk(f"{bucket}/run") == [10, 20]
    print(f"{seconds:.0f} s, {flaky.requests} requests, failed: {dict(flaky.counts)}")


@pytest.mark.faults
def test_a_bucket_that_keeps_failing_stops_the_run_in_one_line_and_the_same_command_resumes(
        builtin_data_dir, bucket, proxy, straight_run):
    config = tiny_config(builtin_data_dir, num_steps=20, log_every=1)
    workdir = f"{bucket}/run"
    failing = proxy(seed=1)
    # Every request after the one that marks checkpoint 10 finished fails, until healed:
    # after the upload of its commit file's content (the request naming its upload, the one
    # before started it).
    failing.fail_after("name=run/checkpoints/10/commit_success.txt&upload_id=")
    status, stderr, _ = run_main(config, workdir, failing)
    stopped = time.monotonic()
    assert failing.failing_since is not None, stderr[-3000:]
    took = stopped - failing.failing_since
    assert status == 2, stderr[-3000:]
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in stderr, stderr[-3000:]
    assert errors[0].startswith(f"error: the bucket of {workdir} keeps failing: "), errors
    assert took < 300, took  # within 5 minutes of the bucket's first failed request
    # The checkpoint written before the bucket failed is whole; a later one is not listed.
    assert workdirs.checkpoint_steps_on_disk(workdir) == [10]

    failing.heal()
    status, stderr, _ = run_main(config, workdir, failing)
    assert status == 0, stderr[-3000:]
    assert "resuming from step 10" in stderr
    assert losses(workdir) == losses(straight_run)
    assert workdirs.checkpoint_steps_on_disk(workdir) == [10, 20]
    print(f"stopped {took:.0f} s after the bucket began failing; {dict(failing.counts)}; "
          f"{errors[0]}")


# ----------------------------------------------------------------------------------------
# A checkpoint write that stalls

# TensorStore's uploads of checkpoint 20's arrays (the OCDBT data files and manifest): the
# object's name URL-encoded in the query, as TensorStore writes it (gcsfs writes the other
# files of the checkpoint with the name as it is).
CHECKPOINT_20_ARRAYS = "name=run%2Fcheckpoints%2F20%2F"


def wait_for_the_wait(process, stalled, timeout=600):
    """Returns once checkpoint 20's arrays are held and the run's main thread has gone on
    past the start of the save (its upload of metrics.jsonl after the held request, which
    the save of a checkpoint in a bucket makes at once: Run._save's flush): it now waits for
    the checkpoint. The moment the first array was held, by time.monotonic."""
    deadline = time.time() + timeout
    while True:
        assert process.poll() is None, process.communicate()[0][-3000:]
        assert time.time() < deadline, "checkpoint 20's arrays were never written"
        with stalled.lock:
            held = [n for n, _, _, kind in stalled.log if kind == "hold"]
            flushed = held and any(n > held[0] and "name=run/metrics.jsonl&upload_id=" in p
                                   for n, _, p, _ in stalled.log)
        if flushed:
            return stalled.held_since
        time.sleep(0.02)


@pytest.mark.faults
@pytest.mark.parametrize("stop", ["timeout", "SIGTERM"])
def test_a_stalled_checkpoint_write_stops_the_run_in_one_line_and_the_same_command_resumes(
        builtin_data_dir, bucket, proxy, straight_run, stop):
    # The bucket stops answering TensorStore's uploads of checkpoint 20's arrays (the
    # requests are held open, unanswered, until the proxy is healed): orbax's asynchronous
    # write hangs. train.write_timeout_s (5 s here) ends the run; with its default of 120 s,
    # SIGTERM sent while the run waits for the write must end it within 60 s (30 s given to
    # the write, the checkpoint the signal asks for).
    config = tiny_config(builtin_data_dir, num_steps=20, log_every=1,  # straight_run's
                         write_timeout_s=5.0 if stop == "timeout" else 120.0)
    workdir = f"{bucket}/run"
    stalled = proxy(hold=(CHECKPOINT_20_ARRAYS,))
    process = start_main(config, workdir, stalled)
    try:
        held_since = wait_for_the_wait(process, stalled)
        if stop == "SIGTERM":
            signalled = time.monotonic()
            process.send_signal(signal.SIGTERM)
        stderr = process.communicate(timeout=300)[1]
    finally:
        if process.poll() is None:
            process.kill()
    ended = time.monotonic()
    assert process.returncode == 2, stderr[-3000:]
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert errors == [stderr.strip().splitlines()[-1]] and "Traceback" not in stderr, (
        stderr[-3000:])
    what = f"the write of checkpoint 20 to {workdir}/checkpoints"
    last = ("the last complete checkpoint is 10: run the same command again to resume from "
            "it once the bucket answers")
    if stop == "timeout":
        assert errors[0] == (f"error: {what} did not return within train.write_timeout_s=5 s "
                             f"(a stalled disk or file server?): stopped; {last}"), errors
        took = ended - held_since
        assert took < 5 + 30, took
    else:
        # The checkpoint in flight is the one the signal asks for: given
        # stalls.SIGNAL_GRACE_S (30 s) to finish, then the run stops without it.
        assert re.fullmatch(f"error: SIGTERM received while {re.escape(what)} had not returned "
                            r"for \d+ s; waited 30 s more for it \(a stalled disk or file "
                            rf"server\?\): stopped without a new checkpoint; {re.escape(last)}",
                            errors[0]), errors
        took = ended - signalled
        assert 30 <= took < 60, took
    held = stalled.counts["hold", "tensorstore"]
    assert held >= 1 and stalled.failed() == 0, stalled.counts
    assert workdirs.checkpoint_steps_on_disk(workdir) == [10]
    print(f"{stop}: stopped {took:.1f} s after the "
          f"{'signal' if stop == 'SIGTERM' else 'first held request'} ({held} held): "
          f"{errors[0]}")

    # Once the bucket answers, the same command resumes from 10 to the uninterrupted losses.
    stalled.heal()
    status, stderr, _ = run_main(config, workdir, stalled)
    assert status == 0, stderr[-3000:]
    assert "resuming from step 10" in stderr
    assert losses(workdir) == losses(straight_run)  # bitwise, every step
    assert workdirs.checkpoint_steps_on_disk(workdir) == [10, 20]


@pytest.mark.faults
def test_a_signal_during_a_slow_last_checkpoint_write_waits_for_it(builtin_data_dir, bucket,
                                                                    proxy, straight_run):
    # The run's last checkpoint is slow, not stalled: the bucket holds its arrays' uploads
    # for a few seconds after SIGTERM and then answers (TensorStore retries the request the
    # proxy let go). That checkpoint is the one the signal asks for: the run waits for it
    # (stalls.SIGNAL_GRACE_S, 30 s) and ends normally with it, every loss the
    # uninterrupted run's.
    config = tiny_config(builtin_data_dir, num_steps=20, log_every=1)  # straight_run's
    workdir = f"{bucket}/run"
    slow = proxy(hold=(CHECKPOINT_20_ARRAYS,))
    process = start_main(config, workdir, slow)
    try:
        wait_for_the_wait(process, slow)
        signalled = time.monotonic()
        process.send_signal(signal.SIGTERM)
        time.sleep(3)
        slow.heal()
        stderr = process.communicate(timeout=300)[1]
    finally:
        if process.poll() is None:
            process.kill()
    took = time.monotonic() - signalled
    assert process.returncode == 0, stderr[-3000:]
    assert "error:" not in stderr and "Traceback" not in stderr, stderr[-3000:]
    assert slow.counts["hold", "tensorstore"] >= 1, slow.counts
    assert 3 <= took < 30, took
    assert workdirs.checkpoint_steps_on_disk(workdir) == [10, 20]
    assert losses(workdir) == losses(straight_run)  # bitwise, every step
    print(f"ended {took:.1f} s after the signal, the bucket answering 3 s after it")
