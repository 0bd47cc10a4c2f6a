"""The epoch order's memory and cost for WMT14 EN-FR's 36 million pairs.

    python experiments/benchmarks/epoch_order.py [--pairs=36000000] [--chunks=200]

For one process reading the whole split (one shard: the worst case), each order the
pipeline can draw (``transformer_jax/data/order.py``) reads ``--chunks`` chunks of 4,096
positions across the boundary between two epochs, as the reading threads do, and reports

* the peak memory the order allocated (tracemalloc: numpy's arrays included), against the
  goal of at most 100 MB a process;
* its CPU time per pair (a permutation: drawing it, over the pairs of its epoch), next
  to the cost of grain's own ``index_shuffle`` called pair by
  pair from Python (what ``MapDataset.shuffle`` does) and to reading and packing a pair from
  the token cache (15-30 µs, docs/data.md).

The orders: ``index_shuffle`` (new runs: a Feistel network computed on the fly) and
``permutation`` (checkpoints of older versions: a numpy permutation an epoch, two kept).
Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from transformer_jax.data import order as order_lib  # noqa: E402

CHUNK = 4096
GOAL_MB = 100.0
WMT14_ENFR_PAIRS = 36_000_000


def read(order: order_lib.EpochOrder, pairs: int, chunks: int) -> int:
    """Reads ``chunks`` chunks across epochs 0 and 1; returns the positions read."""
    start = pairs - (chunks // 2) * CHUNK  # half the chunks in epoch 0, half in epoch 1
    return sum(len(order.positions(start + k * CHUNK, start + (k + 1) * CHUNK))
               for k in range(chunks))


def measure(kind: str, pairs: int, chunks: int) -> dict[str, float]:
    """The order's peak memory (MB, under tracemalloc) and its CPU µs a pair (timed
    without tracemalloc, which slows numpy's allocations): for ``index_shuffle`` over the
    chunks read, for ``permutation`` its two epochs drawn, over their pairs."""
    tracemalloc.start()
    read(order_lib.EpochOrder(pairs, seed=0, kind=kind), pairs, chunks)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    order = order_lib.EpochOrder(pairs, seed=0, kind=kind)
    cpu = time.process_time()
    seen = read(order, pairs, chunks)
    cpu = time.process_time() - cpu
    per = seen if kind == order_lib.INDEX_SHUFFLE else 2 * pairs  # a permutation an epoch
    return {"peak_mb": peak / 2**20, "cpu_us_per_pair": 1e6 * cpu / per}


def grain_index_shuffle_us(pairs: int, n: int = 200_000) -> float:
    """CPU µs a pair of grain's index_shuffle, called once a pair."""
    from grain.experimental import index_shuffle

    cpu = time.process_time()
    for i in range(n):
        index_shuffle(i, pairs - 1, 0, 4)
    return 1e6 * (time.process_time() - cpu) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=WMT14_ENFR_PAIRS)
    parser.add_argument("--chunks", type=int, default=200)
    args = parser.parse_args()
    results = {kind: measure(kind, args.pairs, args.chunks)
               for kind in (order_lib.INDEX_SHUFFLE, order_lib.PERMUTATION)}
    grain_us = grain_index_shuffle_us(args.pairs)
    new = results[order_lib.INDEX_SHUFFLE]
    passed = new["peak_mb"] <= GOAL_MB
    print(f"epoch order of {args.pairs:,} pairs, one shard, {args.chunks} chunks of {CHUNK} "
          f"positions across two epochs ({platform.processor() or platform.machine()})")
    for kind, r in results.items():
        print(f"  {kind:14s} peak {r['peak_mb']:9.2f} MB   {r['cpu_us_per_pair']:.3f} CPU-µs "
              "a pair")
    print(f"  grain's index_shuffle, pair by pair from Python: {grain_us:.2f} CPU-µs a pair")
    print(f"goal: at most {GOAL_MB:.0f} MB a process: {'PASS' if passed else 'FAIL'}")
    print(json.dumps({"benchmark": "epoch_order", "pairs": args.pairs,
                      **{f"{k}_{m}": round(v, 4) for k, r in results.items()
                         for m, v in r.items()},
                      "grain_index_shuffle_cpu_us_per_pair": round(grain_us, 3),
                      "goal_mb": GOAL_MB, "passed": passed}))


if __name__ == "__main__":
    main()
