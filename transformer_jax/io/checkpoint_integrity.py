"""Whether a checkpoint's state and meta are whole: a checksum of every array of the state
(kept in the meta item when it is saved, compared when it is restored), whether every float
is finite, and the counts and figures of the meta that a resumed run reads back."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

CHECKSUMS = "checksums"  # the key of the state's checksums in the meta item


class CorruptCheckpoint(Exception):
    """A checkpoint that does not restore whole."""


def _leaf_checksum(x: jax.Array) -> jax.Array:
    """sum_i bits(x_i) * (2i + 1) mod 2^32 over the flattened array.

    Integer sums do not depend on the order of summation, so the checksum is the same
    however the array is sharded; a changed element changes it (odd factors are invertible
    mod 2^32), and moved elements almost surely do.
    """
    if x.dtype == jnp.bool_:
        bits = x.astype(jnp.uint32)
    else:
        width = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32}[x.dtype.itemsize]
        bits = jax.lax.bitcast_convert_type(x, width).astype(jnp.uint32)
    index = jnp.arange(x.size, dtype=jnp.uint32).reshape(x.shape)
    return jnp.sum(bits * (2 * index + 1), dtype=jnp.uint32)


@jax.jit
def _integrity(leaves: list[jax.Array]) -> tuple[list[jax.Array], jax.Array]:
    finite = [jnp.all(jnp.isfinite(x)) for x in leaves
              if jnp.issubdtype(x.dtype, jnp.inexact)]
    return [_leaf_checksum(x) for x in leaves], jnp.all(jnp.stack(finite or [jnp.True_]))


def _path(path: tuple) -> str:
    return jax.tree_util.keystr(path, simple=True, separator="/")


def integrity(tree: Any) -> tuple[dict[str, int], bool]:
    """({leaf path: checksum}, whether every float is finite) of a pytree of arrays (host,
    device or sharded over several processes)."""
    paths, leaves = zip(*jax.tree_util.tree_leaves_with_path(tree), strict=True)
    sums, finite = _integrity([jnp.asarray(x) if isinstance(x, np.ndarray | np.generic)
                               else x for x in leaves])
    return {_path(p): int(np.asarray(s)) for p, s in zip(paths, sums, strict=True)}, bool(
        np.asarray(finite))


def verify(tree: Any, expected: dict[str, int] | None, require_finite: bool = False) -> None:
    """Raises CorruptCheckpoint if a leaf of ``tree`` does not match its checksum in
    ``expected`` (checkpoints written before checksums were kept have none) or, with
    ``require_finite``, if it holds NaN or Inf."""
    checksums, finite = integrity(tree)
    for path, value in checksums.items():
        if expected is not None and path in expected and expected[path] != value:
            raise CorruptCheckpoint(f"{path} does not match the checksum saved with it")
    if require_finite and not finite:
        raise CorruptCheckpoint("the state holds NaN or Inf")


# The counts a run writes into a checkpoint's meta (training/train.py, training/stops.py),
# and its one figure that may be missing: read back on resume, so checked here.
META_COUNTS = ("step", "vocab_size", "skipped_long_pairs", "nonfinite_steps",
               "nonfinite_in_a_row", "divergence_in_a_row")
META_FIGURES = ("divergence_best",)


def check_meta(meta: dict[str, Any]) -> None:
    """CorruptCheckpoint when the meta item holds a count that is not an integer >= 0, a
    figure that is not a number (or null), or checksums that are not integers by name."""
    for key in META_COUNTS:
        value = meta.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise CorruptCheckpoint(f"meta: {key}={str(value)[:40]!r} is not a count")
    for key in META_FIGURES:
        value = meta.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise CorruptCheckpoint(f"meta: {key}={str(value)[:40]!r} is not a number")
    sums = meta.get(CHECKSUMS)
    if sums is not None and (not isinstance(sums, dict) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in sums.values())):
        raise CorruptCheckpoint(f"meta: {CHECKSUMS} are not integers by array")


def shapes(tree: Any) -> dict[str, tuple[int, ...]]:
    """{leaf path ("opt_state/0/mu/..."): shape} of a pytree's arrays (or their metadata)."""
    return {_path(p): tuple(x.shape) for p, x in jax.tree_util.tree_leaves_with_path(tree)
            if hasattr(x, "shape")}
