"""Learning-rate schedules, one module each, found by name.

``optim.schedule`` names a module of this package: "warmup_cosine" is
``transformer_jax.training.schedules.warmup_cosine``; a schedule kept elsewhere is one file in
a directory of ``TRANSFORMER_JAX_SCHEDULES`` (the mechanism is
:class:`transformer_jax.plugins.Registry`'s). The schedules here:

* ``rsqrt_warmup`` -- the paper's (section 5.3), the default: linear warmup, then decay with
  the inverse square root of the step;
* ``warmup_cosine`` -- linear warmup to the paper's peak, then cosine decay to a floor.

A schedule module defines

* ``FIELDS`` -- the dotted config fields it reads (``"optim.warmup_steps"``,
  ``"train.num_steps"``): :func:`check` makes sure the config has them, the run's log
  shows their values, and a resumed run that changes one is warned that its learning rate
  changes with it;
* ``make(config, d_model)`` -- the learning rate as a function of the step, 1 for the first
  update (the paper's numbering), built with optax's schedules where they fit. ``config``
  holds the fields of FIELDS alone (:func:`fields`: ``config.optim.warmup_steps``), read
  once from the experiment's config. It raises ConfigError, naming the fields, for settings
  it cannot follow.

The config cannot import this package
(it is a lower layer), so the name is checked here: as a run's TrainingSpec is built, before
it writes anything, and by :func:`check` for each point of a sweep.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from types import ModuleType
from typing import Any

import ml_collections

from transformer_jax import config as config_lib, plugins
from transformer_jax.errors import ConfigError

REGISTRY = plugins.Registry(
    __name__, "TRANSFORMER_JAX_SCHEDULES", "optim.schedule",
    needs=(plugins.Need("make", shown="make(config, d_model)"),
           plugins.Need("FIELDS", tuple, "FIELDS (a tuple of the config fields it reads)")),
    make=lambda entry: entry.module)
names, get = REGISTRY.names, REGISTRY.get


def _value(config: ml_collections.ConfigDict, field: str) -> Any:
    try:
        return config_lib.get_field(config, field)
    except (ConfigError, TypeError):  # TypeError: a part of the path is a value, not a section
        raise ConfigError(f"{REGISTRY.label(config.optim.schedule)} reads {field}, a field the "
                          "config does not have") from None


def settings(config: ml_collections.ConfigDict) -> dict[str, Any]:
    """The values of the fields the config's schedule reads: {"optim.warmup_steps": 4000,
    ...}."""
    return {f: _value(config, f) for f in get(config.optim.schedule).FIELDS}


def check(config: ml_collections.ConfigDict) -> ModuleType:
    """Raises ConfigError (naming the field) unless the config's schedule exists, has the
    fields it reads and can follow their values; returns its module. A sweep calls it for
    each of its points; a run's TrainingSpec.from_config (training/spec.py) does the same
    as it reads the settings, once."""
    module = get(config.optim.schedule)
    make(config.optim.schedule, settings(config), config.model.d_model)
    return module


def fields(values: Mapping[str, Any]) -> ml_collections.FrozenConfigDict:
    """The schedule's fields ({"optim.warmup_steps": 4000, ...}) as the sections of a frozen
    config: what a schedule's ``make`` reads (``config.optim.warmup_steps``), and nothing
    else of the experiment's config."""
    tree = ml_collections.ConfigDict()
    for dotted, value in values.items():
        *sections, name = dotted.split(".")
        node = tree
        for section in sections:
            if section not in node:
                node[section] = ml_collections.ConfigDict()
            node = node[section]
        node[name] = value
    return ml_collections.FrozenConfigDict(tree)


def make(name: str, values: Mapping[str, Any], d_model: int) -> Callable[[Any], Any]:
    """Schedule ``name``'s learning rate as a function of the paper's step (1 for the first
    update), from the values of its fields (:func:`settings`). A schedule that reads a field
    its FIELDS leaves out is refused, naming the field, when it is made or first called."""
    with _named_fields_only(name, values):
        rate = get(name).make(fields(values), d_model)

    def checked(step: Any) -> Any:
        with _named_fields_only(name, values):
            return rate(step)

    return checked


@contextlib.contextmanager
def _named_fields_only(name: str, values: Mapping[str, Any]) -> Iterator[None]:
    try:
        yield
    except AttributeError as e:
        if not (e.args and isinstance(e.args[0], KeyError)):
            raise  # not FrozenConfigDict's for a key it does not hold
        raise ConfigError(f"{REGISTRY.label(name)} reads {e.args[0].args[0]}, which its "
                          f"FIELDS ({', '.join(values) or 'none'}) does not name") from None


def learning_rate(name: str, values: Mapping[str, Any], d_model: int) -> Callable[[Any], Any]:
    """The learning rate the optimizer follows and the train step logs, as a function of
    optax's update count (0 for the first update)."""
    rate = make(name, values, d_model)
    return lambda count: rate(count + 1)


def schedule_of(config: ml_collections.ConfigDict, d_model: int) -> Callable[[Any], Any]:
    """:func:`learning_rate` of the config's schedule and settings."""
    return learning_rate(config.optim.schedule, settings(config), d_model)


def changed_by(name: str, changes: Mapping[str, Any]) -> list[str]:
    """The fields among ``changes`` (a resumed run's, ``resume.remember_config``) that change
    schedule ``name``'s learning rate: optim.schedule itself and the fields it reads."""
    return [f for f in (REGISTRY.field, *get(name).FIELDS) if f in changes]
