"""Pictures of a trained model: its attention, its positional encodings, the causal mask, and
the quadratic bill of attention memory (its figures: attention_cost.py).

    python -m transformer_jax.visualize --workdir=runs/demo --out=runs/demo/pictures \
        --src="She asks whether the teacher has visited the bird." [--tgt="..."]

Without ``--tgt`` the sentence is translated first (greedy) and the model's own translation
is shown. ``--out`` receives, for the sentence:

* ``{encoder_self,decoder_self,decoder_cross}_attention_layer_{i}.png`` -- one grid per layer
  and kind of attention, one panel per head, axes labelled with the subword tokens;
* ``causal_mask.png`` -- which decoder inputs each output token may see;
* ``attention.html`` -- one self-contained page (images inlined, no network) with a
  kind/layer/head selector and the weights of a clicked token;

and for the model: ``positional_encoding.png`` (position x dimension),
``position_similarity.png`` (PE dot products), ``rotary_similarity.png`` (its companion for
rotary positions), ``sparse_mask.png`` (local + global attention's mask, kernel_pictures.py),
``quadratic_bill.{png,md,csv}``; the page shows these too.

Figures are drawn with matplotlib's object API (``Figure``, rendered by Agg), never pyplot, so
no display and no global figure state is involved. The attention they draw is read out of the
model by attention_read.py.

Decoder rows are labelled with the token each row *writes*: row i reads decoder input i
(the output token i - 1, or ``<start>``) and predicts output token i.
"""

from __future__ import annotations

import base64
import html
import json
import logging
import math
import os
from collections.abc import Sequence
from importlib import resources
from typing import Any

import jax.numpy as jnp
import numpy as np
from matplotlib.figure import Figure

from transformer_jax.analysis import attention_cost, kernel_pictures
from transformer_jax.analysis.attention_read import (
    KINDS,
    START,
    LoadedModel,
    SentenceAttention,
    read_sentence,
)
from transformer_jax.data import sources
from transformer_jax.data.tokenizer import Tokenizer
from transformer_jax.decoding import decode
from transformer_jax.errors import DataError, UserError
from transformer_jax.evaluation import translation
from transformer_jax.io import layout, storage
from transformer_jax.model import masks
from transformer_jax.model.spec import TransformerConfig
from transformer_jax.model.transformer import sinusoidal_positions

# ----------------------------------------------------------------------------------------
# Pictures


def _token_axes(ax: Any, rows: Sequence[str], cols: Sequence[str], fontsize: float) -> None:
    ax.set_xticks(range(len(cols)), cols, rotation=90, fontsize=fontsize)
    ax.set_yticks(range(len(rows)), rows, fontsize=fontsize)
    ax.tick_params(length=0)


