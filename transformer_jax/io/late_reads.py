"""What a failed checkpoint read leaves behind, kept out of the way of its one-line refusal.

orbax reads a checkpoint's arrays with TensorStore from an asyncio loop of its own. When one
read fails (a file cut short), the restore raises at once and orbax closes that loop while
the other reads are still under way; as each finishes, TensorStore calls back into the
closed loop, and Python prints "RuntimeError: Event loop is closed" with a traceback for
every one of them (or asyncio logs "Task exception was never retrieved", or "Future
exception was never retrieved" for a read's future), after the refusal, sometimes as the
process exits; and a read left waiting on the closed loop, when the garbage collector
closes it, prints "Exception ignored in: <coroutine object
_read_array_index_and_device_put ...>" with two tracebacks. Nothing is lost in them: the
reads' results are no longer wanted. :func:`quiet` drops those messages, and only those.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

_CLOSED_LOOP = "Event loop is closed"
# The last also for a checkpoint write that failed (a full disk): its other writes' errors.
_NEVER_RETRIEVED = ("Task exception was never retrieved", "Future exception was never retrieved",
                    "_GatheringFuture exception was never retrieved")


def _is_late_callback(unraisable: Any) -> bool:
    e = unraisable.exc_value
    if isinstance(e, RuntimeError) and str(e) == _CLOSED_LOOP:
        return True
    code = getattr(unraisable.object, "cr_code", None)  # a read's coroutine, closed unfinished
    return code is not None and "orbax" in code.co_filename


class _NeverRetrieved(logging.Filter):
    """Drops asyncio's record of a checkpoint read's task or future whose error nobody
    awaited."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if not message.startswith(_NEVER_RETRIEVED):
            return True
        text = message + repr(record.exc_info[1] if record.exc_info else "")
        return not any(word in text for word in ("orbax", "tensorstore", "TensorStore",
                                                  "checkpoint"))


def quiet() -> None:
    """From now on in this process, the late callbacks of a failed read print nothing:
    ``sys.unraisablehook`` (whichever is installed now) passes on every other error, and
    the ``asyncio`` logger every other record. Called again, it does nothing more; called
    before checkpoints are read (``checkpoints.Checkpoints``), whatever read fails."""
    hook = sys.unraisablehook
    if not getattr(hook, "drops_late_reads", False):
        def drop(unraisable: Any) -> None:
            if not _is_late_callback(unraisable):
                hook(unraisable)

        drop.drops_late_reads = True  # type: ignore[attr-defined]
        sys.unraisablehook = drop
    logger = logging.getLogger("asyncio")
    if not any(isinstance(f, _NeverRetrieved) for f in logger.filters):
        logger.addFilter(_NeverRetrieved())
