"""The paper's optimizer: Adam (beta1 0.9, beta2 0.98, eps 1e-9) following the learning-rate
schedule ``optim.schedule`` names (:mod:`transformer_jax.training.schedules`)."""

from __future__ import annotations

import optax

from transformer_jax.training import schedules
from transformer_jax.training.spec import OptimSpec


def make_optimizer(optim: OptimSpec, d_model: int) -> optax.GradientTransformation:
    """Adam(beta1, beta2, eps) with the spec's schedule, applied once an optimizer step:
    accumulated micro-batches (``optim.grad_accum_steps``) are summed inside the train step
    (step.train_step), so the optimizer sees one step's gradient and its count is the
    step's."""
    return optax.adam(schedules.learning_rate(optim.schedule, optim.settings, d_model),
                      b1=optim.b1, b2=optim.b2, eps=optim.eps)
