"""Rotary positions (RoPE; Su et al., "RoFormer", 2021): nothing is added to the embeddings;
in every self-attention layer the queries and keys are rotated by their positions, each pair
of dimensions (2i, 2i + 1) by the angle pos x theta_i, theta_i = 10000^(-2i/d_k) (the paper's
frequencies, per head). A query at i and a key at j then score q R_(j - i) k: attention sees
relative positions only. Cross-attention is left alone, as T5 leaves it without relative
positions: its queries and keys are positions of different sentences.

Position interpolation (Chen et al., 2023): with ``decode.position_scale`` s < 1, positions are
multiplied by s when translating, so a model trained on sentences up to L tokens sees
distances up to L when it reads L / s.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from transformer_jax.model.positions import Traits

TRAITS = Traits(added=False, learned=False, rotates=True, interpolates=True,
                even_head_dims=True)
BASE = 10000.0


def angles(positions: jax.Array, d_k: int, scale: float = 1.0) -> jax.Array:
    """[n] positions -> [n, d_k / 2] angles pos x scale x theta_i, in float32."""
    theta = jnp.asarray(np.power(BASE, -np.arange(0, d_k, 2) / d_k), jnp.float32)
    return (jnp.asarray(positions, jnp.float32) * scale)[..., None] * theta


def rotate(x: jax.Array, positions: jax.Array, scale: float = 1.0) -> jax.Array:
    """Head-major x [b, h, n, d_k] with each pair (x_2i, x_2i+1) at position p turned by
    p x scale x theta_i: (x_2i cos - x_2i+1 sin, x_2i sin + x_2i+1 cos). ``positions`` [n]."""
    d_k = x.shape[-1]
    angle = angles(positions, d_k, scale)  # [n, d_k / 2]
    cos, sin = jnp.cos(angle), jnp.sin(angle)
    pairs = x.astype(jnp.float32).reshape(*x.shape[:-1], d_k // 2, 2)
    even, odd = pairs[..., 0], pairs[..., 1]
    turned = jnp.stack([even * cos - odd * sin, even * sin + odd * cos], axis=-1)
    return turned.reshape(x.shape).astype(x.dtype)
