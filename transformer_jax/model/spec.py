"""The model's static hyperparameters, named as in the paper, with the paper's base model as
their defaults. Plain data (numpy alone), so the experiment config can read its defaults here
without importing the network."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np


def head_dims(d_model: int, num_heads: int, d_k: int = 0, d_v: int = 0) -> tuple[int, int]:
    """(d_k, d_v), each 0 resolved to d_model // num_heads (the paper's d_k = d_v = d_model / h)."""
    return d_k or d_model // num_heads, d_v or d_model // num_heads


# The dropout masks model/dropout.py draws (TransformerConfig.dropout_impl), the choices of
# model.dropout_impl.
DROPOUT_IMPLEMENTATIONS = ("hash", "jax")


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """Static model hyperparameters, named as in the paper. The defaults are the paper's base
    model: the one place they are written (the experiment config's ``model`` section takes its
    defaults from here)."""

    vocab_size: int
    num_layers: int = 6  # N, the same for encoder and decoder
    d_model: int = 512
    d_ff: int = 2048
    num_heads: int = 8  # h
    d_k: int = 64  # d_model / h
    d_v: int = 64
    num_kv_heads: int = 0  # key/value heads; 0: one per query head (the paper's); 1: multi-query
    # The attention kernel, a module of model/kernels/ (kernels.names()): "dense" is the paper's.
    attention: str = "dense"
    block_size: int = 256  # the blockwise kernel's tile; of 128, 256, 512 the fastest on CPU
    local_window: int = 128  # r: a query sees keys at most r positions away (causal: r before)
    # local_global: the first g positions of every sentence see and are seen by every position.
    # 2: BigBird's two global blocks (its ITC pattern), at one token a block; with the window,
    # any two positions are two hops apart through either, and two keep a sentence's start
    # (in the decoder, the start symbol and the first word) in every query's view.
    global_tokens: int = 2
    # performer: random features m per head. 256 = 4 d_k of the base model: Performer's
    # experiments use m = 256 for d_k = 64, within its m = O(d log d) rule.
    random_features: int = 256
    dropout_rate: float = 0.1  # P_drop: sub-layer outputs and embedding + position sums
    # The paper names no dropout on attention weights; tensor2tensor added it later.
    attention_dropout_rate: float = 0.0
    # Dropout masks, one of DROPOUT_IMPLEMENTATIONS: "hash" (a counter hash seeded from
    # jax.random; fast) or "jax" (jax.random.bernoulli, flax's nn.Dropout). See
    # model/dropout.py.
    dropout_impl: str = "hash"
    share_embeddings: bool = True  # source, target and pre-softmax share one matrix
    # A module of model/positions/ (positions.names()): "sinusoidal" is the paper's, "learned"
    # Table 3 row E, "rotary" RoPE.
    positions: str = "sinusoidal"
    norm: str = "post"  # the paper's LayerNorm(x + Sublayer(x)); "pre": LayerNorm first
    max_len: int = 512  # positions table size; longest sequence the model accepts
    dtype: Any = np.dtype("float32")  # compute dtype; parameters are always float32
    remat: bool = False  # recompute each layer's activations in the backward pass
    deterministic: bool = False  # True for evaluation: no dropout
    decode: bool = False  # True for incremental decoding with a key/value cache
    # Positions are multiplied by this (schemes with the ``interpolates`` trait): position
    # interpolation, set from decode.position_scale when translating; 1 in training.
    position_scale: float = 1.0

    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_heads

    def replace(self, **changes: Any) -> TransformerConfig:
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_config(cls, model_config: Any, vocab_size: int) -> TransformerConfig:
        """Builds it from the ``model`` section of an experiment config."""
        import jax.numpy as jnp  # knows bfloat16

        m = model_config
        d_k, d_v = head_dims(m.d_model, m.num_heads, m.d_k, m.d_v)
        # Settings added after a run started are absent from its saved config: the defaults.
        later = {k: m.get(k, getattr(cls, k)) for k in ("num_kv_heads", "attention", "block_size",
                                                 "local_window", "dropout_impl", "remat",
                                                 "global_tokens", "random_features")}
        return cls(
            vocab_size=vocab_size, num_layers=m.num_layers, d_model=m.d_model, d_ff=m.d_ff,
            num_heads=m.num_heads, d_k=d_k, d_v=d_v, dropout_rate=m.dropout_rate,
            attention_dropout_rate=m.attention_dropout_rate,
            share_embeddings=m.share_embeddings, positions=m.positions, norm=m.norm,
            max_len=m.max_len, dtype=jnp.dtype(m.dtype), **later)
