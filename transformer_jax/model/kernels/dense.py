"""The paper's kernel: softmax(Q K^T / sqrt(d_k)) V with one n x n matrix per head, O(n^2)
memory. It hands back the attention weights and applies dropout to them; every other kernel
is measured against it."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from transformer_jax.model.dropout import dropout
from transformer_jax.model.kernels import Traits
from transformer_jax.model.masks import MASK_VALUE, make_mask, scaled_groups

TRAITS = Traits(exact=True, returns_weights=True, supports_dropout=True, segment_ids=True)


def run(q, k, v, q_segment_ids, kv_segment_ids, *, causal=False, q_offset=0, window=None,
        global_tokens=0, dropout_rate=0.0, dropout_rng=None, dropout_impl="hash",
        return_weights=False, **_):
    """The registry's call (``kernels`` module docstring); ``window`` and ``global_tokens``:
    another kernel's mask (the local and local_global kernels', when their weights are asked
    for)."""
    mask = make_mask(q_segment_ids, kv_segment_ids, causal=causal, q_offset=q_offset,
                     window=window, global_tokens=global_tokens)
    return dot_product_attention(q, k, v, mask, dropout_rate=dropout_rate,
                                 dropout_rng=dropout_rng, dropout_impl=dropout_impl,
                                 return_weights=return_weights)


def dot_product_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    mask: jax.Array | None = None,
    *,
    dropout_rate: float = 0.0,
    dropout_rng: jax.Array | None = None,
    dropout_impl: str = "hash",
    return_weights: bool = False,
) -> tuple[jax.Array, jax.Array | None]:
    """softmax(Q K^T / sqrt(d_k)) V over every head.

    Head-major, as the projections emit them, so that both products are batched matmuls over
    (batch, head) with no transpose. The mask is added to the logits as a bias (0 where
    allowed, :data:`MASK_VALUE` elsewhere), built once at [b, 1, q, k] and broadcast over the
    heads: the softmax's backward then passes through the addition untouched.

    Args:
      q: [b, h, q, d_k] queries.
      k: [b, h_kv, k, d_k] keys; h must be a multiple of h_kv (h_kv < h: grouped queries).
      v: [b, h_kv, k, d_v] values.
      mask: boolean, broadcastable to [b, h, q, k]; False positions get zero weight.
      dropout_rate, dropout_rng, dropout_impl: dropout on the attention weights (training
        only; dropout.keep_mask makes the mask).
      return_weights: also return the weights [b, h, q, k] (after masking, before dropout).

    Returns:
      ([b, h, q, d_v] outputs, weights or None).
    """
    b, h, q_len, _ = q.shape
    h_kv, k_len = k.shape[1], k.shape[2]
    qg = scaled_groups(q, h_kv, axis=1)
    if mask is not None:
        mask = jnp.asarray(mask)
        if mask.ndim == 4 and mask.shape[1] == 1:  # one mask for every head: [b, 1, 1, q, k]
            mask = mask[:, :, None]
        else:
            mask = jnp.broadcast_to(mask, (b, h, q_len, k_len)).reshape(
                b, h_kv, h // h_kv, q_len, k_len)
        # A query that sees no key (padding) gets the same bias on every logit: the softmax
        # would ignore it and the gradient would be unmasked attention's. Zeroing that
        # query makes its weights uniform by construction and its d/dq and d/dk zero, as
        # with masked logits held constant (and as the blockwise kernel gives).
        qg = qg * mask.any(-1, keepdims=True).astype(qg.dtype)
    logits = jnp.einsum("bhgqd,bhkd->bhgqk", qg, k, preferred_element_type=jnp.float32)
    if mask is not None:
        logits = logits + jnp.where(mask, 0.0, MASK_VALUE).astype(jnp.float32)
    weights = jax.nn.softmax(logits, axis=-1)
    shown = weights.reshape(b, h, q_len, k_len) if return_weights else None
    if dropout_rate > 0.0 and dropout_rng is not None:
        weights = dropout(weights, dropout_rate, dropout_rng, dropout_impl)
    out = jnp.einsum("bhgqk,bhkd->bhgqd", weights.astype(v.dtype), v)
    return out.reshape(b, h, q_len, v.shape[-1]), shown

