"""A sweep of Table 3's variants beside the paper's Table 3: for each variant, its change in
validation perplexity and test BLEU against the base model next to the paper's own change,
and whether the direction agrees.

Written by ``python -m transformer_jax.compare ROOT`` as ``table3.md`` whenever the sweep's
baseline is the base variant and another of its settings is a variant of Table 3
(``experiments/table3_rows.py``, ``experiments/heads_ablation.py``). The paper's changes
are from :mod:`transformer_jax.paper` (newstest2013, the full-size models on WMT14 EN-DE).

Each change is judged on its own figure:

* **perplexity**: the mean over seeds of the variant's validation perplexity minus the base
  model's, tested by a paired t-test on the seeds' differences (seed s of the variant with
  seed s of the base model: the same data order), two-sided;
* **BLEU**: the pooled test BLEU's difference and its p from sacreBLEU's paired bootstrap
  (:func:`transformer_jax.sweeps.report_settings.significance`).

The verdict: **agrees** when the change is significant (p < 0.05) and has the paper's sign,
**opposite** when it is significant with the other sign, **not significant** otherwise;
where the paper's change is nil at the precision it prints (0.00 PPL, 0.0 BLEU), a change
that is not significant **agrees (none)** and a significant one is **differs**. Perplexity
and BLEU at the demo scale are not comparable with the paper's, only the direction is.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from transformer_jax import config as config_lib, paper
from transformer_jax.sweeps.report_settings import SIGNIFICANCE_LEVEL

AGREES, OPPOSITE, NOT_SIGNIFICANT = "agrees", "opposite", "not significant"
AGREES_NONE, DIFFERS = "agrees (none)", "differs"
# The columns of a run (results.csv) that hold each quantity of Table 3, at the run's scale.
COLUMNS = {"N": "N", "d_model": "d_model", "d_ff": "d_ff", "h": "h", "d_k": "d_k",
           "d_v": "d_v", "P_drop": "P_drop", "eps_ls": "eps_ls", "positions": "positions"}


def applies(sets: Sequence[dict[str, Any]], baseline: dict[str, Any]) -> bool:
    """Whether the sweep compares Table 3's variants with the base model."""
    return baseline.get("variant") == "base" and any(
        e is not baseline and _row_of(e) for e in sets)


def _row_of(entry: dict[str, Any]) -> str:
    variant = entry.get("variant")
    if variant not in config_lib.VARIANTS or variant not in paper.TABLE3:
        return ""
    return config_lib.VARIANTS[variant].row


def verdict(delta: float | None, p: float | None, paper_delta: float, precision: float) -> str:
    """How a change of ``delta`` (p-value ``p``) stands against the paper's ``paper_delta``,
    printed to ``precision``."""
    if delta is None or p is None or math.isnan(p):
        return "-"
    significant = p < SIGNIFICANCE_LEVEL
    if abs(paper_delta) < precision / 2:
        return DIFFERS if significant else AGREES_NONE
    if not significant:
        return NOT_SIGNIFICANT
    return AGREES if (delta > 0) == (paper_delta > 0) else OPPOSITE


def paired_ppl(entry: dict[str, Any], baseline: dict[str, Any]) -> tuple[float, float, int] | None:
    """(mean difference of validation perplexity, two-sided p of a paired t-test, seeds) of
    the finished runs of ``entry`` and the baseline that share a seed; None below two."""
    from scipy import stats

    def by_seed(e: dict[str, Any]) -> dict[Any, float]:
        return {r["seed"]: r["dev_ppl"] for r in e["runs"]
                if r["kind"] == "finished" and r.get("dev_ppl") is not None}

    mine, base = by_seed(entry), by_seed(baseline)
    seeds = sorted(s for s in mine if s in base)
    if len(seeds) < 2:
        return None
    diffs = [mine[s] - base[s] for s in seeds]
    mean = sum(diffs) / len(diffs)
    if all(d == diffs[0] for d in diffs):
        return mean, (0.0 if mean else 1.0), len(seeds)
    return mean, float(stats.ttest_rel([mine[s] for s in seeds],
                                       [base[s] for s in seeds]).pvalue), len(seeds)


def _change(entry: dict[str, Any], baseline: dict[str, Any]) -> str:
    """What the variant changes, at the runs' scale: "h 8 -> 1 (d_k 16 -> 128)"."""
    quantity = config_lib.VARIANTS[entry["variant"]].quantity
    shown = [quantity] + (["d_k"] if quantity in ("h", "d_model") else [])
    parts = []
    for q in shown:
        old, new = baseline["runs"][0].get(COLUMNS[q]), entry["runs"][0].get(COLUMNS[q])
        if old != new:
            parts.append(f"{q} {_plain(old)} -> {_plain(new)}")
    return parts[0] + (f" ({', '.join(parts[1:])})" if parts[1:] else "") if parts else "-"


