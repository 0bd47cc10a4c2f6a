"""Local + global attention (the local_global kernel): its mask against one written out by
hand, the kernel against the dense kernel with that mask (values and gradients, packed rows,
grouped heads, causal or not), decoding one token against a cache, and its work growing as
(r + g) n."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.model.test_attention import (
    REAL,
    SEGMENTS,
    assert_same,
    largest_intermediate,
    qkv,
    value_and_grads,
)
from transformer_jax.model import attention
from transformer_jax.model.kernels.local_global import local_global_attention
from transformer_jax.model.masks import global_positions, make_mask
from transformer_jax.model.transformer import dot_product_attention

# A row of two sentences (5 and 4 positions) and one of padding, r = 1, g = 2. Row i: the keys
# query i may see. Sentence 1 is positions 0-4, its global positions 0 and 1; sentence 2 is
# 5-8, its global positions 5 and 6; 9 is padding.
HAND_SEGMENTS = [[1, 1, 1, 1, 1, 2, 2, 2, 2, 0]]
HAND_MASK = [
    # 0  1  2  3  4  5  6  7  8  9
    [1, 1, 1, 1, 1, 0, 0, 0, 0, 0],  # 0: global, sees its whole sentence
    [1, 1, 1, 1, 1, 0, 0, 0, 0, 0],  # 1: global
    [1, 1, 1, 1, 0, 0, 0, 0, 0, 0],  # 2: window 1-3, globals 0, 1
    [1, 1, 1, 1, 1, 0, 0, 0, 0, 0],  # 3: window 2-4, globals 0, 1
    [1, 1, 0, 1, 1, 0, 0, 0, 0, 0],  # 4: window 3-4 (5 is another sentence), globals 0, 1
    [0, 0, 0, 0, 0, 1, 1, 1, 1, 0],  # 5: global of sentence 2
    [0, 0, 0, 0, 0, 1, 1, 1, 1, 0],  # 6: global
    [0, 0, 0, 0, 0, 1, 1, 1, 1, 0],  # 7: window 6-8, globals 5, 6
    [0, 0, 0, 0, 0, 1, 1, 1, 1, 0],  # 8: window 7-8, globals 5, 6
    [0, 0, 0, 0, 0, 0, 0, 0, 0, 0],  # 9: padding sees nothing
]
# Causal: the keys up to the query among those above, every global position before it.
HAND_CAUSAL = [
    [1, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    [1, 1, 0, 0, 0, 0, 0, 0, 0, 0],
    [1, 1, 1, 0, 0, 0, 0, 0, 0, 0],
    [1, 1, 1, 1, 0, 0, 0, 0, 0, 0],
    [1, 1, 0, 1, 1, 0, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 1, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 1, 1, 0, 0, 0],
    [0, 0, 0, 0, 0, 1, 1, 1, 0, 0],
    [0, 0, 0, 0, 0, 1, 1, 1, 1, 0],
    [0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
]


def test_the_mask_of_a_small_case_is_the_one_written_by_hand():
    seg = jnp.asarray(HAND_SEGMENTS)
    np.testing.assert_array_equal(np.asarray(global_positions(seg, 2))[0],
                                  [1, 1, 0, 0, 0, 1, 1, 0, 0, 0])
    for causal, expected in ((False, HAND_MASK), (True, HAND_CAUSAL)):
        mask = np.asarray(make_mask(seg, seg, causal=causal, window=1, global_tokens=2))
        np.testing.assert_array_equal(mask[0, 0], np.asarray(expected, bool))
    # Without global positions the band alone; without a window every key of the sentence.
    band = np.asarray(make_mask(seg, seg, window=1, global_tokens=0))[0, 0]
    assert band.sum() == (2 + 3 + 3 + 3 + 2) + (2 + 3 + 3 + 2)  # the ends lose a neighbour
    full = np.asarray(make_mask(seg, seg, global_tokens=2))[0, 0]
    assert full.sum() == 25 + 16


@pytest.mark.parametrize("causal", [False, True])
def test_the_kernel_gives_the_dense_kernels_numbers_with_the_hand_mask(causal):
    q, k, v = qkv(11, q_len=10, kv_len=10)
    seg = jnp.asarray(HAND_SEGMENTS * 2)
    hand = jnp.asarray([HAND_CAUSAL if causal else HAND_MASK] * 2, bool)[:, None]
    real = np.asarray(seg) > 0
    weights = jax.random.normal(jax.random.key(0), (2, 4, 10, 6)) * real[:, None, :, None]
    kernel = lambda q, k, v: local_global_attention(  # noqa: E731
        q, k, v, seg, seg, window=1, global_tokens=2, causal=causal)
    dense = lambda q, k, v: dot_product_attention(q, k, v, hand)[0]  # noqa: E731
    assert_same(value_and_grads(kernel, q, k, v, weights), value_and_grads(dense, q, k, v, weights),
                rows=real)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window,global_tokens,block_size",
                         [(1, 1, None), (2, 3, 2), (4, 2, 16), (0, 2, None), (40, 2, None)])
def test_the_kernel_equals_dense_with_its_mask_on_packed_rows(causal, window, global_tokens,
                                                              block_size):
    q, k, v = qkv(12)
    weights = jax.random.normal(jax.random.key(1), (2, 4, 37, 6)) * REAL[:, None, :, None]
    kernel = lambda q, k, v: local_global_attention(  # noqa: E731
        q, k, v, SEGMENTS, SEGMENTS, window=window, global_tokens=global_tokens, causal=causal,
        block_size=block_size)
    mask = make_mask(SEGMENTS, SEGMENTS, causal=causal, window=window,
                     global_tokens=global_tokens)
    dense = lambda q, k, v: dot_product_attention(q, k, v, mask)[0]  # noqa: E731
    assert_same(value_and_grads(kernel, q, k, v, weights), value_and_grads(dense, q, k, v, weights),
                rows=REAL)


@pytest.mark.parametrize("step", [0, 1, 2, 5, 29])
def test_decoding_reads_the_window_and_the_global_keys_only(step):
    q, k, v = qkv(13, q_len=1, kv_len=30)
    ones_q, ones_kv = jnp.ones((2, 1), jnp.int32), jnp.ones((2, 30), jnp.int32)
    decode = jax.jit(lambda i: local_global_attention(
        q, k, v, ones_q, ones_kv, window=4, global_tokens=2, causal=True, q_offset=i))
    mask = make_mask(ones_q, ones_kv, causal=True, q_offset=step, window=4, global_tokens=2)
    np.testing.assert_allclose(decode(step), dot_product_attention(q, k, v, mask)[0], atol=1e-5)
    # The r + 1 = 5 keys of the window are sliced out and the 2 global keys gathered: no
    # array as long as the 30 cached keys, whatever the step (a global query's keys, all
    # before it, are global keys).
    assert largest_intermediate(decode, step) < 2 * 30 * 2 * 8


def test_the_work_grows_with_r_plus_g_times_n():
    heads, d_k, r, g = 2, 8, 8, 2
    sizes = []
    for n in (256, 512):
        x, seg = jnp.ones((1, heads, n, d_k)), jnp.ones((1, n), jnp.int32)
        sizes.append(largest_intermediate(jax.grad(lambda x, seg=seg: attention.attend(
            "local_global", x, x, x, seg, seg, window=r, global_tokens=g)[0].sum()), x))
    # The largest array grows in proportion to n (the dense kernel's, as n^2: 4x).
    assert sizes[1] == 2 * sizes[0]
    assert sizes[1] < heads * 512 * 512 // 4
