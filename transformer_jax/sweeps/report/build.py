"""The comparison report of a sweep: settings with their spread over seeds, which differences
are real, our figures beside the paper's, where the code differed, and plots.

    python -m transformer_jax.compare runs/heads_ablation [--out=DIR] [--baseline=SETTING]

Reads the sweep's root (``sweep.json`` from ``python -m transformer_jax.sweep``; without it,
every subdirectory holding a run) and writes to ``--out`` (default: the root):

* ``results.csv`` -- one row per run (its setting and seed): config, parameters, steps, wall
  and CPU time, its figures (:mod:`transformer_jax.sweeps.report.metrics`: tokens/s, final
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
  (:mod:`transformer_jax.sweeps.search.summary`): each trial is a setting, its seeds
  summarised and tested as any setting's;
* ``table3.md`` -- for a sweep of Table 3's variants against the base model, each variant's
  change in perplexity and BLEU beside the paper's and whether the direction agrees
  (:mod:`transformer_jax.sweeps.report.table3`);
* with ``--by_length=16,24,32``, test BLEU in buckets of source length with the same paired
  test within each bucket, and its plot (:mod:`transformer_jax.sweeps.report.lengths`).

A run that is missing, unfinished or failed is marked as such in the tables and plots and
left out of its setting's statistics; it never stops the report. This module reads the runs
into rows and writes the files; the settings over seeds and their tests are
:mod:`transformer_jax.sweeps.report.settings`'s, results.md
:mod:`transformer_jax.sweeps.report.markdown`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ml_collections

from transformer_jax import config as config_lib, paper
from transformer_jax.errors import UserError
from transformer_jax.io import layout, metric_keys, provenance, storage
from transformer_jax.io.workdirs import read_final, read_metrics, read_object
from transformer_jax.sweeps import records
from transformer_jax.sweeps.report import (
    archive,
    lengths,
    markdown as report_markdown,
    metrics as report_metrics,
    table3 as report_table3,
)
from transformer_jax.sweeps.report.plots import plot_against_value, plot_losses
from transformer_jax.sweeps.report.settings import choose_baseline, comparisons, settings
from transformer_jax.sweeps.search import summary
from transformer_jax.sweeps.status import point_status

# The config fields of the paper's Table 3 (config.QUANTITIES), as (column, section, field).
CONFIG_COLUMNS = tuple((column, *field.split("."))
                       for column, (field, _) in config_lib.QUANTITIES.items())


def columns() -> tuple[str, ...]:
    """The columns of results.csv: the run, its config, its figures (metrics/), the
    paper's and where it ran."""
    return ("point", "setting", "seed", "variant", "value",
            *(c for c, _, _ in CONFIG_COLUMNS), "status", "params", "steps", "num_steps",
            "wall_s", "cpu_s", *(m.name for m in report_metrics.ordered()), "bleu_sentences",
            "paper_ppl", "paper_bleu", "paper_params_m", "scale", "code", "machine", "started")


def count_params(config: dict[str, Any], workdir: storage.Path) -> int | None:
    """Parameters of the point's model, with the vocabulary it trained (or its config's)."""
    from transformer_jax.data.tokenizer import Tokenizer
    from transformer_jax.model import counts
    from transformer_jax.model.spec import TransformerConfig

    vocab_file = workdir / layout.VOCAB / layout.VOCAB_MODEL
    try:
        vocab = Tokenizer(vocab_file).vocab_size if vocab_file.exists() else None
        recorded = ml_collections.ConfigDict(config)
        return counts.num_params(TransformerConfig.from_config(
            recorded.model, vocab or recorded.data.vocab_size))
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
    translations = _translations(workdir, final) if finished else None
    arrays = _sentence_stats(workdir, translations) if finished else None
    run = report_metrics.Run(finished, final, train, metrics.get(metric_keys.EVAL, {}),
                             translations, arrays)
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
        **{m.name: m.compute(run) for m in report_metrics.ordered()},
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
        "sentence_stats": arrays,
    }


def _sentence_stats(workdir: storage.Path, translations: tuple[list[str], list[str]] | None
                    ) -> dict[str, Any] | None:
    """A finished run's sentence statistics: those the end of training wrote, else the test
    translations' BLEU and chrF statistics (runs trained before they were written; their
    validation perplexity is then known only as a whole)."""
    from transformer_jax.evaluation import sentence_stats

    target = workdir / layout.SENTENCE_STATS
    if not storage.not_a_file(target):
        try:
            arrays = sentence_stats.loads(target.read_bytes())
        except (OSError, ValueError):
            arrays = None
        if arrays is not None and not sentence_stats.check(arrays):
            return arrays
    return sentence_stats.translation_stats(*translations) if translations else None


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


def write_csv(rows: Sequence[dict[str, Any]], path: storage.Path) -> None:
    names = columns()
    storage.write_csv(path, names, ({k: "" if row.get(k) is None else row[k] for k in names}
                                    for row in rows))


def _shown(folder: storage.Path) -> str:
    """The folder as a command names it: relative to the working directory when inside."""
    import os

    text = str(folder)
    if storage.is_remote(folder):
        return text
    relative = os.path.relpath(text)
    return text if relative.startswith("..") else relative


def _kept_definition(definition: dict[str, Any]) -> dict[str, Any]:
    """The definition a folder's records keep: the sweep's, its points' configs included."""
    return {k: v for k, v in definition.items() if k != "root"}


def report(root: storage.PathLike, out: storage.PathLike | None = None,
           baseline: str | None = None, by_length: str | None = None
           ) -> dict[str, storage.Path]:
    """Writes the report of the sweep in ``root`` to ``out``; returns {what: path}. With
    ``by_length`` (bucket edges, "16,24,32") also test BLEU by source length
    (:mod:`transformer_jax.sweeps.report.lengths`)."""
    root = storage.path(root)
    out = storage.path(out or root)
    from_records = archive.holds_records(root) and not records.read_sweep(root)
    if from_records:  # a results folder: every table from its records alone
        definition, rows = archive.read(root)
    else:
        definition, rows = collect(root)
        if archive.holds_records(out):
            definition, rows = archive.combine(definition, rows,
                                                      *archive.read(out))
    sets = settings(rows)
    base = choose_baseline(sets, baseline)
    tests = comparisons(sets, base)
    out.mkdir(parents=True, exist_ok=True)
    if not from_records or out != root:
        archive.write(out, _kept_definition(definition), rows)
    parameter = definition.get("parameter", "value")
    paths = {"csv": out / "results.csv", "markdown": out / "results.md",
             "loss_curves": out / "loss_curves.png",
             "against_value": out / f"dev_vs_{parameter}.png"}
    study = summary.study_of(definition, storage.path(root))
    more = summary.best_trials(study, definition) if study is not None else []
    write_csv(rows, paths["csv"])
    storage.write_atomically(paths["markdown"], report_markdown.markdown(
        definition, rows, sets, base, tests, more, _shown(root if from_records else out)))
    plot_losses(definition, rows, paths["loss_curves"])
    plot_against_value(definition, sets, paths["against_value"])
    if study is not None:
        paths.update(summary.write_plots(study, out))
    if report_table3.applies(sets, base):
        paths["table3"] = out / "table3.md"
        cpu = sum(r["cpu_s"] or 0.0 for r in rows) / 60 or None
        storage.write_atomically(paths["table3"], report_table3.markdown(
            definition, report_table3.rows(sets, base, tests), base, cpu))
    if by_length:
        paths.update(lengths.write(out, definition, definition.get("points") or [],
                                          sets, base, by_length))
    return paths
