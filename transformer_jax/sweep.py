"""Run a sweep, or say where it stands: the command of :mod:`transformer_jax.sweeps`.

    python -m transformer_jax.sweep experiments/heads_ablation.py --root=runs/heads \
        [--seeds=3] [--launcher=local|print|slurm|tpu|...] [--scale=demo] [--parallel=K] \
        [--dry_run] [--status] [--config.FIELD=VALUE ...]
    python -m transformer_jax.sweep configs/table3.py:base --root=runs/lr \
        --grid=optim.lr_scale=0.5,1,2 --grid=optim.warmup_steps=2000,4000 --seeds=3
    python -m transformer_jax.sweep configs/table3.py:base --root=runs/lr_search \
        --trials=12 --space=optim.lr_scale=log:0.25:4 --space=optim.warmup_steps=int:100:600 \
        --seeds=3 [--search=auto] [--confirm=2] [--prune=asha] [--storage=postgresql://...]

The first argument is an experiment file or a config file with its variant
(:mod:`transformer_jax.sweeps.experiment`). Each point trains in ``ROOT/NAME`` with the
ordinary training command (:mod:`transformer_jax.sweeps.points`), started by the launcher
(:mod:`transformer_jax.sweeps.launchers`, one module each); ``ROOT/sweep.json`` and
``ROOT/NAME/sweep_point.json`` record the sweep and its attempts
(:mod:`transformer_jax.sweeps.records`) for ``python -m transformer_jax.compare ROOT``, and
``--status`` says where every point stands (:mod:`transformer_jax.sweeps.status`).
``--search`` samples the ``--space`` with Optuna, trial after trial, instead of running a
grid (:mod:`transformer_jax.sweeps.search.run`; docs/sweeps.md, "Search").
"""

from __future__ import annotations

import functools
import logging
import shlex
import sys
from collections.abc import Sequence
from typing import Any

from absl import flags
from ml_collections import config_flags

from transformer_jax import cli, config as config_lib
from transformer_jax.errors import UserError
from transformer_jax.studies import pruners
from transformer_jax.sweeps import experiment, launchers, run, status
from transformer_jax.sweeps.report import archive
from transformer_jax.sweeps.search import run as search, samplers, spec
from transformer_jax.sweeps.search.spec import Search


def main(argv: Sequence[str], flag_values: Any) -> None:
    with cli.clean_errors():
        if len(argv) != 2:
            raise UserError("give one experiment file or config file, e.g. "
                            "python -m transformer_jax.sweep experiments/heads_ablation.py "
                            "--root=runs/heads")
        f = flag_values
        if f.seeds < 0:
            raise UserError(f"--seeds={f.seeds} must be >= 0")
        sweep = experiment.load_experiment(argv[1], f.grid or (), f.seeds, f.space or ())
        overrides = config_flags.get_override_values(flags.FLAGS["config"])
        how = Search(f.search or "auto", f.trials, f.storage, f.objective,
                     f.prune or spec.DEFAULT_PRUNE, f.confirm, f.search_seed)
        searching = bool(f.search or sweep.space)
        if searching and not sweep.space:
            raise UserError(f"--search={f.search}: give the space to search, e.g. "
                            "--space=optim.lr_scale=log:0.25:4")
        if f.status:
            lines = (search.status_lines(sweep, f.root, how, f.scale, overrides) if searching
                     else status.status_lines(sweep, f.root, f.scale, overrides))
            print("\n".join(lines))
            return
        if searching:
            outcome = search.run_search(sweep, f.root, how, f.launcher, f.scale, f.parallel,
                                        f.dry_run, overrides, shlex.join(sys.argv[1:]))
        else:
            kept = archive.finished_points(f.kept) if f.kept else set()
            outcome = run.run_sweep(sweep, f.root, f.launcher, f.scale, f.parallel, f.dry_run,
                                    overrides, experiment=shlex.join(
                                        a for a in sys.argv[1:] if not a.startswith("--kept")),
                                    prune=None if f.prune in (None, "none") else how,
                                    kept=kept)
        logging.info("%s: %s", sweep.name, run.summary(outcome) or "nothing to start")
        if any(r.startswith("failed") for r in outcome.values()):
            sys.exit(1)


if __name__ == "__main__":
    cli.define_path_flag("root", "Directory of the sweep: one workdir per point.")
    flags.DEFINE_enum("launcher", "local", launchers.names(), "; ".join(
        f"{name}: {launchers.get(name).help}" for name in launchers.names()) + ".")
    flags.DEFINE_enum("scale", "paper", list(config_lib.SCALES),
                      "demo: every point at the demo scale on the built-in corpus.")
    flags.DEFINE_integer("parallel", 1, "Points run at once by --launcher=" + "|".join(
        launchers.having("parallel")) + ".")
    flags.DEFINE_bool("dry_run", False, "Show what would be run; change nothing.")
    flags.DEFINE_multi_string("grid", [], "An axis FIELD=V1,V2,... (repeatable; the grid is "
                              "their product), e.g. --grid=optim.lr_scale=0.5,1,2.")
    flags.DEFINE_integer("seeds", 0, "Replicate every point over K seeds (initialisation, "
                         "dropout and data order); 0: the config's seeds alone.")
    flags.DEFINE_bool("status", False, "Print where every point stands; start nothing.")
    flags.DEFINE_enum("search", None, samplers.names(), "Search the --space instead of "
                      "running a grid, with this sampler: " + "; ".join(
                          f"{n}: {samplers.get(n).help}" for n in samplers.names())
                      + ". Default auto when --space is given.")
    flags.DEFINE_multi_string("space", [], "A dimension of the search, FIELD=log:LOW:HIGH, "
                              "FIELD=LOW:HIGH, FIELD=int:LOW:HIGH or FIELD=choice:V1,V2,... "
                              "(repeatable), e.g. --space=optim.lr_scale=log:0.25:4.")
    flags.DEFINE_integer("trials", 20, "Trials a search explores, counting those done (raise "
                         "it to extend a search).")
    flags.DEFINE_integer("confirm", spec.DEFAULT_CONFIRM, "After exploring with the "
                         "first seed, train the best K settings on the other --seeds and rank "
                         "them on the mean; 0: every trial trains every seed.")
    flags.DEFINE_integer("search_seed", None, "The search's seed (its samplers' draws); "
                         "default the config's train.seed.")
    flags.DEFINE_string("objective", "perplexity", "The validation figure a search optimizes:"
                        " perplexity, loss, nll (minimized) or bleu (maximized).")
    flags.DEFINE_enum("prune", None, pruners.names(), "Stop trials (or grid points) "
                      "that fall behind, judged at each evaluation: " + "; ".join(
                          pruners.help_lines()) + f". A search's default: "
                      f"{spec.DEFAULT_PRUNE}; a grid's: none.")
    flags.DEFINE_string("storage", "", "The study's database (a SQLAlchemy URL, e.g. "
                        "postgresql://user@host/db); default ROOT/study.journal.")
    flags.DEFINE_string("kept", "", "A results folder (python -m transformer_jax.compare ROOT "
                        "--out=FOLDER) whose records hold finished runs of this sweep: those "
                        "points are not trained again, even where their workdirs are gone; "
                        "compare ROOT --out=FOLDER then reports them with the new runs.")
    cli.define_overrides_flag("Overrides for every point, e.g. --config.train.seed=1.")
    cli.run(functools.partial(main, flag_values=flags.FLAGS))
