"""What the comparison report adds for a search (``python -m transformer_jax.compare ROOT``
on a search's root): its best trials, and Optuna's plots of the study beside the report
(layout.SEARCH_PLOTS: the optimization history, the parameters' importances, and the
objective against each parameter), drawn by ``optuna.visualization.matplotlib``."""

from __future__ import annotations

import logging
import warnings
from typing import Any

import optuna

from transformer_jax.io import layout, storage
from transformer_jax.sweeps.search import progress, study as study_lib

BEST_SHOWN = 5  # the best trials listed in the report


def study_of(definition: dict[str, Any], root: storage.Path) -> optuna.Study | None:
    """The study of the search sweep.json describes, or None (not a search, no study)."""
    record = definition.get("search")
    if not isinstance(record, dict) or not record.get("space"):
        return None
    return study_lib.load_study(record["study"], study_lib.storage_url(
        str(root), record.get("storage", "")))


def best_trials(study: optuna.Study, definition: dict[str, Any]) -> list[str]:
    """The report's section on the search: how its trials ended, and the best settings
    (confirmed ones ranked on their mean over seeds)."""
    record = definition["search"]
    objective, direction = record["objective"], record["direction"]
    seeds = int(record.get("seeds", 1))
    per_seed = int(record.get("confirm", 0)) > 0 and seeds > 1
    trials = [t for t in study.get_trials(deepcopy=False)
              if not t.user_attrs.get(study_lib.DROPPED)]
    states: dict[str, int] = {}
    for t in trials:
        key = f"{study_lib.phase(t)} {t.state.name.lower()}"
        states[key] = states.get(key, 0) + 1
    how = (f"explored on one seed, the best {record['confirm']} confirmed on all {seeds}"
           if per_seed else "the mean over each trial's seeds")
    lines = ["## Search", "",
             f"Study {study.study_name}: {record.get('sampler_chosen', record['sampler'])} over "
             f"{', '.join(f'`{s}`' for s in record['space'])}; {objective} "
             f"{direction}d, {how}; pruner {record['prune']}. "
             f"{len(trials)} trials: " + ", ".join(f"{n} {k}" for k, n in states.items())
             + ".", ""]
    ranked = progress.ranking(trials, direction, seeds, per_seed)
    if not ranked:
        return [*lines, "No trial has completed yet."]
    fields = list(ranked[0].params)
    lines += [f"Best settings ({objective}, {'highest' if direction == 'maximize' else 'lowest'}"
              " first; confirmed settings first):", "",
              "| trial | " + " | ".join(fields) + f" | {objective} | seeds |",
              "|" + "---|" * (len(fields) + 3)]
    for s in ranked[:BEST_SHOWN]:
        values = [f"{s.params[f]:.4g}" if isinstance(s.params.get(f), float)
                  else str(s.params.get(f, "-")) for f in fields]
        figure = f"{s.mean:.4g}" + (f" ± {s.std:.2g}" if len(s.values) > 1 else "")
        lines.append(f"| {s.named} | " + " | ".join(values) + f" | {figure} | "
                     f"{len(s.values)} |")
    return lines


def write_plots(study: optuna.Study, out: storage.Path) -> dict[str, storage.Path]:
    """Optuna's plots of the study as PNGs in ``out``; {what: path} of those drawn (the
    importances need two completed trials)."""
    import numpy as np
    from optuna.visualization import matplotlib as plots

    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    makers = {"history": plots.plot_optimization_history, "slices": plots.plot_slice}
    if len(complete) >= 2 and complete[0].params:
        makers["importances"] = plots.plot_param_importances
    paths = {}
    for what, make in makers.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            try:
                axes = make(study)
            except (ValueError, RuntimeError) as e:  # too few trials for this plot
                logging.warning("no %s plot: %s", what, e)
                continue
        figure = np.asarray(axes).flat[0].figure
        paths[f"search_{what}"] = path = out / layout.SEARCH_PLOTS[what]
        storage.write_figure(figure, path, dpi=120)
        import matplotlib.pyplot as plt

        plt.close(figure)
    return paths
