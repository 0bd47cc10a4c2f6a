"""A sweep of Table 3's variants beside the paper's Table 3: for each variant, its change in
validation perplexity and test BLEU against the base model next to the paper's own change,
and whether the direction agrees.

Written by ``python -m transformer_jax.compare ROOT`` as ``table3.md`` whenever the sweep's
baseline is the base variant and another of its settings is a variant of Table 3
(``experiments/table3_rows.py``, ``experiments/heads_ablation.py``). The paper's changes
are from :mod:`transformer_jax.paper` (newstest2013, the full-size models on WMT14 EN-DE).

Each change is judged on its own figure:

* **perplexity**: the mean over runs of the variant's validation perplexity minus the base
  model's;
* **BLEU**: the same of test BLEU;

each with its interval and Holm-adjusted p from
:func:`transformer_jax.sweeps.report.settings.comparisons` (the training run the unit, the
between-run and test-set variance both counted).

The verdict: **agrees** when the change is significant (Holm's p < 0.05) and has the paper's sign,
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
from transformer_jax.evaluation import sentence_stats, significance
from transformer_jax.sweeps.report import verdicts as report_verdicts
from transformer_jax.sweeps.report.settings import SIGNIFICANCE_LEVEL

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
        test = tests.get(entry["setting"], {})
        row = {"row": _row_of(entry), "setting": entry["setting"], "variant": entry["variant"],
               "change": _change(entry, baseline), "n": entry["n"],
               "paper_ppl_delta": round(ppl - base_ppl, 2),
               "paper_bleu_delta": round(bleu_ - base_bleu, 1)}
        for figure, key, precision in ((sentence_stats.PPL, "ppl", 0.01),
                                       (sentence_stats.BLEU, "bleu", 0.1)):
            c = test.get(figure)
            row[key] = c
            row[f"{key}_verdict"] = verdict(c.delta if c else None,
                                            c.p_adjusted if c else None,
                                            row[f"paper_{key}_delta"], precision)
        out.append(row)
    return out


def _cell(c: significance.Comparison | None, digits: int) -> str:
    """Δ [interval] (p Holm) of one comparison."""
    if c is None:
        return "-"
    if not c.judged:
        return f"{c.delta:+.{digits}f} (no test: {c.n_a} / {c.n_b} runs)"
    return (f"{c.delta:+.{digits}f} [{c.low:+.{digits}f}, {c.high:+.{digits}f}] "
            f"(p Holm {report_verdicts.p_text(c.p_adjusted)})")


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
            f"{_cell(r['ppl'], 3)} | {r['paper_ppl_delta']:+.2f} | "
            f"{r['ppl_verdict']} | {_cell(r['bleu'], 1)} | "
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
              "- Δ PPL, Δ BLEU: the variant's mean over its runs minus the base model's "
              "(validation perplexity, test BLEU), the interval and Holm's p as in "
              "results.md's \"Against the baseline\": the training run the unit, the "
              "spread between runs and the test set's both in the interval "
              "(transformer_jax/evaluation/significance.py), Holm across every comparison "
              "of the report, intervals at its Bonferroni level.",
              "- agrees / opposite: significant (Holm's p < 0.05) with the paper's sign / "
              "the other sign; not significant: otherwise; where the paper's change is nil "
              "at its precision (0.00, 0.0), agrees (none) if not significant, differs if "
              "it is.",
              "- Lower perplexity is better, higher BLEU is better. Only directions compare "
              "across scales and corpora."]
    return "\n".join(lines) + "\n"


def _mean(summary: tuple[float, float | None, int] | None, digits: int) -> str:
    if not summary:
        return "-"
    mean, std, _ = summary
    return f"{mean:.{digits}f}" + (f" ± {std:.{digits}f}" if std is not None else "")
