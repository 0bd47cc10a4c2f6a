"""Scaled dot-product attention and its masks, against the seeds' worked examples; the
blockwise, local and fused kernels against the dense one."""

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_jax.model import attention, masks
from transformer_jax.model.kernels.blockwise import blockwise_attention
from transformer_jax.model.kernels.local_global import local_global_attention
from transformer_jax.model.masks import make_mask
from transformer_jax.model.transformer import dot_product_attention

from .. import needs

Q3 = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]
V3 = [[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]]


def attend(q, k, v, mask=None):
    """[n, d] arrays as one batch and one head."""
    as4 = lambda x: jnp.asarray(x, jnp.float32)[None, None]  # noqa: E731
    out, weights = dot_product_attention(as4(q), as4(k), as4(v), mask, return_weights=True)
    return np.asarray(out[0, 0]), np.asarray(weights[0, 0])


def test_seed_example_three_tokens():
    out, weights = attend(Q3, Q3, V3)
    np.testing.assert_allclose(weights[0], [0.40, 0.20, 0.40], atol=0.005)
    np.testing.assert_allclose(out[0], [0.80, 0.80], atol=0.005)


def test_seed_example_cross_attention_has_one_row_per_query():
    out, _ = attend([[1.0, 0.0], [0.0, 1.0]], Q3, V3)
    np.testing.assert_allclose(out, [[0.80, 0.80], [0.60, 1.20]], atol=0.005)


@pytest.mark.parametrize("num_keys", [1, 3, 7, 50])
def test_cross_attention_rows_follow_queries_not_keys(num_keys):
    rng = np.random.default_rng(num_keys)
    q = rng.normal(size=(2, 4, 5, 8)).astype(np.float32)
    k = rng.normal(size=(2, 4, num_keys, 8)).astype(np.float32)
    v = rng.normal(size=(2, 4, num_keys, 6)).astype(np.float32)
    mask = rng.random((2, 1, 5, num_keys)) < 0.6
    mask[..., 0] = True  # every query sees at least one key
    out, _ = dot_product_attention(q, k, v, mask)
    assert out.shape == (2, 4, 5, 6)  # one row per query, whatever the number of keys
    # The formula in float64: softmax over the keys each query sees, times V.
    logits = np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), k) / np.sqrt(8)
    logits = np.where(mask, logits, -np.inf)
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    np.testing.assert_allclose(out, weights @ v, atol=1e-5)
    # Keys are a set: reordering them with their values and mask columns changes nothing.
    order = rng.permutation(num_keys)
    shuffled, _ = dot_product_attention(q, k[:, :, order], v[:, :, order], mask[..., order])
    np.testing.assert_allclose(shuffled, out, atol=1e-5)
    # Queries are not: reordering them reorders the output rows.
    rows = rng.permutation(5)
    reordered, _ = dot_product_attention(q[:, :, rows], k, v, mask[:, :, rows])
    np.testing.assert_allclose(reordered, np.asarray(out)[:, :, rows], atol=1e-5)


def test_seed_example_softmax():
    # One query q = [1] against keys equal to the logits (d_k = 1, so no scaling).
    logits = [3.2, 1.1, 0.3, -0.5, 0.2]
    _, weights = attend([[1.0]], [[x] for x in logits], [[0.0]] * 5)
    np.testing.assert_allclose(weights[0], [0.80, 0.10, 0.04, 0.02, 0.04], atol=0.006)


def test_mask_padding_causal_and_segments():
    q_seg = jnp.array([[1, 1, 2, 2, 0]])
    mask = np.asarray(make_mask(q_seg, q_seg, causal=True))[0, 0]
    expected = np.array([
        [1, 0, 0, 0, 0],
        [1, 1, 0, 0, 0],
        [0, 0, 1, 0, 0],
        [0, 0, 1, 1, 0],
        [0, 0, 0, 0, 0],  # a padding query sees nothing
    ], bool)
    np.testing.assert_array_equal(mask, expected)


def test_masked_positions_get_zero_weight_and_rows_sum_to_one():
    rng = np.random.default_rng(0)
    q = rng.normal(size=(2, 3, 6, 4)).astype(np.float32)
    seg = jnp.array([[1, 1, 1, 2, 2, 0], [1, 1, 1, 1, 0, 0]])
    mask = make_mask(seg, seg, causal=True)
    _, weights = dot_product_attention(q, q, q, mask, return_weights=True)
    weights = np.asarray(weights)
    real = np.asarray(seg) > 0
    full_mask = np.broadcast_to(np.asarray(mask), weights.shape)
    for b in range(2):
        rows = weights[b][:, real[b]]  # [h, real queries, k]
        np.testing.assert_allclose(rows.sum(-1), 1.0, rtol=1e-6)
        assert np.all(rows[~full_mask[b][:, real[b]]] == 0.0)


