"""The SLURM launcher against a real SLURM (the ``slurm`` fixture: munged, slurmctld and
slurmd of this machine): a sweep submitted with launch/slurm.sbatch runs to the end; its
status is the queue's; a queued point is not submitted twice; a requeued job resumes from
its checkpoint; a cancelled one is stopped; srun starts the processes of one multi-process
run."""

import json
import re
import subprocess
import sys
import time

import pytest

from transformer_jax.errors import UserError
from transformer_jax.io import layout, workdirs
from transformer_jax.sweeps.experiment import load_experiment
from transformer_jax.sweeps.launchers import slurm as slurm_launcher
from transformer_jax.sweeps.run import run_sweep

from ..helpers import ROOT, run_command, tiny_experiment
from ..integration.test_multihost import STEPS, env as multihost_env, losses, run_args

POINTS = ("base", "D_ls0")
# One task on one CPU a point, no GPU: in place of the script's 8-GPU #SBATCH lines.
CPU_JOB = "--ntasks-per-node=1 --cpus-per-task=1 --gpus-per-node=0"
# No decoding (BLEU, samples) and no averaging: the points train, evaluate and end.
QUICK = ("--config.train.bleu_sentences=0", "--config.train.samples=0",
         "--config.train.average_checkpoints=1")


@pytest.fixture
def on_slurm(slurm, monkeypatch):
    """The sweep's sbatch (run in this process) and its jobs reach the test cluster; the
    jobs run this Python."""
    monkeypatch.setenv("SLURM_CONF", slurm.env["SLURM_CONF"])
    monkeypatch.setenv("PYTHON", sys.executable)
    monkeypatch.setenv(slurm_launcher.OPTIONS_VARIABLE, CPU_JOB)
    return slurm


def wait_for(check, what, timeout=600.0):
    """``check()``'s first true value, polled every half second."""
    deadline = time.time() + timeout
    while not (value := check()):
        if time.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)
    return value


def queue(cluster):
    """{job id: state} of every job in the cluster's queue, as squeue says."""
    out = cluster.run("squeue", "-h", "-o", "%i %T").stdout.split()
    return dict(zip(out[::2], out[1::2], strict=True))


def job_ids(root, points=POINTS):
    return {p: json.loads((root / p / layout.SWEEP_POINT).read_text())["attempts"][-1]["job_id"]
            for p in points}


def sweep(experiment, root, *args):
    ran = run_command("sweep", experiment, f"--root={root}", *QUICK, *args)
    assert ran.returncode == 0, ran.stderr[-3000:]
    return ran


def status(experiment, root, *args):
    return sweep(experiment, root, "--status", *args).stdout.splitlines()


def test_unsplittable_sbatch_options_are_refused_before_anything_is_written(tmp_path,
                                                                          monkeypatch):
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv(slurm_launcher.OPTIONS_VARIABLE, '--partition="gpu')
    with pytest.raises(UserError, match=r"^TRANSFORMER_JAX_SBATCH_OPTIONS='--partition=\"gpu': "
                                        "No closing quotation$"):
        run_sweep(load_experiment("experiments/base_vs_big.py"), str(tmp_path / "r"), "slurm")
    assert not (tmp_path / "r").exists()


# Slow: it starts a SLURM cluster (munged, slurmctld, slurmd) and two jobs, each a process
# that imports JAX and trains; about 90 s on a busy 2-core machine.
@pytest.mark.slow
def test_a_sweep_runs_to_the_end_under_slurm(on_slurm, builtin_data_dir, tmp_path,
                                             monkeypatch):
    experiment = tiny_experiment(tmp_path / "tiny.py", builtin_data_dir,
                                 points="{'variant': 'base'}, {'variant': 'D_ls0'}")
    root = tmp_path / "root"
    # Held at submission: both wait in the queue until released.
    monkeypatch.setenv(slurm_launcher.OPTIONS_VARIABLE, f"{CPU_JOB} --hold")
    sweep(experiment, root, "--launcher=slurm")
    jobs = job_ids(root)
    assert queue(on_slurm) == {jobs["base"]: "PENDING", jobs["D_ls0"]: "PENDING"}
    assert status(experiment, root) == [
        f"base   pending under SLURM (job {jobs['base']})",
        f"D_ls0  pending under SLURM (job {jobs['D_ls0']})",
        "2 points: 2 pending under SLURM"]

    # Submitted again while queued: each point says so in one line and nothing is submitted.
    again = sweep(experiment, root, "--launcher=slurm").stderr.splitlines()
    for point in POINTS:
        said = [line for line in again if line.endswith(f" {point}: queued (SLURM job "
                                                         f"{jobs[point]}), skipped")]
        assert len(said) == 1, again
    assert not [line for line in again if "submitted" in line]
    assert set(queue(on_slurm)) == set(jobs.values())
    assert job_ids(root) == jobs

    on_slurm.run("scontrol", "release", *jobs.values())
    wait_for(lambda: set(queue(on_slurm).values()) == {"RUNNING"}, "both jobs to run", 120)
    lines = status(experiment, root)
    for point, line in zip(POINTS, lines, strict=False):
        assert line.startswith(f"{point:<5}  running under SLURM (job {jobs[point]})"), line

    wait_for(lambda: not queue(on_slurm), "both jobs to end")
    lines = status(experiment, root)
    for point, line in zip(POINTS, lines, strict=False):
        record = workdirs.last_train_record(root / point)
        assert line == (f"{point:<5}  finished  step 10/10  loss {record['loss']:.3f}  "
                        f"{record['tokens_per_s']:,.0f} tokens/s")
        final = json.loads((root / point / layout.FINAL_METRICS).read_text())
        assert final["step"] == 10
        log = (root / point / f"slurm-{jobs[point]}.out").read_text()
        assert "process 0 of 1" in log and "train step 10 " in log
    assert lines[-1] == "2 points: 2 finished"


