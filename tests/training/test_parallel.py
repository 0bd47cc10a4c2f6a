"""pmap and jit-over-a-mesh give the single-device result on the same global batch."""

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from transformer_jax import config as config_lib
from transformer_jax.training import parallel
from transformer_jax.training.step import create_train_state

from ..helpers import TINY, random_batch, run_steps

BATCHES = [random_batch(16, 24, seed) for seed in range(3)]
# Adam moves every weight by about lr * g / (|g| + eps) on its first steps. A weight whose
# gradient is at float32 rounding level (a ReLU unit alive for one token: |g| ~ 1e-9, and
# rounding differences between summation orders ~ 1e-8) therefore moves by up to a full
# step in a direction the summation order decides. With eps = 1e-4 such a weight stays put,
# so the comparison tests the parallel arithmetic, not that amplification; the gradient
# norms are compared too.
EPS = 1e-4


@pytest.fixture(scope="module")
def one_device():
    return run_steps(BATCHES, eps=EPS, with_grad_norms=True)


@pytest.mark.parametrize("kind,devices,model_parallel", [
    ("pmap", 8, 1),
    ("sharded", 1, 1),
    ("sharded", 8, 1),
    ("sharded", 8, 2),  # 4-way data x 2-way model: heads and d_ff split
])
def test_same_loss_and_params_as_one_device(one_device, kind, devices, model_parallel):
    assert jax.local_device_count() == 8, "conftest sets 8 fake CPU devices"
    losses1, params1, norms1 = one_device
    losses, params, norms = run_steps(BATCHES, eps=EPS, parallel_kind=kind, devices=devices,
                                      model_parallel=model_parallel, with_grad_norms=True)
    np.testing.assert_allclose(losses, losses1, rtol=1e-5)
    np.testing.assert_allclose(norms, norms1, rtol=1e-5)
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(params1), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5)
    assert losses1[2] < losses1[0]


def test_model_axis_splits_heads_and_ffn():
    config = config_lib.build("base")
    state = create_train_state(config, TINY, jax.random.key(0))
    mesh = parallel.make_mesh(2, jax.devices()[:4])
    shardings = parallel.state_shardings(state, mesh)
    layer = shardings.params["encoder"]["layer_0"]
    assert layer["self_attention"]["qkv"]["kernel"].spec == P(None, "model", None)
    assert layer["self_attention"]["out"]["kernel"].spec == P("model", None)
    assert layer["ffn"]["w1"]["kernel"].spec == P(None, "model")
    assert layer["ffn"]["w2"]["kernel"].spec == P("model", None)
    assert shardings.params["shared_embedding"]["embedding"].spec == P()
    # Adam's moments follow their parameters.
    mu = shardings.opt_state[0].mu["encoder"]["layer_0"]["ffn"]["w1"]["kernel"]
    assert mu.spec == P(None, "model")
