"""Searching a sweep's space with Optuna, on a small budget: explore one seed a trial with a
sampler sized to the budget, pruning from the first rung; then confirm the best few settings on
the remaining seeds and rank them on the mean.

    python -m transformer_jax.sweep configs/table3.py:base --root=runs/lr --trials=12 \
        --space=optim.lr_scale=log:0.25:4 --space=optim.warmup_steps=int:100:600 --seeds=3 \
        [--search=auto|tpe|gp|qmc|random] [--confirm=2] [--prune=asha|median|none] \
        [--objective=perplexity|bleu|...] [--search_seed=N] [--storage=postgresql://...] \
        [--parallel=P] [--launcher=local|slurm|tpu|print]

The rooms: the flags' spec (spec.py), the study and the claims on its trials
(study.py), a trial's points and which trials are confirmed (trials.py), the controller that
asks, trains and tells (controller.py), the samplers (samplers/) and pruners
(studies/pruners/), one module each, the status (progress.py), a pruned grid's trials
(grid.py), the report's section (summary.py). This module checks a search and
starts its controller.

A trial is one setting of the space trained in ``ROOT/trial=N,FIELD=VALUE,...[,seed=S]``; its
runs get the ``search.*`` config fields (controller.search_overrides), so that training
reports the objective to trial N at each evaluation and the pruner stops a trial that falls
behind (training/stops.py). A run stopped early, pruned or diverged, makes its trial PRUNED:
the sampler then counts its setting as a poor one rather than forgetting it.

Re-running the command resumes the search: a trial left running by a controller that is gone
is taken over by one controller (the storage decides which) and its runs resume from their
checkpoints; no ended trial is asked again, and a larger ``--trials`` extends the search.
Several controllers, on one machine or many, may run the same command on one study.
"""

from __future__ import annotations

import logging
import shlex
import sys
from typing import Any

import optuna

from transformer_jax import studies
from transformer_jax.errors import UserError
from transformer_jax.io import storage
from transformer_jax.sweeps import launchers, records, space
from transformer_jax.sweeps.checks import check_flags
from transformer_jax.sweeps.cpu_peak import shared_cpu_peak
from transformer_jax.sweeps.experiment import Sweep
from transformer_jax.sweeps.points import point_config, point_spec
from transformer_jax.sweeps.search import progress, samplers, study as study_lib
from transformer_jax.sweeps.search.controller import Controller, search_overrides
from transformer_jax.sweeps.search.spec import Search
from transformer_jax.sweeps.search.trials import confirming, known_points, trial_points


def check_sweep(sweep: Sweep) -> None:
    """A search samples one setting: UserError when the grid has several besides seeds."""
    settings = sorted({p.setting for p in sweep.points()})
    if len(settings) > 1:
        raise UserError(f"sweep {sweep.name}: a search samples its space on one setting (and "
                        f"its seeds); the grid has {len(settings)}: {', '.join(settings)}")
    fields = {f for p in sweep.grid for f in p}
    both = sorted(fields & {d.field for d in sweep.space})
    if both:
        raise UserError(f"sweep {sweep.name}: {', '.join(both)} both in the grid and the space")


def run_search(sweep: Sweep, root: str, search: Search, launcher: str = "local",
               scale: str = "paper", parallel: int = 1, dry_run: bool = False,
               overrides: dict[str, Any] | None = None, experiment: str = "",
               python: str = sys.executable) -> dict[str, str]:
    """Runs the search of ``sweep`` in ``root`` (see the module's docstring); returns
    {trial=N: outcome}. Every flag, the first trial's config and the study's storage are
    checked before anything starts; ``dry_run`` shows the commands of the trials to resume
    and asks nothing."""
    chosen = check_flags(launcher, scale, parallel)
    search.check()
    check_sweep(sweep)
    overrides = dict(overrides or {})
    controller = Controller(sweep, root, chosen, scale, search, overrides, python, experiment)
    samplers.get(search.sampler).check(controller.budget)
    study_lib.check_url(controller.url)
    fixed = {**overrides, **search_overrides(controller.url, sweep.name, 0, search,
                                             controller.budget.startup, controller.first_rung)}
    first = point_spec(sweep, sweep.points()[0], scale, root, fixed)
    # Every value a trial may sample is one it can train (num_heads dividing d_model, ...).
    space.check_trainable(sweep.space, lambda values: point_config(
        sweep, trial_points(sweep, 0, values)[0], scale, fixed))
    root_path = storage.path(root)
    records.check_root(root_path, {"name": sweep.name, "scale": scale})
    # A database is opened before anything is written; the journal file is in the root.
    store = studies.open_storage(controller.url) if search.storage else None
    logging.info("%s: %s", sweep.name, samplers.get(search.sampler).describe(controller.budget))
    caveat = search.caveat([d.field for d in sweep.space])
    if caveat:
        logging.warning("%s: %s", sweep.name, caveat)
    if dry_run and study_lib.load_study(sweep.name, controller.url, store) is None:
        print(f"# a new study {sweep.name} in {controller.url}: up to {search.trials} trials "
              f"of {', '.join(map(str, sweep.space))} "
              f"({samplers.get(search.sampler).describe(controller.budget)})")
        return {}
    storage.check(root_path, "--root")
    study = controller.open(store or studies.open_storage(controller.url))
    if dry_run:
        outcome = {}
        for trial in controller.resumable():
            for point in controller.points(trial.number):
                cmd = chosen.command(sweep, point,
                                     controller.spec(point, trial.number).command_args)
                print(f"# {point.name} (trial {trial.number}, to resume):\n{shlex.join(cmd)}")
            outcome[f"trial={trial.number}"] = "printed"
        taken = sum(t.state != optuna.trial.TrialState.FAIL for t in study.trials)
        print(f"# then up to {max(search.trials - taken, 0)} new trials ({search.sampler})")
        return outcome
    if chosen.mode == launchers.WRITES:
        return controller.write(parallel)
    if chosen.trains_here:
        controller.overrides.update(shared_cpu_peak([first]))
    return controller.run(parallel)


def status_lines(sweep: Sweep, root: str, search: Search, scale: str = "paper",
                 overrides: dict[str, Any] | None = None) -> list[str]:
    """``--status`` of a search: a line per point of its trials, then its phase, the compute
    spent and left, and the best setting so far."""
    from transformer_jax.sweeps import status

    study = study_lib.load_study(sweep.name, study_lib.storage_url(root, search.storage))
    points = known_points(sweep, search, study)
    lines = status.status_lines(sweep, root, scale, overrides, points=points)
    if study is None:
        return [*lines, "search: no study yet"]
    config = point_config(sweep, sweep.points()[0], scale, overrides)[0]
    trials = study.get_trials(deepcopy=False)
    per_seed = confirming(sweep, search)
    return [*lines, progress.phase_line(sweep, search, trials),
            progress.compute_line(sweep, root, search, study, config.train.num_steps,
                                       config.search.min_steps or config.train.eval_every),
            *progress.best_lines(study, search, len(sweep.points()), per_seed)]
