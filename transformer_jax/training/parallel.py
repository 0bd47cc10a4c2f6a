"""Running the train step on many devices: ``pmap`` replicas or ``jit`` over a device mesh.

Two executors with one interface (``place``, ``train``, ``evaluate``, ``restore_template``):

* :class:`PmapExecutor` -- one replica of the train state per local device; the batch is
  split along its rows and gradients are averaged with ``lax.pmean`` inside the step.
* :class:`ShardedExecutor` -- ``jax.jit`` over a ``Mesh`` with axes ("data", "model"). The
  batch is split over "data"; with ``model_parallel > 1`` the attention heads and the
  feed-forward width are split over "model" (parameters and Adam moments alike). The step
  is written for the global batch and XLA inserts the collectives, so there is no
  per-device loss to average (and no chance of averaging already-summed gradients).

Both give the single-device result on the same global batch (tests/test_parallel.py).
Multi-host runs call :func:`initialize_distributed` first; each process then feeds the rows
of the global batch that belong to its devices.
"""

from __future__ import annotations

import functools
import logging
import os
import re
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

AXIS = "batch"  # the pmap axis name
DATA, MODEL = "data", "model"  # mesh axes


def initialize_distributed(coordinator_address: str = "", num_processes: int = 0,
                           process_id: int = -1) -> None:
    """Joins a multi-process run: from the arguments when given, otherwise from the
    environment (SLURM, Open MPI, Cloud TPU, or JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES /
    JAX_PROCESS_ID). Does nothing for a single process."""
    coordinator_address = coordinator_address or os.environ.get("JAX_COORDINATOR_ADDRESS", "")
    num_processes = num_processes or int(os.environ.get("JAX_NUM_PROCESSES", "0"))
    if process_id < 0:
        process_id = int(os.environ.get("JAX_PROCESS_ID", "-1"))
    managed = any(k in os.environ for k in ("SLURM_JOB_ID", "OMPI_COMM_WORLD_SIZE",
                                             "TPU_WORKER_HOSTNAMES", "CLOUD_TPU_TASK_ID"))
    if not coordinator_address and not managed:
        return
    # Collectives between CPU devices of different processes (GPUs and TPUs use their own).
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    if coordinator_address:
        jax.distributed.initialize(coordinator_address, num_processes, process_id)
    else:
        jax.distributed.initialize()
    logging.info("process %d of %d, %d local / %d global devices", jax.process_index(),
                 jax.process_count(), jax.local_device_count(), jax.device_count())


def local_devices(count: int = 0) -> list[jax.Device]:
    """The first ``count`` local devices (all of them when count is 0)."""
    devices = jax.local_devices()
    if count > len(devices):
        raise ValueError(f"train.devices={count} but only {len(devices)} local devices exist")
    return devices[:count] if count else devices


