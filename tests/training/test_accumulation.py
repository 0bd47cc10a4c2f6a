"""Gradient accumulation equals one big batch: the loss of a step of k micro-batches is
normalised by the target tokens of all k, as the paper's per-token loss is."""

import json
import logging
import struct

import jax
import numpy as np
import optax
import pytest

from transformer_jax import config as config_lib
from transformer_jax.data import pipeline
from transformer_jax.io import checkpoints, layout, workdirs
from transformer_jax.model import counts
from transformer_jax.model.losses import batch_sums
from transformer_jax.model.spec import TransformerConfig
from transformer_jax.model.transformer import Transformer
from transformer_jax.training import train
from transformer_jax.training.step import create_train_state, make_executor

from ..helpers import TINY, TINY_PEAK_FLOPS, random_batch, tiny_config

# Micro-batches of unequal token counts: 4 rows of 10 + 12 target tokens, then 4 rows of
# 3 + 2 (88 against 20 tokens). Averaging per-micro-batch means would weigh each of the
# second's tokens 4.4 times as much as each of the first's.
LONG = random_batch(4, 24, 5, fixed_lengths=(10, 12))
SHORT = random_batch(4, 24, 6, fixed_lengths=(3, 2))
BIG = {k: np.concatenate([LONG[k], SHORT[k]]) for k in LONG}
# Adam's first steps move a weight by about lr * g / (|g| + eps): with the paper's 1e-9, a
# weight whose gradient is at rounding level moves by a step whose sign the summation order
# decides. 1e-4 keeps such weights still, so the updates compare the arithmetic.
EPS = 1e-4


def train_state_after(steps, accum):
    """The host train state after ``steps`` optimizer steps of TINY, each a list of
    ``accum`` micro-batches, on one device of the default executor."""
    config = config_lib.build("base")
    config.optim.update(warmup_steps=10, eps=EPS, grad_accum_steps=accum)
    config.train.devices = 1
    state = create_train_state(config, TINY, jax.random.key(0))
    executor = make_executor(config, TINY, state)
    placed = executor.place(state)
    for micro_batches in steps:
        placed, _ = executor.train(placed, stack(micro_batches), jax.random.key(1))
    return jax.tree.map(np.asarray, executor.host_state(placed))


def stack(micro_batches):
    """One step's batch: one micro-batch as it is, several stacked on a leading axis."""
    if len(micro_batches) == 1:
        return micro_batches[0]
    return {k: np.stack([b[k] for b in micro_batches]) for k in micro_batches[0]}


def adam_first_moment(opt_state):
    """Adam's first moment (mu) wherever the optimizer state keeps it."""
    found = [s for s in jax.tree.leaves(
        opt_state, is_leaf=lambda x: isinstance(x, optax.ScaleByAdamState))
        if isinstance(s, optax.ScaleByAdamState)]
    assert len(found) == 1
    return found[0].mu


def big_batch_gradient(params, batch):
    """d(summed smoothed cross-entropy / target tokens)/d(params) of ``batch`` as one batch:
    the paper's per-token loss, worked out without the train step."""
    model = Transformer(TINY)

    def loss(p):
        sums = batch_sums(p, batch, model=model, label_smoothing=0.1)
        return sums["loss_sum"] / sums["tokens"]

    return jax.grad(loss)(params)


@pytest.mark.slow
def test_micro_batches_of_unequal_tokens_give_the_big_batch_gradient_and_update():
    assert (LONG["targets_segment_ids"] > 0).sum() == 88
    assert (SHORT["targets_segment_ids"] > 0).sum() == 20
    initial = create_train_state(config_lib.build("base"), TINY, jax.random.key(0)).params
    expected = big_batch_gradient(initial, BIG)

    accumulated = train_state_after([[LONG, SHORT]], accum=2)
    one_batch = train_state_after([[BIG]], accum=1)
    # Adam's first moment after one step is (1 - b1) * g: the step's gradient.
    for state in (accumulated, one_batch):
        gradient = jax.tree.map(lambda mu: mu / (1 - 0.9), adam_first_moment(state.opt_state))
        for a, b in zip(jax.tree.leaves(gradient), jax.tree.leaves(expected), strict=True):
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
    for a, b, start in zip(jax.tree.leaves(accumulated.params),
                           jax.tree.leaves(one_batch.params), jax.tree.leaves(initial),
                           strict=True):
        np.testing.assert_allclose(a - start, b - start, rtol=0, atol=1e-6)
    # The step moved the weights: by about the learning rate of step 1 (d_model 32, 10
    # warmup steps: 32^-0.5 * 10^-1.5 = 0.0056).
    moved = max(float(np.max(np.abs(a - b))) for a, b in zip(
        jax.tree.leaves(one_batch.params), jax.tree.leaves(initial), strict=True))
    assert 0.004 < moved < 0.006


