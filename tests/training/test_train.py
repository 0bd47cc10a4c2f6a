"""Training: label smoothing, the train step's dropout, the meters, checkpoints and the final
evaluation."""

import functools
import json
import logging

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import sacrebleu

from transformer_jax import config as config_lib
from transformer_jax.data import sources
from transformer_jax.evaluation import bleu
from transformer_jax.io import checkpoints, layout
from transformer_jax.model import counts
from transformer_jax.model.losses import label_smoothed_cross_entropy
from transformer_jax.model.spec import TransformerConfig
from transformer_jax.training import meters, train
from transformer_jax.training.step import create_train_state

from ..helpers import TINY, greedy_by_hand, random_batch, run_steps, tiny_config


def smoothed_target(vocab, eps, label):
    """The target distribution, read off the loss gradient: softmax(z) - dL/dz."""
    logits = jnp.zeros((1, 1, vocab))

    def loss(z):
        return label_smoothed_cross_entropy(z, jnp.array([[label]]), jnp.ones((1, 1)), eps)[0]

    return np.asarray(jax.nn.softmax(logits)[0, 0] - jax.grad(loss)(logits)[0, 0])


def test_label_smoothing_seed_example():
    np.testing.assert_allclose(smoothed_target(5, 0.1, 0), [0.92, 0.02, 0.02, 0.02, 0.02],
                               atol=1e-6)


