"""Searching a sweep's space with Optuna: a controller that asks the study for trials, trains
each one's points with the launcher, and tells the study their results.

    python -m transformer_jax.sweep configs/table3.py:base --root=runs/lr --search=tpe \
        --trials=24 --space=optim.lr_scale=log:0.25:4 --space=optim.warmup_steps=int:100:600 \
        [--seeds=3] [--objective=perplexity|bleu|...] [--prune=asha|median|none] \
        [--storage=postgresql://...] [--parallel=P] [--launcher=local|slurm|tpu|print]

A trial is one setting of the space (:mod:`transformer_jax.sweeps.space`, sampled by
SAMPLERS, seeded from the sweep's ``train.seed``) trained on each of the grid's points (the
config's variant and its ``--seeds`` replicas), each in ``ROOT/trial=N,FIELD=VALUE,...``.
Its runs get the ``search.*`` config fields (:func:`search_overrides`): training reports
the objective to trial N at each evaluation and, with a pruner, stops a trial that falls
behind (training/stops.py). The trial's value is the mean of its runs' objective (the key
of final_metrics.json, or of the last evaluation that logged it); a trial one of whose runs
was stopped early, pruned or diverged, is told PRUNED: the sampler then counts its setting
as a poor one rather than forgetting it, as it would a failed trial.

The study (named after the sweep) lives in ``ROOT/study.journal`` (Optuna's journal file,
on any shared file system) or in the database of ``--storage``, so that several
controllers, on one machine or many, share one search: each asks its own trials and sees
the others' results. Each trial records its controller (host, process, heartbeat, as a
workdir's hold does); re-running the command resumes the search: a trial left running by a
controller that is gone is launched again, its runs resuming from their checkpoints, no
finished trial is asked again, and a larger ``--trials`` extends the search. A run that
fails leaves its trial running, to be retried by the next controller.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import logging
import os
import shlex
import socket
import statistics
import sys
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import optuna

from transformer_jax import config as config_lib
from transformer_jax.errors import UserError
from transformer_jax.io import layout, metric_keys, storage, workdirs
from transformer_jax.sweeps import hyper, launchers, records, report_metrics, space
from transformer_jax.sweeps.cpu_peak import shared_cpu_peak
from transformer_jax.sweeps.experiment import Point, Sweep
from transformer_jax.sweeps.points import point_config, train_args
from transformer_jax.sweeps.status import DONE, point_status
from transformer_jax.training import stops

SAMPLERS: dict[str, Callable[[int], optuna.samplers.BaseSampler]] = {
    "random": lambda seed: optuna.samplers.RandomSampler(seed=seed),
    "tpe": lambda seed: optuna.samplers.TPESampler(seed=seed),
    "qmc": lambda seed: _quiet(optuna.samplers.QMCSampler, seed=seed),
}


def _quiet(make: Callable[..., Any], **kwargs: Any) -> Any:
    """``make(**kwargs)`` without Optuna's note that it is experimental."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return make(**kwargs)
# The pruners training judges a trial with (search.prune: training/stops.py's pruner()).
PRUNERS = tuple(config_lib.CHOICES["search.prune"])
# How often a controller renews the heartbeat of the trials it runs, and polls a scheduler.
HEARTBEAT_S = workdirs.HEARTBEAT_S
CLAIM = "controller"  # the trial's user attribute naming the controller that runs it
POINTS = "points"  # the trial's user attribute listing its workdirs


@dataclasses.dataclass(frozen=True)
class Search:
    """How a sweep searches: its ``sampler`` (SAMPLERS), the number of ``trials``, the
    study's ``storage`` (a SQLAlchemy URL; "" for the journal file in the root), the
    ``objective`` (metric_keys.OBJECTIVES) and the ``prune`` of PRUNERS."""

    sampler: str = "tpe"
    trials: int = 0
    storage: str = ""
    objective: str = metric_keys.PERPLEXITY
    prune: str = "none"

    def check(self) -> None:
        if self.sampler not in SAMPLERS:
            raise UserError(f"--search={self.sampler} is not one of {', '.join(SAMPLERS)}")
        if self.trials < 1:
            raise UserError(f"--trials={self.trials} must be >= 1")
        if self.objective not in metric_keys.OBJECTIVES:
            raise UserError(f"--objective={self.objective} is not one of "
                            f"{', '.join(metric_keys.OBJECTIVES)}")
        if self.prune not in PRUNERS:
            raise UserError(f"--prune={self.prune} is not one of {', '.join(PRUNERS)}")

    @property
    def direction(self) -> str:
        return stops.direction(self.objective)


