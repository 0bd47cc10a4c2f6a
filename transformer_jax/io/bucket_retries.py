"""A bucket that fails requests for a while: retried by the storage clients, counted, reported;
a bucket that keeps failing ends the run in one line.

Two clients talk to a bucket, and each retries a failed request itself, with exponential
backoff, when the failure is one that passes (HTTP 408, 429, 5xx, a reset connection):

* gcsfs (every file but the checkpoints' arrays: etils.epath's ``gs://`` backend). Its retry
  is fixed: 6 attempts, waiting 1, 2, 4, 8 and 16 s plus up to 1 s of jitter between them, so
  a request that keeps failing is given up after 31 to 36 s (gcsfs 2026.10 has no setting for
  it). It logs each retry at DEBUG level on the ``gcsfs`` logger: :class:`RetryCounter`
  counts those records, by cause, and keeps them (and gcsfs's traceback when it gives up) off
  the console.
* TensorStore (orbax's checkpoint arrays). Its default is 32 retries of up to 32 s each, a
  quarter of an hour for a request that keeps failing; :func:`configure_tensorstore` gives it
  gcsfs's schedule (TENSORSTORE_RETRIES). It counts its retries in the metric
  ``/tensorstore/kvstore/gcs/retries``.

:func:`report` logs one line with the retries since the last report (the logs call it at
every checkpoint and at the end); :func:`failure` tells a storage failure that outlived the
retries from other errors, for the run's one-line stop.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import logging
import re
import sys
import threading
from collections.abc import Iterator

from transformer_jax.errors import UserError

# TensorStore's retries of a checkpoint array's request: gcsfs's schedule (5 retries after
# 1, 2, 4, 8, 16 s), so that a bucket that keeps failing stops a run within a minute or so
# of its first failed request, whichever client meets it.
TENSORSTORE_RETRIES = {"max_retries": 5, "initial_delay": "1s", "max_delay": "32s"}
TENSORSTORE_METRIC = "/tensorstore/kvstore/gcs/retries"

_RETRYING = "retrying after exception: "
_GAVE_UP = ("out of retries on exception: ", "non-retriable exception: ")


def cause(message: str) -> str:
    """The cause of a failed request, from the error's text: the HTTP status ("503"), "a
    reset connection", "a timeout" or "other"."""
    status = re.search(r", (\d{3})$", message.strip())
    if status:
        return status.group(1)
    lowered = message.lower()
    if any(s in lowered for s in ("connection reset", "payload is not completed",
                                  "server disconnected", "connection aborted")):
        return "a reset connection"
    if "timeout" in lowered or "timed out" in lowered:
        return "a timeout"
    return "other"


class RetryCounter(logging.Filter):
    """On the ``gcsfs`` logger: counts the retries gcsfs logs, by cause, and keeps its DEBUG
    records (each request and retry) and its tracebacks off the console."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()
        self.retries: collections.Counter[str] = collections.Counter()
        self.gave_up: str | None = None  # the last request gcsfs gave up, in words

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        with self.lock:
            if _RETRYING in message:
                self.retries[cause(message.split(_RETRYING, 1)[1])] += 1
                return False
            for text in _GAVE_UP:
                if text in message:
                    self.gave_up = message.split(text, 1)[1]
                    return False
        return record.levelno > logging.DEBUG

    def take(self) -> collections.Counter[str]:
        """The retries counted since the last call."""
        with self.lock:
            taken, self.retries = self.retries, collections.Counter()
        return taken


COUNTER = RetryCounter()
_tensorstore_seen = 0


def watch() -> None:
    """Starts counting gcsfs's retries (once per process); the retries not yet reported
    when the process ends are reported then."""
    logger = logging.getLogger("gcsfs")
    if COUNTER not in logger.filters:
        logger.addFilter(COUNTER)
        logger.setLevel(logging.DEBUG)
        atexit.register(report)


def configure_tensorstore() -> None:
    """Gives the TensorStore contexts orbax makes TENSORSTORE_RETRIES. orbax builds every
    context from two module-level templates and offers no setting for it; a later orbax that
    builds them otherwise is caught by tests/io/test_bucket_faults.py."""
    from orbax.checkpoint._src.serialization import tensorstore_utils

    for template in ("_BASE_TS_CONTEXT", "_DEFAULT_OCDBT_TS_CONTEXT"):
        getattr(tensorstore_utils, template)["gcs_request_retries"] = dict(TENSORSTORE_RETRIES)


def tensorstore_retries() -> int:
    """TensorStore's count of retried bucket requests in this process."""
    if "tensorstore" not in sys.modules:  # nothing went through it
        return 0
    import tensorstore as ts

    found = ts.experimental_collect_matching_metrics(TENSORSTORE_METRIC)
    return sum(int(v.get("value", 0)) for m in found for v in m.get("values", []))


def take() -> dict[str, int]:
    """The retries since the last call: {cause: n} of gcsfs's, and "TensorStore": n."""
    global _tensorstore_seen
    counted = dict(COUNTER.take())
    now = tensorstore_retries()
    if now > _tensorstore_seen:
        counted["TensorStore"] = now - _tensorstore_seen
    _tensorstore_seen = now
    return counted


def describe(counted: dict[str, int]) -> str:
    """{"503": 3, "a reset connection": 1, "TensorStore": 2} -> "503 x3, a reset connection
    x1 (gcsfs); 2 (TensorStore)"."""
    by_gcsfs = ", ".join(f"{c} x{n}" for c, n in sorted(counted.items()) if c != "TensorStore")
    parts = [f"{by_gcsfs} (gcsfs)"] if by_gcsfs else []
    if counted.get("TensorStore"):
        parts.append(f"{counted['TensorStore']} of checkpoint arrays (TensorStore)")
    return "; ".join(parts)


def report() -> int:
    """Logs one line of the bucket requests retried since the last report, if any; returns
    their number."""
    counted = take()
    total = sum(counted.values())
    if total:
        logging.warning("bucket: %d failed request(s) retried since the last report: %s",
                        total, describe(counted))
    return total


def failure(e: BaseException) -> str | None:
    """The storage failure in ``e`` (or the exceptions it came from) in words, when it is one
    that the clients retry and that outlived their retries (a bucket that keeps failing);
    None for any other error."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        text = " ".join(str(e).split())
        name = type(e).__name__
        if name == "HttpError" and cause(text) in ("408", "429", "500", "502", "503", "504"):
            return f"{name}: {text}"
        if type(e).__module__.startswith("aiohttp"):
            return f"{name}: {text}"
        if any(s in text for s in ("UNAVAILABLE", "RESOURCE_EXHAUSTED", "DEADLINE_EXCEEDED")):
            return f"{name}: {text}"
        e = e.__cause__ or e.__context__
    return None


@contextlib.contextmanager
def stop_when_failing(workdir: str, remote: bool) -> Iterator[None]:
    """Turns a storage failure that outlived the clients' retries (:func:`failure`) into a
    UserError of one line naming the workdir, when ``remote`` (a workdir in a bucket)."""
    try:
        yield
    except Exception as e:
        why = failure(e) if remote else None
        if why is None:
            raise
        report()
        raise UserError(f"the bucket of {workdir} keeps failing: {why[:300]} (given up after "
                        "the storage client's retries); the checkpoints written whole are "
                        "intact: run the same command once the bucket answers to resume from "
                        "the last") from e
