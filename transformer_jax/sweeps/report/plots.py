"""The pictures of a sweep's report (python -m transformer_jax.compare): every run's training
loss, and the validation figures of each setting, with their spread over seeds, against the
swept value beside the paper's."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

from matplotlib.figure import Figure

from transformer_jax.io import storage


def plot_losses(definition: dict[str, Any], rows: Sequence[dict[str, Any]],
                path: storage.Path) -> None:
    """Every run's training loss against the step, on one chart: one colour a setting."""
    fig = Figure(figsize=(7.5, 4.6), layout="constrained")
    ax = fig.add_subplot()
    colours: dict[str, str] = {}
    for row in rows:
        if not row["curve"]:
            continue
        first = row["setting"] not in colours
        colour = colours.setdefault(row["setting"], f"C{len(colours) % 10}")
        steps, losses = zip(*row["curve"], strict=True)
        style = "-" if row["kind"] == "finished" else "--"
        ax.plot(steps, losses, style, color=colour, lw=1, alpha=0.8,
                label=row["setting"] if first else None)
    missing = [row["point"] + ("" if row["kind"] == "missing" else f" ({row['kind']})")
               for row in rows if not row["curve"]]
    ax.set(xlabel="step", ylabel="training loss (label-smoothed, per token)",
           title=f"{definition.get('name', '')}: training loss")
    ax.grid(True, alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=8)
    if missing:
        note = textwrap.fill("no curve: " + ", ".join(missing), 60)
        ax.text(0.99, 0.99, note, transform=ax.transAxes, ha="right", va="top", fontsize=8,
                color="tab:red", in_layout=False)
    storage.write_figure(fig, path, dpi=120)


def _positions(values: Sequence[Any]) -> tuple[list[float], dict[str, Any]]:
    """x positions of the swept values: numbers as they are (log2 for wide positive ranges,
    e.g. heads), anything else in order."""
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
    if numeric and values and len(set(values)) == len(values):
        if min(values) > 0 and max(values) / min(values) >= 8:
            return [float(v) for v in values], {"xscale": "log", "base": 2}
        return [float(v) for v in values], {}
    return list(range(len(values))), {"labels": [str(v) for v in values]}


def plot_against_value(definition: dict[str, Any], sets: Sequence[dict[str, Any]],
                       path: storage.Path) -> Figure:
    """Validation perplexity and BLEU against the swept value: each setting's mean over its
    finished seeds with a ±1 std bar and every seed's own point (left axis), and the paper's
    (right axis, its own scale); settings with no finished run are marked. Returns the
    figure written."""
    parameter = definition.get("parameter", "value")
    values = [e["value"] for e in sets]
    xs, axis = _positions(values)
    if "labels" in axis and len(set(map(str, values))) != len(values):
        axis["labels"] = [e["setting"] for e in sets]
    bleu_key = "dev_bleu" if any(e["dev_bleu"] for e in sets) else "test_bleu"
    panels = [("dev_ppl", "paper_ppl", "validation perplexity"),
              (bleu_key, "paper_bleu", "validation BLEU" if bleu_key == "dev_bleu"
               else "test BLEU (no validation BLEU logged)")]
    fig = Figure(figsize=(max(11.0, 0.6 * len(sets)), 4.8), layout="constrained")
    width = (max(xs) - min(xs)) / 80 if len(xs) > 1 and not axis.get("xscale") else 0.0
    for i, (ours, theirs, title) in enumerate(panels):
        ax = fig.add_subplot(1, 2, i + 1)
        twin = ax.twinx()
        summary = [(x, e[ours]) for x, e in zip(xs, sets, strict=True) if e[ours]]
        if summary:
            sx = [x for x, _ in summary]
            means = [m for _, (m, _, _) in summary]
            stds = [sd or 0.0 for _, (_, sd, _) in summary]
            ax.errorbar(sx, means, yerr=stds, fmt="o-", color="tab:blue", capsize=4,
                        label="ours: mean ± std over seeds")
        seeds = [(x * (1.03 ** (j - 1)) if axis.get("xscale") else x + width * (j - 1),
                  r[ours]) for x, e in zip(xs, sets, strict=True)
                 for j, r in enumerate(e["runs"]) if r["kind"] == "finished" and r[ours]]
        if seeds:
            ax.plot(*zip(*seeds, strict=True), ".", color="tab:blue", alpha=0.45, ms=6,
                    label="ours: each seed")
        ref = [(x, e[theirs]) for x, e in zip(xs, sets, strict=True) if e[theirs] is not None]
        if ref:
            twin.plot(*zip(*ref, strict=True), "s--", color="tab:orange", mfc="none",
                      label="paper (Table 3)")
        for x, e in zip(xs, sets, strict=True):
            if not e[ours]:
                kinds = sorted({r["kind"] for r in e["runs"]})
                ax.axvline(x, color="tab:red", ls=":", lw=1)
                ax.annotate("/".join(kinds), (x, 0.02), xycoords=("data", "axes fraction"),
                            rotation=90, color="tab:red", fontsize=8, ha="right",
                            in_layout=False)
        if axis.get("xscale"):
            ax.set_xscale("log", base=axis["base"])
            ax.set_xticks(xs, [str(v) for v in values])
        elif "labels" in axis:
            ax.set_xticks(xs, axis["labels"], rotation=45 if len(xs) > 4 else 0,
                          ha="right" if len(xs) > 4 else "center")
        ax.set(xlabel=parameter, ylabel=f"ours: {title}", title=title)
        twin.set_ylabel("paper", color="tab:orange")
        ax.grid(True, alpha=0.3)
        handles = [h for h in ax.get_legend_handles_labels()[0]] + twin.get_lines()[:1]
        if handles:
            ax.legend(handles, [h.get_label() for h in handles], fontsize=8, loc="best")
    fig.suptitle(f"{definition.get('name', '')}: against {parameter}")
    storage.write_figure(fig, path, dpi=120)
    return fig
