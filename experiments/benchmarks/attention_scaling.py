"""The quadratic bill: time and memory of each attention kernel against n.

    python experiments/benchmarks/attention_scaling.py            # n = 512 .. 16,384
    python experiments/benchmarks/attention_scaling.py --quick    # n = 512 .. 2,048, one call

What is measured: self-attention over one unpadded sequence of n tokens (batch 1, 8 heads of
d_k = d_v = 64, the base model's heads; not causal, as in the encoder), for n = 512, 1,024,
..., 16,384, by each kernel of ``transformer_jax/model/kernels/`` whose own implementation
runs on this machine (:func:`kinds`; on a CPU: ``dense``, the paper's, ``blockwise``, tiles of
--block-size, ``local``, r = --window, ``local_global``, the same window and the first
--global-tokens positions global, ``linear`` (elu + 1) and ``performer`` (--features random
features); cuDNN's needs a GPU). Two passes: ``forward`` (the outputs) and ``backward``
(forward + backward: the gradients of sum(outputs * c) with respect to q, k and v, c a fixed
random cotangent). --kinds picks some of them.

peak_bytes is the compiled program's own account of its memory (XLA's buffer assignment,
``compiled.memory_analysis()``): temp + argument + output bytes, the most it holds at once.
It is known without running, so it is reported for cases too large to run. As a check, the
measured rise of the process's peak RSS during the first call (on a GPU: the device's peak
bytes in use) is printed beside it and kept as measured_bytes. time_s is the best of up to
three calls after compilation (one call when it takes over 20 s, or with --quick), cpu_s
the CPU time (user + system, every thread) the process spent in that call: on a machine
shared with other work the wall time stretches, the CPU time much less. Every
case runs in a fresh process, so one case's memory cannot leak into the next and an
out-of-memory kill costs one row. A case whose compiled peak exceeds --max-gb (default: half
the memory available at the start) is not run: its time_s is null and its error says why.

A kernel that XLA hands to a fused library call allocates its own scratch, which the
compiled account does not see (on a CPU, XLA fuses the dense forward pass into one kernel:
at n = 16,384 it accounts for 160 MiB while the process grows by 2.8 GiB). The criteria
therefore take, for a case that ran, the larger of the two figures.

Criteria, printed as pass/fail:
  memory: at the largest n, blockwise's peak <= 1/8 of dense's, forward and backward
          (or dense fails where blockwise runs);
  time:   at n = 2,048, blockwise's forward + backward time <= 1.5x dense's.

Results go to experiments/results/attention_scaling.json (--quick: attention_scaling_quick
.json); the last line printed is one JSON object of headline figures.

    python experiments/benchmarks/attention_scaling.py --packed   # packed rows of short sentences

--packed measures what the blockwise kernel's tile skipping buys: forward + backward time of
rows of 256 and 2,048 slots packed with sentences of 10 to 40 tokens (random lengths, packed
in order, the rest of each row padding), 6,144 slots a batch (24 rows of 256, 3 of 2,048), 4
heads of d_k = d_v = 64, not causal and causal. ``dense`` against ``blockwise`` with tiles of
--tiles (default 32, 64, 128), which skips the tiles the mask hides, and ``blockwise_all``:
the same kernel on the same rows with its tile decision replaced by "every tile" (the cost
blockwise had before it skipped). live_tiles is the share of tiles each computes. The
headline compares, for each length and mask, each kind at its fastest tile. Cases run in
this process, best of three calls (--quick: one). Results go to
experiments/results/attention_packed.json, and the last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

# A GPU run must not let the parent grab most of the device before its children start.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from transformer_jax.analysis import attention_cost  # noqa: E402
from transformer_jax.model import attention, kernels, masks  # noqa: E402
from transformer_jax.model.kernels import blockwise  # noqa: E402

PASSES = ("forward", "backward")
FULL_LENGTHS = tuple(2 ** i for i in range(9, 15))  # 512 .. 16,384
QUICK_LENGTHS = (512, 1024, 2048)
HEADS, D_K = 8, 64
TIME_N, TIME_LIMIT, MEMORY_LIMIT = 2048, 1.5, 1 / 8
GiB = 2 ** 30
PACKED_LENGTHS, PACKED_SLOTS, PACKED_HEADS, SENTENCE = (256, 2048), 6144, 4, (10, 40)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="n = 512 .. 2,048, one timed call")
    p.add_argument("--max-gb", type=float, default=0.0,
                   help="skip cases whose compiled peak exceeds this (0: half the free memory)")
    p.add_argument("--block-size", type=int, default=256, help="blockwise tile (default 256)")
    p.add_argument("--window", type=int, default=128, help="local attention's r (default 128)")
    p.add_argument("--global-tokens", type=int, default=2,
                   help="local_global's global positions (default 2)")
    p.add_argument("--features", type=int, default=256,
                   help="performer's random features (default 256)")
    p.add_argument("--kinds", default="", help="kernels to measure, comma-separated "
                   "(default: every kernel that runs here)")
    p.add_argument("--out", type=Path, default=None, help="where to write the JSON results")
    p.add_argument("--packed", action="store_true",
                   help="packed rows of short sentences: dense vs blockwise with tile skipping")
    p.add_argument("--tiles", default="32,64,128", help="--packed: blockwise tiles to measure")
    p.add_argument("--case", default=None, help=argparse.SUPPRESS)  # KIND,N,PASS: one case
    return p.parse_args(argv)


# ----------------------------------------------------------------------------------------
# One case, in its own process


def _proc_bytes(field: str) -> int:
    """VmRSS or VmHWM of this process, in bytes (Linux)."""
    with open("/proc/self/status") as f:
        return int(re.search(rf"{field}:\s+(\d+) kB", f.read()).group(1)) * 1024


def _reset_peak_rss() -> bool:
    """Sets VmHWM back to the current RSS (Linux's clear_refs 5); False where unsupported."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def case_function(kind: str, n: int, pass_: str, block_size: int, window: int,
                  global_tokens: int = 2, features: int = 256):
    """The jitted computation of one case and its arguments."""
    keys = jax.random.split(jax.random.key(n), 4)
    q, k, v, cotangent = (jax.random.normal(key, (1, HEADS, n, D_K), jnp.float32)
                          for key in keys)
    segments = jnp.ones((1, n), jnp.int32)

    def forward(q, k, v):
        return attention.attend(kind, q, k, v, segments, segments, block_size=block_size,
                                window=window, global_tokens=global_tokens,
                                random_features=features)[0]

    if pass_ == "forward":
        return jax.jit(forward), (q, k, v)

    def backward(q, k, v, cotangent):
        loss = lambda q, k, v: jnp.sum(forward(q, k, v) * cotangent)  # noqa: E731
        return jax.grad(loss, argnums=(0, 1, 2))(q, k, v)

    return jax.jit(backward), (q, k, v, cotangent)


