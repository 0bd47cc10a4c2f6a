"""The performer kernel: softmax attention approximated with positive orthogonal random
features (FAVOR+, Choromanski et al., "Rethinking Attention with Performers", 2021).

With q' = q / d_k^(1/4) and k' likewise, exp(q . k / sqrt(d_k)) = exp(q' . k') is the
expectation over w ~ N(0, I) of exp(w . q' - |q'|^2 / 2) exp(w . k' - |k'|^2 / 2). m =
``model.random_features`` draws of w give phi(x) = exp(W x' - |x'|^2 / 2) / sqrt(m) > 0, and
phi(q) . phi(k) estimates the softmax's numerator without bias, with relative variance
(exp(|q' + k'|^2) - 1) / m for independent draws (Lemma 2 of the paper); orthogonal draws
(used here: blocks of d_k orthogonal rows with Gaussian norms) have no more. The outputs then
approach softmax attention as m grows, their error falling as 1 / sqrt(m)
(tests/model/test_linear_attention.py measures it). Attention costs O(n m d_v); cached
decoding keeps a state of fixed size.

The draws are fixed (a seeded generator, one set for every layer and head), so training,
evaluation and decoding use the same features. Keys are not shifted by a running maximum:
w . k' - |k'|^2 / 2 = |w|^2 / 2 - |w - k'|^2 / 2 <= |w|^2 / 2, about d_k / 2 (32 for
d_k = 64), far below float32's and bfloat16's limit of 88; queries are shifted by their own
maximum, which cancels in the ratio. Not the paper's function (``exact`` False).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from transformer_jax.model.kernels import Traits, _linear

TRAITS = Traits(exact=False, returns_weights=True, supports_dropout=False, segment_ids=True,
                recurrent=True)
# The draws of every performer kernel: changing it changes every trained model's function.
SEED = 0


@functools.cache
def projection(features: int, d_k: int, seed: int = SEED) -> np.ndarray:
    """[features, d_k] random feature directions: blocks of d_k orthogonal rows (a uniformly
    random rotation: the Q of a Gaussian matrix's QR, signed by R's diagonal), each row
    scaled to the norm of a Gaussian vector of d_k entries, so every row is distributed as
    N(0, I)."""
    rng = np.random.default_rng(seed)
    blocks = []
    for _ in range(-(-features // d_k)):
        orthogonal, r = np.linalg.qr(rng.standard_normal((d_k, d_k)))
        # Signs from R's diagonal make Q uniform over rotations (Haar): QR alone does not.
        blocks.append((orthogonal * np.sign(np.diag(r))).T)
    directions = np.concatenate(blocks)[:features]
    norms = np.linalg.norm(rng.standard_normal((features, d_k)), axis=1)
    return (directions * norms[:, None]).astype(np.float32)


def feature_map(random_features: int) -> _linear.FeatureMap:
    """phi for ``random_features`` draws: x [..., d_k] -> [..., m], float32."""

    def phi(x: jax.Array, is_query: bool = False) -> jax.Array:
        d_k = x.shape[-1]
        x = x.astype(jnp.float32) * d_k ** -0.25
        w = jnp.asarray(projection(random_features, d_k))
        exponent = jnp.einsum("...d,md->...m", x, w) - 0.5 * jnp.sum(x * x, -1, keepdims=True)
        if is_query:  # cancels between numerator and denominator
            exponent = exponent - jax.lax.stop_gradient(exponent.max(-1, keepdims=True))
        return jnp.exp(exponent) * random_features ** -0.5

    return phi


def run(q, k, v, q_segment_ids, kv_segment_ids, *, causal=False, q_offset=0,
        return_weights=False, random_features=256, **_):
    """The registry's call (``kernels`` module docstring)."""
    return _linear.attention(q, k, v, q_segment_ids, kv_segment_ids,
                             feature_map(random_features), causal=causal, q_offset=q_offset,
                             return_weights=return_weights)


def reference(q, k, v, q_segment_ids, kv_segment_ids, *, causal=False, random_features=256,
              **_):
    """The same function with its q x k weights written out."""
    return _linear.explicit(q, k, v, q_segment_ids, kv_segment_ids,
                            feature_map(random_features), causal=causal)[0]


def init_state(k, v, *, random_features=256, **_):
    """Cached decoding's state: S [b, h_kv, m, d_v + 1] (``_linear.init_state``)."""
    return _linear.init_state(k, v, random_features)


def step(state, q, k, v, *, random_features=256, **_):
    """One decoded token (``_linear.step``)."""
    return _linear.step(state, q, k, v, feature_map(random_features))
