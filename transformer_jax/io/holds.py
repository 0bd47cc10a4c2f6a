"""The hold: one training run per workdir. While a run trains, ``<workdir>/hold.json``
names its host, process id and start, with a heartbeat rewritten every HEARTBEAT_S seconds
(:class:`Hold`); a second training run on the workdir stops at once, naming the holder. A
hold whose run is gone (its process no longer exists on this host, or, from another host,
its heartbeat is over STALE_AFTER_S old) is taken over with a warning. ``evaluate``,
``translate`` and ``visualize`` only read and take no hold."""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import os
import socket
import threading
import time
from typing import Any

from transformer_jax.errors import UserError
from transformer_jax.io import layout, storage, strict_json
from transformer_jax.io.workdirs import now

HEARTBEAT_S = 30.0  # how often the holder refreshes its heartbeat
# A hold from another host whose heartbeat is older than this is stale: its run is gone
# (ten missed heartbeats leave room for a slow shared file system).
STALE_AFTER_S = 300.0


def read_hold(workdir: str | os.PathLike) -> dict[str, Any] | None:
    """The hold on ``workdir``: {"host", "pid", "since", "heartbeat"} (times as ISO 8601
    strings with their UTC offset), or None when no training run holds it.

    The hold may be stale (its run gone without removing it): see :func:`hold_is_live`.
    """
    path = storage.path(workdir) / layout.HOLD
    try:
        hold = strict_json.read(path)
    except strict_json.Damaged as e:  # no run writes it so: no run holds the workdir with it
        strict_json.warn(f"{e}; taken as no hold")
        return None
    if hold is None:
        return None
    pid = hold.get("pid")
    if not (isinstance(hold.get("host"), str) and isinstance(pid, int)
            and not isinstance(pid, bool) and pid >= 0 and isinstance(hold.get("since"), str)
            and isinstance(hold.get("heartbeat"), str)):
        # Not what a run writes: a damaged file, which no run holds the workdir with.
        strict_json.warn(f"{path} is damaged ({str(hold)[:80]}); taken as no hold")
        return None
    return hold


def hold_is_live(hold: dict[str, Any], now: float | None = None) -> bool:
    """Whether the run that wrote ``hold`` (from :func:`read_hold`) may still be running.

    On this host: its process exists. On another host: its heartbeat is less than
    ``STALE_AFTER_S`` seconds older than ``now`` (Unix time; default the clock). A hold that
    is not live is stale, and the next training run takes it over.
    """
    if hold.get("host") == socket.gethostname():
        return _process_exists(hold.get("pid"))
    try:
        heartbeat = datetime.datetime.fromisoformat(hold["heartbeat"]).timestamp()
    except (KeyError, TypeError, ValueError):
        return False
    return (time.time() if now is None else now) - heartbeat < STALE_AFTER_S


# The highest process id Linux gives (pid_max's ceiling, 2**22); a larger one is no process.
PID_MAX = 2**22


def _process_exists(pid: Any) -> bool:
    if not isinstance(pid, int) or isinstance(pid, bool) or not 0 < pid <= PID_MAX:
        return False
    try:
        os.kill(pid, 0)  # signal 0: the existence check, nothing is sent
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:  # another user's process
        return True
    return True


def describe_hold(hold: dict[str, Any]) -> str:
    """A hold in words: "process 4242 on host-a since 2026-12-01T05:00:00+00:00"."""
    return f"process {hold.get('pid')} on {hold.get('host')} since {hold.get('since')}"


class Hold:
    """While entered, this process holds ``workdir`` (``hold.json``); a second training run
    on it stops with :class:`UserError` naming the holder.

    A stale hold (:func:`hold_is_live`) is taken over, with a warning. A background thread
    rewrites the heartbeat every ``heartbeat_s`` seconds; leaving the context, normally or
    by an exception, stops it and removes the file. In a multi-process run only process 0
    holds the workdir (``enabled`` False elsewhere). Two runs started within the same
    instant can both miss each other's hold; the check is for runs started by hand or by a
    launcher, seconds or days apart.
    """

    def __init__(self, workdir: str | os.PathLike, enabled: bool = True,
                 heartbeat_s: float = HEARTBEAT_S):
        self.path = storage.path(workdir) / layout.HOLD
        self.enabled = enabled
        self.heartbeat_s = heartbeat_s
        self.mine = {"host": socket.gethostname(), "pid": os.getpid(), "since": now()}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Hold:
        if not self.enabled:
            return self
        workdir = self.path.parent
        workdir.mkdir(parents=True, exist_ok=True)
        held = read_hold(workdir)
        if held is not None:
            if hold_is_live(held):
                raise self._in_use(held)
            logging.warning("taking over %s from a run that is gone: %s, last heartbeat %s",
                            workdir, describe_hold(held), held.get("heartbeat"))
        # Two runs starting at once each write their own file; the read below tells which
        # one won.
        with contextlib.suppress(FileNotFoundError):
            self._write()
        held = read_hold(workdir)
        if held is None:
            raise UserError(f"{self.path}: written but not readable back; is {workdir} on a "
                            "working file system?")
        if not self._is_mine(held):
            raise self._in_use(held)
        self._thread = threading.Thread(target=self._beat, name="workdir-hold", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None
        if self._is_mine(read_hold(self.path.parent)):
            self.path.unlink(missing_ok=True)

    def _in_use(self, held: dict[str, Any]) -> UserError:
        return UserError(f"{self.path.parent} is in use by another training run: "
                         f"{describe_hold(held)} (heartbeat {held.get('heartbeat')}, "
                         f"{self.path}); wait for it to end or choose another --workdir")

    def _is_mine(self, held: dict[str, Any] | None) -> bool:
        return held is not None and all(held.get(k) == v for k, v in self.mine.items())

    def _write(self) -> None:
        storage.write_atomically(self.path, json.dumps({**self.mine, "heartbeat": now()}))

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            try:
                held = read_hold(self.path.parent)
                if held is not None and not self._is_mine(held):
                    # Taken over while this run's heartbeat was late: the other run now owns
                    # the file, and it is not rewritten. (A removed file is written again.)
                    logging.warning("%s is now held by %s; this run no longer refreshes it",
                                    self.path.parent, describe_hold(held))
                    return
                self._write()
            # A full or unreachable disk, a bucket failing beyond its client's retries (which
            # raises the client's own errors): retried at the next beat.
            except Exception as e:  # noqa: BLE001
                logging.warning("could not refresh %s: %s", self.path, " ".join(str(e).split()))
