"""A grid's points as trials of a study (``--prune`` on a grid): each point reports to its own
trial, so that the pruner stops those that fall behind the others at the same step. A point
keeps its trial (sweep_point.json's ``trial``) while it is unfinished."""

from __future__ import annotations

import sys
from typing import Any

import optuna

from transformer_jax import studies
from transformer_jax.io import storage
from transformer_jax.sweeps import launchers, records
from transformer_jax.sweeps.experiment import Point, Sweep
from transformer_jax.sweeps.search import study as study_lib
from transformer_jax.sweeps.search.controller import Controller, search_overrides
from transformer_jax.sweeps.search.spec import Search


class GridTrials:
    """The study of a pruned grid, and each point's trial in it."""

    def __init__(self, sweep: Sweep, root: str, search: Search, chosen: launchers.Launcher,
                 scale: str, overrides: dict[str, Any]):
        # A grid samples nothing: its points are the trials, run to the end or pruned.
        search = Search("random", 1, search.storage, search.objective, search.prune, 0)
        self.controller = Controller(sweep, root, chosen, scale, search, overrides,
                                     sys.executable, "")
        study_lib.check_url(self.controller.url)
        self.controller.open(studies.open_storage(self.controller.url))

    def trial_of(self, point: Point, workdir: storage.Path) -> int:
        """The point's trial: its running one, or a new one."""
        c = self.controller
        number = records.read_point(workdir).get("trial")
        with c.lock:
            trials = c.study.get_trials(deepcopy=False)
            if not (isinstance(number, int) and number < len(trials)
                    and trials[number].state == optuna.trial.TrialState.RUNNING):
                number = c.study.ask().number
            c._set(number, study_lib.CLAIM, c.claim)
            c._set(number, study_lib.POINTS, [point.name])
        return number

    def overrides(self, number: int) -> dict[str, Any]:
        c = self.controller
        return search_overrides(c.url, c.sweep.name, number, c.search, 0, c.first_rung)

    def tell(self, number: int, point: Point) -> str:
        """Tells the point's result to its trial, unless told already."""
        trial = self.controller._trial(number)
        if trial.state != optuna.trial.TrialState.RUNNING:
            return trial.state.name.lower()
        return self.controller.tell(number, [point])
