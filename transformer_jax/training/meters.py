"""What the training loop measures besides the loss: the checkpoint clock, model FLOPs
utilisation, the metrics of a log window, and the profiler's trace."""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from transformer_jax.evaluation.perplexity import perplexity
from transformer_jax.io import layout, metric_keys, storage
from transformer_jax.model import counts
from transformer_jax.model.spec import TransformerConfig
from transformer_jax.training import hardware


class CheckpointClock:
    """Whether ``minutes`` of wall-clock time passed since the last checkpoint (or the
    start): train.checkpoint_every_minutes, the paper's 10-minute interval."""

    def __init__(self, minutes: float, clock: Callable[[], float] | None = None):
        self.seconds = minutes * 60.0
        self.clock = clock or time.monotonic
        self.last = self.clock()

    def due(self) -> bool:
        return self.clock() - self.last >= self.seconds

    def restart(self) -> None:
        self.last = self.clock()


class MfuMeter:
    """Model FLOPs utilisation: FLOPs of the target tokens processed per second over the
    peak of all devices (on a CPU, the machine's peak measured by a matmul probe).

    A probe taken while other work loads the machine reads low, and every MFU of the run
    would then read high (a whole run once logged more than 100%). So a measured peak is
    measured again (``reprobe``, a cheaper 2048^3 matmul) at log lines 1, 2, 4, 8, ... and
    whenever a figure exceeds 100%, and the best of all the probes is the peak. A figure
    still above 100% is not logged (None, with a warning): it is known to be wrong, and a
    figure clamped to 100% would look like a real one on a plot.
    """

    REPROBE_N = 2048

    def __init__(self, model_config: TransformerConfig, num_devices: int, row_len: int,
                 peak_flops: float = 0.0, probe: Callable[[], float] | None = None,
                 reprobe: Callable[[], float] | None = None):
        # Attention's FLOPs follow the rows trained on (row_len slots). peak_flops is
        # train.peak_flops: a device's, 0 to know or measure it.
        dtype = np.dtype(model_config.dtype).name
        self.flops_per_token = counts.train_flops_per_token(model_config, row_len)
        peak, self.source = hardware.peak_flops_per_device(peak_flops, dtype, probe)
        self.measured = hardware.is_measured(peak_flops)
        on_cpu = jax.devices()[0].platform == "cpu" and self.measured
        # Fake CPU devices share the machine's cores: its probe is the peak of them all.
        self.devices = 1 if on_cpu else num_devices
        self.peak = peak * self.devices
        self.reprobe = reprobe or functools.partial(
            hardware.measure_matmul, self.REPROBE_N, dtype, repeats=2)
        self.calls = 0

    def _probe_again(self) -> None:
        measured = self.reprobe() * self.devices
        if measured > self.peak:
            logging.info("peak FLOP/s for MFU raised by a new probe: %.1f -> %.1f GFLOP/s",
                         self.peak / 1e9, measured / 1e9)
            self.peak = measured

    def __call__(self, tokens_per_s: float) -> float | None:
        """MFU at ``tokens_per_s`` target tokens per second; None if above 1 (see above).
        Call it while no step runs: it may time a matmul."""
        self.calls += 1
        if self.measured and self.calls & (self.calls - 1) == 0:  # a power of two
            self._probe_again()
        mfu = self.flops_per_token * tokens_per_s / self.peak
        if mfu > 1.0 and self.measured:
            self._probe_again()
            mfu = self.flops_per_token * tokens_per_s / self.peak
        if mfu > 1.0:
            logging.warning("MFU %.0f%% is above 100%%: the peak (%.1f GFLOP/s, %s) is too "
                            "low; MFU left out of this log line", 100 * mfu, self.peak / 1e9,
                            self.source)
            return None
        return mfu


@dataclasses.dataclass
class LogWindow:
    """Step metrics accumulated between two log lines: ``pending`` on device (fetching
    them every step would stall the accelerator), ``fetched`` on the host."""

    step: int  # the last step before the window
    time: float = dataclasses.field(default_factory=time.time)
    pending: list = dataclasses.field(default_factory=list)
    fetched: list = dataclasses.field(default_factory=list)
    padding: list = dataclasses.field(default_factory=list)

    def fetch(self, executor: Any) -> tuple[int, list[bool]]:
        """Fetches the pending metrics; returns the first fetched step and whether each
        fetched step was skipped (non-finite)."""
        first = self.step + len(self.fetched) + 1
        new = [executor.fetch(m) for m in self.pending]
        self.fetched, self.pending = self.fetched + new, []
        return first, [m["nonfinite"] > 0 for m in new]

    def summarise(self, step: int, mfu: MfuMeter) -> dict:
        """The window's scalars (loss and perplexity over the steps that were not skipped,
        absent when all were; rates per second of optimizer steps and of the target and
        source tokens of all their micro-batches); starts the next window."""
        applied = [m for m in self.fetched if not m["nonfinite"]]
        total = {k: sum(m[k] for m in applied) for k in ("loss_sum", "nll_sum", "tokens",
                                                         "source_tokens")}
        elapsed = max(time.time() - self.time, 1e-9)
        tokens = max(total["tokens"], 1.0)
        scalars = {
            metric_keys.LEARNING_RATE: self.fetched[-1]["learning_rate"],
            metric_keys.TOKENS_PER_S: total["tokens"] / elapsed,
            metric_keys.SOURCE_TOKENS_PER_S: total["source_tokens"] / elapsed,
            metric_keys.STEPS_PER_S: (step - self.step) / elapsed,
            metric_keys.PADDING_FRACTION: float(np.mean(self.padding)),
        }
        utilisation = mfu(total["tokens"] / elapsed)  # may time a probe: after `elapsed`
        if utilisation is not None:
            scalars[metric_keys.MFU] = utilisation
        if applied:  # a window of skipped steps only has no loss to log
            scalars.update({metric_keys.LOSS: total["loss_sum"] / tokens,
                            metric_keys.PERPLEXITY: perplexity(total["nll_sum"], tokens),
                            metric_keys.GRAD_NORM: applied[-1]["grad_norm"]})
        self.step, self.time, self.fetched, self.padding = step, time.time(), [], []
        return scalars


class Profile:
    """Writes a JAX profiler trace of steps [start, start + steps) into <workdir>/profile."""

    def __init__(self, workdir: storage.Path, start: int, steps: int, enabled: bool = True):
        self.directory = workdir / layout.PROFILE
        self.start, self.stop = start, start + steps
        self.enabled = enabled and steps > 0
        self.active = False

    def before(self, step: int) -> None:
        if self.enabled and step == self.start and not self.active:
            jax.profiler.start_trace(str(self.directory))
            self.active = True

    def after(self, step: int, metrics: Any) -> None:
        if self.active and step >= self.stop:
            jax.block_until_ready(metrics)
            jax.profiler.stop_trace()
            self.active = False
            logging.info("profiler trace of steps %d-%d written to %s", self.start, self.stop,
                         self.directory)

