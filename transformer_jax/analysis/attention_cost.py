"""The quadratic bill: what attention's n x n matrices cost in memory, computed and measured.

:func:`quadratic_bill` counts the cells and fp16 bytes of the attention matrices at each
sequence length; :func:`measured_memory` reads what experiments/benchmarks/attention_scaling.py
measured (from the checkout this package lives in, wherever the command runs), or measures
the dense kernel's compiled peak here; :func:`bill_table` sets the two side by side.
visualize.py draws them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

from transformer_jax import config as config_lib, paper
from transformer_jax.errors import DataError, UserError, shown
from transformer_jax.io import storage, strict_json
from transformer_jax.io.storage import human_bytes
from transformer_jax.model import counts, masks
from transformer_jax.model.spec import TransformerConfig
from transformer_jax.model.transformer import dot_product_attention

BILL_LENGTHS = tuple(512 * 2 ** i for i in range(12))  # 512 .. 1,048,576
CHECKOUT = Path(__file__).resolve().parents[2]
MEASURED_FILE = CHECKOUT / "experiments" / "results" / "attention_scaling.json"


def quadratic_bill(lengths: Sequence[int] = BILL_LENGTHS,
                   model_config: TransformerConfig | None = None) -> list[dict[str, int]]:
    """Cells and fp16 bytes of the attention matrices at each sequence length n: one matrix
    (one head, one layer), one layer's heads, and every matrix of a forward pass (the base
    model: 8 heads x 12 layers = 96)."""
    if model_config is None:
        model_config = TransformerConfig.from_config(config_lib.build("base").model,
                                                    paper.VOCAB_SIZE_EN_DE)
    per_forward = counts.attention_matrices_per_forward(model_config)
    return [{"n": n, "cells": n * n, "head_bytes": counts.attention_matrix_bytes(n),
             "layer_bytes": model_config.num_heads * counts.attention_matrix_bytes(n),
             "matrices": per_forward, "model_bytes": per_forward * counts.attention_matrix_bytes(n)}
            for n in lengths]


def measure_dense_attention(lengths: Sequence[int] | None = None, heads: int = 8,
                            d_k: int = 64) -> dict[str, Any]:
    """Peak memory of the project's dense attention (forward, batch 1, float32 as the model
    runs) from XLA's buffer assignment, by default at the lengths whose n x n buffers fit in
    half of the device's memory (host memory on CPU). Same schema as
    experiments/results/attention_scaling.json."""
    stats = jax.devices()[0].memory_stats() or {}
    memory = stats.get("bytes_limit") or os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if lengths is None:  # logits and weights: two float32 [heads, n, n] buffers
        lengths = [n for n in BILL_LENGTHS if 2 * heads * n * n * 4 < memory / 2]
    results = []
    for n in lengths:
        spec = jax.ShapeDtypeStruct((1, heads, n, d_k), jnp.float32)
        seg = jax.ShapeDtypeStruct((1, n), jnp.int32)

        def forward(q, k, v, segment_ids):
            mask = masks.make_mask(segment_ids, segment_ids)
            return dot_product_attention(q, k, v, mask)[0]

        stats = jax.jit(forward).lower(spec, spec, spec, seg).compile().memory_analysis()
        peak = (stats.temp_size_in_bytes + stats.argument_size_in_bytes
                + stats.output_size_in_bytes - stats.alias_size_in_bytes)
        results.append({"kind": "dense", "n": n, "pass": "forward", "time_s": None,
                        "peak_bytes": int(peak), "error": None})
    return {"machine": f"this machine ({human_bytes(memory)} memory)", "date": None,
            "backend": jax.default_backend(), "heads": heads, "d_k": d_k,
            "source": f"XLA memory_analysis of the compiled dense kernel (batch 1, d_k {d_k}, "
                      "float32)", "results": results}


def measured_memory(path: str | os.PathLike | None = None) -> dict[str, Any]:
    """The benchmark's measurements (``path``; by default :data:`MEASURED_FILE`, the
    checkout's experiments/results/attention_scaling.json, when it exists), else this
    machine's compile-time figures. Failed lengths (with an ``error``) are left out.
    DataError naming the file and the field for one that is not such results (read by
    strict_json's rules, each field used of its type)."""
    path = Path(path) if path else MEASURED_FILE
    if storage.not_a_file(path) == "no such file":
        if path != MEASURED_FILE:
            raise UserError(f"{path}: no such attention-scaling result file")
        return measure_dense_attention()
    try:
        data = strict_json.read(path)
    except strict_json.Damaged as e:
        raise DataError(f"{e}; not an attention-scaling result file") from None

    def refuse(field: str, value: Any, wanted: str) -> DataError:
        return DataError(f"{path}: {field}={shown(str(value))[:40]!r} is not {wanted}; not an "
                         "attention-scaling result file")

    if not isinstance(data.get("machine"), str):
        raise refuse("machine", data.get("machine"), "a string")
    if not _count(data.get("heads"), 1):
        raise refuse("heads", data.get("heads"), "a number of heads")
    rows = data.get("results")
    if not isinstance(rows, list):
        raise refuse("results", rows, "a list")
    results = []
    for i, r in enumerate(rows):
        if not isinstance(r, dict):
            raise refuse(f"results[{i}]", r, "an object")
        if r.get("error") or r.get("peak_bytes") is None:
            continue
        for key, ok, wanted in (
                ("kind", isinstance(r.get("kind"), str), "a kernel's name"),
                ("n", _count(r.get("n"), 1), "a length"),
                ("pass", r.get("pass") in ("forward", "backward"), "forward or backward"),
                ("peak_bytes", _count(r.get("peak_bytes")), "a number of bytes"),
                ("measured_bytes", r.get("measured_bytes") is None
                 or _count(r.get("measured_bytes")), "a number of bytes"),
                *((key, r.get(key) is None or _seconds(r.get(key)), "seconds")
                  for key in ("time_s", "cpu_s"))):
            if not ok:
                raise refuse(f"results[{i}].{key}", r.get(key), wanted)
        results.append({**{key: r[key] for key in ("kind", "n", "pass")},
                         "peak_bytes": case_peak(r),
                         **{key: r.get(key) for key in ("time_s", "cpu_s")}})
    return {**data, "results": results, "source": str(path)}


def _count(value: Any, low: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def _seconds(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value >= 0


def case_peak(row: dict[str, Any]) -> int | None:
    """The peak memory of one case of the attention benchmark: the larger of XLA's compiled
    account (``peak_bytes``) and the measured rise of the process (``measured_bytes``, where
    the case ran). A kernel that XLA hands to a fused library call allocates scratch that
    the compiled account does not see: on a CPU the dense forward pass is such a kernel."""
    if row.get("peak_bytes") is None:
        return None
    return max(row["peak_bytes"], row.get("measured_bytes") or 0)


def bill_table(bill: Sequence[dict[str, int]], measured: dict[str, Any]) -> str:
    """The bill as a markdown table, with the measured forward peak of dense attention."""
    peak = {r["n"]: r["peak_bytes"] for r in measured["results"]
            if r["kind"] == "dense" and r["pass"] == "forward"}
    heads = bill[0]["layer_bytes"] // bill[0]["head_bytes"]
    lines = [f"| n | cells n² | one matrix (fp16) | one layer, {heads} heads | "
             f"{bill[0]['matrices']} matrices (base forward) | measured: dense, forward, "
             f"{measured['heads']} heads, peak |", "|---:|---:|---:|---:|---:|---:|"]
    for row in bill:
        n = row["n"]
        lines.append(f"| {n:,} | {row['cells']:,} | {human_bytes(row['head_bytes'])} | "
                     f"{human_bytes(row['layer_bytes'])} | {human_bytes(row['model_bytes'])} | "
                     f"{human_bytes(peak[n]) if n in peak else '-'} |")
    return "\n".join(lines) + "\n"