def plot_attention(weights: np.ndarray, rows: Sequence[str], cols: Sequence[str],
                   title: str) -> Figure:
    """A grid of heatmaps, one panel per head, of weights [heads, q, k] in [0, 1]."""
    heads, q, k = weights.shape
    ncols = min(heads, 4)
    nrows = math.ceil(heads / ncols)
    cell = 0.26  # inches per token, so that every label stays readable
    panel_w, panel_h = max(2.6, cell * k + 1.0), max(2.4, cell * q + 1.0)
    fig = Figure(figsize=(ncols * panel_w + 0.8, nrows * panel_h + 0.7), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    for ax in axes.flat[heads:]:
        ax.remove()
    panels = axes.flat[:heads]
    for i, ax in enumerate(panels):
        image = ax.imshow(weights[i], vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto",
                          interpolation="nearest")
        ax.set_title(f"head {i}", fontsize=10)
        _token_axes(ax, rows, cols, fontsize=8 if max(q, k) <= 30 else 6)
    fig.colorbar(image, ax=list(panels), shrink=0.6, label="attention weight")
    fig.suptitle(title, fontsize=11)
    return fig


def attention_panels(fig: Figure) -> int:
    """The number of heatmap panels of a figure (axes holding an image)."""
    return sum(1 for ax in fig.axes if ax.images)


def plot_causal_mask(tokens: Sequence[str]) -> Figure:
    """The decoder's mask for the given output tokens: row i may see inputs 0..i."""
    n = len(tokens)
    ones = jnp.ones((1, n), jnp.int32)
    mask = np.asarray(masks.make_mask(ones, ones, causal=True))[0, 0]
    size = max(3.0, 0.28 * n + 1.4)
    fig = Figure(figsize=(size, size), layout="constrained")
    ax = fig.subplots()
    ax.imshow(mask, cmap="Greys", vmin=0, vmax=1.6, interpolation="nearest")
    _token_axes(ax, list(tokens), [START] + list(tokens[:-1]), fontsize=8)
    ax.set_xlabel("decoder inputs (keys)")
    ax.set_ylabel("output tokens (queries)")
    ax.set_title("causal mask: grey = may attend, white = weight 0", fontsize=10)
    return fig


def position_similarity(num_positions: int, d_model: int) -> np.ndarray:
    """[n, n] dot products PE(i) . PE(j) of the sinusoidal encodings. For sinusoids this is
    sum over frequencies of cos((i - j) w), a function of the distance alone."""
    pe = sinusoidal_positions(num_positions, d_model).astype(np.float64)
    return pe @ pe.T


def plot_positional_encoding(num_positions: int, d_model: int) -> Figure:
    """The sinusoidal table as a heatmap: position on x, dimension on y."""
    pe = sinusoidal_positions(num_positions, d_model)
    fig = Figure(figsize=(8, 4.5), layout="constrained")
    ax = fig.subplots()
    image = ax.imshow(pe.T, cmap="RdBu", vmin=-1, vmax=1, aspect="auto", origin="lower",
                      interpolation="nearest")
    ax.set_xlabel("position")
    ax.set_ylabel("dimension (even: sin, odd: cos)")
    ax.set_title(f"sinusoidal positional encoding, d_model = {d_model}", fontsize=11)
    fig.colorbar(image, ax=ax, label="PE value")
    return fig


def plot_position_similarity(num_positions: int, d_model: int) -> Figure:
    sim = position_similarity(num_positions, d_model)
    fig = Figure(figsize=(5.6, 4.8), layout="constrained")
    ax = fig.subplots()
    image = ax.imshow(sim, cmap="magma", interpolation="nearest")
    ax.set_xlabel("position j")
    ax.set_ylabel("position i")
    ax.set_title(f"PE(i) . PE(j), d_model = {d_model}: near positions score higher",
                 fontsize=10)
    fig.colorbar(image, ax=ax, label="dot product")
    return fig


# ----------------------------------------------------------------------------------------
# The quadratic bill


def plot_quadratic_bill(bill: Sequence[dict[str, int]], measured: dict[str, Any]) -> Figure:
    """Log-log against n: cells (top left) and fp16 bytes with the dense kernel's measured
    forward peak (top right); where the benchmark measured the kernels, each one's forward +
    backward peak memory (bottom left) and time (bottom right), where a line of slope 2 is
    the square and of slope 1 linear in n."""
    n = np.array([r["n"] for r in bill], np.float64)
    backward = [r for r in measured["results"] if r["pass"] == "backward"]
    fig = Figure(figsize=(13, 9.2 if backward else 4.6), layout="constrained")
    axes = fig.subplots(2 if backward else 1, 2, squeeze=False)
    cells_ax, bytes_ax = axes[0]
    matrices = bill[0]["matrices"]
    cells_ax.plot(n, [r["cells"] for r in bill], "o-", label="one matrix: n²")
    cells_ax.plot(n, [r["cells"] * matrices for r in bill], "s-",
                  label=f"base forward: {matrices} matrices")
    cells_ax.set_ylabel("attention-matrix cells")
    bytes_ax.plot(n, [r["head_bytes"] for r in bill], "o-", label="one matrix, fp16")
    bytes_ax.plot(n, [r["layer_bytes"] for r in bill], "^--", label="one layer's heads, fp16")
    bytes_ax.plot(n, [r["model_bytes"] for r in bill], "s-",
                  label=f"base forward, {matrices} matrices, fp16")
    dense = sorted((r["n"], r["peak_bytes"]) for r in measured["results"]
                   if (r["kind"], r["pass"]) == ("dense", "forward"))
    if dense:
        bytes_ax.plot(*zip(*dense, strict=True), "X:", ms=8,
                      label=f"measured peak: dense, forward, {measured['heads']} heads")
    bytes_ax.set_ylabel("memory")
    if backward:
        memory_ax, time_ax = axes[1]
        kinds = sorted({r["kind"] for r in backward})
        timed = "cpu_s" if all(r.get("cpu_s") for r in backward) else "time_s"
        for kind, marker in zip(kinds, "XDPv*hd^<>s", strict=False):
            rows = sorted((r["n"], r["peak_bytes"], r.get(timed)) for r in backward
                          if r["kind"] == kind)
            memory_ax.plot([x for x, _, _ in rows], [m for _, m, _ in rows], marker + "-",
                           ms=7, lw=1, label=kind)
            ran = [(x, t) for x, _, t in rows if t]
            if ran:
                time_ax.plot(*zip(*ran, strict=True), marker + "-", ms=7, lw=1, label=kind)
        memory_ax.set_ylabel(f"measured peak memory, {measured['heads']} heads")
        memory_ax.set_title("forward + backward: peak memory", fontsize=10)
        time_ax.set_ylabel("CPU seconds" if timed == "cpu_s" else "seconds")
        time_ax.set_title("forward + backward: " + ("CPU time (user + system)"
                                                     if timed == "cpu_s" else "time"),
                          fontsize=10)
        time_ax.legend(fontsize=8, loc="upper left")
        memory_ax.legend(fontsize=8, loc="upper left")
    for ax in axes.flat:
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length n")
        ax.grid(True, which="major", alpha=0.3)
    cells_ax.legend(fontsize=8, loc="upper left")  # the lines climb away from that corner
    bytes_ax.legend(fontsize=8, loc="upper left")
    bytes_ax.set_yticks([1024.0 ** k for k in range(1, 6)],
                        ["1 KiB", "1 MiB", "1 GiB", "1 TiB", "1 PiB"])
    if backward:
        memory_ax.set_yticks([2.0 ** k for k in range(24, 36, 2)],
                             ["16 MiB", "64 MiB", "256 MiB", "1 GiB", "4 GiB", "16 GiB"])
    fig.suptitle(f"The quadratic bill: memory source: {measured['source']}, on "
                 f"{measured['machine']}", fontsize=10)
    return fig


# ----------------------------------------------------------------------------------------
# Writing files and the page


def _save(fig: Figure, path: storage.Path, dpi: int = 100) -> storage.Path:
    storage.write_figure(fig, path, dpi)
    return path


def write_model_pictures(out: str | os.PathLike, model_config: TransformerConfig,
                         measured_file: str | os.PathLike | None = None) -> list[storage.Path]:
    """Positional encodings (the model's d_model, 100 positions), rotary positions' similarity
    (its d_k, when even), local + global attention's mask and the quadratic bill."""
    out = storage.path(out)
    out.mkdir(parents=True, exist_ok=True)
    positions = min(100, model_config.max_len)
    paths = [_save(plot_positional_encoding(positions, model_config.d_model),
                   out / "positional_encoding.png"),
             _save(plot_position_similarity(positions, model_config.d_model),
                   out / "position_similarity.png")]
    if model_config.d_k % 2 == 0:
        paths.append(_save(kernel_pictures.plot_rotary_similarity(
            positions, model_config.d_k, kernel_pictures.EXAMPLE_SCALE),
            out / "rotary_similarity.png"))
    paths.append(_save(kernel_pictures.plot_sparse_mask(model_config), out / "sparse_mask.png"))
    bill = attention_cost.quadratic_bill()
    measured = attention_cost.measured_memory(measured_file)
    paths.append(_save(plot_quadratic_bill(bill, measured), out / "quadratic_bill.png"))
    (out / "quadratic_bill.md").write_text(
        attention_cost.bill_table(bill, measured) + f"\nMeasured: {measured['source']}, "
        f"{measured.get('backend')} backend, on {measured['machine']}.\n")
    storage.write_csv(out / "quadratic_bill.csv", list(bill[0]), bill)
    return [*paths, out / "quadratic_bill.md", out / "quadratic_bill.csv"]


def write_sentence_pictures(out: str | os.PathLike, sentence: SentenceAttention,
                            extras: Sequence[storage.Path] = ()) -> dict[storage.Path, int]:
    """The grids of every kind and layer, the causal mask and the page for one sentence.

    ``extras`` are PNGs shown at the foot of the page. Returns {path: heatmap panels}.
    """
    out = storage.path(out)
    out.mkdir(parents=True, exist_ok=True)
    written: dict[storage.Path, int] = {}
    images: dict[str, str] = {}
    for kind, layers in sentence.weights.items():
        rows, cols = sentence.labels(kind)
        title = KINDS[kind][2]
        for layer, w in enumerate(layers):
            fig = plot_attention(w, rows, cols, f"{title}, layer {layer}   ({KINDS[kind][3]})")
            path = out / f"{kind}_attention_layer_{layer}.png"
            written[path] = attention_panels(fig)
            _save(fig, path)
            images[f"{kind}/{layer}"] = _png_uri(path)
    mask = _save(plot_causal_mask(sentence.target_tokens), out / "causal_mask.png")
    written[mask] = 0
    page = out / "attention.html"
    page.write_text(render_page(sentence, images, [mask, *extras]), encoding="utf-8")
    written[page] = 0
    return written


def _png_uri(path: storage.Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def render_page(sentence: SentenceAttention, images: dict[str, str],
                extras: Sequence[storage.Path]) -> str:
    """The self-contained HTML page: the grids as data URIs, the weights as JSON (the page
    draws single heads from them on a canvas)."""
    kinds = {}
    for kind, layers in sentence.weights.items():
        rows, cols = sentence.labels(kind)
        kinds[kind] = {"title": KINDS[kind][2], "axes": KINDS[kind][3], "rows": rows,
                       "cols": cols, "weights": [np.round(w, 4).tolist() for w in layers]}
    first = next(iter(sentence.weights.values()))
    data = {"source": sentence.source, "target": sentence.target, "kinds": kinds,
            "num_layers": len(first), "num_heads": int(first[0].shape[0]), "images": images,
            "about": "Weights of a teacher-forced pass; decoder rows are the tokens written.",
            "extras": [{"title": p.stem.replace("_", " "), "uri": _png_uri(p)}
                       for p in extras if p.suffix == ".png"]}
    # "<" escaped so no string in the data can close the script element.
    payload = json.dumps(data, ensure_ascii=False).replace("<", "\\u003c")
    page = resources.files("transformer_jax.analysis").joinpath("visualize_page.html")
    template = page.read_text(encoding="utf-8")
    return template.replace("__TITLE__", html.escape(sentence.source)).replace(
        "__DATA__", payload)


def write_pictures(out: str | os.PathLike, model: LoadedModel, source: str,
                   target: str | None = None,
                   measured_file: str | os.PathLike | None = None) -> dict[storage.Path, int]:
    """Everything for one sentence and the model into ``out``; translates if no target."""
    if not source.strip():
        raise UserError("--src is empty; give a sentence to run through the model")
    if target is None:
        decoding = model.decode.replace(batch_size=1)
        target = translation.translate(model.params, model.model_config, model.tokenizer,
                                       [source], decoding)[0]
        logging.info("translation: %s", target)
    extras = write_model_pictures(out, model.model_config, measured_file)
    sentence = read_sentence(model.params, model.model_config, model.tokenizer, source, target)
    return {**dict.fromkeys(extras, 0), **write_sentence_pictures(out, sentence, extras)}


def write_run_pictures(test_split: sources.SourceSpec, indices: Sequence[int],
                       decoding: decode.DecodeConfig, model_config: TransformerConfig,
                       model_params: Any, tokenizer: Tokenizer,
                       workdir: str | os.PathLike) -> storage.Path:
    """At the end of training: pictures of the test sentences ``indices``
    (train.visualize_sentences) of the dataset ``test_split`` with the model's own
    translations (decoded as ``decoding`` says), in workdir/pictures."""
    test = sources.get_source(test_split, "test")
    indices = list(indices)
    for i in indices:
        if i >= len(test):
            raise DataError(f"train.visualize_sentences: index {i} is outside the test split "
                            f"({len(test)} sentences)")
    pairs = [test[i] for i in indices]
    decoding = decoding.replace(batch_size=max(len(pairs), 1))
    hyps = translation.translate(model_params, model_config, tokenizer, [s for s, _ in pairs],
                                 decoding)
    out = storage.path(workdir) / layout.PICTURES
    extras = write_model_pictures(out, model_config)
    for i, (src, _), hyp in zip(indices, pairs, hyps, strict=True):
        sentence = read_sentence(model_params, model_config, tokenizer, src, hyp)
        write_sentence_pictures(out / f"test_{i}", sentence, extras)
        logging.info("pictures of test sentence %d (%s -> %s) in %s", i, src, hyp,
                     out / f"test_{i}")
    return out


# ----------------------------------------------------------------------------------------
# Command line
