"""Pruners, one module each, found by name: how a trial's run is judged at each evaluation.

``search.prune`` (a sweep's ``--prune``) names a module of this package: "asha" is
``transformer_jax.studies.pruners.asha``; a pruner kept elsewhere is one file in a directory
of ``TRANSFORMER_JAX_PRUNERS`` (the mechanism is :class:`transformer_jax.plugins.Registry`'s).
The pruners here:

* ``asha`` -- asynchronous successive halving from the first rung (the default);
* ``median`` -- optuna's MedianPruner: behind the median of the completed trials at a step;
* ``none`` -- never prunes.

A pruner module defines

* ``HELP`` -- one line for ``--prune``'s help;
* ``FIELDS`` -- the ``search.*`` config fields it reads, shown with its help;
* ``make(search)`` -- the optuna pruner for the config's ``search`` section; it raises
  ConfigError, naming the field, for settings it cannot follow.

Training (training/stops.py's TrialWatch) and the sweeps' controller build the pruner from the
same config section, so both judge alike. The config cannot import this package (it is a lower
layer), so the name is checked here: :func:`get`, which the run calls before it trains and a
sweep before it starts. The default pruner is the config's (``search.prune`` in
config/defaults.py), the one place it is written.
"""

from __future__ import annotations

from typing import Any

import ml_collections

from transformer_jax import plugins

REGISTRY = plugins.Registry(
    __name__, "TRANSFORMER_JAX_PRUNERS", "search.prune",
    needs=(plugins.Need("make", shown="make(search)"),
           plugins.Need("HELP", str, "HELP (one line)")),
    make=lambda entry: entry.module)
names, get = REGISTRY.names, REGISTRY.get


def make(search: ml_collections.ConfigDict) -> Any:
    """The optuna pruner of the config's ``search`` section."""
    return get(search.prune).make(search)


def help_lines() -> list[str]:
    """``NAME: HELP (FIELDS)`` of every pruner, for a flag's help."""
    out = []
    for name in names():
        module = get(name)
        fields = getattr(module, "FIELDS", ())
        out.append(f"{name}: {module.HELP}" + (f" ({', '.join(fields)})" if fields else ""))
    return out
