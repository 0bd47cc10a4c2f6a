"""Starting one point, the same way for a grid (run.py) and a search's controller
(search/controller.py): where the point stands (a finished or queued point is not started
again), the check that its workdir was trained with the same model, its command and job,
its record in the workdir, and its launch."""

from __future__ import annotations

from typing import Any

from transformer_jax.io import storage
from transformer_jax.sweeps import launchers, records
from transformer_jax.sweeps.checks import check_workdir_model
from transformer_jax.sweeps.experiment import Point, Sweep
from transformer_jax.sweeps.points import PointSpec
from transformer_jax.sweeps.status import DONE, Status, point_status


def standing(workdir: storage.Path, spec: PointSpec, name: str) -> Status:
    """Where the point in ``workdir`` stands, its launcher's scheduler asked; a point to
    start (:func:`to_start`) has its workdir's model checked first (UserError when the
    workdir was trained with another)."""
    status = point_status(workdir, spec.num_steps, ask_queue=True)
    if to_start(status):
        check_workdir_model(workdir, spec, name)
    return status


def to_start(status: Status) -> bool:
    """Whether a point is to be started: neither done (finished, stopped early) nor queued."""
    return status.kind not in DONE and status.kind != "queued"


def job(sweep: Sweep, point: Point, chosen: launchers.Launcher, spec: PointSpec, root: str,
        python: str, index: int, total: int, **more: Any) -> launchers.Job:
    """The job that trains ``point`` as its ``spec`` says: its command (``python`` where the
    launcher trains here) and the header of its records, to which ``more`` adds (a trial's
    number and study). ``index`` of ``total``: its place among the jobs started together."""
    cmd = chosen.command(sweep, point, spec.command_args,
                         python if chosen.trains_here else "python")
    root_path = storage.path(root)
    return launchers.Job(point, root_path / point.name, cmd, spec,
                         {**records.header(sweep, point, chosen.name), **more},
                         root_path, index, total)


def launch(sweep: Sweep, chosen: launchers.Launcher, job: launchers.Job) -> str:
    """Records the point in its workdir, before its run starts (the run reads its swept
    values from there for TensorBoard; a launcher that writes commands starts nothing and
    records nothing), then launches it; returns the launcher's outcome."""
    if chosen.mode != launchers.WRITES:
        records.record_point(job.workdir, {**job.header, **records.point_record(
            sweep, job.point, dict(job.spec.seeds))})
    return chosen.launch(job)