def shard(batch: dict[str, np.ndarray], num_devices: int) -> dict[str, np.ndarray]:
    """[rows, ...] -> [num_devices, rows / num_devices, ...]."""

    def split(x: np.ndarray) -> np.ndarray:
        if x.shape[0] % num_devices:
            raise ValueError(f"batch of {x.shape[0]} rows does not split over "
                             f"{num_devices} devices")
        return x.reshape(num_devices, x.shape[0] // num_devices, *x.shape[1:])

    return {k: split(v) for k, v in batch.items()}


def unreplicate(tree: Any) -> Any:
    """The first replica of every leaf, as host numpy arrays."""
    return jax.tree.map(lambda x: np.asarray(x[0]), tree)


def collectives(axis_name: str | None) -> tuple[Callable, Callable, int, Any]:
    """(sum over devices, mean over devices, device count, device index) for a step run
    inside ``pmap`` over ``axis_name``; identities when the step sees the global batch (jit
    over a mesh, ``axis_name`` None)."""
    if axis_name is None:
        return (lambda x: x), (lambda x: x), 1, 0
    return (functools.partial(jax.lax.psum, axis_name=axis_name),
            functools.partial(jax.lax.pmean, axis_name=axis_name),
            jax.lax.psum(1, axis_name), jax.lax.axis_index(axis_name))


def _to_host(tree: Any) -> dict[str, float]:
    return {k: float(np.asarray(v)) for k, v in tree.items()}


class PmapExecutor:
    """Data parallelism with ``jax.pmap`` over this process's devices (all processes' in a
    multi-host run). ``train_fn(state, batch, key, axis_name=...)`` and
    ``eval_fn(params, batch, axis_name=...)`` are the per-device steps."""

    kind = "pmap"

    def __init__(self, train_fn: Callable, eval_fn: Callable,
                 devices: Sequence[jax.Device] | None = None):
        self.devices = list(devices) if devices else jax.local_devices()
        pmap_devices = None if jax.process_count() > 1 else self.devices
        self.num_local = len(self.devices)
        self._train = jax.pmap(functools.partial(train_fn, axis_name=AXIS), axis_name=AXIS,
                               devices=pmap_devices, donate_argnums=(0,), in_axes=(0, 0, None))
        self._eval = jax.pmap(functools.partial(eval_fn, axis_name=AXIS), axis_name=AXIS,
                              devices=pmap_devices)

    def place(self, state: Any) -> Any:
        """One copy of the state per local device, stacked on a new leading axis."""
        n = self.num_local
        if jax.process_count() > 1:  # pmap places host arrays itself across processes
            return jax.tree.map(lambda x: np.broadcast_to(np.asarray(x), (n, *np.shape(x))),
                                state)
        sharding = NamedSharding(Mesh(np.asarray(self.devices), (AXIS,)), P(AXIS))
        return jax.tree.map(
            lambda x: jax.device_put(np.broadcast_to(np.asarray(x), (n, *np.shape(x))),
                                     sharding), state)

    def restore_template(self, state: Any) -> Any:
        return state

    def host_state(self, placed: Any) -> Any:
        """What a checkpoint stores: one replica, on the host."""
        return unreplicate(placed)

    def params(self, placed: Any) -> Any:
        return unreplicate(placed.params)

    def train(self, placed: Any, batch: dict[str, np.ndarray],
              key: jax.Array) -> tuple[Any, dict[str, jax.Array]]:
        return self._train(placed, shard(batch, self.num_local), key)

    def fetch(self, metrics: dict[str, jax.Array]) -> dict[str, float]:
        return _to_host({k: np.asarray(v)[0] for k, v in metrics.items()})

    def evaluate(self, placed: Any, batch: dict[str, np.ndarray]) -> dict[str, float]:
        return self.fetch(self._eval(placed.params, shard(batch, self.num_local)))


# ----------------------------------------------------------------------------------------
# jit over a mesh

# Which parameter axes are split over "model", by the end of the parameter's path. Heads
# are whole on each device because the fused projections are head-major
# ([d_model, heads, widths], model.Projection).
MODEL_PARALLEL_RULES: tuple[tuple[str, P], ...] = (
    (r"(qkv|query|key_value)/kernel$", P(None, MODEL, None)),
    (r"(qkv|query|key_value)/bias$", P(MODEL, None)),
    (r"attention/out/kernel$", P(MODEL, None)),
    (r"ffn/w1/kernel$", P(None, MODEL)),
    (r"ffn/w1/bias$", P(MODEL)),
    (r"ffn/w2/kernel$", P(MODEL, None)),
)


def make_mesh(model_parallel: int = 1, devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A ("data", "model") mesh over all global devices (or ``devices``)."""
    devices = list(devices) if devices else jax.devices()
    if len(devices) % model_parallel:
        raise ValueError(f"train.model_parallel={model_parallel} does not divide the "
                         f"{len(devices)} devices")
    grid = np.asarray(devices).reshape(len(devices) // model_parallel, model_parallel)
    return Mesh(grid, (DATA, MODEL))


def _path_string(path: tuple) -> str:
    return "/".join(str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k))))
                    for k in path)


def param_spec(path: str, shape: tuple[int, ...], model_parallel: int) -> P:
    """The partition spec of one parameter (or Adam moment) at ``path``."""
    if model_parallel > 1:
        for pattern, spec in MODEL_PARALLEL_RULES:
            if re.search(pattern, path) and len(spec) == len(shape):
                axis = list(spec).index(MODEL)
                if shape[axis] % model_parallel == 0:
                    return spec
    return P()


def state_shardings(abstract_state: Any, mesh: Mesh) -> Any:
    """NamedShardings for every leaf of a train state (params and optimizer moments)."""
    model_parallel = mesh.shape[MODEL]
    return jax.tree_util.tree_map_with_path(
        lambda path, x: NamedSharding(mesh, param_spec(_path_string(path), np.shape(x),
                                                       model_parallel)), abstract_state)


class ShardedExecutor:
    """``jax.jit`` of the global-batch step over a ("data", "model") mesh."""

    kind = "sharded"

    def __init__(self, train_fn: Callable, eval_fn: Callable, mesh: Mesh, abstract_state: Any):
        self.mesh = mesh
        self.state_sharding = state_shardings(abstract_state, mesh)
        self.batch_sharding = NamedSharding(mesh, P(DATA))
        replicated = NamedSharding(mesh, P())
        self._train = jax.jit(functools.partial(train_fn, axis_name=None),
                              in_shardings=(self.state_sharding, self.batch_sharding,
                                            replicated),
                              out_shardings=(self.state_sharding, replicated),
                              donate_argnums=(0,))
        self._eval = jax.jit(functools.partial(eval_fn, axis_name=None),
                             in_shardings=(self.state_sharding.params, self.batch_sharding),
                             out_shardings=replicated)

    def place(self, state: Any) -> Any:
        def put(x: Any, sharding: NamedSharding) -> jax.Array:
            if isinstance(x, jax.Array) and x.sharding == sharding:
                return x
            host = np.asarray(x)  # every process holds the whole (identically seeded) value
            return jax.make_array_from_callback(host.shape, sharding, lambda i: host[i])

        return jax.tree.map(put, state, self.state_sharding)

    def restore_template(self, state: Any) -> Any:
        # jnp.result_type: the step counter is a Python int until placed (then int32).
        return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(np.shape(x), jnp.result_type(x),
                                                              sharding=s),
                            state, self.state_sharding)

    def host_state(self, placed: Any) -> Any:
        return placed  # orbax writes sharded arrays, each process its own shards

    def params(self, placed: Any) -> Any:
        return jax.tree.map(lambda x: np.asarray(jax.device_get(x)), placed.params)

    def _global(self, batch: dict[str, np.ndarray]) -> dict[str, jax.Array]:
        return {k: jax.make_array_from_process_local_data(self.batch_sharding, v)
                for k, v in batch.items()}

    def train(self, placed: Any, batch: dict[str, np.ndarray],
              key: jax.Array) -> tuple[Any, dict[str, jax.Array]]:
        return self._train(placed, self._global(batch), key)

    def fetch(self, metrics: dict[str, jax.Array]) -> dict[str, float]:
        return _to_host(metrics)

    def evaluate(self, placed: Any, batch: dict[str, np.ndarray]) -> dict[str, float]:
        return self.fetch(self._eval(placed.params, self._global(batch)))
