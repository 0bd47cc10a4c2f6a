"""Test BLEU by source length: each setting's BLEU in buckets of source length, with the
report's run-level comparison against the baseline within each bucket, and a plot of BLEU
against length (as Bahdanau et al. plot theirs).

    python -m transformer_jax.compare runs/extrapolation --by_length=16,24,32,40,48

``--by_length`` gives the buckets' upper edges in words of the source (its whitespace-
separated pieces, as stored): 1-16, 17-24, ..., 41-48; longer sources are left out. The
sources are the test split's first sentences, read through the dataset of the sweep's
points (every point of a sweep translates the same ones). Writes ``bleu_by_length.md``,
``bleu_by_length.csv`` and ``bleu_by_length.png`` beside the report.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ml_collections
import numpy as np
from matplotlib.figure import Figure

from transformer_jax.errors import UserError
from transformer_jax.evaluation import sentence_stats, significance
from transformer_jax.io import storage
from transformer_jax.sweeps.report.settings import SIGNIFICANCE_LEVEL, mean_std
from transformer_jax.sweeps.report.verdicts import p_text

Bucket = tuple[int, int]


def parse_edges(text: str) -> list[Bucket]:
    """"16,24,32" -> [(1, 16), (17, 24), (25, 32)]; UserError naming the flag unless the
    edges are increasing whole numbers >= 1."""
    try:
        edges = [int(x) for x in text.split(",")]
    except ValueError:
        edges = []
    if not edges or edges[0] < 1 or any(b <= a for a, b in zip(edges, edges[1:], strict=False)):
        raise UserError(f"--by_length={text}: give increasing source lengths in words, the "
                        "buckets' upper edges, e.g. --by_length=16,24,32")
    return [(low + 1, high) for low, high in zip([0, *edges], edges, strict=False)]


def words(sentence: str) -> int:
    """A source's length in words: its whitespace-separated pieces."""
    return len(sentence.split())


def test_sources(points: Sequence[dict[str, Any]], count: int) -> list[str]:
    """The first ``count`` sources of the test split of the sweep's points' dataset."""
    from transformer_jax.data import sources

    config = next((p["config"] for p in points if p.get("config")), None)
    if config is None:
        raise UserError("--by_length needs the points' configs in sweep.json (a sweep run by "
                        "python -m transformer_jax.sweep)")
    test = sources.get_source(ml_collections.ConfigDict(config["data"]), "test")
    return [test[i][0] for i in range(min(count, len(test)))]


def _bleu_stats(entry: dict[str, Any], keep: Sequence[int]
                ) -> tuple[list[Any], list[np.ndarray]]:
    """(seeds, [len(keep), 10] BLEU statistics) of the setting's finished runs that have
    them, cut down to the sentences ``keep``."""
    out = [(run["seed"], sentence_stats.statistics(run.get("sentence_stats"),
                                                   sentence_stats.BLEU))
           for run in entry["runs"] if run["kind"] == "finished"]
    return [s for s, x in out if x is not None], [x[keep] for _, x in out if x is not None]


def by_length(sets: Sequence[dict[str, Any]], baseline: dict[str, Any],
              sources: Sequence[str], buckets: Sequence[Bucket]) -> list[dict[str, Any]]:
    """One row per (setting, bucket): its sentences, the BLEU of each seed's run on them with
    their mean ± std (``bleu``), the 13a tokens of the translations over the references'
    (mean ± std, ``length_ratio``), and the setting against the baseline within the bucket
    (``test``: a significance.Comparison of test BLEU, None for the baseline), every
    bucket's comparisons adjusted together (Holm)."""
    out = []
    raw = []
    for low, high in buckets:
        keep = [i for i, s in enumerate(sources) if low <= words(s) <= high]
        base_seeds, base_stats = _bleu_stats(baseline, keep)
        for entry in sets:
            seeds, runs = _bleu_stats(entry, keep)
            scores = [float(sentence_stats.bleu_score(x.sum(axis=0))) for x in runs]
            # Output tokens over reference tokens: below 1, translations stop short.
            ratios = [float(x[:, 0].sum() / max(x[:, 1].sum(), 1)) for x in runs]
            row = {"setting": entry["setting"], "bucket": (low, high),
                   "sentences": len(keep), "seeds": scores,
                   "bleu": mean_std(scores) if keep else None,
                   "length_ratio": mean_std(ratios) if keep else None, "test": None}
            if entry is not baseline and keep and runs and base_stats:
                raw.append((row, significance.compare(
                    np.stack(runs), np.stack(base_stats), sentence_stats.bleu_score, seeds,
                    base_seeds)))
            out.append(row)
    for (row, _), c in zip(raw, significance.adjust([c for _, c in raw]), strict=True):
        row["test"] = c
    return out


