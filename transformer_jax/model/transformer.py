"""The Transformer of "Attention Is All You Need", in the order of the paper's Figure 1.

Embeddings (scaled by sqrt(d_model)) + positions -> encoder stack of N layers
[self-attention, feed-forward] -> decoder stack of N layers [masked self-attention,
cross-attention, feed-forward] -> linear (sharing the embedding matrix) -> softmax.
Each sub-layer is wrapped as LayerNorm(x + Dropout(Sublayer(x))) (post-LN, the paper's), or
x + Dropout(Sublayer(LayerNorm(x))) with ``norm="pre"``.

Shapes: b = batch, s = source length, t = target length, d = d_model, V = vocabulary.
Token id 0 is padding and also the decoder's start symbol (targets are shifted right by one).

Attention weights of every layer and head are sown into the ``intermediates`` collection:
``model.apply(variables, ..., mutable=["intermediates"])`` returns them; the training path,
which does not ask for the collection, never computes them.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from transformer_jax.model import positions as position_schemes
from transformer_jax.model.dropout import Dropout
from transformer_jax.model.multihead import MultiHeadAttention
from transformer_jax.model.positions.sinusoidal import sinusoidal_positions
from transformer_jax.model.spec import TransformerConfig

__all__ = ["Transformer", "TransformerConfig", "shift_right", "segments_of",
           "sinusoidal_positions"]

Array = jax.Array
# LayerNorm's epsilon: the paper gives none; 1e-6 is tensor2tensor's (and flax's default).
LAYER_NORM_EPSILON = 1e-6


# ----------------------------------------------------------------------------------------
# Embeddings and positions


class Embed(nn.Module):
    """Token embedding times sqrt(d_model), plus positions (a scheme with the ``added``
    trait: sinusoidal, learned), then dropout.

    In decode mode positions come from a step counter kept in the ``cache`` collection.
    """

    config: TransformerConfig
    token_embed: nn.Embed

    @nn.compact
    def __call__(self, tokens: Array, positions: Array | None = None) -> Array:
        """[b, n] token ids (and optional [b, n] positions for packed rows) -> [b, n, d]."""
        cfg = self.config
        x = self.token_embed(tokens) * jnp.sqrt(jnp.asarray(cfg.d_model, cfg.dtype))
        if cfg.decode:
            is_initialized = self.has_variable("cache", "position")
            index = self.variable("cache", "position", lambda: jnp.zeros((), jnp.int32))
            if is_initialized:
                positions = jnp.broadcast_to(index.value, tokens.shape)
                index.value = index.value + 1
        if positions is None:
            positions = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
        scheme = position_schemes.get(cfg.positions)
        if scheme.traits.added:
            x = x + scheme.module.embedding(self, positions, cfg).astype(cfg.dtype)
        return Dropout(cfg.dropout_rate, cfg.dropout_impl)(x, deterministic=cfg.deterministic)


# ----------------------------------------------------------------------------------------
# Multi-head attention: model/multihead.py (its projections, kernels and key/value cache)


# ----------------------------------------------------------------------------------------
# Feed-forward, Add & Norm, layers and stacks


class FeedForward(nn.Module):
    """FFN(x) = max(0, x W1 + b1) W2 + b2."""

    config: TransformerConfig

    @nn.compact
    def __call__(self, x: Array) -> Array:
        cfg = self.config
        init = nn.initializers.xavier_uniform()
        y = nn.Dense(cfg.d_ff, dtype=cfg.dtype, kernel_init=init, name="w1")(x)
        return nn.Dense(cfg.d_model, dtype=cfg.dtype, kernel_init=init, name="w2")(nn.relu(y))


class AddNorm(nn.Module):
    """Residual connection with LayerNorm around one sub-layer, post-LN or pre-LN."""

    config: TransformerConfig

    @nn.compact
    def __call__(self, x: Array, sublayer: Any) -> Array:
        cfg = self.config
        norm = nn.LayerNorm(epsilon=LAYER_NORM_EPSILON, dtype=cfg.dtype, name="norm")
        dropout = Dropout(cfg.dropout_rate, cfg.dropout_impl)
        if cfg.norm == "pre":
            return x + dropout(sublayer(norm(x)), deterministic=cfg.deterministic)
        return norm(x + dropout(sublayer(x), deterministic=cfg.deterministic))


class EncoderLayer(nn.Module):
    config: TransformerConfig

    @nn.compact
    def __call__(self, x: Array, segment_ids: Array) -> Array:
        cfg = self.config
        attn = MultiHeadAttention(cfg, "self", name="self_attention")
        x = AddNorm(cfg, name="self_attention_add_norm")(x, lambda y: attn(y, segment_ids))
        return AddNorm(cfg, name="ffn_add_norm")(x, FeedForward(cfg, name="ffn"))


class DecoderLayer(nn.Module):
    config: TransformerConfig

    @nn.compact
    def __call__(self, y: Array, segment_ids: Array, encoded: Array,
                 encoded_segment_ids: Array) -> Array:
        cfg = self.config
        self_attn = MultiHeadAttention(cfg, "causal", name="self_attention")
        cross_attn = MultiHeadAttention(cfg, "cross", name="cross_attention")
        y = AddNorm(cfg, name="self_attention_add_norm")(y, lambda z: self_attn(z, segment_ids))
        y = AddNorm(cfg, name="cross_attention_add_norm")(
            y, lambda z: cross_attn(z, segment_ids, encoded, encoded_segment_ids))
        return AddNorm(cfg, name="ffn_add_norm")(y, FeedForward(cfg, name="ffn"))


class Encoder(nn.Module):
    config: TransformerConfig
    token_embed: nn.Embed

    @nn.compact
    def __call__(self, tokens: Array, segment_ids: Array, positions: Array | None) -> Array:
        """[b, s] source ids -> [b, s, d] encoder output."""
        cfg = self.config
        x = Embed(cfg, self.token_embed, name="embed")(tokens, positions)
        layer = nn.remat(EncoderLayer) if cfg.remat else EncoderLayer
        for i in range(cfg.num_layers):
            x = layer(cfg, name=f"layer_{i}")(x, segment_ids)
        if cfg.norm == "pre":
            x = nn.LayerNorm(epsilon=LAYER_NORM_EPSILON, dtype=cfg.dtype, name="final_norm")(x)
        return x


class Decoder(nn.Module):
    config: TransformerConfig
    token_embed: nn.Embed

    @nn.compact
    def __call__(self, decoder_inputs: Array, segment_ids: Array, positions: Array | None,
                 encoded: Array, encoded_segment_ids: Array) -> Array:
        """[b, t] shifted target ids -> [b, t, d] decoder output (before the softmax)."""
        cfg = self.config
        y = Embed(cfg, self.token_embed, name="embed")(decoder_inputs, positions)
        layer = nn.remat(DecoderLayer) if cfg.remat and not cfg.decode else DecoderLayer
        for i in range(cfg.num_layers):
            y = layer(cfg, name=f"layer_{i}")(y, segment_ids, encoded, encoded_segment_ids)
        if cfg.norm == "pre":
            y = nn.LayerNorm(epsilon=LAYER_NORM_EPSILON, dtype=cfg.dtype, name="final_norm")(y)
        return y


# ----------------------------------------------------------------------------------------
# The Transformer


def shift_right(targets: Array, segment_ids: Array | None = None) -> Array:
    """Teacher forcing: the decoder sees targets shifted right, 0 at each sequence start."""
    shifted = jnp.pad(targets, ((0, 0), (1, 0)))[:, :-1]
    if segment_ids is not None:  # a packed row: every segment starts afresh
        shifted_ids = jnp.pad(segment_ids, ((0, 0), (1, 0)))[:, :-1]
        shifted = jnp.where(segment_ids == shifted_ids, shifted, 0)
    return shifted


def segments_of(tokens: Array) -> Array:
    """Segment ids of an unpacked batch: 1 for real tokens, 0 for padding."""
    return (tokens != 0).astype(jnp.int32)


class Transformer(nn.Module):
    """The encoder-decoder. ``__call__`` gives teacher-forced logits [b, t, V]."""

    config: TransformerConfig

    def setup(self) -> None:
        cfg = self.config
        embed = lambda name: nn.Embed(  # noqa: E731
            cfg.vocab_size, cfg.d_model, dtype=cfg.dtype,
            embedding_init=nn.initializers.normal(cfg.d_model ** -0.5), name=name)
        if cfg.share_embeddings:
            self.source_embed = self.target_embed = embed("shared_embedding")
            self.logits_bias = self.param("logits_bias", nn.initializers.zeros,
                                          (cfg.vocab_size,))
        else:
            self.source_embed = embed("source_embedding")
            self.target_embed = embed("target_embedding")
            self.output_projection = nn.Dense(cfg.vocab_size, dtype=cfg.dtype,
                                              name="output_projection")
        self.encoder = Encoder(cfg, self.source_embed)
        self.decoder = Decoder(cfg, self.target_embed)

    def encode(self, inputs: Array, inputs_segment_ids: Array | None = None,
               inputs_positions: Array | None = None) -> Array:
        """[b, s] source ids -> [b, s, d]."""
        if inputs_segment_ids is None:
            inputs_segment_ids = segments_of(inputs)
        return self.encoder(inputs, inputs_segment_ids, inputs_positions)

    def decode(self, encoded: Array, inputs_segment_ids: Array, decoder_inputs: Array,
               targets_segment_ids: Array | None = None,
               targets_positions: Array | None = None) -> Array:
        """Encoder output [b, s, d] and decoder inputs [b, t] -> logits [b, t, V] (float32).

        In decode mode ``decoder_inputs`` is one token per sequence, [b, 1].
        """
        if targets_segment_ids is None:
            targets_segment_ids = jnp.ones_like(decoder_inputs, jnp.int32)
        y = self.decoder(decoder_inputs, targets_segment_ids, targets_positions, encoded,
                         inputs_segment_ids)
        if self.config.share_embeddings:
            # The pre-softmax linear layer: the shared matrix, transposed, plus its own bias.
            logits = self.target_embed.attend(y) + self.logits_bias.astype(y.dtype)
        else:
            logits = self.output_projection(y)
        return logits.astype(jnp.float32)

    def __call__(self, inputs: Array, targets: Array, inputs_segment_ids: Array | None = None,
                 targets_segment_ids: Array | None = None,
                 inputs_positions: Array | None = None,
                 targets_positions: Array | None = None) -> Array:
        """Teacher-forced logits [b, t, V] for source [b, s] and target [b, t] ids."""
        if inputs_segment_ids is None:
            inputs_segment_ids = segments_of(inputs)
        if targets_segment_ids is None:
            targets_segment_ids = segments_of(targets)
        encoded = self.encode(inputs, inputs_segment_ids, inputs_positions)
        packed = targets_positions is not None
        decoder_inputs = shift_right(targets, targets_segment_ids if packed else None)
        return self.decode(encoded, inputs_segment_ids, decoder_inputs, targets_segment_ids,
                           targets_positions)
