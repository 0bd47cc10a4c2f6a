"""A sweep and its points, and the experiment files that define them.

An experiment file defines ``get_sweep(arg) -> Sweep``: a config file (``configs/table3.py``)
and a grid of points built with :mod:`transformer_jax.sweeps.hyper` over named variants and
any dotted field. A config file sweeps its variant over the ``--grid`` axes alone.
``--grid`` axes and ``--seeds`` multiply either's points. Each point trains in
``ROOT/NAME``, named after its values (``lr_scale=0.5,warmup_steps=2000,seed=1``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib.machinery
import importlib.util
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from transformer_jax import config as config_lib
from transformer_jax.errors import ConfigError, UserError, in_users_code, shown
from transformer_jax.sweeps import hyper, space as space_lib


@dataclasses.dataclass(frozen=True)
class Sweep:
    """An experiment: a grid of points (transformer_jax.sweeps.hyper) on one config file.

    ``parameter`` is the quantity on the report's x axis: a Table 3 quantity
    (config.QUANTITIES, read from each point's variant at the paper's scale), a swept field,
    or "" for the first swept field. ``overrides`` apply to every point, ``demo_overrides``
    to every point at scale "demo"; ``variant`` is that of points that name none. A sweep
    with a ``space`` (:mod:`transformer_jax.sweeps.space`) is a search: each trial samples
    the space and trains the grid's points (one setting, and its seeds) with the values
    sampled (:mod:`transformer_jax.sweeps.search.run`).
    """

    name: str
    config: str
    grid: Sequence[dict[str, Any]]
    parameter: str = ""
    overrides: dict[str, Any] = dataclasses.field(default_factory=dict)
    demo_overrides: dict[str, Any] = dataclasses.field(default_factory=dict)
    description: str = ""
    variant: str = "base"
    space: Sequence[space_lib.Dimension] = ()

    def points(self) -> list[Point]:
        """The grid's points, named; UserError when two are the same, a name is no folder
        name, or there are more than MAX_POINTS."""
        if len(self.grid) > MAX_POINTS:
            raise UserError(f"sweep {shown(self.name)}: {len(self.grid):,} points; one sweep "
                            f"runs at most {MAX_POINTS:,}: split it")
        try:
            labels = hyper.names(self.grid, default=self.variant)
        except ValueError as e:
            raise UserError(f"sweep {shown(self.name)}: {e}") from e
        fields, parameter = hyper.varying(self.grid), self.axis()
        return [Point(label, dict(g), g.get(hyper.VARIANT, self.variant),
                      hyper.setting(g, fields) or g.get(hyper.VARIANT, self.variant),
                      self._value(g, parameter))
                for label, g in zip(labels, self.grid, strict=True)]

    def axis(self) -> str:
        """The report's x axis: ``parameter``, or the first field of the space or swept."""
        if self.parameter or self.space:
            return self.parameter or self.space[0].field
        return next(iter(hyper.varying(self.grid)), hyper.VARIANT)

    def _value(self, point: dict[str, Any], parameter: str) -> Any:
        if parameter in point:
            return point[parameter]
        variant = point.get(hyper.VARIANT, self.variant)
        if parameter in config_lib.QUANTITIES and variant in config_lib.VARIANTS:
            return _quantity(variant, parameter)
        return variant


@functools.cache
def _quantity(variant: str, parameter: str) -> Any:
    """A Table 3 quantity of a variant at the paper's scale (built once per variant)."""
    return config_lib.quantity(config_lib.build(variant), parameter)


# The most points one sweep runs (each is a training run): a grid past it is refused before
# its points are made.
MAX_POINTS = 10_000


