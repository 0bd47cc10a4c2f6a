"""The paper's positions (section 3.5): sines and cosines of geometrically spaced
frequencies, added to the token embeddings, "because it may allow the model to extrapolate
to sequence lengths longer than the ones encountered during training"."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from transformer_jax.model.positions import Traits

TRAITS = Traits(added=True, learned=False, rotates=False, interpolates=True)


def sinusoidal_positions(max_len: int, d_model: int) -> np.ndarray:
    """PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(pos / 10000^(2i/d)).

    Returns a [max_len, d_model] float32 table with sines and cosines interleaved, as in the
    paper's formula.
    """
    pos = np.arange(max_len, dtype=np.float64)[:, None]
    two_i = np.arange(0, d_model, 2, dtype=np.float64)[None, :]
    angle = pos / np.power(10000.0, two_i / d_model)
    pe = np.zeros((max_len, d_model), dtype=np.float64)
    pe[:, 0::2] = np.sin(angle)
    pe[:, 1::2] = np.cos(angle[:, : d_model // 2])
    return pe.astype(np.float32)


def embedding(module: Any, positions: jax.Array, config: Any) -> jax.Array:
    """[b, n] positions -> [b, n, d_model]: rows of the table, or with
    ``config.position_scale`` != 1 the formula at the scaled (fractional) positions."""
    d = config.d_model
    if config.position_scale == 1.0:
        return jnp.take(jnp.asarray(sinusoidal_positions(config.max_len, d)), positions, axis=0)
    inverse = jnp.asarray(np.power(10000.0, -np.arange(0, d, 2) / d), jnp.float32)
    angle = (positions.astype(jnp.float32) * config.position_scale)[..., None] * inverse
    pe = jnp.stack([jnp.sin(angle), jnp.cos(angle)], axis=-1).reshape(*positions.shape, -1)
    return pe[..., :d]


def table(config: Any, params: Any = None) -> np.ndarray:
    """The [max_len, d_model] table an export writes."""
    del params  # nothing learned
    return sinusoidal_positions(config.max_len, config.d_model)
