"""The linear kernel: linear attention with the feature map elu(x) + 1 (Katharopoulos et al.,
"Transformers are RNNs", 2020). softmax's exp(q . k / sqrt(d_k)) becomes
phi(q) . phi(k), phi(x) = elu(x) + 1 > 0, so attention costs O(n d_k d_v) and cached decoding
keeps a state of fixed size: the decoder is a recurrent network. Not the paper's function
(``exact`` False): a run trained with it may not resume with another kernel. The shared
machinery is ``_linear.py``'s."""

from __future__ import annotations

import jax

from transformer_jax.model.kernels import Traits, _linear

TRAITS = Traits(exact=False, returns_weights=True, supports_dropout=False, segment_ids=True,
                recurrent=True)


def features(x: jax.Array, is_query: bool = False) -> jax.Array:
    """phi(x) = elu(x) + 1, elementwise: [..., d_k] -> [..., d_k] in float32."""
    del is_query  # the same map for queries and keys
    return jax.nn.elu(x.astype("float32")) + 1.0


def run(q, k, v, q_segment_ids, kv_segment_ids, *, causal=False, q_offset=0,
        return_weights=False, **_):
    """The registry's call (``kernels`` module docstring)."""
    return _linear.attention(q, k, v, q_segment_ids, kv_segment_ids, features, causal=causal,
                             q_offset=q_offset, return_weights=return_weights)


def reference(q, k, v, q_segment_ids, kv_segment_ids, *, causal=False, **_):
    """The same function with its q x k weights written out."""
    return _linear.explicit(q, k, v, q_segment_ids, kv_segment_ids, features,
                            causal=causal)[0]


def init_state(k, v, **_):
    """Cached decoding's state: S [b, h_kv, d_k, d_v + 1] (``_linear.init_state``)."""
    return _linear.init_state(k, v, k.shape[-1])


def step(state, q, k, v, **_):
    """One decoded token (``_linear.step``)."""
    return _linear.step(state, q, k, v, features)
