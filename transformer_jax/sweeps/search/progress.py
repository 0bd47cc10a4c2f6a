"""Where a search stands: its phase (exploring, confirming, done), the compute it has spent
and has left, and the settings ranked (confirmed ones on their mean over seeds)."""

from __future__ import annotations

import dataclasses
import statistics
from typing import Any

import optuna

from transformer_jax.io import storage, workdirs
from transformer_jax.sweeps import records
from transformer_jax.sweeps.experiment import Sweep
from transformer_jax.sweeps.search import study as study_lib
from transformer_jax.sweeps.search.spec import Search
from transformer_jax.sweeps.search.trials import (
    best_explored,
    confirming,
    known_points,
    promoted,
    rounded,
)

State = optuna.trial.TrialState


@dataclasses.dataclass(frozen=True)
class Setting:
    """An explored setting: the trial its workdirs are ``named`` after, its ``params``, and
    its objective on each seed index run so far (``values``); ``seeds`` the sweep's count."""

    named: int
    params: dict[str, Any]
    values: dict[int, float]
    seeds: int

    @property
    def confirmed(self) -> bool:
        return len(self.values) == self.seeds

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values.values())

    @property
    def std(self) -> float:
        return statistics.stdev(self.values.values()) if len(self.values) > 1 else 0.0


def ranking(trials: list[optuna.trial.FrozenTrial], direction: str, seeds: int,
            per_seed: bool) -> list[Setting]:
    """The completed settings, best first: those run on every seed on their mean, then the
    others on their mean so far. ``per_seed``: each trial is one seed's run (exploring on
    one, confirming on the others); otherwise a trial's value is already its seeds' mean."""
    settings: dict[int, Setting] = {}
    for t in trials:
        if t.state != State.COMPLETE:
            continue
        n = study_lib.named(t)
        s = settings.setdefault(n, Setting(n, dict(t.params), {}, seeds if per_seed else 1))
        index = int(t.user_attrs.get(study_lib.SEED_INDEX, 0)) if per_seed else 0
        s.values[index] = float(t.value)
    sign = -1.0 if direction == "maximize" else 1.0
    return sorted(settings.values(), key=lambda s: (not s.confirmed, sign * s.mean))


def phase_line(sweep: Sweep, search: Search, trials: list[optuna.trial.FrozenTrial]) -> str:
    """``phase: exploring ...`` / ``confirming ...`` / ``done``, with the trials' counts."""
    live = [t for t in study_lib.live(trials) if not t.user_attrs.get(study_lib.DROPPED)]
    explore = [t for t in live if study_lib.phase(t) == study_lib.EXPLORE]
    confirm = [t for t in live if study_lib.phase(t) == study_lib.CONFIRM]
    counts: dict[str, int] = {}
    for t in explore:
        counts[t.state.name.lower()] = counts.get(t.state.name.lower(), 0) + 1
    states = ", ".join(f"{n} {k}" for k, n in counts.items())
    ended = sum(t.state.is_finished() for t in explore)
    if ended < search.trials or len(explore) < search.trials:
        line = f"phase: exploring, {ended} of {search.trials} trials ended ({states})"
        if confirming(sweep, search):
            line += (f"; then confirming the best {search.confirm} on the other "
                     f"{len(sweep.points()) - 1} seeds")
        return line
    if not confirming(sweep, search):
        return f"phase: done, {search.trials} trials ({states})"
    chosen = best_explored(trials, search.direction, search.confirm)
    if not chosen:
        return (f"phase: done, {search.trials} trials explored ({states}), none completed "
                "or pruned after an evaluation: nothing to confirm; raise --trials to explore "
                "further")
    runs = sum(len(sweep.points()) - (0 if promoted(t) else 1) for t in chosen)
    finished = sum(t.state.is_finished() for t in confirm)
    if finished < min(runs, len(confirm)) or not confirm:
        return (f"phase: confirming, {finished} of {len(confirm) or runs} runs ended "
                f"(exploration: {states})")
    return f"phase: done, {search.trials} trials explored ({states}), {finished} runs confirmed"


def compute_line(sweep: Sweep, root: str, search: Search, study: optuna.Study,
                 num_steps: int, first_rung: int) -> str:
    """The compute spent (training steps and the runs' own CPU minutes, user + system) and
    at most how much is left: exploring trials not yet ended run to their end at most, and
    each confirmation run is a whole run."""
    points = known_points(sweep, search, study)
    steps = cpu = 0.0
    for p in points:
        workdir = storage.path(root) / p.name
        steps += workdirs.last_logged_step(workdir) or 0
        cpu += sum(a.get("cpu_s", 0.0) for a in records.read_point(workdir).get("attempts",
                                                                                 []))
    trials = study.get_trials(deepcopy=False)
    explore = [t for t in study_lib.live(trials) if study_lib.phase(t) == study_lib.EXPLORE]
    per_trial = 1 if confirming(sweep, search) else len(sweep.points())
    unstarted = max(search.trials - len(explore), 0)
    running = [t for t in explore if not t.state.is_finished()]
    left = (unstarted + len(running)) * per_trial * num_steps
    if confirming(sweep, search):
        confirm = [t for t in study_lib.live(trials) if study_lib.phase(t) == study_lib.CONFIRM
                   and t.state.is_finished()]
        left += max(search.confirm * (len(sweep.points()) - 1) - len(confirm), 0) * num_steps
    line = f"compute: {steps:,.0f} training steps, {cpu / 60:.1f} CPU-min spent"
    if left:
        rate = cpu / steps if steps else 0.0
        line += f"; at most {left:,.0f} steps left" + (
            f" (~{left * rate / 60:.0f} CPU-min at the rate so far)" if rate else "")
        if search.prune != "none":
            line += f", fewer as trials are pruned (first rung: step {first_rung})"
    return line


def best_lines(study: optuna.Study | None, search: Search, seeds: int, per_seed: bool
               ) -> list[str]:
    """The best setting so far: its trial, values and objective (mean ± std over its seeds
    when confirmed)."""
    if study is None:
        return ["search: no study yet"]
    ranked = ranking(study.get_trials(deepcopy=False), search.direction, seeds, per_seed)
    if not ranked:
        return ["best so far: none, no trial has completed"]
    best = ranked[0]
    params = ", ".join(f"{k}={rounded(v)}" for k, v in best.params.items())
    figure = f"{search.objective} {best.mean:.4g}"
    if per_seed and best.confirmed:
        figure += f" ± {best.std:.2g}, mean of {len(best.values)} seeds"
    elif per_seed:
        figure += f" on {len(best.values)} of {seeds} seeds, not yet confirmed"
    return [f"best so far: trial {best.named} ({params}): {figure}"]
