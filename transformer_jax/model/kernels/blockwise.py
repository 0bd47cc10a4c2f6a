"""The blockwise kernel: the dense kernel's numbers without ever holding the n x n matrix.

An online softmax over blocks of keys, and a backward pass that recomputes each block from
the saved softmax statistics (FlashAttention's recipe), so memory is O(n d); tiles the mask
hides entirely are skipped.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from transformer_jax.model.kernels import Traits
from transformer_jax.model.masks import (
    MASK_VALUE,
    block_mask,
    pad_axis1,
    scaled_groups,
    token_major,
)

TRAITS = Traits(exact=True, returns_weights=False, supports_dropout=False, segment_ids=True)


def run(q, k, v, q_segment_ids, kv_segment_ids, *, causal=False, q_offset=0, block_size=256,
        **_):
    """The registry's call (``kernels`` module docstring)."""
    return blockwise_attention(q, k, v, q_segment_ids, kv_segment_ids, causal=causal,
                               q_offset=q_offset, block_size=block_size), None


def blockwise_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    q_segment_ids: jax.Array,
    kv_segment_ids: jax.Array,
    *,
    causal: bool = False,
    q_offset: jax.Array | int = 0,
    block_size: int = 256,
) -> jax.Array:
    """Exact softmax(Q K^T / sqrt(d_k)) V holding one block x block tile of Q K^T at a time.

    Queries are taken ``block_size`` at a time; for each query block an online softmax runs
    over key blocks, keeping only the running row maximum, row sum and weighted sum of values
    (FlashAttention's forward). The backward pass is a custom VJP that recomputes each tile
    from the saved log-sum-exp of each row, so training memory is O(n d) instead of O(n^2).
    The mask is :func:`make_mask`'s, built tile by tile.

    Tiles the mask hides entirely are skipped, forward and backward (:func:`_live_tiles`):
    those whose query and key blocks have no segment id in common in any row of the batch
    (the batch lives inside a tile), and with ``causal`` those above the diagonal. The test
    compares the blocks' ranges of ids, so it is exact for rows that number their sentences
    1, 2, ... in order, as packing does; other numberings skip fewer tiles, never a needed
    one. A row packed with short sentences then costs about the sum of their squared lengths
    rather than the row's length squared. The skipped tiles would only have added zero
    weights, so real queries get the dense kernel's numbers.

    A query that sees no key (a padding query, segment 0) gets what the dense kernel gives
    it: uniform weights over all the keys, i.e. the mean of the values; its gradient reaches
    the values only (d/dq and d/dk are zero, the mask's logits being constants).

    Args:
      q: [b, h, q, d_k]; k: [b, h_kv, k, d_k]; v: [b, h_kv, k, d_v].
      q_segment_ids: [b, q]; kv_segment_ids: [b, k] (0 = padding).
      causal, q_offset: as in :func:`make_mask` (``q_offset`` may be traced: decoding).
      block_size: rows and columns of one tile; lengths are padded up to a multiple.

    Returns:
      [b, h, q, d_v] outputs, in v's dtype.
    """
    # The tiles are cut along the length: the kernel works on [b, n, h, d] inside.
    q, k, v = token_major(q), token_major(k), token_major(v)
    nq, nk = q.shape[1], k.shape[1]
    bq, bk = min(block_size, nq), min(block_size, nk)
    pad_q, pad_k = -nq % bq, -nk % bk
    q_pos = jnp.arange(nq + pad_q, dtype=jnp.int32) + jnp.asarray(q_offset, jnp.int32)
    out = _blockwise(pad_axis1(q, 0, pad_q), pad_axis1(k, 0, pad_k), pad_axis1(v, 0, pad_k),
                     pad_axis1(q_segment_ids, 0, pad_q), pad_axis1(kv_segment_ids, 0, pad_k),
                     q_pos, causal, bq, bk, nk)
    return token_major(out[:, :nq])


