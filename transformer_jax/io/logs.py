"""Metrics out of a run: a console line, TensorBoard event files and ``metrics.jsonl``.

``metrics.jsonl`` has one JSON object per logged step and split (``{"split": "train",
"step": 100, "loss": ...}``); a resumed run appends, so the last line for a step wins.
A run killed while writing may leave a partial last line: the next run ends it before
appending, and ``workdirs.read_metrics`` skips it. Only process 0 writes.

Both files are written in the loop's own thread, each record whole or not at all
(``storage.LineLog``): a full disk stops the run in one line (DiskFull) with both files
ending in a whole record, and a write that hangs is given ``train.write_timeout_s``
(``stalls.within``). TensorBoard's records are tensorboardX's (its summaries and record
framing) written by :class:`EventFile` rather than by its SummaryWriter, whose writer thread
dies on a full disk and leaves the next 10 records blocked in its queue for good.
"""

from __future__ import annotations

import json
import logging
import socket
import struct
import sys
import time
from collections.abc import Callable
from typing import Any

from transformer_jax.io import bucket_retries, layout, metric_keys, stalls, storage


def _import_tensorboardx() -> tuple[Any, Any, Any]:
    """tensorboardX's summaries, event protos and record framing, imported without PyTorch:
    its package imports torch whenever it is installed (for Optuna's GP sampler, say), only
    to accept torch tensors, which nothing here passes; that import was 3 of the 7
    CPU-seconds every training process spent importing (2026-12-03). An import of torch
    after it works as ever."""
    hidden = "torch" not in sys.modules
    if hidden:
        sys.modules["torch"] = None  # type: ignore[assignment]  # `import torch` fails
    try:
        from tensorboardX import record_writer, summary
        from tensorboardX.proto import event_pb2
    finally:
        if hidden:
            del sys.modules["torch"]
    return summary, event_pb2, record_writer


summary, event_pb2, record_writer = _import_tensorboardx()


class EventFile:
    """A TensorBoard event file in ``directory`` (local or a bucket), written through
    :class:`storage.LineLog`: TFRecord framing of tensorboardX's Event protos, each call's
    records appended whole."""

    def __init__(self, directory: storage.PathLike):
        folder = storage.path(directory)
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}"
        self._log = storage.LineLog(self.path, binary=True)
        self.add(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2"))

    def add(self, *events: Any) -> None:
        data = []
        for event in events:
            body = event.SerializeToString()
            header = struct.pack("<Q", len(body))
            data += [header, struct.pack("<I", record_writer.masked_crc32c(header)), body,
                     struct.pack("<I", record_writer.masked_crc32c(body))]
        self._log.write(b"".join(data))

    def scalars(self, step: int | None, values: dict[str, float]) -> None:
        now = time.time()
        self.add(*(event_pb2.Event(wall_time=now, step=step, summary=summary.scalar(tag, value))
                   for tag, value in values.items()))

    def flush(self, force: bool = False) -> None:
        self._log.flush(force)

    def close(self) -> None:
        self._log.close()


_SHORT = {"learning_rate": "lr", "perplexity": "ppl", "tokens_per_s": "tok/s",
          "grad_norm": "|g|", "padding_fraction": "pad", "steps_per_s": "steps/s"}


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        if value != 0 and (abs(value) < 1e-2 or abs(value) >= 1e5):
            return f"{value:.3g}"
        return f"{value:.3f}"
    return str(value)


class MetricWriter:
    """Writes scalars to the console, TensorBoard (``<workdir>/tb``) and metrics.jsonl.

    Each write is given ``timeout_s`` seconds (``stalls.within``; ``interrupted`` names a
    stop signal that came meanwhile); after one that stalled nothing more is written, and
    :meth:`close` leaves the files to the process's end."""

    def __init__(self, workdir: storage.PathLike, enabled: bool = True,
                 timeout_s: float = float("inf")):
        self.enabled = enabled
        self.workdir = storage.path(workdir)
        self.timeout_s = timeout_s
        self.interrupted: Callable[[], str | None] = lambda: None
        self._stalled = False
        self._tb = EventFile(self.workdir / layout.TENSORBOARD) if enabled else None
        self._jsonl = storage.LineLog(self.workdir / layout.METRICS) if enabled else None

    def _within(self, what: str, write: Callable[[], Any]) -> None:
        if self._stalled:
            return
        try:
            stalls.within(self.timeout_s, what, write, self.interrupted)
        except stalls.WriteStalled:
            self._stalled = True
            raise

    def write(self, split: str, step: int, scalars: dict[str, Any]) -> None:
        if not self.enabled:
            return
        numbers = {k: v for k, v in scalars.items() if isinstance(v, int | float)}
        record = {metric_keys.SPLIT: split, metric_keys.STEP: step, **numbers}

        def write() -> None:
            self._jsonl.write(json.dumps(record) + "\n")
            self._jsonl.flush()
            self._tb.scalars(step, {f"{split}/{k}": v for k, v in numbers.items()})
            self._tb.flush()

        self._within(f"the write of step {step}'s metrics to {self._jsonl.path} and "
                     f"{self._tb.path}", write)
        shown = " | ".join(f"{_SHORT.get(k, k)} {_fmt(v)}" for k, v in numbers.items()
                           if k not in ("source_tokens_per_s", "skipped_long_pairs", "tokens"))
        logging.info("%-5s step %d | %s", split, step, shown)

    def hparams(self, values: dict[str, Any], metrics: dict[str, float], step: int) -> None:
        """The run's hyperparameters and final metrics for TensorBoard's HParams dashboard
        (``<workdir>/tb/hparams``), so that ``tensorboard --logdir=SWEEP_ROOT`` compares the
        points of a sweep. Values that are not numbers, strings or booleans are written as
        text; metrics are named ``hparams/NAME`` to stay apart from the logged scalars."""
        if not self.enabled:
            return
        values = {k: v if isinstance(v, bool | int | float | str) else str(v)
                  for k, v in values.items()}
        metrics = {f"hparams/{k}": float(v) for k, v in metrics.items()
                   if isinstance(v, int | float) and not isinstance(v, bool)}

        def write() -> None:
            events = EventFile(self.workdir / layout.TENSORBOARD / "hparams")
            events.add(*(event_pb2.Event(wall_time=time.time(), summary=s)
                         for s in summary.hparams(values, metrics)))
            events.scalars(step, metrics)
            events.close()

        self._within(f"the write of the hparams record to {self.workdir / layout.TENSORBOARD}",
                     write)

    def sample(self, source: str, reference: str, hypothesis: str) -> None:
        if self.enabled:
            print(f"  source:    {source}\n  reference: {reference}\n  output:    {hypothesis}\n",
                  file=sys.stdout, flush=True)

    def flush(self) -> None:
        """Writes out what a bucket's logs hold back (local files are written through)."""
        if self.enabled:
            self._within(f"the flush of {self._jsonl.path}", lambda: (
                self._tb.flush(force=True), self._jsonl.flush(force=True)))
            bucket_retries.report()  # at every checkpoint: the bucket's retried requests

    def close(self) -> None:
        if self.enabled and not self._stalled:
            self._within(f"the close of {self._jsonl.path}", lambda: (
                self._tb.close(), self._jsonl.close()))
