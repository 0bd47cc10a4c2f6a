"""``search.prune="median"``: optuna's MedianPruner, which stops a trial whose objective at a
step is worse than the median of the completed trials' at that step."""

from typing import Any

import ml_collections

HELP = "stop a trial behind the median of the completed trials at the same step"
FIELDS = ("search.startup_trials", "search.min_steps")


def make(search: ml_collections.ConfigDict) -> Any:
    """MedianPruner with ``search.startup_trials`` (no pruning before this many trials have
    completed) and ``search.min_steps`` (none before this step) as its n_startup_trials and
    n_warmup_steps."""
    import optuna

    return optuna.pruners.MedianPruner(n_startup_trials=search.startup_trials,
                                       n_warmup_steps=search.min_steps)
