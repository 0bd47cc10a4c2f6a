"""The local_global kernel: sparse attention in a local window plus a few global positions
(Longformer's sliding window with global attention; BigBird's window and global tokens,
without its random keys), and with no global positions the restricted self-attention of the
paper's Table 1 (the registry's "local").

Every query sees the keys within r = ``model.local_window`` positions (causal: the r before
it), and the first g = ``model.global_tokens`` positions of every sentence are global: they
see, and are seen by, every position of their sentence (causal: every position before them,
and every position after them). Any two positions of a sentence are then at most two hops
apart, through a global one, where the window alone needs n / r hops; the work is
O((r + g) n d) instead of O(n^2 d), O(r n d) with g = 0.

The mask is :func:`masks.make_mask`'s with ``window`` and ``global_tokens``. Global positions
are counted from the start of each segment, so packed rows keep theirs (every sentence its
own first g positions).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from transformer_jax.model.kernels import Traits
from transformer_jax.model.masks import (
    MASK_VALUE,
    block_mask,
    global_positions,
    make_mask,
    pad_axis1,
    scaled_groups,
    segment_starts,
    token_major,
)
from transformer_jax.model.transformer import dot_product_attention

# Cross-attention has no window (its keys are not positions of its queries): blockwise,
# which holds no q x k matrix either.
TRAITS = Traits(exact=False, returns_weights=False, supports_dropout=False, segment_ids=True,
                window=True, without_window="blockwise", global_tokens=True)


def run(q, k, v, q_segment_ids, kv_segment_ids, *, window, global_tokens=0, causal=False,
        q_offset=0, **_):
    """The registry's call (``kernels`` module docstring)."""
    return local_global_attention(q, k, v, q_segment_ids, kv_segment_ids, window=window,
                                  global_tokens=global_tokens, causal=causal,
                                  q_offset=q_offset), None


def reference(q, k, v, q_segment_ids, kv_segment_ids, *, window, global_tokens=0,
              causal=False, **_):
    """The dense kernel with this kernel's mask: what it computes, the O(n^2) way."""
    mask = make_mask(q_segment_ids, kv_segment_ids, causal=causal, window=window,
                     global_tokens=global_tokens)
    return dot_product_attention(q, k, v, mask)[0]


def local_global_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    q_segment_ids: jax.Array,
    kv_segment_ids: jax.Array,
    *,
    window: int,
    global_tokens: int,
    causal: bool = False,
    q_offset: jax.Array | int = 0,
    block_size: int | None = None,
) -> jax.Array:
    """Self-attention over a window of r plus the g global positions of each segment.

    Equal, on every real query, to the dense kernel with ``make_mask(..., window=window,
    global_tokens=global_tokens)``. (A padding query, which sees nothing, spreads its weight
    over its neighbourhood rather than over every key.) Three parts, each O((r + g) n):

    * an ordinary query scores the keys of its window and the g global keys of its segment
      outside the window, in one softmax. Queries are cut into blocks of ``block_size``
      (default: r); each block attends to its own key block and the ceil(r / block_size)
      blocks on either side (before it only, if causal), so no more than about 3r keys per
      query are ever scored. With g = 0 this is all: the paper's restricted self-attention
      (Table 1, last row), O(r n d);
    * a global query scores every key of its segment: for each of the g slots, each key is
      scored against its segment's global query, and a softmax per segment (a segment sum
      over [n, g] scores) gives the g global rows of every segment at once;
    * decoding (a query at ``q_offset`` against a cache) slices out the keys within reach of
      its window and gathers the g global keys: O(r + g) per token, since a global query's
      keys, all before it, are global keys themselves.

    Args:
      q: [b, h, q, d_k]; k: [b, h_kv, k, d_k]; v: [b, h_kv, k, d_v].
      q_segment_ids: [b, q]; kv_segment_ids: [b, k] (0 = padding).
      window: r >= 0; global_tokens: g >= 0 (0: the local kernel).

    Returns:
      [b, h, q, d_v].
    """
    nq, nk = q.shape[2], k.shape[2]
    if not (isinstance(q_offset, int) and q_offset == 0 and nq == nk):
        if not global_tokens:
            return _local_sliced(q, k, v, q_segment_ids, kv_segment_ids, window, causal,
                                 q_offset)
        if not causal:  # not a decoding step: the model never asks for it
            mask = make_mask(q_segment_ids, kv_segment_ids, q_offset=q_offset, window=window,
                             global_tokens=global_tokens)
            return dot_product_attention(q, k, v, mask)[0]
        return _decoding(q, k, v, q_segment_ids, kv_segment_ids, window, global_tokens,
                         q_offset)
    if not global_tokens:
        return _windows(q, k, v, q_segment_ids, kv_segment_ids, window, causal, block_size)
    near = _windows_and_global_keys(q, k, v, q_segment_ids, kv_segment_ids, window,
                                    global_tokens, causal, block_size)
    rows = _global_rows(q, k, v, kv_segment_ids, global_tokens, causal)
    is_global = global_positions(q_segment_ids, global_tokens)[:, None, :, None]
    return jnp.where(is_global, rows, near)


