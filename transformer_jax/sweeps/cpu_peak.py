"""One measurement of this CPU's peak FLOP/s (for MFU) for every point a sweep runs here."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from transformer_jax.sweeps.points import PointSpec


def shared_cpu_peak(specs: Sequence[PointSpec]) -> dict[str, float]:
    """On a CPU, one matmul probe of the machine's peak FLOP/s (for MFU) for all points,
    instead of one per point: {"train.peak_flops": ...}, or {} when not needed."""
    if any(s.peak_flops or s.dtype != "float32" for s in specs):
        return {}
    import jax

    from transformer_jax.training import hardware

    if jax.default_backend() != "cpu":
        return {}
    peak = hardware.matmul_probe()
    logging.info("CPU peak for MFU, measured once for every point: %.1f GFLOP/s", peak / 1e9)
    return {"train.peak_flops": float(f"{peak:.4g}")}