def _blocks(x: jax.Array, size: int) -> jax.Array:
    """[b, n, ...] -> [n / size, b, size, ...]: the block index leads, for lax.scan."""
    b, n = x.shape[:2]
    return jnp.moveaxis(x.reshape(b, n // size, size, *x.shape[2:]), 1, 0)


def _unblocks(x: jax.Array) -> jax.Array:
    """Inverse of :func:`_blocks`."""
    nb, b, size = x.shape[:3]
    return jnp.moveaxis(x, 0, 1).reshape(b, nb * size, *x.shape[3:])


def _live_tiles(q_seg: jax.Array, kv_seg: jax.Array, q_pos: jax.Array, causal: bool,
                bq: int, bk: int) -> jax.Array:
    """[q/bq, k/bk] booleans: False where the mask hides the whole tile, for every row.

    Decided once, before the scans, from each block's range of non-padding segment ids
    [b, blocks] (lowest, highest): a query and a key can share a segment only if their blocks'
    ranges overlap. With ``causal``, a tile can hold an allowed pair only if its last query
    position (traced when decoding) is at or after its first key position. Conservative: a
    tile whose ranges overlap without a shared id is computed, and masked there as usual;
    packed rows number their sentences 1, 2, ... in order, for which the test is exact.
    """
    def ranges(seg, size):
        seg = seg.astype(jnp.int32).reshape(seg.shape[0], -1, size)  # [b, blocks, size]
        real = seg != 0
        low = jnp.where(real, seg, jnp.iinfo(jnp.int32).max).min(-1)
        high = jnp.where(real, seg, jnp.iinfo(jnp.int32).min).max(-1)
        return low, high  # a block of padding alone: low > high, so it overlaps nothing

    (q_low, q_high), (k_low, k_high) = ranges(q_seg, bq), ranges(kv_seg, bk)
    overlap = (jnp.maximum(q_low[:, :, None], k_low[:, None, :])
               <= jnp.minimum(q_high[:, :, None], k_high[:, None, :]))  # [b, q/bq, k/bk]
    live = overlap.any(0)
    if causal:
        first_key = jnp.arange(0, kv_seg.shape[1], bk, dtype=jnp.int32)
        live &= q_pos.reshape(-1, bq).max(-1)[:, None] >= first_key[None, :]
    return live


def _tile_logits(qs: jax.Array, k: jax.Array, q_seg: jax.Array, kv_seg: jax.Array,
                 q_pos: jax.Array, k_pos: jax.Array, causal: bool) -> tuple[jax.Array, jax.Array]:
    """Masked logits [b, h_kv, g, bq, bk] of one tile, and its mask [b, 1, 1, bq, bk].

    ``qs`` [b, bq, h_kv, g, d_k] is already scaled by 1/sqrt(d_k). Keys past the real ones
    (filling the last block) have segment 0, so they are masked like padding.
    """
    logits = jnp.einsum("bqhgd,bkhd->bhgqk", qs, k, preferred_element_type=jnp.float32)
    allowed = block_mask(q_seg, kv_seg, q_pos, k_pos, causal)[:, None, None]
    return jnp.where(allowed, logits, MASK_VALUE), allowed


def _blockwise_forward(q, k, v, q_seg, kv_seg, q_pos, causal, bq, bk, n_keys):
    """Outputs [b, q, h, d_v] and each query's log-sum-exp of its logits, blocked:
    [q/bq, b, h_kv, g, bq], +inf for a query that sees no key.

    The online softmax runs only over the tiles :func:`_live_tiles` keeps (``lax.cond``:
    XLA runs only the branch taken); the scan runs over key block indices and a kept tile
    slices its keys itself, so that a skipped one reads nothing.

    A query that sees no key (all its logits MASK_VALUE in the dense kernel, hence uniform
    weights) is found as one that met no allowed key in the tiles computed, and gets the mean
    of the n_keys real values instead of whatever part of the keys its computed tiles held;
    its log-sum-exp +inf makes the backward's weights 0.
    """
    b, nq, h, _ = q.shape
    h_kv, d_v = k.shape[2], v.shape[-1]
    stats_shape = (b, h_kv, h // h_kv, bq)
    k_pos = jnp.arange(k.shape[1], dtype=jnp.int32)
    live = _live_tiles(q_seg, kv_seg, q_pos, causal, bq, bk)  # [q/bq, k/bk]
    mean_v = v[:, :n_keys].astype(jnp.float32).mean(1)[:, :, None, None]  # [b, h_kv, 1, 1, d_v]
    key_blocks = (_blocks(k, bk), _blocks(v, bk), _blocks(kv_seg, bk), k_pos.reshape(-1, bk))

    def query_block(args):
        qs_i, q_seg_i, q_pos_i, live_i = args

        def tile(carry, j):
            row_max, row_sum, acc, seen = carry
            k_j, v_j, kv_seg_j, k_pos_j = (x[j] for x in key_blocks)
            logits, allowed = _tile_logits(qs_i, k_j, q_seg_i, kv_seg_j, q_pos_i, k_pos_j,
                                           causal)
            new_max = jnp.maximum(row_max, logits.max(-1))
            p = jnp.exp(logits - new_max[..., None])
            rescale = jnp.exp(row_max - new_max)  # earlier blocks were summed at the old max
            row_sum = row_sum * rescale + p.sum(-1)
            acc = acc * rescale[..., None] + jnp.einsum(
                "bhgqk,bkhd->bhgqd", p.astype(v.dtype), v_j, preferred_element_type=jnp.float32)
            return new_max, row_sum, acc, seen | allowed.any(-1)

        def step(carry, j):
            return jax.lax.cond(live_i[j], tile, lambda carry, _: carry, carry, j), None

        init = (jnp.full(stats_shape, -jnp.inf, jnp.float32),
                jnp.zeros(stats_shape, jnp.float32),
                jnp.zeros((*stats_shape, d_v), jnp.float32),
                jnp.zeros((b, 1, 1, bq), bool))
        (row_max, row_sum, acc, seen), _ = jax.lax.scan(step, init, jnp.arange(len(live_i)))
        row_sum = jnp.where(seen, row_sum, 1.0)  # no 0 / 0 where no tile was computed
        out = jnp.where(seen[..., None], acc / row_sum[..., None], mean_v)
        lse = jnp.where(seen, row_max + jnp.log(row_sum), jnp.inf)
        return jnp.einsum("bhgqd->bqhgd", out), lse

    out, lse = jax.lax.map(query_block, (_blocks(scaled_groups(q, h_kv, axis=2), bq),
                                         _blocks(q_seg, bq), q_pos.reshape(-1, bq), live))
    return _unblocks(out).reshape(b, nq, h, d_v).astype(v.dtype), lse


@functools.partial(jax.custom_vjp, nondiff_argnums=(6, 7, 8, 9))
def _blockwise(q, k, v, q_seg, kv_seg, q_pos, causal, bq, bk, n_keys):
    return _blockwise_forward(q, k, v, q_seg, kv_seg, q_pos, causal, bq, bk, n_keys)[0]


def _blockwise_fwd(q, k, v, q_seg, kv_seg, q_pos, causal, bq, bk, n_keys):
    out, lse = _blockwise_forward(q, k, v, q_seg, kv_seg, q_pos, causal, bq, bk, n_keys)
    return out, (q, k, v, q_seg, kv_seg, q_pos, out, lse)


def _blockwise_bwd(causal, bq, bk, n_keys, residuals, d_out):
    """FlashAttention's backward: for each key block, sweep the query blocks, recomputing
    the tile's weights P = exp(logits - log-sum-exp); then dV = P^T dO,
    dS = P * (dO V^T - D) with D = rowsum(dO * O), dQ = dS K / sqrt(d_k), dK = dS^T Q / sqrt(d_k).

    Only the tiles the forward computed (:func:`_live_tiles`) are recomputed: a skipped tile
    has P = 0 and dS = 0. The scans run over block indices, a kept tile slicing its blocks
    and adding its dQ into the carried dQ in place, so that a skipped tile costs nothing.

    A query that sees no key (log-sum-exp +inf, so P = 0 in every tile) took the mean of the
    n_keys real values: dV of each real key gets its dO / n_keys.

    Memory: the saved inputs, outputs and statistics, O(n d), plus one tile at a time.
    """
    q, k, v, q_seg, kv_seg, q_pos, out, lse = residuals
    b, nq, h, width_k = q.shape
    h_kv, width_v = k.shape[2], v.shape[-1]
    g = h // h_kv
    d_out = d_out.reshape(b, nq, h_kv, g, width_v)
    delta = jnp.einsum("bqhgd,bqhgd->bhgq", d_out.astype(jnp.float32),
                       out.reshape(b, nq, h_kv, g, width_v).astype(jnp.float32))
    delta = jnp.moveaxis(delta.reshape(b, h_kv, g, nq // bq, bq), 3, 0)
    d_out_blocks = _blocks(d_out, bq)  # [q/bq, b, bq, h_kv, g, d_v]
    query_blocks = (_blocks(scaled_groups(q, h_kv, axis=2), bq), d_out_blocks,
                    _blocks(q_seg, bq), q_pos.reshape(-1, bq), lse, delta)
    k_pos = jnp.arange(k.shape[1], dtype=jnp.int32)
    live = _live_tiles(q_seg, kv_seg, q_pos, causal, bq, bk)
    key_blocks = (_blocks(k, bk), _blocks(v, bk), _blocks(kv_seg, bk), k_pos.reshape(-1, bk))

    def key_block(d_q, j):
        k_j, v_j, kv_seg_j, k_pos_j = (x[j] for x in key_blocks)

        def tile(carry, i):
            d_q, d_k_j, d_v_j = carry
            qs_i, d_out_i, q_seg_i, q_pos_i, lse_i, delta_i = (x[i] for x in query_blocks)
            logits, allowed = _tile_logits(qs_i, k_j, q_seg_i, kv_seg_j, q_pos_i, k_pos_j,
                                           causal)
            p = jnp.exp(logits - lse_i[..., None])
            d_v_j += jnp.einsum("bhgqk,bqhgd->bkhd", p.astype(d_out.dtype), d_out_i,
                                preferred_element_type=jnp.float32)
            d_p = jnp.einsum("bqhgd,bkhd->bhgqk", d_out_i, v_j,
                             preferred_element_type=jnp.float32)
            # Masked logits are constants (MASK_VALUE): no gradient reaches Q K^T there.
            d_s = jnp.where(allowed, p * (d_p - delta_i[..., None]), 0.0)
            d_k_j += jnp.einsum("bhgqk,bqhgd->bkhd", d_s, qs_i.astype(jnp.float32))
            d_q = d_q.at[i].add(jnp.einsum("bhgqk,bkhd->bqhgd", d_s, k_j.astype(jnp.float32)))
            return d_q, d_k_j, d_v_j

        def step(carry, i):
            return jax.lax.cond(live[i, j], tile, lambda carry, _: carry, carry, i), None

        init = (d_q, jnp.zeros(k_j.shape, jnp.float32), jnp.zeros(v_j.shape, jnp.float32))
        (d_q, d_k_j, d_v_j), _ = jax.lax.scan(step, init, jnp.arange(live.shape[0]))
        return d_q, (d_k_j, d_v_j)

    d_q0 = jnp.zeros((nq // bq, b, bq, h_kv, g, width_k), jnp.float32)
    d_q, (d_k, d_v) = jax.lax.scan(key_block, d_q0, jnp.arange(live.shape[1]))
    d_q = _unblocks(d_q).reshape(b, nq, h, width_k) * (width_k ** -0.5)
    # The queries that see no key: out = mean of the real values, d/dv = dO / n_keys each.
    blind = jnp.isinf(lse).astype(jnp.float32)  # [q/bq, b, h_kv, g, bq]
    d_mean = jnp.einsum("nbhgq,nbqhgd->bhd", blind, d_out_blocks.astype(jnp.float32)) / n_keys
    real_key = (k_pos < n_keys)[None, :, None, None]
    d_v = _unblocks(d_v) + jnp.where(real_key, d_mean[:, None], 0.0)
    return (d_q.astype(q.dtype), _unblocks(d_k).astype(k.dtype), d_v.astype(v.dtype),
            None, None, None)


_blockwise.defvjp(_blockwise_fwd, _blockwise_bwd)
