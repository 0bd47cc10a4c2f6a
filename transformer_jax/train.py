"""Training: the paper's optimizer and schedule, label-smoothed loss, the train step and loop.

``train_and_evaluate(config, workdir)`` trains from scratch or resumes from the latest
checkpoint in ``workdir``, evaluates on the validation split as it goes, and at the end
decodes part of the test split for BLEU and sample translations.
"""

from __future__ import annotations

import dataclasses
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

from transformer_jax import (
    checkpoints,
    config as config_lib,
    decode,
    evaluate,
    hardware,
    parallel,
    params as params_lib,
)
from transformer_jax.data import pipeline, sources, tokenizer as tokenizer_lib
from transformer_jax.errors import UserError
from transformer_jax.logs import MetricWriter
from transformer_jax.losses import (
    collectives,
    eval_step,
    label_smoothed_cross_entropy,
    model_inputs,
)
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


# ----------------------------------------------------------------------------------------
# Train state and steps


class TrainState(train_state.TrainState):
    """Params, optimizer state and step (the number of micro-batches seen)."""


def train_step(state: TrainState, batch: dict[str, jax.Array], dropout_key: jax.Array, *,
               model: Transformer, label_smoothing: float, schedule: Callable[[Any], Any],
               grad_accum_steps: int,
               axis_name: str | None = None) -> tuple[TrainState, dict[str, jax.Array]]:
    """One optimizer step (or micro-step when accumulating gradients).

    With ``axis_name`` it runs inside ``pmap`` on one device's rows: the loss is normalised
    by the target tokens of the *global* batch and the gradients are averaged with pmean, so
    the result equals the single-device step on the whole batch. Without, it is written for
    the global batch and run by ``jit`` over a mesh.
    """
    psum, pmean, num_devices, device_index = collectives(axis_name)
    step_key = jax.random.fold_in(jax.random.fold_in(dropout_key, state.step), device_index)
    weights = (batch["targets_segment_ids"] > 0).astype(jnp.float32)
    global_tokens = psum(jnp.sum(weights))

    def loss_fn(params):
        logits = model.apply({"params": params}, **model_inputs(batch),
                             rngs={"dropout": step_key})
        loss_sum, nll_sum = label_smoothed_cross_entropy(logits, batch["targets"], weights,
                                                         label_smoothing)
        return loss_sum * num_devices / jnp.maximum(global_tokens, 1.0), (loss_sum, nll_sum)

    grads, (loss_sum, nll_sum) = jax.grad(loss_fn, has_aux=True)(state.params)
    grads = pmean(grads)
    new_state = state.apply_gradients(grads=grads)
    metrics = {
        "loss_sum": psum(loss_sum),
        "nll_sum": psum(nll_sum),
        "tokens": global_tokens,
        "source_tokens": psum(jnp.sum(batch["inputs_segment_ids"] > 0).astype(jnp.float32)),
        "grad_norm": optax.global_norm(grads),
        "learning_rate": schedule(state.step // grad_accum_steps),
    }
    return new_state, metrics


def init_params(model_config: TransformerConfig, key: jax.Array) -> Any:
    """Initial parameters (a [1, 1] dummy batch fixes every shape but the batch)."""
    dummy = jnp.ones((1, 1), jnp.int32)
    return Transformer(model_config.replace(deterministic=True)).init(key, dummy, dummy)["params"]


def create_train_state(config: ml_collections.ConfigDict, model_config: TransformerConfig,
                       key: jax.Array) -> TrainState:
    tx = make_optimizer(config.optim, model_config.d_model)
    model = Transformer(model_config)
    return TrainState.create(apply_fn=model.apply, params=init_params(model_config, key), tx=tx)


def make_executor(config: ml_collections.ConfigDict, model_config: TransformerConfig,
                  abstract_state: Any) -> parallel.PmapExecutor | parallel.ShardedExecutor:
    """The train and eval steps, compiled for ``config.train.parallel`` ("pmap" or
    "sharded")."""
    schedule = learning_rate_schedule(model_config.d_model, config.optim.warmup_steps,
                                      config.optim.lr_scale)
    train_fn = functools.partial(train_step, model=Transformer(model_config),
                                 label_smoothing=config.train.label_smoothing,
                                 schedule=schedule,
                                 grad_accum_steps=config.optim.grad_accum_steps)
    eval_fn = functools.partial(eval_step,
                                model=Transformer(model_config.replace(deterministic=True)),
                                label_smoothing=config.train.label_smoothing)
    if config.train.parallel == "sharded":
        devices = parallel.local_devices(config.train.devices) if config.train.devices else None
        mesh = parallel.make_mesh(config.train.model_parallel, devices)
        return parallel.ShardedExecutor(train_fn, eval_fn, mesh, abstract_state)
    return parallel.PmapExecutor(train_fn, eval_fn,
                                 parallel.local_devices(config.train.devices))


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


def evaluate_loss(executor: Any, state: Any, batches: Any) -> dict[str, float]:
    """Loss, NLL per token and perplexity over ``batches``."""
    totals = {"loss_sum": 0.0, "nll_sum": 0.0, "tokens": 0.0}
    for batch in batches:
        out = executor.evaluate(state, batch)
        for k in totals:
            totals[k] += out[k]
    n = max(totals["tokens"], 1.0)
    return {"loss": totals["loss_sum"] / n, "nll": totals["nll_sum"] / n,
            "perplexity": evaluate.perplexity(totals["nll_sum"], n), "tokens": totals["tokens"]}


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str | Path) -> dict:
    """Trains (or resumes) and evaluates; returns the final metrics."""
    config_lib.validate(config)
    workdir = Path(workdir)
    _check_workdir(workdir)
    is_chief = jax.process_index() == 0
    accum = config.optim.grad_accum_steps
    num_devices = len(parallel.local_devices(config.train.devices))
    global_devices = num_devices * jax.process_count()

    # Data and vocabulary.
    tokenizer, data, rows, _ = pipeline.data_for(config, workdir, num_devices)
    writer = MetricWriter(workdir, enabled=is_chief)

    # Model, state and the compiled steps.
    model_config = TransformerConfig.from_config(config.model, tokenizer.vocab_size)
    init_key, dropout_key = jax.random.split(jax.random.key(config.train.seed))
    state = create_train_state(config, model_config, init_key)
    executor = make_executor(config, model_config, state)
    ckpts = checkpoints.Checkpoints(workdir, config.train.keep_checkpoints)
    start = ckpts.latest_step()
    if start is not None:
        state, _ = ckpts.restore(start, executor.restore_template(state), data.iterator)
        logging.info("resuming from step %d", start // accum)
    elif is_chief:
        (workdir / "config.json").write_text(config.to_json_best_effort(indent=2))
    n_params = sum(int(np.size(p)) for p in jax.tree.leaves(state.params))
    logging.info("model: %s (%s scale), %d parameters, vocabulary %d, batch %d rows x %d "
                 "tokens on %d device(s), %s", config.variant, config.scale, n_params,
                 tokenizer.vocab_size, rows, config.data.max_len, global_devices, executor.kind)
    state = executor.place(state)
    mfu = MfuMeter(config, model_config, global_devices)

    total_micro_steps = config.train.num_steps * accum
    step = int(start or 0)
    eval_source = sources.get_source(config.data, "validation")
    window = _LogWindow(step)
    profile = Profile(workdir, config.train.profile_start * accum,
                      config.train.profile_steps * accum, enabled=is_chief)
    final: dict[str, Any] = {}
    while step < total_micro_steps:
        profile.before(step)
        batch = next(data.iterator)
        window.padding.append(pipeline.padding_fraction(batch))
        state, metrics = executor.train(state, batch, dropout_key)
        window.pending.append(metrics)
        step += 1
        profile.after(step, metrics)
        last = step == total_micro_steps
        if step % (config.train.log_every * accum) == 0 or last:
            scalars = window.summarise(executor, step, accum, mfu)
            scalars["skipped_long_pairs"] = data.length_filter.skipped
            if not np.isfinite(scalars["loss"]):
                raise FloatingPointError(
                    f"non-finite loss {scalars['loss']} at step {step // accum}")
            writer.write("train", step // accum, scalars)
        if step % (config.train.eval_every * accum) == 0 or last:
            eval_batches = pipeline.eval_batches(
                eval_source, tokenizer, max_len=config.data.max_len, rows=rows,
                max_batches=config.train.eval_batches)
            final = evaluate_loss(executor, state, (
                pipeline.process_rows(b, jax.process_index(), jax.process_count())
                for b in eval_batches))
            writer.write("eval", step // accum, final)
        if config.train.bleu_every and step % (config.train.bleu_every * accum) == 0:
            writer.write("eval", step // accum, _validation_bleu(
                config, model_config, executor.params(state), tokenizer, eval_source))
        if step % (config.train.checkpoint_every * accum) == 0 or last:
            meta = {"step": step, "vocab_size": tokenizer.vocab_size,
                    "skipped_long_pairs": data.length_filter.skipped}
            ckpts.save(step, executor.host_state(state), data.iterator, meta, force=True)
    ckpts.wait()

    params = executor.params(state)
    if config.train.bleu_sentences or config.train.samples:
        final.update(_final_translations(config, model_config, params, tokenizer, writer,
                                         total_micro_steps // accum))
    if is_chief:
        (workdir / "final_metrics.json").write_text(json.dumps(
            {"step": total_micro_steps // accum, **final}, indent=2))
    writer.close()
    ckpts.close()
    if config.train.visualize_sentences and is_chief:
        from transformer_jax import visualize  # matplotlib only when pictures are asked for
        visualize.write_run_pictures(config, model_config, params, tokenizer, workdir)
    return final


class MfuMeter:
    """Model FLOPs utilisation: FLOPs of the target tokens processed per second over the
    peak of all devices (on a CPU, the machine's peak measured by a matmul probe)."""

    def __init__(self, config: ml_collections.ConfigDict, model_config: TransformerConfig,
                 num_devices: int):
        self.flops_per_token = params_lib.train_flops_per_token(model_config,
                                                                config.data.max_len)
        peak, self.source = hardware.peak_flops_per_device(config.train.peak_flops,
                                                           config.model.dtype)
        on_cpu = jax.devices()[0].platform == "cpu" and not config.train.peak_flops
        # Fake CPU devices share the machine's cores: its probe is the peak of them all.
        self.peak = peak if on_cpu else peak * num_devices

    def __call__(self, tokens_per_s: float) -> float:
        return self.flops_per_token * tokens_per_s / self.peak


@dataclasses.dataclass
class _LogWindow:
    """Step metrics accumulated on device between two log lines."""

    step: int
    time: float = dataclasses.field(default_factory=time.time)
    pending: list = dataclasses.field(default_factory=list)
    padding: list = dataclasses.field(default_factory=list)

    def summarise(self, executor: Any, step: int, accum: int, mfu: MfuMeter) -> dict:
        per_step = [executor.fetch(m) for m in self.pending]
        total = {k: sum(m[k] for m in per_step) for k in ("loss_sum", "nll_sum", "tokens",
                                                          "source_tokens")}
        elapsed = max(time.time() - self.time, 1e-9)
        tokens = max(total["tokens"], 1.0)
        scalars = {
            "loss": total["loss_sum"] / tokens,
            "perplexity": evaluate.perplexity(total["nll_sum"], tokens),
            "learning_rate": per_step[-1]["learning_rate"],
            "grad_norm": per_step[-1]["grad_norm"],
            "tokens_per_s": total["tokens"] / elapsed,
            "source_tokens_per_s": total["source_tokens"] / elapsed,
            "steps_per_s": (step - self.step) / accum / elapsed,
            "mfu": mfu(total["tokens"] / elapsed),
            "padding_fraction": float(np.mean(self.padding)),
        }
        self.step, self.time, self.pending, self.padding = step, time.time(), [], []
        return scalars


class Profile:
    """Writes a JAX profiler trace of steps [start, start + steps) into <workdir>/profile."""

    def __init__(self, workdir: Path, start: int, steps: int, enabled: bool = True):
        self.directory = workdir / "profile"
        self.start, self.stop = start, start + steps
        self.enabled = enabled and steps > 0
        self.active = False

    def before(self, step: int) -> None:
        if self.enabled and step == self.start and not self.active:
            jax.profiler.start_trace(str(self.directory))
            self.active = True

    def after(self, step: int, metrics: Any) -> None:
        if self.active and step >= self.stop:
            jax.block_until_ready(metrics)
            jax.profiler.stop_trace()
            self.active = False
            logging.info("profiler trace of steps %d-%d written to %s", self.start, self.stop,
                         self.directory)


def _validation_bleu(config: ml_collections.ConfigDict, model_config: TransformerConfig,
                     params: Any, tokenizer: tokenizer_lib.Tokenizer,
                     source: Any) -> dict[str, float]:
    """sacreBLEU of the first ``train.bleu_sentences`` of the validation split, decoded as
    ``config.decode`` says."""
    pairs = [source[i] for i in range(min(config.train.bleu_sentences, len(source)))]
    hyps = evaluate.translate(params, model_config, tokenizer, [s for s, _ in pairs],
                              decode.DecodeConfig.from_config(config.decode))
    return {"bleu": evaluate.bleu(hyps, [t for _, t in pairs])[0]}


def _final_translations(config: ml_collections.ConfigDict, model_config: TransformerConfig,
                        params: Any, tokenizer: tokenizer_lib.Tokenizer, writer: MetricWriter,
                        step: int) -> dict[str, Any]:
    """Decodes the first sentences of the test split: BLEU and a few samples."""
    test = sources.get_source(config.data, "test")
    n = min(max(config.train.bleu_sentences, config.train.samples), len(test))
    pairs = [test[i] for i in range(n)]
    start = time.time()
    decoding = decode.DecodeConfig.from_config(config.decode)
    hyps = evaluate.translate(params, model_config, tokenizer, [s for s, _ in pairs], decoding)
    result: dict[str, Any] = {}
    if config.train.bleu_sentences:
        score, signature = evaluate.bleu(hyps, [t for _, t in pairs])
        result = {"test_bleu": score, "bleu_signature": signature, "bleu_sentences": n}
        writer.write("test", step, {"bleu": score})
        logging.info("test BLEU %.2f on %d sentences (%s, %.1fs)  %s", score, n,
                     evaluate.describe(dataclasses.asdict(decoding)), time.time() - start,
                     signature)
    for (src, ref), hyp in list(zip(pairs, hyps, strict=True))[: config.train.samples]:
        writer.sample(src, ref, hyp)
    return result
