"""Data parallelism with ``jax.pmap``: one replica of the train state per local device.

The global batch is split along its rows: device i of process p gets rows
``[(p * local + i) * r, (p * local + i + 1) * r)``. Gradients are averaged with
``lax.pmean`` inside the step (``train.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

AXIS = "batch"  # the pmap axis name


def local_devices(count: int = 0) -> list[jax.Device]:
    """The first ``count`` local devices (all of them when count is 0)."""
    devices = jax.local_devices()
    if count > len(devices):
        raise ValueError(f"train.devices={count} but only {len(devices)} local devices exist")
    return devices[:count] if count else devices


def replicate(tree: Any, devices: Sequence[jax.Device]) -> Any:
    """One copy of every leaf per device, stacked on a new leading axis."""
    sharding = NamedSharding(Mesh(np.asarray(devices), (AXIS,)), PartitionSpec(AXIS))
    n = len(devices)
    return jax.tree.map(
        lambda x: jax.device_put(np.broadcast_to(np.asarray(x), (n, *np.shape(x))), sharding),
        tree)


def unreplicate(tree: Any) -> Any:
    """The first replica of every leaf, as host numpy arrays."""
    return jax.tree.map(lambda x: np.asarray(x[0]), tree)


def shard(batch: dict[str, np.ndarray], num_devices: int) -> dict[str, np.ndarray]:
    """[rows, ...] -> [num_devices, rows / num_devices, ...]."""

    def split(x: np.ndarray) -> np.ndarray:
        if x.shape[0] % num_devices:
            raise ValueError(f"batch of {x.shape[0]} rows does not split over "
                             f"{num_devices} devices")
        return x.reshape(num_devices, x.shape[0] // num_devices, *x.shape[1:])

    return {k: split(v) for k, v in batch.items()}
