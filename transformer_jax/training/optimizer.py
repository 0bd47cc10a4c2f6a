"""The paper's optimizer: Adam (beta1 0.9, beta2 0.98, eps 1e-9) following the learning-rate
schedule ``optim.schedule`` names (:mod:`transformer_jax.training.schedules`)."""

from __future__ import annotations

import ml_collections
import optax

from transformer_jax.training import schedules


def make_optimizer(config: ml_collections.ConfigDict,
                   d_model: int) -> optax.GradientTransformation:
    """Adam(beta1, beta2, eps) with the config's schedule, applied once an optimizer step:
    accumulated micro-batches (``optim.grad_accum_steps``) are summed inside the train step
    (step.train_step), so the optimizer sees one step's gradient and its count is the
    step's."""
    optim = config.optim
    return optax.adam(schedules.schedule_of(config, d_model), b1=optim.b1, b2=optim.b2,
                      eps=optim.eps)
