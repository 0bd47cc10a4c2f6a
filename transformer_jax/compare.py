"""The comparison report of a sweep: our figures beside the paper's, and plots.

    python -m transformer_jax.compare runs/heads_ablation [--out=DIR]

Reads the sweep's root (``sweep.json`` from ``python -m transformer_jax.sweep``; without it,
every subdirectory holding a run) and writes to ``--out`` (default: the root):

* ``results.csv`` -- one row per point: config, parameters, steps, wall and CPU time,
  tokens/s, final validation loss and perplexity, validation BLEU (the last logged), test
  BLEU, and the paper's Table 3 PPL, BLEU and parameters for the point's variant;
* ``results.md`` -- the same as a Markdown table, with where and when it ran;
* ``loss_curves.png`` -- every point's training loss against the step, on one chart;
* ``dev_vs_<parameter>.png`` -- validation perplexity and BLEU against the swept value,
  ours and the paper's.

A point that is missing, unfinished or failed is marked as such in the table and plots; it
never stops the report.
"""

from __future__ import annotations

import csv
import datetime
import functools
import math
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ml_collections
from absl import flags
from matplotlib.figure import Figure

from transformer_jax import cli, paper
from transformer_jax.errors import UserError
from transformer_jax.workdirs import point_status, read_json, read_metrics

# The config fields of the paper's Table 3, as (column, section, field).
CONFIG_COLUMNS = (("N", "model", "num_layers"), ("d_model", "model", "d_model"),
                  ("d_ff", "model", "d_ff"), ("h", "model", "num_heads"), ("d_k", "model", "d_k"),
                  ("d_v", "model", "d_v"), ("P_drop", "model", "dropout_rate"),
                  ("eps_ls", "train", "label_smoothing"), ("positions", "model", "positions"))
COLUMNS = ("point", "variant", "value", *(c for c, _, _ in CONFIG_COLUMNS), "status", "params",
           "steps", "num_steps", "wall_s",
           "cpu_s", "tokens_per_s", "dev_loss", "dev_ppl", "dev_bleu", "test_bleu",
           "bleu_sentences", "paper_ppl", "paper_bleu", "paper_params_m", "scale", "machine",
           "started")


def _last(records: dict[int, dict[str, Any]], key: str) -> Any:
    for step in sorted(records, reverse=True):
        if key in records[step]:
            return records[step][key]
    return None


def count_params(config: dict[str, Any], workdir: Path) -> int | None:
    """Parameters of the point's model, with the vocabulary it trained (or its config's)."""
    from transformer_jax import params
    from transformer_jax.data.tokenizer import Tokenizer

    vocab_file = workdir / "vocab" / "spm.model"
    try:
        vocab = Tokenizer(vocab_file).vocab_size if vocab_file.exists() else None
        return params.num_params(ml_collections.ConfigDict(config), vocab)
    except (KeyError, TypeError, ValueError, AttributeError, OSError, RuntimeError):
        return None


