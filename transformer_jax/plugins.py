"""Registries of one module an entry: the attention kernels, position schemes, datasets, kinds
of dataset source, decoding strategies, export targets, learning-rate schedules, pruners,
search samplers, sweep launchers and report metrics are each a package whose modules, and
those of the directories an environment variable of its own adds to its path, are its entries,
found by name. :class:`Registry` is what they share; each kind declares what an entry's module
must define (:class:`Need`) and where its traits are."""

from __future__ import annotations

import dataclasses
import functools
import importlib
import os
import pkgutil
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import MappingProxyType, ModuleType
from typing import Any

from transformer_jax.errors import ConfigError, shown

_NONE: Mapping[str, Any] = MappingProxyType({})


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


@dataclasses.dataclass(frozen=True)
class Need:
    """One thing an entry's module must define: ``name``, a function, or with ``kind`` an
    instance of that class. ``shown`` is how a refusal names it (by default the name, with
    the class); with ``trait``, only a module whose traits have it true needs it."""

    name: str
    kind: type | None = None
    shown: str = ""
    trait: str = ""

    def met_by(self, module: ModuleType) -> bool:
        value = getattr(module, self.name, None)
        return isinstance(value, self.kind) if self.kind else callable(value)

    def __str__(self) -> str:
        if self.shown:
            return self.shown
        what = (f"{self.name} (a {self.kind.__module__}.{self.kind.__qualname__})" if self.kind
                else f"a function {self.name}")
        return f"{what} (for its trait {self.trait})" if self.trait else what


@dataclasses.dataclass(frozen=True)
class Alias:
    """An entry that is another entry's module under a name of its own: ``of``, the entry it
    runs; ``traits``, the traits it changes; ``options``, keywords its functions are always
    called with (over the caller's)."""

    of: str
    options: Mapping[str, Any] = _NONE
    traits: Mapping[str, Any] = _NONE


@dataclasses.dataclass(frozen=True)
class Entry:
    """A registered entry: its name, its module, its traits and the options an alias fixes."""

    name: str
    module: ModuleType
    traits: Any = None
    options: Mapping[str, Any] = _NONE

    def function(self, attribute: str) -> Callable[..., Any] | None:
        """The module's function ``attribute``, called with the entry's options over the
        caller's keywords; None if the module has none."""
        found = getattr(self.module, attribute, None)
        if found is None or not self.options:
            return found
        return functools.partial(_with_options, found, self.options)


def _with_options(function: Callable[..., Any], options: Mapping[str, Any], *args: Any,
                  **kwargs: Any) -> Any:
    return function(*args, **{**kwargs, **options})


def _listed(items: Sequence[object]) -> str:
    """"a", "a and b", "a, b and c"."""
    words = [str(i) for i in items]
    return ", ".join(words[:-1]) + " and " + words[-1] if len(words) > 1 else "".join(words)


class Registry[E]:
    """The entries of one kind: the modules of the package ``package`` (named by ``__name__``
    in its ``__init__``) whose names do not start with "_", those of the directories the
    environment variable ``variable`` names (added to the package's path here), the
    ``aliases``, and the modules given to :meth:`add` in this process, each found by name.
    As a collection it is its names, as they are when asked (a config field's choices).

    * ``field``: what the user names an entry with, a config field (``"model.attention"``)
      or a flag (``"--search"``); an unknown name is refused in one line naming it and the
      known names, ``model.attention='flash' is not one of dense, ...``.
    * ``needs``: what an entry's module must define; a module that lacks any of it is
      refused in one line naming the file and all it must define.
    * ``traits``: the module attribute holding an entry's traits (a frozen dataclass, or the
      object whose attributes they are), which :meth:`having` reads.
    * ``first``: the name listed before the others (the paper's), which follow
      alphabetically.
    * ``make``: what :meth:`get` hands out, from the :class:`Entry` (the entry itself by
      default: a kind may hand out its module, or the object its module defines).
    * ``not_entries``: modules of the package that its entries share, not entries.
    """

    def __init__(self, package: str, variable: str, field: str, *, needs: Sequence[Need] = (),
                 traits: str = "", first: str = "", aliases: Mapping[str, Alias] = _NONE,
                 make: Callable[[Entry], E] = lambda entry: entry,
                 not_entries: Sequence[str] = ()) -> None:
        self.package, self.variable, self.field = package, variable, field
        self.needs, self.traits, self.first = tuple(needs), traits, first
        self.aliases, self.make, self.not_entries = aliases, make, frozenset(not_entries)
        self.added: dict[str, ModuleType] = {}
        sys.modules[package].__path__ += directories(variable)

    def names(self) -> tuple[str, ...]:
        """Every entry's name: ``first``, then the others alphabetically."""
        path = tuple(sys.modules[self.package].__path__)
        found = sorted({*module_names(path, self.variable), *self.aliases, *self.added}
                       - self.not_entries)
        return tuple(sorted(found, key=lambda name: name != self.first))

    def __contains__(self, name: object) -> bool:
        return name in self.names()

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def add(self, name: str, module: ModuleType) -> None:
        """Makes ``module`` (made in this process, not a file) the entry ``name`` from now
        on, checked as a file's when it is asked for; :meth:`remove` forgets it."""
        self.added[name] = module

    def remove(self, name: str) -> None:
        """Forgets the entry ``name`` given to :meth:`add`."""
        del self.added[name]

    def label(self, name: object, field: str = "") -> str:
        """How the user asked for ``name``: ``--search=x`` or ``model.attention='x'``
        (``field``: another field or flag naming an entry of the kind)."""
        field = field or self.field
        return (f"{field}={shown(str(name))}" if field.startswith("--")
                else f"{field}={name!r}")

    def check(self, name: object, field: str = "") -> None:
        """ConfigError in one line naming the field (``field``, by default the kind's) and
        the known names when ``name`` is none of them; nothing is imported."""
        known = self.names()
        if not isinstance(name, str) or name not in known:
            raise ConfigError(f"{self.label(name, field)} is not one of {', '.join(known)}")

    def entry(self, name: str) -> Entry:
        """The entry ``name``, its module imported and checked; ConfigError in one line for
        an unknown name or a module that does not define what the kind needs."""
        self.check(name)
        alias = self.aliases.get(name, Alias(name))
        try:
            module = self.added.get(alias.of) or importlib.import_module(
                f"{self.package}.{alias.of}")
        except Exception as e:  # an entry file of the user's that does not import
            where = getattr(e, "filename", None) or alias.of
            why = shown(str(e).splitlines()[0] if str(e) else "")
            raise ConfigError(f"{self.label(name)}: {where} cannot be imported: "
                              f"{type(e).__name__}: {why}") from None
        traits = getattr(module, self.traits, None) if self.traits else None
        needed = [n for n in self.needs if not n.trait or getattr(traits, n.trait, False)]
        if not all(need.met_by(module) for need in needed):
            where = getattr(module, "__file__", None) or f"the module of {name}"
            raise ConfigError(f"{self.label(name)}: {where} must define "
                              f"{_listed(needed)}")
        if alias.traits:
            traits = dataclasses.replace(traits, **alias.traits)
        return Entry(name, module, traits, alias.options)

    def get(self, name: str) -> E:
        """What the kind hands out for entry ``name`` (``make``); refusals as :meth:`entry`'s."""
        return self.make(self.entry(name))

    def having(self, trait: str) -> tuple[str, ...]:
        """The names of the entries whose trait ``trait`` is true, in the order of
        :meth:`names`."""
        return tuple(name for name in self.names() if getattr(self.entry(name).traits, trait))
