"""Attention by name: :func:`attend` runs the kernel ``model.attention`` names.

The paper's scaled dot-product attention, softmax(Q K^T / sqrt(d_k)) V with the mask applied
before the softmax, is ``transformer.dot_product_attention``, which the model calls itself
for the paper's kernel, "dense". The kernels that compute the same numbers with less memory
(blockwise, cudnn) or attend to fewer keys (local) are the modules of ``model/kernels/``, one
each with its traits (``kernels.Traits``); the model runs them through :func:`attend`, which
reads the chosen kernel's traits, not its name, to decide what runs. Their masks are
``model/masks.py``'s.
"""

from __future__ import annotations

import jax

from transformer_jax.model import kernels
from transformer_jax.model.masks import log_once


def attend(
    kernel: str,
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    q_segment_ids: jax.Array,
    kv_segment_ids: jax.Array,
    *,
    causal: bool = False,
    q_offset: jax.Array | int = 0,
    window: int | None = None,
    global_tokens: int = 0,
    block_size: int = 256,
    random_features: int = 256,
    dropout_rate: float = 0.0,
    dropout_rng: jax.Array | None = None,
    dropout_impl: str = "hash",
    return_weights: bool = False,
) -> tuple[jax.Array, jax.Array | None]:
    """Attention by the kernel named ``kernel`` (a module of ``model/kernels/``; "dense" too,
    through its entry): it chooses what runs, from the kernel's traits.

    Head-major q [b, h, q, d_k], k [b, h_kv, k, d_k], v [b, h_kv, k, d_v] with segment ids
    [b, q] and [b, k]; returns ([b, h, q, d_v], the weights [b, h, q, k] or None).

    * ``window`` is r for a kernel with the ``window`` trait (local). Without one
      (cross-attention: the keys are not positions of the queries, so no neighbourhood
      exists) its ``without_window`` kernel runs ("local": "blockwise", which also holds no
      q x k matrix). ``global_tokens`` g goes with it to a kernel with the
      ``global_tokens`` trait (local_global): the first g positions of every segment are
      global.
    * Asked for the weights (``return_weights``), a kernel that has none hands over to the
      dense kernel, once logged, with its band and global mask where it has one: the same
      outputs, plus the weights.
    * Dropout on the weights (``dropout_rate`` > 0 with a ``dropout_rng``: training) is
      refused by a kernel that does not support it.
    * ``block_size`` is the blockwise kernel's tile, ``random_features`` the performer
      kernel's number of features.

    An unknown ``kernel`` raises ConfigError naming the known ones.
    """
    chosen = kernels.get(kernel)
    if chosen.traits.window and window is None:
        chosen = kernels.get(chosen.traits.without_window)
    band = window if chosen.traits.window else None
    globals_ = global_tokens if band is not None and chosen.traits.global_tokens else 0
    if return_weights and not chosen.traits.returns_weights:
        log_once(f"attention weights asked for: the {chosen.name!r} kernel has none, so the "
                 "dense kernel computes them (same outputs)")
        chosen = kernels.get(kernels.DENSE)
    if dropout_rate > 0.0 and dropout_rng is not None and not chosen.traits.supports_dropout:
        raise ValueError(f"attention dropout (rate {dropout_rate}) needs a kernel that "
                         f"supports it ({', '.join(kernels.having('supports_dropout'))}); the "
                         f"{chosen.name!r} kernel has none")
    return chosen.run(q, k, v, q_segment_ids, kv_segment_ids, causal=causal, q_offset=q_offset,
                      window=band, global_tokens=globals_, block_size=block_size,
                      random_features=random_features, dropout_rate=dropout_rate,
                      dropout_rng=dropout_rng, dropout_impl=dropout_impl,
                      return_weights=return_weights)
