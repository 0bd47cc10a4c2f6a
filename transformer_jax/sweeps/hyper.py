"""Grids of config values: the points of a sweep, built from axes.

A point is a dict of dotted config fields and their values (``{"optim.lr_scale": 0.5,
"train.seed": 1}``), plus two names of this module's own:

* ``"variant"`` -- a named variant of the sweep's config file (``"A_h4"``, ``"big"``);
* ``"seed"`` -- one seed for initialisation, dropout and the order of the training data
  (config.SEED_FIELDS);
* ``"name"`` -- the name of the point's setting, for a setting whose values make a poor one
  (``"big, P_drop 0.1"``): its workdir is that name, with ``,seed=K`` where the points'
  seeds differ, and its replicas over seeds are one setting.

An experiment file composes axes in the style of the ``get_hyper`` of Google's JAX research
configs::

    product([sweep("variant", ["base", "big"]), sweep("optim.lr_scale", [0.5, 1, 2]),
             seeds(3)])                               # 2 x 3 x 3 = 18 points
    zip(sweep("model.num_heads", [4, 8]), sweep("model.d_k", [128, 64]))   # 2 points
    chain(sweep("variant", ["base"]), sweep("variant", ["big"]))           # 2 points

:func:`names` gives each point a readable, unique workdir name from the values that differ
between points (``lr_scale=0.5,warmup_steps=2000,seed=1``).
"""

from __future__ import annotations

import builtins
import collections
import itertools
import unicodedata
from collections.abc import Iterable, Sequence
from typing import Any

from transformer_jax.config import SEED_FIELDS
from transformer_jax.errors import UserError, shown

Point = dict[str, Any]
SEED = "seed"
VARIANT = "variant"
NAME = "name"  # a setting's own name, in place of the one made from its values
# Fields that pick a replica of a setting rather than the setting itself.
SEED_LIKE = (SEED, *SEED_FIELDS)


def sweep(field: str, values: Iterable[Any]) -> list[Point]:
    """One axis: a point per value of ``field``."""
    return [{field: value} for value in values]


def seeds(k: int) -> list[Point]:
    """The seed axis: seeds 0 .. k-1."""
    return sweep(SEED, range(k))


def product(axes: Sequence[Sequence[Point]]) -> list[Point]:
    """Every combination of one point from each axis (the first axis varies slowest)."""
    points = [{}]
    for axis in axes:
        points = [{**p, **q} for p in points for q in axis]
    return points


def zip(*axes: Sequence[Point]) -> list[Point]:  # noqa: A001 -- the name of the idiom
    """Axes that move together: the i-th points of all axes merged; the axes must have the
    same length (ValueError naming the lengths)."""
    lengths = [len(a) for a in axes]
    if len(set(lengths)) > 1:
        raise ValueError(f"zip: axes of different lengths {lengths}")
    return [dict(itertools.chain.from_iterable(p.items() for p in group))
            for group in builtins.zip(*axes, strict=True)]


def chain(*axes: Sequence[Point]) -> list[Point]:
    """The points of each axis in turn."""
    return [dict(p) for axis in axes for p in axis]


def format_value(value: Any) -> str:
    """A value as it appears in a point's name: ``0.5``, ``2000``, ``true``, ``learned``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value)) if value else "0"
    return str(value).replace("/", "_").replace(" ", "_")


def _short(fields: Sequence[str]) -> dict[str, str]:
    """Each field by its last component, or its whole dotted name where two share one."""
    last = [f.rsplit(".", 1)[-1] for f in fields]
    return {f: (s if last.count(s) == 1 else f) for f, s in builtins.zip(fields, last,
                                                                         strict=True)}


def varying(points: Sequence[Point]) -> list[str]:
    """The fields whose value differs between points, in order of first appearance; the seeds
    last."""
    fields: list[str] = []
    for p in points:
        fields += [f for f in p if f not in fields and f != NAME]
    out = [f for f in fields
           if len({format_value(p.get(f)) if f in p else None for p in points}) > 1]
    return [f for f in out if f not in SEED_LIKE] + [f for f in out if f in SEED_LIKE]


def name(point: Point, fields: Sequence[str]) -> str:
    """The point's name from the values of ``fields``: a variant by its own name, any other
    field as ``short=value``."""
    short = _short(fields)
    parts = [format_value(point[f]) if f == VARIANT else f"{short[f]}={format_value(point[f])}"
             for f in fields if f in point]
    return ",".join(parts)


def names(points: Sequence[Point], default: str = "run") -> list[str]:
    """One unique name per point (``default`` for a sweep of one point; a point's ``"name"``
    and its seed where seeds differ, for a point that has one), in time linear in
    the number of points; ValueError naming the repeated name when two points are the same,
    or a name that cannot be a folder of the sweep's root (:func:`unfit_name`)."""
    for p in points:
        why = unfit_name(p[NAME]) if NAME in p else ""
        if why:
            raise ValueError(f"point name {p[NAME]!r} {why}")
    fields = varying(points)
    if not fields and len(points) > 1:  # all alike: named after all their values
        fields = [f for f in dict.fromkeys(f for p in points for f in p) if f != NAME]
    seeds = [f for f in fields if f in SEED_LIKE]
    out = [",".join(filter(None, (p[NAME], name(p, seeds)))) if p.get(NAME)
           else name(p, fields) or default for p in points]
    for n in out:
        why = unfit_name(n)
        if why:
            raise ValueError(f"point name {n!r} {why}; give the point a 'name'")
    counts = collections.Counter(out)
    repeated = sorted(n for n, k in counts.items() if k > 1)
    if repeated:
        raise ValueError(f"points repeat: {', '.join(repeated[:10])}"
                         + (f" and {len(repeated) - 10} more" if len(repeated) > 10 else ""))
    return out


# The longest folder name most file systems take, in bytes.
NAME_MAX = 255


def unfit_name(point_name: Any) -> str:
    """Why ``point_name`` cannot be the folder of a point in the sweep's root ("" when it
    can): it must be one path component of text, not "." or "..", without "/", "\\" or
    control characters, of at most NAME_MAX bytes."""
    if not isinstance(point_name, str) or not point_name.strip():
        return "is not a non-empty string"
    if point_name in (".", "..") or "/" in point_name or "\\" in point_name:
        return "is not one folder inside the sweep's root"
    if any(unicodedata.category(c) in ("Cc", "Cs") for c in point_name):
        return "holds a control character"
    if len(point_name.encode("utf-8")) > NAME_MAX:
        return f"is longer than {NAME_MAX} bytes"
    return ""


def setting(point: Point, fields: Sequence[str]) -> str:
    """The name of the point's setting: its name without the seed (points that differ only
    in their seed are replicas of one setting)."""
    return point.get(NAME) or name(point, [f for f in fields if f not in SEED_LIKE])


def parse_value(field: str, text: str, current: Any, origin: str) -> Any:
    """``text`` read as the type of the field's ``current`` value (a tuple of ints written
    ``1:2:3``); UserError naming ``origin`` and the value that does not fit."""
    try:
        if isinstance(current, bool):
            if text.lower() not in ("true", "false", "1", "0"):
                raise ValueError
            return text.lower() in ("true", "1")
        if isinstance(current, int):
            return int(text)
        if isinstance(current, float):
            return float(text)
        if isinstance(current, tuple | list):
            return tuple(int(x) for x in text.split(":") if x)
    except ValueError:
        kind = type(current).__name__
        article = "an" if kind[0] in "aeiou" else "a"
        raise UserError(f"{origin}: {field}={shown(repr(text))} is not {article} {kind}"
                        ) from None
    return text
