"""Training: the paper's optimizer and schedule, label-smoothed loss, the train step and loop.

``train_and_evaluate(config, workdir)`` trains from scratch or resumes from the latest
checkpoint in ``workdir``, evaluates on the validation split as it goes, and at the end
decodes part of the test split for BLEU and sample translations.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax.training import train_state

from transformer_jax import checkpoints, evaluate, parallel
from transformer_jax import config as config_lib
from transformer_jax.data import pipeline, sources
from transformer_jax.data import tokenizer as tokenizer_lib
from transformer_jax.errors import UserError
from transformer_jax.logs import MetricWriter
from transformer_jax.model import Transformer, TransformerConfig

# ----------------------------------------------------------------------------------------
# Optimizer, schedule and loss


def learning_rate_schedule(d_model: int, warmup_steps: int,
                           scale: float = 1.0) -> Callable[[Any], Any]:
    """lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5).

    The schedule is called with optax's update count, which starts at 0 for the first
    step; the paper's ``step`` starts at 1.
    """

    def schedule(count):
        step = jnp.asarray(count, jnp.float32) + 1.0
        return scale * d_model ** -0.5 * jnp.minimum(step ** -0.5, step * warmup_steps ** -1.5)

    return schedule


def make_optimizer(optim: ml_collections.ConfigDict,
                   d_model: int) -> optax.GradientTransformation:
    """Adam(beta1, beta2, eps) with the warmup schedule; gradient accumulation if asked."""
    schedule = learning_rate_schedule(d_model, optim.warmup_steps, optim.lr_scale)
    tx = optax.adam(schedule, b1=optim.b1, b2=optim.b2, eps=optim.eps)
    if optim.grad_accum_steps > 1:
        tx = optax.MultiSteps(tx, every_k_schedule=optim.grad_accum_steps)
    return tx


def label_smoothed_cross_entropy(logits: jax.Array, targets: jax.Array, weights: jax.Array,
                                 label_smoothing: float) -> tuple[jax.Array, jax.Array]:
    """Sums over tokens of the smoothed cross-entropy and of the plain NLL.

    The smoothed target puts 1 - eps + eps/V on the right token and eps/V on every token
    (V = 5, eps = 0.1 gives [0.92, 0.02, 0.02, 0.02, 0.02]). Computed from log-softmax
    without a one-hot [b, t, V] array.

    Args:
      logits: [b, t, V]; targets: [b, t] ids; weights: [b, t], 0 for padding.
    Returns:
      (sum of smoothed cross-entropy, sum of NLL), each a scalar.
    """
    vocab = logits.shape[-1]
    log_probs = jax.nn.log_softmax(logits.astype(jnp.float32))
    nll = -jnp.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0]
    off = label_smoothing / vocab
    loss = (1.0 - label_smoothing) * nll - off * jnp.sum(log_probs, axis=-1)
    return jnp.sum(loss * weights), jnp.sum(nll * weights)


# ----------------------------------------------------------------------------------------
# Train state and steps


class TrainState(train_state.TrainState):
    """Params, optimizer state and step (the number of micro-batches seen)."""


def model_inputs(batch: dict[str, jax.Array]) -> dict[str, jax.Array]:
    keys = ("inputs", "targets", "inputs_segment_ids", "targets_segment_ids",
            "inputs_positions", "targets_positions")
    return {k: batch[k] for k in keys}


def train_step(state: TrainState, batch: dict[str, jax.Array], dropout_key: jax.Array, *,
               model: Transformer, label_smoothing: float,
               schedule: Callable[[Any], Any], grad_accum_steps: int,
               axis_name: str = parallel.AXIS) -> tuple[TrainState, dict[str, jax.Array]]:
    """One step on this device's shard of the batch, inside ``pmap``.

    The loss is normalised by the number of target tokens of the *global* batch, so the
    averaged gradient equals the single-device gradient of the whole batch.
    """
    num_devices = jax.lax.psum(1, axis_name)
    step_key = jax.random.fold_in(jax.random.fold_in(dropout_key, state.step),
                                  jax.lax.axis_index(axis_name))
    weights = (batch["targets_segment_ids"] > 0).astype(jnp.float32)
    tokens = jnp.sum(weights)
    global_tokens = jax.lax.psum(tokens, axis_name)

    def loss_fn(params):
        logits = model.apply({"params": params}, **model_inputs(batch),
                             rngs={"dropout": step_key})
        loss_sum, nll_sum = label_smoothed_cross_entropy(logits, batch["targets"], weights,
                                                         label_smoothing)
        return loss_sum * num_devices / jnp.maximum(global_tokens, 1.0), (loss_sum, nll_sum)

    grads, (loss_sum, nll_sum) = jax.grad(loss_fn, has_aux=True)(state.params)
    grads = jax.lax.pmean(grads, axis_name)
    new_state = state.apply_gradients(grads=grads)
    metrics = {
        "loss_sum": jax.lax.psum(loss_sum, axis_name),
        "nll_sum": jax.lax.psum(nll_sum, axis_name),
        "tokens": global_tokens,
        "source_tokens": jax.lax.psum(jnp.sum(batch["inputs_segment_ids"] > 0), axis_name),
        "grad_norm": optax.global_norm(grads),
        "learning_rate": schedule(state.step // grad_accum_steps),
    }
    return new_state, metrics


def eval_step(params: Any, batch: dict[str, jax.Array], *, model: Transformer,
              label_smoothing: float,
              axis_name: str = parallel.AXIS) -> dict[str, jax.Array]:
    """Summed loss, NLL and token count of one batch (inside ``pmap``)."""
    weights = (batch["targets_segment_ids"] > 0).astype(jnp.float32)
    logits = model.apply({"params": params}, **model_inputs(batch))
    loss_sum, nll_sum = label_smoothed_cross_entropy(logits, batch["targets"], weights,
                                                     label_smoothing)
    return jax.lax.psum({"loss_sum": loss_sum, "nll_sum": nll_sum, "tokens": jnp.sum(weights)},
                        axis_name)


def init_params(model_config: TransformerConfig, key: jax.Array) -> Any:
    """Initial parameters (a [1, 1] dummy batch fixes every shape but the batch)."""
    dummy = jnp.ones((1, 1), jnp.int32)
    return Transformer(model_config.replace(deterministic=True)).init(key, dummy, dummy)["params"]


def create_train_state(config: ml_collections.ConfigDict, model_config: TransformerConfig,
                       key: jax.Array) -> TrainState:
    tx = make_optimizer(config.optim, model_config.d_model)
    model = Transformer(model_config)
    return TrainState.create(apply_fn=model.apply, params=init_params(model_config, key), tx=tx)


def pmapped_steps(config: ml_collections.ConfigDict, model_config: TransformerConfig,
                  devices: list[jax.Device]) -> tuple[Callable, Callable]:
    """(train step, eval step), each pmapped over ``devices``."""
    schedule = learning_rate_schedule(model_config.d_model, config.optim.warmup_steps,
                                      config.optim.lr_scale)
    p_train = jax.pmap(
        functools.partial(train_step, model=Transformer(model_config),
                          label_smoothing=config.train.label_smoothing, schedule=schedule,
                          grad_accum_steps=config.optim.grad_accum_steps),
        axis_name=parallel.AXIS, devices=devices, donate_argnums=(0,), in_axes=(0, 0, None))
    p_eval = jax.pmap(
        functools.partial(eval_step, model=Transformer(model_config.replace(deterministic=True)),
                          label_smoothing=config.train.label_smoothing),
        axis_name=parallel.AXIS, devices=devices)
    return p_train, p_eval


# ----------------------------------------------------------------------------------------
# The loop


def _check_workdir(workdir: Path) -> None:
    try:
        workdir.mkdir(parents=True, exist_ok=True)
        probe = workdir / ".write_test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as e:
        raise UserError(f"workdir {workdir} is not writable: {e.strerror or e}") from e


def evaluate_loss(p_eval: Callable, params: Any, batches: Any, num_devices: int) -> dict:
    totals = {"loss_sum": 0.0, "nll_sum": 0.0, "tokens": 0.0}
    for batch in batches:
        out = parallel.unreplicate(p_eval(params, parallel.shard(batch, num_devices)))
        for k in totals:
            totals[k] += float(out[k])
    n = max(totals["tokens"], 1.0)
    return {"loss": totals["loss_sum"] / n, "nll": totals["nll_sum"] / n,
            "perplexity": evaluate.perplexity(totals["nll_sum"], n), "tokens": totals["tokens"]}


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str | Path) -> dict:
    """Trains (or resumes) and evaluates; returns the final metrics."""
    config_lib.validate(config)
    workdir = Path(workdir)
    _check_workdir(workdir)
    is_chief = jax.process_index() == 0
    devices = parallel.local_devices(config.train.devices)
    num_devices = len(devices)

    # Data and vocabulary.
    tokenizer, data, rows, _ = pipeline.data_for(config, workdir, num_devices)
    accum = config.optim.grad_accum_steps
    writer = MetricWriter(workdir, enabled=is_chief)

    # Model and state.
    model_config = TransformerConfig.from_config(config.model, tokenizer.vocab_size)
    init_key, dropout_key = jax.random.split(jax.random.key(config.train.seed))
    state = create_train_state(config, model_config, init_key)
    ckpts = checkpoints.Checkpoints(workdir, config.train.keep_checkpoints)
    start = ckpts.latest_step()
    if start is not None:
        state, _ = ckpts.restore(start, state, data.iterator)
        logging.info("resuming from step %d", start)
    elif is_chief:
        (workdir / "config.json").write_text(config.to_json_best_effort(indent=2))
    n_params = sum(int(np.size(p)) for p in jax.tree.leaves(state.params))
    logging.info("model: %s (%s scale), %d parameters, vocabulary %d, batch %d rows x %d "
                 "tokens on %d device(s)", config.variant, config.scale, n_params,
                 tokenizer.vocab_size, rows, config.data.max_len, num_devices)

    p_train, p_eval = pmapped_steps(config, model_config, devices)
    p_state = parallel.replicate(state, devices)
    del state
    total_micro_steps = config.train.num_steps * accum
    step = int(start or 0)
    pending: list[dict[str, jax.Array]] = []
    padding: list[float] = []
    last_log_time, last_log_step = time.time(), step
    eval_source = sources.get_source(config.data, "validation")
    final: dict[str, Any] = {}

    def save(step: int) -> None:
        meta = {"step": step, "vocab_size": tokenizer.vocab_size,
                "skipped_long_pairs": data.length_filter.skipped}
        ckpts.save(step, parallel.unreplicate(p_state), data.iterator, meta, force=True)

    while step < total_micro_steps:
        batch = next(data.iterator)
        padding.append(pipeline.padding_fraction(batch))
        p_state, metrics = p_train(p_state, parallel.shard(batch, num_devices), dropout_key)
        pending.append(metrics)
        step += 1
        opt_step = step // accum
        if step % (config.train.log_every * accum) == 0 or step == total_micro_steps:
            summed = jax.tree.map(lambda *xs: float(np.sum([np.asarray(x)[0] for x in xs])),
                                  *pending)
            now = time.time()
            n_tok = max(summed["tokens"], 1.0)
            scalars = {
                "loss": summed["loss_sum"] / n_tok,
                "perplexity": evaluate.perplexity(summed["nll_sum"], n_tok),
                "learning_rate": float(np.asarray(pending[-1]["learning_rate"])[0]),
                "grad_norm": float(np.asarray(pending[-1]["grad_norm"])[0]),
                "tokens_per_s": summed["tokens"] / max(now - last_log_time, 1e-9),
                "source_tokens_per_s": summed["source_tokens"] / max(now - last_log_time, 1e-9),
                "steps_per_s": (step - last_log_step) / accum / max(now - last_log_time, 1e-9),
                "padding_fraction": float(np.mean(padding)),
                "skipped_long_pairs": data.length_filter.skipped,
            }
            if not np.isfinite(scalars["loss"]):
                raise FloatingPointError(f"non-finite loss {scalars['loss']} at step {opt_step}")
            writer.write("train", opt_step, scalars)
            pending, padding = [], []
            last_log_time, last_log_step = time.time(), step
        if step % (config.train.eval_every * accum) == 0 or step == total_micro_steps:
            eval_batches = pipeline.eval_batches(
                eval_source, tokenizer, max_len=config.data.max_len, rows=rows,
                max_batches=config.train.eval_batches)
            final = evaluate_loss(p_eval, p_state.params, eval_batches, num_devices)
            writer.write("eval", opt_step, final)
        if step % (config.train.checkpoint_every * accum) == 0 or step == total_micro_steps:
            save(step)
    ckpts.wait()

    params = parallel.unreplicate(p_state.params)
    if config.train.bleu_sentences or config.train.samples:
        final.update(_final_translations(config, model_config, params, tokenizer, writer,
                                         total_micro_steps // accum))
    if is_chief:
        (workdir / "final_metrics.json").write_text(json.dumps(
            {"step": total_micro_steps // accum, **final}, indent=2))
    writer.close()
    ckpts.close()
    return final


def _final_translations(config: ml_collections.ConfigDict, model_config: TransformerConfig,
                        params: Any, tokenizer: tokenizer_lib.Tokenizer, writer: MetricWriter,
                        step: int) -> dict[str, Any]:
    """Greedy-decodes the first sentences of the test split: BLEU and a few samples."""
    test = sources.get_source(config.data, "test")
    n = min(max(config.train.bleu_sentences, config.train.samples), len(test))
    pairs = [test[i] for i in range(n)]
    start = time.time()
    hyps = evaluate.translate(params, model_config, tokenizer, [s for s, _ in pairs],
                              batch_size=config.decode.batch_size,
                              max_len_offset=config.decode.max_len_offset)
    result: dict[str, Any] = {}
    if config.train.bleu_sentences:
        score, signature = evaluate.bleu(hyps, [t for _, t in pairs])
        result = {"test_bleu": score, "bleu_signature": signature, "bleu_sentences": n}
        writer.write("test", step, {"bleu": score})
        logging.info("test BLEU %.2f on %d sentences (greedy, %.1fs)  %s", score, n,
                     time.time() - start, signature)
    for (src, ref), hyp in list(zip(pairs, hyps, strict=True))[: config.train.samples]:
        writer.sample(src, ref, hyp)
    return result
