"""Surviving faults: stop signals, non-finite steps, and a workdir checked before training.

* :class:`StopSignals` -- SIGTERM (a scheduler's preemption notice; SLURM sends it 120 s
  before the end with ``--signal=TERM@120``) or SIGINT (Ctrl-C) asks the loop to save a
  checkpoint at the next step boundary and stop. A second signal gets the default action at
  once (SIGTERM ends the process, SIGINT raises KeyboardInterrupt): the checkpoint then being
  written is abandoned, and orbax's write-then-rename leaves the earlier ones whole.
* :class:`NonFiniteSteps` -- the train step leaves the state unchanged when its loss,
  gradients or results are not finite (``step.train_step``); this counts those steps and
  stops the run as diverged after ``train.max_nonfinite_in_a_row`` in a row when
  ``train.nonfinite`` is "stop" (the way every run that stops itself stops: stops.py).
* :func:`check_workdir` -- an unwritable workdir, or one whose file system cannot hold the
  checkpoints the run will keep, is refused in one line before anything is trained.
* :func:`storage_faults` -- a write that fails for want of space (DiskFull) or hangs
  (WriteStalled) in the middle of a run stops it in one line naming the path and the last
  complete checkpoint, which the same command resumes from once there is room.

Checkpoint integrity (checksums, non-finite values, falling back from a corrupt checkpoint)
lives in checkpoints.py.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

from transformer_jax.errors import DiskFull, UserError, WriteStalled
from transformer_jax.io import storage, workdirs
from transformer_jax.io.storage import human_bytes
from transformer_jax.training.stops import DIVERGED, Stop

# Room kept free beyond the checkpoints: logs, TensorBoard events, vocabulary, evaluation files.
FREE_SPACE_MARGIN_BYTES = 256 * 2**20
FREE_SPACE_MARGIN_FRACTION = 0.1  # checkpoint files carry metadata beyond the raw arrays


# ----------------------------------------------------------------------------------------
# Preemption


class StopSignals:
    """While entered, SIGTERM and SIGINT set :attr:`received` instead of ending the process.

    The loop polls :meth:`stop_requested` once per step. In a multi-process run JAX's
    preemption service catches SIGTERM on any host and names a step all processes reach
    (``multihost_utils.reached_preemption_sync_point``), so every process saves the same
    step; no handler is installed there. Outside the main thread (where Python cannot
    install signal handlers) the signals keep their default action.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self, multiprocess: bool = False):
        self.multiprocess = multiprocess
        self.received: str | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        if not self.multiprocess and threading.current_thread() is threading.main_thread():
            for signum in self.SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        self._restore()

    def _restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.received is not None:  # the second signal: its default action, now
            self._restore()
            signal.raise_signal(signum)
            return
        self.received = signal.Signals(signum).name
        logging.warning("%s received: training stops with a checkpoint at the end of this step "
                        "(a second signal stops at once, without it)", self.received)

    def stop_requested(self, step: int) -> bool:
        """Whether to save and stop after micro-step ``step`` (called once per step)."""
        if self.multiprocess:
            from jax.experimental import multihost_utils

            return multihost_utils.reached_preemption_sync_point(step)
        return self.received is not None


# ----------------------------------------------------------------------------------------
# Non-finite steps