def _windows(q, k, v, q_segment_ids, kv_segment_ids, window, causal, block_size):
    """Every query over the keys of its window alone, block by block: [b, h, n, d_v]."""
    b, h, nq, _ = q.shape
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


def _starts_and_global_keys(kv_segment_ids: jax.Array, q_pos: jax.Array,
                            global_tokens: int) -> jax.Array:
    """[b, q, g] indices of the global keys of each query's segment (its first g positions),
    clipped to the row; a slot past its segment's end is masked by its segment id."""
    starts = jnp.take(segment_starts(kv_segment_ids), q_pos, axis=1)  # [b, q]
    slots = starts[..., None] + jnp.arange(global_tokens, dtype=jnp.int32)
    return jnp.clip(slots, 0, kv_segment_ids.shape[1] - 1)


def _gather(x: jax.Array, index: jax.Array) -> jax.Array:
    """Token-major x [b, n, ...] at index [b, q, g] -> [b, q, g, ...]."""
    flat = jnp.take_along_axis(x, index.reshape(index.shape[0], -1, *([1] * (x.ndim - 2))),
                               axis=1)
    return flat.reshape(*index.shape, *x.shape[2:])


def _global_key_mask(q_seg, kv_seg, q_pos, index, window, causal):
    """[b, q, g]: global key ``index`` counts for the query: its segment, not padding, not
    after it if causal, and outside its window (inside, the window part has it already)."""
    k_seg = jnp.take_along_axis(kv_seg, index.reshape(index.shape[0], -1), axis=1).reshape(
        index.shape)
    ok = (k_seg == q_seg[..., None]) & (k_seg != 0)
    distance = q_pos[..., None] - index
    if causal:
        ok &= distance >= 0
    return ok & (jnp.abs(distance) > window)


def _joint_softmax(qs, k_sets, v_sets, masks_):
    """softmax over several sets of keys at once: qs [..., h_kv, g, d]; each k [..., K, h_kv,
    d], v [..., K, h_kv, d_v], mask [..., K]. Returns [..., h_kv, g, d_v]."""
    logits = [jnp.einsum("...hgd,...khd->...hgk", qs, k, preferred_element_type=jnp.float32)
              for k in k_sets]
    logits = [jnp.where(m[..., None, None, :], x, MASK_VALUE) for x, m in zip(logits, masks_,
                                                                             strict=True)]
    weights = jax.nn.softmax(jnp.concatenate(logits, axis=-1), axis=-1)
    out, start = 0.0, 0
    for v in v_sets:
        w = weights[..., start:start + v.shape[-3]]
        out = out + jnp.einsum("...hgk,...khd->...hgd", w.astype(v.dtype), v)
        start += v.shape[-3]
    return out


def _windows_and_global_keys(q, k, v, q_seg, kv_seg, window, global_tokens, causal,
                             block_size):
    """Every query over its window and its segment's global keys: [b, h, n, d_v]."""
    b, h, n, _ = q.shape
    h_kv = k.shape[1]
    nbh = neighbourhoods(q, k, v, q_seg, kv_seg, window, causal, block_size)
    nb, size = nbh.allowed.shape[1:3]
    padded = nb * size
    q_pos = jnp.arange(padded, dtype=jnp.int32)
    index = _starts_and_global_keys(kv_seg, jnp.clip(q_pos, 0, n - 1), global_tokens)
    seg = pad_axis1(q_seg, 0, padded - n)
    glob_mask = _global_key_mask(seg, kv_seg, jnp.broadcast_to(q_pos, seg.shape), index,
                                 window, causal)  # [b, padded, g]
    k_glob, v_glob = _gather(token_major(k), index), _gather(token_major(v), index)
    blocked = lambda x: x.reshape(b, nb, size, *x.shape[2:])  # noqa: E731
    qs = scaled_groups(nbh.q, h_kv, axis=3)  # [b, nb, size, h_kv, g, d_k]
    out = _joint_softmax(qs, [nbh.k[:, :, None], blocked(k_glob)],
                         [nbh.v[:, :, None], blocked(v_glob)], [nbh.allowed, blocked(glob_mask)])
    out = out.reshape(b, padded, h, v.shape[-1])[:, :n]  # [b, n, h, d_v]
    return token_major(out)


