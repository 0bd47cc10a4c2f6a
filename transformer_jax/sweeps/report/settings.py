"""A sweep's runs as settings, and which of their differences are real: the runs that differ
only in their seed grouped, each summarised figure's mean ± std over the finished seeds, the
baseline chosen, and each setting against the baseline on validation perplexity, test BLEU
and test chrF with the training run as the unit (evaluation/significance.py). The
comparison report (build.py), its Table 3 verdicts (table3.py) and BLEU by length
(lengths.py) read them."""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence
from typing import Any

import numpy as np

from transformer_jax.errors import UserError
from transformer_jax.evaluation import sentence_stats, significance
from transformer_jax.sweeps.report import metrics

SIGNIFICANCE_LEVEL = significance.ALPHA


def mean_std(values: Sequence[float]) -> tuple[float, float | None, int] | None:
    """(mean, sample standard deviation or None for one value, n) of ``values``; None for
    none."""
    if not values:
        return None
    return (statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else None,
            len(values))


def settings(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs grouped by setting (runs that differ only in their seed), in order of first
    appearance: each with its runs, and mean, std and n of each summarised metric
    (metrics/) over its finished runs."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(row["setting"], []).append(row)
    out = []
    for name, runs in groups.items():
        done = [r for r in runs if r["kind"] == "finished"]
        entry = {"setting": name, "runs": runs, "n": len(done), **{
            k: runs[0].get(k) for k in ("value", "variant", "paper_ppl", "paper_bleu",
                                        "paper_params_m", "N", "d_model", "d_ff", "h", "d_k")}}
        for m in metrics.summarised():
            entry[m.name] = mean_std([r[m.name] for r in done if r[m.name] is not None])
        out.append(entry)
    return out


def choose_baseline(sets: Sequence[dict[str, Any]], name: str | None = None) -> dict[str, Any]:
    """The setting others are tested against: ``name``, else the base variant's only
    setting, else the first; UserError naming the known settings for an unknown ``name``."""
    if name:
        for entry in sets:
            if entry["setting"] == name:
                return entry
        raise UserError(f"--baseline={name} is not a setting of this sweep; settings: "
                        + ", ".join(e["setting"] for e in sets))
    base = [e for e in sets if e["variant"] == "base"]
    return base[0] if len(base) == 1 else sets[0]


# The figures every setting is compared on, in order: (sentence statistics' figure, heading).
FIGURES = ((sentence_stats.PPL, "dev PPL"), (sentence_stats.BLEU, "test BLEU"),
           (sentence_stats.CHRF, "test chrF"))


def _side(entry: dict[str, Any], figure: str
          ) -> tuple[list[Any], list[np.ndarray], bool]:
    """(seeds, [S, K] statistics, whether they are sentence statistics) of the finished runs
    of ``entry`` that have ``figure``: their sentence statistics, or, where a run of the
    setting did not keep them (runs trained before they were written), each run's figure
    alone as one "sentence" (the test set's share then unknown)."""
    done = [r for r in entry["runs"] if r["kind"] == "finished"]
    have = [(r["seed"], sentence_stats.statistics(r.get("sentence_stats"), figure))
            for r in done]
    have = [(seed, stats) for seed, stats in have if stats is not None]
    values = [(r["seed"], r.get(figure)) for r in done if r.get(figure) is not None]
    if have and len(have) >= len(values):
        return [s for s, _ in have], [x for _, x in have], True
    # Some runs without sentence statistics: every run by its figure alone.
    return [s for s, _ in values], [_as_stats(figure, v) for _, v in values], False


def _as_stats(figure: str, value: float) -> np.ndarray:
    """One run's figure as the [1, K] statistics that score to it."""
    if figure == sentence_stats.PPL:
        return np.array([[math.log(value), 1.0]])
    return np.array([[value]])


def _score(figure: str, sentences: bool) -> Any:
    if sentences:
        return sentence_stats.SCORES[figure][1]
    return sentence_stats.ppl_score if figure == sentence_stats.PPL else \
        (lambda stats: np.asarray(stats, np.float64)[..., 0])


def comparisons(sets: Sequence[dict[str, Any]], baseline: dict[str, Any]
                ) -> dict[str, dict[str, significance.Comparison]]:
    """Each setting against the baseline on each of FIGURES: {setting: {figure:
    Comparison}}, by :mod:`transformer_jax.evaluation.significance` (the training run the
    unit, both variance components), adjusted together (Holm) as one report's family.

    Seeds shared by both sides pair the runs (seed s with seed s: the same data order and
    initialisation); disjoint seeds compare unpaired. Runs that translated different numbers
    of test sentences are compared on the first sentences all of them translated (every run
    translates the test split from its start)."""
    raw: list[tuple[str, str, significance.Comparison]] = []
    for entry in sets:
        if entry is baseline:
            continue
        for figure, _ in FIGURES:
            seeds_a, a, kept_a = _side(entry, figure)
            seeds_b, b, kept_b = _side(baseline, figure)
            if not a or not b:
                continue
            sentences = kept_a and kept_b
            if not sentences:  # one side without sentence statistics: run-level figures
                seeds_a, a, _ = _side(_without_stats(entry), figure)
                seeds_b, b, _ = _side(_without_stats(baseline), figure)
                if not a or not b:
                    continue
            common = min(len(x) for x in a + b)
            c = significance.compare(np.stack([x[:common] for x in a]),
                                     np.stack([x[:common] for x in b]),
                                     _score(figure, sentences), seeds_a, seeds_b)
            if not sentences:  # marks it compared between runs only (between_runs_only)
                c = dataclasses.replace(c, sentences=0)
            raw.append((entry["setting"], figure, c))
    adjusted = significance.adjust([c for _, _, c in raw])
    out: dict[str, dict[str, significance.Comparison]] = {}
    for (setting, figure, _), c in zip(raw, adjusted, strict=True):
        out.setdefault(setting, {})[figure] = c
    return out


RUN_LEVEL_ONLY = "between runs only: these runs kept no sentence statistics"


def between_runs_only(c: significance.Comparison) -> bool:
    """Whether ``c`` compared each run's figure alone (a side kept no sentence statistics),
    so that the test set's share of its variance is unknown."""
    return c.sentences == 0


def _without_stats(entry: dict[str, Any]) -> dict[str, Any]:
    return {**entry, "runs": [{**r, "sentence_stats": None} for r in entry["runs"]]}


def family_size(tests: dict[str, dict[str, significance.Comparison]]) -> int:
    """m: the comparisons of a report that have a p."""
    return sum(c.judged for by_figure in tests.values() for c in by_figure.values())


def bleu_test(entry: dict[str, Any], baseline: dict[str, Any]) -> dict[str, Any]:
    """One setting's test BLEU against a baseline as a plain record (the comparisons of
    :func:`comparisons` between the two alone, Holm across their figures): delta, low, high
    (the interval), p, p_adjusted, significant, n_a, n_b, paired, se_run, se_test; {} when
    either has no finished run with test BLEU."""
    c = comparisons([baseline, entry], baseline).get(entry["setting"], {}).get(
        sentence_stats.BLEU)
    return dataclasses.asdict(c) if c is not None else {}


def bleu_test_text(test: dict[str, Any]) -> str:
    """"Δ +1.23 [-0.50, +2.96], p Holm 0.210 (3 / 3 runs, paired)" of :func:`bleu_test`."""
    if not test or test.get("p") is None:
        return "no test (" + (test.get("note") or "no runs") + ")"
    return (f"Δ {test['delta']:+.2f} [{test['low']:+.2f}, {test['high']:+.2f}], p Holm "
            f"{test['p_adjusted']:.3f} ({test['n_a']} / {test['n_b']} runs, "
            f"{'paired' if test['paired'] else 'unpaired'})")
