"""The local kernel: the restricted self-attention of the paper's Table 1, each query seeing
only the keys within distance r (causal: the r before it), O(r n d)."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from transformer_jax.model.kernels import Traits
from transformer_jax.model.kernels.dense import dot_product_attention
from transformer_jax.model.masks import block_mask, make_mask, pad_axis1, token_major

# Cross-attention has no window: the blockwise kernel, which holds no q x k matrix either.
TRAITS = Traits(exact=False, returns_weights=False, supports_dropout=False, segment_ids=True,
                window=True, without_window="blockwise")


def run(q, k, v, q_segment_ids, kv_segment_ids, *, window, causal=False, q_offset=0, **_):
    """The registry's call (``kernels`` module docstring)."""
    return local_attention(q, k, v, q_segment_ids, kv_segment_ids, window=window,
                           causal=causal, q_offset=q_offset), None


def reference(q, k, v, q_segment_ids, kv_segment_ids, *, window, causal=False, **_):
    """The dense kernel with this kernel's band mask: what it computes, the O(n^2) way."""
    mask = make_mask(q_segment_ids, kv_segment_ids, causal=causal, window=window)
    return dot_product_attention(q, k, v, mask)[0]


def local_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    q_segment_ids: jax.Array,
    kv_segment_ids: jax.Array,
    *,
    window: int,
    causal: bool = False,
    q_offset: jax.Array | int = 0,
    block_size: int | None = None,
) -> jax.Array:
    """Self-attention restricted to a neighbourhood: query i sees keys j with |i - j| <= r.

    The paper's Table 1, last row: O(r n d) work instead of O(n^2 d). With ``causal`` query i
    sees keys i - r .. i. Equal, on every real query, to :func:`dot_product_attention` with
    ``make_mask(..., window=window)``. (A padding query, which sees nothing, spreads
    its weight over its neighbourhood rather than over every key.)

    Queries are cut into blocks of ``block_size`` (default: r); each block attends to its own
    key block and the ceil(r / block_size) blocks on either side (before it only, if causal),
    so no more than about 3r keys per query are ever scored. When queries and keys are not
    the same positions (decoding: q_len 1 against the cache at ``q_offset``), the keys within
    reach of the queries are sliced out instead: O(r) per decoded token.

    Args:
      q: [b, h, q, d_k]; k: [b, h_kv, k, d_k]; v: [b, h_kv, k, d_v].
      q_segment_ids: [b, q]; kv_segment_ids: [b, k] (0 = padding).
      window: r >= 0.

    Returns:
      [b, h, q, d_v].
    """
    nq, nk = q.shape[2], k.shape[2]
    if not (isinstance(q_offset, int) and q_offset == 0 and nq == nk):
        return _local_sliced(q, k, v, q_segment_ids, kv_segment_ids, window, causal, q_offset)
    b, h, _, d_k = q.shape
    n = neighbourhoods(q, k, v, q_segment_ids, kv_segment_ids, window, causal, block_size)
    nb, size, width = n.allowed.shape[1:]

    def blocks(x: jax.Array) -> jax.Array:
        """[b, nb, n, h, d] -> [b * nb, h, n, d]: each block a batch row of the dense kernel."""
        return token_major(x.reshape(b * nb, *x.shape[2:]))

    out, _ = dot_product_attention(blocks(n.q), blocks(n.k), blocks(n.v),
                                   n.allowed.reshape(b * nb, 1, size, width))
    out = token_major(out).reshape(b, nb * size, h, v.shape[-1])[:, :nq]
    return token_major(out)


class Neighbourhoods(NamedTuple):
    """Queries cut into blocks and the keys each block can reach (token-major):
    q [b, nb, size, h, d_k], k [b, nb, W, h_kv, d_k], v [b, nb, W, h_kv, d_v], and the band
    mask ``allowed`` [b, nb, size, W] (segments, padding, causality, the window)."""

    q: jax.Array
    k: jax.Array
    v: jax.Array
    allowed: jax.Array


def neighbourhoods(q: jax.Array, k: jax.Array, v: jax.Array, q_segment_ids: jax.Array,
                   kv_segment_ids: jax.Array, window: int, causal: bool,
                   block_size: int | None = None) -> Neighbourhoods:
    """Self-attention's queries (head-major [b, h, n, d_k], the keys' positions) in blocks of
    ``block_size`` (default: r), each with its own key block and the ceil(r / block_size)
    blocks on either side (before it only, if causal): about 3r keys a query."""
    b, nq = q.shape[0], q.shape[2]
    size = max(1, min(block_size or window, nq))
    reach = -(-window // size)  # neighbouring key blocks on each side
    before, after = reach, 0 if causal else reach
    nb = -(-nq // size)
    tail = nb * size - nq

    def windows(x: jax.Array) -> jax.Array:
        """[b, n, ...] -> [b, nb, W, ...]: the keys each query block can reach, W = taps * size."""
        x = pad_axis1(x, before * size, tail + after * size)
        x = x.reshape(b, nb + before + after, size, *x.shape[2:])
        taps = [x[:, i:i + nb] for i in range(before + after + 1)]
        return jnp.concatenate(taps, axis=2)

    k_win, v_win = windows(token_major(k)), windows(token_major(v))
    kv_seg_win = windows(kv_segment_ids)
    width = k_win.shape[2]
    q_pos = jnp.arange(nb * size).reshape(nb, size)
    k_pos = (jnp.arange(nb)[:, None] - before) * size + jnp.arange(width)[None, :]
    q_seg = pad_axis1(q_segment_ids, 0, tail).reshape(b, nb, size)
    allowed = block_mask(q_seg, kv_seg_win, q_pos, k_pos, causal, window)  # [b, nb, size, W]
    q_blocks = pad_axis1(token_major(q), 0, tail).reshape(b, nb, size, *q.shape[1:2], q.shape[3])
    return Neighbourhoods(q_blocks, k_win, v_win, allowed)


def _local_sliced(q, k, v, q_segment_ids, kv_segment_ids, window, causal, q_offset):
    """Local attention for queries at q_offset .. q_offset + q - 1 (maybe traced): only the
    q + 2r keys (q + r if causal) within reach are sliced out of k and v."""
    nq, nk = q.shape[2], k.shape[2]
    width = min(nq + (1 if causal else 2) * window, nk)
    start = jnp.clip(jnp.asarray(q_offset) - window, 0, nk - width)
    take = lambda x, axis: jax.lax.dynamic_slice_in_dim(x, start, width, axis)  # noqa: E731
    q_pos = jnp.arange(nq) + q_offset
    k_pos = jnp.arange(width) + start
    allowed = block_mask(q_segment_ids, take(kv_segment_ids, 1), q_pos, k_pos, causal, window)
    out, _ = dot_product_attention(q, take(k, 2), take(v, 2), allowed[:, None])
    return out

