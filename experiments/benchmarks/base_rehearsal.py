"""The paper's base run at its true shapes, rehearsed end to end on locally prepared WMT data.

    python experiments/benchmarks/base_rehearsal.py [--pairs=200000] [--steps=5]
        [--accum_measured=2] [--sentences=100]

1. statmt-format archives of ``--pairs`` training pairs of random words at WMT-like lengths
   (``prepare_wmt.py``), prepared as ``wmt14_ende`` by TFDS's real builder
   (``transformer_jax.data.prepare``) from a local mirror;
2. ``configs/wmt14_ende.py:base`` on it: the paper's 37,000-piece vocabulary learned from it
   (10M characters per side), rows of 256 slots, the base model (65M parameters);
3. ``--steps`` optimizer steps with a checkpoint after each (5 kept), on one CPU device;
4. ``python -m transformer_jax.evaluate``'s evaluation of the average of the 5 checkpoints:
   beam 4 (alpha 0.6) over the first ``--sentences`` of newstest2014, both BLEUs.

The paper's step is ~25,000 target tokens. A step of it takes minutes on a CPU, so the steps
measured hold ``--accum_measured`` accumulated micro-batches of the shape the full step would
have with 8 of them (``data.tokens_per_batch`` = 25,000 x accum_measured / 8,
``optim.grad_accum_steps`` = accum_measured); the full step's time is scaled from it by
8 / accum_measured (the micro-batches of a step run one after the other). Prints the time of
each phase (vocabulary, the first step with its compilation, a step, a save, the averaged
evaluation), the peak host memory and the checkpoint size, and ends with one JSON line.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# Micro-batches of the full step in this rehearsal: 25,000 / 8 = 3,125 slots, 12 rows of 256.
FULL_ACCUM = 8


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def rehearse(work: Path, *, pairs: int, steps: int, accum_measured: int, sentences: int,
             vocab_size: int | None = None, vocab_sample: int | None = None,
             tokens_per_step: int | None = None, model: dict[str, Any] | None = None,
             keep: int = 5) -> dict[str, Any]:
    """Runs the whole rehearsal under ``work``; returns its figures. The keyword arguments
    after ``sentences`` shrink it (the slow test's): None keeps the paper's."""
    import tensorflow_datasets as tfds

    from experiments.benchmarks import prepare_wmt
    from transformer_jax.data import (
        pipeline,
        prepare,
        sources,
        statmt_mirror,
        tokenizer as tokenizer_lib,
    )
    from transformer_jax.evaluation import restore, score
    from transformer_jax.io import layout, metric_keys, workdirs
    from transformer_jax.training import train

    figures: dict[str, Any] = {}
    start = time.perf_counter()
    archives = prepare_wmt.write_wmt_like(work / "statmt", pairs)
    data_dir = str(work / "tfds")
    prepare.tfds_dataset("wmt14_ende")
    with statmt_mirror.serve(archives, tfds.builder_cls("wmt14_translate")):
        figures["pairs"] = prepare.prepare("wmt14_ende", data_dir)
    figures["data_s"] = time.perf_counter() - start

    config = importlib.import_module("configs.wmt14_ende").get_config("base")
    d, t = config.data, config.train
    full_tokens = tokens_per_step or d.tokens_per_batch
    d.update(data_dir=data_dir, row_len=256)
    if vocab_size:
        d.vocab_size = vocab_size
    if vocab_sample:
        d.vocab_sample = vocab_sample
    d.tokens_per_batch = full_tokens * accum_measured // FULL_ACCUM
    config.optim.grad_accum_steps = accum_measured
    config.model.update(model or {})
    t.update(num_steps=steps, log_every=1, eval_every=steps, eval_batches=1,
             checkpoint_every=1, keep_checkpoints=keep, average_checkpoints=keep,
             bleu_sentences=0, samples=0, devices=1)
    workdir = work / "run"
    workdir.mkdir()

    start = time.perf_counter()  # the vocabulary, as the run would train it (data_for's call)
    train_source = sources.get_source(d, "train")
    tokenizer = tokenizer_lib.load_or_train(
        workdir, pipeline.vocab_sample(train_source, d.vocab_sample, 0), d.vocab_size)
    figures["vocab_s"] = time.perf_counter() - start
    figures["vocab_size"] = tokenizer.vocab_size

    start = time.perf_counter()
    train.train_and_evaluate(config, workdir)
    figures["train_s"] = time.perf_counter() - start
    records = workdirs.read_metrics(workdir)[metric_keys.TRAIN]
    step_s = {step: 1 / r[metric_keys.STEPS_PER_S] for step, r in records.items()}
    figures["first_step_s"] = step_s[1]  # with its compilation
    later = [s for step, s in step_s.items() if step > 1]
    figures["step_measured_s"] = statistics.median(later)
    figures["step_full_s"] = figures["step_measured_s"] * FULL_ACCUM / accum_measured
    figures["tokens_per_s"] = statistics.median(
        r[metric_keys.TOKENS_PER_S] for step, r in records.items() if step > 1)
    ckpt_dir = workdir / layout.CHECKPOINTS
    steps_saved = sorted(int(p.name) for p in ckpt_dir.iterdir() if p.name.isdigit())
    figures["checkpoints_kept"] = len(steps_saved)
    figures["checkpoint_mb"] = _dir_bytes(ckpt_dir / str(steps_saved[-1])) / 2**20
    figures["save_s"] = _time_a_save(config, tokenizer.vocab_size, work / "save")

    start = time.perf_counter()
    result = score.evaluate_workdir(workdir, restore.WorkdirSpec.from_config(config),
                                    pipeline.DataSpec.from_config(config), "test", keep,
                                    sentences)
    figures["evaluate_s"] = time.perf_counter() - start
    figures["averaged_checkpoints"] = result["checkpoints"]
    figures["sentences"] = result["sentences"]
    figures["bleu"] = result["bleu"]
    figures["tokenized_bleu"] = result["tokenized_bleu"]
    figures["peak_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    figures["rows_per_micro_batch"] = d.tokens_per_batch // accum_measured // 256
    figures["accum_measured"] = accum_measured
    return figures


def _time_a_save(config: Any, vocab_size: int, directory: Path) -> float:
    """Seconds to write one checkpoint of the run's state (parameters and Adam's moments)
    with the project's checkpointing, waited for."""
    import jax

    from transformer_jax.io import checkpoints
    from transformer_jax.model.spec import TransformerConfig
    from transformer_jax.training.step import create_train_state

    model_config = TransformerConfig.from_config(config.model, vocab_size)
    state = create_train_state(config, model_config, jax.random.key(0))
    jax.block_until_ready(state)
    ckpts = checkpoints.Checkpoints(directory, 1)
    start = time.perf_counter()
    ckpts.save(1, state, None, {"step": 1, "vocab_size": vocab_size}, force=True)
    ckpts.wait()
    seconds = time.perf_counter() - start
    ckpts.close()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=200_000)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--accum_measured", type=int, default=2)
    parser.add_argument("--sentences", type=int, default=100)
    args = parser.parse_args()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    from transformer_jax import cli

    cli.setup_logging()
    with tempfile.TemporaryDirectory() as tmp:
        f = rehearse(Path(tmp), pairs=args.pairs, steps=args.steps,
                     accum_measured=args.accum_measured, sentences=args.sentences)
    print(f"base on {f['pairs']['train']:,} local WMT-format pairs, {os.cpu_count()} CPUs")
    print(f"  data written and prepared: {f['data_s']:.0f} s")
    print(f"  vocabulary ({f['vocab_size']:,} pieces): {f['vocab_s']:.0f} s")
    print(f"  first step (compilation included): {f['first_step_s']:.0f} s")
    print(f"  a step of {f['accum_measured']} x {f['rows_per_micro_batch']} rows x 256: "
          f"{f['step_measured_s']:.0f} s; the full ~25,000-token step ({FULL_ACCUM} of them): "
          f"{f['step_full_s']:.0f} s (scaled)")
    print(f"  a save: {f['save_s']:.1f} s, checkpoint {f['checkpoint_mb']:.0f} MB, "
          f"{f['checkpoints_kept']} kept")
    print(f"  beam-4 evaluation of {f['sentences']} sentences, average of checkpoints "
          f"{f['averaged_checkpoints']}: {f['evaluate_s']:.0f} s; BLEU {f['bleu']:.2f}, "
          f"tokenized BLEU {f['tokenized_bleu']:.2f}")
    print(f"  peak host memory (RSS): {f['peak_rss_gb']:.1f} GB")
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in f.items()}))


if __name__ == "__main__":
    main()
