"""The space a search samples: one dimension a config field, each an Optuna distribution.

On the command line, ``--space=FIELD=KIND:...`` (repeatable)::

    --space=optim.lr_scale=log:0.25:4        a float, log-uniform in [0.25, 4]
    --space=model.dropout_rate=0:0.3         a float, uniform in [0, 0.3] (or float:0:0.3)
    --space=optim.warmup_steps=int:100:600   an integer in [100, 600] (int:log:1:64 log-uniform)
    --space=model.num_heads=choice:4,8,16    one of the values, read as the field's type

and in an experiment file, ``Sweep(..., space=[space.log("optim.lr_scale", 0.25, 4),
space.integer("optim.warmup_steps", 100, 600)])``. A bad dimension is refused in one line
naming it: an unknown field, low >= high, log bounds <= 0, an empty choice, a kind that is
not one of KINDS or does not fit the field's type.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import optuna

from transformer_jax import config as config_lib
from transformer_jax.errors import ConfigError, UserError, shown
from transformer_jax.sweeps import hyper

KINDS = ("float", "log", "int", "choice")


@dataclasses.dataclass(frozen=True)
class Dimension:
    """One config field and the values a search may give it: ``kind`` one of KINDS,
    ``low``..``high`` for numbers (``log``: log-uniform), ``choices`` for a choice."""

    field: str
    kind: str
    low: float = 0.0
    high: float = 0.0
    log: bool = False
    choices: tuple[Any, ...] = ()

    def distribution(self) -> optuna.distributions.BaseDistribution:
        if self.kind == "choice":
            return optuna.distributions.CategoricalDistribution(self.choices)
        if self.kind == "int":
            return optuna.distributions.IntDistribution(int(self.low), int(self.high),
                                                        log=self.log)
        return optuna.distributions.FloatDistribution(self.low, self.high, log=self.log)

    def __str__(self) -> str:
        if self.kind == "choice":
            return f"{self.field}=choice:{','.join(map(str, self.choices))}"
        kind = {"float": "", "log": "log:", "int": "int:log:" if self.log else "int:"}[self.kind]
        return f"{self.field}={kind}{_number(self.low)}:{_number(self.high)}"


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def _field_value(field: str, origin: str) -> Any:
    field = field.removeprefix("config.")
    try:
        return config_lib.get_field(config_lib.base_config(), field)
    except ConfigError:
        raise UserError(f"{origin}: unknown config field {field}") from None


def check(dim: Dimension, origin: str) -> Dimension:
    """``dim`` when it fits its field; UserError naming what does not. Every value a trial
    may sample must be one the field takes (config.check_value: its type and range), so a
    bound outside the range, nan or inf is refused here and not when a trial samples it."""
    if not isinstance(dim.field, str):
        raise UserError(f"{origin}: the field {dim.field!r} is not a dotted name")
    current = _field_value(dim.field, origin)
    if dim.kind not in KINDS:
        raise UserError(f"{origin}: unknown kind {dim.kind!r}; one of {', '.join(KINDS)}")
    if dim.kind == "choice":
        if isinstance(dim.choices, str | bytes) or not dim.choices:
            raise UserError(f"{origin}: an empty choice")
        for value in dim.choices:
            _check_value(dim.field, value, origin)
        return dim
    if isinstance(current, bool) or not isinstance(current, int | float):
        raise UserError(f"{origin}: {dim.field} is a {type(current).__name__}, not a number; "
                        "use choice:V1,V2,...")
    if dim.kind in ("float", "log") and isinstance(current, int):
        raise UserError(f"{origin}: {dim.field} is an int; use int:LOW:HIGH")
    bounds = (dim.low, dim.high)
    if not all(isinstance(b, int | float) and not isinstance(b, bool) and math.isfinite(b)
               for b in bounds):
        raise UserError(f"{origin}: the bounds {dim.low!r}, {dim.high!r} must be finite numbers")
    if dim.kind == "int" and not (float(dim.low).is_integer() and float(dim.high).is_integer()):
        raise UserError(f"{origin}: int bounds must be integers")
    if dim.low >= dim.high:
        raise UserError(f"{origin}: low {_number(dim.low)} >= high {_number(dim.high)}")
    if dim.log and dim.low <= 0:
        raise UserError(f"{origin}: log bounds must be > 0")
    for bound in bounds:
        _check_value(dim.field, int(bound) if dim.kind == "int" else float(bound), origin)
    return dim


def _check_value(field: str, value: Any, origin: str) -> None:
    try:
        config_lib.check_value(field, value)
    except ConfigError as e:
        raise UserError(f"{origin}: {e}") from None


def uniform(field: str, low: float, high: float) -> Dimension:
    """A float uniform in [low, high]."""
    return check(Dimension(field, "float", float(low), float(high)), f"space {field}")


def log(field: str, low: float, high: float) -> Dimension:
    """A float log-uniform in [low, high] (both > 0)."""
    return check(Dimension(field, "log", float(low), float(high), log=True), f"space {field}")


def integer(field: str, low: int, high: int, log: bool = False) -> Dimension:  # noqa: A002
    """An integer in [low, high], log-uniform with ``log``."""
    return check(Dimension(field, "int", low, high, log=log), f"space {field}")


def choice(field: str, values: Sequence[Any]) -> Dimension:
    """One of ``values``."""
    return check(Dimension(field, "choice", choices=tuple(values)), f"space {field}")


def parse(text: str) -> Dimension:
    """The dimension of ``--space=FIELD=KIND:...`` (see the module's docstring)."""
    origin = f"--space={shown(text)}"
    field, sep, spec = text.partition("=")
    field = field.strip().removeprefix("config.")
    if not sep or not spec.strip():
        raise UserError(f"{origin}: give FIELD=KIND:..., e.g. --space=optim.lr_scale=log:0.25:4")
    current = _field_value(field, origin)
    kind, _, rest = spec.strip().partition(":")
    if kind not in KINDS:
        if not _numeric(kind):
            raise UserError(f"{origin}: unknown kind {kind!r}; one of {', '.join(KINDS)}, or "
                            "LOW:HIGH")
        kind, rest = "float", spec.strip()
    if kind == "choice":
        values = [hyper.parse_value(field, v.strip(), current, origin)
                  for v in rest.split(",") if v.strip()]
        return check(Dimension(field, "choice", choices=tuple(values)), origin)
    log_int = kind == "int" and rest.startswith("log:")
    bounds = rest.removeprefix("log:").split(":") if log_int else rest.split(":")
    if len(bounds) != 2 or not all(_numeric(b) for b in bounds):
        raise UserError(f"{origin}: give {kind}:LOW:HIGH with two numbers")
    low, high = (float(b) for b in bounds)
    return check(Dimension(field, kind, low, high, log=kind == "log" or log_int), origin)


def _numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def combine(dims: Sequence[Dimension], more: Sequence[Dimension]) -> tuple[Dimension, ...]:
    """A sweep's dimensions and those of the command line; UserError when a field repeats."""
    out = (*dims, *more)
    fields = [d.field for d in out]
    repeated = sorted({f for f in fields if fields.count(f) > 1})
    if repeated:
        raise UserError(f"--space: {', '.join(repeated)} given twice")
    return out


# An int dimension of at most this many values has each tried before the first trial (a
# trial's config is built in about 5 ms); a wider one, or a float one, its bounds.
TRIED_VALUES = 256


def tried_values(dim: Dimension) -> tuple[Any, ...]:
    """The values of ``dim`` that :func:`check_trainable` tries: every one of a choice or of
    an int range of at most TRIED_VALUES, else the bounds."""
    if dim.kind == "choice":
        return dim.choices
    if dim.kind == "int":
        low, high = int(dim.low), int(dim.high)
        return tuple(range(low, high + 1)) if high - low < TRIED_VALUES else (low, high)
    return (dim.low, dim.high)


def check_trainable(dims: Sequence[Dimension],
                    config_of: Callable[[dict[str, Any]], object]) -> None:
    """Refuses, in one UserError naming the dimension and the values, a space that holds
    values a trial could sample and not train: ``model.num_heads=int:1:5`` with d_model 128,
    which 3 and 5 do not divide. ``config_of({field: value})`` builds the config of a trial
    given the value, raising UserError where it cannot be trained (config.validate). Each
    dimension's :func:`tried_values` are tried alone, the others at the config's own."""
    for dim in dims:
        refused: dict[Any, UserError] = {}
        for value in tried_values(dim):
            try:
                config_of({dim.field: value})
            except UserError as e:
                refused[value] = e
        if refused:
            bad = [_number(v) if isinstance(v, float) else str(v) for v in refused]
            named = ", ".join(bad[:8]) + (f" and {len(bad) - 8} more" if len(bad) > 8 else "")
            why = str(next(iter(refused.values())))
            why = why.split(": ", 1)[1] if why.startswith("point ") else why
            raise UserError(f"space {shown(str(dim))}: a trial could sample {dim.field}={named}, "
                            f"which no trial can train: {why}")


def values(trial: optuna.trial.BaseTrial | optuna.trial.FrozenTrial,
           dims: Sequence[Dimension]) -> dict[str, Any]:
    """The trial's values of the dimensions, by field."""
    params = trial.params
    return {d.field: params[d.field] for d in dims if d.field in params}
