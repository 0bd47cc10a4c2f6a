"""Training: the paper's optimizer and schedule, label-smoothed loss, the train step and loop.

``train_and_evaluate(config, workdir)`` trains from scratch or resumes from the latest
checkpoint in ``workdir``, evaluates on the validation split as it goes, and at the end
decodes part of the test split for BLEU and sample translations.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import json
import logging
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax.training import train_state

from transformer_jax import config as config_lib
from transformer_jax.config import resume
from transformer_jax.data import pipeline, sources, tokenizer as tokenizer_lib
from transformer_jax.decoding import decode
from transformer_jax.evaluation import bleu, translation
from transformer_jax.evaluation.perplexity import loss_over_batches, perplexity
from transformer_jax.io import checkpoints, layout, metric_keys, provenance, storage, workdirs
from transformer_jax.io.logs import MetricWriter
from transformer_jax.model import params as params_lib
from transformer_jax.model.losses import batch_sums, label_smoothed_cross_entropy, model_inputs
from transformer_jax.model.params import init_params
from transformer_jax.model.spec import TransformerConfig
from transformer_jax.model.transformer import Transformer
from transformer_jax.training import faults, hardware, parallel

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


def schedule_of(optim: ml_collections.ConfigDict, d_model: int) -> Callable[[Any], Any]:
    """The schedule ``optim`` asks for (warmup steps, scale): the optimizer follows it and the
    train step logs it."""
    return learning_rate_schedule(d_model, optim.warmup_steps, optim.lr_scale)


def make_optimizer(optim: ml_collections.ConfigDict,
                   d_model: int) -> optax.GradientTransformation:
    """Adam(beta1, beta2, eps) with the warmup schedule; gradient accumulation if asked."""
    tx = optax.adam(schedule_of(optim, d_model), b1=optim.b1, b2=optim.b2, eps=optim.eps)
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
    psum, pmean, num_devices, device_index = parallel.collectives(axis_name)
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
    loss_sum, nll_sum = psum(loss_sum), psum(nll_sum)
    updated = state.apply_gradients(grads=grads)
    # A step whose loss, gradients or results are not finite leaves the whole state as it
    # was (its step count too): one bad batch or overflow cannot poison the parameters or
    # Adam's moments. The values are summed over devices first, so every replica agrees.
    # The test is on scalars: a global norm is finite only if every element is (and not
    # when their squares overflow). Adam's moments are finite when the gradients are.
    # Testing every leaf instead made the step's compilation about seven times slower.
    grad_norm = optax.global_norm(grads)
    finite = (jnp.isfinite(loss_sum) & jnp.isfinite(nll_sum) & jnp.isfinite(grad_norm)
              & jnp.isfinite(optax.global_norm(updated.params)))
    new_state = jax.tree.map(lambda new, old: jnp.where(finite, new, old), updated, state)
    metrics = {
        "loss_sum": loss_sum,
        "nll_sum": nll_sum,
        "tokens": global_tokens,
        "source_tokens": psum(jnp.sum(batch["inputs_segment_ids"] > 0).astype(jnp.float32)),
        "grad_norm": grad_norm,
        "learning_rate": schedule(state.step // grad_accum_steps),
        "nonfinite": 1.0 - finite.astype(jnp.float32),  # 1: the step was skipped
    }
    return new_state, metrics


def eval_step(params: Any, batch: dict[str, jax.Array], *, model: Transformer,
              label_smoothing: float, axis_name: str | None = None) -> dict[str, jax.Array]:
    """Summed loss, NLL and target tokens of one batch (over all devices)."""
    return parallel.collectives(axis_name)[0](
        batch_sums(params, batch, model=model, label_smoothing=label_smoothing))


def create_train_state(config: ml_collections.ConfigDict, model_config: TransformerConfig,
                       key: jax.Array) -> TrainState:
    tx = make_optimizer(config.optim, model_config.d_model)
    model = Transformer(model_config)
    return TrainState.create(apply_fn=model.apply, params=init_params(model_config, key), tx=tx)


def make_executor(config: ml_collections.ConfigDict, model_config: TransformerConfig,
                  abstract_state: Any) -> parallel.PmapExecutor | parallel.ShardedExecutor:
    """The train and eval steps, compiled for ``config.train.parallel`` ("pmap" or
    "sharded")."""
    train_fn = functools.partial(train_step, model=Transformer(model_config),
                                 label_smoothing=config.train.label_smoothing,
                                 schedule=schedule_of(config.optim, model_config.d_model),
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


def checkpoint_bytes(config: ml_collections.ConfigDict) -> int:
    """Bytes of one checkpoint's arrays (parameters, optimizer state, step) for ``config``,
    with the vocabulary size it asks for; nothing is allocated."""
    model_config = TransformerConfig.from_config(config.model, config.data.vocab_size)
    shapes = jax.eval_shape(lambda: create_train_state(config, model_config, jax.random.key(0)))
    return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(shapes))


# ----------------------------------------------------------------------------------------
# The loop

# Train steps dispatched but not yet finished, at most. JAX dispatches asynchronously, so an
# unthrottled loop runs ahead of the device by up to a log window: a stop signal was then
# noticed, and the checkpoint written, only after every queued step had run (22 steps, 46 s
# in one run). With two, the device always has the next step queued while the host prepares
# the one after, and a stop costs at most about two step times before the save.
STEPS_IN_FLIGHT = 2


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: storage.PathLike) -> dict:
    """Trains (or resumes) and evaluates; returns the final metrics.

    SIGTERM or SIGINT stops training at the next step boundary with a checkpoint (data
    position included); the result is then ``{"preempted_at_step": step}`` and running the
    same command again resumes exactly. Raises TrainingStopped when ``train.nonfinite`` is
    "stop" and ``train.max_nonfinite_in_a_row`` steps in a row were not finite.

    The run holds the workdir from start to end (``workdirs.Hold``: a second run on it is
    refused) and checks its config against the workdir's (``resume.remember_config``:
    changed model or data settings are refused, other changes recorded) before anything
    else is written there.
    """
    config_lib.validate(config)
    workdir = storage.path(workdir)
    faults.check_workdir(workdir, checkpoint_bytes(config), config.train.keep_checkpoints)
    is_chief = jax.process_index() == 0
    with workdirs.Hold(workdir, enabled=is_chief):
        resuming = (bool(workdirs.checkpoint_steps_on_disk(workdir))
                    or tokenizer_lib.vocab_path(workdir).exists())
        resume.remember_config(workdir, json.loads(config.to_json_best_effort()), resuming,
                                 write=is_chief)
        run = Run(config, workdir)
        with faults.StopSignals(multiprocess=jax.process_count() > 1) as signals:
            finished = run.train(signals)
        if not finished:
            return {"preempted_at_step": run.step // run.accum}
        return run.finish()


class Run:
    """One training run: its data, model, compiled steps, checkpoints and logs, resumed from
    the newest checkpoint in the workdir that restores whole. ``step`` counts micro-batches
    (optimizer steps times ``optim.grad_accum_steps``)."""

    def __init__(self, config: ml_collections.ConfigDict, workdir: storage.Path):
        self.config, self.workdir = config, workdir
        self.is_chief = jax.process_index() == 0
        self.accum = config.optim.grad_accum_steps
        self.total_steps = config.train.num_steps * self.accum
        num_devices = len(parallel.local_devices(config.train.devices))
        self.global_devices = num_devices * jax.process_count()

        # Data and vocabulary.
        data = pipeline.data_for(config, workdir, num_devices)
        self.tokenizer, self.data, self.rows = data.tokenizer, data.train, data.rows
        self.row_len, self.eval_rows = data.shape.row_len, data.eval_rows
        self.eval_source = sources.get_source(config.data, "validation")
        self.writer = MetricWriter(workdir, enabled=self.is_chief)

        # Model, state and the compiled steps; the state of the latest checkpoint.
        self.model_config = TransformerConfig.from_config(config.model,
                                                          self.tokenizer.vocab_size)
        init_key, self.dropout_key = jax.random.split(jax.random.key(config.train.seed))
        state = create_train_state(config, self.model_config, init_key)
        self.executor = make_executor(config, self.model_config, state)
        self.ckpts = checkpoints.Checkpoints(workdir, config.train.keep_checkpoints)
        state, meta = self._resume(state)
        self._log_model(state)
        self.state = self.executor.place(state)

        self.window = _LogWindow(self.step)
        self.in_flight: collections.deque = collections.deque()  # a scalar of each step
        self.nonfinite = faults.NonFiniteSteps(
            config.train.nonfinite, config.train.max_nonfinite_in_a_row,
            meta.get("nonfinite_steps", 0), meta.get("nonfinite_in_a_row", 0))
        self.mfu = MfuMeter(config, self.model_config, self.global_devices,
                            row_len=self.row_len)
        self.checkpoint_clock = (CheckpointClock(config.train.checkpoint_every_minutes)
                                 if config.train.checkpoint_every_minutes else None)
        self.profile = Profile(workdir, config.train.profile_start * self.accum,
                               config.train.profile_steps * self.accum, enabled=self.is_chief)
        self.final: dict[str, Any] = {}
        self.dev_bleu: float | None = None

    def _resume(self, state: Any) -> tuple[Any, dict[str, Any]]:
        """(state, meta) of the newest whole checkpoint, the data iterator moved to its
        position; the initial state and {} for a new run."""
        restored = self.ckpts.restore_latest(self.executor.restore_template(state),
                                             self.data.iterator)
        if restored is None:  # config.json was written by resume.remember_config
            self.step = self.saved_step = 0
            if self.is_chief:
                provenance.record(self.workdir, 0)
            return state, {}
        self.step, state, meta = restored
        self.saved_step = self.step
        logging.info("resuming from step %d", self.step // self.accum)
        if self.is_chief:
            provenance.record(self.workdir, self.step // self.accum)
        return state, meta

    def _log_model(self, state: Any) -> None:
        n_params = sum(int(np.size(p)) for p in jax.tree.leaves(state.params))
        c = self.config
        logging.info("model: %s (%s scale), %d parameters, vocabulary %d, batch %d rows x %d "
                     "tokens on %d device(s), %s", c.variant, c.scale, n_params,
                     self.tokenizer.vocab_size, self.rows, self.row_len, self.global_devices,
                     self.executor.kind)

    def _due(self, every: int) -> bool:
        return self.step % (every * self.accum) == 0 or self.step == self.total_steps

    def train(self, signals: faults.StopSignals) -> bool:
        """Trains to ``train.num_steps``; False if a stop signal ended it early (after a
        checkpoint)."""
        t = self.config.train
        try:
            while self.step < self.total_steps:
                self._train_step()
                if self._due(t.log_every):
                    self._log_train()
                if signals.stop_requested(self.step):
                    self._save()
                    self.close()
                    logging.warning("stopped at step %d with a checkpoint; run the same command "
                                    "to resume", self.step // self.accum)
                    return False
                if self._due(t.eval_every):
                    self._evaluate()
                if t.bleu_every and self.step % (t.bleu_every * self.accum) == 0:
                    scores = _validation_bleu(
                        self.config, self.model_config, self.executor.params(self.state),
                        self.tokenizer, self.eval_source)
                    self.dev_bleu = scores[metric_keys.BLEU]
                    self.writer.write(metric_keys.EVAL, self.step // self.accum, scores)
                if self._checkpoint_due():
                    self._save()
        except Exception:
            self.close()  # the checkpoint in flight is finished first
            raise
        self.ckpts.wait()
        return True

    def _checkpoint_due(self) -> bool:
        """Every train.checkpoint_every steps or, with train.checkpoint_every_minutes, when
        that many minutes passed since the last checkpoint; and at the last step."""
        clock = self.checkpoint_clock
        if clock is None or self.step == self.total_steps:
            return self._due(self.config.train.checkpoint_every)
        if self.step % self.accum:
            return False  # within an accumulated step
        if jax.process_count() == 1:
            return clock.due()
        # Every process must save the same step, and their clocks differ: process 0 decides,
        # at log steps only, so the broadcast does not stall every step.
        if not self._due(self.config.train.log_every):
            return False
        from jax.experimental import multihost_utils

        return bool(multihost_utils.broadcast_one_to_all(np.asarray(clock.due())))

    def _train_step(self) -> None:
        self.profile.before(self.step)
        batch = next(self.data.iterator)
        self.window.padding.append(pipeline.padding_fraction(batch))
        self.state, metrics = self.executor.train(self.state, batch, self.dropout_key)
        self.window.pending.append(metrics)
        # Waiting for one scalar of an older step bounds how far the host runs ahead without
        # copying any metrics to the host (all of a step's outputs are ready together).
        self.in_flight.append(metrics["nonfinite"])
        while len(self.in_flight) >= STEPS_IN_FLIGHT:
            jax.block_until_ready(self.in_flight.popleft())
        self.step += 1
        self.profile.after(self.step, metrics)

    def _fetch_metrics(self) -> None:
        """Brings the steps' metrics to the host and counts the skipped steps (which may
        stop the run)."""
        first, skipped = self.window.fetch(self.executor)
        self.nonfinite.update(first, skipped, self.saved_step or None)

    def _log_train(self) -> None:
        self._fetch_metrics()
        scalars = self.window.summarise(self.step, self.accum, self.mfu)
        scalars[metric_keys.SKIPPED_LONG_PAIRS] = self.data.length_filter.skipped
        scalars[metric_keys.NONFINITE_STEPS] = self.nonfinite.total
        self.writer.write(metric_keys.TRAIN, self.step // self.accum, scalars)

    def _evaluate(self) -> None:
        batches = pipeline.eval_batches(self.eval_source, self.tokenizer,
                                        max_len=self.config.data.max_len,
                                        rows=self.eval_rows,
                                        max_batches=self.config.train.eval_batches)
        self.final = loss_over_batches(
            functools.partial(self.executor.evaluate, self.state),
            (pipeline.process_rows(b, jax.process_index(), jax.process_count()) for b in batches))
        self.writer.write(metric_keys.EVAL, self.step // self.accum, self.final)

    def _save(self) -> None:
        """A checkpoint of this step (once), with the data position and the counts."""
        if self.step == self.saved_step:
            return
        self._fetch_metrics()
        meta = {"step": self.step, "vocab_size": self.tokenizer.vocab_size,
                "skipped_long_pairs": self.data.length_filter.skipped, **self.nonfinite.state()}
        self.ckpts.save(self.step, self.executor.host_state(self.state), self.data.iterator,
                        meta, force=True)
        self.writer.flush()  # in a bucket the logs are rewritten: up to this checkpoint
        self.saved_step = self.step
        if self.checkpoint_clock is not None:
            self.checkpoint_clock.restart()

    def close(self) -> None:
        self.writer.close()
        self.ckpts.close()

    def finish(self) -> dict[str, Any]:
        """The end of a finished run: the test split decoded with the averaged model (both
        BLEUs, its hypotheses and references under eval/), samples, final_metrics.json,
        pictures."""
        c, step = self.config, self.total_steps // self.accum
        params, averaged = self._final_params()
        final = {**self.final, metric_keys.AVERAGED_STEPS: averaged}
        if c.train.bleu_sentences or c.train.samples:
            final.update(_final_translations(c, self.model_config, params, self.tokenizer,
                                             self.writer, step, self.workdir, self.is_chief))
        if self.is_chief:
            storage.write_atomically(self.workdir / layout.FINAL_METRICS,
                                     json.dumps({metric_keys.STEP: step, **final}, indent=2))
            self.writer.hparams(_hparams(c, self.workdir),
                                {**final, "dev_bleu": self.dev_bleu}, step)
        self.close()
        if c.train.visualize_sentences and self.is_chief:
            from transformer_jax.analysis import (
                pictures as visualize,  # matplotlib only when pictures are asked for
            )
            visualize.write_run_pictures(c, self.model_config, params, self.tokenizer,
                                         self.workdir)
        return final

    def _final_params(self) -> tuple[Any, list[int]]:
        """(parameters to evaluate, the checkpoint steps averaged into them): the mean of the
        last config_lib.checkpoints_to_average checkpoints, as the paper evaluates; with one,
        the trained state's own parameters (those of the last checkpoint)."""
        wanted = config_lib.checkpoints_to_average(self.config)
        if wanted == 1:
            return self.executor.params(self.state), [self.saved_step]
        params, steps, notes = self.ckpts.average_last(
            params_lib.param_shapes(self.model_config), wanted)
        logging.info("evaluating the mean of checkpoints %s", ", ".join(map(str, steps)))
        for note in notes:
            logging.warning("warning: %s", note)
        return params, steps


