"""The comparison report of a sweep: settings with their spread over seeds, which differences
are real, our figures beside the paper's, where the code differed, and plots.

    python -m transformer_jax.compare runs/heads_ablation [--out=DIR] [--baseline=SETTING]

Reads the sweep's root (``sweep.json`` from ``python -m transformer_jax.sweep``; without it,
every subdirectory holding a run) and writes to ``--out`` (default: the root):

* ``results.csv`` -- one row per run (its setting and seed): config, parameters, steps, wall
  and CPU time, its figures (:mod:`transformer_jax.sweeps.report_metrics`: tokens/s, final
  validation loss and perplexity, validation BLEU (the last logged), test BLEU...), the
  code it was trained with, and the paper's Table 3 PPL, BLEU and parameters for its
  variant;
* ``results.md`` -- the settings (runs that differ only in their seed): mean ± standard
  deviation and n of the summarised figures (validation perplexity, validation BLEU, test
  BLEU...) and the setting with the best mean of each; each setting's test BLEU against
  the baseline's by sacreBLEU's paired bootstrap resampling, marked significant or not at
  p < 0.05; then every run, and where and with what code they ran;
* ``loss_curves.png`` -- every run's training loss against the step, one colour a setting;
* ``dev_vs_<parameter>.png`` -- validation perplexity and BLEU against the swept value: each
  setting's mean with a ±1 std error bar, every seed's own point, and the paper's;
* for a search, its best trials in results.md and Optuna's plots of its study
  (:mod:`transformer_jax.sweeps.search_report`): each trial is a setting, its seeds
  summarised and tested as any setting's;
* ``table3.md`` -- for a sweep of Table 3's variants against the base model, each variant's
  change in perplexity and BLEU beside the paper's and whether the direction agrees
  (:mod:`transformer_jax.sweeps.report_table3`);
* with ``--by_length=16,24,32``, test BLEU in buckets of source length with the same paired
  test within each bucket, and its plot (:mod:`transformer_jax.sweeps.report_lengths`).

A run that is missing, unfinished or failed is marked as such in the tables and plots and
left out of its setting's statistics; it never stops the report.
"""

from __future__ import annotations

import datetime
import math
import statistics
from collections.abc import Sequence
from typing import Any

import ml_collections

from transformer_jax import config as config_lib, paper
from transformer_jax.errors import UserError
from transformer_jax.io import layout, metric_keys, provenance, storage
from transformer_jax.io.workdirs import read_final, read_metrics, read_object
from transformer_jax.sweeps import records, report_metrics, report_table3, search_report
from transformer_jax.sweeps.plots import plot_against_value, plot_losses
from transformer_jax.sweeps.status import point_status

# The config fields of the paper's Table 3 (config.QUANTITIES), as (column, section, field).
CONFIG_COLUMNS = tuple((column, *field.split("."))
                       for column, (field, _) in config_lib.QUANTITIES.items())
SIGNIFICANCE_LEVEL = 0.05


def columns() -> tuple[str, ...]:
    """The columns of results.csv: the run, its config, its figures (report_metrics), the
    paper's and where it ran."""
    return ("point", "setting", "seed", "variant", "value",
            *(c for c, _, _ in CONFIG_COLUMNS), "status", "params", "steps", "num_steps",
            "wall_s", "cpu_s", *report_metrics.METRICS, "bleu_sentences", "paper_ppl",
            "paper_bleu", "paper_params_m", "scale", "code", "machine", "started")


def count_params(config: dict[str, Any], workdir: storage.Path) -> int | None:
    """Parameters of the point's model, with the vocabulary it trained (or its config's)."""
    from transformer_jax.data.tokenizer import Tokenizer
    from transformer_jax.model import params

    vocab_file = workdir / layout.VOCAB / layout.VOCAB_MODEL
    try:
        vocab = Tokenizer(vocab_file).vocab_size if vocab_file.exists() else None
        return params.num_params(ml_collections.ConfigDict(config), vocab)
    except (KeyError, TypeError, ValueError, AttributeError, OSError, RuntimeError,
            ArithmeticError):  # a config of the past, or damaged: no count, not a stop
        return None