def run_case(kind: str, n: int, pass_: str, block_size: int, window: int, max_bytes: int,
             reps: int, global_tokens: int = 2, features: int = 256) -> dict:
    """Compiles, checks the memory bill against ``max_bytes``, runs and times one case."""
    fn, args = case_function(kind, n, pass_, block_size, window, global_tokens, features)
    compiled = fn.lower(*args).compile()
    stats = compiled.memory_analysis()
    peak = int(stats.temp_size_in_bytes + stats.argument_size_in_bytes
               + stats.output_size_in_bytes)
    row = {"kind": kind, "n": n, "pass": pass_, "time_s": None, "cpu_s": None,
           "peak_bytes": peak, "error": None, "measured_bytes": None}
    if peak > max_bytes:
        row["error"] = (f"not run: the compiled program needs {peak / GiB:.1f} GiB, over the "
                        f"{max_bytes / GiB:.1f} GiB allowed (--max-gb)")
        return row
    device = jax.devices()[0]
    on_cpu = device.platform == "cpu"
    before = _proc_bytes("VmRSS") if on_cpu else 0
    rss_reset = on_cpu and _reset_peak_rss()
    times = []
    for _ in range(reps):
        start, cpu = time.perf_counter(), time.process_time()
        jax.block_until_ready(compiled(*args))
        times.append((time.perf_counter() - start, time.process_time() - cpu))
        if times[-1][0] > 20:
            break
    if rss_reset:
        row["measured_bytes"] = _proc_bytes("VmHWM") - before + stats.argument_size_in_bytes
    elif not on_cpu:
        row["measured_bytes"] = (device.memory_stats() or {}).get("peak_bytes_in_use")
    row["time_s"], row["cpu_s"] = min(times)
    return row


# ----------------------------------------------------------------------------------------
# The sweep