def check_sweep(sweep: Any, path: str) -> None:
    """UserError naming the experiment file and the field when get_sweep returned anything
    but a Sweep of the right types."""
    where = f"experiment file {path}: get_sweep"
    if not isinstance(sweep, Sweep):
        raise UserError(f"{where} returned {type(sweep).__name__}, not a Sweep")
    for field in ("name", "config", "parameter", "description", "variant"):
        if not isinstance(getattr(sweep, field), str):
            raise UserError(f"{where}: Sweep.{field}={getattr(sweep, field)!r} is not a string")
    why = hyper.unfit_name(sweep.name)
    if why:
        raise UserError(f"{where}: Sweep.name={sweep.name!r} {why}")
    if isinstance(sweep.grid, str | bytes | dict) or not isinstance(sweep.grid, Sequence) or \
            not sweep.grid:
        raise UserError(f"{where}: Sweep.grid={str(sweep.grid)[:60]!r} is not a non-empty list of "
                        "points (dicts of field: value)")
    if len(sweep.grid) > MAX_POINTS:
        raise UserError(f"{where}: {len(sweep.grid):,} points; one sweep runs at most "
                        f"{MAX_POINTS:,}: split it")
    if not sweep.variant.strip():
        raise UserError(f"{where}: Sweep.variant={sweep.variant!r} names no variant")
    for i, point in enumerate(sweep.grid):
        if not isinstance(point, dict) or not all(isinstance(k, str) for k in point):
            raise UserError(f"{where}: point {i} of Sweep.grid, {str(point)[:60]!r}, is not a "
                            "dict of field names and values")
        variant = point.get(hyper.VARIANT, sweep.variant)
        if not isinstance(variant, str) or not variant.strip():
            raise UserError(f"{where}: point {i} of Sweep.grid has variant="
                            f"{shown(str(variant))[:40]!r}, which names no variant")
    for field in ("overrides", "demo_overrides"):
        value = getattr(sweep, field)
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise UserError(f"{where}: Sweep.{field}={str(value)[:60]!r} is not a dict of "
                            "field names and values")
    if isinstance(sweep.space, str | bytes) or not isinstance(sweep.space, Sequence) or \
            not all(isinstance(d, space_lib.Dimension) for d in sweep.space):
        raise UserError(f"{where}: Sweep.space={str(sweep.space)[:60]!r} is not a list of "
                        "dimensions (sweeps.space.log, uniform, integer, choice)")
    for dim in sweep.space:
        space_lib.check(dim, f"{where}: space {dim.field}")


@dataclasses.dataclass(frozen=True)
class Point:
    """One training run: ``name`` (its workdir under the root), its grid ``fields``
    (``"variant"``, ``"seed"`` and dotted config fields), its ``variant`` of the config file,
    its ``setting`` (the name without the seed: replicas over seeds share it) and the value
    of the sweep's parameter."""

    name: str
    fields: dict[str, Any]
    variant: str
    setting: str
    value: Any

    @property
    def label(self) -> str:
        return self.name


def load_module(path: Path, kind: str) -> Any:
    """The Python file ``path`` as a module; UserError naming it when it is not a file or
    fails to load (not Python, or an exception as it runs: the line is named)."""
    if not path.is_file():
        raise UserError(f"no {kind} file {path}")
    loader = importlib.machinery.SourceFileLoader(f"_{kind}_{path.stem}", str(path))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    with in_file(path, kind):
        loader.exec_module(module)
    return module


@contextlib.contextmanager
def in_file(path: Path, kind: str, name_own_errors: bool = True) -> Iterator[None]:
    """Turns an exception raised by the code of ``path`` (a user's config or experiment
    file) into a UserError naming the file and its line; the project's own errors are given
    the file's name when they lack it (with ``name_own_errors``)."""
    try:
        yield
    except UserError as e:
        if not name_own_errors or str(path) in str(e):
            raise
        raise type(e)(f"{kind} file {path}: {e}") from None
    except Exception as e:  # noqa: BLE001 -- whatever the user's code raises
        where = in_users_code(e, str(path))
        if not where:  # raised in code it called
            where = shown(f": {type(e).__name__}: {(str(e).splitlines() or [''])[0]}"[:400])
        raise UserError(f"{kind} file {path}{' ' if where[0] != ':' else ''}{where}") from None


@functools.cache
def config_module(path: str) -> Any:
    """The config file ``path`` as a module, loaded once."""
    return load_module(Path(path), "config")