def _points(root: storage.Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    definition = records.read_sweep(root)
    if definition and definition.get("points"):
        return definition, definition["points"]
    runs = sorted(p for p in root.iterdir() if p.is_dir() and (
        (p / layout.CONFIG).exists() or (p / layout.SWEEP_POINT).exists()))
    if not runs:
        raise UserError(f"{root} holds no sweep.json and no training run")
    points = []
    for run in runs:
        config = read_object(run / layout.CONFIG) or {}
        variant = config.get("variant") if isinstance(config.get("variant"), str) else ""
        variant = variant or run.name
        points.append({"name": run.name, "variant": variant, "value": variant,
                       "setting": run.name})
    return {"name": root.name, "parameter": "variant", "scale": "", "description": ""}, points


def collect(root: storage.PathLike) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(the sweep's definition, one row per point with the columns() and its curves)."""
    root = storage.path(root)
    if not root.is_dir():
        raise UserError(f"{root}: no such directory")
    definition, points = _points(root)
    rows = []
    for point in points:
        rows.append(_row(root / point["name"], point, definition))
    return definition, rows


def _row(workdir: storage.Path, point: dict[str, Any],
         definition: dict[str, Any]) -> dict[str, Any]:
    # The sweep's config for the point is its target (a resumed run may have been given
    # more steps than the config.json written when it started).
    config = point.get("config") or read_object(workdir / layout.CONFIG) or {}
    # Sections that are not objects (a damaged config.json) are read as missing.
    config = {k: v for k, v in config.items()
              if isinstance(v, dict) or k not in records.CONFIG_SECTIONS}
    num_steps = config.get("train", {}).get("num_steps")
    num_steps = num_steps if isinstance(num_steps, int) and not isinstance(num_steps, bool) \
        else None
    metrics = read_metrics(workdir)
    train = metrics.get(metric_keys.TRAIN, {})
    final = read_final(workdir)
    record = records.read_point(workdir)
    attempts = [a for a in record.get("attempts", [])
                if _is_number(a.get("wall_s")) and _is_number(a.get("cpu_s", 0.0))]
    status = point_status(workdir, num_steps) if num_steps else point_status(workdir, -1)
    finished = status.kind == "finished"
    run = report_metrics.Run(finished, final, train, metrics.get(metric_keys.EVAL, {}),
                             _translations(workdir, final) if finished else None)
    scores = paper.TABLE3.get(point["variant"])
    # Counted for points that started (tracing a model takes seconds).
    n_params = count_params(config, workdir) if config.get("model") and workdir.exists() \
        else None
    runs = provenance.read(workdir)
    return {
        "point": point["name"], "setting": point.get("setting") or point["name"],
        "seed": (point.get("seeds") or {}).get("train.seed",
                                               config.get("train", {}).get("seed")),
        "variant": point["variant"], "value": point["value"],
        "status": str(status), "kind": status.kind,
        "params": n_params,
        "steps": max(train, default=None), "num_steps": num_steps,
        "wall_s": round(sum(a["wall_s"] for a in attempts), 1) if attempts else None,
        "cpu_s": round(sum(a.get("cpu_s", 0.0) for a in attempts), 1) if attempts else None,
        **{m.name: m.compute(run) for m in report_metrics.METRICS.values()},
        "bleu_sentences": final.get(metric_keys.BLEU_SENTENCES),
        "paper_ppl": scores[0] if scores else None,
        "paper_bleu": scores[1] if scores else None,
        "paper_params_m": scores[2] if scores else None,
        "scale": config.get("scale") or definition.get("scale", ""),
        **_config_columns(config),
        "machine": attempts[-1].get("machine", "") if attempts else "",
        "started": attempts[0]["started"] if attempts else "",
        "attempts": attempts,
        "curve": [(s, train[s][metric_keys.LOSS]) for s in sorted(train)
                  if metric_keys.LOSS in train[s]],
        "provenance": [provenance.fingerprint(r) for r in runs],
        "code": ", ".join(dict.fromkeys(f["code"] for f in map(provenance.fingerprint, runs))),
        "translations": run.translations,
    }


def _translations(workdir: storage.Path, final: dict[str, Any]
                  ) -> tuple[list[str], list[str]] | None:
    """(hypotheses, references) of the test split written at the end of training."""
    try:
        files = [workdir / final[k] for k in (metric_keys.TEST_HYPOTHESES,
                                              metric_keys.TEST_REFERENCES)]
        if any(storage.not_a_file(f) for f in files):
            return None
        hyps, refs = (f.read_text(encoding="utf-8").splitlines() for f in files)
    except (KeyError, TypeError, OSError, ValueError):  # ValueError: not UTF-8
        return None
    return (hyps, refs) if len(hyps) == len(refs) else None


def _config_columns(config: dict[str, Any]) -> dict[str, Any]:
    """The Table 3 fields of a point's config (d_k, d_v resolved when derived)."""
    if not config.get("model"):
        return {}
    out = {column: config.get(section, {}).get(field)
           for column, section, field in CONFIG_COLUMNS}
    for key in ("d_k", "d_v"):
        if not out[key] and _is_number(out["d_model"]) and _is_number(out["h"]) and out["h"] > 0:
            out[key] = out["d_model"] // out["h"]
    return out


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


# ----------------------------------------------------------------------------------------
# Settings over seeds, and which differences are real


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


# ----------------------------------------------------------------------------------------
# Table


def write_csv(rows: Sequence[dict[str, Any]], path: storage.Path) -> None:
    names = columns()
    storage.write_csv(path, names, ({k: "" if row.get(k) is None else row[k] for k in names}
                                    for row in rows))


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
             more: Sequence[str] = ()) -> str:
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
              ("Mean ± standard deviation over the n finished seeds of each setting. "
               if replicated else "One run a setting: no spread is known. ")
              + f"Test BLEU against the baseline **{baseline['setting']}** by paired bootstrap "
              f"resampling (sacreBLEU, 1,000 resamples): significant when p < "
              f"{SIGNIFICANCE_LEVEL}.", ""]
    summarised = report_metrics.summarised()
    header = ["setting", parameter, "model", "n", *(m.heading for m in summarised),
              "Δ test BLEU", "p", "significant", "paper PPL", "paper BLEU"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for e in sets:
        t = tests.get(e["setting"], {})
        if e is baseline:
            delta, p, verdict = "baseline", "", ""
        elif "p" in t:
            delta = f"{t['delta']:+.2f}"
            p = f"{t['p']:.3f}"
            verdict = ("**yes**" if t["significant"] else "no") + (
                f" ({t['seed_wins']}/{t['seeds']} seeds higher)" if t["seeds"] > 1 else "")
        else:
            delta, p, verdict = "-", "-", t.get("note", "-")
        n = f"{e['n']}" + (f" of {len(e['runs'])}" if e["n"] != len(e["runs"]) else "")
        cells = [e["setting"], str(e["value"]), _model(e), n,
                 *(_spread(e[m.name], m.digits) for m in summarised), delta, p, verdict,
                 _number(e["paper_ppl"], 2), _number(e["paper_bleu"], 1)]
        lines.append("| " + " | ".join(cells) + " |")

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
    if replicated:
        notes.append("significance with several seeds: seed s of a setting is paired with "
                     "seed s of the baseline (the same data order), the translations of all "
                     "paired seeds are pooled into one test set, and sacreBLEU's paired "
                     "bootstrap resamples its sentences. Δ is the pooled BLEU's difference. "
                     "Pooling tests the difference across the seeds' runs on these sentences, "
                     "not over all seeds one could draw: read it beside the std and the number "
                     "of seeds on which the setting is higher.")
    notes.append("paper: Table 3 of Vaswani et al. (2017), newstest2013, the full-size model "
                 "on WMT14 EN-DE, beam search, no checkpoint averaging. At another scale or "
                 "on another corpus only the direction of a change is comparable.")
    return [f"- {n}" for n in notes]


def report(root: storage.PathLike, out: storage.PathLike | None = None,
           baseline: str | None = None, by_length: str | None = None
           ) -> dict[str, storage.Path]:
    """Writes the report of the sweep in ``root`` to ``out``; returns {what: path}. With
    ``by_length`` (bucket edges, "16,24,32") also test BLEU by source length
    (:mod:`transformer_jax.sweeps.report_lengths`)."""
    definition, rows = collect(root)
    sets = settings(rows)
    base = choose_baseline(sets, baseline)
    tests = significance(sets, base)
    out = storage.path(out or root)
    out.mkdir(parents=True, exist_ok=True)
    parameter = definition.get("parameter", "value")
    paths = {"csv": out / "results.csv", "markdown": out / "results.md",
             "loss_curves": out / "loss_curves.png",
             "against_value": out / f"dev_vs_{parameter}.png"}
    study = search_report.study_of(definition, storage.path(root))
    more = search_report.best_trials(study, definition) if study is not None else []
    write_csv(rows, paths["csv"])
    storage.write_atomically(paths["markdown"], markdown(definition, rows, sets, base,
                                                             tests, more))
    plot_losses(definition, rows, paths["loss_curves"])
    plot_against_value(definition, sets, paths["against_value"])
    if study is not None:
        paths.update(search_report.write_plots(study, out))
    if report_table3.applies(sets, base):
        paths["table3"] = out / "table3.md"
        cpu = sum(r["cpu_s"] or 0.0 for r in rows) / 60 or None
        storage.write_atomically(paths["table3"], report_table3.markdown(
            definition, report_table3.rows(sets, base, tests), base, cpu))
    if by_length:
        from transformer_jax.sweeps import report_lengths

        paths.update(report_lengths.write(out, definition, _points(storage.path(root))[1], sets,
                                          base, by_length))
    return paths
