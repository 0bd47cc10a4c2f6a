"""Train-step throughput and model-FLOPs utilisation (MFU) of the demo and base models, and
what rows sized to short sentences gain.

    python experiments/benchmarks/train_throughput.py            # demo and base, sharded and pmap
    python experiments/benchmarks/train_throughput.py --quick    # fewer steps
    python experiments/benchmarks/train_throughput.py --configs=big --dtype=bfloat16  # on a GPU
    python experiments/benchmarks/train_throughput.py --configs=short  # rows sized to the data

Batches are synthetic (random ids, two packed sentences per row), so the input pipeline is
not measured here (experiments/benchmarks/input_pipeline.py does that). FLOPs per target
token are 6 x (non-embedding + output-projection parameters) + attention
(transformer_jax.params.train_flops_per_token). The peak is the accelerator's data-sheet
figure, or on a CPU the best 4096^3 matmul measured in this process before and after the
runs. The base model on a CPU takes the batch one of the paper's 8 GPUs did: 25,000 / 8,
about 3,072 target tokens (12 rows of 256); the shape of every matmul but the batch
dimension is the paper's. --tokens sets it.

``short`` is another kind of case: real batches of short sentences. The built-in corpus
(100,000 pairs of 4-25 words) is written as TSV files and read through the text-file path
(``pipeline.data_for``: the vocabulary, the largest up to 8,000 pieces the corpus supports,
and packing) into batches of 4,096 target slots, for the demo model widened to d_model 256
(d_ff 1,024, 4 heads, 3 + 3 layers). Two halves train the same model: rows sized to the
data (``data.row_len=0``) with the default attention kernel, against rows of 256 slots
(``data.max_len``, how the text path packed before) with the dense kernel. Their batches are
read before timing, so the pipeline is not measured; after compiling, the halves take turns,
``--steps`` steps a turn (default 1) for ``--repeats`` turns (default 10), so that a machine's
changing load falls on both alike. Tokens/s counts real target tokens (padding excluded);
``short_rows_speedup`` is the ratio of the two halves' tokens/s over all their turns, and
should be at least 1.25. The ratio of each turn is printed too: on a shared machine their
spread shows how much the load moved. ``short_flops_ratio`` is what the same FLOP rate in
both halves would give: the ratio of their model FLOPs per real target token
(``counts.train_flops_per_token`` at each row length, over the share of slots not padding).

Ends with one JSON line of the headline figures.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script, transformer_jax/ is not importable otherwise
    sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from transformer_jax import config as config_lib, paper  # noqa: E402
from transformer_jax.data import batching, corpus, pipeline  # noqa: E402
from transformer_jax.model import counts  # noqa: E402
from transformer_jax.model.transformer import TransformerConfig  # noqa: E402
from transformer_jax.training import hardware, parallel  # noqa: E402
from transformer_jax.training.step import create_train_state, make_executor  # noqa: E402

SIZES = {  # name -> (variant, vocabulary, max_len, CPU tokens per step, accelerator tokens)
    "demo": ("demo", 1000, 64, 2048, 2048),
    "base": ("base", paper.VOCAB_SIZE_EN_DE, 256, 3072, 25000),
    "big": ("big", paper.VOCAB_SIZE_EN_DE, 256, 3072, 25000),
}


def synthetic_batch(rows: int, length: int, vocab: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Rows of two packed sentences each, no padding."""
    rng = np.random.default_rng(seed)
    half = length // 2
    segment = np.where(np.arange(length) < half, 1, 2).astype(np.int32)
    position = np.where(np.arange(length) < half, np.arange(length),
                        np.arange(length) - half).astype(np.int32)
    batch = {}
    for f in ("inputs", "targets"):
        batch[f] = rng.integers(3, vocab, (rows, length)).astype(np.int32)
        batch[f + "_segment_ids"] = np.broadcast_to(segment, (rows, length)).copy()
        batch[f + "_positions"] = np.broadcast_to(position, (rows, length)).copy()
    return batch


