"""``--launcher=slurm``: ``sbatch launch/slurm.sbatch`` for each point; a point whose job is
still queued or running (``squeue``) is not submitted again. sbatch options for every point
(``--nodes=2 --partition=gpu``), which take the place of the script's ``#SBATCH`` lines,
are read from the environment variable named by ``OPTIONS_VARIABLE``."""

from __future__ import annotations

import logging
import os
import shlex
import subprocess

from transformer_jax.errors import UserError
from transformer_jax.io import workdirs
from transformer_jax.sweeps import records
from transformer_jax.sweeps.launchers import SUBMITS, Job, Launcher

OPTIONS_VARIABLE = "TRANSFORMER_JAX_SBATCH_OPTIONS"


def sbatch_options() -> list[str]:
    """The sbatch options of ``OPTIONS_VARIABLE``, split as the shell would."""
    value = os.environ.get(OPTIONS_VARIABLE, "")
    try:
        return shlex.split(value)
    except ValueError as e:
        raise UserError(f"{OPTIONS_VARIABLE}={value!r}: {e}") from e


class Slurm(Launcher):
    help = "sbatch launch/slurm.sbatch each point, but not one still queued or running"
    mode = SUBMITS
    scheduler = "SLURM"

    def command(self, sweep, point, args, python="python"):
        config, workdir, overrides = args
        # Appended to: a requeued job (the same id) would otherwise empty its first log.
        return ["sbatch", "--parsable", f"--job-name={sweep.name}-{point.name}",
                f"--output={workdir}/slurm-%j.out", "--open-mode=append", *sbatch_options(),
                "launch/slurm.sbatch", config, workdir, *overrides]

    def check(self) -> None:
        sbatch_options()

    def launch(self, job: Job) -> str:
        job.workdir.mkdir(parents=True, exist_ok=True)  # SLURM writes its output file there
        try:
            out = subprocess.run(job.command, capture_output=True, text=True, timeout=300)
        except OSError as e:
            raise UserError(f"cannot run sbatch: {e.strerror or e}") from e
        if out.returncode != 0:
            logging.error("%s: sbatch failed: %s", job.point.name, out.stderr.strip())
            return f"failed (sbatch exit {out.returncode})"
        job_id = out.stdout.strip().split(";")[0]
        records.record_attempt(job.workdir, job.header, {"started": workdirs.now(),
                                                         "job_id": job_id,
                                                         "command": job.command})
        logging.info("%s: submitted SLURM job %s", job.point.name, job_id)
        return f"submitted (job {job_id})"

    def queue_state(self, job_id: str) -> str | None:
        try:
            out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"],
                                 capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return None
        state = out.stdout.strip()
        return state if out.returncode == 0 and state else None


LAUNCHER = Slurm()