def test_label_smoothing_equals_optax_smooth_labels():
    rng = np.random.default_rng(0)
    logits = jnp.asarray(rng.normal(size=(2, 3, 7)), jnp.float32)
    labels = jnp.asarray(rng.integers(0, 7, (2, 3)))
    weights = jnp.array([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    loss, nll = label_smoothed_cross_entropy(logits, labels, weights, 0.2)
    targets = optax.smooth_labels(jax.nn.one_hot(labels, 7), 0.2)
    expected = jnp.sum(optax.softmax_cross_entropy(logits, targets) * weights)
    expected_nll = jnp.sum(
        optax.softmax_cross_entropy_with_integer_labels(logits, labels) * weights)
    assert float(loss) == pytest.approx(float(expected), rel=1e-5)
    assert float(nll) == pytest.approx(float(expected_nll), rel=1e-5)


@pytest.mark.slow
def test_dropout_differs_per_device_and_step():
    model_config = TINY.replace(dropout_rate=0.5)
    batch = random_batch(4, 16, 0)
    same = {k: np.concatenate([v[:2], v[:2]]) for k, v in batch.items()}  # both halves alike
    losses2, _ = run_steps([same], devices=2, model_config=model_config)
    losses1, _ = run_steps([{k: v[:2] for k, v in batch.items()}], model_config=model_config)
    # Identical halves with identical dropout would give exactly the one-device loss.
    assert losses2[0] != pytest.approx(losses1[0], rel=1e-6)
    twice, _ = run_steps([same, same], devices=2, model_config=model_config)
    assert twice[0] == pytest.approx(losses2[0], rel=1e-6)  # same step, same masks


def test_checkpoint_restores_what_was_saved(tmp_path):
    config = config_lib.build("base")
    state = create_train_state(config, TINY, jax.random.key(0))
    state = state.replace(step=jnp.asarray(7))
    ckpts = checkpoints.Checkpoints(tmp_path, keep=2)
    ckpts.save(7, state, None, {"vocab_size": 40})
    ckpts.wait()
    fresh = create_train_state(config, TINY, jax.random.key(1))
    restored, meta = ckpts.restore(7, fresh)
    assert meta == {"vocab_size": 40} and int(restored.step) == 7
    for a, b in zip(jax.tree.leaves(restored.params), jax.tree.leaves(state.params),
                    strict=True):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(jax.tree.leaves(restored.opt_state), jax.tree.leaves(state.opt_state),
                    strict=True):
        np.testing.assert_array_equal(a, b)
    ckpts.close()


def test_mfu_peak_is_the_best_probe_of_the_run_and_never_above_100_percent(caplog):
    # A start-up probe under contention read 100 GFLOP/s; the machine does 400. Probes are
    # taken again at log lines 1, 2, 4, ... and when a figure exceeds 100%.
    config = config_lib.build("base")
    startup = iter([100e9])
    probes = iter([150e9, 120e9, 400e9, 200e9, 380e9])
    meter = meters.MfuMeter(TINY, 1, config.data.max_len, probe=lambda: next(startup),
                            reprobe=lambda: next(probes))
    assert meter.peak == 100e9
    flops = meter.flops_per_token

    def mfu_at(flop_per_s):
        return meter(flop_per_s / flops)

    assert mfu_at(120e9) == pytest.approx(0.8)  # line 1 probes 150 (it was 1.2 against 100)
    assert mfu_at(90e9) == pytest.approx(0.6)  # line 2 probes 120: 150 stays the peak
    assert mfu_at(300e9) == pytest.approx(0.75)  # 200% at line 3 probes again: 400
    with caplog.at_level("WARNING"):
        assert mfu_at(500e9) is None  # line 4 probes 200 and, at 125%, 380: still too high
    assert "MFU 125% is above 100%" in caplog.text
    assert mfu_at(200e9) == pytest.approx(0.5)  # line 5: no probe
    assert meter.peak == 400e9 and next(probes, None) is None


def test_mfu_of_a_given_peak_is_never_probed_and_above_100_percent_is_left_out():
    config = config_lib.build("base")
    config.train.peak_flops = 1e9  # per device: 2e9 for two

    def no_probe():
        raise AssertionError("a peak from the config is not measured")

    meter = meters.MfuMeter(TINY, 2, config.data.max_len, peak_flops=config.train.peak_flops,
                            probe=no_probe, reprobe=no_probe)
    assert meter.peak == 2e9
    assert meter(1.5e9 / meter.flops_per_token) == pytest.approx(0.75)
    assert meter(3e9 / meter.flops_per_token) is None


@pytest.mark.slow
def test_minutes_apart_checkpoints_and_the_averaged_final_evaluation(
        tmp_path, builtin_data_dir, monkeypatch, caplog):
    # A clock 15 s further on at each reading: the loop reads it once a step and once after
    # each checkpoint, so with 1-minute checkpoints one falls due every 4 steps.
    readings = iter(range(0, 10**6, 15))
    monkeypatch.setattr(train, "CheckpointClock", functools.partial(
        meters.CheckpointClock, clock=lambda: float(next(readings))))
    config = tiny_config(builtin_data_dir, num_steps=20, checkpoint_every=1000,
                         checkpoint_every_minutes=1.0, eval_every=20, bleu_sentences=8)
    config.decode.strategy = "greedy"  # worked out by hand below
    with caplog.at_level(logging.WARNING):
        final = train.train_and_evaluate(config, tmp_path)
    ckpts = checkpoints.Checkpoints(tmp_path, 5)
    assert ckpts.all_steps() == [4, 8, 12, 16, 20]
    # The paper's evaluation: the mean of the last train.keep_checkpoints = 5, and a warning
    # that they span the whole (tiny) run.
    saved = json.loads((tmp_path / layout.FINAL_METRICS).read_text())
    assert saved["averaged_steps"] == final["averaged_steps"] == [4, 8, 12, 16, 20]
    assert "the averaged checkpoints (steps 4, 8, 12, 16, 20) reach back to 20% of step 20" \
        in caplog.text
    hyps = (tmp_path / saved["test_hypotheses"]).read_text(encoding="utf-8").splitlines()
    refs = (tmp_path / saved["test_references"]).read_text(encoding="utf-8").splitlines()
    assert saved["test_hypotheses"] == "eval/test-final.hyp.txt"
    assert saved["test_references"] == "eval/test-final.ref.txt"
    assert len(hyps) == len(refs) == saved["bleu_sentences"] == 8
    test = sources.get_source(config.data, "test")
    assert refs == [test[i][1] for i in range(8)]
    # The hypotheses are the averaged model's, and both BLEUs are theirs: the five
    # checkpoints' parameters, each read alone, averaged here in float64, then decoded by
    # greedy search written out (helpers.greedy_by_hand), not by the loop's code.
    model_config = TransformerConfig.from_config(config.model, ckpts.read_meta(20)["vocab_size"])
    shapes = counts.param_shapes(model_config)
    each = [ckpts.restore_params(step, shapes) for step in (4, 8, 12, 16, 20)]
    ckpts.close()
    mean = jax.tree.map(lambda *x: np.mean(np.asarray(x, np.float64), 0).astype(np.float32),
                        *each)
    by_hand = greedy_by_hand(mean, model_config, tmp_path / "vocab" / layout.VOCAB_MODEL)
    assert hyps == [by_hand(test[i][0], config.decode.max_len_offset) for i in range(8)]
    assert saved["test_bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score)
    split = lambda lines: [bleu.tokenize_for_bleu(x) for x in lines]  # noqa: E731
    assert saved["test_bleu_tokenized"] == pytest.approx(
        sacrebleu.corpus_bleu(split(hyps), [split(refs)], tokenize="none").score)
    assert "tok:13a" in saved["bleu_signature"]
    assert "compound-split" in saved["bleu_tokenized_signature"]
