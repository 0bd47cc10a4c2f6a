"""``search.prune="asha"``: asynchronous successive halving (Li et al., 2020), pruning from the
first rung.

Rung k ends at step ``min_steps x reduction_factor^k``; a trial that reaches it goes on only if
its objective there is in the best ``1/reduction_factor`` of the trials that reached it so far
(optuna's SuccessiveHalvingPruner). On its own that rule cannot stop the first trials: the
first trial at a rung is the best of one, and goes on. Here the first ``reference_trials``
trials to reach the first rung stop there (a search's start-up trials), so that every later
trial is ranked at the first rung against them: the first trials are stopped as well as the
later ones, and a start-up trial costs one rung, not a whole run.
"""

from __future__ import annotations

from typing import Any

import ml_collections

from transformer_jax.errors import ConfigError

HELP = ("successive halving: at rung steps min_steps x reduction_factor^k keep the best "
        "1/reduction_factor; the first reference_trials stop at the first rung")
FIELDS = ("search.min_steps", "search.reduction_factor", "search.reference_trials")
RUNG_KEY = "completed_rung_{}"  # optuna's system attribute of a trial's value at rung k


def make(search: ml_collections.ConfigDict) -> Any:
    """The pruner of ``search``'s min_steps (0: optuna's "auto", 1% of the longest completed
    trial), reduction_factor and reference_trials."""
    if search.reference_trials and not search.min_steps:
        raise ConfigError(f"search.reference_trials={search.reference_trials} needs "
                          "search.min_steps, the step of the first rung")
    return _pruner_class()(search.min_steps or "auto", search.reduction_factor,
                           search.reference_trials)


def _pruner_class() -> type:
    import optuna

    class FirstRungHalving(optuna.pruners.SuccessiveHalvingPruner):
        """SuccessiveHalvingPruner whose first ``references`` trials at the first rung stop
        there (optuna's bootstrap_count applies to every rung; this only to the first)."""

        def __init__(self, min_resource: Any, reduction_factor: int, references: int):
            super().__init__(min_resource=min_resource, reduction_factor=reduction_factor)
            self.references, self.first_rung = references, min_resource

        def prune(self, study: Any, trial: Any) -> bool:
            step, key = trial.last_step, RUNG_KEY.format(0)
            if (self.references and step is not None and step >= self.first_rung
                    and key not in trial.system_attrs):
                reached = sum(key in t.system_attrs for t in study.get_trials(deepcopy=False))
                if reached < self.references:
                    study._storage.set_trial_system_attr(trial._trial_id, key,
                                                         trial.intermediate_values[step])
                    return True
            return super().prune(study, trial)

    return FirstRungHalving
