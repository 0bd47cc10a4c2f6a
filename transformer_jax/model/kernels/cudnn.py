"""The cudnn kernel: ``jax.nn.dot_product_attention`` with cuDNN's fused (flash) kernel on a
GPU, XLA's implementation elsewhere."""

from __future__ import annotations

import logging

import jax
import jax.numpy as jnp

from transformer_jax.model.kernels import Traits
from transformer_jax.model.masks import log_once, make_mask, token_major

TRAITS = Traits(exact=True, returns_weights=False, supports_dropout=False, segment_ids=True,
                needs_equal_head_dims=True)


def run(q, k, v, q_segment_ids, kv_segment_ids, *, causal=False, q_offset=0, **_):
    """The registry's call (``kernels`` module docstring)."""
    return fused_attention(q, k, v, q_segment_ids, kv_segment_ids, causal=causal,
                           q_offset=q_offset), None


def unavailable() -> str | None:
    """Why cuDNN's fused attention cannot run here, or None if it can."""
    device = jax.devices()[0]
    if device.platform != "gpu":
        return f"cuDNN fused attention needs an NVIDIA GPU; this device is {device.platform}"
    capability = getattr(device, "compute_capability", None)
    if capability is not None and float(capability) < 8.0:
        return (f"cuDNN fused attention needs compute capability >= 8.0; {device.device_kind} "
                f"has {capability}")
    return None


def fused_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    q_segment_ids: jax.Array,
    kv_segment_ids: jax.Array,
    *,
    causal: bool = False,
    q_offset: jax.Array | int = 0,
) -> jax.Array:
    """``jax.nn.dot_product_attention`` with cuDNN's fused (flash) kernel on a GPU.

    cuDNN computes in float16/bfloat16 only: float32 inputs are cast to bfloat16 for the call
    (logged once) and the output cast back. On any other backend the same call runs XLA's
    implementation, after one log line saying so. The mask is :func:`make_mask`'s.

    Args:
      q: [b, h, q, d]; k, v: [b, h_kv, k, d] (cuDNN needs d_k == d_v).

    Returns:
      [b, h, q, d] in v's dtype.
    """
    if k.shape[-1] != v.shape[-1]:
        raise ValueError(f"the cudnn kernel needs d_k == d_v, got {k.shape[-1]} and "
                         f"{v.shape[-1]}")
    mask = make_mask(q_segment_ids, kv_segment_ids, causal=causal, q_offset=q_offset)
    if jax.default_backend() == "gpu":
        implementation = "cudnn"
        dtype = q.dtype
        if dtype not in (jnp.bfloat16, jnp.float16):
            log_once(f"attention 'cudnn': cuDNN computes in bfloat16; casting {dtype} "
                     "queries, keys and values for the call")
            dtype = jnp.bfloat16
    else:
        implementation, dtype = "xla", q.dtype
        log_once(f"attention 'cudnn' needs a GPU; on {jax.default_backend()} it falls back to "
                 "XLA's jax.nn.dot_product_attention", logging.WARNING)
    # jax.nn.dot_product_attention takes [batch, length, heads, width].
    out = jax.nn.dot_product_attention(*(token_major(x.astype(dtype)) for x in (q, k, v)),
                                       mask=mask, implementation=implementation)
    return token_major(out).astype(v.dtype)

