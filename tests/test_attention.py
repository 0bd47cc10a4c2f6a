"""Scaled dot-product attention and its masks, against the seeds' worked examples."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_jax import attention

Q3 = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]
V3 = [[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]]


def attend(q, k, v, mask=None):
    """[n, d] arrays as one batch and one head."""
    as4 = lambda x: jnp.asarray(x, jnp.float32)[None, :, None, :]  # noqa: E731
    out, weights = attention.dot_product_attention(as4(q), as4(k), as4(v), mask,
                                                   return_weights=True)
    return np.asarray(out[0, :, 0]), np.asarray(weights[0, 0])


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
    q = rng.normal(size=(2, 5, 4, 8)).astype(np.float32)
    k = rng.normal(size=(2, num_keys, 4, 8)).astype(np.float32)
    v = rng.normal(size=(2, num_keys, 4, 6)).astype(np.float32)
    out, _ = attention.dot_product_attention(q, k, v)
    assert out.shape == (2, 5, 4, 6)


def test_seed_example_softmax():
    # One query q = [1] against keys equal to the logits (d_k = 1, so no scaling).
    logits = [3.2, 1.1, 0.3, -0.5, 0.2]
    _, weights = attend([[1.0]], [[x] for x in logits], [[0.0]] * 5)
    np.testing.assert_allclose(weights[0], [0.80, 0.10, 0.04, 0.02, 0.04], atol=0.006)


def test_mask_padding_causal_and_segments():
    q_seg = jnp.array([[1, 1, 2, 2, 0]])
    mask = np.asarray(attention.make_mask(q_seg, q_seg, causal=True))[0, 0]
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
    q = rng.normal(size=(2, 6, 3, 4)).astype(np.float32)
    seg = jnp.array([[1, 1, 1, 2, 2, 0], [1, 1, 1, 1, 0, 0]])
    mask = attention.make_mask(seg, seg, causal=True)
    _, weights = attention.dot_product_attention(q, q, q, mask, return_weights=True)
    weights = np.asarray(weights)
    real = np.asarray(seg) > 0
    full_mask = np.broadcast_to(np.asarray(mask), weights.shape)
    for b in range(2):
        rows = weights[b][:, real[b]]  # [h, real queries, k]
        np.testing.assert_allclose(rows.sum(-1), 1.0, rtol=1e-6)
        assert np.all(rows[~full_mask[b][:, real[b]]] == 0.0)


def test_grouped_query_attention_equals_repeated_heads():
    rng = np.random.default_rng(1)
    q = rng.normal(size=(1, 4, 8, 16)).astype(np.float32)
    k = rng.normal(size=(1, 6, 2, 16)).astype(np.float32)
    v = rng.normal(size=(1, 6, 2, 16)).astype(np.float32)
    grouped, _ = attention.dot_product_attention(q, k, v)
    full, _ = attention.dot_product_attention(q, jnp.repeat(k, 4, axis=2),
                                              jnp.repeat(v, 4, axis=2))
    np.testing.assert_allclose(grouped, full, atol=1e-5)


def test_attention_dropout_zeroes_and_rescales():
    q = jnp.ones((1, 1, 1, 4))
    k = jnp.ones((1, 1000, 1, 4))
    v = jnp.ones((1, 1000, 1, 1))
    out, _ = attention.dot_product_attention(q, k, v, dropout_rate=0.5,
                                             dropout_rng=jax.random.key(0))
    # Uniform weights 1/1000; half dropped, the rest doubled: the mean survives.
    assert 0.9 < float(out[0, 0, 0, 0]) < 1.1
