"""Perplexity: exp of the mean NLL, and the evaluate command's figure equal to the training
loop's."""

import functools
import math

import jax
import numpy as np
import pytest

from transformer_jax import config as config_lib
from transformer_jax.evaluation import perplexity
from transformer_jax.model.counts import init_params
from transformer_jax.model.spec import TransformerConfig
from transformer_jax.training.step import create_train_state, make_executor


def test_perplexity_is_exp_of_the_mean_nll():
    assert perplexity.perplexity(2 * 100 * math.log(3), 200) == pytest.approx(3.0)
    # A diverged model's mean NLL of 1,000 nats: e^1000 is beyond a float, so inf.
    assert perplexity.perplexity(1000.0 * 200, 200) == math.inf


def test_split_perplexity_agrees_with_the_training_loop():
    config = TransformerConfig(vocab_size=30, num_layers=1, d_model=16, d_ff=32, num_heads=2,
                               d_k=8, d_v=8, dropout_rate=0.0, max_len=16)
    params = init_params(config, jax.random.key(0))
    rng = np.random.default_rng(0)
    batches = []
    for _ in range(2):
        batch = {}
        for f in ("inputs", "targets"):
            seg = np.repeat([[1] * 10 + [2] * 4 + [0] * 2], 4, axis=0).astype(np.int32)
            batch[f] = np.where(seg > 0, rng.integers(3, 30, seg.shape), 0).astype(np.int32)
            batch[f + "_segment_ids"] = seg
            batch[f + "_positions"] = np.tile(np.r_[np.arange(10), np.arange(4), [0, 0]],
                                              (4, 1)).astype(np.int32)
        batches.append(batch)
    ours = perplexity.split_perplexity(params, config, batches)
    run = config_lib.build("base")
    run.train.devices = 2  # the training loop's evaluation over two devices
    state = create_train_state(run, config, jax.random.key(0)).replace(params=params)
    executor = make_executor(run, config, state)
    theirs = perplexity.loss_over_batches(
        functools.partial(executor.evaluate, executor.place(state)), batches)
    assert ours["tokens"] == theirs["tokens"] == 2 * 4 * 14
    assert ours["perplexity"] == pytest.approx(theirs["perplexity"], rel=1e-5)
