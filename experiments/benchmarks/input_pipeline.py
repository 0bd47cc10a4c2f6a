"""Input pipeline throughput against what the train step consumes.

    python experiments/benchmarks/input_pipeline.py [--seconds=20] [--train_steps=40]

Measures, on this machine:

1. the training pipeline (read, pack, batch; ``pipeline.data_for``) in target and source
   tokens per second (real tokens, padding excluded), each shape two ways in the same run:
   reading ids from the token cache (``data.token_cache``, written on first use and timed
   here) and tokenizing with SentencePiece on the fly. Besides tokens per second of wall
   time, tokens per second of CPU time (all the process's threads): the rate of one reading
   core, which does not depend on how many cores other work leaves free.
   * ``demo``: the built-in corpus at the demo config's shape (rows of 64 slots);
   * ``base, WMT-like``: pairs of WMT14-like length (built-in sentences joined, mean ~25
     words, a long tail to ~150) from a TSV file through the text path, at the base config's
     shape (~25,000 slots per step in rows of 256) and an 8,000-piece vocabulary (the most
     the built-in corpus supports; the paper's is 37,000);
2. the demo train step's consumption: target tokens/s of ``python -m transformer_jax.main``'s
   loop at configs/demo.py, measured over ``--train_steps`` steps after compilation;
3. what one H100 consumes at ``TARGET_MFU`` on the base and the big model, not measured here:
   its bf16 peak (``training/hardware.py``) over the training FLOPs per target token of
   ``model/counts.py`` at rows of 256, and the reading cores that takes at the measured
   per-core rate of the base shape; and the paper's 8 P100 (25,000 target tokens in 0.4 s).

Passes when the demo-shape pipeline delivers at least 10x the demo train step's target tokens
per second and the cache delivers at least ``GOAL_PER_CORE`` target tokens per CPU-second at
the base shape. Ends with one JSON line of the figures.
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
    batching,
    corpus,
    order,
    packing,
    pipeline,
    sources,
    tokenizer as tokenizer_lib,
    tokens,
)
from transformer_jax.io import workdirs  # noqa: E402
from transformer_jax.model import counts  # noqa: E402
from transformer_jax.model.spec import TransformerConfig  # noqa: E402
from transformer_jax.training import hardware, train  # noqa: E402

PAPER_BASE_TARGET_TOKENS_PER_S = 25_000 / 0.4  # 8 P100 GPUs, 0.4 s per step (section 5.2)
ACCELERATOR = "H100"  # the accelerator whose consumption the reading cores must match
TARGET_MFU = 0.40  # the model-FLOPs utilisation it is assumed to train at
ROW_LEN = 256  # the base and big shapes' rows (data.max_len)
GOAL_PER_CORE = 1_000_000  # target tokens per CPU-second from the token cache, base shape
REQUIRED_RATIO = 10.0


def pairs_in(batch: dict[str, np.ndarray]) -> int:
    """Sentence pairs in a packed batch (segment ids count 1, 2, ... within each row)."""
    return int(batch["targets_segment_ids"].max(axis=1).sum())


def measure_pipeline(config, workdir: Path, seconds: float) -> dict[str, float]:
    """Tokens/s of the config's training pipeline in its steady state.

    Reading threads work ahead by up to ``batching.PREFETCH_CHUNKS`` chunks, so twice that
    many chunks' pairs are taken first (the read-ahead drained: from then on the trainer,
    being faster, waits on every chunk) before ``seconds`` of timed batches. The CPU time of
    the whole process over the timed batches gives the rate per reading core.
    """
    start = time.perf_counter()
    _, data, rows, _, _, *_ = pipeline.data_for(config, workdir, num_devices=1, process_index=0,
                                            process_count=1)
    setup = time.perf_counter() - start
    warm = 0
    while warm < 2 * batching.PREFETCH_CHUNKS * batching.CHUNK_PAIRS:
        warm += pairs_in(next(data.iterator))
    target = source = batches = 0
    padding = []
    start, cpu_start = time.perf_counter(), time.process_time()
    while time.perf_counter() - start < seconds:
        batch = next(data.iterator)
        target += int(np.sum(batch["targets_segment_ids"] > 0))
        source += int(np.sum(batch["inputs_segment_ids"] > 0))
        padding.append(packing.padding_fraction(batch))
        batches += 1
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    return {"target_tokens_per_s": target / elapsed, "source_tokens_per_s": source / elapsed,
            "target_tokens_per_cpu_s": target / cpu, "cores_busy": cpu / elapsed,
            "padding_fraction": float(np.mean(padding)), "rows": rows,
            "target_tokens_per_batch": target / batches, "setup_s": setup}


def measure_both(config, workdir: Path, seconds: float) -> dict[str, dict[str, float]]:
    """:func:`measure_pipeline` tokenizing on the fly, then reading the token cache (written
    on first use, within ``setup_s``), in one workdir (one vocabulary)."""
    config.data.token_cache = False
    fly = measure_pipeline(config, workdir, seconds)  # trains the vocabulary
    config.data.token_cache = True
    cache = measure_pipeline(config, workdir, seconds)  # writes the cache, then reads it
    return {"cache": cache, "fly": fly}


def stage_costs(config, workdir: Path, pairs: int = 4096) -> dict[str, float]:
    """Microseconds per pair of each stage, on one chunk of the training split: the epoch
    order, reading text and tokenizing it, or reading ids from the token cache, packing."""
    source = sources.get_source(config.data, "train")
    tok = tokenizer_lib.Tokenizer(tokenizer_lib.vocab_path(workdir))
    cached = pipeline.split_ids(pipeline.DataSpec.from_config(config), workdir, "train", tok,
                                source)
    fly = tokens.TokenizedPairs(source, tok)
    t0 = time.perf_counter()
    indices = order.Chunks(order.epoch_order(len(source), 0), pairs, endless=True)[3]
    t1 = time.perf_counter()
    read = tokens.read_pairs(source, indices)
    t2 = time.perf_counter()
    tokens.encode_pairs(tok, read)
    t3 = time.perf_counter()
    inputs, targets = cached.read_ids(indices)
    t4 = time.perf_counter()
    keep = np.maximum(inputs.lengths, targets.lengths) <= config.data.max_len
    packing.pack_ragged(inputs.take(keep), targets.take(keep), config.data.max_len)
    t5 = time.perf_counter()
    if (inputs.tolist(), targets.tolist()) != tuple(r.tolist() for r in fly.read_ids(indices)):
        raise AssertionError("the token cache's ids differ from SentencePiece's")
    n = len(indices)
    return {"order_us": (t1 - t0) / n * 1e6, "read_us": (t2 - t1) / n * 1e6,
            "tokenize_us": (t3 - t2) / n * 1e6, "cache_read_us": (t4 - t3) / n * 1e6,
            "pack_us": (t5 - t4) / n * 1e6}


def accelerator_consumption(variant: str) -> tuple[float, int]:
    """(target tokens/s, FLOPs per target token) of one ``ACCELERATOR`` training
    ``variant`` in rows of ``ROW_LEN`` at ``TARGET_MFU``."""
    config = config_lib.build(variant)
    model = TransformerConfig.from_config(config.model, config.data.vocab_size)
    flops = counts.train_flops_per_token(model, ROW_LEN)
    return TARGET_MFU * hardware.PEAK_FLOPS[ACCELERATOR] / flops, flops


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
    demo_pipe = measure_both(demo, tmp / "demo_pipe", args.seconds)
    demo_stages = stage_costs(demo, tmp / "demo_pipe")

    base = config_lib.build("base", "text")
    base.data.train_files = base.data.eval_files = str(wmt_like_tsv(tmp / "wmt_like.tsv"))
    base.data.vocab_size = 8000  # what the built-in vocabulary supports (the paper: 37,000)
    base.data.vocab_sample = 3_000_000
    base.data.row_len = ROW_LEN  # the base shape's rows of 256, not sized to the data
    base_pipe = measure_both(base, tmp / "base_pipe", args.seconds)
    base_stages = stage_costs(base, tmp / "base_pipe")

    demo_train = (measure_demo_train_step(data_dir, tmp / "demo_train", args.train_steps)
                  if args.train_steps else {"target_tokens_per_s": math.nan})
    per_core = base_pipe["cache"]["target_tokens_per_cpu_s"]
    per_core_fly = base_pipe["fly"]["target_tokens_per_cpu_s"]
    consumption = {v: accelerator_consumption(v) for v in ("base", "big")}
    cores = {v: tokens / per_core for v, (tokens, _) in consumption.items()}
    cores_fly = {v: tokens / per_core_fly for v, (tokens, _) in consumption.items()}

    ratio = demo_pipe["cache"]["target_tokens_per_s"] / demo_train["target_tokens_per_s"]
    passed = bool(ratio >= REQUIRED_RATIO and per_core >= GOAL_PER_CORE)
    import jax

    load = os.getloadavg()[0]
    print(f"machine: {os.cpu_count()} CPU cores, load average {load:.1f} during the run; "
          f"train step on {jax.devices()[0].platform}")
    print("input pipeline (one process; target tokens per second of wall time and per "
          "CPU-second, padding excluded)")
    for name, both, st in (("demo shape, built-in corpus", demo_pipe, demo_stages),
                           ("base shape, WMT-like lengths", base_pipe, base_stages)):
        m = both["cache"]
        print(f"  {name}: {m['rows']} rows, padding {m['padding_fraction']:.1%}, "
              f"{m['target_tokens_per_batch']:,.0f} target tokens per batch")
        for how, label in (("cache", "token cache"), ("fly", "on the fly")):
            r = both[how]
            print(f"    {label:12s} {r['target_tokens_per_s']:>11,.0f} /s  "
                  f"{r['target_tokens_per_cpu_s']:>11,.0f} per CPU-s  "
                  f"({r['cores_busy']:.2f} cores busy)")
        print(f"    setup with the token cache written: {m['setup_s']:.1f} s; per pair: order "
              f"{st['order_us']:.1f} us, text read {st['read_us']:.1f} us + tokenize "
              f"{st['tokenize_us']:.0f} us, or cache read {st['cache_read_us']:.1f} us; pack "
              f"{st['pack_us']:.1f} us")
    print("train step consumption (target tokens per second)")
    print(f"  demo, measured on this machine   {demo_train['target_tokens_per_s']:>10,.0f}")
    print(f"  base, paper (8 P100, 0.4 s/step) {PAPER_BASE_TARGET_TOKENS_PER_S:>10,.0f}")
    for v, (per_s, flops) in consumption.items():
        print(f"  {v}, one {ACCELERATOR} at {TARGET_MFU:.0%} MFU ({flops / 1e6:.0f} MFLOP per "
              f"target token): {per_s:,.0f}: {cores[v]:.2f} reading cores from the token "
              f"cache, {cores_fly[v]:.1f} on the fly")
    print(f"pipeline / demo train step: {ratio:.1f}x (need >= {REQUIRED_RATIO:.0f}x); token "
          f"cache at the base shape: {per_core:,.0f} target tokens per CPU-second (need >= "
          f"{GOAL_PER_CORE:,}): {'PASS' if passed else 'FAIL'}")
    figures = {}
    for shape, both in (("demo", demo_pipe), ("base_wmt_like", base_pipe)):
        for how, r in both.items():
            figures[f"pipeline_{shape}_{how}_target_tokens_per_s"] = round(
                r["target_tokens_per_s"])
            figures[f"pipeline_{shape}_{how}_target_tokens_per_cpu_s"] = round(
                r["target_tokens_per_cpu_s"])
        figures[f"pipeline_{shape}_padding_fraction"] = round(
            both["cache"]["padding_fraction"], 4)
        figures[f"token_cache_{shape}_setup_s"] = round(both["cache"]["setup_s"], 1)
    accel = ACCELERATOR.lower()
    print(json.dumps({
        **figures,
        "demo_train_target_tokens_per_s": round(demo_train["target_tokens_per_s"])
        if args.train_steps else None,
        "base_paper_target_tokens_per_s": round(PAPER_BASE_TARGET_TOKENS_PER_S),
        **{f"{v}_{accel}_target_tokens_per_s": round(t) for v, (t, _) in consumption.items()},
        **{f"{v}_{accel}_reading_cores": round(c, 2) for v, c in cores.items()},
        **{f"{v}_{accel}_reading_cores_on_the_fly": round(c, 1) for v, c in cores_fly.items()},
        "ratio_pipeline_to_demo_train": round(ratio, 1),
        "cpu_cores": os.cpu_count(), "load_average": round(load, 1),
        "pass": passed,
    }))


if __name__ == "__main__":
    main()
