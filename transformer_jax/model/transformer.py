"""The Transformer of "Attention Is All You Need", the whole base model in one file, in the
order of the paper's Figure 1.

Embeddings (scaled by sqrt(d_model)) + sinusoidal positions -> encoder stack of N layers
[self-attention, feed-forward] -> decoder stack of N layers [masked self-attention,
cross-attention, feed-forward] -> linear (sharing the embedding matrix) -> softmax. Attention
is scaled dot-product attention, softmax(Q K^T / sqrt(d_k)) V (:func:`dot_product_attention`),
run by every head of :class:`MultiHeadAttention`. Each sub-layer is wrapped as
LayerNorm(x + Dropout(Sublayer(x))) (post-LN, the paper's), or x + Dropout(Sublayer(LayerNorm(x)))
with ``norm="pre"``.

Read top to bottom, this file is the paper's model. What the paper does not have sits beside
it, not between the reader and the paper: the other attention kernels (``model.attention``,
the modules of ``model/kernels/``, run through ``attention.attend``) and position schemes
(``model.positions``, ``model/positions/``), whose registries keep this file's functions as
their "dense" and "sinusoidal" entries; the masks every kernel shares (``masks.py``); dropout's
counter-hash masks (``dropout.py``); the hyperparameters and their defaults (``spec.py``); the
loss (``losses.py``). The file is longer than the package's guide of about 400 lines a module,
on purpose: the paper in one place.

Shapes: b = batch, s = source length, t = target length, d = d_model, V = vocabulary,
h = heads. Token id 0 is padding and also the decoder's start symbol (targets are shifted
right by one).

Attention weights of every layer and head are sown into the ``intermediates`` collection:
``model.apply(variables, ..., mutable=["intermediates"])`` returns them; the training path,
which does not ask for the collection, never computes them.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from transformer_jax.model import attention, kernels, positions as position_schemes
from transformer_jax.model.dropout import Dropout, dropout
from transformer_jax.model.masks import MASK_VALUE, make_mask, scaled_groups
from transformer_jax.model.spec import TransformerConfig

__all__ = ["MultiHeadAttention", "Transformer", "TransformerConfig", "dot_product_attention",
           "segments_of", "shift_right", "sinusoidal_positions"]

Array = jax.Array
# LayerNorm's epsilon: the paper gives none; 1e-6 is tensor2tensor's (and flax's default).
LAYER_NORM_EPSILON = 1e-6


# ----------------------------------------------------------------------------------------
# Embeddings and positions (sections 3.4 and 3.5)


def sinusoidal_positions(max_len: int, d_model: int) -> np.ndarray:
    """Section 3.5: PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(pos / 10000^(2i/d)),
    chosen "because it may allow the model to extrapolate to sequence lengths longer than the
    ones encountered during training".

    Returns a [max_len, d_model] float32 table with sines and cosines interleaved, as in the
    paper's formula.
    """
    pos = np.arange(max_len, dtype=np.float64)[:, None]
    two_i = np.arange(0, d_model, 2, dtype=np.float64)[None, :]
    angle = pos / np.power(10000.0, two_i / d_model)
    pe = np.zeros((max_len, d_model), dtype=np.float64)
    pe[:, 0::2] = np.sin(angle)
    pe[:, 1::2] = np.cos(angle[:, : d_model // 2])
    return pe.astype(np.float32)


def sinusoidal_embedding(positions: Array, config: TransformerConfig) -> Array:
    """[b, n] positions -> [b, n, d_model]: rows of :func:`sinusoidal_positions`, or with
    ``config.position_scale`` != 1 (position interpolation, when translating) the formula at
    the scaled, fractional positions."""
    d = config.d_model
    if config.position_scale == 1.0:
        return jnp.take(jnp.asarray(sinusoidal_positions(config.max_len, d)), positions, axis=0)
    inverse = jnp.asarray(np.power(10000.0, -np.arange(0, d, 2) / d), jnp.float32)
    angle = (positions.astype(jnp.float32) * config.position_scale)[..., None] * inverse
    pe = jnp.stack([jnp.sin(angle), jnp.cos(angle)], axis=-1).reshape(*positions.shape, -1)
    return pe[..., :d]


class Embed(nn.Module):
    """Section 3.4: token embedding times sqrt(d_model); plus (3.5) the positions, then
    dropout (5.4). The paper's positions are sinusoidal; another scheme with the ``added``
    trait (learned: Table 3 row E) comes from the registry of ``model/positions/``.

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
        if cfg.positions == position_schemes.SINUSOIDAL:
            x = x + sinusoidal_embedding(positions, cfg).astype(cfg.dtype)
        else:
            scheme = position_schemes.get(cfg.positions)
            if scheme.traits.added:
                x = x + scheme.module.embedding(self, positions, cfg).astype(cfg.dtype)
        return Dropout(cfg.dropout_rate, cfg.dropout_impl)(x, deterministic=cfg.deterministic)


