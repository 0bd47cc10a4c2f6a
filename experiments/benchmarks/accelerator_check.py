"""The first thing to run on a new machine: what JAX sees there, and whether it trains, attends
and decodes as it should.

    make accelerator-check        # = python -m experiments.benchmarks.accelerator_check
    python -m experiments.benchmarks.accelerator_check --tiny   # tiny shapes: seconds on a CPU

Seven checks, each "passed", "failed", "measured" (a figure with no goal) or "skipped" with the
reason (what this device cannot do is never reported as passed):

* devices -- the platform, how many devices and of which kind, the JAX version;
* train_throughput -- train-step target tokens/s and MFU of base in float32 and bfloat16 and of
  big in bfloat16, on synthetic batches (train_throughput.py's measurement; MFU is
  meters.MfuMeter's, against the data-sheet bf16 peak of hardware.py, or on a CPU a matmul
  probe);
* attention_kernels -- the exact kernels (those of transformer_jax/model/kernels/ with the
  ``exact`` trait) agree on this device: outputs and the gradients of q, k and v of causal
  attention over two packed sentences a row, each kernel in bfloat16 against the dense kernel
  in float32 at the highest matmul precision, within OUTPUT_TOLERANCE and GRADIENT_TOLERANCE
  of the largest reference value; the blockwise kernel in float32 too, within
  FLOAT32_TOLERANCE; a kernel whose own implementation cannot run here (its
  ``unavailable()``: cuDNN off an NVIDIA GPU) is skipped with the reason;
* approximate_kernels -- the kernels that are not exact (local, local_global, linear,
  performer) each agree on this device with what it claims to compute (its module's
  ``reference``: the dense kernel with its mask, linear attention written out), in float32,
  outputs and gradients, within FLOAT32_TOLERANCE of the largest reference value;
* decode_speed -- cached greedy and beam-4 decoding of the base model (random weights) at the
  base shape: 8 sentences of 32 source tokens, 63 output tokens each (decode_speed.py's
  measurement);
* training -- configs/demo.py trained on the built-in corpus (its greedy test BLEU must reach
  DEMO_BLEU; about a minute on a GPU);
* planner -- on an NVIDIA GPU the planner knows (accelerators.named), base and big in
  bfloat16 at train_throughput's batch: the planner's memory a device and step time
  (``python -m transformer_jax.plan --json``, compiled for compile-only devices with
  JAX_PLATFORMS=cpu, as on a machine without a GPU) beside the peak memory
  (``memory_stats()['peak_bytes_in_use']``) and step time measured by a fresh process on
  the GPU; the two run at once. docs/scale.md keeps the comparison.

With --tiny every shape shrinks (one-layer d_model-32 models, a 10-step run) so the whole check
runs on a CPU in seconds: the kernels are still compared, the training has no BLEU goal.
Ends with ONE JSON line; the exit status is 1 if a check failed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script, configs/ is not importable otherwise
    sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from configs import demo  # noqa: E402
from experiments.benchmarks import decode_speed, train_throughput  # noqa: E402
from transformer_jax import config as config_lib, paper  # noqa: E402
from transformer_jax.decoding import decode  # noqa: E402
from transformer_jax.evaluation import translation  # noqa: E402
from transformer_jax.model import attention, kernels as kernel_registry  # noqa: E402
from transformer_jax.model.counts import init_params  # noqa: E402
from transformer_jax.model.transformer import TransformerConfig  # noqa: E402
from transformer_jax.training import hardware, meters, train  # noqa: E402

# bfloat16 keeps 8 bits of mantissa (relative rounding 2^-9); a 64-term softmax-weighted sum
# of such values lands within 1-2% of the largest output, the backward pass's longer chains
# within a few percent.
OUTPUT_TOLERANCE = 0.02
GRADIENT_TOLERANCE = 0.05
FLOAT32_TOLERANCE = 1e-4
# configs/demo.py's promise ("test BLEU >= 70 (greedy)"); docs/results.md gives the figure
# measured on a CPU.
DEMO_BLEU = 70.0


def skipped(reason: str) -> dict[str, str]:
    return {"status": "skipped", "reason": reason}


def first_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:200]}"


def bf16_missing() -> str | None:
    """Why bfloat16 cannot be computed here, or None if it can."""
    try:
        x = jnp.ones((8, 8), jnp.bfloat16)
        jax.block_until_ready(jax.jit(lambda a: a @ a)(x))
    except Exception as e:  # noqa: BLE001 -- whatever the backend raises for an unsupported type
        return f"bfloat16 does not compute on {jax.devices()[0].device_kind}: {first_line(e)}"
    return None


# ----------------------------------------------------------------------------------------
# The checks


def devices() -> dict[str, Any]:
    found = jax.devices()
    return {"status": "measured", "platform": found[0].platform, "count": len(found),
            "kinds": sorted({d.device_kind for d in found}), "jax": jax.__version__}


def throughput(tiny: bool) -> dict[str, Any]:
    """Tokens/s and MFU of each (model, dtype) in the module docstring."""
    on_cpu = jax.devices()[0].platform == "cpu"
    no_bf16 = bf16_missing()
    results: dict[str, Any] = {}
    for name, dtype in (("base", "float32"), ("base", "bfloat16"), ("big", "bfloat16")):
        key = f"{name}_{dtype}"
        if dtype == "bfloat16" and no_bf16:
            results[key] = skipped(no_bf16)
            continue
        config, vocab, _, tokens = train_throughput.build_config(name, "sharded", dtype, on_cpu)
        steps = 3 if on_cpu else 5
        if on_cpu:
            config.train.devices = 1  # fake CPU devices share the same cores
        if tiny:
            config.model.update(num_layers=1, d_model=32, d_ff=64, num_heads=4, max_len=16)
            config.data.max_len, vocab, tokens, steps = 16, 64, 64, 1
        source = None
        if on_cpu and tiny:
            # MfuMeter's CPU peak is a 4096^3 matmul probe: a minute on a busy CPU.
            config.train.peak_flops = hardware.matmul_probe(n=256, dtype=dtype)
            source = f"{dtype} 256^3 matmul probe on {jax.devices()[0].device_kind}"
        r = train_throughput.measure_config(config, vocab, tokens, steps)
        meter = meters.MfuMeter(TransformerConfig.from_config(config.model, vocab),
                                r["devices"], config.data.max_len,
                                peak_flops=config.train.peak_flops)
        results[key] = {"status": "measured", "tokens_per_s": round(r["tokens_per_s"], 1),
                        "mfu": round(meter(r["tokens_per_s"]), 4),
                        "peak_source": source or meter.source,
                        "tokens_per_step": r["tokens_per_step"], "devices": r["devices"],
                        "compile_s": round(r["compile_s"], 1)}
    return results


def _attention_and_grads(kernel: str, q, k, v, seg, ct, block_size: int):
    def out(q, k, v):
        return attention.attend(kernel, q, k, v, seg, seg, causal=True, block_size=block_size)[0]

    def loss(q, k, v):
        return jnp.sum(out(q, k, v).astype(jnp.float32) * ct)

    return jax.jit(lambda q, k, v: (out(q, k, v), jax.grad(loss, (0, 1, 2))(q, k, v)))(q, k, v)


def _error(result, reference) -> tuple[float, float]:
    """(output error, worst gradient error), each relative to the largest reference value."""
    (out, grads), (ref_out, ref_grads) = result, reference

    def rel(a, b):
        b = np.asarray(b, np.float32)
        return float(np.max(np.abs(np.asarray(a, np.float32) - b)) / max(np.max(np.abs(b)),
                                                                         1e-30))

    return rel(out, ref_out), max(rel(g, r) for g, r in zip(grads, ref_grads, strict=True))


def kernels(tiny: bool) -> dict[str, Any]:
    """Each kernel against the dense one in float32 (the module docstring's tolerances)."""
    b, length, heads, d, block = (2, 64, 4, 16, 16) if tiny else (4, 1024, 8, 64, 256)
    rng = np.random.default_rng(0)
    q, k, v, ct = (rng.standard_normal((b, heads, length, d)).astype(np.float32)
                   for _ in range(4))  # head-major, as the model's
    # Two packed sentences a row, no padding (rows with no key to attend to differ by design).
    seg = np.where(np.arange(length) < length // 3, 1, 2)[None].repeat(b, 0).astype(np.int32)
    with jax.default_matmul_precision("highest"):
        reference = _attention_and_grads("dense", q, k, v, seg, ct, block)
        blockwise32 = _attention_and_grads("blockwise", q, k, v, seg, ct, block)
    results: dict[str, Any] = {
        "shape": [b, heads, length, d], "block_size": block,
        "tolerances": {"bfloat16_output": OUTPUT_TOLERANCE,
                       "bfloat16_gradients": GRADIENT_TOLERANCE, "float32": FLOAT32_TOLERANCE}}
    out_err, grad_err = _error(blockwise32, reference)
    results["blockwise_float32"] = {
        "status": "passed" if max(out_err, grad_err) <= FLOAT32_TOLERANCE else "failed",
        "output_error": out_err, "gradient_error": grad_err}
    no_bf16 = bf16_missing()
    bf = [jnp.asarray(x, jnp.bfloat16) for x in (q, k, v)]
    for kernel in kernel_registry.having("exact"):
        key = f"{kernel}_bfloat16"
        missing = no_bf16 or kernel_registry.get(kernel).unavailable()
        if missing:
            results[key] = skipped(missing)
            continue
        try:
            out_err, grad_err = _error(_attention_and_grads(kernel, *bf, seg, ct, block),
                                       reference)
        except Exception as e:  # noqa: BLE001 -- a kernel that does not run here has failed
            results[key] = {"status": "failed", "error": first_line(e)}
            continue
        ok = out_err <= OUTPUT_TOLERANCE and grad_err <= GRADIENT_TOLERANCE
        results[key] = {"status": "passed" if ok else "failed", "output_error": out_err,
                        "gradient_error": grad_err}
    return results


# The approximate kernels' settings in their check: a window and global positions that bite
# at the check's lengths, and a performer of 64 features.
APPROXIMATE = {"window": 8, "global_tokens": 2, "random_features": 64}


def approximate_kernels(tiny: bool) -> dict[str, Any]:
    """Each approximate kernel with a ``reference`` against it, in float32 (module docstring),
    on the attention_kernels check's shapes."""
    b, length, heads, d = (2, 64, 4, 16) if tiny else (4, 1024, 8, 64)
    rng = np.random.default_rng(1)
    q, k, v, ct = (rng.standard_normal((b, heads, length, d)).astype(np.float32)
                   for _ in range(4))
    seg = np.where(np.arange(length) < length // 3, 1, 2)[None].repeat(b, 0).astype(np.int32)
    results: dict[str, Any] = {"shape": [b, heads, length, d], **APPROXIMATE,
                               "tolerance": FLOAT32_TOLERANCE}
    for name in kernel_registry.names():
        kernel = kernel_registry.get(name)
        claimed = kernel.function("reference")
        if kernel.traits.exact or claimed is None:
            continue

        def out(q, k, v, name=name):
            return attention.attend(name, q, k, v, seg, seg, causal=True, **APPROXIMATE)[0]

        def ref(q, k, v, claimed=claimed):
            return claimed(q, k, v, seg, seg, causal=True, **APPROXIMATE)

        try:
            with jax.default_matmul_precision("highest"):
                errors = _error(*(jax.jit(lambda q, k, v, f=f: (f(q, k, v), jax.grad(
                    lambda q, k, v: jnp.sum(f(q, k, v) * ct), (0, 1, 2))(q, k, v)))(q, k, v)
                    for f in (out, ref)))
        except Exception as e:  # noqa: BLE001 -- a kernel that does not run here has failed
            results[name] = {"status": "failed", "error": first_line(e)}
            continue
        results[name] = {"status": "passed" if max(errors) <= FLOAT32_TOLERANCE else "failed",
                         "output_error": errors[0], "gradient_error": errors[1]}
    return results


def decoding(tiny: bool) -> dict[str, Any]:
    """Cached greedy and beam-4 tokens/s of the base model (random weights)."""
    batch, source, length = (2, 8, 15) if tiny else (8, 32, 63)
    c = config_lib.build("base")
    vocab = paper.VOCAB_SIZE_EN_DE
    if tiny:
        c.model.update(num_layers=1, d_model=32, d_ff=64, num_heads=4)
        vocab = 64
    config = TransformerConfig.from_config(c.model, vocab)
    params = init_params(config, jax.random.key(0))
    inputs = decode_speed.random_sources(config, batch, source)
    # translation.translate's buffer: one more than the longest output, rounded up.
    buffer = -(-(length + 1) // translation.LENGTH_BUCKET) * translation.LENGTH_BUCKET
    results: dict[str, Any] = {"status": "measured", "sentences": batch,
                               "source_tokens": source, "output_tokens": length,
                               "dtype": c.model.dtype}
    calls = {name: decode_speed.decoder(params, config, inputs, how, length, buffer)
             for name, how in (("greedy", decode.DecodeConfig(strategy="greedy")),
                               ("beam4", decode.DecodeConfig(strategy="beam", beam_size=4,
                                                             alpha=0.6)))}
    timed = decode_speed.time_alternately(calls, length, 1 if tiny else 3)
    for name, (compile_s, run_s) in timed.items():
        results[f"{name}_tokens_per_s"] = round(batch * length / run_s, 1)
        results[f"{name}_compile_s"] = round(compile_s, 1)
    return results


def training(tiny: bool, data_dir: str) -> dict[str, Any]:
    """The demo trained from scratch in a temporary workdir; its greedy test BLEU."""
    c = demo.get_config()
    c.data.data_dir = data_dir
    c.train.visualize_sentences, c.train.samples = (), 0
    if tiny:
        c.model.update(num_layers=1, d_model=32, d_ff=64, num_heads=4)
        c.data.update(vocab_size=200, vocab_sample=200_000, max_len=32, tokens_per_batch=512)
        c.train.update(num_steps=10, log_every=5, eval_every=10, eval_batches=1,
                       checkpoint_every=10, bleu_sentences=4, devices=1, peak_flops=1e9)
        c.decode.max_len_offset = 8
    if jax.devices()[0].platform == "cpu":
        c.train.devices = 1
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="accelerator_check_") as workdir:
        final = train.train_and_evaluate(c, workdir)
    result = {"steps": c.train.num_steps, "test_bleu": round(final["test_bleu"], 2),
              "bleu_sentences": final["bleu_sentences"],
              "seconds": round(time.perf_counter() - start, 1)}
    if tiny:
        return {"status": "measured", **result, "goal": "none with --tiny (a 10-step model)"}
    ok = final["test_bleu"] >= DEMO_BLEU
    return {"status": "passed" if ok else "failed", **result, "goal": f">= {DEMO_BLEU}"}


PLANNED = (("base", "bfloat16"), ("big", "bfloat16"))
PLANNER_STEPS = 5


def measure_memory(name: str, dtype: str) -> dict[str, Any]:
    """train_throughput's measurement of ``name`` in ``dtype`` on every local device, with
    the peak memory a device: run in a fresh process, so the peak is this config's alone."""
    config, vocab, _, tokens = train_throughput.build_config(name, "pmap", dtype, False)
    r = train_throughput.measure_config(config, vocab, tokens, PLANNER_STEPS)
    # The last device: the first also held the state as it was made, before its replicas.
    stats = jax.local_devices()[-1].memory_stats()
    peak, limit = stats["peak_bytes_in_use"], stats["bytes_limit"]
    return {"peak_bytes": peak, "bytes_limit": limit, "step_s": r["step_s"],
            "rows": r["rows"], "devices": r["devices"]}


def planner(tiny: bool) -> dict[str, Any]:
    """The planner's predictions beside what the GPU measures (module docstring)."""
    import subprocess

    from transformer_jax.planning import accelerators

    device = jax.devices()[0]
    if tiny or device.platform != "gpu":
        return skipped("needs an NVIDIA GPU (and not --tiny): the planner's figures are "
                       "compared with a real one's")
    try:
        accelerator = accelerators.named(device.device_kind)
    except Exception as e:  # noqa: BLE001 -- no CUDA plugin to read the descriptions from
        return skipped(first_line(e))
    if accelerator is None:
        return skipped(f"the planner knows no {device.device_kind}")
    n = jax.local_device_count()
    results: dict[str, Any] = {"status": "measured", "devices": f"{accelerator.name}:{n}"}
    for name, dtype in PLANNED:
        config, _, max_len, tokens = train_throughput.build_config(name, "pmap", dtype, False)
        rows = max(tokens // max_len // n, 1) * n
        plan = subprocess.Popen(
            [sys.executable, "-m", "transformer_jax.plan", f"--config=configs/{name}.py",
             f"--devices={accelerator.name}:{n}", "--json", f"--config.model.dtype={dtype}",
             "--config.train.parallel=pmap", f"--config.data.row_len={max_len}",
             f"--config.data.max_len={max_len}", f"--config.data.tokens_per_batch="
             f"{rows * max_len}"], cwd=ROOT, env={**os.environ, "JAX_PLATFORMS": "cpu"},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        measured = subprocess.run(
            [sys.executable, "-c", "import json; from experiments.benchmarks import "
             f"accelerator_check as a; print(json.dumps(a.measure_memory({name!r}, "
             f"{dtype!r})))"], cwd=ROOT, capture_output=True, text=True)
        planned_out, planned_err = plan.communicate()
        key = f"{name}_{dtype}"
        if plan.returncode or measured.returncode:
            err = (planned_err if plan.returncode else measured.stderr).strip().splitlines()
            results[key] = {"status": "failed", "error": (err or ["no output"])[-1][:200]}
            continue
        p = json.loads(planned_out.strip().splitlines()[-1])
        m = json.loads(measured.stdout.strip().splitlines()[-1])
        results[key] = {
            "rows": m["rows"], "planned_rows": p["rows"],
            "planned_peak_bytes": p["peak_bytes"], "measured_peak_bytes": m["peak_bytes"],
            "measured_over_planned_memory": round(m["peak_bytes"] / p["peak_bytes"], 3),
            "bytes_limit": m["bytes_limit"], "planned_fits": p["fits"],
            "planned_step_s": round(p["step_seconds"], 4), "planned_mfu": p["mfu"],
            "measured_step_s": round(m["step_s"], 4),
            "measured_mfu": round(p["flops_per_step"] / (m["step_s"] * n
                                                         * p["peak_flops_per_device"]), 4),
            "planner_compile_s": round(p["compile_seconds"], 1)}
    return results


CHECKS = ("train_throughput", "attention_kernels", "approximate_kernels", "decode_speed",
          "training", "planner")


def run(tiny: bool = False, data_dir: str = "") -> dict[str, Any]:
    """Every check; a check that raises is reported failed with its error."""
    summary: dict[str, Any] = {"check": "accelerator", "tiny": tiny,
                               "date": datetime.date.today().isoformat(), "devices": devices()}
    functions = {"train_throughput": lambda: throughput(tiny),
                 "attention_kernels": lambda: kernels(tiny),
                 "approximate_kernels": lambda: approximate_kernels(tiny),
                 "decode_speed": lambda: decoding(tiny),
                 "training": lambda: training(tiny, data_dir),
                 "planner": lambda: planner(tiny)}
    for name in CHECKS:
        start = time.perf_counter()
        try:
            summary[name] = functions[name]()
        except Exception as e:  # noqa: BLE001 -- one broken check must not hide the others
            summary[name] = {"status": "failed", "error": first_line(e)}
        print(f"{name}: done in {time.perf_counter() - start:.0f} s", file=sys.stderr,
              flush=True)
    summary["failed"] = sorted(failed(summary))
    summary["ok"] = not summary["failed"]
    return summary


def failed(summary: dict[str, Any], path: str = "") -> list[str]:
    """The dotted names of every entry whose status is "failed"."""
    names = []
    for key, value in summary.items():
        if isinstance(value, dict):
            if value.get("status") == "failed":
                names.append(f"{path}{key}")
            names += failed(value, f"{path}{key}.")
    return names


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true",
                        help="tiny shapes and a 10-step run: seconds on a CPU (the tests)")
    parser.add_argument("--data_dir", default="",
                        help="where the built-in corpus is (prepared there if missing); "
                        "default: TFDS's (~/tensorflow_datasets)")
    args = parser.parse_args(argv)
    summary = run(args.tiny, args.data_dir)
    print(json.dumps(summary), flush=True)
    return summary


if __name__ == "__main__":
    from transformer_jax import cli

    cli.setup_logging()
    sys.exit(0 if main()["ok"] else 1)
