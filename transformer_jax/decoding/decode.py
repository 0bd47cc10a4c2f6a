"""Autoregressive decoding of the model: its step functions, a key/value cache, and a batch
translated end to end with greedy search, beam search or sampling.

The searches (``beam.py``) are written against one step function, ``tokens_to_logits(ids,
cache) -> (logits, cache)``: the previous token of every sequence [n] and a cache pytree in,
the next-token logits [n, V] and the updated cache out. :func:`cached_step` builds it from the
model: the encoder runs once per batch, every decoder layer keeps the keys and values of its
masked self-attention in the ``cache`` collection, and its cross-attention keeps the
encoder's keys and values, computed once per sentence and shared by the sentence's beams
(leaves [b, ...], where the self-attention's are [b * k, ...] and follow their beams).
:func:`uncached_step` recomputes the whole decoder prefix at every step instead (the
baseline the cache is measured against). :func:`generate` runs the cached decoder in
``search.Phases`` of growing cache length, so that early steps neither attend over nor reorder
the empty end of the cache.

Shapes: b = batch, k = beam size, s = source length, L = maximum output length (the
buffer), V = vocabulary. Outputs are [b, L] ids: the tokens, EOS, then padding (0). A
sequence that reaches its own maximum length ends there without EOS.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from transformer_jax import config as config_lib
from transformer_jax.data.tokenizer import EOS_ID, PAD_ID
from transformer_jax.decoding import strategies
from transformer_jax.decoding.loops import Phases, StepFn
from transformer_jax.model.spec import TransformerConfig
from transformer_jax.model.transformer import Transformer, segments_of

Array = jax.Array
# The defaults of DecodeConfig: the paper's beam search, as the config states it.
_DECODE = config_lib.base_config().decode


@dataclasses.dataclass(frozen=True)
class DecodeConfig:
    """How to decode (the ``decode`` section of an experiment config). Hashable, so it can
    be a static argument of a jitted function."""

    strategy: str = _DECODE.strategy
    beam_size: int = _DECODE.beam_size
    alpha: float = _DECODE.alpha
    max_len_offset: int = _DECODE.max_len_offset
    temperature: float = _DECODE.temperature
    top_k: int = _DECODE.top_k
    top_p: float = _DECODE.top_p
    seed: int = _DECODE.seed
    batch_size: int = _DECODE.batch_size
    position_scale: float = _DECODE.position_scale

    @classmethod
    def from_config(cls, decode_config: Any) -> DecodeConfig:
        names = [f.name for f in dataclasses.fields(cls)]
        return cls(**{n: decode_config[n] for n in names if n in decode_config})

    def replace(self, **changes: Any) -> DecodeConfig:
        return dataclasses.replace(self, **changes)


# ----------------------------------------------------------------------------------------
# Step functions of the model


def encode(params: Any, config: TransformerConfig, inputs: Array) -> tuple[Array, Array]:
    """Source ids [b, s] -> (encoder output [b, s, d], segment ids [b, s])."""
    segment_ids = segments_of(inputs)
    model = Transformer(config.replace(decode=False, deterministic=True))
    return model.apply({"params": params}, inputs, segment_ids,
                       method=Transformer.encode), segment_ids


def init_cache(params: Any, config: TransformerConfig, encoded: Array,
               inputs_segment_ids: Array, max_len: int, beams: int = 1) -> Any:
    """An empty self-attention cache for ``max_len`` steps of ``beams`` hypotheses per
    sentence (leaves [b * beams, ...]), plus the cross-attention keys and values of
    ``encoded`` [b, s, d] (leaves [b, ...]), and scalar step counters."""
    model = Transformer(config.replace(decode=True, deterministic=True))
    dummy = jnp.zeros((encoded.shape[0] * beams, max_len), jnp.int32)
    _, variables = model.apply({"params": params}, encoded, inputs_segment_ids, dummy,
                               method=Transformer.decode, mutable=["cache"])
    return variables["cache"]


def decode_step(params: Any, config: TransformerConfig, cache: Any, encoded: Array,
                inputs_segment_ids: Array, tokens: Array) -> tuple[Array, Any]:
    """One cached step: the previous tokens [b * beams] of sentences ``encoded`` [b, s, d]
    -> (logits [b * beams, V], updated cache)."""
    model = Transformer(config.replace(decode=True, deterministic=True))
    logits, variables = model.apply(
        {"params": params, "cache": cache}, encoded, inputs_segment_ids, tokens[:, None],
        method=Transformer.decode, mutable=["cache"])
    return logits[:, -1], variables["cache"]


def _no_padding(logits: Array) -> Array:
    # Id 0 is padding and the start symbol, never an output.
    return logits.at[:, PAD_ID].set(-jnp.inf)


def cached_step(params: Any, config: TransformerConfig, encoded: Array,
                inputs_segment_ids: Array, max_len: int,
                beams: int = 1) -> tuple[StepFn, Any]:
    """(tokens_to_logits, initial cache) of the key/value-cached decoder.

    ``encoded`` [b, s, d] and ``inputs_segment_ids`` [b, s] have one row per sentence; the
    step decodes ``beams`` sequences of each, ids [b * beams] (row i * beams + j is beam j of
    sentence i). The cross-attention keys and values stay [b, ...] (see :func:`init_cache`).
    """
    cache = init_cache(params, config, encoded, inputs_segment_ids, max_len, beams)

    def tokens_to_logits(ids: Array, cache: Any) -> tuple[Array, Any]:
        logits, cache = decode_step(params, config, cache, encoded, inputs_segment_ids, ids)
        return _no_padding(logits), cache

    return tokens_to_logits, cache


# The first phase's cache length when decoding in phases (see ``search.Phases``).
CACHE_PHASE = 16


def cache_lengths(max_len: int, first: int = CACHE_PHASE) -> tuple[int, ...]:
    """``first``, twice that, ... below ``max_len``, then ``max_len``; (max_len,) for
    first <= 0."""
    lengths = []
    while 0 < first < max_len:
        lengths.append(first)
        first *= 2
    return (*lengths, max_len)


def grow_cache(cache: Any, length: int) -> Any:
    """The self-attention keys and values of a :func:`cached_step` cache ([n, h, L, d]
    leaves) padded with zeros to ``length`` positions; other leaves as they are."""

    def pad(path: Any, x: Array) -> Array:
        if getattr(path[-1], "key", None) not in ("cached_key", "cached_value"):
            return x
        widths = [(0, 0)] * x.ndim
        widths[2] = (0, length - x.shape[2])
        return jnp.pad(x, widths)

    return jax.tree_util.tree_map_with_path(pad, cache)


def uncached_step(params: Any, config: TransformerConfig, encoded: Array,
                  inputs_segment_ids: Array, max_len: int, beams: int = 1,
                  bucket: int = 16) -> tuple[StepFn, Any]:
    """(tokens_to_logits, initial state) of a decoder without a cache.

    Rows as :func:`cached_step`. The state is the decoder's input so far ([b * beams, L]
    ids) and the step. Each step runs the
    whole decoder -- self-attention, cross-attention on the encoder output, feed-forward --
    over the prefix again, rounded up to a multiple of ``bucket`` positions (a jitted loop
    needs static shapes; ``lax.switch`` picks the branch of the right length at run time).
    """
    model = Transformer(config.replace(decode=False, deterministic=True))
    lengths = sorted({min(end, max_len) for end in range(bucket, max_len + bucket, bucket)})

    def branch(length: int) -> Callable[[Array, Array], Array]:
        def run(prefix: Array, step: Array) -> Array:
            logits = model.apply({"params": params}, encoded, inputs_segment_ids,
                                 prefix[:, :length], method=Transformer.decode)  # [n, len, V]
            return jax.lax.dynamic_index_in_dim(logits, step, axis=1, keepdims=False)
        return run

    def tokens_to_logits(ids: Array, state: Any) -> tuple[Array, Any]:
        prefix, step = state["prefix"], state["step"]
        prefix = jax.lax.dynamic_update_index_in_dim(prefix, ids, step, axis=1)
        logits = jax.lax.switch(step // bucket, [branch(n) for n in lengths], prefix, step)
        return _no_padding(logits), {"prefix": prefix, "step": step + 1}

    n = encoded.shape[0] * beams
    return tokens_to_logits, {"prefix": jnp.zeros((n, max_len), jnp.int32),
                              "step": jnp.zeros((), jnp.int32)}


# ----------------------------------------------------------------------------------------
# The model, end to end


@functools.partial(jax.jit, static_argnames=("config", "decoding", "max_len", "use_cache",
                                             "eos_id", "cache_phase"))
def generate(params: Any, inputs: Array, max_lengths: Array, key: Array, *,
             config: TransformerConfig, decoding: DecodeConfig, max_len: int,
             use_cache: bool = True, eos_id: int = EOS_ID,
             cache_phase: int = CACHE_PHASE) -> Array:
    """Translates a batch with the strategy of ``decoding`` (``decoding.strategy``, an
    entry of ``decoding/strategies/``).

    Args:
      inputs: [b, s] source ids, 0-padded.
      max_lengths: [b] the longest output of each sentence (<= max_len).
      key: PRNG key for sampling (unused by greedy and beam search).
      use_cache: False recomputes the decoder prefix at every step (for benchmarks).
      cache_phase: the cached decoder runs in ``search.Phases`` whose cache lengths start
        at this and double up to ``max_len``; 0 keeps a ``max_len`` cache throughout.
    ``decoding.position_scale`` multiplies the model's positions (position interpolation).

    Returns:
      [b, max_len] output ids: tokens, EOS, then padding.
    """
    if decoding.position_scale != config.position_scale:
        config = config.replace(position_scale=decoding.position_scale)
    strategy = strategies.get(decoding.strategy)
    encoded, src_segments = encode(params, config, inputs)
    beams = decoding.beam_size if strategy.traits.beams else 1
    if use_cache:
        phases = Phases(cache_lengths(max_len, cache_phase), grow_cache)
        step, cache = cached_step(params, config, encoded, src_segments, phases.lengths[0],
                                  beams)
    else:
        phases = None
        step, cache = uncached_step(params, config, encoded, src_segments, max_len, beams)
    return strategy.module.search(step, cache, key, max_lengths, max_len, decoding, eos_id,
                                  phases)


def greedy_decode(params: Any, inputs: Array, *, config: TransformerConfig,
                  max_len: int) -> Array:
    """Greedy translations [b, max_len] of source ids [b, s], each up to ``max_len``."""
    max_lengths = jnp.full((inputs.shape[0],), max_len, jnp.int32)
    return generate(params, inputs, max_lengths, jax.random.key(0), config=config,
                    decoding=DecodeConfig(strategy="greedy"), max_len=max_len)
