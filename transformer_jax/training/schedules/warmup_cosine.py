"""Linear warmup, then cosine decay to a floor (not in the paper; a common schedule since).

The rate rises linearly from 0 to the paper's peak, lr_scale * (d_model * warmup_steps)^-0.5
(the paper's schedule at the end of its warmup: 7.0e-4 for base), over ``optim.warmup_steps``
steps, then falls along half a cosine to ``optim.min_lr_ratio`` times the peak at step
``train.num_steps``:

    step <= w:       peak * step / w
    w <= step <= T:  floor + (peak - floor) * (1 + cos(pi * (step - w) / (T - w))) / 2

(w the warmup steps, T the run's steps, floor = min_lr_ratio * peak), optax's
warmup_cosine_decay_schedule. The decay follows ``train.num_steps``: a run resumed with more
steps stretches the rest of its cosine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ml_collections
import optax

from transformer_jax.errors import ConfigError

FIELDS = ("optim.warmup_steps", "optim.lr_scale", "optim.min_lr_ratio", "train.num_steps")


def make(config: ml_collections.FrozenConfigDict, d_model: int) -> Callable[[Any], Any]:
    o, steps = config.optim, config.train.num_steps
    if o.warmup_steps >= steps:
        raise ConfigError(f"optim.warmup_steps={o.warmup_steps} must be less than "
                          f"train.num_steps={steps} with optim.schedule='warmup_cosine' (the "
                          "cosine decays over the steps after the warmup)")
    peak = o.lr_scale * (d_model * o.warmup_steps) ** -0.5
    return optax.warmup_cosine_decay_schedule(
        init_value=0.0, peak_value=peak, warmup_steps=o.warmup_steps, decay_steps=steps,
        end_value=o.min_lr_ratio * peak)