class CheckpointClock:
    """Whether ``minutes`` of wall-clock time passed since the last checkpoint (or the
    start): train.checkpoint_every_minutes, the paper's 10-minute interval."""

    def __init__(self, minutes: float, clock: Callable[[], float] | None = None):
        self.seconds = minutes * 60.0
        self.clock = clock or time.monotonic
        self.last = self.clock()

    def due(self) -> bool:
        return self.clock() - self.last >= self.seconds

    def restart(self) -> None:
        self.last = self.clock()


class MfuMeter:
    """Model FLOPs utilisation: FLOPs of the target tokens processed per second over the
    peak of all devices (on a CPU, the machine's peak measured by a matmul probe).

    A probe taken while other work loads the machine reads low, and every MFU of the run
    would then read high (a whole run once logged more than 100%). So a measured peak is
    measured again (``reprobe``, a cheaper 2048^3 matmul) at log lines 1, 2, 4, 8, ... and
    whenever a figure exceeds 100%, and the best of all the probes is the peak. A figure
    still above 100% is not logged (None, with a warning): it is known to be wrong, and a
    figure clamped to 100% would look like a real one on a plot.
    """

    REPROBE_N = 2048

    def __init__(self, config: ml_collections.ConfigDict, model_config: TransformerConfig,
                 num_devices: int, probe: Callable[[], float] | None = None,
                 reprobe: Callable[[], float] | None = None, row_len: int = 0):
        # Attention's FLOPs follow the rows trained on (row_len; 0: data.max_len).
        self.flops_per_token = params_lib.train_flops_per_token(
            model_config, row_len or config.data.max_len)
        peak, self.source = hardware.peak_flops_per_device(config.train.peak_flops,
                                                           config.model.dtype, probe)
        self.measured = hardware.is_measured(config.train.peak_flops)
        on_cpu = jax.devices()[0].platform == "cpu" and self.measured
        # Fake CPU devices share the machine's cores: its probe is the peak of them all.
        self.devices = 1 if on_cpu else num_devices
        self.peak = peak * self.devices
        self.reprobe = reprobe or functools.partial(
            hardware.measure_matmul, self.REPROBE_N, config.model.dtype, repeats=2)
        self.calls = 0

    def _probe_again(self) -> None:
        measured = self.reprobe() * self.devices
        if measured > self.peak:
            logging.info("peak FLOP/s for MFU raised by a new probe: %.1f -> %.1f GFLOP/s",
                         self.peak / 1e9, measured / 1e9)
            self.peak = measured

    def __call__(self, tokens_per_s: float) -> float | None:
        """MFU at ``tokens_per_s`` target tokens per second; None if above 1 (see above).
        Call it while no step runs: it may time a matmul."""
        self.calls += 1
        if self.measured and self.calls & (self.calls - 1) == 0:  # a power of two
            self._probe_again()
        mfu = self.flops_per_token * tokens_per_s / self.peak
        if mfu > 1.0 and self.measured:
            self._probe_again()
            mfu = self.flops_per_token * tokens_per_s / self.peak
        if mfu > 1.0:
            logging.warning("MFU %.0f%% is above 100%%: the peak (%.1f GFLOP/s, %s) is too "
                            "low; MFU left out of this log line", 100 * mfu, self.peak / 1e9,
                            self.source)
            return None
        return mfu


