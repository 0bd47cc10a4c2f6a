"""Learned positions (the paper's Table 3 row E): a trained [max_len, d_model] table added to
the token embeddings. Positions beyond the longest trained on keep their initial values."""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from transformer_jax.model.positions import Traits

TRAITS = Traits(added=True, learned=True, rotates=False, interpolates=False)
PARAM = "position_embedding"


def embedding(module: nn.Module, positions: jax.Array, config: Any) -> jax.Array:
    """[b, n] positions -> [b, n, d_model]: rows of the module's table (a parameter)."""
    table_ = module.param(PARAM, nn.initializers.normal(0.02), (config.max_len, config.d_model))
    return jnp.take(table_, positions, axis=0)


def table(config: Any, params: Any) -> np.ndarray:
    """The trained table of one side's embedding parameters."""
    del config
    return np.asarray(params[PARAM], np.float32)