def machine() -> tuple[str, str, int]:
    """(description, backend, bytes of memory a case may use by default)."""
    backend = jax.default_backend()
    cores = os.cpu_count()
    cpu = platform.processor() or platform.machine()
    mem_total = mem_free = 0
    try:
        with open("/proc/cpuinfo") as f:
            cpu = re.search(r"model name\s*:\s*(.+)", f.read()).group(1).strip()
        with open("/proc/meminfo") as f:
            info = f.read()
        mem_total = int(re.search(r"MemTotal:\s+(\d+)", info).group(1)) * 1024
        mem_free = int(re.search(r"MemAvailable:\s+(\d+)", info).group(1)) * 1024
    except (OSError, AttributeError):
        pass
    text = f"{cpu}, {cores} cores, {mem_total / GiB:.0f} GiB"
    budget = mem_free // 2
    if backend == "gpu":
        device = jax.devices()[0]
        limit = (device.memory_stats() or {}).get("bytes_limit", 0)
        text = f"{device.device_kind} ({limit / GiB:.0f} GiB); host: {text}"
        budget = int(limit * 0.9)
    return text, ("gpu" if backend == "gpu" else "cpu"), budget


def spawn(kind: str, n: int, pass_: str, args: argparse.Namespace, max_bytes: int) -> dict:
    """Runs one case in a fresh process; a crash (an out-of-memory kill) becomes its error."""
    command = [sys.executable, __file__, f"--case={kind},{n},{pass_}",
               f"--max-gb={max_bytes / GiB}", f"--block-size={args.block_size}",
               f"--window={args.window}", f"--global-tokens={args.global_tokens}",
               f"--features={args.features}"] + (["--quick"] if args.quick else [])
    failed = {"kind": kind, "n": n, "pass": pass_, "time_s": None, "cpu_s": None,
              "peak_bytes": None, "error": None, "measured_bytes": None}
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=3600)
    except subprocess.TimeoutExpired:
        return {**failed, "error": "timed out after an hour"}
    lines = done.stdout.strip().splitlines()
    if done.returncode == 0 and lines:
        return json.loads(lines[-1])
    why = (f"killed by signal {-done.returncode} (out of memory?)" if done.returncode < 0
           else (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1])
    return {**failed, "error": why[:300]}


def kinds(chosen: str = "") -> tuple[str, ...]:
    """The registered kernels whose own implementation runs here (none stands in for it), or
    those of ``chosen`` ("dense,linear") among them."""
    runnable = tuple(name for name in kernels.names() if not kernels.get(name).unavailable())
    if not chosen:
        return runnable
    wanted = tuple(chosen.split(","))
    unknown = [name for name in wanted if name not in runnable]
    if unknown:
        raise SystemExit(f"--kinds: {', '.join(unknown)} not among the kernels that run here "
                         f"({', '.join(runnable)})")
    return wanted


def find(rows: list[dict], kind: str, n: int, pass_: str) -> dict:
    return next(r for r in rows if (r["kind"], r["n"], r["pass"]) == (kind, n, pass_))


def criteria(rows: list[dict], largest: int) -> dict:
    """The pass/fail verdicts and the figures behind them."""
    memory_ok, ratios = True, {}
    for pass_ in PASSES:
        d, b = find(rows, "dense", largest, pass_), find(rows, "blockwise", largest, pass_)
        d_peak, b_peak = attention_cost.case_peak(d), attention_cost.case_peak(b)
        if d_peak is None:  # dense could not even be compiled
            ok = b_peak is not None and b["error"] is None
        else:
            ok = b_peak is not None and b_peak <= MEMORY_LIMIT * d_peak
            ratios[pass_] = round(d_peak / b_peak, 1) if b_peak else None
        memory_ok &= ok
    d, b = find(rows, "dense", TIME_N, "backward"), find(rows, "blockwise", TIME_N, "backward")
    time_ratio = None
    if d["time_s"] and b["time_s"]:
        time_ratio = round(b["time_s"] / d["time_s"], 2)
    return dict(memory="pass" if memory_ok else "fail",
                time="pass" if time_ratio is not None and time_ratio <= TIME_LIMIT else "fail",
                dense_over_blockwise_peak_bytes_at_largest_n=ratios,
                blockwise_over_dense_time_at_2048=time_ratio)


def _round(x: float | None) -> float | None:
    return None if x is None else float(f"{x:.4g}")


def fmt_bytes(x: int | None) -> str:
    return "-" if x is None else f"{x / 2 ** 20:,.0f} MiB"


# ----------------------------------------------------------------------------------------
# Packed rows of short sentences


def packed_segments(n: int, rows: int, seed: int = 0) -> np.ndarray:
    """[rows, n] segment ids: sentences of SENTENCE[0]..SENTENCE[1] tokens (uniformly drawn)
    numbered 1, 2, ... and packed in order while they fit; the rest of the row is 0."""
    rng = np.random.default_rng(seed)
    segments = np.zeros((rows, n), np.int32)
    for row in segments:
        start, sentence = 0, 1
        while (length := int(rng.integers(SENTENCE[0], SENTENCE[1] + 1))) <= n - start:
            row[start:start + length] = sentence
            start, sentence = start + length, sentence + 1
    return segments