def test_grouped_query_attention_equals_repeated_heads():
    rng = np.random.default_rng(1)
    q = rng.normal(size=(1, 8, 4, 16)).astype(np.float32)
    k = rng.normal(size=(1, 2, 6, 16)).astype(np.float32)
    v = rng.normal(size=(1, 2, 6, 16)).astype(np.float32)
    grouped, _ = dot_product_attention(q, k, v)
    full, _ = dot_product_attention(q, jnp.repeat(k, 4, axis=1), jnp.repeat(v, 4, axis=1))
    np.testing.assert_allclose(grouped, full, atol=1e-5)


def test_attention_dropout_zeroes_and_rescales():
    from transformer_jax.model.dropout import keep_mask

    # Equal logits give weights of exactly 1/16; V = I reads each weight out on its own
    # column. With rate 0.5 a kept weight is doubled to exactly 1/8, a dropped one is 0;
    # without dropout every entry would be 1/16.
    q = jnp.zeros((1, 2, 3, 4))  # 2 heads, 3 queries
    k = jnp.asarray(np.random.default_rng(0).normal(size=(1, 2, 16, 4)), jnp.float32)
    v = jnp.broadcast_to(jnp.eye(16), (1, 2, 16, 16))
    key = jax.random.key(0)
    out, weights = dot_product_attention(q, k, v, dropout_rate=0.5, dropout_rng=key,
                                         return_weights=True)
    np.testing.assert_array_equal(weights, np.full((1, 2, 3, 16), 1 / 16))  # before dropout
    out = np.asarray(out)
    assert set(np.unique(out)) == {0.0, 0.125}
    # The weights dropped are those of the documented mask (one per head, query and key)...
    keep = np.asarray(keep_mask(key, (1, 2, 3, 16), 0.5))
    np.testing.assert_array_equal(out, np.where(keep, 0.125, 0.0))
    # ...which differs between heads and between queries, and drops about half of them.
    assert not np.array_equal(keep[0, 0], keep[0, 1])
    assert not np.array_equal(keep[0, 0, 0], keep[0, 0, 1])
    assert 0.25 < 1 - keep.mean() < 0.75
    # Without a key (evaluation) nothing is dropped.
    plain, _ = dot_product_attention(q, k, v, dropout_rate=0.5)
    np.testing.assert_array_equal(plain, np.full((1, 2, 3, 16), 1 / 16))


# ----------------------------------------------------------------------------------------
# Blockwise, local and fused kernels: the dense kernel's numbers by other roads.

# Two rows of 37 positions: a packed row (segments 1 and 2, then padding) and a padded one.
# 37 is no multiple of the 8-wide tiles, so the last tile is padded too.
SEGMENTS = jnp.array([[1] * 10 + [2] * 20 + [0] * 7, [1] * 30 + [0] * 7])
REAL = np.asarray(SEGMENTS) > 0


def qkv(seed, q_len=37, kv_len=37, heads=4, kv_heads=2, d_k=8, d_v=6):
    """Random [b, h, q, d_k], [b, h_kv, k, d_k], [b, h_kv, k, d_v] (grouped: 2 queries/head)."""
    rng = np.random.default_rng(seed)
    normal = lambda *shape: jnp.asarray(rng.normal(size=(2, *shape)), jnp.float32)  # noqa: E731
    return normal(heads, q_len, d_k), normal(kv_heads, kv_len, d_k), normal(kv_heads, kv_len, d_v)


def by_token(x):
    """[b, h, n, d] -> [b, n, h, d], so that a [b, n] boolean picks rows."""
    return np.asarray(x).swapaxes(1, 2)


def blockwise_kernel(q_seg, kv_seg, **kwargs):
    return lambda q, k, v: blockwise_attention(  # noqa: E731
        q, k, v, q_seg, kv_seg, **kwargs)


def dense(q, k, v, q_seg, kv_seg, causal=False, q_offset=0, window=None):
    mask = make_mask(q_seg, kv_seg, causal=causal, q_offset=q_offset, window=window)
    return dot_product_attention(q, k, v, mask)[0]


def value_and_grads(kernel, q, k, v, weights):
    """Outputs and d/d(q, k, v) of sum(outputs * weights), a loss that reads every output."""
    loss = lambda q, k, v: jnp.sum(kernel(q, k, v) * weights)  # noqa: E731
    return jax.jit(lambda q, k, v: (kernel(q, k, v), jax.grad(loss, argnums=(0, 1, 2))(q, k, v)))(
        q, k, v)