@pytest.mark.slow
def test_a_requeued_job_resumes_and_a_cancelled_one_is_stopped(on_slurm, builtin_data_dir,
                                                               tmp_path):
    experiment = tiny_experiment(tmp_path / "long.py", builtin_data_dir,
                                 points="{'variant': 'base'}")
    root, workdir = tmp_path / "root", tmp_path / "root" / "base"
    long = ("--config.train.num_steps=100000", "--config.train.checkpoint_every=50",
            "--config.train.log_every=5", "--config.train.eval_every=100000")
    sweep(experiment, root, "--launcher=slurm", *long)
    job = job_ids(root, ["base"])["base"]
    saved = wait_for(lambda: workdirs.checkpoint_steps_on_disk(workdir), "a checkpoint")[-1]
    on_slurm.run("scontrol", "requeue", job)
    # Back in the queue, its first attempt over: what that attempt logged.
    wait_for(lambda: queue(on_slurm).get(job) == "PENDING", "the job to wait again", 120)
    first, latest = steps(workdir), workdirs.checkpoint_steps_on_disk(workdir)[-1]
    # A requeued job waits two minutes (its begin time) before it may start: now instead.
    on_slurm.run("scontrol", "update", f"JobId={job}", "StartTime=now")
    log = workdir / f"slurm-{job}.out"
    resumed = int(wait_for(lambda: re.search(r"resuming from step (\d+)", log.read_text()),
                           "the job to resume", 120).group(1))
    assert resumed == latest >= saved > 0
    # Both attempts' output is in the job's log, the first one's kept.
    assert log.read_text().count("process 0 of 1") == 2
    # The second attempt logs the steps after its checkpoint, not from step 5 again.
    second = wait_for(lambda: steps(workdir)[len(first):], "the resumed run to log a step")
    assert first[0] == 5 and first[-1] <= resumed
    assert second[0] == (resumed // 5 + 1) * 5

    on_slurm.run("scancel", job)
    wait_for(lambda: job not in queue(on_slurm), "the job to leave the queue", 120)
    line = status(experiment, root, *long)[0]
    step = workdirs.last_train_record(workdir)["step"]
    assert line.startswith(f"base  stopped  step {step:,}/100,000  loss "), line


def steps(workdir):
    """The steps of the run's training log lines, in the order written."""
    return [r["step"] for r in workdirs.read_metric_records(workdir) if r["split"] == "train"]


@pytest.mark.slow
def test_srun_starts_the_two_processes_of_one_run(slurm, builtin_data_dir, tmp_path):
    # The 2-process CPU run of test_multihost.py, its processes started by srun, which gives
    # each its SLURM_PROCID; jax.distributed finds the coordinator from the node list.
    workdir = tmp_path / "two"
    workdir.mkdir()
    args = run_args(builtin_data_dir, workdir, **{"train.parallel": "pmap",
                                                   "train.model_parallel": 1})
    env = {**multihost_env(4), "SLURM_CONF": slurm.env["SLURM_CONF"], "PYTHON": sys.executable}
    config = args[0].removeprefix("--config=")
    job = subprocess.run(
        ["sbatch", "--parsable", f"--output={workdir}/slurm-%j.out", "--nodes=1",
         "--ntasks-per-node=2", "--cpus-per-task=1", "--gpus-per-node=0",
         "launch/slurm.sbatch", config, str(workdir), *args[2:]],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
        check=True).stdout.strip().split(";")[0]
    wait_for(lambda: job not in queue(slurm), "the job to end")
    log = (workdir / f"slurm-{job}.out").read_text()
    assert "process 0 of 2, 4 local / 8 global devices" in log, log[-3000:]
    assert "process 1 of 2, 4 local / 8 global devices" in log, log[-3000:]
    # Only process 0 logs: one line a step.
    assert [step for step, _, _ in losses(workdir)] == list(range(1, STEPS + 1))
    assert json.loads((workdir / layout.FINAL_METRICS).read_text())["step"] == STEPS

