"""Dropout whose mask comes from a counter-based hash (fast everywhere) or from jax.random.

The paper drops 10% of every sub-layer output and of the embedding + position sums: 32 masks
of [tokens, d_model] per step for the base model. With ``jax.random.bernoulli`` (threefry)
drawing those masks took about a seventh of the CPU time of a base-model train step. The
``"hash"`` mask instead hashes each element's index with two 32-bit seeds drawn from the
layer's key (threefry still makes the seeds; flax still folds the module path into the key):

    bits = mix(mix(index ^ seed0) + seed1),   keep = bits >= round(rate * 2^32)

``mix`` is the "lowbias32" integer finaliser (xor-shift / multiply rounds; a bijection on 32
bits whose output bits each flip with probability close to 1/2 when any input bit flips).
It is a few integer ops per element, fuses into its consumer, and is elementwise in the
index, so a mask sharded over devices is the same as the one made on one device.
``impl="jax"`` keeps flax's ``nn.Dropout`` mask (jax.random.bernoulli) for comparison.

A step run by ``pmap`` sees one device's block of the batch's rows as an array of its own.
Inside :func:`rows_block` its masks are that block of the whole batch's masks (the hash
offsets the element index; ``"jax"`` draws the whole mask and slices it), so pmap drops the
elements jit over a mesh drops for the same rows: the two paths train alike with dropout on.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Iterator

import flax.linen as nn
import jax
import jax.numpy as jnp

from transformer_jax.model.spec import DROPOUT_IMPLEMENTATIONS

_M1 = 0x7FEB352D
_M2 = 0x846CA68B


def _mix(x: jax.Array) -> jax.Array:
    x = x ^ (x >> 16)
    x = x * jnp.uint32(_M1)
    x = x ^ (x >> 15)
    x = x * jnp.uint32(_M2)
    return x ^ (x >> 16)


def _element_index(shape: tuple[int, ...]) -> jax.Array:
    """uint32 row-major index of every element, built from per-axis iotas (so each device
    of a sharded array computes its own slice)."""
    index = jnp.zeros(shape, jnp.uint32)
    stride = 1
    for axis in reversed(range(len(shape))):
        index = index + jax.lax.broadcasted_iota(jnp.uint32, shape, axis) * jnp.uint32(stride)
        stride *= shape[axis]
    return index


# (block index, block count) of the rows a step sees, while rows_block is entered.
_ROWS_BLOCK: contextvars.ContextVar[tuple[jax.Array | int, int]] = contextvars.ContextVar(
    "dropout_rows_block", default=(0, 1))


@contextlib.contextmanager
def rows_block(index: jax.Array | int, count: int) -> Iterator[None]:
    """While entered (around tracing a step), every mask is block ``index`` of ``count``
    equal blocks, along its leading axis, of the mask of an array ``count`` times as long:
    the masks of a device that holds rows [index * n, (index + 1) * n) of the batch.
    ``index`` may be a tracer (``lax.axis_index`` inside ``pmap``)."""
    token = _ROWS_BLOCK.set((index, count))
    try:
        yield
    finally:
        _ROWS_BLOCK.reset(token)


def keep_mask(key: jax.Array, shape: tuple[int, ...], rate: float,
              impl: str = "hash") -> jax.Array:
    """Boolean mask, True with probability 1 - ``rate`` (to within 2^-32 for "hash"); inside
    :func:`rows_block`, its block of the whole batch's mask."""
    block, blocks = _ROWS_BLOCK.get()
    if impl == "jax":
        if blocks == 1:
            return jax.random.bernoulli(key, 1.0 - rate, shape)
        whole = jax.random.bernoulli(key, 1.0 - rate, (shape[0] * blocks, *shape[1:]))
        return jax.lax.dynamic_slice_in_dim(whole, block * shape[0], shape[0], axis=0)
    if impl != "hash":
        raise ValueError(f"dropout impl {impl!r} is not one of {DROPOUT_IMPLEMENTATIONS}")
    if math.prod(shape) * blocks > 2 ** 32:
        raise ValueError(f"hash dropout indexes elements with 32 bits; shape {shape} has "
                         f"{math.prod(shape) * blocks} elements over {blocks} device(s)")
    seeds = jax.random.bits(key, (2,), jnp.uint32)
    index = _element_index(shape)
    if blocks > 1:  # row-major: the block's first element is block * size in the whole
        index = index + jnp.asarray(block, jnp.uint32) * jnp.uint32(math.prod(shape))
    bits = _mix(_mix(index ^ seeds[0]) + seeds[1])
    threshold = min(round(rate * 2 ** 32), 2 ** 32 - 1)
    return bits >= jnp.uint32(threshold)


def dropout(x: jax.Array, rate: float, key: jax.Array, impl: str = "hash") -> jax.Array:
    """Zeros a fraction ``rate`` of ``x`` and scales the rest by 1 / (1 - rate)."""
    if rate == 0.0:
        return x
    if rate >= 1.0:
        return jnp.zeros_like(x)
    keep = keep_mask(key, x.shape, rate, impl)
    return jnp.where(keep, x * jnp.asarray(1.0 / (1.0 - rate), x.dtype), jnp.zeros_like(x))


class Dropout(nn.Module):
    """``nn.Dropout`` with the mask of :func:`keep_mask`; takes its key from the "dropout"
    rng collection."""

    rate: float
    impl: str = "hash"

    @nn.compact
    def __call__(self, x: jax.Array, deterministic: bool) -> jax.Array:
        if deterministic or self.rate == 0.0:
            return x
        return dropout(x, self.rate, self.make_rng("dropout"), self.impl)
