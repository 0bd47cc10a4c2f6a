"""Dropout masks: the rate, the scaling, independence, sharding and the flax reference."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from transformer_jax import config as config_lib
from transformer_jax.errors import ConfigError
from transformer_jax.model.dropout import Dropout, dropout, keep_mask, rows_block

SHAPE = (64, 128, 128)  # 1,048,576 elements


def _sigma(p: float, n: int) -> float:
    return float(np.sqrt(p * (1 - p) / n))


@pytest.mark.parametrize("rate", [0.1, 0.3, 0.5])
def test_hash_mask_drops_the_rate(rate):
    from scipy.stats import binom

    keep = np.asarray(keep_mask(jax.random.key(0), SHAPE, rate)).reshape(-1, SHAPE[-1])
    rows, cols = keep.shape  # 8192 rows of 128 elements
    # Were each element dropped independently with probability `rate`, the number dropped
    # would be Binomial(n, rate); a count outside its central 1 - 1e-6 is (almost surely) a
    # mask that does not drop the rate.
    low, high = binom.interval(1 - 1e-6, keep.size, rate)
    assert low <= keep.size - keep.sum() <= high
    # No striping by index: every column position (one element in 128) is dropped at the rate,
    # each count within its Binomial(8192, rate) interval (1e-6 / 128: all 128 at once) ...
    low, high = binom.interval(1 - 1e-6 / cols, rows, rate)
    assert np.all((low <= rows - keep.sum(axis=0)) & (rows - keep.sum(axis=0) <= high))
    # ... and the rows' counts spread as Binomial(128, rate) ones do: their variance is
    # 128 rate (1 - rate) within 10% (its relative standard error over 8192 rows is ~1.6%).
    per_row = cols - keep.sum(axis=1)
    assert abs(per_row.var() / binom.var(cols, rate) - 1) < 0.1


def test_hash_mask_bits_are_uncorrelated():
    keep = np.asarray(keep_mask(jax.random.key(1), SHAPE, 0.5)).astype(np.float64)
    flat = keep.ravel() - keep.mean()
    tolerance = 5 / np.sqrt(flat.size)
    for shift in (1, 2, SHAPE[-1], SHAPE[-1] * SHAPE[-2]):  # neighbours, rows, matrices
        corr = np.mean(flat[:-shift] * flat[shift:]) / np.var(flat)
        assert abs(corr) < tolerance, shift
    # Masks from different keys (other layers, other steps) agree no more than chance.
    other = np.asarray(keep_mask(jax.random.key(2), SHAPE, 0.5)).astype(np.float64)
    assert abs(np.mean(keep == other) - 0.5) < 5 * _sigma(0.5, keep.size)


def test_dropout_keeps_the_expectation():
    x = jnp.full(SHAPE, 3.0)
    y = np.asarray(dropout(x, 0.1, jax.random.key(3)))
    np.testing.assert_allclose(np.unique(y), [0.0, 3.0 / 0.9], rtol=1e-6)
    assert abs(y.mean() - 3.0) < 5 * 3.0 / 0.9 * _sigma(0.1, y.size)
    np.testing.assert_array_equal(dropout(x, 0.0, jax.random.key(3)), x)
    np.testing.assert_array_equal(dropout(x, 1.0, jax.random.key(3)), jnp.zeros(SHAPE))


def test_sharded_mask_equals_the_single_device_mask():
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("data", "model"))
    sharding = NamedSharding(mesh, P("data", None, "model"))
    make = jax.jit(lambda key: keep_mask(key, SHAPE, 0.1), out_shardings=sharding)
    sharded = make(jax.random.key(4))
    assert len(sharded.sharding.device_set) == 8
    np.testing.assert_array_equal(np.asarray(sharded),
                                  np.asarray(keep_mask(jax.random.key(4), SHAPE, 0.1)))


@pytest.mark.parametrize("impl", ["hash", "jax"])
def test_a_pmap_device_draws_its_block_of_the_whole_batch_mask(impl):
    # 4 devices of 4 rows each: together the mask of the 16 rows jit would draw at once.
    key, shape = jax.random.key(6), (16, 8, 32)

    def per_device(_):
        with rows_block(jax.lax.axis_index("i"), 4):
            return keep_mask(key, (4, *shape[1:]), 0.3, impl)

    blocks = jax.pmap(per_device, axis_name="i", devices=jax.devices()[:4])(jnp.zeros(4))
    whole = np.asarray(keep_mask(key, shape, 0.3, impl))
    np.testing.assert_array_equal(np.asarray(blocks).reshape(shape), whole)
    assert 0 < whole.mean() < 1
    # Outside the block, the mask is an array's own again: the first block's.
    np.testing.assert_array_equal(keep_mask(key, (4, *shape[1:]), 0.3, impl), whole[:4])


def test_jax_impl_is_flax_dropout():
    x = jnp.arange(4096, dtype=jnp.float32).reshape(64, 64)
    rngs = {"dropout": jax.random.key(5)}
    ours = Dropout(0.2, impl="jax").apply({}, x, deterministic=False, rngs=rngs)
    flax = nn.Dropout(0.2).apply({}, x, deterministic=False, rngs=rngs)
    np.testing.assert_array_equal(ours, flax)
    hashed = Dropout(0.2).apply({}, x, deterministic=False, rngs=rngs)
    assert not np.array_equal(hashed, flax)
    np.testing.assert_array_equal(Dropout(0.2).apply({}, x, deterministic=True), x)


def test_unknown_impl_is_refused():
    with pytest.raises(ValueError, match="'philox'"):
        keep_mask(jax.random.key(0), (4,), 0.1, impl="philox")
    config = config_lib.base_config()
    config.model.dropout_impl = "philox"
    with pytest.raises(ConfigError, match="model.dropout_impl"):
        config_lib.validate(config)
