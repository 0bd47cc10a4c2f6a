"""Writes that may stall: a checkpoint or a log write given at most ``train.write_timeout_s``.

A disk or file server that stops answering leaves a write blocked; the loop would wait for
it forever, and a stop signal would never be acted on. :func:`within` runs the write in a
thread of its own and waits for it in short slices: past the deadline, or
:data:`SIGNAL_GRACE_S` after a stop signal, it raises WriteStalled naming what hung. The
blocked thread cannot be ended (a write in progress cannot be taken back), so the command
ends the process at once after its one line (cli.clean_errors); the checkpoints already
complete are untouched.

A write blocked inside the kernel (a hard NFS mount) cannot be waited out by any of this:
the process cannot end until it returns.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from transformer_jax.errors import WriteStalled

POLL_S = 0.1  # how often a wait looks at the clock and for a stop signal
# How long a write may still take once a stop signal has come (or, for a wait that begins
# after it, from the wait's start): a healthy checkpoint or log write finishes well within
# it, and the run then stops with its checkpoint; schedulers allow a preempted job 30 s or
# more before SIGKILL. A write still running then is given up: the run stops without it.
SIGNAL_GRACE_S = 30.0


def within(seconds: float, what: str, write: Callable[[], Any],
           interrupted: Callable[[], str | None] = lambda: None,
           grace: float = SIGNAL_GRACE_S) -> Any:
    """``write()``'s result, or its exception; WriteStalled naming ``what`` when it has not
    returned after ``seconds``, or ``grace`` seconds after ``interrupted()`` first names a
    stop signal (counted from the wait's start for one received before it), whichever is
    sooner."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = write()
        except BaseException as e:  # noqa: BLE001 -- handed to the waiting thread
            outcome["error"] = e

    thread = threading.Thread(target=run, name=f"write {what}"[:60], daemon=True)
    start = time.monotonic()
    thread.start()
    signal_name = interrupted()
    signalled: float | None = start if signal_name else None  # when a signal was first seen
    while True:
        thread.join(POLL_S)
        if not thread.is_alive():
            break
        now = time.monotonic()
        if signalled is None:
            signal_name = interrupted()
            signalled = now if signal_name else None
        if signalled is not None and now - signalled >= grace and now - start < seconds:
            raise WriteStalled(f"{signal_name} received while {what} had not returned for "
                               f"{signalled - start:.0f} s; waited {grace:g} s more for it (a "
                               "stalled disk or file server?): stopped without a new "
                               "checkpoint")
        if now - start >= seconds:
            raise WriteStalled(f"{what} did not return within train.write_timeout_s="
                               f"{seconds:g} s (a stalled disk or file server?): stopped")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("result")
