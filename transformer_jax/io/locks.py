"""One process at a time: a lock on a file, on a local disk or in a bucket.

What is written once for many readers (a split's token cache, a TFDS dataset prepared here)
is written by the process that takes its lock; the others wait for the lock and then find
the file there. The lock of ``DIR/NAME`` is ``DIR/.NAME.lock`` (:func:`lock_path`).

* On a local disk it is ``fcntl.flock`` on that file. The kernel releases it when its holder
  exits, killed or not, so a lock is never left behind. The processes of one machine take
  turns, and those of several machines on a file system that supports flock (NFSv4).
* In a bucket (``gs://``) it is an object created only if there is none (the
  ``ifGenerationMatch=0`` precondition: of several processes creating it, one succeeds). Its
  holder rewrites it every ``heartbeat_s`` seconds and removes it when done. An object that
  stays unchanged for ``stale_s`` seconds, timed on the waiter's own clock (the machines'
  clocks need not agree), was left by a killed holder and is taken over, with one warning.
  Two waiters taking over the same stale lock in the same instant can both hold it: the
  callers write files of the same bytes published in one step (an upload or a rename), for
  which that is harmless.

A waiter says once what it waits for (the ``waiting`` callback, given who holds the lock)
and gives up after ``timeout_s``, so no process waits without a word or without end.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from transformer_jax.io import storage, strict_json

HEARTBEAT_S = 30.0  # how often a bucket lock's holder rewrites it
STALE_S = 180.0  # a bucket lock unchanged this long was left by a killed holder
POLL_S = 1.0  # how often a waiter tries again


def lock_path(target: storage.PathLike) -> storage.Path:
    """The lock file of ``target``: ``.NAME.lock`` beside it."""
    target = storage.path(target)
    return target.with_name(f".{target.name}.lock")


def _me() -> str:
    return f"{socket.gethostname()} pid {os.getpid()}"


class Lock:
    """An exclusive lock on the file ``target`` (which need not exist).

    ``with Lock(path):`` holds it for the block, waiting as long as it takes;
    :meth:`acquire` waits at most ``timeout_s`` and says what it waits for.
    """

    def __init__(self, target: storage.PathLike, *, heartbeat_s: float = HEARTBEAT_S,
                 stale_s: float = STALE_S):
        self.path = lock_path(target)
        self.remote = storage.is_remote(self.path)
        self.heartbeat_s, self.stale_s = heartbeat_s, stale_s
        self.held = False
        self._fd: int | None = None
        self._token = uuid.uuid4().hex
        self._seen: tuple[Any, float] | None = None  # a bucket lock's version, first seen at
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def acquire(self, timeout_s: float | None = None,
                waiting: Callable[[str], None] | None = None, poll_s: float = POLL_S) -> bool:
        """Takes the lock: True once it is held, False if ``timeout_s`` seconds passed first
        (None: no limit). If it must wait, ``waiting(holder)`` is called once, ``holder``
        naming the process that holds the lock ("host pid 123")."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        told = False
        while True:
            holder = self._try_remote() if self.remote else self._try_local()
            if holder is None:
                self.held = True
                return True
            if not told and waiting is not None:
                waiting(holder)
                told = True
            left = poll_s if deadline is None else deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(poll_s, left))

    def release(self) -> None:
        """Lets the next process take the lock (nothing if it is not held)."""
        if not self.held:
            return
        self.held = False
        if not self.remote:
            assert self._fd is not None
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._is_mine():
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()

    def __enter__(self) -> Lock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    # -- a local file ----------------------------------------------------------------------

    def _try_local(self) -> str | None:
        """None once the lock is taken; otherwise who holds it."""
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return os.pread(self._fd, 200, 0).decode(errors="replace").strip() or \
                "another process"
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, _me().encode(), 0)  # for the waiters' message
        return None

    # -- an object in a bucket -------------------------------------------------------------

    def _record(self) -> bytes:
        return json.dumps({"holder": _me(), "token": self._token,
                           "heartbeat": time.time()}).encode()

    def _read(self) -> dict[str, Any]:
        """The lock's record ({} when there is none; a damaged one is {}, with a warning:
        no holder this process could name, so it waits out ``stale_s``)."""
        try:
            return strict_json.read(self.path, missing={})
        except strict_json.Damaged as e:
            strict_json.warn(f"{e}; its holder unknown")
            return {}

    def _is_mine(self) -> bool:
        return self._read().get("token") == self._token

    def _try_remote(self) -> str | None:
        import fsspec

        fs, where = fsspec.core.url_to_fs(os.fspath(self.path))
        try:
            fs.pipe_file(where, self._record(), mode="create")
        except FileExistsError:
            try:
                version = fs.info(where).get("generation")
            except FileNotFoundError:  # released meanwhile: try again at once
                return self._try_remote()
            holder = str(self._read().get("holder") or "another process")
            now = time.monotonic()
            if self._seen is None or self._seen[0] != version:
                self._seen = (version, now)
            elif now - self._seen[1] > self.stale_s:
                logging.warning("%s: taking over a lock unchanged for %.0f s (its holder, %s, "
                                "is gone)", self.path, now - self._seen[1], holder)
                with contextlib.suppress(FileNotFoundError):
                    fs.rm_file(where)
                self._seen = None
                return self._try_remote()
            return holder
        self._stop.clear()
        self._thread = threading.Thread(target=self._beat, name="lock-heartbeat", daemon=True)
        self._thread.start()
        return None

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            if not self._is_mine():
                logging.warning("%s: the lock was taken over by another process", self.path)
                return
            self.path.write_bytes(self._record())
