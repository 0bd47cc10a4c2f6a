"""The launch scripts and the sweep's SLURM launcher, with the cluster tools (gcloud, srun,
sbatch, squeue, curl) replaced by scripts that record how they were called."""

import json
import os
import subprocess
from pathlib import Path

from transformer_jax.sweeps.experiment import load_experiment
from transformer_jax.sweeps.run import run_sweep

ROOT = Path(__file__).resolve().parents[2]


def fake_tools(tmp_path, **scripts):
    """A PATH whose first directory holds the given shell scripts (name -> body)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in scripts.items():
        path = bin_dir / name
        path.write_text("#!/usr/bin/env bash\n" + body + "\n")
        path.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def test_local_gpus_runs_the_entry_point_once(tmp_path):
    env = fake_tools(tmp_path, python='printf "%s\\n" "$@" > "$CALLS"')
    env["CALLS"] = str(tmp_path / "calls")
    subprocess.run(["launch/local_gpus.sh", "configs/table3.py:A_h16", "runs/A h16",
                    "--config.train.seed=2"], cwd=ROOT, env=env, check=True, timeout=60)
    assert (tmp_path / "calls").read_text().splitlines() == [
        "-m", "transformer_jax.main", "--config=configs/table3.py:A_h16", "--workdir=runs/A h16",
        "--config.train.seed=2"]


def test_slurm_script_starts_one_process_per_gpu_without_binding(tmp_path):
    env = fake_tools(tmp_path, srun='printf "%s\\n" "$@" > "$CALLS"')
    env["CALLS"] = str(tmp_path / "calls")
    subprocess.run(["bash", "launch/slurm.sbatch", "configs/big.py", "/shared/runs/big",
                    "--config.model.dtype=bfloat16"], cwd=ROOT, env=env, check=True, timeout=60)
    assert (tmp_path / "calls").read_text().splitlines() == [
        "--gpu-bind=none", "python", "-m", "transformer_jax.main", "--config=configs/big.py",
        "--workdir=/shared/runs/big", "--config.model.dtype=bfloat16"]
    header = (ROOT / "launch" / "slurm.sbatch").read_text()
    # JAX gives each SLURM task the GPU numbered SLURM_LOCALID: as many tasks as GPUs.
    assert "#SBATCH --ntasks-per-node=8" in header and "#SBATCH --gpus-per-node=8" in header


def test_tpu_script_tells_every_worker_the_coordinator_and_its_index(tmp_path):
    env = fake_tools(
        tmp_path,
        gcloud='if [ "$4" = describe ]; then echo "10.0.0.7;10.0.0.8;10.0.0.9;10.0.0.10"; '
               'else printf "%s\\n" "$@" > "$CALLS"; fi',
        curl="echo 3",  # the metadata server's agent-worker-number on worker 3
        python3='printf "%s\\n" "$@" > "$REMOTE"')
    env.update(CALLS=str(tmp_path / "calls"), REMOTE=str(tmp_path / "remote"), TPU="pod",
               ZONE="us-central2-b", REPO_DIR=str(ROOT))
    subprocess.run(["launch/tpu_pod.sh", "configs/big.py", "/mnt/runs/big",
                    "--config.train.seed=1"], cwd=ROOT, env=env, check=True, timeout=60)
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls[:7] == ["compute", "tpus", "tpu-vm", "ssh", "pod", "--zone=us-central2-b",
                         "--worker=all"]
    assert calls[7] == "--command"
    # Run the remote command as a worker would.
    subprocess.run(["bash", "-c", calls[8]], env=env, check=True, timeout=60)
    assert (tmp_path / "remote").read_text().splitlines() == [
        "-m", "transformer_jax.main", "--config=configs/big.py", "--workdir=/mnt/runs/big",
        "--config.train.seed=1", "--coordinator_address=10.0.0.7:8476", "--num_processes=4",
        "--process_id=3"]


def test_sweep_submits_each_point_once_to_slurm(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    env = fake_tools(
        tmp_path,
        sbatch='n=$(( $(cat "$JOBS" 2>/dev/null || echo 100) + 1 )); echo $n > "$JOBS"; '
               'printf "%s\\n" "$@" >> "$CALLS"; echo "$n;cluster"',
        squeue='[ "$3" = 101 ] && echo PENDING; true')  # job 101 still queued, 102 gone
    env.update(JOBS=str(tmp_path / "jobs"), CALLS=str(tmp_path / "calls"))
    monkeypatch.setenv("PATH", env["PATH"])
    monkeypatch.setenv("JOBS", env["JOBS"])
    monkeypatch.setenv("CALLS", env["CALLS"])
    sweep = load_experiment("experiments/base_vs_big.py")
    root = tmp_path / "root"
    assert run_sweep(sweep, str(root), "slurm") == {
        "base": "submitted (job 101)", "big": "submitted (job 102)"}
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls[:7] == ["--parsable", "--job-name=base_vs_big-base",
                         f"--output={root}/base/slurm-%j.out", "--open-mode=append",
                         "launch/slurm.sbatch", "configs/table3.py:base", f"{root}/base"]
    record = json.loads((root / "big" / "sweep_point.json").read_text())
    assert record["attempts"][0]["job_id"] == "102"
    # Again: job 101 is still queued and is left alone; job 102 ended unfinished: resubmitted.
    assert run_sweep(sweep, str(root), "slurm") == {
        "base": "skipped: queued (SLURM job 101)", "big": "submitted (job 103)"}
