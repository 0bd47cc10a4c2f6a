"""What the linear kernels share (not a kernel itself: its name starts with "_").

Linear attention (Katharopoulos et al., 2020) replaces exp(q . k / sqrt(d)) by a product of
feature maps, phi(q) . phi(k), so that the sum over keys can be taken first:

    out_i = phi(q_i)^T S / phi(q_i)^T z,   S = sum_j phi(k_j) v_j^T [m, d_v],  z = sum_j phi(k_j)

over the keys j that query i may see: O(n m d_v) work and no n x n matrix. The values carry a
column of ones, so that z is the last column of S. ``linear`` maps with elu(x) + 1, ``performer``
with positive random features (FAVOR+).

* Self-attention: the row is cut into chunks of ``CHUNK`` positions, scanned in order with
  the running S of the segment in progress: within a chunk the (small) masked product, from
  earlier chunks the carried S, reset where a segment starts. Causal: keys up to the query.
  Not causal: that, plus the same scan over the reversed row with keys strictly after it.
  Segments must be runs of one id, as packing lays them out (padding, id 0, at the ends).
* Other keys (cross-attention; queries at a ``q_offset``): the masked product written out,
  O(q k m), as it is when the weights are asked for (the pictures).
* Cached decoding (``init_state`` / ``step``): the state is S [b, h_kv, m, d_v + 1], updated
  with each token's phi(k) v^T: the same cost at every length.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from transformer_jax.model.masks import make_mask, pad_axis1, token_major

# Positions a chunk of the self-attention scan holds: its masked product is CHUNK x CHUNK.
CHUNK = 64

# phi(x, is_query) for token-major x [b, n, heads, d_k] -> [b, n, heads, m], float32.
FeatureMap = Callable[[jax.Array, bool], jax.Array]


def _grouped(phi_q: jax.Array, h_kv: int) -> jax.Array:
    """[b, n, h, m] -> [b, n, h_kv, g, m]: query heads grouped by the key/value head they
    share."""
    b, n, h, m = phi_q.shape
    return phi_q.reshape(b, n, h_kv, h // h_kv, m)


def _with_ones(v: jax.Array) -> jax.Array:
    """Token-major v [b, n, h_kv, d_v] with a column of ones: [..., d_v + 1], float32."""
    v = v.astype(jnp.float32)
    return jnp.concatenate([v, jnp.ones_like(v[..., :1])], axis=-1)


def _divide(num: jax.Array, dtype: jnp.dtype) -> jax.Array:
    """[..., d_v + 1] -> [..., d_v]: the weighted sum over the sum of weights; a query that
    sees no key (padding) gets 0."""
    den = num[..., -1:]
    return jnp.where(den > 0, num[..., :-1] / jnp.where(den > 0, den, 1.0), 0.0).astype(dtype)


def attention(q: jax.Array, k: jax.Array, v: jax.Array, q_segment_ids: jax.Array,
              kv_segment_ids: jax.Array, phi: FeatureMap, *, causal: bool = False,
              q_offset: jax.Array | int = 0, return_weights: bool = False,
              chunk: int = CHUNK) -> tuple[jax.Array, jax.Array | None]:
    """Linear attention with feature map ``phi`` on head-major q [b, h, q, d_k],
    k [b, h_kv, k, d_k], v [b, h_kv, k, d_v] and segment ids [b, q], [b, k]: (outputs
    [b, h, q, d_v], the weights [b, h, q, k] if ``return_weights``, else None)."""
    same_positions = isinstance(q_offset, int) and q_offset == 0 and q.shape[2] == k.shape[2]
    if return_weights or not same_positions:
        return explicit(q, k, v, q_segment_ids, kv_segment_ids, phi, causal=causal,
                        q_offset=q_offset)
    h_kv = k.shape[1]
    phi_q = _grouped(phi(token_major(q), True), h_kv)
    phi_k = phi(token_major(k), False) * (kv_segment_ids != 0)[..., None, None]
    v1 = _with_ones(token_major(v))
    num = _scan(phi_q, phi_k, v1, kv_segment_ids, True, chunk)
    if not causal:
        flip = lambda x: jnp.flip(x, axis=1)  # noqa: E731
        num = num + flip(_scan(flip(phi_q), flip(phi_k), flip(v1), flip(kv_segment_ids),
                               False, chunk))
    b, n = q.shape[0], q.shape[2]
    return token_major(_divide(num, v.dtype).reshape(b, n, q.shape[1], v.shape[-1])), None


def _scan(phi_q, phi_k, v1, seg, inclusive, chunk):
    """sum over keys j of query i's segment with j <= i (``inclusive``) or j < i of
    (phi_q_i . phi_k_j) v1_j: [b, n, h_kv, g, d_v + 1], in chunks of ``chunk``."""
    b, n = seg.shape
    size = min(chunk, n)
    pad = -n % size
    chunks = lambda x: jnp.moveaxis(  # noqa: E731
        pad_axis1(x, 0, pad).reshape(b, -1, size, *x.shape[2:]), 1, 0)
    pos = jnp.arange(size)
    order = pos[None, :] <= pos[:, None] if inclusive else pos[None, :] < pos[:, None]

    def body(carry, xs):
        state, last = carry  # S of the segment in progress [b, h_kv, m, e], its id [b]
        fq, fk, vv, s = xs
        scores = jnp.einsum("bqhgm,bkhm->bhgqk", fq, fk)
        allowed = order & (s[:, :, None] == s[:, None, :])  # [b, q, k]
        inner = jnp.einsum("bhgqk,bkhe->bqhge", scores * allowed[:, None, None], vv)
        carried = jnp.einsum("bqhgm,bhme->bqhge", fq, state)
        out = inner + carried * (s == last[:, None])[..., None, None, None]
        end = s[:, -1]  # the segment in progress after this chunk
        mine = (s == end[:, None])[..., None, None]
        state = (jnp.einsum("bkhm,bkhe->bhme", fk * mine, vv)
                 + state * (last == end)[:, None, None, None])
        return (state, end), out

    m, e = phi_k.shape[-1], v1.shape[-1]
    init = (jnp.zeros((b, phi_k.shape[2], m, e), jnp.float32), jnp.zeros((b,), seg.dtype))
    _, out = jax.lax.scan(body, init, (chunks(phi_q), chunks(phi_k), chunks(v1), chunks(seg)))
    return jnp.moveaxis(out, 0, 1).reshape(b, n + pad, *out.shape[3:])[:, :n]


def explicit(q, k, v, q_segment_ids, kv_segment_ids, phi, *, causal=False, q_offset=0):
    """The same function written out, O(q k m): weights phi(q_i) . phi(k_j) over the keys
    the mask allows, normalised per query. (outputs [b, h, q, d_v], weights [b, h, q, k])."""
    b, h, nq, _ = q.shape
    h_kv = k.shape[1]
    phi_q = _grouped(phi(token_major(q), True), h_kv)
    phi_k = phi(token_major(k), False)
    scores = jnp.einsum("bqhgm,bkhm->bhgqk", phi_q, phi_k)
    mask = make_mask(q_segment_ids, kv_segment_ids, causal=causal, q_offset=q_offset)
    scores = scores * mask[:, :, None]
    total = scores.sum(-1, keepdims=True)
    weights = jnp.where(total > 0, scores / jnp.where(total > 0, total, 1.0), 0.0)
    out = jnp.einsum("bhgqk,bkhd->bhgqd", weights, token_major(v).astype(jnp.float32))
    return (out.reshape(b, h, nq, v.shape[-1]).astype(v.dtype),
            weights.reshape(b, h, nq, k.shape[2]))


def init_state(k: jax.Array, v: jax.Array, features: int) -> dict[str, jax.Array]:
    """The decoding state of keys like k [b, h_kv, ., d_k] and values v [b, h_kv, ., d_v]
    for a feature map of ``features`` dimensions: S [b, h_kv, m, d_v + 1], zeros."""
    b, h_kv = k.shape[:2]
    return {"sums": jnp.zeros((b, h_kv, features, v.shape[-1] + 1), jnp.float32)}


def step(state: dict[str, jax.Array], q: jax.Array, k: jax.Array, v: jax.Array,
         phi: FeatureMap) -> tuple[jax.Array, dict[str, jax.Array]]:
    """One decoded token: q [b, h, 1, d_k], k [b, h_kv, 1, d_k], v [b, h_kv, 1, d_v] ->
    (outputs [b, h, 1, d_v], the state with this token's key and value added)."""
    b, h = q.shape[:2]
    h_kv = k.shape[1]
    phi_k = phi(token_major(k), False)[:, 0]  # [b, h_kv, m]
    sums = state["sums"] + jnp.einsum("bhm,bhe->bhme", phi_k, _with_ones(token_major(v))[:, 0])
    phi_q = _grouped(phi(token_major(q), True), h_kv)[:, 0]  # [b, h_kv, g, m]
    out = _divide(jnp.einsum("bhgm,bhme->bhge", phi_q, sums), v.dtype)
    return out.reshape(b, h, 1, v.shape[-1]), {"sums": sums}
