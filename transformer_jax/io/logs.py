"""Metrics out of a run: a console line, TensorBoard event files and ``metrics.jsonl``.

``metrics.jsonl`` has one JSON object per logged step and split (``{"split": "train",
"step": 100, "loss": ...}``); a resumed run appends, so the last line for a step wins.
A run killed while writing may leave a partial last line: the next run ends it before
appending, and ``workdirs.read_metrics`` skips it. Only process 0 writes.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import Any

from transformer_jax.io import layout, metric_keys, storage


def _import_tensorboardx() -> tuple[Any, Any]:
    """tensorboardX's SummaryWriter and record_writer, imported without PyTorch: its writer
    module imports torch whenever it is installed (for Optuna's GP sampler, say), only to accept
    torch tensors, which nothing here passes; that import was 3 of the 7 CPU-seconds every
    training process spent importing (2026-12-03). An import of torch after it works as ever."""
    hidden = "torch" not in sys.modules
    if hidden:
        sys.modules["torch"] = None  # type: ignore[assignment]  # `import torch` fails
    try:
        from tensorboardX import SummaryWriter, record_writer
    finally:
        if hidden:
            del sys.modules["torch"]
    return SummaryWriter, record_writer


SummaryWriter, record_writer = _import_tensorboardx()

_SHORT = {"learning_rate": "lr", "perplexity": "ppl", "tokens_per_s": "tok/s",
          "grad_norm": "|g|", "padding_fraction": "pad", "steps_per_s": "steps/s"}


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        if value != 0 and (abs(value) < 1e-2 or abs(value) >= 1e5):
            return f"{value:.3g}"
        return f"{value:.3f}"
    return str(value)


class _BucketEvents:
    """TensorBoard event records written to a bucket through :class:`storage.LineLog`
    (tensorboardX's own bucket writers need other clients and credentials)."""

    def __init__(self, path: str):
        self._log = storage.LineLog(path, binary=True)

    def write(self, data: bytes) -> None:
        self._log.write(data)

    def flush(self) -> None:
        self._log.flush()

    def close(self) -> None:
        self._log.close()

    @staticmethod
    def open(path: str) -> _BucketEvents:
        return _BucketEvents(path)

    @staticmethod
    def directory_check(path: str) -> None:
        storage.path(path).mkdir(parents=True, exist_ok=True)


for _scheme in storage.REMOTE_SCHEMES:
    record_writer.register_writer_factory(_scheme.removesuffix("://"), _BucketEvents)


class MetricWriter:
    """Writes scalars to the console, TensorBoard (``<workdir>/tb``) and metrics.jsonl."""

    def __init__(self, workdir: storage.PathLike, enabled: bool = True):
        self.enabled = enabled
        self.workdir = storage.path(workdir)
        self._tb = SummaryWriter(os.fspath(self.workdir / layout.TENSORBOARD)) if enabled else None
        self._jsonl = storage.LineLog(self.workdir / layout.METRICS) if enabled else None

    def write(self, split: str, step: int, scalars: dict[str, Any]) -> None:
        if not self.enabled:
            return
        numbers = {k: v for k, v in scalars.items() if isinstance(v, int | float)}
        for key, value in numbers.items():
            self._tb.add_scalar(f"{split}/{key}", value, step)
        self._tb.flush()
        record = {metric_keys.SPLIT: split, metric_keys.STEP: step, **numbers}
        self._jsonl.write(json.dumps(record) + "\n")
        self._jsonl.flush()
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
        self._tb.add_hparams(values, metrics, name="hparams", global_step=step)
        self._tb.flush()

    def sample(self, source: str, reference: str, hypothesis: str) -> None:
        if self.enabled:
            print(f"  source:    {source}\n  reference: {reference}\n  output:    {hypothesis}\n",
                  file=sys.stdout, flush=True)

    def flush(self) -> None:
        """Writes out what a bucket's logs hold back (local files are flushed at each
        write)."""
        if self.enabled:
            self._tb.flush()
            self._jsonl.flush(force=True)

    def close(self) -> None:
        if self.enabled:
            self._tb.close()
            self._jsonl.close()
