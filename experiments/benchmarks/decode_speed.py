"""Decoding speed: the key/value cache at the demo size, and tokens/s at the base size.

    python experiments/benchmarks/decode_speed.py [--batch=8] [--length=128] [--repeats=3]
    python -m experiments.benchmarks.decode_speed [--shapes=demo,base,ctranslate2]

Random weights throughout -- speed does not depend on what the weights say -- and every
output forced to its full length: the searches run with no end symbol (eos_id = -1), so no
sequence stops early.

* demo: the demo-size model (configs/demo.py: 3 layers, d_model 128, d_ff 512, 4 heads,
  vocabulary 1,000), ``--batch`` sources of ``--source_length`` tokens decoded to
  ``--length`` tokens, greedy and beam 4, with and without the cache. "Without" recomputes
  the whole decoder over the prefix at every step (rounded up to a multiple of 16 positions,
  see ``decode.uncached_step``); "with" runs one position per step against the cached keys
  and values. The cache must be at least 5x faster at output length >= 100.
* base: the paper's base model (6 + 6 layers, d_model 512, d_ff 2048, 8 heads, vocabulary
  37,000), 8 sentences of 32 source tokens, 63 output tokens each in a buffer of 64 (as
  ``translation.translate`` sizes it), greedy and beam 4 (alpha 0.6) through
  ``decode.generate``; beam 4 with one 64-slot cache throughout instead of phases of
  growing cache (16, 32, 64 slots; ``loops.Phases``); and beam 4 the former way, with the
  cross-attention keys and values repeated per beam and reordered with the beams at every
  step (for the ratio of each to beam 4).
* ctranslate2: the engine people deploy, at the base shape: the same random base weights
  exported with ``exports.ctranslate2`` (float32, and int8 weights), the same sentences,
  greedy and beam 4, every output forced to the same 63 tokens (``min_decoding_length`` =
  ``max_decoding_length``), beside ours (``decode.generate`` as above), in one run;
  CTranslate2 runs on the CPU with as many threads as the machine has cores.

Tokens/s counts output tokens of the translations returned: batch x length per run (beam
search decodes beam_size hypotheses per sentence to return one). Times are medians of
``--repeats`` runs after one run that compiles; the runs of one shape alternate between its
decoders, so that a machine's changing load falls on all of them. Ends with one JSON line of
the headline figures.
"""

from __future__ import annotations

import argparse
import functools
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script, configs/ is not importable otherwise
    sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from configs import demo  # noqa: E402
from transformer_jax import config as config_lib  # noqa: E402
from transformer_jax.decoding import decode, loops  # noqa: E402
from transformer_jax.evaluation import translation  # noqa: E402
from transformer_jax.model.counts import init_params  # noqa: E402
from transformer_jax.model.transformer import TransformerConfig  # noqa: E402

REQUIRED_SPEEDUP = 5.0
BASE_SHAPE = {"batch": 8, "source_length": 32, "length": 63}


def random_sources(config: TransformerConfig, batch: int, length: int) -> jax.Array:
    """[batch, length] random ids in [3, vocab), the last one EOS."""
    ids = np.random.default_rng(0).integers(3, config.vocab_size, (batch, length))
    ids[:, -1] = 1
    return jnp.asarray(ids, jnp.int32)


def decoder(params: object, config: TransformerConfig, inputs: jax.Array,
            decoding: decode.DecodeConfig, length: int, buffer: int,
            use_cache: bool = True,
            cache_phase: int = decode.CACHE_PHASE) -> Callable[[], jax.Array]:
    """A call that decodes ``inputs`` to exactly ``length`` tokens in a ``buffer``-long
    output, as ``decode.generate`` does for the evaluate and translate commands."""
    max_lengths = jnp.full((inputs.shape[0],), length, jnp.int32)
    return lambda: decode.generate(params, inputs, max_lengths, jax.random.key(0),
                                   config=config, decoding=decoding, max_len=buffer,
                                   use_cache=use_cache, eos_id=-1, cache_phase=cache_phase)


