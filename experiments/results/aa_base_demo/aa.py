"""Base against base: the A/A comparison of the demo's base model on disjoint seeds, judged by
the old method and by the run-level statistics, side by side.

    python -m experiments.results.aa_base_demo.aa     # writes aa.md beside this file

The runs are heads_ablation_demo's base model (h = 8), seeds 0-7, read from that folder's
records alone. Three splits of the seeds, each a comparison of a setting with itself, where
any difference claimed is a false one: two of three runs a side (as Table 3's sweeps ran)
and one of four:

* seeds 0-2 against 3-5;
* seeds 0, 2, 4 against 1, 3, 5;
* seeds 0-3 against 4-7.

The old method (the comparison report before 2026-12-06): test BLEU by sacreBLEU's paired
bootstrap over the sentences of every pair of runs pooled into one test set (1,000
resamples, seed 12345: its p has the floor 1/1001), the i-th run of one side paired with
the i-th of the other; perplexity by a paired t-test over the pairs; neither adjusted. The
new one: transformer_jax/evaluation/significance.py, unpaired (the seeds differ), Holm
across the report's comparisons.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from scipy import stats

from transformer_jax.evaluation import sentence_stats, significance
from transformer_jax.sweeps.report import archive
from transformer_jax.sweeps.report.verdicts import p_text, verdict

HERE = Path(__file__).resolve().parent
RUNS = HERE.parent / "heads_ablation_demo"
SPLITS = (((0, 1, 2), (3, 4, 5)), ((0, 2, 4), (1, 3, 5)), ((0, 1, 2, 3), (4, 5, 6, 7)))
FIGURES = ((sentence_stats.PPL, "dev PPL", 3), (sentence_stats.BLEU, "test BLEU", 2),
           (sentence_stats.CHRF, "test chrF", 2))
OLD_SAMPLES, OLD_SEED = 1000, 12345


def base_runs() -> dict[int, dict[str, np.ndarray]]:
    """{seed: sentence statistics} of the base model's finished runs."""
    _, rows = archive.read(RUNS)
    return {r["seed"]: r["sentence_stats"] for r in rows
            if r["setting"] == "base" and r["kind"] == "finished"}


def old_bleu(a: list[np.ndarray], b: list[np.ndarray]) -> tuple[float, float]:
    """(Δ, p) of the old method: runs paired in order, their sentences pooled, sacreBLEU's
    paired bootstrap (its resampling and its p-value, on the pooled statistics)."""
    from sacrebleu.significance import _compute_p_value

    pooled_a, pooled_b = np.concatenate(a), np.concatenate(b)
    score_a = float(sentence_stats.bleu_score(pooled_a.sum(axis=0)))
    score_b = float(sentence_stats.bleu_score(pooled_b.sum(axis=0)))
    rng = np.random.default_rng(OLD_SEED)
    idx = rng.choice(len(pooled_a), size=(OLD_SAMPLES, len(pooled_a)), replace=True)
    sample_a = sentence_stats.bleu_score(pooled_a[idx].sum(axis=1))
    sample_b = sentence_stats.bleu_score(pooled_b[idx].sum(axis=1))
    diffs = np.abs(sample_a - sample_b)
    return score_a - score_b, float(_compute_p_value(diffs - diffs.mean(),
                                                     abs(score_a - score_b)))


def old_ppl(a: list[float], b: list[float]) -> tuple[float, float]:
    """(Δ, p) of the old method's paired t-test over the pairs (unadjusted)."""
    return float(np.mean(np.subtract(a, b))), float(stats.ttest_rel(a, b).pvalue)


def old_p(p: float) -> str:
    floor = 1 / (OLD_SAMPLES + 1)
    return f"<= {floor:.4f}" if p <= floor + 1e-12 else f"{p:.3f}"


def markdown() -> str:
    runs = base_runs()
    new, old = [], []
    for left, right in SPLITS:
        for figure, _, _ in FIGURES:
            a = [sentence_stats.statistics(runs[s], figure) for s in left]
            b = [sentence_stats.statistics(runs[s], figure) for s in right]
            score = sentence_stats.SCORES[figure][1]
            new.append(significance.compare(np.stack(a), np.stack(b), score, list(left),
                                            list(right)))
            if figure == sentence_stats.BLEU:
                old.append(old_bleu(a, b))
            elif figure == sentence_stats.PPL:
                old.append(old_ppl([float(score(x.sum(axis=0))) for x in a],
                                   [float(score(x.sum(axis=0))) for x in b]))
            else:
                old.append(None)  # the old report tested chrF not at all
    new = significance.adjust(new)
    level = new[0].level
    lines = ["| seeds | figure | old: Δ | old: p | old verdict | new: Δ | interval "
             f"({100 * level:.1f}%) | se runs | se test | p | p Holm | new verdict |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    i = 0
    for left, right in SPLITS:
        for _, heading, digits in FIGURES:
            c, o = new[i], old[i]
            i += 1
            seeds = f"{', '.join(map(str, left))} against {', '.join(map(str, right))}"
            old_cells = ["-", "not tested", "-"] if o is None else [
                f"{o[0]:+.{digits}f}", old_p(o[1]),
                "**different**" if o[1] < 0.05 else "not significant"]
            lines.append("| " + " | ".join([
                seeds, heading, *old_cells, f"{c.delta:+.{digits}f}",
                f"[{c.low:+.{digits}f}, {c.high:+.{digits}f}]", f"{c.se_run:.{digits}f}",
                f"{c.se_test:.{digits}f}", p_text(c.p), p_text(c.p_adjusted),
                f"**{verdict(c)}**" if c.significant else verdict(c)]) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    text = markdown()
    (HERE / "aa.md").write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
