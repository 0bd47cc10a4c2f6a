"""Runs that stop themselves: a training loss that diverged, and an Optuna trial pruned.

At each evaluation the loop hands its *watches* (:func:`watches`) an :class:`Evaluation`;
each returns None or a :class:`Stop`. A stop (or :class:`faults.NonFiniteSteps`, which stops
the same way after ``train.max_nonfinite_in_a_row`` non-finite steps) ends the run:

1. a checkpoint of that step is saved (and waited for), as any checkpoint;
2. ``final_metrics.json`` is written with the step, the last validation figures and
   ``"stopped": {"reason": "diverged" or "pruned", "step": N, "message": "..."}``
   (:func:`write_record`);
3. :class:`errors.TrainingStopped` is raised; the command prints the message in one line and
   exits with ``errors.STOP_EXIT_STATUS[reason]``: 3 diverged, 4 pruned.

Running the same command again does not resume a stopped run: it says so in one line and exits
with the same status (:func:`refuse_if_stopped`). :func:`stopped` is the predicate a sweep's
controller reads ("this workdir's run stopped, and why").

The watches:

* :class:`Divergence` (``train.stop_on_divergence``): the training loss of the last log
  window, at ``train.divergence_patience`` evaluations in a row after
  ``optim.warmup_steps``, was not finite or above ``train.divergence_factor`` times the best
  of the run's evaluations so far.
* :class:`TrialWatch` (``search.storage`` set): reports ``search.objective`` to trial
  ``search.trial`` of the Optuna study ``search.study`` and stops when its pruner
  (``search.prune``, a module of studies/pruners/) says the trial should be pruned, except
  at the run's last step, where stopping saves nothing. It never tells the study the trial's
  final state: the controller does, from the record.

:func:`studies.open_storage` and the pruner registry (studies/pruners/) are the ones the
controller uses too, so both sides open the same storage and judge with the same pruner.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import ml_collections

from transformer_jax import studies
from transformer_jax.errors import STOP_EXIT_STATUS, TrainingStopped, UserError
from transformer_jax.io import layout, metric_keys, storage, workdirs
from transformer_jax.studies import pruners

if TYPE_CHECKING:  # the spec imports JAX and the data; the sweeps import this module without
    from transformer_jax.training.spec import StopSpec

DIVERGED, PRUNED = "diverged", "pruned"
REASONS = tuple(STOP_EXIT_STATUS)


@dataclasses.dataclass(frozen=True)
class Stop:
    """Why a run stops itself: ``reason`` (DIVERGED or PRUNED), at optimizer step ``step``,
    and the line that says so (``message``, starting "REASON at step N")."""

    reason: str
    step: int
    message: str

    def record(self) -> dict[str, Any]:
        """The STOPPED field of final_metrics.json."""
        return dataclasses.asdict(self)

    def error(self, message: str | None = None) -> TrainingStopped:
        return TrainingStopped(message or self.message, self.reason, self.step)


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """What the watches judge at one evaluation: its optimizer ``step``, the training loss
    of the last log window (``train_loss``, NaN when all its steps were skipped as
    non-finite) and the validation ``figures`` of this step (metric_keys' EVAL keys: loss,
    nll, perplexity, and bleu when it was measured)."""

    step: int
    train_loss: float
    figures: Mapping[str, float]


# ----------------------------------------------------------------------------------------
# Divergence


class Divergence:
    """Stops a run whose training loss, at ``patience`` evaluations in a row after step
    ``after_step``, was not finite or above ``factor`` times the best loss of its
    evaluations so far (those during warmup included). An evaluation below the threshold
    starts the count again. ``best`` and ``in_a_row`` are saved with every checkpoint
    (:meth:`state`), so a resumed run goes on counting."""

    def __init__(self, factor: float, patience: int, after_step: int,
                 best: float | None = None, in_a_row: int = 0):
        self.factor, self.patience, self.after_step = factor, patience, after_step
        self.best, self.in_a_row = best, in_a_row

    @classmethod
    def from_spec(cls, spec: StopSpec, meta: Mapping[str, Any]) -> Divergence:
        """The watch of ``spec``'s settings, its count that of a checkpoint's ``meta``."""
        return cls(spec.divergence_factor, spec.divergence_patience, spec.after_step,
                   meta.get("divergence_best"), meta.get("divergence_in_a_row", 0))

    def __call__(self, evaluation: Evaluation) -> Stop | None:
        loss, step = evaluation.train_loss, evaluation.step
        finite = loss is not None and math.isfinite(loss)
        threshold = self.factor * self.best if self.best is not None else math.inf
        if step <= self.after_step or (finite and loss <= threshold):
            self.in_a_row = 0
            if finite:
                self.best = loss if self.best is None else min(self.best, loss)
            return None
        self.in_a_row += 1
        if self.in_a_row < self.patience:
            return None
        best = f"{self.best:.4g}" if self.best is not None else "none"
        return Stop(DIVERGED, step, (
            f"diverged at step {step} (loss {loss:.4g}, best {best}, threshold "
            f"{threshold:.4g} = {self.factor:g} x best, at {self.in_a_row} evaluations in a row "
            f"after warmup; train.divergence_patience={self.patience})"))

    def state(self) -> dict[str, Any]:
        return {"divergence_best": self.best, "divergence_in_a_row": self.in_a_row}


# ----------------------------------------------------------------------------------------
# Optuna


class TrialWatch:
    """Reports ``search.objective`` at each evaluation that measured it to trial
    ``search.trial`` of study ``search.study`` in ``search.storage`` and stops the run when
    the pruner prunes it (never at ``last_step``, the run's last). Opened before training:
    an unknown pruner, a missing study or trial, a finished trial or a study of the other
    direction is refused in one line."""

    def __init__(self, search: ml_collections.ConfigDict, last_step: int | None = None):
        import optuna

        self.objective, self.number, self.name = search.objective, search.trial, search.study
        self.prune, self.last_step = search.prune, last_step
        pruner = pruners.make(search)
        where = f"search.study={search.study!r} in search.storage={search.storage!r}"
        store = studies.open_storage(search.storage)
        try:
            study = optuna.load_study(study_name=search.study, storage=store, pruner=pruner)
            study_id = store.get_study_id_from_name(search.study)
        except KeyError as e:
            raise UserError(f"{where}: no such study") from e
        if len(study.directions) > 1:
            raise UserError(f"{where}: a multi-objective study; optuna prunes only trials of "
                            "a study with one objective")
        wanted = studies.direction(search.objective)
        if study.direction.name.lower() != wanted:
            raise UserError(f"{where}: the study is to {study.direction.name.lower()}, but "
                            f"search.objective={search.objective!r} is better "
                            f"{'higher' if wanted == 'maximize' else 'lower'}")
        try:
            trial_id = store.get_trial_id_from_study_id_trial_number(study_id, search.trial)
        except KeyError as e:
            raise UserError(f"search.trial={search.trial}: {where} has no such trial") from e
        state = store.get_trial(trial_id).state
        if state.is_finished():
            raise UserError(f"search.trial={search.trial} of {where} is already "
                            f"{state.name}; a finished trial takes no more reports")
        self.trial = optuna.trial.Trial(study, trial_id)

    def __call__(self, evaluation: Evaluation) -> Stop | None:
        value = evaluation.figures.get(self.objective)
        if value is None:
            return None
        self.trial.report(float(value), evaluation.step)
        if evaluation.step == self.last_step or not self.trial.should_prune():
            return None
        return Stop(PRUNED, evaluation.step, (
            f"pruned at step {evaluation.step} ({self.objective} {value:.4g} reported to "
            f"trial {self.number} of study {self.name!r}; search.prune={self.prune!r})"))

    def state(self) -> dict[str, Any]:
        return {}  # the study holds what was reported


# ----------------------------------------------------------------------------------------
# The watches of a run, its record, and a stopped workdir


def watches(spec: StopSpec, meta: Mapping[str, Any],
            trial: TrialWatch | None = None) -> list[Any]:
    """The run's watches: Divergence with ``train.stop_on_divergence`` (its count restored
    from the checkpoint's ``meta``), and ``trial``, the TrialWatch opened (by process 0
    only: it alone reports, the loop shares its decision) when ``search.storage`` is set."""
    out: list[Any] = []
    if spec.stop_on_divergence:
        out.append(Divergence.from_spec(spec, meta))
    if trial is not None:
        out.append(trial)
    return out


def write_record(workdir: storage.Path, stop: Stop, figures: Mapping[str, Any]) -> None:
    """final_metrics.json of a run that stopped: its step, the last validation ``figures``
    and STOPPED."""
    storage.write_atomically(workdir / layout.FINAL_METRICS, json.dumps(
        {metric_keys.STEP: stop.step, **figures, metric_keys.STOPPED: stop.record()},
        indent=2))


def stopped(workdir: storage.PathLike) -> Stop | None:
    """The Stop the run of ``workdir`` ended with (its final_metrics.json's STOPPED), or None:
    not stopped (finished, unfinished, never started)."""
    record = workdirs.read_final(workdir).get(metric_keys.STOPPED)  # of the right types
    if not isinstance(record, dict) or record.get("reason") not in REASONS:
        return None
    return Stop(record["reason"], int(record.get("step", 0)), str(record.get("message", "")))


def reopen(workdir: storage.PathLike, reason: str) -> bool:
    """Lets the run of ``workdir``, if it stopped for ``reason``, go on from the checkpoint
    it stopped at (a search promoting a pruned trial): its final_metrics.json is kept as
    reopened_stop.json, and the same command resumes. Whether it was reopened."""
    stop = stopped(workdir)
    if stop is None or stop.reason != reason:
        return False
    workdir = storage.path(workdir)
    record = (workdir / layout.FINAL_METRICS).read_text()
    storage.write_atomically(workdir / layout.REOPENED_STOP, record)
    (workdir / layout.FINAL_METRICS).unlink()
    return True


def refuse_if_stopped(workdir: storage.PathLike) -> None:
    """Raises TrainingStopped (the stop's exit status) if the workdir's run stopped itself:
    running the same command again does not resume it."""
    stop = stopped(workdir)
    if stop is not None:
        raise stop.error(f"stopped: {stop.message}; remove {workdir} to train it again")