def assert_same(a, b, rows=None, atol=1e-5):
    (out_a, grads_a), (out_b, grads_b) = a, b
    rows = slice(None) if rows is None else rows
    np.testing.assert_allclose(by_token(out_a)[rows], by_token(out_b)[rows], atol=atol)
    for name, ga, gb in zip("qkv", grads_a, grads_b, strict=True):
        np.testing.assert_allclose(ga, gb, atol=atol, err_msg=f"d/d{name}")


def largest_intermediate(fn, *args) -> int:
    """Elements of the largest array any step of ``fn`` produces, loop bodies included."""
    def walk(jaxpr):
        sizes = [0]
        for eqn in jaxpr.eqns:
            sizes += [int(np.prod(var.aval.shape)) for var in eqn.outvars
                      if hasattr(var.aval, "shape")]
            for param in eqn.params.values():
                for sub in param if isinstance(param, list | tuple) else [param]:
                    inner = getattr(sub, "jaxpr", sub)
                    if hasattr(inner, "eqns"):
                        sizes.append(walk(inner))
        return max(sizes)
    return walk(jax.make_jaxpr(fn)(*args).jaxpr)


@pytest.mark.parametrize("causal", [False, True])
def test_blockwise_equals_dense_with_padding_segments_and_grouped_heads(causal):
    q, k, v = qkv(2)
    weights = jax.random.normal(jax.random.key(0), (2, 4, 37, 6))
    blockwise = blockwise_kernel(SEGMENTS, SEGMENTS, causal=causal, block_size=8)
    reference = lambda q, k, v: dense(q, k, v, SEGMENTS, SEGMENTS, causal)  # noqa: E731
    # Every row, padding queries included: they too spread their weight as the dense kernel.
    assert_same(value_and_grads(blockwise, q, k, v, weights),
                value_and_grads(reference, q, k, v, weights))


def test_blockwise_cross_attention_with_more_keys_than_queries():
    q, k, v = qkv(3, q_len=13, kv_len=29)
    q_seg = jnp.array([[1] * 13, [1] * 9 + [0] * 4])
    kv_seg = jnp.array([[1] * 29, [1] * 20 + [0] * 9])
    weights = jax.random.normal(jax.random.key(1), (2, 4, 13, 6))
    blockwise = blockwise_kernel(q_seg, kv_seg, block_size=8)
    assert_same(value_and_grads(blockwise, q, k, v, weights),
                value_and_grads(lambda q, k, v: dense(q, k, v, q_seg, kv_seg), q, k, v, weights))


@pytest.mark.parametrize("step", [0, 5, 22])
def test_blockwise_decoding_one_query_against_the_cache(step):
    # Decoding: one new query at position `step` against a 24-slot cache whose later slots
    # are still empty (the causal mask at q_offset hides them), the offset a traced value.
    q, k, v = qkv(4, q_len=1, kv_len=24)
    ones_q, ones_kv = jnp.ones((2, 1), jnp.int32), jnp.ones((2, 24), jnp.int32)
    blockwise = jax.jit(lambda i: blockwise_kernel(
        ones_q, ones_kv, causal=True, q_offset=i, block_size=8)(q, k, v))
    np.testing.assert_allclose(blockwise(step), dense(q, k, v, ones_q, ones_kv, True, step),
                               atol=1e-5)


def test_blockwise_never_holds_an_n_by_n_array():
    n, heads, d_k = 256, 2, 8
    x, seg = jnp.ones((1, heads, n, d_k)), jnp.ones((1, n), jnp.int32)
    train = lambda kernel: jax.grad(  # noqa: E731
        lambda x: attention.attend(kernel, x, x, x, seg, seg, block_size=32)[0].sum())
    assert largest_intermediate(train("dense"), x) == heads * n * n
    # Forward and backward: nothing larger than the inputs themselves (O(n d)).
    assert largest_intermediate(train("blockwise"), x) == heads * n * d_k


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window,block_size", [(1, None), (5, 2), (7, 16), (40, None)])
def test_local_equals_dense_with_a_band_mask(causal, window, block_size):
    q, k, v = qkv(5, kv_heads=4)
    # Padding queries see nothing and their outputs are never read: the loss skips them.
    weights = jax.random.normal(jax.random.key(2), (2, 4, 37, 6)) * REAL[:, None, :, None]
    local = lambda q, k, v: local_global_attention(  # noqa: E731
        q, k, v, SEGMENTS, SEGMENTS, window=window, global_tokens=0, causal=causal,
        block_size=block_size)
    banded = lambda q, k, v: dense(q, k, v, SEGMENTS, SEGMENTS, causal, window=window)  # noqa: E731
    assert_same(value_and_grads(local, q, k, v, weights),
                value_and_grads(banded, q, k, v, weights), rows=REAL)