# ----------------------------------------------------------------------------------------
# Scaled dot-product attention (section 3.2.1)


def dot_product_attention(
    q: Array,
    k: Array,
    v: Array,
    mask: Array | None = None,
    *,
    dropout_rate: float = 0.0,
    dropout_rng: Array | None = None,
    dropout_impl: str = "hash",
    return_weights: bool = False,
) -> tuple[Array, Array | None]:
    """Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V over every head, the mask applied
    before the softmax (section 3.2.3: illegal connections set to "-inf", here
    :data:`masks.MASK_VALUE`). One q x k matrix per head, O(n^2) memory: the registry's
    "dense" kernel, against which every other kernel is measured.

    Head-major, as the projections emit them, so that both products are batched matmuls over
    (batch, head) with no transpose. The mask is added to the logits as a bias (0 where
    allowed, MASK_VALUE elsewhere), built once at [b, 1, q, k] and broadcast over the heads:
    the softmax's backward then passes through the addition untouched.

    Args:
      q: [b, h, q, d_k] queries.
      k: [b, h_kv, k, d_k] keys; h must be a multiple of h_kv (h_kv < h: grouped queries).
      v: [b, h_kv, k, d_v] values.
      mask: boolean, broadcastable to [b, h, q, k] (:func:`masks.make_mask`'s); False
        positions get zero weight.
      dropout_rate, dropout_rng, dropout_impl: dropout on the attention weights (training
        only; dropout.keep_mask makes the mask).
      return_weights: also return the weights [b, h, q, k] (after masking, before dropout).

    Returns:
      ([b, h, q, d_v] outputs, weights or None).
    """
    b, h, q_len, _ = q.shape
    h_kv, k_len = k.shape[1], k.shape[2]
    qg = scaled_groups(q, h_kv, axis=1)  # Q / sqrt(d_k), [b, h_kv, h / h_kv, q, d_k]
    if mask is not None:
        mask = jnp.asarray(mask)
        if mask.ndim == 4 and mask.shape[1] == 1:  # one mask for every head: [b, 1, 1, q, k]
            mask = mask[:, :, None]
        else:
            mask = jnp.broadcast_to(mask, (b, h, q_len, k_len)).reshape(
                b, h_kv, h // h_kv, q_len, k_len)
        # A query that sees no key (padding) gets the same bias on every logit: the softmax
        # would ignore it and the gradient would be unmasked attention's. Zeroing that
        # query makes its weights uniform by construction and its d/dq and d/dk zero, as
        # with masked logits held constant (and as the blockwise kernel gives).
        qg = qg * mask.any(-1, keepdims=True).astype(qg.dtype)
    logits = jnp.einsum("bhgqd,bhkd->bhgqk", qg, k, preferred_element_type=jnp.float32)
    if mask is not None:
        logits = logits + jnp.where(mask, 0.0, MASK_VALUE).astype(jnp.float32)
    weights = jax.nn.softmax(logits, axis=-1)
    shown = weights.reshape(b, h, q_len, k_len) if return_weights else None
    if dropout_rate > 0.0 and dropout_rng is not None:
        weights = dropout(weights, dropout_rate, dropout_rng, dropout_impl)
    out = jnp.einsum("bhgqk,bhkd->bhgqd", weights.astype(v.dtype), v)
    return out.reshape(b, h, q_len, v.shape[-1]), shown


# ----------------------------------------------------------------------------------------
# Multi-head attention (section 3.2.2) and, for decoding, its key/value cache


class Projection(nn.Module):
    """Several linear projections of one input as one matmul, grouped by head: the
    W_i^Q, W_i^K and W_i^V of every head i (section 3.2.2).

    The kernel is [d_in, groups, sum(widths)]: for every group (a key/value head) the columns
    of each part (e.g. its queries, key and value) sit side by side, so splitting the groups
    axis across devices splits whole heads. x is [b, n, d_in]; returns one head-major
    [b, groups, n, width] array per part, the layout attention multiplies in.
    Each part is initialised as its own Glorot-uniform layer of groups * width outputs;
    parts listed in ``unbiased`` get no bias.
    """

    widths: tuple[int, ...]
    groups: int = 1
    unbiased: tuple[int, ...] = ()
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: Array) -> list[Array]:
        d_in, g = x.shape[-1], self.groups

        def kernel_init(key, shape, dtype=jnp.float32):
            keys = jax.random.split(key, len(self.widths))
            parts = []
            for k, w in zip(keys, self.widths, strict=True):
                limit = np.sqrt(6.0 / (d_in + g * w))
                parts.append(jax.random.uniform(k, (d_in, g, w), dtype, -limit, limit))
            return jnp.concatenate(parts, axis=-1)

        kernel = self.param("kernel", kernel_init, (d_in, g, sum(self.widths)))
        biased = [w for i, w in enumerate(self.widths) if i not in self.unbiased]
        bias = self.param("bias", nn.initializers.zeros, (g, sum(biased)))
        pieces, start = [], 0
        for i, w in enumerate(self.widths):
            if i in self.unbiased:
                pieces.append(jnp.zeros((g, w), bias.dtype))
            else:
                pieces.append(bias[:, start:start + w])
                start += w
        # Multiplied token-major, then turned head-major: asked for [b, g, n, w] directly,
        # XLA's CPU backend transposes the kernel instead, at every step of a decoding loop.
        y = jnp.einsum("bnd,dgw->bngw", x.astype(self.dtype), kernel.astype(self.dtype))
        y = (y + jnp.concatenate(pieces, axis=-1).astype(self.dtype)).swapaxes(1, 2)
        return jnp.split(y, np.cumsum(self.widths)[:-1].tolist(), axis=-1)


