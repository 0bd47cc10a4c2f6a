"""What a config asks of an accelerator it has not met: its train step compiled for N
compile-only devices of a named kind (accelerators.py), its memory a device against the
device's, the largest ``data.tokens_per_batch`` that fits when it does not, FLOPs and the
time a step and a run at a stated MFU. ``python -m transformer_jax.plan`` prints it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

from transformer_jax.planning import accelerators, compiled
from transformer_jax.training import hardware, memory
from transformer_jax.training.spec import TrainingSpec

DEFAULT_MFU = 0.40  # a fair target for a well-fed Transformer step on one node
MAX_SEARCH_COMPILES = 4  # compiles the search for the largest fitting batch may add
GiB = 2 ** 30


@dataclasses.dataclass(frozen=True)
class Plan:
    target: accelerators.Target
    step: compiled.Step  # the step as configured
    fit: memory.Fit
    model_flops: float  # one optimizer step, all devices (params' count)
    peak_flops: float  # one device's data-sheet bf16 peak
    mfu: float
    num_steps: int
    grad_accum_steps: int
    largest: compiled.Step | None = None  # the largest micro-batch that fits, when searched
    search_compiles: int = 0

    @property
    def step_seconds(self) -> float:
        return self.model_flops / (self.target.count * self.peak_flops * self.mfu)

    @property
    def largest_tokens_per_batch(self) -> int | None:
        """data.tokens_per_batch of the largest fitting micro-batch, times the accumulation."""
        if self.largest is None:
            return None
        return self.largest.tokens * self.grad_accum_steps


def allocator_limit(target: accelerators.Target) -> int:
    """What XLA's allocator may hand out on one device of ``target``."""
    return memory.usable_bytes(target.memory_bytes, target.accelerator.platform)