def _global_rows(q, k, v, kv_seg, global_tokens, causal):
    """The outputs of every query if it were global, [b, h, n, d_v], computed for the global
    ones: slot t of a segment (its (t+1)-th position) attends to every key of the segment
    (causal: up to itself). Per key j, its segment's slot-t query scores it; a softmax per
    (segment, slot) follows from segment sums keyed by each segment's start."""
    b, h, n, _ = q.shape
    h_kv, d_v = k.shape[1], v.shape[-1]
    starts = segment_starts(kv_seg)  # [b, n]: the segment of each key, by its start
    k_pos = jnp.arange(n, dtype=jnp.int32)
    slot_pos = jnp.clip(starts[..., None] + jnp.arange(global_tokens), 0, n - 1)  # [b, n, g]
    slot_seg = jnp.take_along_axis(kv_seg, slot_pos.reshape(b, -1), 1).reshape(slot_pos.shape)
    valid = (slot_seg == kv_seg[..., None]) & (kv_seg[..., None] != 0)  # the slot exists
    if causal:
        valid &= k_pos[:, None] <= slot_pos
    qs = scaled_groups(token_major(q), h_kv, axis=2)  # [b, n, h_kv, grp, d_k]
    q_slot = _gather(qs, slot_pos)  # [b, n(key), g, h_kv, grp, d_k]
    logits = jnp.einsum("bjthgd,bjhd->bjthg", q_slot, token_major(k),
                        preferred_element_type=jnp.float32)
    logits = jnp.where(valid[..., None, None], logits, MASK_VALUE)

    def per_row(logits, starts, valid, values):
        peak = jax.lax.stop_gradient(jax.ops.segment_max(logits, starts, num_segments=n))
        p = jnp.exp(logits - peak[starts]) * valid[..., None, None]
        total = jax.ops.segment_sum(p, starts, num_segments=n)  # [n(segment), g, h_kv, grp]
        mixed = jax.ops.segment_sum(
            jnp.einsum("jthg,jhd->jthgd", p.astype(values.dtype), values), starts,
            num_segments=n)
        return mixed / jnp.where(total > 0, total, 1.0)[..., None].astype(mixed.dtype)

    by_segment = jax.vmap(per_row)(logits, starts, valid, token_major(v))
    # Query i, if global, is slot i - start(i) of the segment starting at start(i).
    slot = jnp.clip(k_pos - starts, 0, global_tokens - 1)
    flat = by_segment.reshape(b, n * global_tokens, h, d_v)
    rows = jnp.take_along_axis(flat, (starts * global_tokens + slot)[..., None, None], axis=1)
    return token_major(rows)


def _decoding(q, k, v, q_seg, kv_seg, window, global_tokens, q_offset):
    """Causal queries at q_offset .. q_offset + q - 1 (maybe traced) against the keys: the
    q + r keys of their windows sliced out, the g global keys gathered."""
    b, h, nq, _ = q.shape
    nk, h_kv = k.shape[2], k.shape[1]
    width = min(nq + window, nk)
    start = jnp.clip(jnp.asarray(q_offset) - window, 0, nk - width)
    take = lambda x, axis: jax.lax.dynamic_slice_in_dim(x, start, width, axis)  # noqa: E731
    q_pos = jnp.arange(nq, dtype=jnp.int32) + jnp.asarray(q_offset, jnp.int32)
    k_pos = jnp.arange(width) + start
    in_window = block_mask(q_seg, take(kv_seg, 1), q_pos, k_pos, True, window)  # [b, q, W]
    index = _starts_and_global_keys(kv_seg, jnp.clip(q_pos, 0, nk - 1), global_tokens)
    glob_mask = _global_key_mask(q_seg, kv_seg, jnp.broadcast_to(q_pos, q_seg.shape), index,
                                 window, True)
    qs = scaled_groups(token_major(q), h_kv, axis=2)  # [b, q, h_kv, grp, d_k]
    window_k, window_v = token_major(take(k, 2)), token_major(take(v, 2))

    def gather(x):  # the global keys or values, [b, q, g, h_kv, d], read head-major
        picked = jnp.take_along_axis(x, index.reshape(b, 1, -1, 1), axis=2)
        return jnp.moveaxis(picked.reshape(b, h_kv, nq, global_tokens, -1), 1, 3)

    out = _joint_softmax(qs, [window_k[:, None], gather(k)], [window_v[:, None], gather(v)],
                         [in_window, glob_mask])
    return token_major(out.reshape(b, nq, h, v.shape[-1]))