class MultiHeadAttention(nn.Module):
    """Section 3.2.2: MultiHead(Q, K, V) = Concat(head_1..head_h) W_O, with
    head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V).

    ``kind`` is "self" (encoder), "causal" (decoder, masked: section 3.2.3) or "cross"
    (queries from the decoder, keys and values from the encoder). Self-attention projects Q,
    K and V with one fused matmul. The key projection has no bias: it would add the same q.b
    to every logit of a row, which the softmax ignores, so its gradient is zero and Adam would
    only amplify rounding noise. In decode mode "causal" keeps its keys and values in the
    ``cache`` collection and "cross" computes the encoder's keys and values once per
    sentence, shared by all of that sentence's beam-search hypotheses.
    Queries, keys and values are head-major, [b, h, n, d_k]. ``config.attention`` names the
    kernel: the paper's, "dense", is :func:`dot_product_attention` called here; any other
    runs through ``attention.attend``, which hands a call that reads the weights out
    (``intermediates`` mutable) to the dense kernel, applies dropout to the weights, and runs
    cross-attention blockwise when the kernel is "local". A scheme of ``model/positions/``
    with the ``rotates`` trait (rotary) turns self-attention's queries and keys.
    """

    config: TransformerConfig
    kind: str

    @nn.compact
    def __call__(self, x: Array, segment_ids: Array, context: Array | None = None,
                 context_segment_ids: Array | None = None) -> Array:
        """x: [b, q, d] with segment ids [b, q]; context: [b, k, d] with [b, k] -> [b, q, d].

        Cross-attention also takes a context of fewer rows, [n, k, d] with [n, k], where b is
        a multiple of n: rows i * b / n .. (i + 1) * b / n - 1 of x (the hypotheses of beam
        search) then all attend to context row i (one sentence).
        """
        cfg = self.config
        h, h_kv, d_k, d_v = cfg.num_heads, cfg.kv_heads, cfg.d_k, cfg.d_v
        b, q_len = x.shape[:2]
        if self.kind == "cross":
            (q,) = Projection((d_k,), groups=h, dtype=cfg.dtype, name="query")(x)
            k, v = self._cross_keys_values(context)
            kv_segment_ids = context_segment_ids
        else:
            # Each key/value head with the query heads that share it.
            q, k, v = Projection((h // h_kv * d_k, d_k, d_v), groups=h_kv, unbiased=(1,),
                                 dtype=cfg.dtype, name="qkv")(x)
            if h > h_kv:  # [b, h_kv, q, g * d_k] -> [b, h_kv, g, q, d_k]
                q = q.reshape(b, h_kv, q_len, h // h_kv, d_k).swapaxes(2, 3)
            kv_segment_ids = segment_ids
        q = q.reshape(b, h, q_len, d_k)  # head-major, as every kernel takes it
        sentences = k.shape[0]
        folded = self.kind == "cross" and sentences != b
        if folded:
            # Beam search: x holds b / sentences hypotheses of each sentence, which all attend
            # to that sentence's keys and values. Folding the hypotheses into the query axis,
            # [sentences, h, beams * q, d_k], shares one copy of the keys and values instead
            # of repeating them per hypothesis (and reordering them with the beams).
            beams = b // sentences
            q = q.reshape(sentences, beams, h, q_len, d_k).swapaxes(1, 2).reshape(
                sentences, h, beams * q_len, d_k)
            segment_ids = segment_ids.reshape(sentences, -1)

        caching = cfg.decode and self.kind == "causal"
        q_offset = self._cache_index() if caching else 0
        if cfg.positions != position_schemes.SINUSOIDAL and self.kind != "cross":
            scheme = position_schemes.get(cfg.positions)
            if scheme.traits.rotates:
                # Queries and keys turned by their positions in the row (packed rows:
                # relative scores within a sentence are the same), keys before they are cached.
                where = jnp.arange(q_len) + q_offset
                q = scheme.module.rotate(q, where, cfg.position_scale)
                k = scheme.module.rotate(k, where, cfg.position_scale)
        # The paper's kernel is this file's; another is its registry's entry.
        kernel = None if cfg.attention == kernels.DENSE else kernels.get(cfg.attention)
        recurrent = kernel is not None and kernel.traits.recurrent
        if caching and recurrent and self.has_variable("cache", "cache_index"):
            out, weights = self._recurrent_step(kernel, q, k, v), None
        else:
            if caching:
                k, v, q_offset, kv_segment_ids = self._update_cache(k, v, segment_ids, kernel)
            dropout_rng = None
            if not cfg.deterministic and cfg.attention_dropout_rate > 0:
                dropout_rng = self.make_rng("dropout")
            causal = self.kind == "causal"
            if kernel is None:  # the paper's: scaled dot-product attention
                mask = make_mask(segment_ids, kv_segment_ids, causal=causal, q_offset=q_offset)
                out, weights = dot_product_attention(
                    q, k, v, mask, dropout_rate=cfg.attention_dropout_rate,
                    dropout_rng=dropout_rng, dropout_impl=cfg.dropout_impl,
                    return_weights=self.is_mutable_collection("intermediates"))
            else:
                # A windowed kernel (local) restricts self-attention only: cross-attention has
                # no window; the other kernels ignore it.
                out, weights = attention.attend(
                    cfg.attention, q, k, v, segment_ids, kv_segment_ids, causal=causal,
                    q_offset=q_offset, window=None if self.kind == "cross" else cfg.local_window,
                    global_tokens=cfg.global_tokens, block_size=cfg.block_size,
                    random_features=cfg.random_features,
                    dropout_rate=cfg.attention_dropout_rate, dropout_rng=dropout_rng,
                    dropout_impl=cfg.dropout_impl,
                    return_weights=self.is_mutable_collection("intermediates"))
        if folded:  # back to the rows of x: [b, h, q, ...]
            unfold = lambda y: y.reshape(sentences, h, beams, q_len, -1).swapaxes(  # noqa: E731
                1, 2).reshape(b, h, q_len, -1)
            out = unfold(out)
            weights = None if weights is None else unfold(weights)
        if weights is not None:
            self.sow("intermediates", "attention_weights", weights)
        out = out.swapaxes(1, 2).reshape(b, q_len, h * d_v)  # Concat(head_1..head_h)
        return nn.Dense(cfg.d_model, dtype=cfg.dtype, kernel_init=nn.initializers.xavier_uniform(),
                        name="out")(out)

    def _cross_keys_values(self, context: Array) -> tuple[Array, Array]:
        cfg = self.config
        h_kv, d_k, d_v = cfg.kv_heads, cfg.d_k, cfg.d_v

        def project() -> tuple[Array, Array]:
            k, v = Projection((d_k, d_v), groups=h_kv, unbiased=(0,), dtype=cfg.dtype,
                              name="key_value")(context)
            return k, v

        if not cfg.decode:
            return project()
        # Decode mode: the first call (priming the cache) projects the encoder output once;
        # every later step reads the stored keys and values.
        if self.has_variable("cache", "cross_key"):
            return (self.get_variable("cache", "cross_key"),
                    self.get_variable("cache", "cross_value"))
        k, v = project()
        self.put_variable("cache", "cross_key", k)
        self.put_variable("cache", "cross_value", v)
        return k, v

    def _cache_index(self) -> Array | int:
        """The position of this step's first query (0 in the priming call)."""
        if not self.has_variable("cache", "cache_index"):
            return 0
        return self.get_variable("cache", "cache_index")

    def _recurrent_step(self, kernel: kernels.Kernel, q: Array, k: Array, v: Array) -> Array:
        """A decoding step of a recurrent kernel (linear attention): its state of fixed size
        takes this token's key and value and answers its query; no keys are kept."""
        state = self.variable("cache", "kernel_state")
        index = self.variable("cache", "cache_index")
        out, state.value = kernel.function("step")(state.value, q, k, v,
                                                   random_features=self.config.random_features)
        index.value = index.value + q.shape[2]
        return out

    def _update_cache(self, k: Array, v: Array, segment_ids: Array,
                      kernel: kernels.Kernel | None) -> tuple[Array, Array, Array | int, Array]:
        """Writes this step's keys/values at the cache index; returns the full cache. The
        priming call only allocates it: the keys and values of every position, or a
        recurrent kernel's state (``kernel``: None for the paper's)."""
        index = self.variable("cache", "cache_index", lambda: jnp.zeros((), jnp.int32))
        if kernel is not None and kernel.traits.recurrent:
            self.variable("cache", "kernel_state", kernel.function("init_state"), k, v,
                          random_features=self.config.random_features)
            return k, v, 0, segment_ids
        is_initialized = self.has_variable("cache", "cached_key")
        cached_k = self.variable("cache", "cached_key", jnp.zeros, k.shape, k.dtype)
        cached_v = self.variable("cache", "cached_value", jnp.zeros, v.shape, v.dtype)
        if not is_initialized:  # the priming call only allocates the cache
            return k, v, 0, segment_ids
        i = index.value
        cached_k.value = jax.lax.dynamic_update_slice(cached_k.value, k, (0, 0, i, 0))
        cached_v.value = jax.lax.dynamic_update_slice(cached_v.value, v, (0, 0, i, 0))
        index.value = i + k.shape[2]
        b, _, max_len = cached_k.value.shape[:3]
        return cached_k.value, cached_v.value, i, jnp.ones((b, max_len), segment_ids.dtype)


# ----------------------------------------------------------------------------------------
# Add & Norm, the feed-forward network, the layers and stacks (section 3.1)


class AddNorm(nn.Module):
    """Add & Norm (sections 3.1 and 5.4): LayerNorm(x + Dropout(Sublayer(x))), the residual
    connection around each sub-layer followed by layer normalisation, the sub-layer's output
    dropped out before the addition; with ``norm="pre"``, x + Dropout(Sublayer(LayerNorm(x)))."""

    config: TransformerConfig

    @nn.compact
    def __call__(self, x: Array, sublayer: Any) -> Array:
        cfg = self.config
        norm = nn.LayerNorm(epsilon=LAYER_NORM_EPSILON, dtype=cfg.dtype, name="norm")
        dropout = Dropout(cfg.dropout_rate, cfg.dropout_impl)
        if cfg.norm == "pre":
            return x + dropout(sublayer(norm(x)), deterministic=cfg.deterministic)
        return norm(x + dropout(sublayer(x), deterministic=cfg.deterministic))


class FeedForward(nn.Module):
    """Section 3.3, the position-wise feed-forward network: FFN(x) = max(0, x W1 + b1) W2 + b2,
    d_model -> d_ff -> d_model."""

    config: TransformerConfig

    @nn.compact
    def __call__(self, x: Array) -> Array:
        cfg = self.config
        init = nn.initializers.xavier_uniform()
        y = nn.Dense(cfg.d_ff, dtype=cfg.dtype, kernel_init=init, name="w1")(x)
        return nn.Dense(cfg.d_model, dtype=cfg.dtype, kernel_init=init, name="w2")(nn.relu(y))


class EncoderLayer(nn.Module):
    """An encoder layer (section 3.1): multi-head self-attention, then the feed-forward
    network, each inside Add & Norm."""

    config: TransformerConfig

    @nn.compact
    def __call__(self, x: Array, segment_ids: Array) -> Array:
        cfg = self.config
        attn = MultiHeadAttention(cfg, "self", name="self_attention")
        x = AddNorm(cfg, name="self_attention_add_norm")(x, lambda y: attn(y, segment_ids))
        return AddNorm(cfg, name="ffn_add_norm")(x, FeedForward(cfg, name="ffn"))


class DecoderLayer(nn.Module):
    """A decoder layer (section 3.1): masked multi-head self-attention (a position sees only
    those before it), multi-head attention over the encoder's output, then the feed-forward
    network, each inside Add & Norm."""

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
    """The encoder stack: the embedded source through N = ``num_layers`` encoder layers (with
    pre-LN, a final LayerNorm). ``remat`` recomputes each layer's activations in the backward
    pass."""

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
    """The decoder stack: the embedded, shifted-right target through N decoder layers (with
    pre-LN, a final LayerNorm)."""

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
# The Transformer: the output projection (section 3.4), teacher forcing


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
    """The encoder-decoder. ``__call__`` gives teacher-forced logits [b, t, V].

    Section 3.4: with ``share_embeddings`` (the paper's) the source embedding, the target
    embedding and the pre-softmax linear transformation share one weight matrix, and the
    output projection is that matrix transposed plus a bias of its own; without, each is its
    own. The softmax and the label-smoothed loss are ``losses.py``'s.
    """

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
