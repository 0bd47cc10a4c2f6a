"""Pictures of what the newer attention kernels and position schemes do, drawn from the
model's own functions: the local + global mask (``masks.make_mask``, which every kernel
builds its mask with) and the similarity of rotary positions (``positions.rotary.rotate``),
the companion of ``position_similarity.png``.

* ``sparse_mask.png`` -- which keys each query sees under local + global attention, on a row
  packed with two sentences: the window, the global positions, the rest hidden; encoder
  (both directions) and decoder (causal) side by side;
* ``rotary_similarity.png`` -- (R_i u) . (R_j u) / d_k for a query and key u of ones turned to
  positions i and j: a function of i - j alone, as PE(i) . PE(j) is for the sinusoids, and
  the same with position interpolation (positions times the scale), whose bands are wider.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure

from transformer_jax.model import kernels, masks
from transformer_jax.model.positions import rotary
from transformer_jax.model.spec import TransformerConfig

# Cell values of sparse_mask_cells: hidden, seen through the window, seen through a global
# position (the query's or the key's).
HIDDEN, WINDOW, GLOBAL = 0, 1, 2
# What the picture shows when the model's kernel has no window (its mask is the paper's):
# a window and global positions small enough to see on sentences of a dozen tokens.
EXAMPLE_WINDOW, EXAMPLE_GLOBAL = 2, 2
# The row drawn: two sentences packed, as training rows are, and padding.
ROW = (1,) * 14 + (2,) * 9 + (0,) * 3
# The interpolation drawn beside plain rotary positions: L / 3L, a model trained on sentences
# of L tokens reading 3L (experiments/extrapolation.py).
EXAMPLE_SCALE = 1 / 3


def sparse_mask_cells(segment_ids: np.ndarray, window: int, global_tokens: int,
                      causal: bool) -> np.ndarray:
    """[n, n] cells of one row: WINDOW where the banded mask lets query i see key j, GLOBAL
    where only the global positions do, HIDDEN elsewhere; from ``masks.make_mask``."""
    seg = jnp.asarray(segment_ids)[None]
    banded = np.asarray(masks.make_mask(seg, seg, causal=causal, window=window))[0, 0]
    sparse = np.asarray(masks.make_mask(seg, seg, causal=causal, window=window,
                                        global_tokens=global_tokens))[0, 0]
    return np.where(banded, WINDOW, np.where(sparse, GLOBAL, HIDDEN))


def mask_settings(config: TransformerConfig) -> tuple[int, int, bool]:
    """(r, g, whether they are the model's own): the model's window and global positions
    when its kernel has them, else EXAMPLE_WINDOW and EXAMPLE_GLOBAL."""
    traits = kernels.get(config.attention).traits
    if traits.window:
        return config.local_window, config.global_tokens if traits.global_tokens else 0, True
    return EXAMPLE_WINDOW, EXAMPLE_GLOBAL, False


def plot_sparse_mask(config: TransformerConfig) -> Figure:
    """The local + global mask of a packed row, encoder and decoder (module docstring)."""
    window, global_tokens, own = mask_settings(config)
    fig = Figure(figsize=(11, 5.4), layout="constrained")
    axes = fig.subplots(1, 2)
    colours = ListedColormap(["white", "#2c7fb8", "#f03b20"])
    for ax, causal, title in ((axes[0], False, "encoder self-attention"),
                              (axes[1], True, "decoder self-attention (causal)")):
        cells = sparse_mask_cells(np.asarray(ROW), window, global_tokens, causal)
        ax.imshow(cells, cmap=colours, vmin=HIDDEN, vmax=GLOBAL, interpolation="nearest")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("key position (two packed sentences, then padding)")
        ax.set_ylabel("query position")
    whose = "this model's" if own else "an example's (the model's kernel has no window)"
    fig.suptitle(f"local + global attention, {whose} r = {window}, g = {global_tokens}: blue "
                 "= window, red = through a global position, white = hidden", fontsize=10)
    return fig


def rotary_similarity(num_positions: int, d_k: int, scale: float = 1.0) -> np.ndarray:
    """[n, n] (R_i u) . (R_j u) / d_k for u a vector of d_k ones, R_p the model's rotation to
    position p (``rotary.rotate``) at ``scale``: (2 / d_k) sum_i cos((i - j) scale theta_i)."""
    ones = jnp.ones((1, 1, num_positions, d_k), jnp.float32)
    turned = np.asarray(rotary.rotate(ones, jnp.arange(num_positions), scale), np.float64)[0, 0]
    return turned @ turned.T / d_k


def plot_rotary_similarity(num_positions: int, d_k: int, scale: float) -> Figure:
    """rotary_similarity at scale 1 and at ``scale`` (interpolation), side by side."""
    fig = Figure(figsize=(11, 4.8), layout="constrained")
    axes = fig.subplots(1, 2)
    for ax, s in zip(axes, (1.0, scale), strict=True):
        image = ax.imshow(rotary_similarity(num_positions, d_k, s), cmap="magma", vmin=-1,
                          vmax=1, interpolation="nearest")
        ax.set_xlabel("key position j")
        ax.set_ylabel("query position i")
        ax.set_title(f"positions x {s:.3g}" + (" (interpolation)" if s != 1.0 else ""),
                     fontsize=10)
    fig.colorbar(image, ax=list(axes), label="(R_i u) . (R_j u) / d_k")
    fig.suptitle(f"rotary positions, d_k = {d_k}: a query and key of ones turned to "
                 "positions i and j score by i - j alone", fontsize=10)
    return fig
