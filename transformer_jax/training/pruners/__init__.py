"""Pruners, one module each, found by name: how a trial's run is judged at each evaluation.

``search.prune`` (a sweep's ``--prune``) names a module of this package: "asha" is
``transformer_jax.training.pruners.asha``. The directories listed in the environment variable
``TRANSFORMER_JAX_PRUNERS`` (separated by ``os.pathsep``) are searched too, so that a pruner
written elsewhere is one file there. The pruners here:

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

from types import ModuleType
from typing import Any

import ml_collections

from transformer_jax import plugins
from transformer_jax.errors import ConfigError

FIELD = "search.prune"
PATH_VARIABLE = "TRANSFORMER_JAX_PRUNERS"

__path__ += plugins.directories(PATH_VARIABLE)


def names() -> tuple[str, ...]:
    """Every pruner's name, alphabetically."""
    return plugins.module_names(tuple(__path__), PATH_VARIABLE)


def get(name: str) -> ModuleType:
    """The pruner module ``name``; ConfigError naming the field and the known pruners if
    there is none."""
    module = plugins.load(__name__, tuple(__path__), PATH_VARIABLE, name, f"{FIELD}={name!r}")
    if not callable(getattr(module, "make", None)) or not isinstance(
            getattr(module, "HELP", None), str):
        raise ConfigError(f"{FIELD}={name!r}: {module.__file__} must define make(search) and "
                          "HELP (one line)")
    return module


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
