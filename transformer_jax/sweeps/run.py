"""Running a sweep: every point not yet finished run, submitted or written by a launcher
(:mod:`transformer_jax.sweeps.launchers`).

Re-running a sweep is safe: a finished point (``final_metrics.json`` at the config's last
step) is skipped, as is one whose job a scheduler still has queued or running, and an
unfinished one is started again, which resumes from its latest checkpoint. ``--scale=demo``
trains every point at the demo scale of config.SCALES on the built-in corpus.
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import shlex
import sys
from typing import Any

import ml_collections

from transformer_jax import config as config_lib
from transformer_jax.config import resume
from transformer_jax.errors import UserError
from transformer_jax.io import layout, storage, workdirs
from transformer_jax.sweeps import launchers, records
from transformer_jax.sweeps.cpu_peak import shared_cpu_peak
from transformer_jax.sweeps.experiment import Sweep
from transformer_jax.sweeps.points import point_config, train_args
from transformer_jax.sweeps.status import point_status


def check_workdir_model(workdir: storage.Path, config: ml_collections.ConfigDict,
                        label: str) -> None:
    """A workdir trained with another model or data cannot resume this point."""
    saved = workdirs.read_json(workdir / layout.CONFIG)
    if not isinstance(saved, dict) or not (workdir / layout.CHECKPOINTS).exists():
        return
    conflicts = resume.resume_conflicts(saved, config.to_dict())
    if conflicts:
        raise UserError(f"point {label}: {workdir}/config.json differs from the sweep's "
                        f"config: {'; '.join(conflicts)}; use another --root or remove the "
                        "workdir")


def run_sweep(sweep: Sweep, root: str, launcher: str = "local", scale: str = "paper",
              parallel: int = 1, dry_run: bool = False,
              overrides: dict[str, Any] | None = None, experiment: str = "",
              python: str = sys.executable) -> dict[str, str]:
    """Runs, submits or writes every point not yet finished with the launcher called
    ``launcher``; returns {point: outcome}.

    Every point's config is built and validated before anything starts. ``dry_run`` shows
    the launcher's commands and changes nothing. ``python`` is the interpreter of the
    commands of a launcher whose points train here (others name ``python``).
    """
    chosen = launchers.get(launcher)
    chosen.check()
    if scale not in config_lib.SCALES:
        raise UserError(f"--scale={scale} is not one of {', '.join(config_lib.SCALES)}")
    if parallel < 1:
        raise UserError(f"--parallel={parallel} must be >= 1")
    if chosen.mode == launchers.RUNS and parallel > 1 and not chosen.parallel:
        raise UserError(f"--launcher={launcher} runs one point at a time; use --parallel=1")
    points = sweep.points()
    configs = {p.name: point_config(sweep, p, scale, overrides) for p in points}
    root_path = storage.path(root)
    definition = records.definition(sweep, points, configs, scale, experiment)
    records.check_root(root_path, definition)
    if not dry_run:
        root_path.mkdir(parents=True, exist_ok=True)
        storage.write_atomically(root_path / layout.SWEEP, json.dumps(definition, indent=2))

    outcome, todo = {}, []
    for point in points:
        config = configs[point.name][0]
        status = point_status(root_path / point.name, config.train.num_steps, ask_queue=True)
        if status.kind in ("finished", "queued"):
            outcome[point.name] = f"skipped: {status}"
            logging.info("%s: %s, skipped", point.name, status)
            chosen.skipped(point, status)
            continue
        check_workdir_model(root_path / point.name, config, point.name)
        todo.append((point, status))
    if chosen.trains_here and todo and not dry_run:
        peak = shared_cpu_peak([configs[p.name][0] for p, _ in todo])
        configs.update({p.name: point_config(sweep, p, scale, {**(overrides or {}), **peak})
                        for p, _ in todo})

    pending = []
    for point, status in todo:
        config, own = configs[point.name]
        cmd = chosen.command(sweep, point, train_args(sweep, point, scale, config, own, root),
                             python if chosen.trains_here else "python")
        if dry_run:
            print(f"# {point.name} ({status}):\n{shlex.join(cmd)}")
            outcome[point.name] = "printed"
        else:
            pending.append((point, cmd, config))
    jobs = [launchers.Job(point, root_path / point.name, cmd, config,
                          records.header(sweep, point, chosen.name), root_path, i, len(pending))
            for i, (point, cmd, config) in enumerate(pending)]
    if chosen.mode != launchers.WRITES:
        for job in jobs:
            # Before the run starts: it reads its swept values from here for TensorBoard.
            records.record_point(job.workdir, {**job.header, **records.point_record(
                sweep, job.point, job.config)})
    if chosen.mode == launchers.RUNS and jobs:
        workers = parallel if chosen.parallel else 1
        with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
            futures = {pool.submit(chosen.launch, job): job.point.name for job in jobs}
            for future in concurrent.futures.as_completed(futures):
                outcome[futures[future]] = future.result()
    else:
        for job in jobs:
            outcome[job.point.name] = chosen.launch(job)
    return outcome


def summary(outcome: dict[str, str]) -> str:
    return ", ".join(f"{name}: {result}" for name, result in outcome.items())
