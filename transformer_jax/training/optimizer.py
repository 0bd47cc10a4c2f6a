"""The paper's optimizer: Adam (beta1 0.9, beta2 0.98, eps 1e-9) following the learning-rate
schedule ``optim.schedule`` names (:mod:`transformer_jax.training.schedules`)."""

from __future__ import annotations

import ml_collections
import optax

from transformer_jax.training import schedules


def make_optimizer(config: ml_collections.ConfigDict,
                   d_model: int) -> optax.GradientTransformation:
    """Adam(beta1, beta2, eps) with the config's schedule; gradient accumulation if asked."""
    optim = config.optim
    tx = optax.adam(schedules.schedule_of(config, d_model), b1=optim.b1, b2=optim.b2,
                    eps=optim.eps)
    if optim.grad_accum_steps > 1:
        tx = optax.MultiSteps(tx, every_k_schedule=optim.grad_accum_steps)
    return tx
