"""A search's trials as the sweep sees them: the points a trial trains and how their workdirs
are named, whether the search confirms its best settings on more seeds, and which explored
trials it confirms (pruned ones promoted where too few completed). The controller runs them,
the status counts them (progress.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import optuna

from transformer_jax.sweeps import hyper, space
from transformer_jax.sweeps.experiment import Point, Sweep
from transformer_jax.sweeps.search import study as study_lib
from transformer_jax.sweeps.search.spec import Search

State = optuna.trial.TrialState


def rounded(value: Any) -> Any:
    return float(f"{value:.2g}") if isinstance(value, float) else value


def trial_points(sweep: Sweep, number: int, values: dict[str, Any]) -> list[Point]:
    """The points of trial ``number`` with the sampled ``values``: one per point of the
    sweep's grid (its seeds), named ``trial=N,FIELD=VALUE,...[,seed=S]`` (values to two
    significant digits; the trial's number makes the name unique)."""
    fields = [d.field for d in sweep.space]
    setting = ",".join([f"trial={number}", hyper.name(
        {f: rounded(v) for f, v in values.items()}, fields)]).rstrip(",")
    axis = sweep.axis()
    out = []
    for p, seed in zip(sweep.points(), seed_names(sweep), strict=True):
        label = ",".join(x for x in (setting, seed) if x)
        out.append(Point(label, {**p.fields, **values}, p.variant, setting,
                         values.get(axis, p.value)))
    return out


def seed_names(sweep: Sweep) -> list[str]:
    """How each point of the sweep's grid (its seeds) is named in a trial's workdirs:
    ``seed=S``, or empty for a sweep of one point."""
    seeds = [f for f in hyper.varying(sweep.grid) if f in hyper.SEED_LIKE]
    return [hyper.name(p.fields, seeds) for p in sweep.points()]


def confirming(sweep: Sweep, search: Search) -> bool:
    """Whether the search explores on one seed and confirms on the others."""
    return search.confirm > 0 and len(sweep.points()) > 1


def points_of(sweep: Sweep, search: Search, trial: optuna.trial.FrozenTrial) -> list[Point]:
    """The points a trial trains: its seed's, or every seed's (controller.py's
    docstring)."""
    points = trial_points(sweep, study_lib.named(trial), space.values(trial, sweep.space))
    if study_lib.phase(trial) == study_lib.CONFIRM:
        return [points[int(trial.user_attrs[study_lib.SEED_INDEX])]]
    return points[:1] if confirming(sweep, search) else points


def known_points(sweep: Sweep, search: Search, study: optuna.Study | None) -> list[Point]:
    """The points of the study's trials so far, in the order of the trials, each once."""
    if study is None:
        return []
    seen: dict[str, Point] = {}
    for t in study_lib.live(study.get_trials(deepcopy=False)):
        for p in points_of(sweep, search, t):
            seen.setdefault(p.name, p)
    return list(seen.values())


def best_explored(trials: Sequence[optuna.trial.FrozenTrial], direction: str, k: int
                  ) -> list[optuna.trial.FrozenTrial]:
    """The ``k`` best completed exploring trials, best first; where fewer completed, the
    best pruned ones after them (promoted): those that reported at a later step first, then
    on their value at their latest step. A diverged trial is never promoted."""
    explored = [t for t in study_lib.live(trials) if study_lib.phase(t) == study_lib.EXPLORE]
    sign = -1.0 if direction == "maximize" else 1.0
    done = sorted((t for t in explored if t.state == State.COMPLETE),
                  key=lambda t: sign * t.value)
    pruned = [t for t in explored if t.state == State.PRUNED and t.intermediate_values
              and t.user_attrs.get(study_lib.STOPPED) == "pruned"]
    pruned.sort(key=lambda t: (-max(t.intermediate_values),
                               sign * t.intermediate_values[max(t.intermediate_values)]))
    return (done + pruned)[:k]


def promoted(trial: optuna.trial.FrozenTrial) -> bool:
    """Whether an explored trial chosen for confirmation was pruned (its first seed's run
    is then resumed to the end as well)."""
    return trial.state == State.PRUNED
