"""Memory a device for a compiled train step, and whether it fits the device before the run's
first step (:func:`check_fits`, called by train.py on an accelerator).

Memory a device is XLA's buffer assignment (``memory_analysis``): arguments (the state and
the batch) + outputs - what outputs share with donated arguments + temporaries + code. The
planner (``transformer_jax/planning/``) reads the same figures from a step compiled for an
accelerator this machine lacks.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from transformer_jax.errors import UserError
from transformer_jax.model.losses import BATCH_FIELDS
from transformer_jax.training.spec import LoopSpec, TrainingSpec

# Memory a device's allocator may hand out that a compiled step may plan to use: XLA's
# buffer assignment on a compile-only GPU is made without autotuning (no device to time
# on), so a real GPU may pick other GEMM and fusion kernels whose workspaces differ, and the
# allocator fragments. Ten per cent of an 80 GB H100's allocator limit (~6 GB at JAX's
# default 75%) is several times the largest workspace cuBLAS or a Triton fusion asks for.
HEADROOM = 0.10
# JAX's GPU allocator takes this fraction of a GPU's memory unless
# XLA_PYTHON_CLIENT_MEM_FRACTION says otherwise (TPUs give XLA their whole HBM).
DEFAULT_GPU_MEM_FRACTION = 0.75


@dataclasses.dataclass(frozen=True)
class Memory:
    """Bytes a device for one compiled step (``memory_analysis``), the state's share of the
    arguments split into parameters and optimizer state."""

    arguments: int
    outputs: int
    aliased: int
    temporaries: int
    code: int
    parameters: int
    optimizer: int

    @property
    def peak_bytes(self) -> int:
        """Arguments + outputs not sharing a donated argument's buffer + temporaries + code."""
        return self.arguments + self.outputs - self.aliased + self.temporaries + self.code

    @property
    def batch(self) -> int:
        return max(self.arguments - self.parameters - self.optimizer, 0)


KEY = jax.ShapeDtypeStruct((), jax.random.key(0).dtype)