def load_experiment(spec: str, grid: Sequence[str] = (), seeds: int = 0,
                    space: Sequence[str] = ()) -> Sweep:
    """The sweep of ``"experiments/FILE.py[:ARG]"`` (``get_sweep(ARG)``) or of
    ``"configs/FILE.py[:VARIANT]"`` (its variant alone), times the ``--grid`` axes
    (``"optim.lr_scale=0.5,1,2"``) and ``seeds`` seeds, its space extended by the
    ``--space`` dimensions (``"optim.lr_scale=log:0.25:4"``)."""
    path, _, arg = spec.partition(":")
    module = load_module(Path(path), "experiment")
    if hasattr(module, "get_sweep"):
        with in_file(Path(path), "experiment"):
            sweep = module.get_sweep(arg or None)
        check_sweep(sweep, path)
    elif hasattr(module, "get_config"):
        variant, options = config_lib.parse_variant_arg(arg or None)
        if options:
            raise UserError(f"{spec}: give the variant alone (dataset and scale come from "
                            "--config.data.name and --scale)")
        name = f"{Path(path).stem}_{variant}"
        sweep = Sweep(name=name, config=path, grid=[{hyper.VARIANT: variant}],
                      description=f"{path}:{variant}", variant=variant)
    else:
        raise UserError(f"{path}: an experiment file defines get_sweep(arg) -> Sweep, a config "
                        "file get_config(arg)")
    axes = [parse_grid(g) for g in grid]
    if seeds and any(f in hyper.SEED_LIKE for axis in [sweep.grid, *axes] for p in axis
                     for f in p):
        raise UserError(f"--seeds={seeds}: {spec} and its --grid sweep seeds already")
    size = math.prod(len(axis) for axis in [sweep.grid, *axes]) * max(seeds, 1)
    if size > MAX_POINTS:
        raise UserError(f"{spec}: {size:,} points ({len(sweep.grid):,} of the sweep"
                        + "".join(f" x {len(a):,}" for a in axes)
                        + (f" x {seeds:,} seeds" if seeds else "")
                        + f"); one sweep runs at most {MAX_POINTS:,}: split it")
    axes += [hyper.seeds(seeds)] if seeds else []
    if axes:
        sweep = dataclasses.replace(sweep, grid=hyper.product([sweep.grid, *axes]))
    if space:
        sweep = dataclasses.replace(sweep, space=space_lib.combine(
            sweep.space, [space_lib.parse(s) for s in space]))
    try:
        sweep.points()  # names unique, each a folder of the root
    except UserError as e:
        raise UserError(f"{path}: {e}") from None
    return sweep


def parse_grid(text: str) -> list[dict[str, Any]]:
    """The axis of ``--grid=FIELD=V1,V2,...``, each value read as the field's type (``variant``
    takes variant names); UserError naming the field or value that does not fit."""
    field, sep, values = text.partition("=")
    field = field.strip().removeprefix("config.")
    origin = f"--grid={shown(text)}"
    if not sep or not values.strip():
        raise UserError(f"{origin}: give FIELD=VALUE,VALUE,... e.g. "
                        "--grid=optim.lr_scale=0.5,1,2")
    items = [v.strip() for v in values.split(",")]
    if field == hyper.VARIANT:
        if not all(items):  # the config file's default variant would train under no name
            raise UserError(f"{origin}: an empty variant name; name each, e.g. "
                            "--grid=variant=base,big")
        return hyper.sweep(field, items)
    if field == hyper.SEED:  # sets every field of config.SEED_FIELDS
        current = config_lib.get_field(config_lib.base_config(), config_lib.SEED_FIELDS[0])
        return hyper.sweep(field, [hyper.parse_value(field, v, current, origin)
                                   for v in items])
    try:
        current = config_lib.get_field(config_lib.base_config(), field)
    except ConfigError as e:
        raise UserError(f"{origin}: unknown config field {shown(field) or repr(field)}"
                        ) from e
    return hyper.sweep(field, [hyper.parse_value(field, v, current, origin) for v in items])
