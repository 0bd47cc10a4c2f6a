"""A real one-node SLURM cluster for the SLURM launcher's tests: Debian's munged, slurmctld
and slurmd started as this user's processes, each with a private configuration in a
directory of its own, found by the tools through SLURM_CONF.

Nothing of the system's is used or changed: the munge key is made for the cluster and its
socket lies in the cluster's directory (slurm.conf's AuthInfo names it), the controller and
the node listen on free ports, and their state, spool, logs and pid files stay in the
directory. The node is ``localhost`` (it always resolves: JAX's SLURM cluster finds the
coordinator by the node's name) with this machine's CPUs; there is no accounting, so a
job's state is known only while it is in the queue (``squeue``). Every daemon runs in the
foreground as a child of this process and is stopped by :meth:`Cluster.stop` (at exit
too), which cancels the jobs first; should this process be killed, the daemons end with it,
but a job then running goes on to its end.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import pathlib
import shutil
import signal
import subprocess
import time

from .gcs_emulator import free_port

PROGRAMS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo",
           "scontrol", "scancel", "srun")
# Debian's packages of those programs (bookworm: SLURM 22.05).
PACKAGES = "slurmctld slurmd slurm-client munge"
NODE = "localhost"


def missing() -> list[str]:
    """The programs a cluster needs that are not installed."""
    return [name for name in PROGRAMS if shutil.which(name) is None]


def slurm_conf(directory: pathlib.Path, ctld_port: int, node_port: int, cpus: int,
               first_job: int) -> str:
    """A one-node cluster: linuxproc process tracking, no task plugin (no cgroups), cores
    as the consumable resource, no accounting. Job ids start at ``first_job``: JAX's SLURM
    coordinator port follows the job id, and two clusters on one machine must not share
    one."""
    return f"""\
ClusterName=tjtest{ctld_port}
SlurmctldHost={NODE}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={node_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={directory}/munge/socket
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
FirstJobId={first_job}
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
MinJobAge=2
KillWait=5
StateSaveLocation={directory}/state
SlurmdSpoolDir={directory}/spool
SlurmctldPidFile={directory}/slurmctld.pid
SlurmdPidFile={directory}/slurmd.pid
SlurmctldLogFile={directory}/log/slurmctld.log
SlurmdLogFile={directory}/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
NodeName={NODE} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=test Nodes={NODE} Default=YES MaxTime=INFINITE State=UP
"""


def _end_with_parent() -> None:
    """In the child before it runs the daemon: SIGTERM when its parent dies (Linux's
    PR_SET_PDEATHSIG)."""
    ctypes.CDLL(None).prctl(1, signal.SIGTERM)


class Cluster:
    """munged, slurmctld and slurmd on a configuration of their own in ``directory``; the
    tools reach it with :attr:`env` (SLURM_CONF)."""

    def __init__(self, directory: pathlib.Path, cpus: int | None = None):
        self.directory = directory = pathlib.Path(directory)
        for sub in ("state", "spool", "log"):
            (directory / sub).mkdir(parents=True, exist_ok=True)
        munge = directory / "munge"
        munge.mkdir(mode=0o755, exist_ok=True)  # the socket's directory: open to every user
        keys = directory / "munge-key"
        keys.mkdir(mode=0o700, exist_ok=True)
        self.conf = directory / "slurm.conf"
        ctld_port = free_port()
        self.conf.write_text(slurm_conf(directory, ctld_port, free_port(),
                                        cpus or os.cpu_count() or 1,
                                        first_job=1000 * (ctld_port % 60 + 1)))
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.processes: list[subprocess.Popen] = []
        atexit.register(self.stop)  # also when the session ends without the teardown
        try:
            subprocess.run(["mungekey", "--create", f"--keyfile={keys}/munge.key"],
                           check=True, capture_output=True, timeout=30)
            self._start("munged", ["munged", "--foreground", "--force",
                                   f"--socket={munge}/socket", f"--key-file={keys}/munge.key",
                                   f"--pid-file={munge}/munged.pid",
                                   f"--log-file={directory}/log/munged.log",
                                   f"--seed-file={keys}/munged.seed"])
            self._wait(lambda: (munge / "socket").exists(), "munged made no socket")
            self._start("slurmctld", ["slurmctld", "-D", "-f", str(self.conf)])
            self._wait(lambda: self._ok(["scontrol", "ping"], "UP"), "slurmctld does not answer")
            self._start("slurmd", ["slurmd", "-D", "-f", str(self.conf), "-N", NODE])
            self._wait(lambda: self.node_state() == "idle", "the node is not idle")
        except BaseException:
            self.stop()
            raise

    def _start(self, name: str, cmd: list[str]) -> None:
        # A session of its own: a signal meant for the tests' process group (Ctrl-C) misses
        # it, and stop() cancels the jobs first; if this process dies, so does the daemon.
        with open(self.directory / "log" / f"{name}.out", "wb") as log:
            self.processes.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                                   env=self.env, start_new_session=True,
                                                   preexec_fn=_end_with_parent))

    def _ok(self, cmd: list[str], expect: str) -> bool:
        out = self.run(*cmd, check=False)
        return out.returncode == 0 and expect in out.stdout

    def _wait(self, ready, problem: str, timeout: float = 60) -> None:
        deadline = time.time() + timeout
        while not ready():
            dead = [p for p in self.processes if p.poll() is not None]
            if dead or time.time() > deadline:
                raise RuntimeError(f"SLURM test cluster: {problem}: "
                                   f"{'exited: ' + dead[0].args[0] if dead else 'timed out'}; "
                                   f"logs in {self.directory / 'log'}")
            time.sleep(0.2)

    def run(self, *cmd: str, check: bool = True) -> subprocess.CompletedProcess:
        """A SLURM tool run against this cluster."""
        return subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=60,
                              check=check)

    def node_state(self) -> str:
        out = self.run("sinfo", "-h", "-N", "-o", "%T", check=False)
        return out.stdout.strip() if out.returncode == 0 else ""

    def version(self) -> str:
        return self.run("sinfo", "--version").stdout.strip()

    def stop(self) -> None:
        """Cancels the jobs left (their steps outlive slurmd), then ends every daemon
        (slurmd first, munged last) and waits for them."""
        if self.processes and all(p.poll() is None for p in self.processes):
            self.run("scancel", "--full", "--user=root", check=False)
            deadline = time.time() + 30
            while self.run("squeue", "-h", check=False).stdout.strip() and \
                    time.time() < deadline:
                time.sleep(0.5)
        for process in reversed(self.processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        self.processes.clear()
