"""results.md, the comparison report's Markdown: where and when the sweep ran, the settings
with their spread, each against the baseline (verdicts.py), the best mean of each
figure, every run, the code and versions they trained with, and notes on how to read it."""

from __future__ import annotations

import datetime
import math
from collections.abc import Sequence
from typing import Any

from transformer_jax.sweeps.report import metrics as report_metrics, verdicts
from transformer_jax.sweeps.report.settings import choose_baseline, settings


def code_differences(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Lines saying with what code and versions the runs trained: one line when every start
    of every run agrees, else one line per distinct combination naming its runs."""
    combos: dict[str, list[str]] = {}
    for row in rows:
        for fp in row["provenance"]:
            key = ", ".join(f"{k} {v}" for k, v in fp.items())
            if row["point"] not in combos.setdefault(key, []):
                combos[key].append(row["point"])
    if not combos:
        return ["No run recorded its code and versions (provenance.json)."]
    if len(combos) == 1:
        return [f"Every run trained with {next(iter(combos))}."]
    lines = ["**The runs did not all train with the same code and versions**: compare "
             "them with care."]
    lines += [f"- {key}: {', '.join(points)}" for key, points in combos.items()]
    return lines


def _number(value: Any, digits: int) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:,.{digits}f}"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"


def _params(n: float | None, millions: bool = False) -> str:
    if n is None:
        return "-"
    n = n * 1e6 if millions else n
    return f"{n / 1e6:.0f}M" if n >= 1e7 else f"{n / 1e6:.2f}M"


def end_to_end_s(rows: Sequence[dict[str, Any]]) -> float | None:
    """Seconds from the first attempt's start to the last one's end, over all points."""
    spans = []
    for row in rows:
        for a in row["attempts"]:
            start = datetime.datetime.fromisoformat(a["started"]).timestamp()
            spans.append((start, start + a["wall_s"]))
    if not spans:
        return None
    return max(end for _, end in spans) - min(start for start, _ in spans)


def _spread(summary: tuple[float, float | None, int] | None, digits: int) -> str:
    if summary is None:
        return "-"
    mean, std, _ = summary
    return _number(mean, digits) + ("" if std is None else f" ± {_number(std, digits)}")


def markdown(definition: dict[str, Any], rows: Sequence[dict[str, Any]],
             sets: Sequence[dict[str, Any]] | None = None,
             baseline: dict[str, Any] | None = None,
             tests: dict[str, dict[str, Any]] | None = None,
             more: Sequence[str] = (), folder: str = "FOLDER") -> str:
    """The report as Markdown: a heading, where and when, the settings with their spread and
    significance, ``more`` lines (a search's best trials), every run, and the code and
    versions they trained with."""
    parameter = definition.get("parameter", "value")
    sets = sets if sets is not None else settings(rows)
    baseline = baseline or choose_baseline(sets)
    tests = tests or {}
    lines = [f"# {definition.get('name', 'sweep')}", ""]
    if definition.get("description"):
        lines += [definition["description"] + ".", ""]
    machines = sorted({r["machine"] for r in rows if r["machine"]})
    dates = sorted({r["started"][:10] for r in rows if r["started"]})
    total = end_to_end_s(rows)
    facts = [f"scale: {definition.get('scale') or 'as configured'}"]
    if machines:
        facts.append(f"machine: {'; '.join(machines)}")
    if dates:
        facts.append(f"run on {', '.join(dates)}")
    if total is not None:
        cpu = sum(r["cpu_s"] or 0.0 for r in rows)
        facts.append(f"sweep end to end {_duration(total)} ({cpu / 60:.0f} CPU-minutes)")
    lines += ["; ".join(facts) + ".", ""]

    replicated = any(len(e["runs"]) > 1 for e in sets)
    lines += ["## Settings", "",
              ("Mean ± standard deviation over the n finished seeds of each setting."
               if replicated else "One run a setting: no spread is known."), ""]
    summarised = report_metrics.summarised()
    header = ["setting", parameter, "model", "n", *(m.heading for m in summarised),
              "paper PPL", "paper BLEU"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for e in sets:
        n = f"{e['n']}" + (f" of {len(e['runs'])}" if e["n"] != len(e["runs"]) else "")
        cells = [e["setting"], str(e["value"]), _model(e), n,
                 *(_spread(e[m.name], m.digits) for m in summarised),
                 _number(e["paper_ppl"], 2), _number(e["paper_bleu"], 1)]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", *verdicts.section(tests, baseline["setting"], definition,
                                                 folder)]
    lines += _best(sets, summarised)
    lines += ["", *more] if more else []

    lines += ["", "## Runs", ""]
    shown = report_metrics.in_runs()
    header = ["point", "seed", "status", "params", "steps", "wall time",
              *(m.heading for m in shown), "code", "paper params"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        steps = "-" if r["steps"] is None else f"{r['steps']:,}"
        cells = [r["point"], "-" if r["seed"] is None else str(r["seed"]), r["status"],
                 _params(r["params"]), steps, _duration(r["wall_s"]),
                 *(_number(r[m.name], m.digits) for m in shown), r["code"] or "-",
                 _params(r["paper_params_m"], millions=True)]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "## Code and versions", "", *code_differences(rows), ""]
    lines += ["## Notes", "", *_notes(rows, replicated)]
    return "\n".join(lines) + "\n"


def _best(sets: Sequence[dict[str, Any]],
          metrics: Sequence[report_metrics.Metric]) -> list[str]:
    """A line naming, for each metric, the settings with the best mean (the highest or the
    lowest, as the metric says) when more than one setting has one."""
    best = []
    for m in metrics:
        means = {e["setting"]: e[m.name][0] for e in sets if e[m.name]}
        if len(means) > 1:
            value = (max if m.higher_is_better else min)(means.values())
            names = ", ".join(name for name, mean in means.items() if mean == value)
            best.append(f"{m.heading} {names} ({_number(value, m.digits)})")
    return ["", "Best mean: " + "; ".join(best) + "."] if best else []


def _model(row: dict[str, Any]) -> str:
    """N x d_model/d_ff, h x d_k, as in "3 x 128/512, 8 x 16"."""
    if row.get("N") is None:
        return "-"
    return f"{row['N']} x {row['d_model']}/{row['d_ff']}, {row['h']} x {row['d_k']}"


def _notes(rows: Sequence[dict[str, Any]], replicated: bool = False) -> list[str]:
    notes = ["model: N layers x d_model/d_ff, h heads x d_k.",
             "dev: the validation split (newstest2013 for WMT14); PPL per subword token, "
             "from the final evaluation."]
    if all(r["dev_bleu"] is None for r in rows):
        notes.append("dev BLEU: not logged by these runs (train.bleu_every was 0).")
    sentences = sorted({r["bleu_sentences"] for r in rows if r["bleu_sentences"]})
    if sentences:
        notes.append(f"test BLEU: sacreBLEU of the first {', '.join(map(str, sentences))} "
                     "sentences of the test split, decoded at the end of training.")
    notes.append("paper: Table 3 of Vaswani et al. (2017), newstest2013, the full-size model "
                 "on WMT14 EN-DE, beam search, no checkpoint averaging. At another scale or "
                 "on another corpus only the direction of a change is comparable.")
    return [f"- {n}" for n in notes]
