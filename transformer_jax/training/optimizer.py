"""The paper's optimizer and learning-rate schedule: Adam (beta1 0.9, beta2 0.98, eps 1e-9)
with warmup."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import ml_collections
import optax


def learning_rate_schedule(d_model: int, warmup_steps: int,
                           scale: float = 1.0) -> Callable[[Any], Any]:
    """lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5).

    The schedule is called with optax's update count, which starts at 0 for the first
    step; the paper's ``step`` starts at 1.
    """

    def schedule(count):
        step = jnp.asarray(count, jnp.float32) + 1.0
        return scale * d_model ** -0.5 * jnp.minimum(step ** -0.5, step * warmup_steps ** -1.5)

    return schedule


def schedule_of(optim: ml_collections.ConfigDict, d_model: int) -> Callable[[Any], Any]:
    """The schedule ``optim`` asks for (warmup steps, scale): the optimizer follows it and the
    train step logs it."""
    return learning_rate_schedule(d_model, optim.warmup_steps, optim.lr_scale)


def make_optimizer(optim: ml_collections.ConfigDict,
                   d_model: int) -> optax.GradientTransformation:
    """Adam(beta1, beta2, eps) with the warmup schedule; gradient accumulation if asked."""
    tx = optax.adam(schedule_of(optim, d_model), b1=optim.b1, b2=optim.b2, eps=optim.eps)
    if optim.grad_accum_steps > 1:
        tx = optax.MultiSteps(tx, every_k_schedule=optim.grad_accum_steps)
    return tx