def _points(root: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    definition = read_json(root / "sweep.json")
    if isinstance(definition, dict) and definition.get("points"):
        return definition, definition["points"]
    runs = sorted(p for p in root.iterdir() if p.is_dir() and (
        (p / "config.json").exists() or (p / "sweep_point.json").exists()))
    if not runs:
        raise UserError(f"{root} holds no sweep.json and no training run")
    points = []
    for run in runs:
        config = read_json(run / "config.json") or {}
        variant = config.get("variant") or run.name
        points.append({"name": run.name, "variant": variant, "value": variant})
    return {"name": root.name, "parameter": "variant", "scale": "", "description": ""}, points


def collect(root: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(the sweep's definition, one row per point with the COLUMNS and its curves)."""
    root = Path(root)
    if not root.is_dir():
        raise UserError(f"{root}: no such directory")
    definition, points = _points(root)
    rows = []
    for point in points:
        rows.append(_row(root / point["name"], point, definition))
    return definition, rows


def _row(workdir: Path, point: dict[str, Any], definition: dict[str, Any]) -> dict[str, Any]:
    # The sweep's config for the point is its target (a resumed run may have been given
    # more steps than the config.json written when it started).
    config = point.get("config") or read_json(workdir / "config.json") or {}
    num_steps = config.get("train", {}).get("num_steps")
    metrics = read_metrics(workdir)
    train, evals = metrics.get("train", {}), metrics.get("eval", {})
    final = read_json(workdir / "final_metrics.json") or {}
    record = read_json(workdir / "sweep_point.json") or {}
    attempts = [a for a in record.get("attempts", []) if "wall_s" in a]
    status = point_status(workdir, num_steps) if num_steps else point_status(workdir, -1)
    ppl = final.get("perplexity") if status.kind == "finished" else None
    # Tokens/s of the log windows after the first, which includes compilation.
    speeds = [train[s]["tokens_per_s"] for s in sorted(train) if "tokens_per_s" in train[s]]
    speeds = speeds[1:] or speeds
    scores = paper.TABLE3.get(point["variant"])
    # Counted for points that started (tracing a model takes seconds).
    n_params = count_params(config, workdir) if config.get("model") and workdir.exists() \
        else None
    return {
        "point": point["name"], "variant": point["variant"], "value": point["value"],
        "status": str(status), "kind": status.kind,
        "params": n_params,
        "steps": max(train, default=None), "num_steps": num_steps,
        "wall_s": round(sum(a["wall_s"] for a in attempts), 1) if attempts else None,
        "cpu_s": round(sum(a.get("cpu_s", 0.0) for a in attempts), 1) if attempts else None,
        "tokens_per_s": sum(speeds) / len(speeds) if speeds else None,
        "dev_loss": final.get("loss") if ppl else _last(evals, "loss"),
        "dev_ppl": ppl if ppl else _last(evals, "perplexity"),
        "dev_bleu": _last(evals, "bleu"),
        "test_bleu": final.get("test_bleu"),
        "bleu_sentences": final.get("bleu_sentences"),
        "paper_ppl": scores[0] if scores else None,
        "paper_bleu": scores[1] if scores else None,
        "paper_params_m": scores[2] if scores else None,
        "scale": config.get("scale") or definition.get("scale", ""),
        **_config_columns(config),
        "machine": attempts[-1].get("machine", "") if attempts else "",
        "started": attempts[0]["started"] if attempts else "",
        "attempts": attempts,
        "curve": [(s, train[s]["loss"]) for s in sorted(train) if "loss" in train[s]],
    }


def _config_columns(config: dict[str, Any]) -> dict[str, Any]:
    """The Table 3 fields of a point's config (d_k, d_v resolved when derived)."""
    if not config.get("model"):
        return {}
    out = {column: config.get(section, {}).get(field)
           for column, section, field in CONFIG_COLUMNS}
    for key in ("d_k", "d_v"):
        if not out[key] and out["d_model"] and out["h"]:
            out[key] = out["d_model"] // out["h"]
    return out


# ----------------------------------------------------------------------------------------
# Table


def write_csv(rows: Sequence[dict[str, Any]], path: Path) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if row.get(k) is None else row[k] for k in COLUMNS})


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


def markdown(definition: dict[str, Any], rows: Sequence[dict[str, Any]]) -> str:
    """The report as Markdown: a heading, where and when, and the table."""
    parameter = definition.get("parameter", "value")
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
    header = ["point", parameter, "model", "status", "params", "steps", "wall time", "tokens/s",
              "dev PPL", "dev BLEU", "test BLEU", "paper PPL", "paper BLEU", "paper params"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        steps = "-" if r["steps"] is None else f"{r['steps']:,}"
        cells = [r["point"], str(r["value"]), _model(r), r["status"], _params(r["params"]), steps,
                 _duration(r["wall_s"]), _number(r["tokens_per_s"], 0), _number(r["dev_ppl"], 2),
                 _number(r["dev_bleu"], 1), _number(r["test_bleu"], 1),
                 _number(r["paper_ppl"], 2), _number(r["paper_bleu"], 1),
                 _params(r["paper_params_m"], millions=True)]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", *_notes(rows)]
    return "\n".join(lines) + "\n"


def _model(row: dict[str, Any]) -> str:
    """N x d_model/d_ff, h x d_k, as in "3 x 128/512, 8 x 16"."""
    if row.get("N") is None:
        return "-"
    return f"{row['N']} x {row['d_model']}/{row['d_ff']}, {row['h']} x {row['d_k']}"


def _notes(rows: Sequence[dict[str, Any]]) -> list[str]:
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


# ----------------------------------------------------------------------------------------
# Plots


def _label(row: dict[str, Any], parameter: str) -> str:
    name = f"{parameter}={row['value']}" if parameter != "variant" else row["point"]
    return name if row["kind"] == "finished" else f"{name} ({row['kind']})"


def plot_losses(definition: dict[str, Any], rows: Sequence[dict[str, Any]], path: Path) -> None:
    """Every point's training loss against the step, on one chart."""
    fig = Figure(figsize=(7.5, 4.6), layout="constrained")
    ax = fig.add_subplot()
    parameter = definition.get("parameter", "value")
    for row in rows:
        if row["curve"]:
            steps, losses = zip(*row["curve"], strict=True)
            style = "-" if row["kind"] == "finished" else "--"
            ax.plot(steps, losses, style, marker=".", label=_label(row, parameter))
    missing = [_label(r, parameter) for r in rows if not r["curve"]]
    ax.set(xlabel="step", ylabel="training loss (label-smoothed, per token)",
           title=f"{definition.get('name', '')}: training loss")
    ax.grid(True, alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=8)
    if missing:
        note = textwrap.fill("no curve: " + ", ".join(missing), 60)
        ax.text(0.99, 0.99, note, transform=ax.transAxes, ha="right", va="top", fontsize=8,
                color="tab:red", in_layout=False)
    fig.savefig(path, dpi=120)


def _positions(values: Sequence[Any]) -> tuple[list[float], dict[str, Any]]:
    """x positions of the swept values: numbers as they are (log2 for wide positive ranges,
    e.g. heads), anything else in order."""
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
    if numeric and values:
        if min(values) > 0 and max(values) / min(values) >= 8:
            return [float(v) for v in values], {"xscale": "log", "base": 2}
        return [float(v) for v in values], {}
    return list(range(len(values))), {"labels": [str(v) for v in values]}


def plot_against_value(definition: dict[str, Any], rows: Sequence[dict[str, Any]],
                       path: Path) -> None:
    """Validation perplexity and BLEU against the swept value: ours (left axis) and the
    paper's (right axis, its own scale); points without a final figure are marked."""
    parameter = definition.get("parameter", "value")
    xs, axis = _positions([r["value"] for r in rows])
    bleu_key = "dev_bleu" if any(r["dev_bleu"] is not None for r in rows) else "test_bleu"
    panels = [("dev_ppl", "paper_ppl", "validation perplexity"),
              (bleu_key, "paper_bleu", "validation BLEU" if bleu_key == "dev_bleu"
               else "test BLEU (greedy; no validation BLEU logged)")]
    fig = Figure(figsize=(max(11.0, 0.6 * len(rows)), 4.8), layout="constrained")
    for i, (ours, theirs, title) in enumerate(panels):
        ax = fig.add_subplot(1, 2, i + 1)
        twin = ax.twinx()
        # Only finished points: an unfinished one's last evaluation is not its result.
        done = [r[ours] is not None and r["kind"] == "finished" for r in rows]
        pts = [(x, r[ours]) for x, r, ok in zip(xs, rows, done, strict=True) if ok]
        if pts:
            ax.plot(*zip(*pts, strict=True), "o-", color="tab:blue", label="ours")
        ref = [(x, r[theirs]) for x, r in zip(xs, rows, strict=True) if r[theirs] is not None]
        if ref:
            twin.plot(*zip(*ref, strict=True), "s--", color="tab:orange", mfc="none",
                      label="paper (Table 3)")
        for x, r, ok in zip(xs, rows, done, strict=True):
            if not ok:
                ax.axvline(x, color="tab:red", ls=":", lw=1)
                ax.annotate(r["kind"], (x, 0.02), xycoords=("data", "axes fraction"),
                            rotation=90, color="tab:red", fontsize=8, ha="right",
                            in_layout=False)
        if axis.get("xscale"):
            ax.set_xscale("log", base=axis["base"])
            ax.set_xticks(xs, [str(r["value"]) for r in rows])
        elif "labels" in axis:
            ax.set_xticks(xs, axis["labels"], rotation=45 if len(xs) > 4 else 0,
                          ha="right" if len(xs) > 4 else "center")
        ax.set(xlabel=parameter, ylabel=f"ours: {title}", title=title)
        twin.set_ylabel("paper", color="tab:orange")
        ax.grid(True, alpha=0.3)
        handles = ax.get_lines()[:1] + twin.get_lines()[:1]
        if handles:
            ax.legend(handles, [h.get_label() for h in handles], fontsize=8, loc="best")
    fig.suptitle(f"{definition.get('name', '')}: against {parameter}")
    fig.savefig(path, dpi=120)


def report(root: str | Path, out: str | Path | None = None) -> dict[str, Path]:
    """Writes the report of the sweep in ``root`` to ``out``; returns {what: path}."""
    definition, rows = collect(root)
    out = Path(out or root)
    out.mkdir(parents=True, exist_ok=True)
    parameter = definition.get("parameter", "value")
    paths = {"csv": out / "results.csv", "markdown": out / "results.md",
             "loss_curves": out / "loss_curves.png",
             "against_value": out / f"dev_vs_{parameter}.png"}
    write_csv(rows, paths["csv"])
    paths["markdown"].write_text(markdown(definition, rows))
    plot_losses(definition, rows, paths["loss_curves"])
    plot_against_value(definition, rows, paths["against_value"])
    return paths


def main(argv: Sequence[str], out_flag: Any) -> None:
    with cli.clean_errors():
        if len(argv) != 2:
            raise UserError("give one sweep directory, e.g. "
                            "python -m transformer_jax.compare runs/heads_ablation")
        paths = report(argv[1], out_flag.value)
        print(paths["markdown"].read_text())
        print("wrote " + ", ".join(str(p) for p in paths.values()))


if __name__ == "__main__":
    cli.run(functools.partial(main, out_flag=flags.DEFINE_string(
        "out", None, "Where the report goes (default: the sweep's directory).")))
