"""One point to start (:class:`Job`), and how a launcher that runs its points here runs one:
the training command as a child process, its output to the workdir's train.log, its
attempt (wall and CPU time, exit status, machine) recorded. Not a launcher itself (its name
starts with "_")."""

from __future__ import annotations

import dataclasses
import logging
import os
import shlex
import subprocess
import time
from typing import Any

from transformer_jax.io import storage, workdirs
from transformer_jax.sweeps import records
from transformer_jax.sweeps.experiment import Point
from transformer_jax.sweeps.points import PointSpec
from transformer_jax.sweeps.vocab import share_vocabulary


@dataclasses.dataclass(frozen=True)
class Job:
    """One point to start: its ``command`` (from ``Launcher.command``), its workdir, its
    spec (points.PointSpec), the head of its sweep_point.json, the sweep's root, and its
    place among the points started (``index`` of ``total``)."""

    point: Point
    workdir: storage.Path
    command: list[str]
    spec: PointSpec
    header: dict[str, Any]
    root: storage.Path
    index: int = 0
    total: int = 1


def run_here(job: Job, trains_here: bool) -> str:
    """Runs one point's command here and waits for it. When it trains here its output is
    appended to ``WORKDIR/train.log`` (otherwise it goes to the console, the workdir being
    on the workers' storage) and the attempt is recorded. In a bucket the output passes
    through this process, which rewrites the log object as it grows (``storage.LineLog``)."""
    cmd, workdir = job.command, job.workdir
    logging.info("[%d/%d] %s: %s", job.index + 1, job.total, job.point.label, shlex.join(cmd))
    if trains_here:
        workdir.mkdir(parents=True, exist_ok=True)
        share_vocabulary(job.root, workdir, dict(job.spec.vocabulary))
    start, started = time.time(), workdirs.now()
    if not trains_here:
        proc = subprocess.Popen(cmd)
    elif storage.is_remote(workdir):
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        with storage.LineLog(workdir / "train.log") as log:
            for line in proc.stdout:
                log.write(line)
                log.flush()
    else:
        with open(workdir / "train.log", "a") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    # wait4 gives the child's CPU time as well as its exit status.
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = returncode = os.waitstatus_to_exitcode(status)
    wall = time.time() - start
    attempt = {"started": started, "wall_s": round(wall, 1),
               "cpu_s": round(usage.ru_utime + usage.ru_stime, 1), "returncode": returncode,
               "command": cmd, "machine": workdirs.machine()}
    if trains_here:
        records.record_attempt(workdir, job.header, attempt)
    result = "finished" if returncode == 0 else f"failed (exit {returncode})"
    where = f"; log: {workdir / 'train.log'}" if trains_here and returncode else ""
    logging.info("%s: %s in %.0f s (%.0f CPU s)%s", job.point.label, result, wall,
                 attempt["cpu_s"], where)
    return result
