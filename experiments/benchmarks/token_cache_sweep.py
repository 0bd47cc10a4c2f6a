"""A sweep of 4 points on a corpus of a million pairs tokenizes it once.

    python experiments/benchmarks/token_cache_sweep.py [--pairs=1000000] [--points=4]

Writes a text corpus of ``--pairs`` training pairs (the built-in corpus's grammar, as TSV)
and runs the same sweep twice with the ordinary sweep command, each point a training run of
2 steps of a small model (the data side is what is measured):

* shared (this version): ``--grid=optim.lr_scale=...``; the points share the vocabulary
  (copied by the sweep) and the token cache at the sweep root (``ROOT/tokens/``);
* per point (before: each run's cache beside its own vocabulary): the same points, each
  given a cache folder of its own (``--grid=data.token_cache_dir=cache0,...``), which is
  what every point of a sweep did before the cache was shared.

For each, from the points' logs and the cache folders: how many times each split was
tokenized, the seconds that took (wall and CPU time of the writing, as each point logged it)
and the bytes written, and the sweep's total CPU time (all its processes). Ends with one JSON line.
Measure on a quiet machine or read the ratios: the sweep runs its points one after another.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from transformer_jax.data import corpus  # noqa: E402

ONCE = re.compile(r"tokenized (\S+) once: (\d+) pairs in ([\d.]+)s \(([\d.]+) CPU-s\), "
                  r"([^\n]+?) -> (\S+)")
LR_SCALES = ("0.5", "1", "2", "4", "8", "16", "0.25", "0.125")


def write_corpus(directory: Path, pairs: int) -> dict[str, str]:
    """train.tsv of ``pairs`` pairs and dev.tsv of 1,000: {config field: file}."""
    splits = corpus.build_corpus(seed=0, sizes={"train": pairs, "validation": 1000})
    files = {}
    for split, name in (("train", "train.tsv"), ("validation", "dev.tsv")):
        path = directory / name
        path.write_text("".join(f"{corpus.detokenize(en)}\t{corpus.detokenize(de)}\n"
                                for en, de in splits[split]))
        files[split] = str(path)
    return {"data.train_files": files["train"], "data.eval_files": files["validation"],
            "data.test_files": files["validation"]}


def run_sweep(workdir: Path, root: str, grid: str, files: dict[str, str]) -> dict:
    """Runs the sweep in ``workdir`` (its cwd); returns its figures."""
    flags = [f"--config.{k}={v}" for k, v in files.items()] + [
        "--config.data.name=text", "--config.data.vocab_size=1000",
        "--config.data.vocab_sample=2000000", "--config.model.num_layers=1",
        "--config.model.d_model=32", "--config.model.d_ff=64", "--config.train.num_steps=2",
        "--config.train.log_every=1", "--config.train.eval_every=2",
        "--config.train.eval_batches=1", "--config.train.checkpoint_every=2",
        "--config.train.bleu_sentences=0", "--config.train.samples=0",
        "--config.train.visualize_sentences=()", "--config.train.peak_flops=1e12"]
    cmd = [sys.executable, "-m", "transformer_jax.sweep", str(ROOT / "configs/demo.py:base"),
           f"--root={root}", f"--grid={grid}", *flags]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.time()
    done = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True,
                          env=dict(os.environ, JAX_PLATFORMS="cpu"))
    wall = time.time() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        sys.exit(f"the sweep failed:\n{done.stderr[-3000:]}")
    writes: dict[str, list[tuple[float, float]]] = {}
    files_written = set()
    for log in sorted((workdir / root).glob("*/train.log")):
        for _, _, seconds, cpu, _, path in ONCE.findall(log.read_text()):
            split = Path(path).name.split("-")[0]  # the cache file is SPLIT-KEY.array_record
            writes.setdefault(split, []).append((float(seconds), float(cpu)))
            files_written.add(path)
    return {"points": len(list((workdir / root).glob("*/train.log"))),
            "writes": {k: len(v) for k, v in writes.items()},
            "tokenize_s": round(sum(s for v in writes.values() for s, _ in v), 1),
            "tokenize_cpu_s": round(sum(c for v in writes.values() for _, c in v), 1),
            "bytes_written": sum(os.path.getsize(p) for p in files_written),
            "cache_files": len(files_written), "wall_s": round(wall, 1),
            "cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime
                           - before.ru_stime, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=1_000_000)
    parser.add_argument("--points", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="token_cache_sweep-") as tmp:
        workdir = Path(tmp)
        start = time.process_time()
        files = write_corpus(workdir, args.pairs)
        size = os.path.getsize(files["data.train_files"])
        print(f"corpus: {args.pairs:,} training pairs ({size:,} bytes) written in "
              f"{time.process_time() - start:.0f} CPU-s")
        results = {
            "shared": run_sweep(workdir, "shared", "optim.lr_scale="
                                + ",".join(LR_SCALES[:args.points]), files),
            "per_point": run_sweep(workdir, "per_point", "data.token_cache_dir="
                                   + ",".join(f"cache{i}" for i in range(args.points)), files),
        }
    print(f"a sweep of {args.points} points on {args.pairs:,} pairs "
          f"({platform.processor() or platform.machine()}, {os.cpu_count()} cores)")
    for name, r in results.items():
        print(f"  {name:10s} tokenized {r['writes']} (times per split) in {r['tokenize_s']} s "
              f"({r['tokenize_cpu_s']} CPU-s), "
              f"{r['bytes_written'] / 2**20:.1f} MiB written in {r['cache_files']} files; "
              f"sweep {r['wall_s']} s wall, {r['cpu_s']} CPU-s")
    shared, per_point = results["shared"], results["per_point"]
    passed = set(shared["writes"].values()) == {1} and shared["points"] == args.points
    print(f"each split tokenized once for the {args.points} points: "
          f"{'PASS' if passed else 'FAIL'}; tokenizing {per_point['tokenize_cpu_s']} CPU-s -> "
          f"{shared['tokenize_cpu_s']} CPU-s, bytes {per_point['bytes_written']:,} -> "
          f"{shared['bytes_written']:,}")
    print(json.dumps({"benchmark": "token_cache_sweep", "pairs": args.pairs,
                      "points": args.points, **{f"{k}_{m}": v for k, r in results.items()
                                                for m, v in r.items()},
                      "passed": passed}))


if __name__ == "__main__":
    main()
