"""A search's controller: asks the study for work, trains it with the launcher, tells the
study the result; several controllers, on one machine or many, share one study.

A trial is one of two kinds of work (its ``phase``, study.py):

* **exploring**: a setting drawn by the sampler, trained on the sweep's first seed alone
  (with ``--confirm=0``, or a sweep of one seed, on each of its seeds), and judged by the
  pruner at each evaluation from the first rung on; ``--trials`` of them;
* **confirming**: once every exploring trial has ended, each of the ``--confirm`` best
  completed settings is trained on each remaining seed, one trial a run, never pruned; the
  settings are then ranked on their mean over all seeds (progress.py). Where
  fewer than ``--confirm`` completed, the best pruned ones are *promoted* to fill the places
  (ASHA's promotion of a paused trial): ranked on the latest step they reported, then on
  their value there, each is confirmed on every seed, its first seed's run resumed from the
  checkpoint it stopped at (training/stops.py: ``reopen``).

Work is taken through the storage alone (study.py): a new trial is asked, a waiting one
popped (retries and confirmation runs are enqueued as waiting trials), a trial whose
controller is gone retired (its copy enqueued, then it told FAIL). The first controller to
see exploration end enqueues the confirmation runs; one enqueued twice by controllers seeing
it at once is run once, by the lower trial number (the other is told FAIL as a duplicate), and
so is a trial's copy.
"""

from __future__ import annotations

import concurrent.futures
import logging
import statistics
import threading
import time
from collections.abc import Sequence
from typing import Any

import optuna

from transformer_jax.io import metric_keys, storage, workdirs
from transformer_jax.sweeps import hyper, launchers, records, start
from transformer_jax.sweeps.experiment import Point, Sweep
from transformer_jax.sweeps.points import PointSpec, point_config, point_spec
from transformer_jax.sweeps.search import samplers, study as study_lib
from transformer_jax.sweeps.search.spec import Search
from transformer_jax.sweeps.search.trials import (
    best_explored,
    confirming,
    known_points,
    points_of,
    promoted,
    seed_names,
)
from transformer_jax.sweeps.status import DONE, point_status
from transformer_jax.training import stops

State = optuna.trial.TrialState


def objective_value(workdir: storage.Path, key: str) -> float | None:
    """The run's objective: ``key`` of final_metrics.json, else of its last evaluation."""
    final = workdirs.read_final(workdir)  # figures of the types training writes
    if final.get(key) is not None:
        return float(final[key])
    evals = workdirs.read_metrics(workdir).get(metric_keys.EVAL, {})
    value = workdirs.latest(evals, key)
    return None if value is None else float(value)


def search_record(sweep: Sweep, search: Search, budget: samplers.Budget) -> dict[str, Any]:
    """The search as sweep.json records it: the study's name, where it is ("" for the
    root's journal file), its sampler (and what "auto" chose), trials, start-up trials,
    confirmation, objective, direction, pruner, seed and space."""
    return {"study": sweep.name, "storage": search.storage, "sampler": search.sampler,
            "sampler_chosen": samplers.get(search.sampler).describe(budget),
            "trials": search.trials, "startup": budget.startup, "confirm": search.confirm,
            "seeds": len(sweep.points()), "seed": budget.seed, "objective": search.objective,
            "direction": search.direction, "prune": search.prune,
            "space": [str(d) for d in sweep.space]}


def search_overrides(url: str, name: str, number: int, search: Search, startup: int,
                     first_rung: int, phase: str = study_lib.EXPLORE) -> dict[str, Any]:
    """The config fields that make a training run report to trial ``number`` of study
    ``name``: a confirmation run is never pruned; asha's first ``startup`` trials stop at
    the first rung (step ``first_rung``)."""
    prune = search.prune if phase == study_lib.EXPLORE else "none"
    out = {"search.storage": url, "search.study": name, "search.trial": number,
           "search.objective": search.objective, "search.prune": prune}
    if prune == "asha":
        out.update({"search.reference_trials": startup, "search.min_steps": first_rung})
    return out


