"""The comparison report's verdicts as Markdown: each setting against the baseline on each
figure, with the training run as the unit (:mod:`transformer_jax.evaluation.significance`),
the two variance components, raw and Holm-adjusted p, and the runs an unresolved difference
would need with the command that adds them."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from typing import Any

from transformer_jax.evaluation import significance
from transformer_jax.sweeps.report.settings import (
    FIGURES,
    RUN_LEVEL_ONLY,
    between_runs_only,
    family_size,
)

HIGHER, LOWER, UNRESOLVED = "higher", "lower", "not resolved"
# The least difference in test BLEU worth having: an unresolved one is asked how many runs
# would show the two settings equivalent within it.
EQUIVALENCE_BLEU = 1.0


def p_text(p: float | None) -> str:
    """A p-value to three decimal places (no resampling floor: p is from t), or four where
    three would put it on the other side of alpha (0.0496, not 0.050 beside a verdict)."""
    if p is None:
        return "-"
    if p < 0.001:
        return f"{p:.1e}"
    text = f"{p:.3f}"
    if (float(text) < significance.ALPHA) != (p < significance.ALPHA):
        text = f"{p:.4f}"
    return text


def verdict(c: significance.Comparison) -> str:
    """higher / lower (adjusted p < alpha), not resolved, or '-' without a test."""
    if not c.judged:
        return "-"
    if not c.significant:
        return UNRESOLVED
    return HIGHER if c.delta > 0 else LOWER


def _n(x: float | None, digits: int) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _digits(figure: str) -> int:
    return 3 if figure == FIGURES[0][0] else 2


def level_text(level: float) -> str:
    return f"{100 * level:.{max(1, len(str(round(1 / (1 - level)))) - 2)}f}%"


def add_runs_command(definition: Mapping[str, Any], runs: int, folder: str) -> str:
    """The sweep's own command with ``--seeds=runs`` and ``--kept=folder`` (the results
    folder whose records stand for the runs already made), and the report's; '' when the
    sweep did not record its command."""
    command = definition.get("experiment")
    if not isinstance(command, str) or not command:
        return ""
    args = [a for a in shlex.split(command) if not re.match(r"--(seeds|kept)(=|$)", a)]
    root = next((a.split("=", 1)[1] for a in args if a.startswith("--root=")), "ROOT")
    return ("python -m transformer_jax.sweep "
            + shlex.join([*args, f"--seeds={runs}", f"--kept={folder}"])
            + f"\npython -m transformer_jax.compare {shlex.quote(root)} "
            + shlex.quote(f"--out={folder}"))


def section(tests: Mapping[str, Mapping[str, significance.Comparison]], baseline: str,
            definition: Mapping[str, Any], folder: str = "FOLDER") -> list[str]:
    """The lines of results.md's section "Against the baseline"."""
    m = family_size(tests)
    lines = ["## Against the baseline", ""]
    if not m:
        return lines + ["No setting has two finished runs beside two of the baseline "
                        f"**{baseline}**: nothing is judged.", ""]
    level = 1 - significance.ALPHA / m
    lines += [
        f"Each setting against **{baseline}**, the training run the unit "
        "(transformer_jax/evaluation/significance.py): Δ is the setting's mean over its "
        "runs minus the baseline's; sd the spread of one run's figure between runs (setting "
        "/ baseline); se runs and se test Δ's standard error from the spread between runs "
        "and from the test set (its sentences resampled "
        f"{significance.BOOTSTRAP_SAMPLES:,} times, seed {significance.BOOTSTRAP_SEED}); "
        "p two-sided from Student's t with Satterthwaite's degrees of freedom; p Holm "
        f"adjusted across this report's m = {m} comparisons, the verdict when it is below "
        f"{significance.ALPHA}; intervals at the matching Bonferroni level "
        f"({level_text(level)}). Paired: the same seeds on both sides, seed against seed. "
        "Runs a side: the runs of each side that would find a difference of this size at "
        f"{significance.POWER:.0%} power at level {significance.ALPHA}/m.", ""]
    header = ["setting", "figure", "runs", "design", "Δ", "interval", "sd", "se runs",
              "se test", "p", "p Holm", "verdict", "runs a side"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    headings = dict(FIGURES)
    wanted = []
    notes = []
    for setting, by_figure in tests.items():
        for figure, c in by_figure.items():
            d = _digits(figure)
            runs = f"{c.n_a} / {c.n_b}"
            if not c.judged:
                lines.append("| " + " | ".join([setting, headings[figure], runs, "-",
                                                f"{c.delta:+.{d}f}", "-", "-", "-", "-",
                                                "-", "-", "-", c.note or "-"]) + " |")
                continue
            if c.runs_needed:
                wanted.append(c.runs_needed)
            elif not c.significant and c.note:
                notes.append(f"{setting}, {headings[figure]}: {c.note}.")
            sd = f"{_n(c.sd_a, d)} / {_n(c.sd_b, d)}"
            se_test = "-" if between_runs_only(c) else _n(c.se_test, d)
            cells = [setting, headings[figure], runs, "paired" if c.paired else "unpaired",
                     f"{c.delta:+.{d}f}", f"[{c.low:+.{d}f}, {c.high:+.{d}f}]", sd,
                     _n(c.se_run, d), se_test, p_text(c.p), p_text(c.p_adjusted),
                     f"**{verdict(c)}**" if c.significant else verdict(c),
                     str(c.runs_needed) if c.runs_needed else ("-" if c.significant else
                                                              "beyond reach")]
            lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    if any(between_runs_only(c) for by in tests.values() for c in by.values() if c.judged):
        lines += ["se test '-': " + RUN_LEVEL_ONLY + "; their interval has the spread "
                  "between runs alone.", ""]
    lines += notes + ([""] if notes else [])
    lines += _equivalence(tests, m)
    if wanted:
        command = add_runs_command(definition, max(wanted), folder)
        lines += [f"To resolve every unresolved difference that more runs can resolve: "
                  f"{max(wanted)} runs a side"
                  + (" (the sweep trains only the seeds that neither its root nor this "
                     "folder's records hold; the report combines the new runs with the "
                     f"records):\n\n```bash\n{command}\n```" if command else "."),
                  ""]
    return lines


def _equivalence(tests: Mapping[str, Mapping[str, significance.Comparison]],
                 m: int) -> list[str]:
    """Each unresolved test BLEU comparison: the runs a side that two one-sided tests at
    level 0.05/m would need to show the settings equivalent within ±EQUIVALENCE_BLEU at
    80% power, were the true difference the observed one."""
    lines = []
    for setting, by_figure in tests.items():
        c = by_figure.get(FIGURES[1][0])
        if c is None or not c.judged or c.significant:
            continue
        runs, why = significance.runs_needed(c, significance.ALPHA / m,
                                             margin=EQUIVALENCE_BLEU)
        lines.append(f"- {setting}: {runs} runs a side" if runs else f"- {setting}: {why}")
    if not lines:
        return []
    return [f"Equivalence within ±{EQUIVALENCE_BLEU:g} BLEU of an unresolved test BLEU "
            "difference (two one-sided tests at level 0.05/m, 80% power, were the true "
            "difference the observed one):", "", *lines, ""]
