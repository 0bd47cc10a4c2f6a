"""Table 3's rows, derived from VARIANTS, and the value of a Table 3 quantity in a config."""

from __future__ import annotations

from typing import Any

import ml_collections

from transformer_jax.config.builder import build
from transformer_jax.config.fields import derived_dims, get_field
from transformer_jax.config.variants import QUANTITIES, VARIANTS


def quantity(c: ml_collections.ConfigDict, name: str) -> Any:
    """The value of a Table 3 quantity (a key of QUANTITIES) in a config; d_k and d_v
    resolved when derived."""
    if name in ("d_k", "d_v"):
        return derived_dims(c.model)[0 if name == "d_k" else 1]
    return get_field(c, QUANTITIES[name][0])


def table3_rows() -> dict[str, tuple[str, list[str]]]:
    """The sweeps of Table 3: {name: (quantity, [variant, ...])}, each row's variants and the
    base model in increasing order of the quantity (the base model first where the values
    are not numbers). Named after the row ("A", "B", "E"), or the row and the quantity's tag
    where a row varies several quantities ("C_N", "C_d", "C_ff", "D_drop", "D_ls")."""
    groups: dict[tuple[str, str], list[str]] = {}
    for name, v in VARIANTS.items():
        if v.row:
            groups.setdefault((v.row, v.quantity), []).append(name)
    rows = {}
    for (row, q), names in groups.items():
        several = len({qq for r, qq in groups if r == row}) > 1
        values = {n: quantity(build(n), q) for n in ["base", *names]}
        order = ["base", *names]
        if all(isinstance(x, int | float) for x in values.values()):
            order.sort(key=values.__getitem__)
        rows[f"{row}_{QUANTITIES[q][1]}" if several else row] = (q, order)
    return rows