class Controller:
    """One controller of a search: asks, launches, tells (see the module's docstring)."""

    def __init__(self, sweep: Sweep, root: str, chosen: launchers.Launcher, scale: str,
                 search: Search, overrides: dict[str, Any], python: str, experiment: str):
        self.sweep, self.root, self.chosen, self.scale = sweep, root, chosen, scale
        self.search, self.overrides, self.python = search, overrides, python
        self.experiment = experiment
        self.root_path = storage.path(root)
        self.url = study_lib.storage_url(root, search.storage)
        self.claim = study_lib.claim()
        self.lock = threading.Lock()  # the study's Python object, sweep.json
        self.study: optuna.Study | None = None
        first = point_config(sweep, sweep.points()[0], scale, overrides)[0]
        self.seed = first.train.seed if search.seed is None else search.seed
        self.budget = samplers.Budget(search.trials, tuple(sweep.space), self.seed)
        # The first rung: the config's search.min_steps, else its first evaluation.
        self.first_rung = first.search.min_steps or first.train.eval_every

    # -- the study ------------------------------------------------------------------------
    def open(self, store: optuna.storages.BaseStorage) -> optuna.Study:
        sampler = samplers.build(self.search.sampler, self.budget)
        self.study = study_lib.open_study(self.sweep.name, self.url, self.search.direction,
                                          sampler, store)
        return self.study

    def _set(self, number: int, key: str, value: Any) -> None:
        study_lib.set_attr(self.study, number, key, value)

    def _trial(self, number: int) -> optuna.trial.FrozenTrial:
        return self.study._storage.get_trial(
            self.study._storage.get_trial_id_from_study_id_trial_number(
                self.study._study_id, number))

    def renew(self, numbers: Sequence[int]) -> None:
        self.claim = {**self.claim, "heartbeat": workdirs.now()}
        with self.lock:
            for number in numbers:
                self._set(number, study_lib.CLAIM, self.claim)

    def resumable(self) -> list[optuna.trial.FrozenTrial]:
        """The running trials whose controller is gone."""
        running = self.study.get_trials(deepcopy=False, states=(State.RUNNING,))
        return [t for t in running if study_lib.abandoned(t)]

    def _drop(self, number: int, why: str) -> None:
        self._set(number, study_lib.DROPPED, why)
        self.study.tell(number, state=State.FAIL)

    def exploration_done(self, trials: Sequence[optuna.trial.FrozenTrial]) -> bool:
        explore = [t for t in study_lib.live(trials) if study_lib.phase(t) == study_lib.EXPLORE]
        return len(explore) >= self.search.trials and all(
            t.state.is_finished() for t in explore)

    def confirmations(self, trials: Sequence[optuna.trial.FrozenTrial]
                      ) -> list[tuple[optuna.trial.FrozenTrial, int]]:
        """(explored trial, seed index) of every confirmation run the search needs."""
        if not confirming(self.sweep, self.search) or not self.exploration_done(trials):
            return []
        n = len(self.sweep.points())
        return [(t, i) for t in best_explored(trials, self.search.direction,
                                              self.search.confirm)
                for i in range(0 if promoted(t) else 1, n)]

    def _enqueue_confirmations(self, trials: Sequence[optuna.trial.FrozenTrial]) -> bool:
        """Enqueues the confirmation runs not yet in the study; whether it enqueued any."""
        have = {(study_lib.named(t), t.user_attrs.get(study_lib.SEED_INDEX))
                for t in study_lib.live(trials) if study_lib.phase(t) == study_lib.CONFIRM}
        added = False
        runs = self.confirmations(trials)
        for t, i in runs:
            if (t.number, i) not in have:
                self.study.enqueue_trial(t.params, user_attrs={
                    study_lib.PHASE: study_lib.CONFIRM, study_lib.NAMED: t.number,
                    study_lib.SEED_INDEX: i})
                added = True
        if added:
            chosen = list({t.number: t for t, _ in runs}.values())
            lifted = [t.number for t in chosen if promoted(t)]
            seeds = seed_names(self.sweep)
            logging.info("%s: exploration ended; confirming trial(s) %s on %s%s",
                         self.sweep.name, ", ".join(str(t.number) for t in chosen),
                         ", ".join(seeds[1:]),
                         f"; pruned trial(s) {', '.join(map(str, lifted))} promoted (fewer "
                         f"than {self.search.confirm} completed), their {seeds[0]} run "
                         "resumed to the end" if lifted else "")
        return added

    def more_to_come(self) -> bool:
        """Whether trials running elsewhere may still lead to work here (confirmation runs
        not yet enqueued)."""
        trials = self.study.get_trials(deepcopy=False)
        return confirming(self.sweep, self.search) and not self.exploration_done(trials) \
            and any(t.state == State.RUNNING for t in trials)

    def next(self) -> int | None:
        """The number of a trial this controller now holds, or None when there is no work:
        a waiting trial (a retry, a confirmation run), else a new exploring trial while the
        study has fewer than ``--trials``."""
        distributions = {d.field: d.distribution() for d in self.sweep.space}
        with self.lock:
            while True:
                for t in self.resumable():
                    if study_lib.retire(self.study, t):
                        logging.info("%s: trial %d's controller is gone; its copy is queued",
                                     self.sweep.name, t.number)
                trials = self.study.get_trials(deepcopy=False)
                explore = [t for t in study_lib.live(trials)
                           if study_lib.phase(t) == study_lib.EXPLORE]
                waiting = any(t.state == State.WAITING for t in trials)
                if not waiting and len(explore) >= self.search.trials:
                    waiting = self._enqueue_confirmations(trials)
                    if not waiting:
                        return None
                number = self.study.ask(distributions).number
                trial = self._trial(number)
                if study_lib.PHASE not in trial.user_attrs:  # a new exploring trial
                    self._set(number, study_lib.CLAIM, self.claim)
                    self._set(number, study_lib.PHASE, study_lib.EXPLORE)
                    self._set(number, study_lib.NAMED, number)
                    before = [t for t in study_lib.live(self.study.get_trials(deepcopy=False))
                              if t.number <= number and study_lib.phase(t) == study_lib.EXPLORE]
                    if len(before) > self.search.trials:
                        # Asked past --trials at once, or a waiting trial seen here was
                        # popped by another controller first (Optuna's ask made a new one).
                        self._drop(number, "surplus")
                        continue
                    return number
                self._set(number, study_lib.CLAIM, self.claim)
                if study_lib.RETRY_OF in trial.user_attrs and not study_lib.copy_runs(
                        self.study, trial):
                    self._drop(number, "duplicate")
                    continue
                if study_lib.phase(trial) == study_lib.CONFIRM:
                    key = (study_lib.named(trial), trial.user_attrs.get(study_lib.SEED_INDEX))
                    twins = [t for t in study_lib.live(self.study.get_trials(deepcopy=False))
                             if t.number < number and study_lib.phase(t) == study_lib.CONFIRM
                             and (study_lib.named(t), t.user_attrs.get(study_lib.SEED_INDEX))
                             == key]
                    if twins:
                        self._drop(number, "duplicate")
                        continue
                return number

    def points(self, number: int) -> list[Point]:
        return points_of(self.sweep, self.search, self._trial(number))

    def config(self, point: Point, number: int) -> tuple[Any, Any]:
        phase = study_lib.phase(self._trial(number))
        more = search_overrides(self.url, self.sweep.name, number, self.search,
                                self.budget.startup, self.first_rung, phase)
        return point_config(self.sweep, point, self.scale, {**self.overrides, **more})

    def spec(self, point: Point, number: int) -> PointSpec:
        """The spec of the point's config in trial ``number`` (:meth:`config`)."""
        return PointSpec.from_config(*self.config(point, number), self.sweep, point,
                                     self.scale, self.root)

    def write_definition(self) -> None:
        """ROOT/sweep.json: the sweep, its search, and the points of the trials so far."""
        with self.lock:
            points = known_points(self.sweep, self.search, self.study)
            specs = {p.name: point_spec(self.sweep, p, self.scale, self.root, self.overrides)
                     for p in points}
            definition = records.definition(self.sweep, points, specs, self.scale,
                                            self.experiment)
            definition["swept"] = [*(d.field for d in self.sweep.space), *(
                f for f in definition["swept"] if f in hyper.SEED_LIKE)]
            definition["search"] = search_record(self.sweep, self.search, self.budget)
            records.write_sweep(self.root_path, definition)

    # -- one trial ------------------------------------------------------------------------
    def run_trial(self, number: int, index: int) -> str:
        """Trains the trial's points in turn (skipping those done), stopping at one stopped
        early; returns the outcome told to the study."""
        with self.lock:
            points = self.points(number)
            self._set(number, study_lib.POINTS, [p.name for p in points])
        self.write_definition()
        confirm_run = study_lib.phase(self._trial(number)) == study_lib.CONFIRM
        for point in points:
            spec = self.spec(point, number)
            workdir = self.root_path / point.name
            if confirm_run and stops.reopen(workdir, stops.PRUNED):
                logging.info("%s: trial %d resumes %s, pruned while exploring, to the end",
                             self.sweep.name, number, point.name)
            status = start.standing(workdir, spec, point.name)
            if status.kind in DONE:
                if status.kind != "finished":
                    break
                continue
            if start.to_start(status):
                outcome = start.launch(self.sweep, self.chosen, self._job(
                    point, spec, number, index, self.search.trials))
                if outcome.startswith("failed") and self.chosen.mode == launchers.SUBMITS:
                    return outcome
            if self.chosen.mode == launchers.SUBMITS:
                self._wait_for_queue(workdir, spec.num_steps)
            if point_status(workdir, spec.num_steps).kind in ("pruned", "diverged"):
                break
        return self.tell(number, points)

    def _job(self, point: Point, spec: PointSpec, number: int, index: int,
             total: int) -> launchers.Job:
        return start.job(self.sweep, point, self.chosen, spec, self.root, self.python, index,
                         total, trial=number, study=self.sweep.name)

    def _wait_for_queue(self, workdir: storage.Path, num_steps: int) -> None:
        while point_status(workdir, num_steps, ask_queue=True).kind == "queued":
            time.sleep(study_lib.HEARTBEAT_S)

    def tell(self, number: int, points: Sequence[Point]) -> str:
        """Tells the study the trial's result from its runs' records: the mean objective,
        PRUNED for a run stopped early; a trial with a run neither finished nor stopped is
        left running (its next controller retries it)."""
        values = []
        for point in points:
            config = self.config(point, number)[0]
            workdir = self.root_path / point.name
            status = point_status(workdir, config.train.num_steps)
            if status.kind in ("pruned", "diverged"):
                with self.lock:
                    self._set(number, study_lib.STOPPED, status.kind)
                    self.study.tell(number, state=State.PRUNED, skip_if_finished=True)
                return f"{status.kind} ({point.name}, {status.detail})"
            value = objective_value(workdir, self.search.objective) \
                if status.kind == "finished" else None
            if value is None:
                return (f"failed ({point.name}: {status})" if status.kind != "finished" else
                        f"failed ({point.name}: no {self.search.objective} logged)")
            values.append(value)
        value = statistics.fmean(values)
        with self.lock:
            self.study.tell(number, value, skip_if_finished=True)
        return f"{self.search.objective} {value:.4g}"

    # -- the loop ---------------------------------------------------------------------------
    def run(self, parallel: int) -> dict[str, str]:
        """Runs trials, ``parallel`` at once, until there is no work left; returns
        {trial=N: outcome}."""
        outcome: dict[str, str] = {}
        index = 0
        with concurrent.futures.ThreadPoolExecutor(max_workers=parallel) as pool:
            running: dict[concurrent.futures.Future, int] = {}
            while True:
                while len(running) < parallel:
                    number = self.next()
                    if number is None:
                        break
                    running[pool.submit(self.run_trial, number, index)] = number
                    index += 1
                if not running:
                    if not self.more_to_come():
                        break
                    time.sleep(study_lib.HEARTBEAT_S)  # others explore; confirmation follows
                    continue
                done, _ = concurrent.futures.wait(
                    running, timeout=study_lib.HEARTBEAT_S,
                    return_when=concurrent.futures.FIRST_COMPLETED)
                for future in done:
                    number = running.pop(future)
                    outcome[f"trial={number}"] = result = future.result()
                    logging.info("%s: trial %d: %s", self.sweep.name, number, result)
                self.renew(list(running.values()))
        self.write_definition()
        return outcome

    def write(self, parallel: int) -> dict[str, str]:
        """A WRITES launcher: the commands of the first ``parallel`` trials asked."""
        outcome = {}
        for index in range(parallel):
            number = self.next()
            if number is None:
                break
            for point in self.points(number):
                start.launch(self.sweep, self.chosen,
                             self._job(point, self.spec(point, number), number, index,
                                       parallel))
            outcome[f"trial={number}"] = "printed"
        self.chosen.write(f"# a search needs a running controller: these are its first "
                          f"{len(outcome)} trials; run the sweep with a launcher that runs or "
                          "submits them to tell the study their results and ask the next")
        self.write_definition()
        return outcome
