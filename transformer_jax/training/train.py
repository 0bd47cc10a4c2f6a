"""Training: the loop that trains a run, evaluates it as it goes and reports at the end.

``train(spec, workdir)`` trains from scratch or resumes from the latest checkpoint in
``workdir``, evaluates on the validation split as it goes, and at the end decodes part of
the test split for BLEU and sample translations. Its settings are a frozen TrainingSpec
(spec.py), read and validated once from the config by the entry point.

The optimizer (optimizer.py) follows a learning-rate schedule (schedules/); the train state
and the compiled steps are step.py's, the meters of the log lines meters.py's, the BLEU and
translations a run reports results.py's.
"""

from __future__ import annotations

import collections
import functools
import json
import logging
from typing import Any

import jax
import ml_collections
import numpy as np

from transformer_jax.config import resume
from transformer_jax.data import batching, pipeline, tokenizer as tokenizer_lib
from transformer_jax.evaluation.perplexity import loss_over_batches
from transformer_jax.io import (
    bucket_retries,
    checkpoints,
    holds,
    layout,
    metric_keys,
    provenance,
    storage,
    workdirs,
)
from transformer_jax.io.logs import MetricWriter
from transformer_jax.model import counts
from transformer_jax.training import faults, memory, parallel, results, schedules, stops
from transformer_jax.training.meters import CheckpointClock, LogWindow, MfuMeter, Profile
from transformer_jax.training.spec import TrainingSpec
from transformer_jax.training.step import executor_for, initial_state, state_bytes

# Train steps dispatched but not yet finished, at most. JAX dispatches asynchronously, so an
# unthrottled loop runs ahead of the device by up to a log window: a stop signal was then
# noticed, and the checkpoint written, only after every queued step had run (22 steps, 46 s
# in one run). With two, the device always has the next step queued while the host prepares
# the one after, and a stop costs at most about two step times before the save.
STEPS_IN_FLIGHT = 2


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: storage.PathLike) -> dict:
    """:func:`train` on the spec of ``config``, validated (ConfigError naming the field)."""
    return train(TrainingSpec.from_config(config), workdir)


def train(spec: TrainingSpec, workdir: storage.PathLike) -> dict:
    """Trains (or resumes) and evaluates; returns the final metrics.

    SIGTERM or SIGINT stops training at the next step boundary with a checkpoint (data
    position included); the result is then ``{"preempted_at_step": step}`` and running the
    same command again resumes exactly. A run that stops itself (stops.py: diverged, or its
    Optuna trial pruned; ``train.nonfinite`` "stop" after ``train.max_nonfinite_in_a_row``
    non-finite steps in a row) saves a checkpoint, writes final_metrics.json with STOPPED
    and raises TrainingStopped; on a workdir whose run stopped, TrainingStopped is raised
    at once (a stopped run is not resumed).

    The run holds the workdir from start to end (``holds.Hold``: a second run on it is
    refused) and checks its config against the workdir's (``resume.remember_config``:
    changed model or data settings are refused, other changes recorded) before anything
    else is written there.
    """
    parallel.local_devices(spec.loop.devices)  # as many as train.devices asks for
    workdir = storage.path(workdir)
    stops.refuse_if_stopped(workdir)
    faults.check_workdir(workdir, state_bytes(spec.optim, spec.model), spec.checkpoints.keep)
    is_chief = jax.process_index() == 0
    # The study and trial are checked before anything is written.
    trial = (stops.TrialWatch(spec.stops.search, last_step=spec.loop.num_steps)
             if spec.stops.trial and is_chief else None)
    with (bucket_retries.stop_when_failing(workdir, storage.is_remote(workdir)),
          holds.Hold(workdir, enabled=is_chief)):
        resuming = (bool(workdirs.checkpoint_steps_on_disk(workdir))
                    or tokenizer_lib.vocab_path(workdir).exists())
        changes = resume.remember_config(workdir, spec.recorded, resuming, write=is_chief)
        moved = schedules.changed_by(spec.optim.schedule, changes)
        if moved and workdirs.checkpoint_steps_on_disk(workdir):
            logging.warning("warning: %s changed since the last run: the steps to come follow "
                            "another learning-rate schedule than those before", ", ".join(moved))
        with faults.storage_faults(workdir):
            run = Run(spec, workdir, trial)
            with faults.StopSignals(multiprocess=jax.process_count() > 1) as signals:
                finished = run.train(signals)
            if not finished:
                return {"preempted_at_step": run.step}
            return run.finish()


