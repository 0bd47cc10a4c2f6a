"""The paper's positions (section 3.5), the registry's "sinusoidal": sines and cosines of
geometrically spaced frequencies, added to the token embeddings. The table and the embedding
are the model's, :func:`transformer_jax.model.transformer.sinusoidal_positions` and
:func:`~transformer_jax.model.transformer.sinusoidal_embedding`, which the model calls
directly; this entry is what the exports, the pictures and the config read."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from transformer_jax.model.positions import Traits
from transformer_jax.model.transformer import sinusoidal_embedding, sinusoidal_positions

TRAITS = Traits(added=True, learned=False, rotates=False, interpolates=True)


def embedding(module: Any, positions: jax.Array, config: Any) -> jax.Array:
    """[b, n] positions -> [b, n, d_model] (``model.transformer.sinusoidal_embedding``)."""
    del module  # nothing learned
    return sinusoidal_embedding(positions, config)


def table(config: Any, params: Any = None) -> np.ndarray:
    """The [max_len, d_model] table an export writes."""
    del params  # nothing learned
    return sinusoidal_positions(config.max_len, config.d_model)
