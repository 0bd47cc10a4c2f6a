"""A sweep's runs as settings, and which of their differences are real: the runs that differ
only in their seed grouped, each summarised figure's mean ± std over the finished seeds, the
baseline chosen, and each setting's test BLEU against the baseline's by paired bootstrap
(seeds paired, translations pooled). The comparison report (report.py), its Table 3 verdicts
(report_table3.py) and BLEU by length (report_lengths.py) read them."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from transformer_jax.errors import UserError
from transformer_jax.sweeps import report_metrics

SIGNIFICANCE_LEVEL = 0.05


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
    (report_metrics) over its finished runs."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(row["setting"], []).append(row)
    out = []
    for name, runs in groups.items():
        done = [r for r in runs if r["kind"] == "finished"]
        entry = {"setting": name, "runs": runs, "n": len(done), **{
            k: runs[0].get(k) for k in ("value", "variant", "paper_ppl", "paper_bleu",
                                        "paper_params_m", "N", "d_model", "d_ff", "h", "d_k")}}
        for m in report_metrics.summarised():
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


def _by_seed(entry: dict[str, Any]) -> dict[Any, tuple[list[str], list[str]]]:
    return {r["seed"]: r["translations"] for r in entry["runs"] if r["translations"]}


def significance(sets: Sequence[dict[str, Any]], baseline: dict[str, Any],
                 n_samples: int = 1000) -> dict[str, dict[str, Any]]:
    """Each setting's test BLEU against the baseline's: {setting: result}.

    Runs are paired by seed (seed s of the setting with seed s of the baseline: both were
    trained on the same data order, initialised alike where the shapes allow). The
    translations of all paired seeds are pooled into one test set of seeds x sentences, on
    which sacreBLEU's paired bootstrap gives ``p``; ``significant`` is p < 0.05. Pooling
    resamples the sentences of every seed's run, so it measures whether the setting is
    better across the seeds' runs on these sentences; the spread between seeds themselves is
    the table's std, and ``seed_wins`` counts the seeds on which the setting's BLEU is above
    the baseline's (a difference that holds on every seed is the one to believe).
    """
    from transformer_jax.evaluation import bleu

    base = _by_seed(baseline)
    out: dict[str, dict[str, Any]] = {}
    for entry in sets:
        if entry is baseline:
            continue
        mine = _by_seed(entry)
        seeds = [s for s in base if s in mine]
        if not seeds:
            out[entry["setting"]] = {"note": "no test translations to pair with the baseline's"}
            continue
        if any(mine[s][1] != base[s][1] for s in seeds):
            out[entry["setting"]] = {"note": "translated other test sentences than the baseline"}
            continue
        pooled = bleu.paired_bootstrap(
            [("baseline", [h for s in seeds for h in base[s][0]]),
             ("system", [h for s in seeds for h in mine[s][0]])],
            [r for s in seeds for r in base[s][1]], n_samples)
        wins = sum(bleu.bleu(mine[s][0], mine[s][1])[0] >
                   bleu.bleu(base[s][0], base[s][1])[0] for s in seeds)
        p = pooled["system"][1]
        out[entry["setting"]] = {
            "delta": pooled["system"][0] - pooled["baseline"][0], "p": p,
            "significant": p < SIGNIFICANCE_LEVEL, "seeds": len(seeds), "seed_wins": wins,
            "sentences": len(base[seeds[0]][1])}
    return out