def tensorboard_steps(workdir, tag):
    """The steps of scalar ``tag`` in the run's TensorBoard event files, in file order (a
    TFRecord of Event protos: length, its CRC, the record, its CRC)."""
    from tensorboardX.proto import event_pb2

    steps = []
    for path in sorted((workdir / layout.TENSORBOARD).glob("events.out.tfevents.*")):
        data, at = path.read_bytes(), 0
        while at < len(data):
            (length,) = struct.unpack("<Q", data[at:at + 8])
            event = event_pb2.Event.FromString(data[at + 12:at + 12 + length])
            at += 12 + length + 4
            steps += [event.step for v in event.summary.value if v.tag == tag]
    return steps


@pytest.mark.slow
def test_an_accumulating_run_counts_optimizer_steps_and_resumes_exactly(tmp_path,
                                                                        builtin_data_dir, caplog):
    # 2 micro-batches of 8 rows a step; one run of 6 steps, and one stopped at 3 and resumed.
    def config(num_steps):
        c = tiny_config(builtin_data_dir, num_steps=num_steps, log_every=1, eval_every=3,
                        checkpoint_every=3)
        c.optim.grad_accum_steps = 2
        return c

    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    traced = config(6)
    traced.train.update(profile_start=2, profile_steps=2)
    with caplog.at_level(logging.INFO):
        train.train_and_evaluate(traced, straight)
    assert f"profiler trace of steps 2-4 written to {straight / 'profile'}" in caplog.text
    assert any(p.is_file() for p in (straight / "profile").rglob("*"))
    train.train_and_evaluate(config(3), stopped)
    assert workdirs.checkpoint_steps_on_disk(stopped) == [3]
    train.train_and_evaluate(config(6), stopped)
    for workdir in (straight, stopped):
        assert workdirs.checkpoint_steps_on_disk(workdir) == [3, 6]
        records = [r for r in workdirs.read_metric_records(workdir) if r["split"] == "train"]
        assert [r["step"] for r in records] == list(range(1, 7))
        # The paper's schedule at optimizer steps 1-6 (d_model 32, 20 warmup steps).
        for r in records:
            assert r["learning_rate"] == pytest.approx(32 ** -0.5 * r["step"] * 20 ** -1.5,
                                                       rel=1e-5)
        assert tensorboard_steps(workdir, "train/loss")[-6:] == list(range(1, 7))
        assert json.loads((workdir / layout.FINAL_METRICS).read_text())["step"] == 6
    # The checkpoint's state counts the same steps: the train state's and Adam's.
    ckpts = checkpoints.Checkpoints(stopped, keep=5)
    model_config = TransformerConfig.from_config(config(6).model, 200)
    template = create_train_state(config(6), model_config, jax.random.key(0))
    state, meta = ckpts.restore(6, template)
    ckpts.close()
    assert int(state.step) == 6 and int(state.opt_state[0].count) == 6 and meta["step"] == 6
    # The resumed run drew the batches and dropout masks the straight one did.
    a, b = (train_losses(w) for w in (straight, stopped))
    for step in range(1, 7):
        assert b[step] == pytest.approx(a[step], abs=1e-6), step
    # Step 1's line: tokens/s over steps/s is the target tokens of both micro-batches (the
    # first two of the data), and MFU counts them all.
    data = pipeline.data_for(config(6), straight, num_devices=1)
    tokens = sum(int((next(data.train.iterator)["targets_segment_ids"] > 0).sum())
                 for _ in range(2))
    first = next(r for r in workdirs.read_metric_records(straight)
                 if r["split"] == "train" and r["step"] == 1)
    assert first["tokens_per_s"] / first["steps_per_s"] == pytest.approx(tokens, rel=1e-9)
    flops = counts.train_flops_per_token(model_config, data.shape.row_len)
    assert first["mfu"] == pytest.approx(flops * first["tokens_per_s"] / TINY_PEAK_FLOPS,
                                         rel=1e-9)


def train_losses(workdir):
    return {r["step"]: r["loss"] for r in workdirs.read_metric_records(workdir)
            if r["split"] == "train"}
