"""The paper's kernel, the registry's "dense": softmax(Q K^T / sqrt(d_k)) V with one n x n
matrix per head, O(n^2) memory. It hands back the attention weights and applies dropout to
them; every other kernel is measured against it. The function itself is the model's,
:func:`transformer_jax.model.transformer.dot_product_attention`, which the model calls
directly; this entry is its registry's call."""

from __future__ import annotations

from transformer_jax.model.kernels import Traits
from transformer_jax.model.masks import make_mask
from transformer_jax.model.transformer import dot_product_attention

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
