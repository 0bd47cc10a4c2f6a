"""Fields by their dotted names (``"model.d_model"``): read, set with a type check, and the
values derived from them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import ml_collections

from transformer_jax.errors import ConfigError, shown
from transformer_jax.model.spec import head_dims


def get_field(c: ml_collections.ConfigDict, path: str) -> Any:
    """The value of the field ``path`` ("a.b": ``c.a.b``); ConfigError if there is none."""
    node = c
    for part in path.split("."):
        if not isinstance(node, ml_collections.ConfigDict) or part not in node:
            raise ConfigError(f"the config has no field {path or repr(path)}")
        node = node[part]
    return node


def check_name(c: ml_collections.ConfigDict, path: str, origin: str = "--config") -> None:
    """Refuses in one line naming ``origin.path`` a dotted name that no field of ``c`` can
    have: empty (``--config.``), with an empty part (``model..d_model``), or going into a field
    that holds a value, not a section (``variant.x``). A name merely unknown to ``c`` is left
    to :func:`set_field` (a config file may add fields)."""
    named = f"{origin}.{shown(path)}"
    if not path:
        raise ConfigError(f"{origin}.: no field named; give {origin}.FIELD=VALUE, e.g. "
                          f"{origin}.train.seed=1")
    parts = path.split(".")
    if not all(p.strip() for p in parts):
        raise ConfigError(f"{named}: a field name with an empty part")
    node = c
    for depth, part in enumerate(parts[:-1], 1):
        if part not in node:
            return
        node = node[part]
        if not isinstance(node, ml_collections.ConfigDict):
            raise ConfigError(f"{named}: unknown config field {shown(path)} "
                              f"({'.'.join(parts[:depth])} holds a value, {type(node).__name__}, "
                              "not a section of fields)")


def set_field(c: ml_collections.ConfigDict, path: str, value: Any, origin: str = "") -> None:
    """``c.a.b = value`` for ``path="a.b"``; ConfigError naming the field if it is unknown or
    the value's type does not fit (an int where a float is expected is taken)."""
    where = f"{origin}: " if origin else ""
    *parents, leaf = path.split(".")
    node = c
    for part in parents:
        if part not in node or not isinstance(node[part], ml_collections.ConfigDict):
            raise ConfigError(f"{where}unknown config field {shown(path) or repr(path)}")
        node = node[part]
    if leaf not in node or isinstance(node[leaf], ml_collections.ConfigDict):
        raise ConfigError(f"{where}unknown config field {shown(path) or repr(path)}")
    if inexact_float(node[leaf], value):
        raise ConfigError(f"{where}{path}={_short(value)} {INEXACT}")
    try:
        node[leaf] = value
    except (TypeError, ValueError) as e:  # ml_collections' own message runs over lines
        kind = type(node[leaf]).__name__
        raise ConfigError(f"{where}{path}={_short(value)} is not of the field's type "
                          f"({kind})") from e


INEXACT = "is an integer no float holds exactly; the field, a float, would hold another number"


def inexact_float(current: Any, value: Any) -> bool:
    """Whether the integer ``value``, given to a float field (``current``, its value), has no
    exact float (over 53 bits, or past a float's range): ml_collections would store another
    number without a word (9_007_199_254_740_993 as 9007199254740992.0)."""
    if not isinstance(current, float) or isinstance(value, bool) or not isinstance(value, int):
        return False
    try:
        return float(value) != value
    except OverflowError:
        return True


def _short(value: Any, limit: int = 60) -> str:
    try:
        text = repr(value)
    except ValueError:  # an integer past Python's 4,300 digits
        text = f"<an integer of {value.bit_length():,} bits>"
    return text if len(text) <= limit else text[:limit - 3] + "..."


def apply_all(c: ml_collections.ConfigDict, overrides: Mapping[str, Any], origin: str) -> None:
    """:func:`set_field` for each of ``overrides`` ({"section.field": value})."""
    for path, value in overrides.items():
        set_field(c, path, value, origin)


def checkpoints_to_average(c: ml_collections.ConfigDict) -> int:
    """How many of the last checkpoints evaluation averages: train.average_checkpoints, or
    with 0 every kept one (train.keep_checkpoints)."""
    return c.train.average_checkpoints or c.train.keep_checkpoints


def derived_dims(m: ml_collections.ConfigDict) -> tuple[int, int]:
    """(d_k, d_v) of a config's model section, with 0 resolved to d_model // num_heads."""
    return head_dims(m.d_model, m.num_heads, m.d_k, m.d_v)
