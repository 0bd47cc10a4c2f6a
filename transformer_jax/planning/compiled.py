"""The train step as XLA compiles it for a device, and what that says before a step runs:
memory a device, matmul FLOPs, collectives, and whether it fits.

    step = compiled.train_step(spec, devices)          # compile-only devices, or real ones
    step.memory.peak_bytes, step.matmul_flops, step.all_reduced

The step is the executor's own (``step.executor_for``'s jitted train function) lowered on
abstract arrays (nothing is allocated) for the config's batch: ``data.tokens_per_batch`` over
rows of ``data.row_len`` (``data.max_len`` when the row length is chosen from the data)
slots a micro-batch, ``optim.grad_accum_steps`` micro-batches a step (one program, which
runs them in a loop: its FLOPs are the whole optimizer step's).

Memory a device is XLA's buffer assignment, read as the run's own check before its first step
reads it (:mod:`transformer_jax.training.memory`). FLOPs and collectives are read from the
compiled modules (:mod:`transformer_jax.planning.hlo`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

import jax

from transformer_jax.data import batching
from transformer_jax.model import counts
from transformer_jax.planning.hlo import all_reduced_elements, hlo_modules, matmul_flops, xla_flops
from transformer_jax.training import memory
from transformer_jax.training.spec import TrainingSpec
from transformer_jax.training.step import executor_for, initial_state


@dataclasses.dataclass(frozen=True)
class Step:
    """One compiled train step and its figures (all a device)."""

    compiled: Any
    memory: memory.Memory
    matmul_flops: float  # the module's matrix products, per device, all micro-batches
    xla_flops: float  # XLA's HLO cost analysis: every instruction
    all_reduced: int  # elements the module's all-reduces sum over devices
    rows: int  # global rows of a micro-batch
    row_len: int
    num_devices: int
    compile_seconds: float

    @property
    def tokens(self) -> int:
        """Token slots a side of one micro-batch, over all devices."""
        return self.rows * self.row_len


def row_len_of(spec: TrainingSpec) -> int:
    """The rows' slots without data at hand: ``data.row_len``, else ``data.max_len``."""
    return spec.data.rows.row_len or spec.data.rows.max_len


def abstract_state(spec: TrainingSpec) -> Any:
    """The train state of ``spec`` as ShapeDtypeStructs (nothing allocated)."""
    return jax.eval_shape(lambda: initial_state(spec.optim, spec.model, jax.random.key(0)))


def batch_rows(spec: TrainingSpec, num_devices: int, processes: int = 1) -> int:
    """Global rows of one micro-batch for ``spec`` on ``num_devices`` devices."""
    per_process = num_devices // processes
    shape = batching.batch_shape(spec.data.batch.tokens_per_batch, row_len_of(spec),
                                 spec.optim.grad_accum_steps, per_process, processes)
    return shape.rows


def lower_train_step(spec: TrainingSpec, devices: Sequence[jax.Device],
                     rows: int | None = None) -> tuple[Any, Any, int]:
    """(lowered train step, abstract state, rows) of ``spec`` on ``devices``."""
    processes = len({d.process_index for d in devices})
    rows = rows or batch_rows(spec, len(devices), processes)
    state = abstract_state(spec)
    executor = executor_for(spec.optim, spec.loop, spec.model, state, devices=devices)
    args = memory.lower_args(executor, state, rows, row_len_of(spec), spec.optim.grad_accum_steps)
    return executor._train.lower(*args), state, rows


def train_step(spec: TrainingSpec, devices: Sequence[jax.Device],
               rows: int | None = None, options: dict[str, Any] | None = None) -> Step:
    """Compiles ``spec``'s train step for ``devices`` and measures it."""
    import time

    start = time.perf_counter()
    lowered, state, rows = lower_train_step(spec, devices, rows)
    compiled = lowered.compile(options)
    seconds = time.perf_counter() - start
    modules = hlo_modules(compiled)
    used = memory.memory_of(compiled, state, spec.loop, len(devices))
    return Step(compiled=compiled, memory=used,
                matmul_flops=matmul_flops(modules), xla_flops=xla_flops(modules),
                all_reduced=all_reduced_elements(modules), rows=rows,
                row_len=row_len_of(spec), num_devices=len(devices),
                compile_seconds=seconds)


def model_flops(spec: TrainingSpec, tokens: int) -> float:
    """:mod:`transformer_jax.model.params`' training FLOPs for ``tokens`` target tokens
    (source as many), all devices together."""
    return float(counts.train_flops_per_token(spec.model, row_len_of(spec))) * tokens


def to_json(step: Step) -> str:
    m = step.memory
    return json.dumps({"peak_bytes": m.peak_bytes, "temporaries": m.temporaries,
                       "matmul_flops": step.matmul_flops, "rows": step.rows})