def storage_url(root: str, storage_flag: str = "") -> str:
    """Where the study is: ``--storage``, or the journal file in the root."""
    return storage_flag or os.path.join(root, layout.STUDY_JOURNAL)


def open_study(name: str, url: str, direction: str, sampler: str = "tpe", seed: int = 0,
               store: optuna.storages.BaseStorage | None = None) -> optuna.Study:
    """The study ``name`` in ``url`` (opened, or ``store``), created when missing; UserError
    when it exists with another direction."""
    study = optuna.create_study(storage=store or stops.open_storage(url), study_name=name,
                                sampler=SAMPLERS[sampler](seed), direction=direction,
                                load_if_exists=True)
    if study.direction.name.lower() != direction:
        raise UserError(f"the study {name} in {url} is to {study.direction.name.lower()} its "
                        f"objective, this search to {direction}; use another --root or "
                        "--storage")
    return study


def load_study(name: str, url: str, store: optuna.storages.BaseStorage | None = None
               ) -> optuna.Study | None:
    """The study ``name`` in ``url`` (opened, or ``store``), or None when there is none."""
    if store is None and "://" not in url and not storage.path(url).exists():
        return None
    try:
        return optuna.load_study(study_name=name, storage=store or stops.open_storage(url))
    except KeyError:
        return None


def search_overrides(url: str, study: str, trial: int, search: Search) -> dict[str, Any]:
    """The config fields that make a training run report to trial ``trial`` of ``study``."""
    return {"search.storage": url, "search.study": study, "search.trial": trial,
            "search.objective": search.objective, "search.prune": search.prune}


def _rounded(value: Any) -> Any:
    return float(f"{value:.2g}") if isinstance(value, float) else value


def trial_points(sweep: Sweep, number: int, values: dict[str, Any]) -> list[Point]:
    """The points of trial ``number`` with the sampled ``values``: one per point of the
    sweep's grid (its seeds), named ``trial=N,FIELD=VALUE,...[,seed=S]`` (values to two
    significant digits; the trial's number makes the name unique)."""
    fields = [d.field for d in sweep.space]
    setting = ",".join([f"trial={number}", hyper.name(
        {f: _rounded(v) for f, v in values.items()}, fields)]).rstrip(",")
    seeds = [f for f in hyper.varying(sweep.grid) if f in hyper.SEED_LIKE]
    axis = sweep.axis()
    out = []
    for p in sweep.points():
        label = ",".join(x for x in (setting, hyper.name(p.fields, seeds)) if x)
        out.append(Point(label, {**p.fields, **values}, p.variant, setting,
                         values.get(axis, p.value)))
    return out


def _claim() -> dict[str, Any]:
    """This controller, as a workdir's hold names its run (workdirs.hold_is_live)."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "since": workdirs.now(),
            "heartbeat": workdirs.now()}


def _abandoned(trial: optuna.trial.FrozenTrial) -> bool:
    """Whether a running trial's controller is gone (a trial just asked, not yet claimed,
    is not)."""
    claim = trial.user_attrs.get(CLAIM)
    if claim is None:
        started = trial.datetime_start.timestamp() if trial.datetime_start else 0.0
        return time.time() - started > HEARTBEAT_S
    return not workdirs.hold_is_live(claim)


def objective_value(workdir: storage.Path, key: str) -> float | None:
    """The run's objective: ``key`` of final_metrics.json, else of its last evaluation."""
    final = workdirs.read_json(workdir / layout.FINAL_METRICS) or {}
    if final.get(key) is not None:
        return float(final[key])
    evals = workdirs.read_metrics(workdir).get(metric_keys.EVAL, {})
    value = report_metrics.Run(True, final, {}, evals).last_eval(key)
    return None if value is None else float(value)


def known_points(sweep: Sweep, study: optuna.Study | None) -> list[Point]:
    """The points of the study's trials so far, in the order of the trials."""
    if study is None:
        return []
    return [p for t in study.get_trials(deepcopy=False) if not t.user_attrs.get("surplus")
            for p in trial_points(sweep, t.number, space.values(t, sweep.space))]


