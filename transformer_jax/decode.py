"""Autoregressive decoding with a key/value cache.

The encoder runs once per batch. The decoder then runs one token at a time: every decoder
layer keeps the keys and values of its masked self-attention in the ``cache`` collection,
and its cross-attention keeps the encoder's keys and values, computed once per sentence.

Shapes: b = batch, s = source length, L = maximum output length, V = vocabulary.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

from transformer_jax.data.tokenizer import EOS_ID, PAD_ID
from transformer_jax.model import Transformer, TransformerConfig, segments_of

Array = jax.Array


def init_cache(params: Any, config: TransformerConfig, encoded: Array,
               inputs_segment_ids: Array, max_len: int) -> Any:
    """An empty self-attention cache for ``max_len`` steps, plus the cross-attention keys
    and values of ``encoded`` [b, s, d]."""
    model = Transformer(config.replace(decode=True, deterministic=True))
    dummy = jnp.zeros((encoded.shape[0], max_len), jnp.int32)
    _, variables = model.apply({"params": params}, encoded, inputs_segment_ids, dummy,
                               method=Transformer.decode, mutable=["cache"])
    return variables["cache"]


def encode(params: Any, config: TransformerConfig, inputs: Array) -> tuple[Array, Array]:
    """Source ids [b, s] -> (encoder output [b, s, d], segment ids [b, s])."""
    segment_ids = segments_of(inputs)
    model = Transformer(config.replace(decode=False, deterministic=True))
    return model.apply({"params": params}, inputs, segment_ids,
                       method=Transformer.encode), segment_ids


def decode_step(params: Any, config: TransformerConfig, cache: Any, encoded: Array,
                inputs_segment_ids: Array, tokens: Array) -> tuple[Array, Any]:
    """One step: the previous tokens [b] -> (log-probabilities [b, V], updated cache)."""
    model = Transformer(config.replace(decode=True, deterministic=True))
    logits, variables = model.apply(
        {"params": params, "cache": cache}, encoded, inputs_segment_ids, tokens[:, None],
        method=Transformer.decode, mutable=["cache"])
    return jax.nn.log_softmax(logits[:, -1]), variables["cache"]


@functools.partial(jax.jit, static_argnames=("config", "max_len"))
def greedy_decode(params: Any, inputs: Array, *, config: TransformerConfig,
                  max_len: int) -> Array:
    """The most probable token at every step, until EOS or ``max_len`` tokens.

    Args:
      inputs: [b, s] source ids, 0-padded.
    Returns:
      [b, max_len] output ids; after EOS only padding (0).
    """
    encoded, src_segments = encode(params, config, inputs)
    cache = init_cache(params, config, encoded, src_segments, max_len)
    b = inputs.shape[0]

    def body(carry):
        i, cache, last, out, done = carry
        log_probs, cache = decode_step(params, config, cache, encoded, src_segments, last)
        token = jnp.where(done, PAD_ID, jnp.argmax(log_probs, axis=-1).astype(jnp.int32))
        out = out.at[:, i].set(token)
        return i + 1, cache, token, out, done | (token == EOS_ID)

    def cond(carry):
        i, _, _, _, done = carry
        return (i < max_len) & ~jnp.all(done)

    init = (jnp.int32(0), cache, jnp.zeros((b,), jnp.int32), jnp.zeros((b, max_len), jnp.int32),
            jnp.zeros((b,), bool))
    return jax.lax.while_loop(cond, body, init)[3]