@contextlib.contextmanager
def every_tile_live(on: bool):
    """While on, the blockwise kernel computes every tile: its tile decision says "live"."""
    decide = blockwise._live_tiles
    if on:
        blockwise._live_tiles = lambda q_seg, kv_seg, q_pos, causal, bq, bk: jnp.ones(
            (q_seg.shape[1] // bq, kv_seg.shape[1] // bk), bool)
    try:
        yield
    finally:
        blockwise._live_tiles = decide


def run_packed_case(kind: str, n: int, causal: bool, tile: int, reps: int) -> dict:
    """Forward + backward of one packed case: compiled peak bytes, best time, live tiles."""
    rows = PACKED_SLOTS // n
    segments = jnp.asarray(packed_segments(n, rows))
    keys = jax.random.split(jax.random.key(n), 4)
    q, k, v, cotangent = (jax.random.normal(key, (rows, PACKED_HEADS, n, D_K), jnp.float32)
                          for key in keys)
    attend = "dense" if kind == "dense" else "blockwise"

    def backward(q, k, v, cotangent):
        loss = lambda q, k, v: jnp.sum(attention.attend(  # noqa: E731
            attend, q, k, v, segments, segments, causal=causal, block_size=tile)[0]
            * cotangent)
        return jax.grad(loss, argnums=(0, 1, 2))(q, k, v)

    args = (q, k, v, cotangent)
    with every_tile_live(kind == "blockwise_all"):
        compiled = jax.jit(backward).lower(*args).compile()
    stats = compiled.memory_analysis()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - start)
    live = None if kind == "dense" else 1.0
    if kind == "blockwise":  # the kernel's own decision, on its segment ids padded to tiles
        padded = masks.pad_axis1(segments, 0, -n % tile)
        live = float(np.mean(blockwise._live_tiles(
            padded, padded, jnp.arange(padded.shape[1], dtype=jnp.int32), causal, tile, tile)))
    return {"kind": kind, "n": n, "rows": rows, "causal": causal,
            "tile": None if kind == "dense" else tile, "time_s": min(times),
            "peak_bytes": int(stats.temp_size_in_bytes + stats.argument_size_in_bytes
                              + stats.output_size_in_bytes), "live_tiles": live}


def packed_main(args: argparse.Namespace) -> None:
    reps = 1 if args.quick else 3
    tiles = [int(t) for t in args.tiles.split(",")]
    description, backend, _ = machine()
    print(f"{description}; backend {backend}; packed rows of sentences of {SENTENCE[0]}-"
          f"{SENTENCE[1]} tokens, {PACKED_SLOTS:,} slots a batch, {PACKED_HEADS} heads, "
          f"d_k = d_v = {D_K}; forward + backward, best of {reps}")
    print(f"{'kind':>14} {'n':>5} {'rows':>4} {'causal':>6} {'tile':>4} {'time':>8} "
          f"{'peak (compiled)':>16} {'live tiles':>10}")
    rows = []
    for causal in (False, True):
        for n in PACKED_LENGTHS:
            cases = [("dense", tiles[0])] + [(kind, t) for t in tiles
                                             for kind in ("blockwise", "blockwise_all")]
            for kind, tile in cases:
                row = run_packed_case(kind, n, causal, tile, reps)
                rows.append(row)
                live = "-" if row["live_tiles"] is None else f"{row['live_tiles']:.1%}"
                print(f"{kind:>14} {n:>5} {row['rows']:>4} {causal!s:>6} {row['tile'] or '-':>4} "
                      f"{row['time_s']:>7.3f}s {fmt_bytes(row['peak_bytes']):>16} {live:>10}",
                      flush=True)
    write_results(args.out or ROOT / "experiments" / "results" / "attention_packed.json",
                  description, backend, PACKED_HEADS, rows, slots=PACKED_SLOTS,
                  sentence=SENTENCE)
    headline = dict(benchmark="attention_scaling_packed", backend=backend)
    for causal in (False, True):
        for n in PACKED_LENGTHS:
            here = [r for r in rows if r["n"] == n and r["causal"] == causal]
            dense = next(r for r in here if r["kind"] == "dense")["time_s"]
            best, every = (min((r for r in here if r["kind"] == kind), key=lambda r: r["time_s"])
                           for kind in ("blockwise", "blockwise_all"))
            name = f"{'causal' if causal else 'full'}_{n}"
            headline[f"{name}_dense_time_s"] = _round(dense)
            headline[f"{name}_blockwise_time_s"] = _round(best["time_s"])
            headline[f"{name}_best_tile"] = best["tile"]
            headline[f"{name}_all_tiles_time_s"] = _round(every["time_s"])
            headline[f"{name}_all_tiles_best_tile"] = every["tile"]
            headline[f"{name}_dense_over_blockwise"] = round(dense / best["time_s"], 2)
            headline[f"{name}_all_tiles_over_blockwise"] = round(
                every["time_s"] / best["time_s"], 2)
    print(json.dumps(headline))


def write_results(out: Path, description: str, backend: str, heads: int, rows: list[dict],
                  **fields) -> None:
    """A results file of either mode: the machine, date and shape, then one row a case."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(dict(
        machine=description, date=datetime.date.today().isoformat(), backend=backend,
        heads=heads, d_k=D_K, **fields, results=rows), indent=1) + "\n")
    print(f"wrote {out}")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.packed:
        packed_main(args)
        return
    reps = 1 if args.quick else 3
    if args.case:  # a child: one case, one JSON line
        kind, n, pass_ = args.case.split(",")
        print(json.dumps(run_case(kind, int(n), pass_, args.block_size, args.window,
                                  int(args.max_gb * GiB), reps, args.global_tokens,
                                  args.features)))
        return
    description, backend, budget = machine()
    max_bytes = int(args.max_gb * GiB) if args.max_gb > 0 else budget
    lengths = QUICK_LENGTHS if args.quick else FULL_LENGTHS
    print(f"{description}; backend {backend}; batch 1, {HEADS} heads, d_k = d_v = {D_K}; "
          f"blockwise tiles {args.block_size}, local r = {args.window}, global positions "
          f"{args.global_tokens}, performer features {args.features}; cases over "
          f"{max_bytes / GiB:.1f} GiB (compiled) are not run")
    print(f"{'kind':>12} {'n':>6} {'pass':>9} {'time':>9} {'CPU time':>9} "
          f"{'peak (compiled)':>16} {'peak (measured)':>16}")
    rows = []
    measured = kinds(args.kinds)
    for n in lengths:
        for kind in measured:
            for pass_ in PASSES:
                row = spawn(kind, n, pass_, args, max_bytes)
                rows.append(row)
                shown = "-" if row["time_s"] is None else f"{row['time_s']:.3f}s"
                cpu = "-" if row.get("cpu_s") is None else f"{row['cpu_s']:.3f}s"
                print(f"{kind:>12} {n:>6} {pass_:>9} {shown:>9} {cpu:>9} "
                      f"{fmt_bytes(row['peak_bytes']):>16} "
                      f"{fmt_bytes(row['measured_bytes']):>16}  {row['error'] or ''}",
                      flush=True)
    # The criteria compare blockwise with dense: only when both were measured.
    both = {"dense", "blockwise"} <= set(measured)
    verdict = criteria(rows, lengths[-1]) if both else {}
    if verdict:
        print(f"memory at n = {lengths[-1]:,}: blockwise <= 1/8 of dense: {verdict['memory']} "
              f"(dense / blockwise: {verdict['dense_over_blockwise_peak_bytes_at_largest_n']})")
        print(f"time at n = {TIME_N:,}, forward + backward: blockwise <= {TIME_LIMIT}x dense: "
              f"{verdict['time']} (blockwise / dense: "
              f"{verdict['blockwise_over_dense_time_at_2048']})")

    fields = ("kind", "n", "pass", "time_s", "cpu_s", "peak_bytes", "measured_bytes", "error")
    write_results(args.out or ROOT / "experiments" / "results" / (
        "attention_scaling_quick.json" if args.quick else "attention_scaling.json"),
        description, backend, HEADS, [{field: r.get(field) for field in fields} for r in rows],
        global_tokens=args.global_tokens, features=args.features)

    largest = lengths[-1]
    headline = dict(benchmark="attention_scaling", backend=backend, heads=HEADS, d_k=D_K,
                    block_size=args.block_size, window=args.window,
                    global_tokens=args.global_tokens, features=args.features, largest_n=largest,
                    **verdict)
    for kind in measured:
        row = find(rows, kind, largest, "backward")
        headline[f"{kind}_backward_peak_bytes_at_largest_n"] = attention_cost.case_peak(row)
        headline[f"{kind}_backward_time_s_at_largest_n"] = _round(row["time_s"])
        headline[f"{kind}_backward_time_s_at_2048"] = _round(
            find(rows, kind, TIME_N, "backward")["time_s"])
        headline[f"{kind}_backward_cpu_s_at_2048"] = _round(
            find(rows, kind, TIME_N, "backward").get("cpu_s"))
    print(json.dumps(headline))


if __name__ == "__main__":
    main()