def markdown(definition: dict[str, Any], rows: Sequence[dict[str, Any]],
             baseline: dict[str, Any]) -> str:
    """The table: a row per setting, a column per bucket, each cell BLEU mean ± std over the
    seeds and, beside the baseline's, Δ and p of the pooled paired test."""
    buckets = list(dict.fromkeys(r["bucket"] for r in rows))
    counts = {r["bucket"]: r["sentences"] for r in rows}
    lines = [f"# {definition.get('name', 'sweep')}: test BLEU by source length", "",
             "Test BLEU (sacreBLEU) of the sentences whose source has the bucket's length in "
             "words, mean ± std over the seeds; Δ and Holm's p against the baseline "
             f"**{baseline['setting']}** within the bucket, the training run the unit "
             "(the report's statistics, transformer_jax/evaluation/significance.py, adjusted "
             f"across every bucket and setting; **bold** when below {SIGNIFICANCE_LEVEL}).",
             ""]
    header = ["setting", *(f"{lo}-{hi} words ({counts[(lo, hi)]})" for lo, hi in buckets)]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for setting in dict.fromkeys(r["setting"] for r in rows):
        cells = [setting]
        for bucket in buckets:
            r = next(x for x in rows if x["setting"] == setting and x["bucket"] == bucket)
            cell = "-" if not r["bleu"] else f"{r['bleu'][0]:.1f}" + (
                "" if r["bleu"][1] is None else f" ± {r['bleu'][1]:.1f}")
            t = r["test"]
            if t is not None and t.judged:
                verdict = f"Δ {t.delta:+.1f}, p {p_text(t.p_adjusted)}"
                cell += f" ({'**' + verdict + '**' if t.significant else verdict})"
            cells.append(cell)
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Tokens of the translations over tokens of the references in each bucket "
              "(sacreBLEU's 13a tokens), "
              "mean over the seeds (below 1: translations stop short):", "",
              "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for setting in dict.fromkeys(r["setting"] for r in rows):
        ratios = [next(x for x in rows if x["setting"] == setting and x["bucket"] == b)
                  ["length_ratio"] for b in buckets]
        lines.append("| " + " | ".join([setting, *("-" if not r else f"{r[0]:.2f}"
                                                   for r in ratios)]) + " |")
    return "\n".join(lines) + "\n"


def plot(definition: dict[str, Any], rows: Sequence[dict[str, Any]],
         path: storage.Path) -> Figure:
    """BLEU against source length, a line per setting: each bucket's mean ± std at the
    bucket's middle, and every seed's own point."""
    fig = Figure(figsize=(8.5, 5), layout="constrained")
    ax = fig.subplots()
    buckets = list(dict.fromkeys(r["bucket"] for r in rows))
    middles = [(lo + hi) / 2 for lo, hi in buckets]
    for setting in dict.fromkeys(r["setting"] for r in rows):
        mine = [next(r for r in rows if r["setting"] == setting and r["bucket"] == b)
                for b in buckets]
        shown = [(x, r["bleu"]) for x, r in zip(middles, mine, strict=True) if r["bleu"]]
        if not shown:
            continue
        line = ax.errorbar([x for x, _ in shown], [m for _, (m, _, _) in shown],
                           yerr=[s or 0.0 for _, (_, s, _) in shown], fmt="o-", capsize=3,
                           label=setting)
        seeds = [(x, s) for x, r in zip(middles, mine, strict=True) for s in r["seeds"]]
        ax.plot(*zip(*seeds, strict=True), ".", color=line[0].get_color(), alpha=0.4)
    ax.set_xticks(middles, [f"{lo}-{hi}" for lo, hi in buckets])
    ax.set(xlabel="source length (words)", ylabel="test BLEU",
           title=f"{definition.get('name', '')}: test BLEU against source length")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    storage.write_figure(fig, path, dpi=120)
    return fig


def write(out: storage.Path, definition: dict[str, Any], points: Sequence[dict[str, Any]],
          sets: Sequence[dict[str, Any]], baseline: dict[str, Any], edges: str,
          sources: Sequence[str] | None = None) -> dict[str, storage.Path]:
    """The three files of the module docstring in ``out``; ``sources`` default to the test
    split's (:func:`test_sources`)."""
    buckets = parse_edges(edges)
    counts = [len(x) for e in sets for r in e["runs"]
              if (x := sentence_stats.statistics(r.get("sentence_stats"),
                                                 sentence_stats.BLEU)) is not None]
    if not counts:
        raise UserError("--by_length: no run of this sweep has test translations")
    if sources is None:
        sources = test_sources(points, max(counts))
    rows = by_length(sets, baseline, sources, buckets)
    paths = {"by_length_markdown": out / "bleu_by_length.md",
             "by_length_csv": out / "bleu_by_length.csv",
             "by_length_plot": out / "bleu_by_length.png"}
    storage.write_atomically(paths["by_length_markdown"], markdown(definition, rows, baseline))
    storage.write_csv(paths["by_length_csv"],
                      ["setting", "bucket", "sentences", "bleu_mean", "bleu_std", "seeds",
                       "length_ratio", "delta", "p", "p_holm", "significant"],
                      ({"setting": r["setting"], "bucket": f"{r['bucket'][0]}-{r['bucket'][1]}",
                        "sentences": r["sentences"],
                        "bleu_mean": "" if not r["bleu"] else round(r["bleu"][0], 2),
                        "bleu_std": "" if not r["bleu"] or r["bleu"][1] is None
                        else round(r["bleu"][1], 2),
                        "seeds": " ".join(f"{s:.2f}" for s in r["seeds"]),
                        "length_ratio": "" if not r["length_ratio"]
                        else round(r["length_ratio"][0], 3),
                        "delta": "" if not _judged(r) else round(r["test"].delta, 2),
                        "p": "" if not _judged(r) else round(r["test"].p, 4),
                        "p_holm": "" if not _judged(r) else round(r["test"].p_adjusted, 4),
                        "significant": "" if not _judged(r) else r["test"].significant}
                       for r in rows))
    plot(definition, rows, paths["by_length_plot"])
    return paths


def _judged(row: dict[str, Any]) -> bool:
    return row["test"] is not None and row["test"].judged