class NonFiniteSteps:
    """Counts the steps the train step skipped for a non-finite loss, gradient or result.

    ``policy`` is "skip" (skip them all) or "stop" (:meth:`stop` gives a Stop once
    ``max_in_a_row`` steps in a row were skipped). ``total`` and ``in_a_row`` are saved with
    every checkpoint, so a resumed run goes on counting.
    """

    def __init__(self, policy: str, max_in_a_row: int, total: int = 0, in_a_row: int = 0):
        self.policy = policy
        self.max_in_a_row = max_in_a_row
        self.total = total
        self.in_a_row = in_a_row
        self.tripped: tuple[int, int] | None = None  # (step, steps in a row) that stop the run

    def update(self, first_step: int, skipped: list[bool]) -> None:
        """Takes the skipped flags of consecutive steps ``first_step, first_step + 1, ...``."""
        for step, bad in enumerate(skipped, start=first_step):
            if not bad:
                self.in_a_row = 0
                continue
            self.total += 1
            self.in_a_row += 1
            logging.warning("step %d: non-finite loss or gradient, step skipped (%d in a row, %d "
                            "in this run)", step, self.in_a_row, self.total)
            if (self.policy == "stop" and self.in_a_row >= self.max_in_a_row
                    and self.tripped is None):
                self.tripped = (step, self.in_a_row)

    def stop(self, step: int) -> Stop | None:
        """The Stop of a run at optimizer ``step`` once ``max_in_a_row`` steps in a row were
        skipped (with policy "stop"), else None."""
        if self.tripped is None:
            return None
        last, n = self.tripped
        return Stop(DIVERGED, step, (
            f"diverged at step {step} ({n} steps in a row, {last - n + 1} to {last}, had a "
            f"non-finite loss or gradient; train.max_nonfinite_in_a_row={self.max_in_a_row})"))

    def state(self) -> dict[str, int]:
        return {"nonfinite_steps": self.total, "nonfinite_in_a_row": self.in_a_row}


# ----------------------------------------------------------------------------------------
# The workdir


def check_workdir(workdir: storage.PathLike, checkpoint_bytes: int, keep: int) -> None:
    """Refuses, in one line, a workdir that cannot be written or cannot hold the checkpoints.

    A run keeps ``keep`` checkpoints of about ``checkpoint_bytes`` each and writes the next
    before removing the oldest, so the file system needs ``keep + 1`` of them (less those
    already there) plus a margin. A bucket has no free-space figure: only writing is
    checked there (and a missing bucket, credentials or permission named).
    """
    workdir = storage.check(workdir)
    free = storage.free_bytes(workdir)
    if free is None:
        return
    to_write = keep + 1 - min(len(workdirs.checkpoint_steps_on_disk(workdir)), keep)
    needed = int(to_write * checkpoint_bytes * (1 + FREE_SPACE_MARGIN_FRACTION)
                 + FREE_SPACE_MARGIN_BYTES)
    if free < needed:
        raise UserError(
            f"workdir {workdir}: {human_bytes(free)} free, but {to_write} more checkpoint(s) "
            f"of {human_bytes(checkpoint_bytes)} (parameters and optimizer state; "
            f"train.keep_checkpoints={keep}, plus the one being written) and a margin need "
            f"{human_bytes(needed)}; free some space, lower train.keep_checkpoints or choose "
            "another --workdir")


# ----------------------------------------------------------------------------------------
# Storage that fails in the middle of a run


STORAGE_FAULTS = (DiskFull, WriteStalled)


@contextlib.contextmanager
def storage_faults(workdir: storage.PathLike) -> Iterator[None]:
    """Adds to a DiskFull or WriteStalled raised within the step of the last complete
    checkpoint in ``workdir`` and how to resume from it (same type, one line)."""
    try:
        yield
    except STORAGE_FAULTS as e:
        steps = workdirs.checkpoint_steps_on_disk(workdir)
        last = (f"the last complete checkpoint is {steps[-1]}: run the same command again "
                "to resume from it" if steps else "no checkpoint was written yet: run the "
                "same command again to start afresh")
        more = ("once there is room" if isinstance(e, DiskFull) else
                "once the bucket answers" if storage.is_remote(workdir) else
                "once the disk answers")
        raise type(e)(f"{e}; {last} {more}") from None


@contextlib.contextmanager
def storage_faults_after(first: BaseException) -> Iterator[None]:
    """After ``first``, a DiskFull or WriteStalled (the same disk refusing again while the
    run closes) is logged in one line rather than raised: ``first`` is what stopped it."""
    if not isinstance(first, STORAGE_FAULTS):
        yield
        return
    try:
        yield
    except STORAGE_FAULTS as e:
        logging.warning("while stopping: %s", e)
