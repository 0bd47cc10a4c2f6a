"""Running a sweep: every point not yet finished run, submitted or written by a launcher
(:mod:`transformer_jax.sweeps.launchers`).

Re-running a sweep is safe: a finished point (``final_metrics.json`` at the config's last
step) is skipped, as is one whose job a scheduler still has queued or running, and an
unfinished one is started again, which resumes from its latest checkpoint. ``--scale=demo``
trains every point at the demo scale of config.SCALES on the built-in corpus.
"""

from __future__ import annotations

import concurrent.futures
import logging
import shlex
import sys
from collections.abc import Collection
from typing import Any

from transformer_jax.io import storage
from transformer_jax.sweeps import launchers, records, start
from transformer_jax.sweeps.checks import check_flags
from transformer_jax.sweeps.cpu_peak import shared_cpu_peak
from transformer_jax.sweeps.experiment import Sweep
from transformer_jax.sweeps.points import point_spec
from transformer_jax.sweeps.search.grid import GridTrials
from transformer_jax.sweeps.search.spec import Search
from transformer_jax.sweeps.status import DONE


def run_sweep(sweep: Sweep, root: str, launcher: str = "local", scale: str = "paper",
              parallel: int = 1, dry_run: bool = False,
              overrides: dict[str, Any] | None = None, experiment: str = "",
              python: str = sys.executable, prune: Search | None = None,
              kept: Collection[str] = ()) -> dict[str, str]:
    """Runs, submits or writes every point not yet finished with the launcher called
    ``launcher``; returns {point: outcome}.

    Every point's config is built and validated before anything starts. ``dry_run`` shows
    the launcher's commands and changes nothing. ``python`` is the interpreter of the
    commands of a launcher whose points train here (others name ``python``). ``prune`` (a
    Search with a pruner) makes each point a trial of a study in the root, stopped by the
    pruner when it falls behind (search/grid.py's GridTrials). Points named in ``kept`` (the
    finished runs a results folder keeps records of, report/archive.py's finished_points) are
    not trained again, even where their workdirs are gone.
    """
    chosen = check_flags(launcher, scale, parallel)
    points = sweep.points()
    specs = {p.name: point_spec(sweep, p, scale, root, overrides) for p in points}
    root_path = storage.path(root)
    definition = records.definition(sweep, points, specs, scale, experiment)
    records.check_root(root_path, definition)
    if not dry_run:
        storage.check(root_path, "--root")
        records.write_sweep(root_path, definition)

    trials = None
    if prune is not None and not dry_run and chosen.mode != launchers.WRITES:
        prune.check()
        trials = GridTrials(sweep, root, prune, chosen, scale, overrides or {})
        definition["search"] = {"prune": prune.prune, "objective": prune.objective,
                                "study": sweep.name, "storage": prune.storage}
        records.write_sweep(root_path, definition)

    outcome, todo = {}, []
    for point in points:
        if point.name in kept:
            outcome[point.name] = "skipped: kept in the results folder"
            logging.info("%s: finished, its record kept in the results folder; skipped",
                         point.name)
            continue
        status = start.standing(root_path / point.name, specs[point.name], point.name)
        if not start.to_start(status):
            outcome[point.name] = f"skipped: {status}"
            number = records.read_point(root_path / point.name).get("trial")
            if trials is not None and status.kind in DONE and isinstance(number, int):
                trials.tell(number, point)  # a submitted point's trial, once it ended
            logging.info("%s: %s, skipped", point.name, status)
            chosen.skipped(point, status)
            continue
        todo.append((point, status))
    peak = {}
    if chosen.trains_here and todo and not dry_run:
        peak = shared_cpu_peak([specs[p.name] for p, _ in todo])
        specs.update({p.name: point_spec(sweep, p, scale, root, {**(overrides or {}), **peak})
                      for p, _ in todo})

    jobs, numbers = [], {}
    for i, (point, status) in enumerate(todo):
        spec = specs[point.name]
        more = {}
        if trials is not None:
            numbers[point.name] = more["trial"] = trials.trial_of(point, root_path / point.name)
            spec = point_spec(sweep, point, scale, root, {
                **(overrides or {}), **peak, **trials.overrides(numbers[point.name])})
        job = start.job(sweep, point, chosen, spec, root, python, i, len(todo), **more)
        if dry_run:
            print(f"# {point.name} ({status}):\n{shlex.join(job.command)}")
            outcome[point.name] = "printed"
        else:
            jobs.append(job)
    if chosen.mode == launchers.RUNS and jobs:
        workers = parallel if chosen.parallel else 1
        with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
            futures = {pool.submit(start.launch, sweep, chosen, job): job.point.name
                       for job in jobs}
            for future in concurrent.futures.as_completed(futures):
                outcome[futures[future]] = future.result()
    else:
        for job in jobs:
            outcome[job.point.name] = start.launch(sweep, chosen, job)
    if trials is not None and chosen.mode == launchers.RUNS:
        for job in jobs:
            outcome[job.point.name] += f"; trial {numbers[job.point.name]}: " + trials.tell(
                numbers[job.point.name], job.point)
    return outcome


def summary(outcome: dict[str, str]) -> str:
    return ", ".join(f"{name}: {result}" for name, result in outcome.items())
