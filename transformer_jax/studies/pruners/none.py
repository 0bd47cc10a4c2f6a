"""``search.prune="none"``: every run of a trial trains to its end."""

from typing import Any

import ml_collections

HELP = "never stop a trial early"
FIELDS = ()


def make(search: ml_collections.ConfigDict) -> Any:
    import optuna

    return optuna.pruners.NopPruner()
