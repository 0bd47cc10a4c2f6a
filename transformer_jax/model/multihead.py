"""Multi-head attention (the paper's section 3.2.2): the projections of queries, keys and
values grouped by head, the kernel ``model.attention`` names run by ``attention.attend``, the
positions a rotary scheme turns them by, and in decode mode the key/value cache (or a
recurrent kernel's state) and the encoder's keys and values kept once per sentence.
``transformer.py`` builds its layers from it."""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from transformer_jax.model import attention, kernels, positions as position_schemes
from transformer_jax.model.spec import TransformerConfig

Array = jax.Array


class Projection(nn.Module):
    """Several linear projections of one input as one matmul, grouped by head.

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
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W_O, head_i = Attention(Q W_Q, K W_K, V W_V).

    ``kind`` is "self" (encoder), "causal" (decoder, masked) or "cross" (queries from the
    decoder, keys and values from the encoder). Self-attention projects Q, K and V with one
    fused matmul. The key projection has no bias: it would add the same q.b to every logit of
    a row, which the softmax ignores, so its gradient is zero and Adam would only amplify
    rounding noise. In decode mode "causal" keeps its keys and values in the ``cache``
    collection and "cross" computes the encoder's keys and values once per sentence, shared
    by all of that sentence's beam-search hypotheses.
    Queries, keys and values are head-major, [b, h, n, d_k]. ``config.attention`` names the
    kernel and ``attention.attend``, the one call, runs it: it hands a call that reads the
    weights out (``intermediates`` mutable) to the dense kernel, applies dropout to the
    weights, and runs cross-attention blockwise when the kernel is "local".
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
        scheme = position_schemes.get(cfg.positions)
        if scheme.traits.rotates and self.kind != "cross":
            # Queries and keys turned by their positions in the row (packed rows: relative
            # scores within a sentence are the same), keys before they are cached.
            where = jnp.arange(q_len) + q_offset
            q = scheme.module.rotate(q, where, cfg.position_scale)
            k = scheme.module.rotate(k, where, cfg.position_scale)
        kernel = kernels.get(cfg.attention)
        if caching and kernel.traits.recurrent and self.has_variable("cache", "cache_index"):
            out, weights = self._recurrent_step(kernel, q, k, v), None
        else:
            if caching:
                k, v, q_offset, kv_segment_ids = self._update_cache(k, v, segment_ids, kernel)
            dropout_rng = None
            if not cfg.deterministic and cfg.attention_dropout_rate > 0:
                dropout_rng = self.make_rng("dropout")
            # A windowed kernel (local) restricts self-attention only: cross-attention has no
            # window; the other kernels ignore it.
            out, weights = attention.attend(
                cfg.attention, q, k, v, segment_ids, kv_segment_ids,
                causal=self.kind == "causal", q_offset=q_offset,
                window=None if self.kind == "cross" else cfg.local_window,
                global_tokens=cfg.global_tokens, block_size=cfg.block_size,
                random_features=cfg.random_features, dropout_rate=cfg.attention_dropout_rate,
                dropout_rng=dropout_rng, dropout_impl=cfg.dropout_impl,
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

    def _update_cache(self, k: Array, v: Array, segment_ids: Array, kernel: kernels.Kernel
                      ) -> tuple[Array, Array, Array | int, Array]:
        """Writes this step's keys/values at the cache index; returns the full cache. The
        priming call only allocates it: the keys and values of every position, or a
        recurrent kernel's state."""
        index = self.variable("cache", "cache_index", lambda: jnp.zeros((), jnp.int32))
        if kernel.traits.recurrent:
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
