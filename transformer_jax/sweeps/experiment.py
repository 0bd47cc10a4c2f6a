"""A sweep and its points, and the experiment files that define them.

An experiment file defines ``get_sweep(arg) -> Sweep``: a config file (``configs/table3.py``)
and a grid of points built with :mod:`transformer_jax.sweeps.hyper` over named variants and
any dotted field. A config file sweeps its variant over the ``--grid`` axes alone.
``--grid`` axes and ``--seeds`` multiply either's points. Each point trains in
``ROOT/NAME``, named after its values (``lr_scale=0.5,warmup_steps=2000,seed=1``).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from transformer_jax import config as config_lib
from transformer_jax.errors import ConfigError, UserError
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
    sampled (:mod:`transformer_jax.sweeps.search`).
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
        """The grid's points, named; UserError when two are the same."""
        try:
            labels = hyper.names(self.grid, default=self.variant)
        except ValueError as e:
            raise UserError(f"sweep {self.name}: {e}") from e
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
            return config_lib.quantity(config_lib.build(variant), parameter)
        return variant


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
    """The Python file ``path`` as a module; UserError naming it when it does not exist."""
    if not path.is_file():
        raise UserError(f"no {kind} file {path}")
    spec = importlib.util.spec_from_file_location(f"_{kind}_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
        sweep = module.get_sweep(arg or None)
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
    axes += [hyper.seeds(seeds)] if seeds else []
    if axes:
        sweep = dataclasses.replace(sweep, grid=hyper.product([sweep.grid, *axes]))
    if space:
        sweep = dataclasses.replace(sweep, space=space_lib.combine(
            sweep.space, [space_lib.parse(s) for s in space]))
    sweep.points()  # names unique
    return sweep


def parse_grid(text: str) -> list[dict[str, Any]]:
    """The axis of ``--grid=FIELD=V1,V2,...``, each value read as the field's type (``variant``
    takes variant names); UserError naming the field or value that does not fit."""
    field, sep, values = text.partition("=")
    field = field.strip().removeprefix("config.")
    if not sep or not values.strip():
        raise UserError(f"--grid={text}: give FIELD=VALUE,VALUE,... e.g. "
                        "--grid=optim.lr_scale=0.5,1,2")
    items = [v.strip() for v in values.split(",")]
    if field in (hyper.VARIANT, hyper.SEED):
        return hyper.sweep(field, [int(v) if field == hyper.SEED and v.isdigit() else v
                                   for v in items])
    try:
        current = config_lib.get_field(config_lib.base_config(), field)
    except ConfigError as e:
        raise UserError(f"--grid={text}: unknown config field {field}") from e
    return hyper.sweep(field, [hyper.parse_value(field, v, current, f"--grid={text}")
                                for v in items])
