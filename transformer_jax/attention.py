"""Attention kernels and their masks.

The paper's scaled dot-product attention, softmax(Q K^T / sqrt(d_k)) V, with the mask applied
before the softmax. Masks are never passed around as n x n arrays: a kernel receives segment
ids (0 marks padding; packed sequences get 1, 2, ...) and a causal flag, and builds the mask
where it needs it, so XLA fuses it into the softmax.

Shapes: b = batch, q = query length, k = key length, h = heads, d_k / d_v = head widths.
This module imports nothing else of the project.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

# Added to masked logits. Finite, so that a fully masked row (a padding query) gives a
# uniform distribution instead of NaN; real queries always see at least themselves.
MASK_VALUE = -1e10


def make_mask(q_segment_ids: jax.Array, kv_segment_ids: jax.Array, causal: bool = False,
              q_offset: jax.Array | int = 0) -> jax.Array:
    """Boolean mask [b, 1, q, k]: True where query i may attend to key j.

    A query attends to keys of its own segment that are not padding (segment 0), and with
    ``causal`` only to keys at positions <= its own. ``q_offset`` is the position of the first
    query (non-zero when decoding one token at a time against a cache).
    """
    mask = (q_segment_ids[:, :, None] == kv_segment_ids[:, None, :]) & (
        kv_segment_ids[:, None, :] != 0)
    if causal:
        q_pos = jnp.arange(q_segment_ids.shape[1])[:, None] + q_offset
        k_pos = jnp.arange(kv_segment_ids.shape[1])[None, :]
        mask = mask & (k_pos <= q_pos)
    return mask[:, None]


def dot_product_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    mask: jax.Array | None = None,
    *,
    dropout_rate: float = 0.0,
    dropout_rng: jax.Array | None = None,
    return_weights: bool = False,
) -> tuple[jax.Array, jax.Array | None]:
    """softmax(Q K^T / sqrt(d_k)) V over every head.

    Args:
      q: [b, q, h, d_k] queries.
      k: [b, k, h_kv, d_k] keys; h must be a multiple of h_kv (h_kv < h: grouped queries).
      v: [b, k, h_kv, d_v] values.
      mask: boolean, broadcastable to [b, h, q, k]; False positions get zero weight.
      dropout_rate, dropout_rng: dropout on the attention weights (training only).
      return_weights: also return the weights [b, h, q, k] (after masking, before dropout).

    Returns:
      ([b, q, h, d_v] outputs, weights or None).
    """
    b, q_len, h, d_k = q.shape
    h_kv = k.shape[2]
    group = h // h_kv
    # Grouped queries share a key/value head: [b, q, h_kv, group, d].
    qg = q.reshape(b, q_len, h_kv, group, d_k) * jnp.asarray(d_k ** -0.5, q.dtype)
    logits = jnp.einsum("bqhgd,bkhd->bhgqk", qg, k, preferred_element_type=jnp.float32)
    if mask is not None:
        mask = jnp.broadcast_to(mask, (b, h, q_len, k.shape[1])).reshape(
            b, h_kv, group, q_len, k.shape[1])
        logits = jnp.where(mask, logits, MASK_VALUE)
    weights = jax.nn.softmax(logits, axis=-1)
    shown = weights.reshape(b, h, q_len, k.shape[1]) if return_weights else None
    if dropout_rate > 0.0 and dropout_rng is not None:
        keep = jax.random.bernoulli(dropout_rng, 1.0 - dropout_rate, weights.shape)
        weights = jnp.where(keep, weights / (1.0 - dropout_rate), 0.0)
    out = jnp.einsum("bhgqk,bkhd->bqhgd", weights.astype(v.dtype), v)
    return out.reshape(b, q_len, h, v.shape[-1]), shown
