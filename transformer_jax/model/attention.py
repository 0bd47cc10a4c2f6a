"""Attention kernels and their masks.

The paper's scaled dot-product attention, softmax(Q K^T / sqrt(d_k)) V, with the mask applied
before the softmax. Masks are never passed around as n x n arrays: a kernel receives segment
ids (0 marks padding; packed sequences get 1, 2, ...) and a causal flag, and builds the mask
where it needs it, so XLA fuses it into the softmax.

Four kernels compute it (``model.attention`` picks one; :func:`attend`, the model's one call,
runs it, or the dense kernel when weights are wanted):

* ``dense``: :func:`dot_product_attention`, the paper's: one n x n matrix per head, O(n^2)
  memory. The only kernel that can hand back the attention weights.
* ``blockwise``: :func:`blockwise_attention`, the same numbers without ever holding the n x n
  matrix: an online softmax over blocks of keys, and a backward pass that recomputes each
  block from the saved softmax statistics (FlashAttention's recipe), so memory is O(n d).
* ``local``: :func:`local_attention`, the restricted self-attention of the paper's Table 1:
  each query sees only the keys within distance r (causal: the r before it), O(r n d).
* ``cudnn``: :func:`fused_attention`, ``jax.nn.dot_product_attention`` with cuDNN's fused
  kernel on a GPU, XLA's elsewhere.

Shapes: b = batch, q = query length, k = key length, h = heads, h_kv = key/value heads
(h_kv < h: grouped queries), d_k / d_v = head widths. The model's arrays are head-major,
[b, h, q, d_k], as its projections emit them, and every kernel takes them so.
Of the project it imports only the dropout mask.
"""

from __future__ import annotations

import functools
import logging

import jax
import jax.numpy as jnp

from transformer_jax.model.dropout import dropout

# Added to masked logits. Finite, so that a fully masked row (a padding query) gives a
# uniform distribution instead of NaN; real queries always see at least themselves.
MASK_VALUE = -1e10


def make_mask(q_segment_ids: jax.Array, kv_segment_ids: jax.Array, causal: bool = False,
              q_offset: jax.Array | int = 0, window: int | None = None) -> jax.Array:
    """Boolean mask [b, 1, q, k]: True where query i may attend to key j.

    A query attends to keys of its own segment that are not padding (segment 0), and with
    ``causal`` only to keys at positions <= its own. ``q_offset`` is the position of the first
    query (non-zero when decoding one token at a time against a cache). With ``window`` r
    (restricted, local self-attention) only keys with |query position - key position| <= r;
    with ``causal`` too, each query keeps itself and the r keys before it.
    """
    q_pos = jnp.arange(q_segment_ids.shape[1]) + q_offset
    k_pos = jnp.arange(kv_segment_ids.shape[1])
    return _allowed(q_segment_ids, kv_segment_ids, q_pos, k_pos, causal, window)[:, None]


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
    qg = _scaled_groups(q, h_kv, axis=1)
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


