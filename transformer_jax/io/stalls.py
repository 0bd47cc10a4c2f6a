"""Writes that may stall: a checkpoint or a log write given at most ``train.write_timeout_s``.

A disk or file server that stops answering leaves a write blocked; the loop would wait for
it forever, and a stop signal would never be acted on. :func:`within` runs the write in a
thread of its own and waits for it in short slices: past the deadline, or as soon as a stop
signal has come, it raises WriteStalled naming what hung. The blocked thread cannot be
ended (a write in progress cannot be taken back), so the command ends the process at once
after its one line (cli.clean_errors); the checkpoints already complete are untouched.

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
NOW = object()  # within's ``earlier``: the signal received when the wait begins


def within(seconds: float, what: str, write: Callable[[], Any],
           interrupted: Callable[[], str | None] = lambda: None,
           earlier: str | None | object = NOW, grace: float = 0.0) -> Any:
    """``write()``'s result, or its exception; WriteStalled naming ``what`` when it has not
    returned after ``seconds``, or when ``interrupted()`` names a stop signal that came
    meanwhile: at once, or ``grace`` seconds after the signal where the write is what the
    signal asks for (the checkpoint of the run's last step), never past ``seconds``. One that
    came before does not count (its checkpoint is being written): ``earlier``, the signal
    received before the write began (None: none), or by default the one received when the
    wait begins."""
    outcome: dict[str, Any] = {}
    if earlier is NOW:
        earlier = interrupted()

    def run() -> None:
        try:
            outcome["result"] = write()
        except BaseException as e:  # noqa: BLE001 -- handed to the waiting thread
            outcome["error"] = e

    thread = threading.Thread(target=run, name=f"write {what}"[:60], daemon=True)
    start = time.monotonic()
    thread.start()
    signalled: float | None = None  # when a signal that counts was first seen
    while True:
        thread.join(POLL_S)
        if not thread.is_alive():
            break
        now = time.monotonic()
        waited = now - start
        signal_name = interrupted()
        if signal_name and not earlier:
            signalled = now if signalled is None else signalled
            if now - signalled >= grace:
                more = f"; waited {grace:g} s more for it" if grace else ""
                raise WriteStalled(f"{signal_name} received while {what} had not returned for "
                                   f"{signalled - start:.0f} s{more} (a stalled disk or file "
                                   "server?): stopped without a new checkpoint")
        if waited >= seconds:
            raise WriteStalled(f"{what} did not return within train.write_timeout_s="
                               f"{seconds:g} s (a stalled disk or file server?): stopped")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("result")
