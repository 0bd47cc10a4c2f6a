"""The masks of attention, and what every kernel of ``model/kernels/`` shares.

Masks are never passed around as n x n arrays: a kernel receives segment ids (0 marks
padding; packed sequences get 1, 2, ...) and a causal flag, and builds the mask where it needs
it (:func:`block_mask`: whole in the dense kernel, tile by tile in the others), so XLA fuses
it into the softmax.

Shapes: b = batch, q = query length, k = key length, h = heads, h_kv = key/value heads
(h_kv < h: grouped queries), d_k / d_v = head widths. The model's arrays are head-major,
[b, h, q, d_k], as its projections emit them, and every kernel takes them so.
"""

from __future__ import annotations

import logging

import jax
import jax.numpy as jnp

# Added to masked logits. Finite, so that a fully masked row (a padding query) gives a
# uniform distribution instead of NaN; real queries always see at least themselves.
MASK_VALUE = -1e10


def make_mask(q_segment_ids: jax.Array, kv_segment_ids: jax.Array, causal: bool = False,
              q_offset: jax.Array | int = 0, window: int | None = None,
              global_tokens: int = 0) -> jax.Array:
    """Boolean mask [b, 1, q, k]: True where query i may attend to key j.

    A query attends to keys of its own segment that are not padding (segment 0), and with
    ``causal`` only to keys at positions <= its own. ``q_offset`` is the position of the first
    query (non-zero when decoding one token at a time against a cache). With ``window`` r
    (restricted, local self-attention) only keys with |query position - key position| <= r;
    with ``causal`` too, each query keeps itself and the r keys before it. With
    ``global_tokens`` g as well (self-attention only: the queries are positions of the keys),
    the first g positions of every segment are global (:func:`global_positions`): they see
    and are seen by every position of their segment, whatever the window (causal: those
    before them, and those after them).
    """
    q_pos = jnp.arange(q_segment_ids.shape[1]) + q_offset
    k_pos = jnp.arange(kv_segment_ids.shape[1])
    q_global = k_global = None
    if window is not None and global_tokens:
        k_global = global_positions(kv_segment_ids, global_tokens)
        q_global = jnp.take(k_global, jnp.clip(q_pos, 0, k_global.shape[1] - 1), axis=1)
    return block_mask(q_segment_ids, kv_segment_ids, q_pos, k_pos, causal, window,
                      q_global, k_global)[:, None]


def segment_starts(segment_ids: jax.Array) -> jax.Array:
    """[b, n] -> [b, n]: the index at which each position's segment starts (segments are
    runs of one id, as packing lays them out; padding runs count as segments too)."""
    n = segment_ids.shape[1]
    index = jnp.arange(n, dtype=jnp.int32)
    new = jnp.concatenate([jnp.ones_like(segment_ids[:, :1], bool),
                           segment_ids[:, 1:] != segment_ids[:, :-1]], axis=1)
    return jax.lax.cummax(jnp.where(new, index, 0), axis=1)


def global_positions(segment_ids: jax.Array, global_tokens: int) -> jax.Array:
    """[b, n] booleans: the first ``global_tokens`` positions of every segment (never
    padding), the global positions of local + global attention."""
    index = jnp.arange(segment_ids.shape[1], dtype=jnp.int32)
    return (index - segment_starts(segment_ids) < global_tokens) & (segment_ids != 0)


def scaled_groups(q: jax.Array, h_kv: int, axis: int) -> jax.Array:
    """Queries with their h heads on ``axis`` ([b, h, q, d_k]: 1; [b, q, h, d_k]: 2), that
    axis split into [h_kv, g], times 1/sqrt(d_k): the queries of every kernel, grouped by the
    key/value head they share (a reshape: the heads of a group are adjacent)."""
    h, d_k = q.shape[axis], q.shape[-1]
    grouped = q.reshape(*q.shape[:axis], h_kv, h // h_kv, *q.shape[axis + 1:])
    return grouped * jnp.asarray(d_k ** -0.5, q.dtype)


def token_major(x: jax.Array) -> jax.Array:
    """[b, h, n, d] <-> [b, n, h, d]: the layout inside the blockwise kernel and cuDNN's."""
    return jnp.swapaxes(x, 1, 2)


_logged: set[str] = set()


def log_once(message: str, level: int = logging.INFO) -> None:
    """Logs ``message`` the first time only (kernels are traced once per layer and shape)."""
    if message not in _logged:
        _logged.add(message)
        logging.getLogger(__name__).log(level, message)


def block_mask(q_seg: jax.Array, kv_seg: jax.Array, q_pos: jax.Array, k_pos: jax.Array,
               causal: bool, window: int | None = None, q_global: jax.Array | None = None,
               k_global: jax.Array | None = None) -> jax.Array:
    """The mask of :func:`make_mask` for any block of queries and keys: [..., q, k].

    Segment ids are [..., q] and [..., k]; positions broadcast against them, as do the
    booleans ``q_global`` and ``k_global`` (global positions: exempt from the window). Every
    kernel builds its mask here, the dense one whole and the others tile by tile.
    """
    allowed = (q_seg[..., :, None] == kv_seg[..., None, :]) & (kv_seg[..., None, :] != 0)
    if causal:
        allowed &= k_pos[..., None, :] <= q_pos[..., :, None]
    if window is not None:
        near = jnp.abs(q_pos[..., :, None] - k_pos[..., None, :]) <= window
        if q_global is not None:
            near |= q_global[..., :, None] | k_global[..., None, :]
        allowed &= near
    return allowed


def pad_axis1(x: jax.Array, before: int, after: int) -> jax.Array:
    """``x`` with ``before`` and ``after`` zeros on either end of its axis 1 (the length)."""
    pad = [(0, 0)] * x.ndim
    pad[1] = (before, after)
    return jnp.pad(x, pad)  # zeros: padded keys get segment 0, i.e. masked