class Controller:
    """One controller of a search: asks, launches, tells (see the module's docstring)."""

    def __init__(self, sweep: Sweep, root: str, chosen: launchers.Launcher, scale: str,
                 search: Search, overrides: dict[str, Any], python: str, experiment: str):
        self.sweep, self.root, self.chosen, self.scale = sweep, root, chosen, scale
        self.search, self.overrides, self.python = search, overrides, python
        self.experiment = experiment
        self.root_path = storage.path(root)
        self.url = storage_url(root, search.storage)
        self.claim = _claim()
        self.lock = threading.Lock()  # the study's Python object, sweep.json
        self.study: optuna.Study | None = None

    # -- the study ------------------------------------------------------------------------
    def open(self, seed: int, store: optuna.storages.BaseStorage) -> optuna.Study:
        self.store = store
        existing = load_study(self.sweep.name, self.url, store)
        # The sampler's seed: the sweep's, moved on by the trials already asked, so that a
        # resumed search or a second controller does not draw the first one's values again
        # (QMC's sequence is indexed by the trial number already).
        offset = 0 if existing is None or self.search.sampler == "qmc" else \
            len(existing.get_trials(deepcopy=False))
        self.study = open_study(self.sweep.name, self.url, self.search.direction,
                                self.search.sampler, seed + offset, store)
        self.study_id = store.get_study_id_from_name(self.sweep.name)
        return self.study

    def _set(self, number: int, key: str, value: Any) -> None:
        trial_id = self.store.get_trial_id_from_study_id_trial_number(self.study_id, number)
        self.store.set_trial_user_attr(trial_id, key, value)

    def _trial(self, number: int) -> optuna.trial.FrozenTrial:
        return self.study.get_trials(deepcopy=False)[number]

    def take(self, number: int) -> bool:
        """Claims a trial (a new or an abandoned one); False when another controller
        claimed it meanwhile."""
        self._set(number, CLAIM, self.claim)
        claim = self._trial(number).user_attrs.get(CLAIM)
        return claim == self.claim

    def renew(self, numbers: Sequence[int]) -> None:
        self.claim = {**self.claim, "heartbeat": workdirs.now()}
        with self.lock:
            for number in numbers:
                self._set(number, CLAIM, self.claim)

    def resumable(self) -> list[int]:
        """The running trials whose controller is gone."""
        running = self.study.get_trials(deepcopy=False,
                                        states=(optuna.trial.TrialState.RUNNING,))
        return [t.number for t in running if _abandoned(t)]

    def ask(self) -> int | None:
        """A new trial's number, or None when the study has ``--trials`` trials (counting
        all but those that failed). One asked past that by two controllers at once is told
        FAIL."""
        with self.lock:
            taken = [t for t in self.study.get_trials(deepcopy=False)
                     if t.state != optuna.trial.TrialState.FAIL]
            if len(taken) >= self.search.trials:
                return None
            trial = self.study.ask({d.field: d.distribution() for d in self.sweep.space})
            self._set(trial.number, CLAIM, self.claim)
            before = [t for t in self.study.get_trials(deepcopy=False)
                      if t.number <= trial.number and t.state != optuna.trial.TrialState.FAIL]
            if len(before) > self.search.trials:
                self._set(trial.number, "surplus", True)
                self.study.tell(trial.number, state=optuna.trial.TrialState.FAIL)
                return None
            return trial.number

    def points(self, number: int) -> list[Point]:
        values = space.values(self._trial(number), self.sweep.space)
        return trial_points(self.sweep, number, values)

    def config(self, point: Point, number: int) -> tuple[Any, Any]:
        more = search_overrides(self.url, self.sweep.name, number, self.search)
        return point_config(self.sweep, point, self.scale, {**self.overrides, **more})

    def write_definition(self) -> None:
        """ROOT/sweep.json: the sweep, its search, and the points of the trials so far."""
        with self.lock:
            points = known_points(self.sweep, self.study)
            configs = {p.name: point_config(self.sweep, p, self.scale, self.overrides)
                       for p in points}
            definition = records.definition(self.sweep, points, configs, self.scale,
                                            self.experiment)
            definition["swept"] = [*(d.field for d in self.sweep.space), *(
                f for f in definition["swept"] if f in hyper.SEED_LIKE)]
            definition["search"] = search_record(self.sweep, self.search)
            storage.write_atomically(self.root_path / layout.SWEEP,
                                     json.dumps(definition, indent=2))

    # -- one trial ------------------------------------------------------------------------
    def run_trial(self, number: int, index: int) -> str:
        """Trains the trial's points in turn (skipping those done), stopping at one stopped
        early; returns the outcome told to the study."""
        with self.lock:
            points = self.points(number)
            self._set(number, POINTS, [p.name for p in points])
        self.write_definition()
        for point in points:
            config, own = self.config(point, number)
            workdir = self.root_path / point.name
            status = point_status(workdir, config.train.num_steps, ask_queue=True)
            if status.kind in DONE:
                if status.kind != "finished":
                    break
                continue
            if status.kind != "queued":
                from transformer_jax.sweeps.run import check_workdir_model

                check_workdir_model(workdir, config, point.name)
                cmd = self.chosen.command(self.sweep, point, train_args(
                    self.sweep, point, self.scale, config, own, self.root),
                    self.python if self.chosen.trains_here else "python")
                header = {**records.header(self.sweep, point, self.chosen.name),
                          "trial": number, "study": self.sweep.name}
                job = launchers.Job(point, workdir, cmd, config, header, self.root_path,
                                    index, self.search.trials)
                records.record_point(workdir, {**header, **records.point_record(
                    self.sweep, point, config)})
                outcome = self.chosen.launch(job)
                if outcome.startswith("failed") and self.chosen.mode == launchers.SUBMITS:
                    return outcome
            if self.chosen.mode == launchers.SUBMITS:
                self._wait_for_queue(workdir, config.train.num_steps)
            if point_status(workdir, config.train.num_steps).kind in ("pruned", "diverged"):
                break
        return self.tell(number, points)

    def _wait_for_queue(self, workdir: storage.Path, num_steps: int) -> None:
        while point_status(workdir, num_steps, ask_queue=True).kind == "queued":
            time.sleep(HEARTBEAT_S)

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
                    self._set(number, "stopped", status.kind)
                    self.study.tell(number, state=optuna.trial.TrialState.PRUNED,
                                    skip_if_finished=True)
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
        """Runs trials, ``parallel`` at once, until the study has ``--trials``; returns
        {trial=N: outcome}."""
        outcome: dict[str, str] = {}
        queue = [n for n in self.resumable() if self.take(n)]
        if queue:
            logging.info("%s: resuming trials %s", self.sweep.name, ", ".join(map(str, queue)))
        index = 0
        with concurrent.futures.ThreadPoolExecutor(max_workers=parallel) as pool:
            running: dict[concurrent.futures.Future, int] = {}
            while True:
                while len(running) < parallel:
                    number = queue.pop(0) if queue else self.ask()
                    if number is None:
                        break
                    running[pool.submit(self.run_trial, number, index)] = number
                    index += 1
                if not running:
                    break
                done, _ = concurrent.futures.wait(
                    running, timeout=HEARTBEAT_S,
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
            number = self.ask()
            if number is None:
                break
            for point in self.points(number):
                config, own = self.config(point, number)
                cmd = self.chosen.command(self.sweep, point, train_args(
                    self.sweep, point, self.scale, config, own, self.root))
                self.chosen.launch(launchers.Job(point, self.root_path / point.name, cmd,
                                                 config, {}, self.root_path, index, parallel))
            outcome[f"trial={number}"] = "printed"
        self.chosen.write(f"# a search needs a running controller: these are its first "
                          f"{len(outcome)} trials; run the sweep with a launcher that runs or "
                          "submits them to tell the study their results and ask the next")
        self.write_definition()
        return outcome


def search_record(sweep: Sweep, search: Search) -> dict[str, Any]:
    """The search as sweep.json records it: the study's name, where it is ("" for the
    root's journal file), its sampler, objective, direction, pruner and space."""
    return {"study": sweep.name, "storage": search.storage, "sampler": search.sampler,
            "trials": search.trials, "objective": search.objective,
            "direction": search.direction, "prune": search.prune,
            "space": [str(d) for d in sweep.space]}


def check_sweep(sweep: Sweep) -> None:
    """A search samples one setting: UserError when the grid has several besides seeds."""
    settings = sorted({p.setting for p in sweep.points()})
    if len(settings) > 1:
        raise UserError(f"sweep {sweep.name}: a search samples its space on one setting (and "
                        f"its seeds); the grid has {len(settings)}: {', '.join(settings)}")
    fields = {f for p in sweep.grid for f in p}
    both = sorted(fields & {d.field for d in sweep.space})
    if both:
        raise UserError(f"sweep {sweep.name}: {', '.join(both)} both in the grid and the space")


def run_search(sweep: Sweep, root: str, search: Search, launcher: str = "local",
               scale: str = "paper", parallel: int = 1, dry_run: bool = False,
               overrides: dict[str, Any] | None = None, experiment: str = "",
               python: str = sys.executable) -> dict[str, str]:
    """Runs the search of ``sweep`` in ``root`` (see the module's docstring); returns
    {trial=N: outcome}. Every flag, the first trial's config and the study's storage are
    checked before anything starts; ``dry_run`` shows the commands of the trials to resume
    and asks nothing."""
    from transformer_jax.sweeps.run import check_flags

    chosen = check_flags(launcher, scale, parallel)
    search.check()
    check_sweep(sweep)
    overrides = dict(overrides or {})
    controller = Controller(sweep, root, chosen, scale, search, overrides, python, experiment)
    base = sweep.points()
    first = point_config(sweep, base[0], scale, {**overrides, **search_overrides(
        controller.url, sweep.name, 0, search)})[0]
    root_path = storage.path(root)
    records.check_root(root_path, {"name": sweep.name, "scale": scale})
    # A database is opened before anything is written; the journal file is in the root.
    store = stops.open_storage(controller.url) if search.storage else None
    if dry_run and load_study(sweep.name, controller.url, store) is None:
        print(f"# a new study {sweep.name} in {controller.url}: up to {search.trials} trials "
              f"of {', '.join(map(str, sweep.space))} ({search.sampler})")
        return {}
    root_path.mkdir(parents=True, exist_ok=True)
    study = controller.open(first.train.seed, store or stops.open_storage(controller.url))
    if dry_run:
        outcome = {}
        for number in controller.resumable():
            for point in controller.points(number):
                config, own = controller.config(point, number)
                cmd = chosen.command(sweep, point, train_args(sweep, point, scale, config, own,
                                                              root))
                print(f"# {point.name} (trial {number}, to resume):\n{shlex.join(cmd)}")
            outcome[f"trial={number}"] = "printed"
        taken = sum(t.state != optuna.trial.TrialState.FAIL for t in study.trials)
        print(f"# then up to {max(search.trials - taken, 0)} new trials ({search.sampler})")
        return outcome
    if chosen.mode == launchers.WRITES:
        return controller.write(parallel)
    if chosen.trains_here:
        controller.overrides.update(shared_cpu_peak([first]))
    return controller.run(parallel)


def best_lines(study: optuna.Study | None, objective: str) -> list[str]:
    """The trials in words, and the best one so far: its number, values and objective."""
    if study is None:
        return ["search: no study yet"]
    trials = study.get_trials(deepcopy=False)
    counts: dict[str, int] = {}
    for t in trials:
        if not t.user_attrs.get("surplus"):
            counts[t.state.name.lower()] = counts.get(t.state.name.lower(), 0) + 1
    lines = [f"search {study.study_name}: {len(trials)} trials: " + ", ".join(
        f"{n} {k}" for k, n in counts.items())]
    complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    if complete:
        best = study.best_trial
        params = ", ".join(f"{k}={_rounded(v)}" for k, v in best.params.items())
        lines.append(f"best so far: trial {best.number} ({params}): {objective} "
                     f"{best.value:.4g}")
    return lines


def status_lines(sweep: Sweep, root: str, search: Search, scale: str = "paper",
                 overrides: dict[str, Any] | None = None) -> list[str]:
    """``--status`` of a search: a line per point of its trials, then the trials' states
    and the best trial so far."""
    from transformer_jax.sweeps import status

    study = load_study(sweep.name, storage_url(root, search.storage))
    points = known_points(sweep, study)
    return [*status.status_lines(sweep, root, scale, overrides, points=points),
            *best_lines(study, search.objective)]


class GridTrials:
    """A grid's points as trials of a study (``--prune`` on a grid): each point reports to
    its own trial, so that the pruner stops those that fall behind the others at the same
    step. A point keeps its trial (sweep_point.json's ``trial``) while it is unfinished."""

    def __init__(self, sweep: Sweep, root: str, search: Search, chosen: launchers.Launcher,
                 scale: str, overrides: dict[str, Any]):
        self.controller = Controller(sweep, root, chosen, scale, search, overrides,
                                     sys.executable, "")
        self.controller.open(0, stops.open_storage(self.controller.url))

    def trial_of(self, point: Point, workdir: storage.Path) -> int:
        """The point's trial: its running one, or a new one."""
        c = self.controller
        number = records.read_point(workdir).get("trial")
        with c.lock:
            trials = c.study.get_trials(deepcopy=False)
            if isinstance(number, int) and number < len(trials) and \
                    trials[number].state == optuna.trial.TrialState.RUNNING:
                c._set(number, CLAIM, c.claim)
            else:
                number = c.study.ask().number
                c._set(number, CLAIM, c.claim)
            c._set(number, POINTS, [point.name])
        return number

    def overrides(self, number: int) -> dict[str, Any]:
        c = self.controller
        return search_overrides(c.url, c.sweep.name, number, c.search)

    def tell(self, number: int, point: Point) -> str:
        """Tells the point's result to its trial, unless told already."""
        trial = self.controller._trial(number)
        if trial.state != optuna.trial.TrialState.RUNNING:
            return trial.state.name.lower()
        return self.controller.tell(number, [point])