def lower_args(executor: Any, state: Any, rows: int, row_len: int,
                micro_batches: int = 1) -> tuple:
    """(state, batch, key) as the executor's jitted train function takes them: a batch of
    ``micro_batches`` stacked micro-batches of ``rows`` x ``row_len`` when above 1."""
    stack = (micro_batches,) if micro_batches > 1 else ()
    if executor.kind == "pmap":
        n = len(executor.devices)
        replicated = jax.tree.map(lambda x: jax.ShapeDtypeStruct((n, *x.shape), x.dtype), state)
        batch = {f: jax.ShapeDtypeStruct((n, *stack, rows // n, row_len), jnp.int32)
                 for f in BATCH_FIELDS}
        return replicated, batch, KEY
    batch = {f: jax.ShapeDtypeStruct((*stack, rows, row_len), jnp.int32) for f in BATCH_FIELDS}
    return state, batch, KEY


def _state_bytes(tree: Any, devices: int, model_parallel: int, kind: str) -> int:
    """Bytes of ``tree`` (abstract arrays) one device holds: whole under pmap and on a
    one-device model axis, the model-split leaves divided by ``model_parallel`` otherwise."""
    from transformer_jax.training import parallel

    total = 0
    for path, x in jax.tree_util.tree_flatten_with_path(tree)[0]:
        size = math.prod(x.shape) * np.dtype(x.dtype).itemsize
        if kind == "sharded" and model_parallel > 1:
            spec = parallel.param_spec(parallel._path_string(path), x.shape, model_parallel)
            if parallel.MODEL in jax.tree.leaves(tuple(spec)):
                size //= model_parallel
        total += size
    return total


def memory_of(compiled: Any, state: Any, loop: LoopSpec, num_devices: int) -> Memory:
    """:class:`Memory` of a compiled train step (parallel as ``loop`` says) whose state is
    ``state``."""
    m = compiled.memory_analysis()
    kind, mp = loop.parallel, loop.model_parallel
    return Memory(arguments=m.argument_size_in_bytes, outputs=m.output_size_in_bytes,
                  aliased=m.alias_size_in_bytes, temporaries=m.temp_size_in_bytes,
                  code=m.generated_code_size_in_bytes,
                  parameters=_state_bytes(state.params, num_devices, mp, kind),
                  optimizer=_state_bytes(state.opt_state, num_devices, mp, kind))


def usable_bytes(device_bytes: int, platform: str, mem_fraction: float | None = None) -> int:
    """What XLA's allocator may use of a device of ``device_bytes``: JAX's GPU allocator
    takes ``XLA_PYTHON_CLIENT_MEM_FRACTION`` (default 0.75) of a GPU; a TPU's XLA all of it."""
    if platform in ("cuda", "gpu", "rocm"):
        import os

        if mem_fraction is None:
            mem_fraction = float(os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION",
                                                DEFAULT_GPU_MEM_FRACTION))
        return int(device_bytes * mem_fraction)
    return device_bytes


@dataclasses.dataclass(frozen=True)
class Fit:
    """Whether a step needing ``need`` bytes a device fits an allocator limit of ``limit``
    with :data:`HEADROOM` left over."""

    need: int
    limit: int
    headroom: float = HEADROOM

    @property
    def budget(self) -> int:
        return int(self.limit * (1 - self.headroom))

    @property
    def fits(self) -> bool:
        return self.need <= self.budget


def describe_memory(memory: Memory) -> str:
    g = 2 ** 30
    return (f"{memory.peak_bytes / g:.2f} GiB a device (parameters {memory.parameters / g:.2f}, "
            f"optimizer state {memory.optimizer / g:.2f}, batch {memory.batch / g:.2f}, "
            f"temporaries {memory.temporaries / g:.2f})")


def check_fits(executor: Any, state: Any, spec: TrainingSpec, rows: int,
               row_len: int) -> Fit | None:
    """Before a run's first step: the executor's train step, compiled for the run's batch
    (``rows`` x ``row_len`` a micro-batch), against the device's allocator limit
    (``memory_stats()['bytes_limit']``). Raises a UserError naming both when the step does
    not fit with :data:`HEADROOM` left (:func:`decide`); returns the Fit, or None without
    compiling where the device reports no limit (a CPU). JAX keeps the executable, so the
    first step does not compile it again."""
    devices = (list(executor.devices) if executor.kind == "pmap"
               else list(executor.mesh.devices.flat))
    # Another process's devices cannot be asked (memory_stats needs an addressable device);
    # every device of a run is of one kind, so this process's first one answers for all.
    here = [d for d in devices if d.process_index == jax.process_index()]
    stats = here[0].memory_stats() if here else None
    if not stats or "bytes_limit" not in stats:
        return None
    if executor.kind == "pmap" and jax.process_count() > 1:
        # pmap over several processes is lowered from each process's own rows; the sharded
        # path (the one multi-host runs take) is checked.
        logging.info("memory check skipped: pmap over %d processes", jax.process_count())
        return None
    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(np.shape(x), jnp.result_type(x)),
                            state)
    step = executor._train.lower(*lower_args(executor, abstract, rows, row_len,
                                               spec.optim.grad_accum_steps)).compile()
    memory = memory_of(step, abstract, spec.loop, len(devices))
    fit = decide(memory, int(stats["bytes_limit"]), here[0].device_kind)
    logging.info("the compiled train step needs %s of %.2f GiB planned (%.0f%% of the "
                 "allocator's %.2f GiB)", describe_memory(memory), fit.budget / 2 ** 30,
                 100 * (1 - fit.headroom), fit.limit / 2 ** 30)
    return fit


def decide(memory: Memory, limit: int, device_kind: str) -> Fit:
    """The start-up decision of :func:`check_fits`, for a device whose allocator hands out
    ``limit`` bytes: a Fit, or a UserError in one line."""
    fit = Fit(memory.peak_bytes, limit)
    if not fit.fits:
        g = 2 ** 30
        raise UserError(
            f"the compiled train step needs {describe_memory(memory)}, more than "
            f"{fit.budget / g:.2f} GiB ({1 - HEADROOM:.0%} of the {limit / g:.2f} GiB "
            f"{device_kind}'s allocator limit); lower data.tokens_per_batch or raise "
            "optim.grad_accum_steps (python -m transformer_jax.plan finds what fits)")
    return fit


