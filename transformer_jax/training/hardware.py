"""Peak FLOP/s of the accelerator, for model-FLOPs utilisation (MFU).

Known accelerators use their published dense bf16 peak; on a CPU (or anything unknown) the
peak is measured with a matmul probe in the running process, so MFU compares the train
step with the best the same process achieves on one large matmul. A probe taken while
something else loads the machine reads low; the train loop probes again during the run and
keeps the best (``meters.MfuMeter``).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp

# Dense bf16 peak FLOP/s per device (per chip for TPUs), from the vendors' data sheets.
PEAK_FLOPS: dict[str, float] = {
    "H200": 989e12,
    "H100": 989e12,
    "A100": 312e12,
    "TPU v4": 275e12,
    "TPU v5p": 459e12,
    "TPU v5 lite": 197e12,
    "TPU v6 lite": 918e12,
}


def known_peak(device: jax.Device) -> float | None:
    """The table's peak for ``device``, matched on its device_kind, or None."""
    kind = device.device_kind
    for name, peak in PEAK_FLOPS.items():
        if name.lower() in kind.lower():
            return peak
    return None


_matmul = jax.jit(lambda x, y: x @ y)


def measure_matmul(n: int = 4096, dtype: str = "float32", repeats: int = 5) -> float:
    """FLOP/s of the fastest of ``repeats`` n x n x n matmuls on the default device, timed
    after one untimed matmul (compilation, first touch of the memory)."""
    a = jnp.ones((n, n), dtype)
    _matmul(a, a).block_until_ready()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        _matmul(a, a).block_until_ready()
        best = min(best, time.perf_counter() - start)
    return 2.0 * n ** 3 / best


@functools.cache
def matmul_probe(n: int = 4096, dtype: str = "float32", repeats: int = 5) -> float:
    """:func:`measure_matmul`, measured once per process: the peak taken at start-up."""
    return measure_matmul(n, dtype, repeats)


def is_measured(override: float = 0.0) -> bool:
    """Whether :func:`peak_flops_per_device` measures the peak (no override, no data sheet)."""
    return override <= 0 and known_peak(jax.devices()[0]) is None


def peak_flops_per_device(override: float = 0.0, dtype: str = "float32",
                          probe: Callable[[], float] | None = None) -> tuple[float, str]:
    """(peak FLOP/s of one device, where the figure came from). ``probe`` measures it where
    it must be measured (default: :func:`matmul_probe` of ``dtype``)."""
    if override > 0:
        return override, "config"
    device = jax.devices()[0]
    peak = known_peak(device)
    if peak is not None:
        return peak, f"{device.device_kind} bf16 data sheet"
    measured = probe() if probe is not None else matmul_probe(dtype=dtype)
    logging.info("peak FLOP/s measured by a matmul probe (%s) on %s: %.1f GFLOP/s", dtype,
                 device.device_kind, measured / 1e9)
    return measured, f"{dtype} matmul probe on {device.device_kind}"