def build_config(name: str, kind: str, dtype: str, on_cpu: bool):
    variant, vocab, max_len, cpu_tokens, accel_tokens = SIZES[name]
    if variant == "demo":
        import importlib.util

        spec = importlib.util.spec_from_file_location(
            "demo_config", os.path.join(os.path.dirname(__file__), "../../configs/demo.py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        config = module.get_config()
    else:
        config = config_lib.build(variant)
    config.model.dtype = dtype
    config.train.parallel = kind
    config.data.max_len = max_len
    return config, vocab, max_len, cpu_tokens if on_cpu else accel_tokens


def measure(name: str, kind: str, dtype: str, steps: int, tokens: int | None) -> dict:
    on_cpu = jax.devices()[0].platform == "cpu"
    config, vocab, max_len, default_tokens = build_config(name, kind, dtype, on_cpu)
    return {"config": name, "parallel": kind, "dtype": dtype,
            **measure_config(config, vocab, tokens or default_tokens, steps)}


def measure_config(config, vocab: int, tokens: int, steps: int) -> dict:
    """Times ``steps`` train steps of ``config`` (model, dtype, parallel kind; sequences of
    ``config.data.max_len``; ``config.train.devices`` local devices, 0: all) on synthetic
    batches of about ``tokens`` target tokens."""
    max_len = config.data.max_len
    devices = len(parallel.local_devices(config.train.devices))
    rows = max(tokens // max_len // devices, 1) * devices
    model_config = TransformerConfig.from_config(config.model, vocab)
    state = create_train_state(config, model_config, jax.random.key(0))
    executor = make_executor(config, model_config, state)
    placed = executor.place(state)
    batch = synthetic_batch(rows, max_len, vocab)
    key = jax.random.key(1)
    start = time.perf_counter()
    placed, metrics = executor.train(placed, batch, key)
    jax.block_until_ready(metrics)
    compile_s = time.perf_counter() - start
    placed, metrics = executor.train(placed, batch, key)  # one more warm-up step
    jax.block_until_ready(metrics)
    faults = page_faults()
    start = time.perf_counter()
    for _ in range(steps):
        placed, metrics = executor.train(placed, batch, key)
    jax.block_until_ready(metrics)
    step_s = (time.perf_counter() - start) / steps
    faults = (page_faults() - faults) / steps
    target_tokens = rows * max_len
    flops = counts.train_flops_per_token(model_config, max_len) * target_tokens
    return {"devices": devices, "rows": rows, "max_len": max_len,
            "tokens_per_step": target_tokens, "step_s": step_s,
            "tokens_per_s": target_tokens / step_s, "flops_per_step": flops,
            "compile_s": compile_s, "page_faults_per_step": faults}


def page_faults() -> int:
    """Minor page faults of this process so far (0 where the platform does not count them).
    On a CPU, XLA allocates a step's temporaries afresh and frees them after it; glibc's
    malloc returns blocks above 32 MB to the system, so each step faults their pages in
    again, and the time that takes is part of the step's."""
    try:
        import resource
    except ImportError:
        return 0
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


# The short-sentence case: the model, batch and vocabulary of the measurement.
SHORT_MODEL = {"model.d_model": 256, "model.d_ff": 1024, "model.max_len": 256}
SHORT_DATA = {"data.max_len": 256, "data.tokens_per_batch": 4096,
              "data.vocab_size": 8000,  # the built-in corpus supports about 3,900
              "data.vocab_sample": 10_000_000}  # characters per side: all of it
SHORT_GOAL = 1.25


def write_builtin_tsv(directory: Path) -> dict[str, str]:
    """The built-in corpus's train and validation splits as ``source<TAB>target`` files, as
    sources.BuiltinCorpus stores them (detokenized): {"data.train_files": path, ...}."""
    files = {}
    for split, field in (("train", "data.train_files"), ("validation", "data.eval_files")):
        pairs = corpus.build_corpus(seed=0, sizes={split: corpus.SPLITS[split]})[split]
        path = directory / f"{split}.tsv"
        path.write_text("".join(f"{corpus.detokenize(en)}\t{corpus.detokenize(de)}\n"
                                for en, de in pairs), encoding="utf-8")
        files[field] = str(path)
    return files


def short_config(files: dict[str, str], dtype: str, kind: str, row_len: int, attention: str):
    config = build_config("demo", kind, dtype, True)[0]
    config_lib.apply_overrides(config, {
        "data.name": "text", **files, **SHORT_MODEL, **SHORT_DATA, "data.row_len": row_len,
        "model.attention": attention, "model.dtype": dtype, "train.parallel": kind,
        "train.bleu_sentences": 0, "train.samples": 0, "train.visualize_sentences": ()},
        origin="train_throughput short")
    return config_lib.validate(config)


def measure_short(dtype: str, kind: str, steps: int, repeats: int) -> dict:
    """Target tokens/s of the two halves of the ``short`` case (see the module docstring),
    timed in turns; returns the figures of each half and their ratio."""
    default_kernel = config_lib.base_config().model.attention
    halves = {"sized": (0, default_kernel), "rows256": (256, "dense")}
    with tempfile.TemporaryDirectory(prefix="short_rows_") as tmp:
        files = write_builtin_tsv(Path(tmp))
        runs = {}
        for name, (row_len, kernel) in halves.items():
            config = short_config(files, dtype, kind, row_len, kernel)
            devices = len(parallel.local_devices(config.train.devices))
            # One workdir: the vocabulary is trained once and shared by both halves.
            data = pipeline.data_for(config, Path(tmp) / "workdir", devices, 0, 1)
            batches = [next(data.train.iterator) for _ in range(2 + steps * repeats)]
            model_config = TransformerConfig.from_config(config.model,
                                                         data.tokenizer.vocab_size)
            state = create_train_state(config, model_config, jax.random.key(0))
            executor = make_executor(config, model_config, state)
            runs[name] = {"executor": executor, "state": executor.place(state),
                          "batches": batches, "row_len": data.shape.row_len,
                          "rows": data.rows, "kernel": kernel,
                          "vocab": data.tokenizer.vocab_size, "seconds": 0.0, "tokens": 0,
                          "turns": [], "model_config": model_config,
                          "padding": float(np.mean([batching.padding_fraction(b)
                                                    for b in batches]))}
    key = jax.random.key(1)

    def run_steps(run: dict, batches: list) -> float:
        start = time.perf_counter()
        for batch in batches:
            run["state"], metrics = run["executor"].train(run["state"], batch, key)
        jax.block_until_ready(metrics)
        return time.perf_counter() - start

    for run in runs.values():
        run["compile_s"] = run_steps(run, run["batches"][:1])
        run_steps(run, run["batches"][1:2])  # one more warm-up step
    for turn in range(repeats):
        for run in runs.values():
            batches = run["batches"][2 + turn * steps:2 + (turn + 1) * steps]
            seconds = run_steps(run, batches)
            tokens = sum(int(np.sum(b["targets_segment_ids"] > 0)) for b in batches)
            run["seconds"] += seconds
            run["tokens"] += tokens
            run["turns"].append(tokens / seconds)
    out = {}
    for name, run in runs.items():
        tokens_per_s = run["tokens"] / run["seconds"]
        step_s = run["seconds"] / (steps * repeats)
        print(f"short {name:8s} {dtype}: {step_s * 1e3:8.1f} ms/step  {tokens_per_s:9.0f} "
              f"target tokens/s  (batch {run['rows']} x {run['row_len']}, {run['kernel']} "
              f"attention, padding {run['padding']:.1%}, vocabulary {run['vocab']}, compile "
              f"{run['compile_s']:.0f} s)", flush=True)
        # Model FLOPs per real target token: a slot's, over the share of slots that hold one.
        flops = counts.train_flops_per_token(run["model_config"], run["row_len"]) / (
            1.0 - run["padding"])
        out[name] = {"tokens_per_s": tokens_per_s, "row_len": run["row_len"],
                     "kernel": run["kernel"], "step_s": step_s, "flops_per_token": flops}
    out["speedup"] = out["sized"]["tokens_per_s"] / out["rows256"]["tokens_per_s"]
    out["flops_ratio"] = out["rows256"]["flops_per_token"] / out["sized"]["flops_per_token"]
    print(f"short: model FLOPs per real target token {out['sized']['flops_per_token'] / 1e6:.1f}M "
          f"sized, {out['rows256']['flops_per_token'] / 1e6:.1f}M in rows of 256 (attention and "
          f"padding): at equal FLOP rates the sized rows would be {out['flops_ratio']:.2f}x as "
          "fast")
    turns = [a / b for a, b in zip(runs["sized"]["turns"], runs["rows256"]["turns"],
                                   strict=True)]
    print("short: tokens/s ratio of each turn " + ", ".join(f"{r:.2f}" for r in turns) +
          f" (median {statistics.median(turns):.2f})")
    verdict = "PASS" if out["speedup"] >= SHORT_GOAL else "FAIL"
    print(f"goal: short_rows_speedup >= {SHORT_GOAL}: {verdict} ({out['speedup']:.2f}x, rows "
          f"of {out['sized']['row_len']} against rows of 256)")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--configs", default="demo,base")
    parser.add_argument("--parallel", default="sharded,pmap")
    parser.add_argument("--dtype", default="", help="float32 (CPU default) or bfloat16")
    parser.add_argument("--steps", type=int, default=0,
                        help="timed steps (default 10 / 3; short: a turn, default 1)")
    parser.add_argument("--repeats", type=int, default=10, help="short: turns of each half")
    parser.add_argument("--tokens", type=int, default=0, help="target tokens per step")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()

    device = jax.devices()[0]
    on_cpu = device.platform == "cpu"
    dtype = args.dtype or ("float32" if on_cpu else "bfloat16")
    probe_before = hardware.matmul_probe.__wrapped__(dtype=dtype) if on_cpu else 0.0
    results, short = [], None
    for name in args.configs.split(","):
        if name == "short":  # one parallel kind: the rows are what it compares
            short = measure_short(dtype, args.parallel.split(",")[0],
                                  args.steps or 1,
                                  2 if args.quick else args.repeats)
            continue
        for kind in args.parallel.split(","):
            steps = args.steps or (2 if args.quick else (10 if name == "demo" else 3))
            r = measure(name, kind, dtype, steps, args.tokens or None)
            results.append(r)
            print(f"{name:5s} {kind:8s} {dtype}: {r['step_s'] * 1e3:8.1f} ms/step  "
                  f"{r['tokens_per_s']:9.0f} target tokens/s  (batch {r['rows']} x "
                  f"{r['max_len']}, compile {r['compile_s']:.0f} s, "
                  f"{r['page_faults_per_step']:,.0f} page faults a step)", flush=True)
    if on_cpu:
        probe_after = hardware.matmul_probe.__wrapped__(dtype=dtype)
        peak = max(probe_before, probe_after)
        peak_source = (f"{dtype} 4096^3 matmul in this process: {probe_before / 1e9:.1f} "
                       f"before, {probe_after / 1e9:.1f} after (GFLOP/s)")
    else:
        peak = (hardware.known_peak(device) or 0.0) * jax.device_count()
        peak_source = f"{device.device_kind} data sheet x {jax.device_count()}"
    print(f"peak: {peak / 1e9:.1f} GFLOP/s ({peak_source})")
    for r in results:
        r["mfu"] = r["flops_per_step"] / r["step_s"] / peak if peak else None
        print(f"{r['config']:5s} {r['parallel']:8s} MFU {r['mfu']:.1%}")
    base = [r["mfu"] for r in results if r["config"] == "base" and r["mfu"]]
    if on_cpu and base:
        verdict = "PASS" if max(base) >= 0.55 else "FAIL"
        print(f"goal: base-config MFU >= 55% on CPU: {verdict} ({max(base):.1%})")
    summary = {
        "benchmark": "train_throughput", "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()} {device.device_kind} x{jax.device_count()}",
        "peak_flops": peak, "dtype": dtype,
        **{f"{r['config']}_{r['parallel']}_tokens_per_s": round(r["tokens_per_s"], 1)
           for r in results},
        **{f"{r['config']}_{r['parallel']}_mfu": round(r["mfu"], 4) if r["mfu"] else None
           for r in results},
    }
    if short is not None:
        summary.update({
            "short_sized_tokens_per_s": round(short["sized"]["tokens_per_s"], 1),
            "short_rows256_tokens_per_s": round(short["rows256"]["tokens_per_s"], 1),
            "short_row_len": short["sized"]["row_len"],
            "short_kernels": f"{short['sized']['kernel']} / {short['rows256']['kernel']}",
            "short_rows_speedup": round(short["speedup"], 3),
            "short_flops_ratio": round(short["flops_ratio"], 3)})
    print(json.dumps(summary))


if __name__ == "__main__":
    jnp.zeros(())  # initialise the backend before timing anything
    main()