@functools.partial(jax.jit, static_argnames=("config", "beam_size", "alpha", "max_len"))
def per_beam_cross_attention(params: object, inputs: jax.Array, max_lengths: jax.Array, *,
                             config: TransformerConfig, beam_size: int, alpha: float,
                             max_len: int) -> jax.Array:
    """Beam search the former way: the encoder output repeated per beam, so each layer's
    cross-attention keys and values are [batch x beam, ...] and reordered with the beams
    at every step (in the phases of growing cache ``decode.generate`` runs). Returns
    [batch, max_len] ids as ``decode.generate``."""
    encoded, segments = decode.encode(params, config, inputs)
    phases = loops.Phases(decode.cache_lengths(max_len), decode.grow_cache)
    step, cache = decode.cached_step(params, config, jnp.repeat(encoded, beam_size, 0),
                                     jnp.repeat(segments, beam_size, 0), phases.lengths[0])
    seqs, _ = loops.beam_search(step, cache, beam_size=beam_size, alpha=alpha,
                                 max_lengths=max_lengths, max_len=max_len, eos_id=-1,
                                 phases=phases)
    return seqs[:, 0]


def time_alternately(calls: dict[str, Callable[[], jax.Array]], length: int,
                     repeats: int) -> dict[str, tuple[float, float]]:
    """{name: (compile seconds, median run seconds)}, the timed runs taking turns."""
    compile_s, times = {}, {name: [] for name in calls}
    for name, call in calls.items():
        start = time.perf_counter()
        out = np.asarray(jax.block_until_ready(call()))
        compile_s[name] = time.perf_counter() - start
        assert np.all(out[:, :length] > 0) and np.all(out[:, length:] == 0), \
            f"{name}: every output must be exactly {length} tokens (no early stop)"
    for _ in range(repeats):
        for name, call in calls.items():
            start = time.perf_counter()
            jax.block_until_ready(call())
            times[name].append(time.perf_counter() - start)
    return {name: (compile_s[name], statistics.median(times[name])) for name in calls}


def report(results: dict[str, tuple[float, float]], batch: int,
           length: int) -> dict[str, float]:
    """Prints one row per decoder; returns {name: tokens/s}."""
    tokens_per_s = {}
    for name, (compile_s, run_s) in results.items():
        tokens_per_s[name] = batch * length / run_s
        print(f"{name:<34} {compile_s:>10.2f} {run_s:>8.3f} {tokens_per_s[name]:>10.1f}",
              flush=True)
    return tokens_per_s


def demo_shape(args: argparse.Namespace) -> dict[str, object]:
    c = demo.get_config()
    config = TransformerConfig.from_config(c.model, c.data.vocab_size)
    if args.length > config.max_len:
        sys.exit(f"--length={args.length} exceeds the demo model's max_len={config.max_len}")
    params = init_params(config, jax.random.key(0))
    inputs = random_sources(config, args.batch, args.source_length)
    print(f"\ndemo model ({config.num_layers} layers, d_model {config.d_model}, vocabulary "
          f"{config.vocab_size}), batch {args.batch}, source {args.source_length} tokens, "
          f"output forced to {args.length} tokens")
    print(f"{'decoder':<34} {'compile s':>10} {'run s':>8} {'tokens/s':>10}")
    strategies = {"greedy": decode.DecodeConfig(strategy="greedy"),
                  "beam4": decode.DecodeConfig(strategy="beam", beam_size=4, alpha=0.6)}
    figures: dict[str, object] = {}
    for name, decoding in strategies.items():
        calls = {f"{name} {'cached' if use_cache else 'uncached'}": decoder(
            params, config, inputs, decoding, args.length, args.length, use_cache)
            for use_cache in (True, False)}
        speed = report(time_alternately(calls, args.length, args.repeats), args.batch,
                       args.length)
        figures[f"demo_{name}_cache_speedup"] = round(
            speed[f"{name} cached"] / speed[f"{name} uncached"], 2)
    ok = args.length >= 100 and all(figures[f"demo_{n}_cache_speedup"] >= REQUIRED_SPEEDUP
                                    for n in strategies)
    for name in strategies:
        print(f"{name}: the cache is {figures[f'demo_{name}_cache_speedup']:.1f}x faster at "
              f"{args.length} tokens")
    print(f"{'PASS' if ok else 'FAIL'}: the cache must be >= {REQUIRED_SPEEDUP:.0f}x faster at "
          "output length >= 100")
    figures["demo_output_length"] = args.length
    figures["demo_cache_pass"] = ok
    return figures


