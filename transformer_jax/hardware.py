"""Peak FLOP/s of the accelerator, for model-FLOPs utilisation (MFU).

Known accelerators use their published dense bf16 peak; on a CPU (or anything unknown) the
peak is measured with a matmul probe in the running process, so MFU compares the train
step with the best the same process achieves on one large matmul.
"""

from __future__ import annotations

import functools
import logging
import time

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


@functools.cache
def matmul_probe(n: int = 4096, dtype: str = "float32", repeats: int = 5) -> float:
    """FLOP/s of the best of ``repeats`` n x n x n matmuls on the default device."""
    a = jnp.ones((n, n), dtype)
    matmul = jax.jit(lambda x, y: x @ y)
    matmul(a, a).block_until_ready()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        matmul(a, a).block_until_ready()
        best = min(best, time.perf_counter() - start)
    return 2.0 * n ** 3 / best


def peak_flops_per_device(override: float = 0.0, dtype: str = "float32") -> tuple[float, str]:
    """(peak FLOP/s of one device, where the figure came from)."""
    if override > 0:
        return override, "config"
    device = jax.devices()[0]
    peak = known_peak(device)
    if peak is not None:
        return peak, f"{device.device_kind} bf16 data sheet"
    measured = matmul_probe(dtype=dtype)
    logging.info("peak FLOP/s measured by a 4096^3 %s matmul on %s: %.1f GFLOP/s", dtype,
                 device.device_kind, measured / 1e9)
    return measured, f"{dtype} matmul probe on {device.device_kind}"
