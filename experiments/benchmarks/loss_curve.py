"""The demo's loss curve: the first steps of ``configs/demo.py`` on seed 0, step by step.

    python experiments/benchmarks/loss_curve.py [--steps=30] [--parallel=pmap|sharded]
        [--grad_accum_steps=1] [--source=CHECKOUT] [--record=FILE] [--check=FILE]

Trains ``configs/demo.py`` for ``--steps`` optimizer steps in a temporary workdir with the
ordinary training command, logging every step, and prints each step's training loss
(label-smoothed, per target token), learning rate and gradient norm, and the validation
loss at the last step. ``--source`` runs another checkout's code (its package and its
``configs/demo.py``), so that a curve can be recorded at an earlier commit:

    git worktree add /tmp/at_01876bb 01876bb
    python experiments/benchmarks/loss_curve.py --source=/tmp/at_01876bb --parallel=pmap \
        --record=tests/fixtures/demo_loss_curve.json

``--record`` writes the curve with the commit, the command and the machine;
``--check`` compares this run with a recorded curve, at the tolerances of ``TOLERANCE``
(what ``tests/training/test_loss_curve.py`` holds training to), and exits 1 if it is not
within them. The
command line's settings are the config's, so the batches, dropout masks and schedule are
the demo's own: a change to the step, the batching or the order of the data moves them.
Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# A run's per-step values, by the key metrics.jsonl logs them under.
CURVE_KEYS = ("loss", "learning_rate", "grad_norm")

# The largest difference from the recorded curve that is not a change of training, per key
# (absolute). The paths and device counts (pmap on one device, jit over a mesh of eight, XLA
# at optimization level 0 as in the tests) differed by at most 3.6e-5 in the loss, 4.4e-4 in
# the gradient norm and 2.6e-5 in the validation loss over the first 30 steps (2026-12-04);
# consecutive steps' losses differ by 0.003-0.12, so another batch, dropout mask or learning
# rate at any step is far outside.
TOLERANCE = {"loss": 1e-3, "learning_rate": 1e-9, "grad_norm": 5e-3, "eval_loss": 1e-3}


def command(python: str, workdir: Path, steps: int, parallel: str, accum: int,
            data_dir: str = "") -> list[str]:
    """The training command: the demo's config, every step logged, nothing at the end but
    the validation loss (no BLEU, samples or pictures); ``data_dir`` where the built-in
    corpus is written (TFDS's default folder when empty; the corpus is the same anywhere)."""
    cmd = [python, "-m", "transformer_jax.main", "--config=configs/demo.py",
           f"--workdir={workdir}", f"--config.train.num_steps={steps}",
           "--config.train.log_every=1", f"--config.train.eval_every={steps}",
           f"--config.train.checkpoint_every={steps}", "--config.train.bleu_sentences=0",
           "--config.train.samples=0", "--config.train.visualize_sentences=()",
           f"--config.train.parallel={parallel}"]
    if accum != 1:
        cmd.append(f"--config.optim.grad_accum_steps={accum}")
    if data_dir:
        cmd.append(f"--config.data.data_dir={data_dir}")
    return cmd


def run(steps: int = 30, parallel: str = "pmap", accum: int = 1, source: Path = ROOT,
        python: str = sys.executable, env: dict[str, str] | None = None,
        data_dir: str = "") -> dict:
    """Trains the demo's first ``steps`` steps with the code of ``source``; returns
    {"train": {key: [value at step 1, 2, ...]}, "eval_loss": ..., "cpu_s": ...}."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join([str(source), env.get("PYTHONPATH", "")]).rstrip(
        os.pathsep)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp) / "run"
        cmd = command(python, workdir, steps, parallel, accum, data_dir)
        start = time.perf_counter()
        done = subprocess.run(cmd, cwd=source, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if done.returncode:
            raise SystemExit(f"training failed ({done.returncode}):\n{done.stderr[-3000:]}")
        records = [json.loads(line) for line in
                   (workdir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    train = {r["step"]: r for r in records if r.get("split") == "train"}
    evals = [r for r in records if r.get("split") == "eval" and r["step"] == steps]
    if sorted(train) != list(range(1, steps + 1)) or not evals:
        raise SystemExit(f"expected a train record at each step 1..{steps} and an eval at "
                         f"{steps}; got train steps {sorted(train)[:5]}...")
    curve = {k: [float(train[s][k]) for s in range(1, steps + 1)] for k in CURVE_KEYS}
    return {"train": curve, "eval_loss": float(evals[-1]["loss"]), "wall_s": round(wall, 1),
            "command": " ".join(cmd[1:]).replace(str(workdir), "WORKDIR")}


def commit_of(source: Path) -> str:
    done = subprocess.run(["git", "-C", str(source), "rev-parse", "--short=12", "HEAD"],
                          capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def differences(got: dict, recorded: dict) -> dict[str, float]:
    """The largest absolute difference of each per-step value, and of the validation loss."""
    out = {k: max(abs(a - b) for a, b in zip(got["train"][k], recorded["train"][k],
                                              strict=True))
           for k in CURVE_KEYS}
    out["eval_loss"] = abs(got["eval_loss"] - recorded["eval_loss"])
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--parallel", default="pmap", choices=("pmap", "sharded"))
    parser.add_argument("--grad_accum_steps", type=int, default=1)
    parser.add_argument("--source", type=Path, default=ROOT)
    parser.add_argument("--record", type=Path)
    parser.add_argument("--check", type=Path)
    args = parser.parse_args()
    got = run(args.steps, args.parallel, args.grad_accum_steps, args.source.resolve())
    for step, (loss, lr, g) in enumerate(zip(*(got["train"][k] for k in CURVE_KEYS),
                                             strict=True), 1):
        print(f"step {step:3d}  loss {loss:.6f}  lr {lr:.6g}  |g| {g:.5f}")
    print(f"validation loss at step {args.steps}: {got['eval_loss']:.6f} "
          f"({got['wall_s']} s)")
    summary = {"benchmark": "loss_curve", "steps": args.steps, "parallel": args.parallel,
               "grad_accum_steps": args.grad_accum_steps, "commit": commit_of(args.source),
               "final_train_loss": got["train"]["loss"][-1], "eval_loss": got["eval_loss"],
               "wall_s": got["wall_s"]}
    status = 0
    if args.record:
        record = {"commit": summary["commit"], "parallel": args.parallel,
                  "grad_accum_steps": args.grad_accum_steps, "command": got["command"],
                  "machine": f"{platform.machine()}, {os.cpu_count()} cores",
                  "date": time.strftime("%Y-%m-%d"), "train": got["train"],
                  "eval_loss": got["eval_loss"]}
        args.record.write_text(json.dumps(record, indent=1) + "\n")
    if args.check:
        diff = differences(got, json.loads(args.check.read_text()))
        summary["max_differences"] = diff
        for key, d in diff.items():
            ok = d <= TOLERANCE[key]
            status |= not ok
            print(f"{key}: largest difference {d:.3g} (tolerance {TOLERANCE[key]:g})"
                  f"{'' if ok else '  OUTSIDE'}")
        summary["within_tolerance"] = not status
    print(json.dumps(summary))
    return status


if __name__ == "__main__":
    sys.exit(main())
