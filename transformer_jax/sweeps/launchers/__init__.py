"""Launchers: how a sweep starts its points, one module a launcher, found by name.

``--launcher=NAME`` is the module ``transformer_jax.sweeps.launchers.NAME``; its ``LAUNCHER``
(a :class:`Launcher`) builds each point's command from the training arguments
(:func:`transformer_jax.sweeps.points.train_args`) and starts it. Its traits are data that
the sweep reads instead of asking which launcher it has:

* ``mode``: ``RUNS`` -- this process runs each point's command and waits for it to end
  (local, tpu); ``SUBMITS`` -- it hands each command to a scheduler and goes on (slurm);
  ``WRITES`` -- it only writes the commands, for someone to run, and starts and records
  nothing (print);
* ``parallel``: a ``RUNS`` launcher that runs ``--parallel=K`` points at once;
* ``trains_here``: the points train on this machine, their workdirs within its reach: the
  CPU's peak FLOP/s is measured once for every point, a new point gets the vocabulary of
  another trained on the same data, each run's output goes to ``WORKDIR/train.log`` and
  each attempt is recorded with its wall and CPU time; its commands name this process's
  Python;
* ``scheduler``: the queue a ``SUBMITS`` launcher submits to ("SLURM"), named in a point's
  status; its :meth:`Launcher.queue_state` says whether a submitted job still waits or runs,
  and a point whose job does is not started again.

Adding one is one module here (or in a directory named by the environment variable
``TRANSFORMER_JAX_LAUNCHERS``, several separated by ``os.pathsep``) that defines
``LAUNCHER``; ``--launcher`` offers it by its module's name (the mechanism is
:class:`transformer_jax.plugins.Registry`'s). A point to start is a ``Job``; how a ``RUNS``
launcher runs one here is ``_run.py``'s.
"""

from __future__ import annotations

import shlex
from typing import Any

from transformer_jax import plugins
from transformer_jax.sweeps.experiment import Point, Sweep
from transformer_jax.sweeps.launchers._run import Job, run_here

RUNS, SUBMITS, WRITES = "runs", "submits", "writes"


class Launcher:
    """A launcher's traits (see the module's docstring) and its ways: the check of its
    settings, the command of a point, how it is started, and the state of a submitted job.
    ``name`` is its module's name."""

    help: str = ""  # one line for --launcher's help
    mode: str = RUNS
    parallel: bool = False
    trains_here: bool = False
    scheduler: str = ""

    @property
    def name(self) -> str:
        return type(self).__module__.rpartition(".")[2]

    def command(self, sweep: Sweep, point: Point, args: tuple[str, str, list[str]],
                python: str = "python") -> list[str]:
        """The command that trains one point, from its (config argument, workdir,
        overrides): by default the training entry point itself."""
        config, workdir, overrides = args
        return [python, "-m", "transformer_jax.main", f"--config={config}",
                f"--workdir={workdir}", *overrides]

    def launch(self, job: Job) -> str:
        """Starts one point; returns its outcome ("finished", "failed (exit 1)", "printed",
        "submitted (job 12)"). A RUNS launcher runs the command here and waits; a WRITES
        launcher writes it (:meth:`write`); a SUBMITS launcher defines its own."""
        if self.mode == WRITES:
            self.write(shlex.join(job.command))
            return "printed"
        if self.mode == RUNS:
            return run_here(job, self.trains_here)
        raise NotImplementedError(f"launcher {self.name} submits its points: define launch()")

    def skipped(self, point: Point, status: Any) -> None:
        """Says that a point was not started (finished, or still queued): a WRITES launcher
        writes it as a comment."""
        if self.mode == WRITES:
            self.write(f"# {point.name}: {status}")

    def write(self, line: str) -> None:
        """Where a WRITES launcher writes its lines."""
        raise NotImplementedError(f"launcher {self.name} writes its commands: define write()")

    def check(self) -> None:
        """Refuses (UserError, one line) settings of the environment the launcher cannot
        use, before the sweep writes anything."""

    def queue_state(self, job_id: str) -> str | None:
        """The scheduler's state of a submitted job still queued or running ("PENDING",
        "RUNNING", ...), or None when it has left the queue (or there is no scheduler)."""
        return None


REGISTRY = plugins.Registry(__name__, "TRANSFORMER_JAX_LAUNCHERS", "--launcher",
                            traits="LAUNCHER", needs=(plugins.Need("LAUNCHER", Launcher),),
                            make=lambda entry: entry.traits)
names, get, having = REGISTRY.names, REGISTRY.get, REGISTRY.having