def test_band_mask_seed_example():
    # r = 1: each query sees itself and its two neighbours; causal: itself and the one before.
    ones = jnp.ones((1, 4))
    band = np.asarray(make_mask(ones, ones, window=1))[0, 0]
    np.testing.assert_array_equal(band, [[1, 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 1], [0, 0, 1, 1]])
    causal = np.asarray(make_mask(ones, ones, causal=True, window=1))[0, 0]
    np.testing.assert_array_equal(causal.sum(1), [1, 2, 2, 2])


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("step", [0, 3, 29])
def test_local_decoding_slices_only_the_window(causal, step):
    q, k, v = qkv(6, q_len=1, kv_len=30)
    ones_q, ones_kv = jnp.ones((2, 1), jnp.int32), jnp.ones((2, 30), jnp.int32)
    local = jax.jit(lambda i: local_global_attention(
        q, k, v, ones_q, ones_kv, window=4, global_tokens=0, causal=causal, q_offset=i))
    np.testing.assert_allclose(local(step), dense(q, k, v, ones_q, ones_kv, causal, step, 4),
                               atol=1e-5)
    # It slices 2r + 1 = 9 keys (causal: r + 1 = 5) of the 30 out of the cache, and that slice,
    # [b, h_kv, width, d_k], is the largest array it makes: never [b, h_kv, 30, ...].
    width = 5 if causal else 9
    assert largest_intermediate(local, step) == 2 * width * 2 * 8


def test_local_work_grows_with_r_times_n():
    heads, d_k, r = 2, 8, 16
    sizes = []
    for n in (256, 512):
        x, seg = jnp.ones((1, heads, n, d_k)), jnp.ones((1, n), jnp.int32)
        sizes.append(largest_intermediate(jax.grad(lambda x, seg=seg: attention.attend(
            "local", x, x, x, seg, seg, window=r)[0].sum()), x))
    # The largest array is the scores of every query against its 3r reachable keys.
    assert sizes == [heads * 256 * 3 * r, heads * 512 * 3 * r]


@pytest.mark.skipif(jax.default_backend() == "gpu", reason=needs.OFF_GPU_FALLBACK)
@pytest.mark.parametrize("causal", [False, True])
def test_cudnn_kernel_falls_back_to_xla_off_gpu_with_one_log_line(causal, caplog, monkeypatch):
    monkeypatch.setattr(masks, "_logged", set())
    q, k, v = qkv(7, d_v=8)
    with caplog.at_level(logging.INFO, logger="transformer_jax.model.masks"):
        fused = [attention.attend("cudnn", q, k, v, SEGMENTS, SEGMENTS, causal=causal)[0]
                 for _ in range(2)]
    np.testing.assert_allclose(by_token(fused[1])[REAL],
                               by_token(dense(q, k, v, SEGMENTS, SEGMENTS, causal))[REAL],
                               atol=1e-5)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "needs a GPU" in lines[0] and "XLA" in lines[0]


def test_attend_hands_a_call_for_weights_to_the_dense_kernel(caplog, monkeypatch):
    monkeypatch.setattr(masks, "_logged", set())
    q, k, v = qkv(9, kv_heads=4)
    with caplog.at_level(logging.INFO, logger="transformer_jax.model.masks"):
        out, weights = attention.attend("local", q, k, v, SEGMENTS, SEGMENTS, window=3,
                                        return_weights=True)
    # The local kernel's band, computed densely: each real query weighs at most 7 keys.
    band = make_mask(SEGMENTS, SEGMENTS, window=3)
    expected, expected_weights = dot_product_attention(q, k, v, band, return_weights=True)
    np.testing.assert_allclose(out, expected, atol=1e-6)
    np.testing.assert_allclose(weights, expected_weights, atol=1e-6)
    assert int(np.max(np.sum(np.asarray(weights)[:, :, REAL[0]] > 0, -1))) == 7
    assert any("dense kernel computes them" in r.getMessage() for r in caplog.records)
    # Without a window ("local" asked for cross-attention) the blockwise kernel runs.
    blockwise, none = attention.attend("local", q, k, v, SEGMENTS, SEGMENTS)
    assert none is None
    np.testing.assert_allclose(blockwise, dense(q, k, v, SEGMENTS, SEGMENTS), atol=1e-5)


def test_attend_applies_dropout_in_the_dense_kernel_only():
    q, k, v = qkv(10, kv_heads=4)
    key = jax.random.key(3)
    plain, _ = attention.attend("dense", q, k, v, SEGMENTS, SEGMENTS)
    dropped, _ = attention.attend("dense", q, k, v, SEGMENTS, SEGMENTS, dropout_rate=0.5,
                                  dropout_rng=key)
    assert not np.allclose(plain, dropped)
    with pytest.raises(ValueError, match=r"supports it \(dense\); the 'blockwise' kernel has"):
        attention.attend("blockwise", q, k, v, SEGMENTS, SEGMENTS, dropout_rate=0.5,
                         dropout_rng=key)
