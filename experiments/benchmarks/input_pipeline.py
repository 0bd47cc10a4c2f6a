"""Input pipeline throughput against what the train step consumes.

    python experiments/benchmarks/input_pipeline.py [--seconds=20] [--train_steps=40]

Measures, on this machine:

1. the training pipeline (read, tokenize, pack, batch; ``pipeline.data_for``) in target and
   source tokens per second (real tokens, padding excluded):
   * ``demo``: the built-in corpus at the demo config's shape (rows of 64 slots);
   * ``base, WMT-like``: pairs of WMT14-like length (built-in sentences joined, mean ~25
     words, a long tail to ~150) from a TSV file through the text path, at the base config's
     shape (~25,000 slots per step in rows of 256) and an 8,000-piece vocabulary (the most
     the built-in corpus supports; the paper's is 37,000);
2. the demo train step's consumption: target tokens/s of ``python -m transformer_jax.main``'s
   loop at configs/demo.py, measured over ``--train_steps`` steps after compilation;
3. the base model's consumption, not measured here: the paper's 8 P100 (25,000 target tokens
   in 0.4 s) and an estimate for one accelerator sustaining 200 TFLOP/s, from the FLOPs per
   target token of ``transformer_jax.params``.

Passes when the demo-shape pipeline delivers at least 10x the demo train step's target tokens
per second. Ends with one JSON line of the figures.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script, configs/ is not importable otherwise
    sys.path.insert(0, str(ROOT))

from configs import demo as demo_config  # noqa: E402
from transformer_jax import config as config_lib  # noqa: E402
from transformer_jax.data import (  # noqa: E402
    corpus,
    packing,
    pipeline,
    sources,
    tokenizer as tokenizer_lib,  # noqa: E402
)
from transformer_jax.io import workdirs  # noqa: E402
from transformer_jax.model import params  # noqa: E402
from transformer_jax.training import train  # noqa: E402

PAPER_BASE_TARGET_TOKENS_PER_S = 25_000 / 0.4  # 8 P100 GPUs, 0.4 s per step (section 5.2)
ASSUMED_ACCELERATOR_FLOPS = 200e12  # sustained train-step FLOP/s of one modern accelerator
REQUIRED_RATIO = 10.0


def pairs_in(batch: dict[str, np.ndarray]) -> int:
    """Sentence pairs in a packed batch (segment ids count 1, 2, ... within each row)."""
    return int(batch["targets_segment_ids"].max(axis=1).sum())


def measure_pipeline(config, workdir: Path, seconds: float) -> dict[str, float]:
    """Tokens/s of the config's training pipeline in its steady state.

    Reading threads work ahead by up to ``pipeline.PREFETCH_CHUNKS`` chunks, so the warm-up
