"""The paper's schedule (section 5.3), times ``optim.lr_scale``:

    lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)

a linear increase for the first ``optim.warmup_steps`` steps to d_model^-0.5 *
warmup_steps^-0.5 (7.0e-4 for base), then a decrease with the inverse square root of the step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import ml_collections

FIELDS = ("optim.warmup_steps", "optim.lr_scale")


def learning_rate(d_model: int, warmup_steps: int,
                  scale: float = 1.0) -> Callable[[Any], Any]:
    """lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5) as a function of
    the paper's ``step``, 1 for the first."""

    def rate(step):
        step = jnp.asarray(step, jnp.float32)
        return scale * d_model ** -0.5 * jnp.minimum(step ** -0.5, step * warmup_steps ** -1.5)

    return rate


def make(config: ml_collections.FrozenConfigDict, d_model: int) -> Callable[[Any], Any]:
    return learning_rate(d_model, config.optim.warmup_steps, config.optim.lr_scale)
