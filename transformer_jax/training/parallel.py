"""Running the train step on many devices: ``pmap`` replicas or ``jit`` over a device mesh.

Two executors with one interface (``place``, ``train``, ``evaluate``, ``restore_template``):

* :class:`PmapExecutor` -- one replica of the train state per local device; the batch is
  split along its rows and gradients are summed with ``lax.psum`` inside the step.
* :class:`ShardedExecutor` (``train.parallel``'s default) -- ``jax.jit`` over a ``Mesh``
  with axes ("data", "model"). The batch is split over "data"; with ``model_parallel > 1``
  the attention heads and the feed-forward width are split over "model" (parameters and
  Adam moments alike). The step is written for the global batch and XLA inserts the
  collectives, so there is no per-device loss to average (and no chance of averaging
  already-summed gradients); a step of accumulated micro-batches is ``shard_map``-ped over
  "data" so that their gradients are summed over it once.

Both give the single-device result on the same global batch, and each other's with dropout
on (tests/training/test_parallel.py).
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

from transformer_jax.errors import ConfigError

AXIS = "batch"  # the pmap axis name
DATA, MODEL = "data", "model"  # mesh axes


def initialize_distributed(coordinator_address: str = "", num_processes: int = 0,
                           process_id: int = -1, heartbeat_timeout_s: int = 100) -> None:
    """Joins a multi-process run: from the arguments when given, otherwise from the
    environment (SLURM, Open MPI, Cloud TPU, or JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES /
    JAX_PROCESS_ID). Does nothing for a single process.

    A process that sends no heartbeat for ``heartbeat_timeout_s`` seconds (killed, its host
    down) is declared dead and the others are ended; they usually end sooner, when a
    collective with the dead process breaks.

    CLOUD_TPU_TASK_ID counts only as a number: libtpu, once loaded (by any JAX backend
    query in a process where it is installed, such as a sweep's), sets it to a warning text
    off a TPU VM, and every process that process starts inherits it.
    """
    coordinator_address = coordinator_address or os.environ.get("JAX_COORDINATOR_ADDRESS", "")
    num_processes = num_processes or int(os.environ.get("JAX_NUM_PROCESSES", "0"))
    if process_id < 0:
        process_id = int(os.environ.get("JAX_PROCESS_ID", "-1"))
    managed = (any(k in os.environ for k in ("SLURM_JOB_ID", "OMPI_COMM_WORLD_SIZE",
                                              "TPU_WORKER_HOSTNAMES"))
               or os.environ.get("CLOUD_TPU_TASK_ID", "").isdigit())
    if not coordinator_address and not managed:
        return
    # Collectives between CPU devices of different processes (GPUs and TPUs use their own).
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    if coordinator_address:
        jax.distributed.initialize(coordinator_address, num_processes, process_id,
                                   heartbeat_timeout_seconds=heartbeat_timeout_s)
    else:
        jax.distributed.initialize(heartbeat_timeout_seconds=heartbeat_timeout_s)
    logging.info("process %d of %d, %d local / %d global devices", jax.process_index(),
                 jax.process_count(), jax.local_device_count(), jax.device_count())
    if (jax.process_count() > 1 and jax.default_backend() == "cpu"
            and jax.config.jax_enable_compilation_cache):
        # Processes that load their programs from JAX's persistent compilation cache wait
        # forever at the first collective between CPU processes (measured with jax 0.12:
        # the same two-process run passes cold and hangs once the cache holds it).
        jax.config.update("jax_enable_compilation_cache", False)
        logging.info("JAX's persistent compilation cache is off for this run: programs "
                     "loaded from it hang in collectives between CPU processes")


def local_devices(count: int = 0) -> list[jax.Device]:
    """The first ``count`` local devices (all of them when count is 0)."""
    devices = jax.local_devices()
    if count > len(devices):
        raise ConfigError(f"train.devices={count} but this process has {len(devices)} "
                          f"{devices[0].platform} device(s); set at most {len(devices)}, or 0 "
                          "for all of them")
    return devices[:count] if count else devices


def shard(batch: dict[str, np.ndarray], num_devices: int,
          axis: int = 0) -> dict[str, np.ndarray]:
    """[rows, ...] -> [num_devices, rows / num_devices, ...]; with ``axis`` 1,
    [k, rows, ...] -> [num_devices, k, rows / num_devices, ...] (stacked micro-batches)."""

    def split(x: np.ndarray) -> np.ndarray:
        rows = x.shape[axis]
        if rows % num_devices:
            raise ValueError(f"batch of {rows} rows does not split over "
                             f"{num_devices} devices")
        x = x.reshape(*x.shape[:axis], num_devices, rows // num_devices, *x.shape[axis + 1:])
        return np.moveaxis(x, axis, 0)

    return {k: split(v) for k, v in batch.items()}


def unreplicate(tree: Any) -> Any:
    """The first replica of every leaf ([replicas, ...] -> [...]), as host numpy arrays.

    The replica is this process's first device's: in a multi-host run the first global
    replica is another process's, which this one cannot read (all replicas are equal).
    """

    def first(x: Any) -> np.ndarray:
        if isinstance(x, jax.Array):
            return np.asarray(x.addressable_data(0)).reshape(x.shape[1:])
        return np.asarray(x[0])

    return jax.tree.map(first, tree)


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
    ``eval_fn(params, batch, axis_name=...)`` are the per-device steps; with
    ``micro_batches`` > 1 the train step's batch is that many micro-batches stacked on a
    leading axis, each split over the devices."""

    kind = "pmap"

    def __init__(self, train_fn: Callable, eval_fn: Callable,
                 devices: Sequence[jax.Device] | None = None, micro_batches: int = 1):
        self.devices = list(devices) if devices else jax.local_devices()
        self.rows_axis = 1 if micro_batches > 1 else 0  # of the train step's batch
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
        return self._train(placed, shard(batch, self.num_local, self.rows_axis), key)

    def fetch(self, metrics: dict[str, jax.Array]) -> dict[str, float]:
        return _to_host(unreplicate(metrics))

    def evaluate(self, placed: Any, batch: dict[str, np.ndarray]) -> dict[str, float]:
        return self.fetch(self._eval(placed.params, shard(batch, self.num_local)))


# ----------------------------------------------------------------------------------------
# jit over a mesh

# Which parameter axes are split over "model", by the end of the parameter's path. Heads
# are whole on each device because the fused projections are head-major
# ([d_model, heads, widths], transformer.Projection).
MODEL_PARALLEL_RULES: tuple[tuple[str, P], ...] = (
    (r"(qkv|query|key_value)/kernel$", P(None, MODEL, None)),
    (r"(qkv|query|key_value)/bias$", P(MODEL, None)),
    (r"attention/out/kernel$", P(MODEL, None)),
    (r"ffn/w1/kernel$", P(None, MODEL)),
    (r"ffn/w1/bias$", P(MODEL)),
    (r"ffn/w2/kernel$", P(MODEL, None)),
)


def make_mesh(model_parallel: int = 1, devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A ("data", "model") mesh over all global devices (or ``devices``): each process's
    devices together, in JAX's order within a process. A model replica (a row of
    ``model_parallel`` consecutive devices) therefore stays within one process when
    ``model_parallel`` divides the local device count, and spans processes when it is
    larger (:func:`replica_processes`)."""
    devices = list(devices) if devices else jax.devices()
    if len(devices) % model_parallel:
        raise ValueError(f"train.model_parallel={model_parallel} does not divide the "
                         f"{len(devices)} devices")
    devices.sort(key=lambda d: d.process_index)  # stable: JAX's order within a process
    grid = np.asarray(devices).reshape(len(devices) // model_parallel, model_parallel)
    return Mesh(grid, (DATA, MODEL))


def replica_processes(mesh: Mesh) -> list[list[int]]:
    """The processes that hold each model replica's shards (one list per "data" index)."""
    return [sorted({d.process_index for d in row}) for row in mesh.devices]


def describe_mesh(mesh: Mesh) -> str:
    """One line for the log: the mesh's shape and where its model replicas live."""
    spans = replica_processes(mesh)
    processes = len({p for row in spans for p in row})
    across = [r for r in spans if len(r) > 1]
    where = (f"{len(across)} of {len(spans)} model replica(s) across processes (the first: "
             f"{', '.join(map(str, across[0]))})" if across else
             f"each of {len(spans)} model replica(s) within one process")
    return (f"mesh {mesh.shape[DATA]} data x {mesh.shape[MODEL]} model over {processes} "
            f"process(es): {where}")


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
    """``jax.jit`` of the global-batch step over a ("data", "model") mesh.

    Each process feeds its own rows of the global batch (the data pipeline gives process p
    the p-th block of rows). When no model replica spans processes, those rows are exactly
    the ones its devices hold. When replicas do span processes (``model_parallel`` above
    the local device count), processes share mesh rows, and each would have to feed rows it
    never read: the rows are then put down split over every device in process order, and
    one small program moves them to the "data" layout the step takes. (Fed as they were,
    each process's devices would hold another batch under one global name, and the
    "replicated" parameters would drift apart between processes.)

    With ``micro_batches`` > 1 the train step's batch is that many micro-batches stacked on
    a leading axis, each split over "data" (``train_batch_sharding``), and the step is
    ``jax.shard_map``-ped over "data" alone ("model" stays XLA's): each data shard sums its
    micro-batches' gradients in the step's loop and they are summed over "data" once, after
    it. Written for the global batch, XLA's partitioner all-reduced the gradients inside the
    loop, once a micro-batch (XLA's CPU compile of an 8-micro-batch step showed it there).
    """

    kind = "sharded"

    def __init__(self, train_fn: Callable, eval_fn: Callable, mesh: Mesh, abstract_state: Any,
                 micro_batches: int = 1):
        self.mesh = mesh
        logging.info("%s", describe_mesh(mesh))
        self.state_sharding = state_shardings(abstract_state, mesh)
        self.batch_sharding = NamedSharding(mesh, P(DATA))
        self.train_batch_sharding = (NamedSharding(mesh, P(None, DATA)) if micro_batches > 1
                                     else self.batch_sharding)
        replicated = NamedSharding(mesh, P())
        step = functools.partial(train_fn, axis_name=None)
        if micro_batches > 1:
            # Every data shard leaves with the same state and metrics (they follow summed
            # gradients and sums), which is what out_specs P() says and is not checked.
            step = jax.shard_map(functools.partial(train_fn, axis_name=DATA), mesh=mesh,
                                 in_specs=(P(), P(None, DATA), P()), out_specs=(P(), P()),
                                 axis_names={DATA}, check_vma=False)
        self._train = jax.jit(step,
                              in_shardings=(self.state_sharding, self.train_batch_sharding,
                                            replicated),
                              out_shardings=(self.state_sharding, replicated),
                              donate_argnums=(0,))
        self._eval = jax.jit(functools.partial(eval_fn, axis_name=None),
                             in_shardings=(self.state_sharding.params, self.batch_sharding),
                             out_shardings=replicated)
        self._gather = jax.jit(lambda tree: tree, out_shardings=replicated)
        # When replicas span processes: for each layout a batch is given in, the same rows
        # split over every device in process order, and the program that moves them there.
        self._spread: dict[NamedSharding, tuple[NamedSharding, Callable]] | None = None
        if any(len(r) > 1 for r in replica_processes(mesh)):
            self._spread = {
                target: (NamedSharding(mesh, P(*target.spec[:-1], (DATA, MODEL))),
                         jax.jit(lambda batch: batch, out_shardings=target))
                for target in (self.batch_sharding, self.train_batch_sharding)}

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
        """The whole parameters on this process's host (numpy), for decoding and pictures.

        Every process must call it (it is a collective): a parameter split over "model" has
        shards this process cannot address when a model replica spans processes (and
        ``jax.device_get`` refuses any array of a multi-process mesh), so the parameters are
        first gathered, in one program, to a copy on every device.
        """
        if jax.process_count() == 1:  # every shard is here: no copy on the devices
            return jax.tree.map(lambda x: np.asarray(jax.device_get(x)), placed.params)
        whole = self._gather(placed.params)
        return jax.tree.map(lambda x: np.asarray(x.addressable_data(0)), whole)

    def _global(self, batch: dict[str, np.ndarray],
                sharding: NamedSharding | None = None) -> dict[str, jax.Array]:
        """The global batch from this process's rows, laid out as ``sharding`` (the eval
        step's ``batch_sharding`` by default) says."""
        target = sharding or self.batch_sharding
        if self._spread is None:
            return {k: jax.make_array_from_process_local_data(target, v)
                    for k, v in batch.items()}
        spread, move = self._spread[target]
        return move({k: jax.make_array_from_process_local_data(spread, v)
                     for k, v in batch.items()})

    def train(self, placed: Any, batch: dict[str, np.ndarray],
              key: jax.Array) -> tuple[Any, dict[str, jax.Array]]:
        return self._train(placed, self._global(batch, self.train_batch_sharding), key)

    def fetch(self, metrics: dict[str, jax.Array]) -> dict[str, float]:
        return _to_host(metrics)

    def evaluate(self, placed: Any, batch: dict[str, np.ndarray]) -> dict[str, float]:
        return self.fetch(self._eval(placed.params, self._global(batch)))
