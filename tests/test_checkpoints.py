"""Checkpoint averaging: the mean of the last N checkpoints' parameters, as the paper does
(the last 5 for the base model, the last 20 for the big one)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_jax import checkpoints, config as config_lib, train
from transformer_jax.errors import UserError
from transformer_jax.model import TransformerConfig

TINY = TransformerConfig(vocab_size=40, num_layers=1, d_model=16, d_ff=32, num_heads=2, d_k=8,
                         d_v=8, dropout_rate=0.0, max_len=16)


@pytest.fixture(scope="module")
def state():
    return train.create_train_state(config_lib.build("base"), TINY, jax.random.key(0))


def save_all(workdir, state, params_by_step, keep=5):
    ckpts = checkpoints.Checkpoints(workdir, keep=keep)
    for step, params in params_by_step.items():
        ckpts.save(step, state.replace(params=params, step=jnp.asarray(step)), None,
                   {"vocab_size": TINY.vocab_size})
    ckpts.wait()
    return ckpts


def template_of(params):
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), params)


def scaled(params, factor):
    return jax.tree.map(lambda x: x * factor + factor, params)


def test_averaging_identical_checkpoints_returns_the_same_parameters(tmp_path, state):
    ckpts = save_all(tmp_path, state, {10: state.params, 20: state.params, 30: state.params})
    mean, steps = ckpts.average_params(template_of(state.params), 3)
    assert steps == [10, 20, 30]
    for a, b in zip(jax.tree.leaves(mean), jax.tree.leaves(state.params), strict=True):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    ckpts.close()


def test_averaging_takes_the_mean_of_the_last_n(tmp_path, state):
    p = state.params
    ckpts = save_all(tmp_path, state, {1: scaled(p, 100.0), 2: scaled(p, 1.0),
                                       3: scaled(p, 2.0), 4: scaled(p, 6.0)})
    mean, steps = ckpts.average_params(template_of(p), 3)
    assert steps == [2, 3, 4]  # step 1 (x 100) is not among the last 3
    for a, b in zip(jax.tree.leaves(mean), jax.tree.leaves(scaled(p, 3.0)), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)  # (1 + 2 + 6) / 3 = 3
    latest, _ = ckpts.average_params(template_of(p), 1)
    for a, b in zip(jax.tree.leaves(latest), jax.tree.leaves(scaled(p, 6.0)), strict=True):
        np.testing.assert_array_equal(a, b)
    ckpts.close()


def test_averaging_more_checkpoints_than_kept_is_refused(tmp_path, state):
    ckpts = save_all(tmp_path, state, {10: state.params, 20: state.params})
    with pytest.raises(UserError, match=r"last 5 checkpoints: .* holds 2 \(steps 10, 20\)"):
        ckpts.average_params(template_of(state.params), 5)
    ckpts.close()


def test_the_papers_averaging_is_kept_by_default():
    assert config_lib.build("base").train.keep_checkpoints == 5
    assert config_lib.build("big").train.keep_checkpoints == 20
