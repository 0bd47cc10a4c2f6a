"""The position schemes, one module each, found by name (``model.positions``; the mechanism is
:class:`transformer_jax.plugins.Registry`'s).

"rotary" is ``transformer_jax.model.positions.rotary``; a scheme kept elsewhere is one file in
a directory of ``TRANSFORMER_JAX_POSITIONS``. A scheme module defines:

* ``TRAITS``, a :class:`Traits`: how the scheme enters the model, which the model, the
  config's validation, the exports and the pictures read instead of lists of names;
* with the ``added`` trait, ``embedding(module, positions, config)``: the [b, n, d_model]
  vectors added to the token embeddings at integer ``positions`` [b, n], called inside the
  embedding module (``module.param`` makes a learned table), and ``table(config, params)``:
  the [max_len, d_model] table an export writes (``params``: the embedding's parameters);
* with the ``rotates`` trait, ``rotate(x, positions, scale)``: head-major queries or keys
  [b, h, n, d_k] turned by their positions [n] (times ``scale``), in every self-attention
  layer, keys before they enter the decoding cache.

``config.position_scale`` (set from ``decode.position_scale`` when translating) multiplies the
positions of a scheme with the ``interpolates`` trait: position interpolation, to run a
model on longer inputs than it was trained on.
"""

from __future__ import annotations

import dataclasses

from transformer_jax import plugins

# The paper's scheme.
SINUSOIDAL = "sinusoidal"


@dataclasses.dataclass(frozen=True)
class Traits:
    """How a position scheme enters the model."""

    # A vector per position added to the token embeddings (``embedding``; ``table`` for the
    # exports, whose targets take a position table).
    added: bool
    # That table is a parameter ("position_embedding" of each embedding), trained.
    learned: bool
    # Self-attention's queries and keys are rotated by their positions (``rotate``).
    rotates: bool
    # Positions may be fractional: decode.position_scale may scale them (interpolation).
    interpolates: bool
    # Rotations turn pairs of dimensions: d_k must be even.
    even_head_dims: bool = False


REGISTRY = plugins.Registry(
    __name__, "TRANSFORMER_JAX_POSITIONS", "model.positions", traits="TRAITS", first=SINUSOIDAL,
    needs=(plugins.Need("TRAITS", Traits), plugins.Need("embedding", trait="added"),
           plugins.Need("table", trait="added"), plugins.Need("rotate", trait="rotates")))
names, get, having = REGISTRY.names, REGISTRY.get, REGISTRY.having