XX
    faster, waits on every chunk) before ``seconds`` of timed batches.
    """
    _, data, rows, _, _ = pipeline.data_for(config, workdir, num_devices=1, process_index=0,
                                            process_count=1)
    warm = 0
    while warm < 2 * pipeline.PREFETCH_CHUNKS * pipeline.CHUNK_PAIRS:
        warm += pairs_in(next(data.iterator))
    target = source = batches = 0
    padding = []
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        batch = next(data.iterator)
        target += int(np.sum(batch["targets_segment_ids"] > 0))
        source += int(np.sum(batch["inputs_segment_ids"] > 0))
        padding.append(packing.padding_fraction(batch))
        batches += 1
    elapsed = time.perf_counter() - start
    return {"target_tokens_per_s": target / elapsed, "source_tokens_per_s": source / elapsed,
            "padding_fraction": float(np.mean(padding)), "rows": rows,
            "target_tokens_per_batch": target / batches}


def stage_costs(config, workdir: Path, pairs: int = 4096) -> dict[str, float]:
    """Microseconds per pair of each stage, on one chunk of the training split."""
    source = sources.get_source(config.data, "train")
    tok = tokenizer_lib.Tokenizer(tokenizer_lib.vocab_path(workdir))
    indices = np.random.default_rng(0).permutation(len(source))[:pairs]
    t0 = time.perf_counter()
    read = pipeline.read_pairs(source, indices)
    t1 = time.perf_counter()
    inputs, targets = pipeline.encode_pairs(tok, read)
    t2 = time.perf_counter()
    keep = [max(len(a), len(b)) <= config.data.max_len for a, b in zip(inputs, targets,
                                                                        strict=True)]
    packing.pack([a for a, k in zip(inputs, keep, strict=True) if k],
                 [b for b, k in zip(targets, keep, strict=True) if k], config.data.max_len)
    t3 = time.perf_counter()
    n = len(indices)
    return {"read_us": (t1 - t0) / n * 1e6, "tokenize_us": (t2 - t1) / n * 1e6,
            "pack_us": (t3 - t2) / n * 1e6}


def wmt_like_tsv(path: Path, num_pairs: int = 60_000, seed: int = 0) -> Path:
    """Built-in pairs joined 1..6 at a time: sentence lengths like WMT14's (mean ~25 words)."""
    pool = corpus.build_corpus(seed=seed, sizes={"train": 20_000})["train"]
    rng = np.random.default_rng(seed)
    lines = []
    for k in np.minimum(6, 1 + rng.poisson(1.3, num_pairs)):
        chosen = [pool[i] for i in rng.integers(0, len(pool), k)]
        lines.append(" ".join(corpus.detokenize(en) for en, _ in chosen) + "\t" +
                     " ".join(corpus.detokenize(de) for _, de in chosen))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def measure_demo_train_step(data_dir: Path, workdir: Path, steps: int) -> dict[str, float]:
    """Target tokens/s the demo config's training loop consumes, after compilation."""
    c = demo_config.get_config()
    c.data.data_dir = str(data_dir)
    log_every = steps // 2
    c.train.update(num_steps=2 * log_every, log_every=log_every, eval_every=2 * log_every,
                   checkpoint_every=2 * log_every, eval_batches=1, bleu_sentences=0, samples=0)
    train.train_and_evaluate(c, workdir)
    last = workdirs.read_metrics(workdir)["train"][2 * log_every]
    # The first interval includes compilation; the second is the steady state.
    return {"target_tokens_per_s": last["tokens_per_s"],
            "source_tokens_per_s": last.get("source_tokens_per_s", math.nan),
            "steps_per_s": last.get("steps_per_s", math.nan)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0,
                        help="seconds each pipeline is timed for, after its warm-up")
    parser.add_argument("--train_steps", type=int, default=40,
                        help="demo train steps (the second half is timed)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    for noisy in ("absl", "jax", "orbax", "etils", "tensorflow_datasets", "grain"):
        logging.getLogger(noisy).setLevel(logging.ERROR)

    with tempfile.TemporaryDirectory(prefix="input_pipeline_bench_") as tmp:
        run(Path(tmp), args)


def run(tmp: Path, args: argparse.Namespace) -> None:
    """Measures everything with its files under ``tmp`` and prints the figures."""
    data_dir = tmp / "tfds"
    sources.prepare_builtin(str(data_dir))

    demo = demo_config.get_config()
    demo.data.data_dir = str(data_dir)
    demo_pipe = measure_pipeline(demo, tmp / "demo_pipe", args.seconds)
    demo_stages = stage_costs(demo, tmp / "demo_pipe")

    base = config_lib.build("base", "text")
    base.data.train_files = base.data.eval_files = str(wmt_like_tsv(tmp / "wmt_like.tsv"))
    base.data.vocab_size = 8000  # what the built-in vocabulary supports (the paper: 37,000)
    base.data.vocab_sample = 3_000_000
    base.data.row_len = base.data.max_len  # the base shape's rows of 256, not sized to the data
    base_pipe = measure_pipeline(base, tmp / "base_pipe", args.seconds)
    base_stages = stage_costs(base, tmp / "base_pipe")

    demo_train = measure_demo_train_step(data_dir, tmp / "demo_train", args.train_steps)
    flops = params.train_flops_per_token(
        params.model_config_of(config_lib.build("base")), 256)
    base_estimate = ASSUMED_ACCELERATOR_FLOPS / flops

    ratio = demo_pipe["target_tokens_per_s"] / demo_train["target_tokens_per_s"]
    passed = ratio >= REQUIRED_RATIO
    import jax

    load = os.getloadavg()[0]
    print(f"machine: {os.cpu_count()} CPU cores, load average {load:.1f} during the run; "
          f"train step on {jax.devices()[0].platform}")
    print("input pipeline (one process, target / source tokens per second, padding excluded)")
    for name, m, s in (("demo shape, built-in corpus", demo_pipe, demo_stages),
                       ("base shape, WMT-like lengths", base_pipe, base_stages)):
        print(f"  {name:30s} {m['target_tokens_per_s']:>10,.0f} / "
              f"{m['source_tokens_per_s']:>10,.0f}   padding {m['padding_fraction']:.1%}, "
              f"{m['rows']} rows, {m['target_tokens_per_batch']:,.0f} target tokens per batch")
        print(f"  {'':30s} per pair: read {s['read_us']:.0f} us, tokenize "
              f"{s['tokenize_us']:.0f} us, pack {s['pack_us']:.0f} us")
    print("train step consumption (target tokens per second)")
    print(f"  demo, measured on this machine   {demo_train['target_tokens_per_s']:>10,.0f}")
    print(f"  base, paper (8 P100, 0.4 s/step) {PAPER_BASE_TARGET_TOKENS_PER_S:>10,.0f}")
    print(f"  base, estimate for one accelerator at {ASSUMED_ACCELERATOR_FLOPS / 1e12:.0f} "
          f"TFLOP/s ({flops / 1e6:.0f} MFLOP per target token): {base_estimate:,.0f}")
    print(f"pipeline / demo train step: {ratio:.1f}x (need >= {REQUIRED_RATIO:.0f}x): "
          f"{'PASS' if passed else 'FAIL'}")
    print(f"pipeline (base shape) / paper's base step: "
          f"{base_pipe['target_tokens_per_s'] / PAPER_BASE_TARGET_TOKENS_PER_S:.1f}x")
    print(json.dumps({
        "pipeline_demo_target_tokens_per_s": round(demo_pipe["target_tokens_per_s"]),
        "pipeline_demo_padding_fraction": round(demo_pipe["padding_fraction"], 4),
        "pipeline_base_wmt_like_target_tokens_per_s": round(base_pipe["target_tokens_per_s"]),
        "pipeline_base_wmt_like_padding_fraction": round(base_pipe["padding_fraction"], 4),
        "demo_train_target_tokens_per_s": round(demo_train["target_tokens_per_s"]),
        "base_paper_target_tokens_per_s": round(PAPER_BASE_TARGET_TOKENS_PER_S),
        "base_estimate_target_tokens_per_s": round(base_estimate),
        "ratio_pipeline_to_demo_train": round(ratio, 1),
        "cpu_cores": os.cpu_count(), "load_average": round(load, 1),
        "pass": passed,
    }))


if __name__ == "__main__":
    main()