def _scaled_groups(q: jax.Array, h_kv: int, axis: int) -> jax.Array:
    """Queries with their h heads on ``axis`` ([b, h, q, d_k]: 1; [b, q, h, d_k]: 2), that
    axis split into [h_kv, g], times 1/sqrt(d_k): the queries of every kernel, grouped by the
    key/value head they share (a reshape: the heads of a group are adjacent)."""
    h, d_k = q.shape[axis], q.shape[-1]
    grouped = q.reshape(*q.shape[:axis], h_kv, h // h_kv, *q.shape[axis + 1:])
    return grouped * jnp.asarray(d_k ** -0.5, q.dtype)


def token_major(x: jax.Array) -> jax.Array:
    """[b, h, n, d] <-> [b, n, h, d]: the layout inside the blockwise kernel and cuDNN's."""
    return jnp.swapaxes(x, 1, 2)


KERNELS = ("dense", "blockwise", "local", "cudnn")

_logged: set[str] = set()


def log_once(message: str, level: int = logging.INFO) -> None:
    """Logs ``message`` the first time only (kernels are traced once per layer and shape)."""
    if message not in _logged:
        _logged.add(message)
        logging.getLogger(__name__).log(level, message)


def _allowed(q_seg: jax.Array, kv_seg: jax.Array, q_pos: jax.Array, k_pos: jax.Array,
             causal: bool, window: int | None = None) -> jax.Array:
    """The mask of :func:`make_mask` for any block of queries and keys: [..., q, k].

    Segment ids are [..., q] and [..., k]; positions broadcast against them. Every kernel
    builds its mask here, the dense one whole and the others tile by tile.
    """
    allowed = (q_seg[..., :, None] == kv_seg[..., None, :]) & (kv_seg[..., None, :] != 0)
    if causal:
        allowed &= k_pos[..., None, :] <= q_pos[..., :, None]
    if window is not None:
        allowed &= jnp.abs(q_pos[..., :, None] - k_pos[..., None, :]) <= window
    return allowed


def _pad_axis1(x: jax.Array, before: int, after: int) -> jax.Array:
    pad = [(0, 0)] * x.ndim
    pad[1] = (before, after)
    return jnp.pad(x, pad)  # zeros: padded keys get segment 0, i.e. masked


# ----------------------------------------------------------------------------------------
# Blockwise exact attention


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
    out = _blockwise(_pad_axis1(q, 0, pad_q), _pad_axis1(k, 0, pad_k), _pad_axis1(v, 0, pad_k),
                     _pad_axis1(q_segment_ids, 0, pad_q), _pad_axis1(kv_segment_ids, 0, pad_k),
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
    allowed = _allowed(q_seg, kv_seg, q_pos, k_pos, causal)[:, None, None]
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

    out, lse = jax.lax.map(query_block, (_blocks(_scaled_groups(q, h_kv, axis=2), bq),
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
    query_blocks = (_blocks(_scaled_groups(q, h_kv, axis=2), bq), d_out_blocks,
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


# ----------------------------------------------------------------------------------------
# Restricted (local) self-attention


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
    d_v = v.shape[-1]
    size = max(1, min(block_size or window, nq))
    reach = -(-window // size)  # neighbouring key blocks on each side
    before, after = reach, 0 if causal else reach
    nb = -(-nq // size)
    tail = nb * size - nq

    def windows(x: jax.Array) -> jax.Array:
        """[b, n, ...] -> [b, nb, W, ...]: the keys each query block can reach, W = taps * size."""
        x = _pad_axis1(x, before * size, tail + after * size)
        x = x.reshape(b, nb + before + after, size, *x.shape[2:])
        taps = [x[:, i:i + nb] for i in range(before + after + 1)]
        return jnp.concatenate(taps, axis=2)

    def blocks(x: jax.Array) -> jax.Array:
        """[b, nb, n, h, d] -> [b * nb, h, n, d]: each block a batch row of the dense kernel."""
        return token_major(x.reshape(b * nb, *x.shape[2:]))

    k_win, v_win = windows(token_major(k)), windows(token_major(v))
    kv_seg_win = windows(kv_segment_ids)
    width = k_win.shape[2]
    q_pos = jnp.arange(nb * size).reshape(nb, size)
    k_pos = (jnp.arange(nb)[:, None] - before) * size + jnp.arange(width)[None, :]
    q_seg = _pad_axis1(q_segment_ids, 0, tail).reshape(b, nb, size)
    allowed = _allowed(q_seg, kv_seg_win, q_pos, k_pos, causal, window)  # [b, nb, size, W]
    q_blocks = _pad_axis1(token_major(q), 0, tail).reshape(b, nb, size, h, d_k)
    out, _ = dot_product_attention(blocks(q_blocks), blocks(k_win), blocks(v_win),
                                   allowed.reshape(b * nb, 1, size, width))
    out = token_major(out).reshape(b, nb * size, h, d_v)[:, :nq]
    return token_major(out)


def _local_sliced(q, k, v, q_segment_ids, kv_segment_ids, window, causal, q_offset):
    """Local attention for queries at q_offset .. q_offset + q - 1 (maybe traced): only the
    q + 2r keys (q + r if causal) within reach are sliced out of k and v."""
    nq, nk = q.shape[2], k.shape[2]
    width = min(nq + (1 if causal else 2) * window, nk)
    start = jnp.clip(jnp.asarray(q_offset) - window, 0, nk - width)
    take = lambda x, axis: jax.lax.dynamic_slice_in_dim(x, start, width, axis)  # noqa: E731
    q_pos = jnp.arange(nq) + q_offset
    k_pos = jnp.arange(width) + start
    allowed = _allowed(q_segment_ids, take(kv_segment_ids, 1), q_pos, k_pos, causal, window)
    out, _ = dot_product_attention(q, take(k, 2), take(v, 2), allowed[:, None])
    return out


# ----------------------------------------------------------------------------------------
# The fused kernel


def fused_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    q_segment_ids: jax.Array,
    kv_segment_ids: jax.Array,
    *,
    causal: bool = False,
    q_offset: jax.Array | int = 0,
) -> jax.Array:
    """``jax.nn.dot_product_attention`` with cuDNN's fused (flash) kernel on a GPU.

    cuDNN computes in float16/bfloat16 only: float32 inputs are cast to bfloat16 for the call
    (logged once) and the output cast back. On any other backend the same call runs XLA's
    implementation, after one log line saying so. The mask is :func:`make_mask`'s.

    Args:
      q: [b, h, q, d]; k, v: [b, h_kv, k, d] (cuDNN needs d_k == d_v).

    Returns:
      [b, h, q, d] in v's dtype.
    """
    if k.shape[-1] != v.shape[-1]:
        raise ValueError(f"the cudnn kernel needs d_k == d_v, got {k.shape[-1]} and "
                         f"{v.shape[-1]}")
    mask = make_mask(q_segment_ids, kv_segment_ids, causal=causal, q_offset=q_offset)
    if jax.default_backend() == "gpu":
        implementation = "cudnn"
        dtype = q.dtype
        if dtype not in (jnp.bfloat16, jnp.float16):
            log_once(f"attention 'cudnn': cuDNN computes in bfloat16; casting {dtype} "
                     "queries, keys and values for the call")
            dtype = jnp.bfloat16
    else:
        implementation, dtype = "xla", q.dtype
        log_once(f"attention 'cudnn' needs a GPU; on {jax.default_backend()} it falls back to "
                 "XLA's jax.nn.dot_product_attention", logging.WARNING)
    # jax.nn.dot_product_attention takes [batch, length, heads, width].
    out = jax.nn.dot_product_attention(*(token_major(x.astype(dtype)) for x in (q, k, v)),
                                       mask=mask, implementation=implementation)
    return token_major(out).astype(v.dtype)


def attend(
    kernel: str,
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    q_segment_ids: jax.Array,
    kv_segment_ids: jax.Array,
    *,
    causal: bool = False,
    q_offset: jax.Array | int = 0,
    window: int | None = None,
    block_size: int = 256,
    dropout_rate: float = 0.0,
    dropout_rng: jax.Array | None = None,
    dropout_impl: str = "hash",
    return_weights: bool = False,
) -> tuple[jax.Array, jax.Array | None]:
    """Attention by one of :data:`KERNELS`, the model's one call: it chooses what runs.

    Head-major q [b, h, q, d_k], k [b, h_kv, k, d_k], v [b, h_kv, k, d_v] with segment ids
    [b, q] and [b, k]; returns ([b, h, q, d_v], the weights [b, h, q, k] or None).

    * ``window`` is the local kernel's r. Without one (cross-attention: the keys are not
      positions of the queries, so no neighbourhood exists) "local" runs "blockwise", which
      also holds no q x k matrix.
    * Only the dense kernel has weights: asked for them (``return_weights``), any other
      kernel hands over to it, once logged, with the local kernel's band mask where that
      applies: the same outputs, plus the weights.
    * Dropout on the weights (``dropout_rate`` > 0 with a ``dropout_rng``: training) exists
      in the dense kernel only; any other kernel refuses it.
    * ``block_size`` is the blockwise kernel's tile.
    """
    if kernel not in KERNELS:
        raise ValueError(f"unknown attention kernel {kernel!r}; known: {', '.join(KERNELS)}")
    if kernel == "local" and window is None:
        kernel = "blockwise"
    band = window if kernel == "local" else None
    if return_weights and kernel != "dense":
        log_once(f"attention weights asked for: the {kernel!r} kernel has none, so the dense "
                 "kernel computes them (same outputs)")
        kernel = "dense"
    if dropout_rate > 0.0 and dropout_rng is not None and kernel != "dense":
        raise ValueError(f"attention dropout (rate {dropout_rate}) needs the dense kernel; the "
                         f"{kernel!r} kernel has none")
    if kernel == "dense":
        mask = make_mask(q_segment_ids, kv_segment_ids, causal=causal, q_offset=q_offset,
                         window=band)
        return dot_product_attention(q, k, v, mask, dropout_rate=dropout_rate,
                                     dropout_rng=dropout_rng, dropout_impl=dropout_impl,
                                     return_weights=return_weights)
    if kernel == "blockwise":
        return blockwise_attention(q, k, v, q_segment_ids, kv_segment_ids, causal=causal,
                                   q_offset=q_offset, block_size=block_size), None
    if kernel == "local":
        return local_attention(q, k, v, q_segment_ids, kv_segment_ids, window=window,
                               causal=causal, q_offset=q_offset), None
    return fused_attention(q, k, v, q_segment_ids, kv_segment_ids, causal=causal,
                           q_offset=q_offset), None
