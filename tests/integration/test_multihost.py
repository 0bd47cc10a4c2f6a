"""Multi-host training, on one machine: 2 processes x 4 CPU devices over loopback give the
losses of 1 process x 8 devices, and only process 0 writes logs and metadata."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STEPS = 4


def run_args(data_dir, workdir, parallel):
    return [sys.executable, "-m", "transformer_jax.main", "--config=configs/demo.py",
            f"--workdir={workdir}", f"--config.data.data_dir={data_dir}",
            "--config.data.vocab_size=200", "--config.data.num_shards=2",
            "--config.data.tokens_per_batch=1024", "--config.model.num_layers=1",
            "--config.model.d_model=32", "--config.model.d_ff=64",
            f"--config.train.num_steps={STEPS}", "--config.train.log_every=1",
            "--config.train.eval_every=4", "--config.train.eval_batches=1",
            "--config.train.checkpoint_every=2", "--config.train.bleu_sentences=0",
            "--config.train.samples=0", "--config.train.visualize_sentences=()",
            f"--config.train.parallel={parallel}", "--config.model.dropout_rate=0.0",
            "--config.train.peak_flops=1e12"]  # no matmul probe: test_main.py has the one


def env(devices):
    e = dict(os.environ, JAX_PLATFORMS="cpu",
             XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
    e.pop("JAX_COORDINATOR_ADDRESS", None)
    return e


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train_lines(workdir):
    lines = [json.loads(x) for x in (workdir / "metrics.jsonl").read_text().splitlines()]
    return [x for x in lines if x["split"] == "train"]


@pytest.mark.slow
@pytest.mark.parametrize("parallel", ["pmap", "sharded"])
def test_two_processes_match_one(tmp_path, builtin_data_dir, parallel):
    one = tmp_path / "one"
    single = subprocess.run(run_args(builtin_data_dir, one, parallel), cwd=ROOT, env=env(8),
                            capture_output=True, text=True, timeout=600)
    assert single.returncode == 0, single.stderr[-3000:]

    two = tmp_path / "two"
    port = free_port()
    procs = [subprocess.Popen(
        [*run_args(builtin_data_dir, two, parallel), f"--coordinator_address=127.0.0.1:{port}",
         "--num_processes=2", f"--process_id={i}"], cwd=ROOT, env=env(4),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    outputs = [p.communicate(timeout=600) for p in procs]
    for p, (_, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err[-3000:]
    assert "process 1 of 2, 4 local / 8 global devices" in outputs[1][1]

    a, b = train_lines(one), train_lines(two)
    # Only process 0 logs: one line per step, not two.
    assert [x["step"] for x in a] == [x["step"] for x in b] == list(range(1, STEPS + 1))
    for x, y in zip(a, b, strict=True):
        assert y["loss"] == pytest.approx(x["loss"], rel=1e-5), x["step"]
        assert y["grad_norm"] == pytest.approx(x["grad_norm"], rel=1e-4), x["step"]
    # One TensorBoard event file, and one for the hparams dashboard: process 0's alone.
    tb = two / "tb"
    assert len([p for p in tb.iterdir() if p.is_file()]) == 1
    assert len(list((tb / "hparams").iterdir())) == 1
    # Both processes saved their data-loader positions; the metadata was written once.
    last = two / "checkpoints" / str(STEPS)
    assert sorted(p.name for p in (last / "data").glob("*.json")) == [
        "process_0-of-2.json", "process_1-of-2.json"]
    meta = json.loads((last / "meta" / "metadata").read_text())
    assert meta["step"] == STEPS
