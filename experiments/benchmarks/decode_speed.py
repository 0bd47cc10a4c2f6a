"""Decoding speed: greedy and beam-4 search, with and without the key/value cache.

    python -m experiments.benchmarks.decode_speed [--batch=8] [--length=128] [--repeats=3]

The demo-size model (configs/demo.py: 3 layers, d_model 128, d_ff 512, 4 heads, vocabulary
1,000) with random weights -- speed does not depend on what the weights say. Every output is
forced to ``--length`` tokens: the searches are run with no end symbol (eos_id = -1), so no
sequence stops early. "Without the cache" recomputes the whole decoder over the prefix at
every step (rounded up to a multiple of 16 positions, see ``decode.uncached_step``); "with"
runs one position per step against the cached keys and values.

Tokens/s counts output tokens of the translations returned: batch x length per run (beam
search decodes beam_size hypotheses per sentence to return one). Times are the median of
``--repeats`` runs after one run that compiles. The cache must be at least 5x faster at
output length >= 100. Ends with one JSON line of the figures.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from configs import demo
from transformer_jax import decode, train
from transformer_jax.model import TransformerConfig

REQUIRED_SPEEDUP = 5.0


def measure(params, config, inputs, decoding, length, use_cache, repeats):
    """(compile seconds, median run seconds) of decoding ``inputs`` to ``length`` tokens."""
    max_lengths = jnp.full((inputs.shape[0],), length, jnp.int32)

    def run():
        out = decode.generate(params, inputs, max_lengths, jax.random.key(0), config=config,
                              decoding=decoding, max_len=length, use_cache=use_cache,
                              eos_id=-1)
        return jax.block_until_ready(out)

    start = time.perf_counter()
    out = run()
    first = time.perf_counter() - start
    assert np.all(np.asarray(out) > 0), "every position must hold a token (no early stop)"
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return first, statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8, help="sentences per batch")
    parser.add_argument("--length", type=int, default=128, help="output tokens (>= 100)")
    parser.add_argument("--source_length", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    c = demo.get_config()
    config = TransformerConfig.from_config(c.model, c.data.vocab_size)
    if args.length > config.max_len:
        parser.error(f"--length={args.length} exceeds the model's max_len={config.max_len}")
    params = train.init_params(config, jax.random.key(0))
    rng = np.random.default_rng(0)
    inputs = rng.integers(3, config.vocab_size, (args.batch, args.source_length))
    inputs[:, -1] = 1  # EOS
    inputs = jnp.asarray(inputs, jnp.int32)

    print(f"decode speed: demo model ({config.num_layers} layers, d_model {config.d_model}, "
          f"vocabulary {config.vocab_size}), batch {args.batch}, source {args.source_length} "
          f"tokens, output forced to {args.length} tokens; {jax.devices()[0].platform} "
          f"({platform.processor() or platform.machine()}), jax {jax.__version__}")
    print(f"{'strategy':<9} {'cache':<6} {'compile s':>10} {'run s':>8} {'tokens/s':>10}")
    figures: dict[str, float] = {}
    strategies = {"greedy": decode.DecodeConfig(strategy="greedy"),
                  "beam4": decode.DecodeConfig(strategy="beam", beam_size=4, alpha=0.6)}
    for name, decoding in strategies.items():
        for use_cache in (True, False):
            compile_s, run_s = measure(params, config, inputs, decoding, args.length, use_cache,
                                       args.repeats)
            tokens_per_s = args.batch * args.length / run_s
            key = f"{name}_{'cached' if use_cache else 'uncached'}_tokens_per_s"
            figures[key] = round(tokens_per_s, 1)
            print(f"{name:<9} {'yes' if use_cache else 'no':<6} {compile_s:>10.2f} "
                  f"{run_s:>8.3f} {tokens_per_s:>10.1f}", flush=True)
        speedup = figures[f"{name}_cached_tokens_per_s"] / figures[
            f"{name}_uncached_tokens_per_s"]
        figures[f"{name}_speedup"] = round(speedup, 2)

    ok = args.length >= 100 and all(figures[f"{n}_speedup"] >= REQUIRED_SPEEDUP
                                    for n in strategies)
    for name in strategies:
        print(f"{name}: the cache is {figures[f'{name}_speedup']:.1f}x faster at "
              f"{args.length} tokens")
    print(f"{'PASS' if ok else 'FAIL'}: the cache must be >= {REQUIRED_SPEEDUP:.0f}x faster at "
          "output length >= 100")
    print(json.dumps({"benchmark": "decode_speed", "batch": args.batch,
                      "output_length": args.length, **figures, "pass": ok}))


if __name__ == "__main__":
    main()
