"""The hold of the run training in a workdir: a second run refused while the first holds
it, stale holds taken over, the heartbeat."""

import datetime
import json
import logging
import os
import re
import socket
import subprocess
import sys
import time

import pytest

from transformer_jax.errors import UserError
from transformer_jax.io import holds, workdirs
from transformer_jax.training import train

from ..helpers import run_command, tiny_config


def _write(path, value):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(value if isinstance(value, str) else json.dumps(value))



def _hold(workdir, **fields):
    hold = {"host": socket.gethostname(), "pid": os.getpid(), "since": workdirs.now(),
            "heartbeat": workdirs.now(), **fields}
    _write(workdir / "hold.json", hold)
    return hold


def _ago(seconds):
    return (datetime.datetime.now().astimezone()
            - datetime.timedelta(seconds=seconds)).isoformat(timespec="seconds")


@pytest.fixture
def sleeper():
    """A live process of this host (not this one), ended after the test."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield child.pid
    child.kill()
    child.wait()


def test_a_second_run_is_refused_while_the_first_holds(tmp_path, sleeper):
    with holds.Hold(tmp_path) as first:
        held = holds.read_hold(tmp_path)
        assert held["pid"] == os.getpid() and held["host"] == socket.gethostname()
        assert holds.hold_is_live(held)
        with pytest.raises(UserError, match=rf"{tmp_path} is in use by another training run: "
                                            rf"process {os.getpid()} on .* since "
                                            rf"{re.escape(first.mine['since'])}"):
            holds.Hold(tmp_path).__enter__()
    # Another process of this host, through the training entry point: refused before the
    # vocabulary or config.json are written.
    hold = _hold(tmp_path, pid=sleeper)
    with pytest.raises(UserError, match=rf"process {sleeper} on {hold['host']} since "
                                        rf"{re.escape(hold['since'])}"):
        train.train_and_evaluate(tiny_config(tmp_path / "no-data"), tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hold.json"]
    assert holds.read_hold(tmp_path) == hold  # the holder's file is left alone


def test_a_held_workdir_is_one_line_from_the_command(tmp_path, sleeper):
    hold = _hold(tmp_path, pid=sleeper)
    run = run_command("main", "--config=configs/demo.py", f"--workdir={tmp_path}")
    assert run.returncode == 2
    assert run.stderr.strip().splitlines()[-1] == (
        f"error: {tmp_path} is in use by another training run: process {sleeper} on "
        f"{hold['host']} since {hold['since']} (heartbeat {hold['heartbeat']}, "
        f"{tmp_path / 'hold.json'}); wait for it to end or choose another --workdir")


def test_stale_holds_are_taken_over(tmp_path, caplog):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # reaped: its pid names no process
    elsewhere_old = {"host": "elsewhere", "pid": os.getpid(), "since": _ago(3600),
                     "heartbeat": _ago(holds.STALE_AFTER_S + 60)}
    elsewhere_fresh = {**elsewhere_old, "heartbeat": _ago(holds.STALE_AFTER_S - 60)}
    assert not holds.hold_is_live(elsewhere_old)
    assert holds.hold_is_live(elsewhere_fresh)  # another host: its pid means nothing here
    assert not holds.hold_is_live(elsewhere_fresh, now=time.time() + 120)
    for stale in ({"pid": gone.pid}, elsewhere_old):
        _hold(tmp_path, **stale)
        caplog.clear()
        with caplog.at_level(logging.WARNING), holds.Hold(tmp_path):
            assert holds.read_hold(tmp_path)["pid"] == os.getpid()
        assert f"taking over {tmp_path} from a run that is gone: process {stale['pid']}" in (
            caplog.text)
    _hold(tmp_path, **elsewhere_fresh)
    with pytest.raises(UserError, match="in use by another training run: process .* on "
                                        "elsewhere"):
        holds.Hold(tmp_path).__enter__()


def _eventually(predicate, timeout=10.0):
    """Whether ``predicate()`` became true within ``timeout`` seconds (a busy machine may
    delay the heartbeat thread)."""
    deadline = time.time() + timeout
    while not predicate():
        if time.time() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_the_hold_beats_and_is_released(tmp_path):
    with holds.Hold(tmp_path, heartbeat_s=0.05):
        old = _ago(3600)
        _write(tmp_path / "hold.json", {**holds.read_hold(tmp_path), "heartbeat": old})
        assert _eventually(lambda: holds.read_hold(tmp_path)["heartbeat"] != old)
        (tmp_path / "hold.json").unlink()  # removed by hand while the run goes on
        assert _eventually(lambda: (holds.read_hold(tmp_path) or {}).get("pid")
                           == os.getpid())
    assert not (tmp_path / "hold.json").exists()
    with pytest.raises(RuntimeError), holds.Hold(tmp_path):
        raise RuntimeError("the run failed")
    assert not (tmp_path / "hold.json").exists()
    # Taken over while holding (its heartbeat was late): the new holder's file stays.
    with holds.Hold(tmp_path, heartbeat_s=0.05) as hold:
        other = _hold(tmp_path, host="elsewhere")
        assert _eventually(lambda: not hold._thread.is_alive())  # stopped beating
    assert holds.read_hold(tmp_path) == other
    # Processes other than 0 of a multi-process run hold nothing.
    (tmp_path / "hold.json").unlink()
    with holds.Hold(tmp_path, enabled=False):
        assert holds.read_hold(tmp_path) is None