def largest_fitting(spec: TrainingSpec, devices: list, step: compiled.Step,
                    budget: int, max_compiles: int = MAX_SEARCH_COMPILES,
                    compile_step: Callable[..., compiled.Step] = compiled.train_step,
                    ) -> tuple[compiled.Step | None, int]:
    """(the step of the most rows, a multiple of the devices, whose memory a device is
    within ``budget``, or None if not even one row a device fits; compiles made).

    Memory grows about linearly with the rows (the state is fixed, activations scale), so
    each guess is the line through the two nearest compiled points (the fixed state at 0
    rows to begin with); each compile then narrows the bracket, as bisection would."""
    unit = len(devices)
    fixed = step.memory.peak_bytes - step.memory.temporaries
    below: tuple[int, int] = (0, fixed)  # (rows, bytes) known to fit (0 rows: the state)
    above: tuple[int, int] = (step.rows, step.memory.peak_bytes)  # known not to fit
    best: compiled.Step | None = None
    compiles = 0
    while above[0] - below[0] > unit and compiles < max_compiles:
        slope = (above[1] - below[1]) / (above[0] - below[0])
        guess = below[0] + (budget - below[1]) / slope if slope > 0 else below[0] + unit
        rows = int(guess // unit * unit)
        rows = min(max(rows, below[0] + unit), above[0] - unit)
        trial = compile_step(spec, devices, rows=rows)
        compiles += 1
        logging.info("%d rows: %.2f GiB a device", rows, trial.memory.peak_bytes / GiB)
        if trial.memory.peak_bytes <= budget:
            below, best = (rows, trial.memory.peak_bytes), trial
        else:
            above = (rows, trial.memory.peak_bytes)
    return best, compiles


def plan(spec: TrainingSpec, target: accelerators.Target,
         mfu: float = DEFAULT_MFU) -> Plan:
    """Compiles ``spec``'s train step for ``target`` and plans the run."""
    devices = accelerators.devices_of(target)
    step = compiled.train_step(spec, devices)
    fit = memory.Fit(step.memory.peak_bytes, allocator_limit(target))
    accum = spec.optim.grad_accum_steps
    model_flops = compiled.model_flops(spec, step.tokens) * accum
    peak = hardware.known_peak(devices[0])
    if peak is None:
        raise ValueError(f"no data-sheet peak for {devices[0].device_kind} (hardware.py)")
    largest, compiles = None, 0
    if not fit.fits:
        largest, compiles = largest_fitting(spec, devices, step, fit.budget)
    return Plan(target, step, fit, model_flops, peak, mfu, spec.loop.num_steps, accum,
                largest, compiles)


def as_dict(p: Plan) -> dict:
    """The plan's figures (bytes, FLOPs, seconds) for ``plan --json``."""
    m = p.step.memory
    return {"devices": str(p.target), "device_bytes": p.target.memory_bytes,
            "allocator_limit_bytes": p.fit.limit, "budget_bytes": p.fit.budget,
            "peak_bytes": m.peak_bytes, "parameter_bytes": m.parameters,
            "optimizer_bytes": m.optimizer, "batch_bytes": m.batch,
            "temporary_bytes": m.temporaries, "fits": p.fit.fits, "rows": p.step.rows,
            "row_len": p.step.row_len, "grad_accum_steps": p.grad_accum_steps,
            "largest_tokens_per_batch": p.largest_tokens_per_batch,
            "search_compiles": p.search_compiles, "flops_per_step": p.model_flops,
            "matmul_flops_per_device": p.step.matmul_flops,
            "xla_flops_per_device": p.step.xla_flops, "mfu": p.mfu,
            "peak_flops_per_device": p.peak_flops, "step_seconds": p.step_seconds,
            "num_steps": p.num_steps, "compile_seconds": p.step.compile_seconds}


def _duration(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.0f} ms"
    if seconds < 3600:
        return f"{seconds:.1f} s" if seconds < 60 else f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h" if seconds < 48 * 3600 else f"{seconds / 86400:.1f} days"


def describe(p: Plan, spec: TrainingSpec) -> list[str]:
    """The plan as the lines ``python -m transformer_jax.plan`` prints."""
    s, a, t = p.step, p.target.accelerator, p.target
    limit = p.fit.limit
    lines = [
        f"devices: {t} ({a.description}, {t.memory_bytes / GiB:.1f} GiB; the allocator's "
        f"limit {limit / GiB:.1f} GiB, {p.fit.budget / GiB:.1f} GiB planned after "
        f"{memory.HEADROOM:.0%} headroom)",
        f"step: train.parallel={spec.loop.parallel}, model_parallel="
        f"{spec.loop.model_parallel}, {spec.model.dtype}; {s.rows} rows x {s.row_len} "
        f"slots = {s.tokens:,} tokens a side a micro-batch, {p.grad_accum_steps} "
        f"micro-batch(es) a step; compiled in {s.compile_seconds:.0f} s",
        f"memory: {memory.describe_memory(s.memory)}",
    ]
    if p.fit.fits:
        lines.append(f"fits: {s.memory.peak_bytes / GiB:.2f} of {p.fit.budget / GiB:.2f} GiB "
                     f"({s.memory.peak_bytes / p.fit.budget:.0%})")
    elif p.largest is not None:
        lines.append(f"does not fit: the largest micro-batch that fits is {p.largest.rows} "
                     f"rows ({p.largest.memory.peak_bytes / GiB:.2f} GiB a device, found in "
                     f"{p.search_compiles} compiles): --config.data.tokens_per_batch="
                     f"{p.largest_tokens_per_batch}, or raise optim.grad_accum_steps")
    else:
        lines.append(f"does not fit, not even {len(accelerators.devices_of(t))} rows "
                     f"(one a device; {p.search_compiles} compiles): more devices, "
                     "train.model_parallel, or a smaller model")
    per_step = s.num_devices * p.grad_accum_steps / 1e12
    lines += [
        f"FLOPs a step: {p.model_flops / 1e12:.2f} TFLOP (params' count; the compiled "
        f"program's matrix products: {s.matmul_flops * per_step:.2f}, all its instructions: "
        f"{s.xla_flops * per_step:.2f})",
        f"time at {p.mfu:.0%} MFU of {p.peak_flops / 1e12:.0f} TFLOP/s a device (bf16 data "
        f"sheet): {_duration(p.step_seconds)} a step, {_duration(p.step_seconds * p.num_steps)}"
        f" for train.num_steps={p.num_steps:,}",
    ]
    return lines