def _plain(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def rows(sets: Sequence[dict[str, Any]], baseline: dict[str, Any],
         tests: Mapping[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row a Table 3 variant of the sweep, in the order of the variant table."""
    base_ppl, base_bleu = paper.TABLE3["base"][:2]
    order = list(config_lib.VARIANTS)
    out = []
    for entry in sorted((e for e in sets if e is not baseline and _row_of(e)),
                        key=lambda e: order.index(e["variant"])):
        ppl, bleu_ = paper.TABLE3[entry["variant"]][:2]
        paired = paired_ppl(entry, baseline)
        test = tests.get(entry["setting"], {})
        row = {"row": _row_of(entry), "setting": entry["setting"], "variant": entry["variant"],
               "change": _change(entry, baseline), "n": entry["n"],
               "ppl_delta": paired[0] if paired else None,
               "ppl_p": paired[1] if paired else None,
               "bleu_delta": test.get("delta"), "bleu_p": test.get("p"),
               "paper_ppl_delta": round(ppl - base_ppl, 2),
               "paper_bleu_delta": round(bleu_ - base_bleu, 1)}
        row["ppl_verdict"] = verdict(row["ppl_delta"], row["ppl_p"], row["paper_ppl_delta"],
                                     0.01)
        row["bleu_verdict"] = verdict(row["bleu_delta"], row["bleu_p"],
                                      row["paper_bleu_delta"], 0.1)
        out.append(row)
    return out


def _signed(x: float | None, digits: int) -> str:
    return "-" if x is None else f"{x:+.{digits}f}"


def _p(p: float | None) -> str:
    return "" if p is None or math.isnan(p) else f" (p = {p:.3f})"


def markdown(definition: Mapping[str, Any], table: Sequence[dict[str, Any]],
             baseline: dict[str, Any], cpu_minutes: float | None) -> str:
    """table3.md: the variants' changes beside the paper's, and the tally of verdicts."""
    ppl, bleu_ = baseline.get("dev_ppl"), baseline.get("test_bleu")
    lines = [f"# {definition.get('name', 'sweep')}: Table 3 beside the paper", ""]
    scale = definition.get("scale", "paper")
    lines.append(f"Each variant against the base model (**{baseline['setting']}**: validation "
                 f"PPL {_mean(ppl, 2)}, test BLEU {_mean(bleu_, 1)}, {baseline['n']} seeds) "
                 f"at the {scale} scale, beside the paper's change against its base model "
                 "(Table 3, newstest2013: PPL 4.92, BLEU 25.8)."
                 + (f" The sweep's runs took {cpu_minutes:,.0f} CPU-minutes."
                    if cpu_minutes else ""))
    lines += ["", "| row | variant | change | n | Δ PPL | paper | PPL | Δ BLEU | paper | BLEU |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in table:
        lines.append(
            f"| {r['row']} | {r['variant']} | {r['change']} | {r['n']} | "
            f"{_signed(r['ppl_delta'], 3)}{_p(r['ppl_p'])} | {r['paper_ppl_delta']:+.2f} | "
            f"{r['ppl_verdict']} | {_signed(r['bleu_delta'], 1)}{_p(r['bleu_p'])} | "
            f"{r['paper_bleu_delta']:+.1f} | {r['bleu_verdict']} |")
    lines += ["", "Direction against the paper (of the variants with a verdict):", ""]
    for figure in ("ppl", "bleu"):
        counts: dict[str, int] = {}
        for r in table:
            counts[r[f"{figure}_verdict"]] = counts.get(r[f"{figure}_verdict"], 0) + 1
        tally = ", ".join(f"{v} {counts[v]}" for v in (AGREES, AGREES_NONE, NOT_SIGNIFICANT,
                                                       OPPOSITE, DIFFERS) if v in counts)
        lines.append(f"- {'perplexity' if figure == 'ppl' else 'BLEU'}: {tally or 'none'}")
    lines += ["", "Notes:", "",
              "- Δ PPL: the mean over seeds of the variant's validation perplexity minus the "
              "base model's; p from a paired t-test on the seeds' differences (seed s with "
              "seed s, the same data order), two-sided.",
              "- Δ BLEU: the pooled test BLEU's difference (every paired seed's translations "
              "as one test set); p from sacreBLEU's paired bootstrap (results.md).",
              "- agrees / opposite: significant (p < 0.05) with the paper's sign / the other "
              "sign; not significant: p >= 0.05; where the paper's change is nil at its "
              "precision (0.00, 0.0), agrees (none) if not significant, differs if it is.",
              "- Lower perplexity is better, higher BLEU is better. Only directions compare "
              "across scales and corpora."]
    return "\n".join(lines) + "\n"


def _mean(summary: tuple[float, float | None, int] | None, digits: int) -> str:
    if not summary:
        return "-"
    mean, std, _ = summary
    return f"{mean:.{digits}f}" + (f" ± {std:.{digits}f}" if std is not None else "")