@dataclasses.dataclass
class _LogWindow:
    """Step metrics accumulated between two log lines: ``pending`` on device (fetching
    them every step would stall the accelerator), ``fetched`` on the host."""

    step: int  # the last step before the window
    time: float = dataclasses.field(default_factory=time.time)
    pending: list = dataclasses.field(default_factory=list)
    fetched: list = dataclasses.field(default_factory=list)
    padding: list = dataclasses.field(default_factory=list)

    def fetch(self, executor: Any) -> tuple[int, list[bool]]:
        """Fetches the pending metrics; returns the first fetched step and whether each
        fetched step was skipped (non-finite)."""
        first = self.step + len(self.fetched) + 1
        new = [executor.fetch(m) for m in self.pending]
        self.fetched, self.pending = self.fetched + new, []
        return first, [m["nonfinite"] > 0 for m in new]

    def summarise(self, step: int, accum: int, mfu: MfuMeter) -> dict:
        """The window's scalars (loss and perplexity over the steps that were not skipped,
        absent when all were); starts the next window."""
        applied = [m for m in self.fetched if not m["nonfinite"]]
        total = {k: sum(m[k] for m in applied) for k in ("loss_sum", "nll_sum", "tokens",
                                                         "source_tokens")}
        elapsed = max(time.time() - self.time, 1e-9)
        tokens = max(total["tokens"], 1.0)
        scalars = {
            metric_keys.LEARNING_RATE: self.fetched[-1]["learning_rate"],
            metric_keys.TOKENS_PER_S: total["tokens"] / elapsed,
            metric_keys.SOURCE_TOKENS_PER_S: total["source_tokens"] / elapsed,
            metric_keys.STEPS_PER_S: (step - self.step) / accum / elapsed,
            metric_keys.PADDING_FRACTION: float(np.mean(self.padding)),
        }
        utilisation = mfu(total["tokens"] / elapsed)  # may time a probe: after `elapsed`
        if utilisation is not None:
            scalars[metric_keys.MFU] = utilisation
        if applied:  # a window of skipped steps only has no loss to log
            scalars.update({metric_keys.LOSS: total["loss_sum"] / tokens,
                            metric_keys.PERPLEXITY: perplexity(total["nll_sum"], tokens),
                            metric_keys.GRAD_NORM: applied[-1]["grad_norm"]})
        self.step, self.time, self.fetched, self.padding = step, time.time(), [], []
        return scalars


