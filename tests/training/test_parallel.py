"""pmap and jit-over-a-mesh give the single-device result on the same global batch, and
train alike with dropout on, with and without accumulated micro-batches."""

import re

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from transformer_jax import config as config_lib
from transformer_jax.training import parallel
from transformer_jax.training.step import create_train_state, make_executor

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
    return run_steps(BATCHES, eps=EPS, with_grad_norms=True)  # the default path: sharded


@pytest.mark.parametrize("kind,devices,model_parallel", [
    ("pmap", 1, 1),
    ("pmap", 8, 1),
    ("sharded", 8, 1),
    ("sharded", 8, 2),  # 4-way data x 2-way model: heads and d_ff split
])
@pytest.mark.slow
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


def test_model_replicas_are_consecutive_devices_of_one_process():
    mesh = parallel.make_mesh(2)
    assert [[d.id for d in row] for row in mesh.devices] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert parallel.replica_processes(mesh) == [[0]] * 4
    assert parallel.describe_mesh(mesh) == ("mesh 4 data x 2 model over 1 process(es): each of "
                                            "4 model replica(s) within one process")


def test_unreplicate_reads_this_process_replica():
    state = create_train_state(config_lib.build("base"), TINY, jax.random.key(0))
    executor = parallel.PmapExecutor(lambda *a, **k: None, lambda *a, **k: None)
    placed = executor.place(state)
    for got, want in zip(jax.tree.leaves(executor.host_state(placed)), jax.tree.leaves(state),
                         strict=True):
        assert got.shape == np.shape(want)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("accum,model_parallel", [(1, 1), (2, 2)])
@pytest.mark.slow
def test_pmap_trains_as_sharded_with_dropout_on(accum, model_parallel):
    # Dropout on the sub-layers, the embeddings and the attention weights: a pmap device
    # draws its block of the whole batch's masks (dropout.rows_block), so over 4 steps
    # (each of `accum` micro-batches of 16 rows on 8 devices; the mesh 4 data x 2 model in
    # one case) the two paths drop the same elements. 0.3 makes a mask that differed move
    # the loss far beyond 1e-5. (flax's masks, dropout_impl "jax", are drawn alike too:
    # tests/model/test_dropout.py.)
    model_config = TINY.replace(dropout_rate=0.3, attention_dropout_rate=0.3)
    batches = [random_batch(16, 24, seed) for seed in range(4 * accum)]
    steps = ([{k: np.stack([b[k] for b in batches[i:i + accum]]) for k in batches[0]}
              for i in range(0, len(batches), accum)] if accum > 1 else batches)
    runs = {kind: run_steps(steps, eps=EPS, parallel_kind=kind, devices=8, accum=accum,
                            model_config=model_config, with_grad_norms=True,
                            model_parallel=model_parallel if kind == "sharded" else 1)
            for kind in ("pmap", "sharded")}
    (pmap_losses, pmap_params, pmap_norms) = runs["pmap"]
    (losses, params, norms) = runs["sharded"]
    np.testing.assert_allclose(pmap_losses, losses, rtol=1e-5)
    np.testing.assert_allclose(pmap_norms, norms, rtol=1e-5)
    for a, b in zip(jax.tree.leaves(pmap_params), jax.tree.leaves(params), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5)
    # Dropout was on: without it the same steps give other losses.
    plain, _ = run_steps(steps[:1], eps=EPS, devices=8, accum=accum)
    assert abs(plain[0] - losses[0]) > 1e-3


def while_bodies_and_all_reduces(hlo):
    """(names of the computations that are while-loop bodies, {computation: all-reduces in
    it}) of an optimized HLO module's text."""
    bodies = set(re.findall(r"body=%([\w.\-]+)", hlo))
    reduces, current = {}, None
    for line in hlo.splitlines():
        if line and not line.startswith(" ") and line.rstrip().endswith("{"):
            current = line.split()[1 if line.startswith("ENTRY") else 0].lstrip("%")
        elif re.search(r"\ball-reduce(-start)?\(", line):
            reduces[current] = reduces.get(current, 0) + 1
    return bodies, reduces


@pytest.mark.parametrize("kind", ["pmap", "sharded"])
@pytest.mark.slow
def test_accumulated_gradients_are_summed_over_devices_once_a_step(kind):
    # 4 micro-batches on 8 devices: the gradients are all-reduced after the micro-batches'
    # loop, not in it (jit over the mesh, left to XLA, all-reduced them in the loop).
    config = config_lib.build("base")
    config.optim.grad_accum_steps = 4
    config.train.update(parallel=kind, devices=8)
    state = jax.eval_shape(lambda: create_train_state(config, TINY, jax.random.key(0)))
    executor = make_executor(config, TINY, state)
    fields = random_batch(16, 24, 0)
    if kind == "sharded":
        batch = {k: jax.ShapeDtypeStruct((4, *v.shape), v.dtype,
                                         sharding=executor.train_batch_sharding)
                 for k, v in fields.items()}
        state = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                             state, executor.state_sharding)
    else:
        batch = {k: jax.ShapeDtypeStruct((8, 4, 2, *v.shape[1:]), v.dtype)
                 for k, v in fields.items()}
        state = jax.tree.map(lambda x: jax.ShapeDtypeStruct((8, *x.shape), x.dtype), state)
    hlo = executor._train.lower(state, batch, jax.random.key(1)).compile().as_text()
    bodies, reduces = while_bodies_and_all_reduces(hlo)
    assert bodies and sum(reduces.values()) >= 1  # a loop, and gradients summed somewhere
    assert not set(reduces) & bodies, {b: reduces[b] for b in set(reduces) & bodies}


def test_a_warning_left_in_cloud_tpu_task_id_is_not_a_cluster(monkeypatch):
    # Off a TPU VM, libtpu sets CLOUD_TPU_TASK_ID to a warning once loaded, and a sweep's
    # training processes inherit it: they must train as one process, not ask JAX to join a
    # cluster (which fails: "coordinator_address should be defined").
    calls = []
    monkeypatch.setattr(jax.distributed, "initialize", lambda *a, **k: calls.append((a, k)))
    for name in ("SLURM_JOB_ID", "OMPI_COMM_WORLD_SIZE", "TPU_WORKER_HOSTNAMES",
                 "JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CLOUD_TPU_TASK_ID", "WARNING: could not determine TPU worker number, "
                       "please set env var `TPU_WORKER_ID` manually")
    parallel.initialize_distributed()
    assert calls == []
    monkeypatch.setenv("CLOUD_TPU_TASK_ID", "3")  # a TPU VM's worker: JAX finds the rest
    collectives = jax.config.jax_cpu_collectives_implementation
    try:
        parallel.initialize_distributed()
    finally:
        jax.config.update("jax_cpu_collectives_implementation", collectives)
    assert len(calls) == 1 and calls[0][0] == ()
