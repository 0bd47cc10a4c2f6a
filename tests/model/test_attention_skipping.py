"""The blockwise kernel skips the tiles its mask hides: which tiles it keeps, that a hidden
tile is really not computed (forward and backward), and that packed rows, queries that see no
key and decoding still get the dense kernel's numbers."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.model.test_attention import assert_same, dense, qkv, value_and_grads
from transformer_jax.model.kernels import blockwise as kernel
from transformer_jax.model.masks import pad_axis1

# Three rows of 37 positions, packed with short sentences that straddle the tiles, padding at
# the ends; the last row is padding alone (every query sees nothing).
PACKED = jnp.array([[1] * 5 + [2] * 9 + [3] * 3 + [4] * 11 + [0] * 9,
                    [1] * 13 + [2] * 6 + [3] * 7 + [0] * 11,
                    [0] * 37])


def live_tiles(q_seg, kv_seg, causal, block, q_offset=0):
    """The kernel's own tile decision, as a numpy [q blocks, k blocks] array (the segment
    ids padded to whole blocks, as the kernel pads them)."""
    q_seg = pad_axis1(q_seg, 0, -q_seg.shape[1] % block)
    kv_seg = pad_axis1(kv_seg, 0, -kv_seg.shape[1] % block)
    q_pos = jnp.arange(q_seg.shape[1], dtype=jnp.int32) + q_offset
    return np.asarray(kernel._live_tiles(q_seg, kv_seg, q_pos, causal, block, block))


def test_live_tiles_of_packed_rows():
    row_a = jnp.array([[1] * 8 + [2] * 8 + [3] * 8 + [0] * 8])
    row_b = jnp.array([[1] * 16 + [2] * 16])
    # One row: its sentences' diagonal tiles only; the padding block meets nothing.
    np.testing.assert_array_equal(live_tiles(row_a, row_a, False, 8),
                                  np.diag([True, True, True, False]))
    # Two rows: a tile is kept when any row needs it (the batch shares every tile).
    both = jnp.concatenate([row_a, row_b])
    expected = np.array([[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 1], [0, 0, 1, 1]], bool)
    np.testing.assert_array_equal(live_tiles(both, both, False, 8), expected)
    np.testing.assert_array_equal(live_tiles(both, both, True, 8), np.tril(expected))
    # A sentence straddling blocks 1 and 2 (positions 12..19) keeps the tiles it spans.
    row_c = jnp.array([[1] * 12 + [2] * 8 + [3] * 12])
    np.testing.assert_array_equal(
        live_tiles(row_c, row_c, True, 8),
        np.array([[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]], bool))


def test_live_tiles_follow_a_traced_query_position():
    ones_q, ones_kv = jnp.ones((1, 1), jnp.int32), jnp.ones((1, 32), jnp.int32)
    live = jax.jit(lambda i: kernel._live_tiles(
        ones_q, ones_kv, jnp.zeros(1, jnp.int32) + i, True, 1, 8))
    # One query at position i needs the key blocks starting at or before i.
    for i, expected in [(0, [1, 0, 0, 0]), (8, [1, 1, 0, 0]), (23, [1, 1, 1, 0]),
                        (31, [1, 1, 1, 1])]:
        np.testing.assert_array_equal(np.asarray(live(i))[0], np.array(expected, bool))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("block_size", [4, 8])
def test_packed_rows_equal_dense(causal, block_size):
    q, k, v = qkv(10)
    q, k, v = (jnp.concatenate([x, x[:1] * 0.5]) for x in (q, k, v))  # a third row
    live = live_tiles(PACKED, PACKED, causal, block_size)
    assert live.sum() < live.size / 2  # most tiles are skipped: the case tests skipping
    weights = jax.random.normal(jax.random.key(3), (3, 4, 37, 6))
    blockwise = lambda q, k, v: kernel.blockwise_attention(  # noqa: E731
        q, k, v, PACKED, PACKED, causal=causal, block_size=block_size)
    reference = lambda q, k, v: dense(q, k, v, PACKED, PACKED, causal)  # noqa: E731
    got = value_and_grads(blockwise, q, k, v, weights)
    for x in (got[0], *got[1]):
        assert np.isfinite(np.asarray(x)).all()
    # Every row, the padding queries and the row of padding alone included.
    assert_same(got, value_and_grads(reference, q, k, v, weights))


def test_real_queries_that_see_no_key_equal_dense():
    # Cross-attention where segment 3's queries find no key of their own: they too get
    # uniform weights over every key, whether their tiles are computed or skipped.
    q, k, v = qkv(11, q_len=12, kv_len=20)
    q_seg = jnp.array([[1] * 4 + [3] * 8, [3] * 4 + [1] * 8])
    kv_seg = jnp.array([[1] * 6 + [2] * 10 + [0] * 4, [2] * 8 + [1] * 12])
    weights = jax.random.normal(jax.random.key(4), (2, 4, 12, 6))
    blockwise = lambda q, k, v: kernel.blockwise_attention(  # noqa: E731
        q, k, v, q_seg, kv_seg, block_size=4)
    assert_same(value_and_grads(blockwise, q, k, v, weights),
                value_and_grads(lambda q, k, v: dense(q, k, v, q_seg, kv_seg), q, k, v, weights))


@pytest.mark.parametrize("causal", [False, True])
def test_a_hidden_tile_is_not_computed(causal):
    # Keys 8..15 are NaN. Queries 0..7 cannot see them (another sentence; or, causal, the
    # future), so the tile (queries 0..7, keys 8..15) is hidden. Were it computed, its zero
    # weights would still meet the NaNs: 0 * NaN in the forward's P V and the backward's
    # dS K. Finite outputs and d/dq for queries 0..7 prove it was skipped both ways.
    q, k, v = qkv(12, q_len=16, kv_len=16)
    seg = jnp.array([[1] * 16] * 2) if causal else jnp.array([[1] * 8 + [2] * 8] * 2)
    poison = jnp.arange(16)[None, None, :, None] >= 8
    k_nan, v_nan = (jnp.where(poison, jnp.nan, x) for x in (k, v))
    weights = jax.random.normal(jax.random.key(5), (2, 4, 16, 6))
    blockwise = lambda q, k, v: kernel.blockwise_attention(  # noqa: E731
        q, k, v, seg, seg, causal=causal, block_size=8)
    out, (d_q, d_k, d_v) = value_and_grads(blockwise, q, k_nan, v_nan, weights)
    clean_out, (clean_d_q, clean_d_k, clean_d_v) = value_and_grads(blockwise, q, k, v, weights)
    assert np.isnan(np.asarray(out[:, :, 8:])).all()  # queries 8..15 do see the NaNs
    np.testing.assert_allclose(out[:, :, :8], clean_out[:, :, :8], atol=1e-6)
    np.testing.assert_allclose(d_q[:, :, :8], clean_d_q[:, :, :8], atol=1e-6)
    if not causal:
        # Nor the tile (queries 8..15, keys 0..7), whose weights are NaN: d/dk and d/dv of
        # keys 0..7 stay those of the clean inputs.
        np.testing.assert_allclose(d_k[:, :, :8], clean_d_k[:, :, :8], atol=1e-6)
        np.testing.assert_allclose(d_v[:, :, :8], clean_d_v[:, :, :8], atol=1e-6)


@pytest.mark.parametrize("step", [3, 12, 23])
def test_decoding_a_packed_cache_equals_dense(step):
    # One query at traced position `step` against a 24-slot cache: row 0 packs sentence 1
    # (slots 0..9) before sentence 2, whose query before slot 10 sees no key at all.
    q, k, v = qkv(13, q_len=1, kv_len=24)
    q_seg = jnp.array([[2], [1]])
    kv_seg = jnp.array([[1] * 10 + [2] * 14, [1] * 24])
    blockwise = jax.jit(lambda i: kernel.blockwise_attention(
        q, k, v, q_seg, kv_seg, causal=True, q_offset=i, block_size=8))
    np.testing.assert_allclose(blockwise(step), dense(q, k, v, q_seg, kv_seg, True, step),
                               atol=1e-5)