class Run:
    """One training run: its data, model, compiled steps, checkpoints and logs, resumed from
    the newest checkpoint in the workdir that restores whole. ``step`` counts optimizer
    steps, each of ``optim.grad_accum_steps`` micro-batches (``accum``) drawn from the data
    iterator and stacked into one batch; checkpoints, logs and TensorBoard count the same."""

    def __init__(self, spec: TrainingSpec, workdir: storage.Path,
                 trial: stops.TrialWatch | None = None):
        self.workdir, self.is_chief, loop = workdir, jax.process_index() == 0, spec.loop
        self.accum, self.total_steps = spec.optim.grad_accum_steps, loop.num_steps
        num_devices = len(parallel.local_devices(loop.devices))
        self.global_devices = num_devices * jax.process_count()

        # Data and vocabulary.
        data = pipeline.data_of(spec.data, workdir, num_devices)
        self.tokenizer, self.data, self.rows = data.tokenizer, data.train, data.rows
        self.row_len, self.eval_rows = data.shape.row_len, data.eval_rows
        self.eval_source, self.eval_ids = data.eval_source, data.eval_ids
        self.writer = MetricWriter(workdir, enabled=self.is_chief, timeout_s=loop.write_timeout_s)

        # Model, state and the compiled steps; the state of the latest checkpoint.
        self.spec = spec = spec.with_vocab(self.tokenizer.vocab_size)
        self.model_config = spec.model
        init_key, self.dropout_key = jax.random.split(jax.random.key(loop.seed))
        state = initial_state(spec.optim, self.model_config, init_key)
        self.executor = executor_for(spec.optim, loop, self.model_config, state)
        self.ckpts = checkpoints.Checkpoints(workdir, spec.checkpoints.keep,
                                             timeout_s=loop.write_timeout_s)
        state, meta = self._resume(state)
        self._log_model(state)
        # A step that cannot fit the device stops here, in one line, not at its first
        # step with an out-of-memory error.
        memory.check_fits(self.executor, state, spec, self.rows, self.row_len)
        self.state = self.executor.place(state)

        self.window = LogWindow(self.step)
        self.in_flight: collections.deque = collections.deque()  # a scalar of each step
        self.nonfinite = faults.NonFiniteSteps(
            loop.nonfinite, loop.max_nonfinite_in_a_row,
            meta.get("nonfinite_steps", 0), meta.get("nonfinite_in_a_row", 0))
        self.watches = stops.watches(spec.stops, meta, trial)
        self.train_loss = float("nan")  # of the last log window
        self.mfu = MfuMeter(self.model_config, self.global_devices, self.row_len,
                            peak_flops=loop.peak_flops)
        self.checkpoint_clock = (CheckpointClock(spec.checkpoints.every_minutes)
                                 if spec.checkpoints.every_minutes else None)
        self.profile = Profile(workdir, loop.profile_start, loop.profile_steps,
                               enabled=self.is_chief)
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
        logging.info("resuming from step %d", self.step)
        if self.is_chief:
            provenance.record(self.workdir, self.step)
        return state, meta

    def _log_model(self, state: Any) -> None:
        n_params = sum(int(np.size(p)) for p in jax.tree.leaves(state.params))
        s = self.spec
        logging.info("model: %s (%s scale), %d parameters, vocabulary %d, batch %d rows x %d "
                     "tokens on %d device(s), %s", s.variant, s.scale, n_params,
                     self.tokenizer.vocab_size, self.rows, self.row_len, self.global_devices,
                     self.executor.kind)
        logging.info("learning rate: %s (%s)", s.optim.schedule, ", ".join(
            f"{field} {value}" for field, value in s.optim.schedule_settings))

    def _due(self, every: int) -> bool:
        return self.step % every == 0 or self.step == self.total_steps

    def train(self, signals: faults.StopSignals) -> bool:
        """Trains to ``train.num_steps``; False if a stop signal ended it early (after a
        checkpoint)."""
        e, log_every = self.spec.evaluation, self.spec.loop.log_every
        # A write that hangs is given up stalls.SIGNAL_GRACE_S after a stop signal (stalls.within).
        self.writer.interrupted = self.ckpts.interrupted = lambda: signals.received
        try:
            while self.step < self.total_steps:
                self._train_step()
                evaluating = self._due(e.every)
                if self._due(log_every) or evaluating:  # the watches judge a fresh loss
                    self._log_train()
                if signals.stop_requested(self.step):
                    self._save()
                    self.close()
                    logging.warning("stopped at step %d with a checkpoint; run the same command "
                                    "to resume", self.step)
                    return False
                figures: dict[str, Any] = {}  # the validation figures of this step
                if evaluating:
                    self._evaluate()
                    figures.update(self.final)
                if e.bleu_every and self.step % e.bleu_every == 0:
                    scores = results.validation_bleu(
                        e, self.model_config, self.executor.params(self.state),
                        self.tokenizer, self.eval_source)
                    self.dev_bleu = scores[metric_keys.BLEU]
                    self.writer.write(metric_keys.EVAL, self.step, scores)
                    figures.update(scores)
                if self._checkpoint_due():
                    self._save()
                stop = self._stop_due(figures if evaluating else None)
                if stop is not None:
                    self._stop(stop, figures)
        except Exception as e:
            # The checkpoint in flight is finished first; after a failed write what it meets
            # on the same disk is left out, the first failure is the one reported.
            with faults.storage_faults_after(e):
                self.close()
            raise
        self.ckpts.wait()
        return True

    def _stop_due(self, figures: dict[str, Any] | None) -> stops.Stop | None:
        """The Stop of this step, if the run stops itself here: after too many non-finite
        steps, or when a watch says so at an evaluation (``figures`` not None)."""
        step = self.step
        stop = self.nonfinite.stop(step)
        if figures is None:
            return stop
        evaluation = stops.Evaluation(step, self.train_loss, figures)
        found = [watch(evaluation) for watch in self.watches]  # every watch sees every one
        watched = next((s for s in found if s is not None), None)
        if jax.process_count() > 1:  # process 0 alone reports to a trial: its decision
            from jax.experimental import multihost_utils

            code = int(multihost_utils.broadcast_one_to_all(np.asarray(
                stops.REASONS.index(watched.reason) + 1 if watched else 0)))
            reason = stops.REASONS[code - 1] if code else None
            if watched is None or watched.reason != reason:
                watched = (stops.Stop(reason, step, f"{reason} at step {step} (as process 0 "
                                      "decided)") if reason else None)
        return stop or watched

    def _stop(self, stop: stops.Stop, figures: dict[str, Any]) -> None:
        """Ends a run that stops itself: a checkpoint of this step (waited for), then
        final_metrics.json with the stop, then TrainingStopped."""
        self._save()
        self.ckpts.wait()
        if self.is_chief:
            stops.write_record(self.workdir, stop, figures)
        raise stop.error()

    def _checkpoint_due(self) -> bool:
        """Every train.checkpoint_every steps or, with train.checkpoint_every_minutes, when
        that many minutes passed since the last checkpoint; and at the last step."""
        clock = self.checkpoint_clock
        if clock is None or self.step == self.total_steps:
            return self._due(self.spec.checkpoints.every)
        if jax.process_count() == 1:
            return clock.due()
        # Every process must save the same step, and their clocks differ: process 0 decides,
        # at log steps only, so the broadcast does not stall every step.
        if not self._due(self.spec.loop.log_every):
            return False
        from jax.experimental import multihost_utils

        return bool(multihost_utils.broadcast_one_to_all(np.asarray(clock.due())))

    def _train_step(self) -> None:
        self.profile.before(self.step)
        batch = self._next_batch()
        self.state, metrics = self.executor.train(self.state, batch, self.dropout_key)
        self.window.pending.append(metrics)
        # Waiting for one scalar of an older step bounds how far the host runs ahead without
        # copying any metrics to the host (all of a step's outputs are ready together).
        self.in_flight.append(metrics["nonfinite"])
        while len(self.in_flight) >= STEPS_IN_FLIGHT:
            jax.block_until_ready(self.in_flight.popleft())
        self.step += 1
        self.profile.after(self.step, metrics)

    def _next_batch(self) -> dict[str, np.ndarray]:
        """The next optimizer step's batch: ``accum`` micro-batches of the iterator, stacked
        on a leading axis when more than one (the train step's input, step.train_step). A
        checkpoint comes between steps, so the data position it saves is a step's end."""
        micro = [next(self.data.iterator) for _ in range(self.accum)]
        self.window.padding.append(float(np.mean([batching.padding_fraction(b)
                                                  for b in micro])))
        if self.accum == 1:
            return micro[0]
        return {k: np.stack([b[k] for b in micro]) for k in micro[0]}

    def _fetch_metrics(self) -> None:
        """Brings the steps' metrics to the host and counts the skipped steps (which may
        stop the run)."""
        first, skipped = self.window.fetch(self.executor)
        self.nonfinite.update(first, skipped)

    def _log_train(self) -> None:
        self._fetch_metrics()
        scalars = self.window.summarise(self.step, self.mfu)
        scalars[metric_keys.SKIPPED_LONG_PAIRS] = self.data.length_filter.skipped
        scalars[metric_keys.NONFINITE_STEPS] = self.nonfinite.total
        self.train_loss = scalars.get(metric_keys.LOSS, float("nan"))  # nan: all skipped
        self.writer.write(metric_keys.TRAIN, self.step, scalars)

    def _evaluate(self) -> None:
        batches = batching.eval_batches(self.eval_ids, self.tokenizer,
                                        max_len=self.spec.data.batch.max_len,
                                        rows=self.eval_rows,
                                        max_batches=self.spec.evaluation.batches)
        self.final = loss_over_batches(
            functools.partial(self.executor.evaluate, self.state),
            (batching.process_rows(b, jax.process_index(), jax.process_count()) for b in batches))
        self.writer.write(metric_keys.EVAL, self.step, self.final)

    def _save(self) -> None:
        """A checkpoint of this step (once), with the data position and the counts."""
        if self.step == self.saved_step:
            return
        self._fetch_metrics()
        meta = {"step": self.step, "vocab_size": self.tokenizer.vocab_size,
                resume.MODEL_RECORD: self.spec.recorded_model,
                "skipped_long_pairs": self.data.length_filter.skipped, **self.nonfinite.state()}
        for watch in self.watches:
            meta.update(watch.state())
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
        s, e, step = self.spec, self.spec.evaluation, self.total_steps
        params, averaged = self._final_params()
        final = {**self.final, metric_keys.AVERAGED_STEPS: averaged}
        if e.bleu_sentences or e.samples:
            final.update(results.final_translations(
                e, s.data.source, self.model_config, params, self.tokenizer, self.writer, step,
                self.workdir, self.is_chief))
        # Every process computes (the parameters may be sharded over them); the chief writes.
        results.write_sentence_stats(e, self.model_config, params,
                                     self.eval_ids if self._whole_split_evaluated() else None,
                                     self.tokenizer, s.data.batch.max_len, self.workdir,
                                     final.pop("translation_stats", None), self.is_chief)
        if self.is_chief:
            storage.write_atomically(self.workdir / layout.FINAL_METRICS,
                                     json.dumps({metric_keys.STEP: step, **final}, indent=2))
            hparams = results.hparams(dict(s.table3), dict(s.seeds), s.variant, self.workdir)
            self.writer.hparams(hparams, {**final, "dev_bleu": self.dev_bleu}, step)
        self.close()
        if e.visualize_sentences and self.is_chief:
            from transformer_jax.analysis import (
                pictures as visualize,  # matplotlib only when pictures are asked for
            )
            visualize.write_run_pictures(s.data.source, e.visualize_sentences, e.decode,
                                         self.model_config, params, self.tokenizer,
                                         self.workdir)
        return final

    def _whole_split_evaluated(self) -> bool:
        """Whether the validation's perplexity covered the whole split (train.eval_batches
        0, or enough batches): only then are its sentences' NLL the run's perplexity's."""
        if not self.spec.evaluation.batches:
            return True
        ids = batching.as_ids(self.eval_ids, self.tokenizer)
        targets = ids.read_ids(np.arange(len(ids)))[1]
        whole = int(np.minimum(targets.lengths, self.spec.data.batch.max_len).sum())
        return whole == int(self.final.get(metric_keys.TOKENS, -1))

    def _final_params(self) -> tuple[Any, list[int]]:
        """(parameters to evaluate, the checkpoint steps averaged into them): the mean of the
        last ``checkpoints.average`` checkpoints, as the paper evaluates; with one, the
        trained state's own parameters (those of the last checkpoint)."""
        wanted = self.spec.checkpoints.average
        if wanted == 1:
            return self.executor.params(self.state), [self.saved_step]
        params, steps, notes = self.ckpts.average_last(
            counts.param_shapes(self.model_config), wanted)
        logging.info("evaluating the mean of checkpoints %s", ", ".join(map(str, steps)))
        for note in notes:
            logging.warning("warning: %s", note)
        return params, steps
