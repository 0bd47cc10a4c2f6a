"""Registries of one module an entry (attention kernels, learning-rate schedules, sweep
launchers): the modules of a registry package, and of the directories an environment variable
adds to its path, are its entries, found by name."""

from __future__ import annotations

import functools
import importlib
import os
import pkgutil
from types import ModuleType

from transformer_jax.errors import ConfigError, shown


def directories(variable: str) -> list[str]:
    """The directories the environment variable ``variable`` names (separated by
    ``os.pathsep``), to be added to a registry package's ``__path__``."""
    return [d for d in os.environ.get(variable, "").split(os.pathsep) if d]


@functools.cache
def module_names(path: tuple[str, ...], variable: str) -> tuple[str, ...]:
    """The entries on a registry package's ``path``, alphabetically: its modules whose names do
    not start with "_". ConfigError naming ``variable`` for a directory of the path that is
    not one."""
    for directory in path:
        if not os.path.isdir(directory):
            raise ConfigError(f"{variable}: {directory} is not a directory")
    return tuple(sorted({m.name for m in pkgutil.iter_modules(list(path))
                         if not m.ispkg and not m.name.startswith("_")}))


def load(package: str, path: tuple[str, ...], variable: str, name: str, label: str
         ) -> ModuleType:
    """The entry ``name`` of the registry ``package`` (its module, imported); ConfigError
    starting with ``label`` (how the user named it, e.g. ``--search=x``) and naming the known
    entries for an unknown name."""
    known = module_names(path, variable)
    if name not in known:
        raise ConfigError(f"{shown(label)} is not one of {', '.join(known)}")
    return importlib.import_module(f"{package}.{name}")