def base_setup() -> tuple[TransformerConfig, object, jax.Array, int]:
    """(config, random parameters, sources, output buffer) of the base shape."""
    c = config_lib.build("base")
    config = TransformerConfig.from_config(c.model, c.data.vocab_size)
    batch, source_length, length = BASE_SHAPE.values()
    # translation.translate's buffer: one more than the longest output, rounded up.
    buffer = -(-(length + 1) // translation.LENGTH_BUCKET) * translation.LENGTH_BUCKET
    params = init_params(config, jax.random.key(0))
    return config, params, random_sources(config, batch, source_length), buffer


def base_shape(args: argparse.Namespace) -> dict[str, object]:
    batch, source_length, length = BASE_SHAPE.values()
    config, params, inputs, buffer = base_setup()
    print(f"\nbase model ({config.num_layers} + {config.num_layers} layers, d_model "
          f"{config.d_model}, vocabulary {config.vocab_size}), {batch} sentences of "
          f"{source_length} source tokens, {length} output tokens (buffer {buffer})")
    print(f"{'decoder':<34} {'compile s':>10} {'run s':>8} {'tokens/s':>10}")
    beam = decode.DecodeConfig(strategy="beam", beam_size=4, alpha=0.6)
    max_lengths = jnp.full((batch,), length, jnp.int32)
    calls = {
        "greedy": decoder(params, config, inputs, decode.DecodeConfig(strategy="greedy"),
                          length, buffer),
        "beam4": decoder(params, config, inputs, beam, length, buffer),
        "beam4, one 64-slot cache": decoder(params, config, inputs, beam, length, buffer,
                                            cache_phase=0),
        "beam4, cross K/V per beam (former)": lambda: per_beam_cross_attention(
            params, inputs, max_lengths, config=config, beam_size=4, alpha=0.6,
            max_len=buffer),
    }
    speed = report(time_alternately(calls, length, args.repeats), batch, length)
    ratio = speed["beam4"] / speed["beam4, cross K/V per beam (former)"]
    phased = speed["beam4"] / speed["beam4, one 64-slot cache"]
    print(f"beam 4: cross-attention keys and values shared by a sentence's beams decode "
          f"{ratio:.2f}x as fast as a copy per beam")
    print(f"beam 4: phases of growing cache decode {phased:.2f}x as fast as one "
          f"{buffer}-slot cache")
    return {"base_greedy_tokens_per_s": round(speed["greedy"], 1),
            "base_beam4_tokens_per_s": round(speed["beam4"], 1),
            "base_beam4_per_beam_cross_kv_tokens_per_s": round(
                speed["beam4, cross K/V per beam (former)"], 1),
            "base_beam4_shared_over_per_beam": round(ratio, 3),
            "base_beam4_full_cache_tokens_per_s": round(speed["beam4, one 64-slot cache"], 1),
            "base_beam4_phased_over_full_cache": round(phased, 3)}


def ctranslate2_shape(args: argparse.Namespace) -> dict[str, object]:
    import os
    import tempfile

    import ctranslate2

    from transformer_jax.exports import ctranslate2 as export_ct2, mapping

    batch, source_length, length = BASE_SHAPE.values()
    config, params, inputs, buffer = base_setup()
    tokens = ["<pad>", "</s>", "<unk>", *(f"t{i}" for i in range(3, config.vocab_size))]
    sources = [[tokens[i] for i in row[:-1]] for row in np.asarray(inputs)]  # EOS added
    threads = os.cpu_count() or 1
    print(f"\nCTranslate2 {ctranslate2.__version__} beside ours, base model, {batch} "
          f"sentences of {source_length} source tokens, {length} output tokens, CPU, "
          f"{threads} threads")
    print(f"{'decoder':<34} {'compile s':>10} {'run s':>8} {'tokens/s':>10}")
    spec_of = lambda: export_ct2.build_spec(mapping.layers_of(params, config), config,  # noqa: E731
                                            tokens)
    calls: dict[str, Callable[[], object]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for quantization in ("float32", "int8"):
            directory = os.path.join(tmp, quantization)
            os.makedirs(directory)
            export_ct2.write(directory, spec_of(), quantization)
            translator = ctranslate2.Translator(directory, device="cpu",
                                                compute_type=quantization,
                                                intra_threads=threads)
            for name, beam_size in (("greedy", 1), ("beam4", 4)):
                calls[f"ct2 {quantization} {name}"] = functools.partial(
                    translator.translate_batch, sources, beam_size=beam_size,
                    length_penalty=0.6, min_decoding_length=length,
                    max_decoding_length=length, max_batch_size=batch)
        calls["ours greedy"] = decoder(params, config, inputs,
                                       decode.DecodeConfig(strategy="greedy"), length, buffer)
        calls["ours beam4"] = decoder(params, config, inputs, decode.DecodeConfig(
            strategy="beam", beam_size=4, alpha=0.6), length, buffer)
        compile_s, times = {}, {name: [] for name in calls}
        for name, call in calls.items():
            start = time.perf_counter()
            out = call()
            if name.startswith("ct2"):
                assert all(len(r.hypotheses[0]) == length for r in out), name
            else:
                jax.block_until_ready(out)
            compile_s[name] = time.perf_counter() - start
        for _ in range(args.repeats):
            for name, call in calls.items():
                start = time.perf_counter()
                jax.block_until_ready(call())
                times[name].append(time.perf_counter() - start)
    speed = report({n: (compile_s[n], statistics.median(times[n])) for n in calls}, batch,
                   length)
    figures: dict[str, object] = {}
    for name in ("greedy", "beam4"):
        for quantization in ("float32", "int8"):
            theirs = speed[f"ct2 {quantization} {name}"]
            figures[f"ct2_{quantization}_{name}_tokens_per_s"] = round(theirs, 1)
            figures[f"ct2_{quantization}_{name}_over_ours"] = round(
                theirs / speed[f"ours {name}"], 2)
            print(f"{name}: CTranslate2 {quantization} decodes "
                  f"{theirs / speed[f'ours {name}']:.2f}x as fast as ours")
        figures[f"ours_{name}_tokens_per_s"] = round(speed[f"ours {name}"], 1)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="demo,base",
                        help="comma-separated: demo, base, ctranslate2")
    parser.add_argument("--batch", type=int, default=8, help="demo: sentences per batch")
    parser.add_argument("--length", type=int, default=128, help="demo: output tokens (>= 100)")
    parser.add_argument("--source_length", type=int, default=24, help="demo: source tokens")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    if not shapes or set(shapes) - {"demo", "base", "ctranslate2"}:
        parser.error("--shapes must name some of demo, base, ctranslate2")

    print(f"decode speed on {jax.devices()[0].platform} "
          f"({platform.processor() or platform.machine()}), jax {jax.__version__}")
    figures: dict[str, object] = {}
    if "demo" in shapes:
        figures.update(demo_shape(args))
    if "base" in shapes:
        figures.update(base_shape(args))
    if "ctranslate2" in shapes:
        figures.update(ctranslate2_shape(args))
    print(json.dumps({"benchmark": "decode_speed", **figures}))


if __name__ == "__main__":
    main()
