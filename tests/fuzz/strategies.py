"""Generators of the inputs users hand the project: values of any type for any config field
(valid ones often enough to reach the checks after the first), JSON that is damaged or of
the wrong shape, and lines of text that are not always text."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import strategies as st

from transformer_jax import config as config_lib

BASE = json.loads(config_lib.base_config().to_json_best_effort())
# Every field by its dotted name, and names that are not fields (or are whole sections).
FIELDS = [f"{s}.{k}" if isinstance(v, dict) else s for s, v in BASE.items()
          for k in (v if isinstance(v, dict) else [None])]
NOT_FIELDS = ["model.colour", "nosuch", "model", "optim", "train.seed.high", "data..name", ""]

# Numbers at the edges: zero, signs, int32 and 64-bit limits, beyond, NaN and infinities.
EDGE_INTS = [0, 1, -1, 2, 3, 7, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**63, 2**64, 2**70,
             10**22, -(2**63)]
EDGE_FLOATS = [0.0, -0.0, 0.5, 1.0, 1e-9, 1e308, -1.0, math.nan, math.inf, -math.inf, 2.5e-324]
WEIRD_TEXT = ["", " ", "\x00", "a\x00b", "../../etc", "/", "ü", "\u202e", "x" * 300, "1e3",
              "nan", "inf", "0x10", "True", "²", "١٢", "-0", " 7 "]

ANY_SCALAR = st.one_of(
    st.sampled_from(EDGE_INTS), st.integers(-(2**80), 2**80), st.sampled_from(EDGE_FLOATS),
    st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.none(),
    st.sampled_from(WEIRD_TEXT), st.text(max_size=20))
ANY_VALUE = st.one_of(ANY_SCALAR, st.lists(ANY_SCALAR, max_size=3),
                      st.tuples(st.integers(-3, 300)),
                      st.dictionaries(st.text(max_size=5), ANY_SCALAR, max_size=2))


def field_value(field: str) -> st.SearchStrategy[Any]:
    """A value for ``field``: often one the field takes (its default, a neighbour, a choice),
    else anything at all."""
    current = config_lib.get_field(config_lib.base_config(), field) if field in FIELDS else None
    near: list[st.SearchStrategy[Any]] = []
    if isinstance(current, bool):
        near.append(st.booleans())
    elif isinstance(current, int):
        near += [st.integers(0, 4096), st.just(current)]
    elif isinstance(current, float):
        near += [st.floats(0, 1), st.just(current)]
    elif isinstance(current, str):
        choices = config_lib.CHOICES.get(field)
        near.append(st.sampled_from(sorted(choices)) if choices else st.just(current))
    elif isinstance(current, tuple):
        near.append(st.lists(st.integers(0, 300), max_size=3).map(tuple))
    return st.one_of(*near, ANY_VALUE) if near else ANY_VALUE


@st.composite
def overrides(draw: st.DrawFn, max_fields: int = 4) -> dict[str, Any]:
    """{dotted field: value} of one to ``max_fields`` fields, now and then one that is no
    field at all."""
    fields = draw(st.lists(st.one_of(st.sampled_from(FIELDS), st.sampled_from(NOT_FIELDS)),
                           min_size=1, max_size=max_fields, unique=True))
    return {f: draw(field_value(f)) for f in fields}


# A config of the tables: any variant, dataset and scale.
CONFIG_ARGS = st.tuples(st.sampled_from(sorted(config_lib.VARIANTS)),
                        st.sampled_from(sorted(config_lib.DATASETS)),
                        st.sampled_from(sorted(config_lib.SCALES)))


def json_values(max_leaves: int = 8) -> st.SearchStrategy[Any]:
    """Any JSON value, NaN and infinities included (Python's json reads and writes them)."""
    scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70),
                        st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12))
    return st.recursive(scalars, lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=8), children,
                                                        max_size=4)), max_leaves=max_leaves)


@st.composite
def mutated_json(draw: st.DrawFn, document: Any) -> Any:
    """``document`` (a JSON object) with one to three changes: a value replaced by any JSON
    value, a key removed, a section set to null or a list."""
    doc = json.loads(json.dumps(document))
    for _ in range(draw(st.integers(1, 3))):
        node, keys = doc, []
        while isinstance(node, dict) and node and draw(st.booleans()):
            key = draw(st.sampled_from(sorted(node)))
            keys.append(key)
            if not isinstance(node[key], dict):
                break
            node = node[key]
        if not keys:
            continue
        parent = doc
        for key in keys[:-1]:
            parent = parent[key]
        change = draw(st.sampled_from(["replace", "remove", "null"]))
        if change == "remove":
            del parent[keys[-1]]
        elif change == "null":
            parent[keys[-1]] = None
        else:
            parent[keys[-1]] = draw(json_values())
    return doc


@st.composite
def damaged_bytes(draw: st.DrawFn, document: bytes) -> bytes:
    """``document`` cut short, with bytes flipped or inserted, or replaced by other bytes:
    deeply nested JSON, bytes that are not UTF-8, nothing at all."""
    kind = draw(st.sampled_from(["cut", "flip", "insert", "other", "deep", "empty"]))
    if kind == "cut":
        return document[:draw(st.integers(0, max(0, len(document) - 1)))]
    if kind == "flip" and document:
        i = draw(st.integers(0, len(document) - 1))
        return document[:i] + bytes([document[i] ^ draw(st.integers(1, 255))]) + document[i + 1:]
    if kind == "insert":
        i = draw(st.integers(0, len(document)))
        return document[:i] + draw(st.binary(min_size=1, max_size=8)) + document[i:]
    if kind == "deep":
        depth = draw(st.sampled_from([10, 1000, 100_000]))
        return (b'{"a":' * depth + b"1" + b"}" * depth) if draw(st.booleans()) else \
            (b"[" * depth + b"]" * depth)
    if kind == "empty":
        return b""
    return draw(st.binary(max_size=64))


def json_or_bytes(document: Any) -> st.SearchStrategy[bytes]:
    """A JSON document changed in its values (as text) or in its bytes."""
    return st.one_of(mutated_json(document).map(lambda d: json.dumps(d).encode()),
                     damaged_bytes(json.dumps(document).encode()),
                     json_values().map(lambda d: json.dumps(d).encode()))