class Profile:
    """Writes a JAX profiler trace of steps [start, start + steps) into <workdir>/profile."""

    def __init__(self, workdir: storage.Path, start: int, steps: int, enabled: bool = True):
        self.directory = workdir / layout.PROFILE
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
    hyps = translation.translate(params, model_config, tokenizer, [s for s, _ in pairs],
                                 decode.DecodeConfig.from_config(config.decode))
    return {metric_keys.BLEU: bleu.bleu(hyps, [t for _, t in pairs])[0]}


# The end-of-training test hypotheses and their references, one sentence a line (relative to
# the workdir): for significance tests between runs.
FINAL_HYPOTHESES = "eval/test-final.hyp.txt"
FINAL_REFERENCES = "eval/test-final.ref.txt"


def _final_translations(config: ml_collections.ConfigDict, model_config: TransformerConfig,
                        params: Any, tokenizer: tokenizer_lib.Tokenizer, writer: MetricWriter,
                        step: int, workdir: storage.Path, is_chief: bool = True) -> dict[str, Any]:
    """Decodes the first sentences of the test split: both BLEUs, the hypotheses and
    references written to FINAL_HYPOTHESES and FINAL_REFERENCES, and a few samples."""
    test = sources.get_source(config.data, "test")
    n = min(max(config.train.bleu_sentences, config.train.samples), len(test))
    pairs = [test[i] for i in range(n)]
    start = time.time()
    decoding = decode.DecodeConfig.from_config(config.decode)
    hyps = translation.translate(params, model_config, tokenizer, [s for s, _ in pairs], decoding)
    refs = [t for _, t in pairs]
    result: dict[str, Any] = {}
    if config.train.bleu_sentences:
        score, signature = bleu.bleu(hyps, refs)
        tokenized, tokenized_signature = bleu.tokenized_bleu(hyps, refs,
                                                             config.data.target_lang)
        k = metric_keys
        result = {k.TEST_BLEU: score, k.BLEU_SIGNATURE: signature,
                  k.TEST_BLEU_TOKENIZED: tokenized,
                  k.BLEU_TOKENIZED_SIGNATURE: tokenized_signature, k.BLEU_SENTENCES: n,
                  k.TEST_HYPOTHESES: FINAL_HYPOTHESES, k.TEST_REFERENCES: FINAL_REFERENCES}
        if is_chief:
            (workdir / "eval").mkdir(exist_ok=True)
            for name, lines in ((FINAL_HYPOTHESES, hyps), (FINAL_REFERENCES, refs)):
                storage.write_atomically(workdir / name, "".join(
                    line.replace("\n", " ") + "\n" for line in lines))
        writer.write(k.TEST, step, {k.BLEU: score, k.BLEU_TOKENIZED: tokenized})
        logging.info("test BLEU %.2f (tokenized, compound-split: %.2f) on %d sentences (%s, "
                     "%.1fs)  %s", score, tokenized, n,
                     translation.describe(dataclasses.asdict(decoding)), time.time() - start,
                     signature)
    for (src, ref), hyp in list(zip(pairs, hyps, strict=True))[: config.train.samples]:
        writer.sample(src, ref, hyp)
    return result


def _hparams(config: ml_collections.ConfigDict, workdir: storage.Path) -> dict[str, Any]:
    """The hyperparameters TensorBoard shows for this run: the values its sweep point swept
    (``sweep_point.json``) and its seeds, or the Table 3 quantities and seeds of a run
    outside a sweep."""
    record = workdirs.read_json(workdir / layout.SWEEP_POINT) or {}
    values = dict(record.get("fields") or {})
    if not values:
        values = {q: config_lib.quantity(config, q) for q in config_lib.QUANTITIES}
    values.pop("seed", None)
    values.update({f: config_lib.get_field(config, f) for f in config_lib.SEED_FIELDS})
    values.setdefault("variant", config.variant)
    return values
