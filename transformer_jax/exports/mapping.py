"""What every export shares: the workdir's model read as plain matrices, the checks of what a
target can express, and writing the output directory whole or not at all.

:func:`layers_of` turns our parameter tree (fused, head-grouped projections, see
``model/transformer.py``) into :class:`Weights`: for every attention block its query, key,
value and output matrices as [d_in, d_out] numpy arrays with their biases (the key's bias,
which the model leaves out, as zeros), the feed-forward matrices, the LayerNorms, the
embeddings, the output layer and the position table. Each target writes these in its own
layout; :func:`from_layers` is the way back, into our tree.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from transformer_jax.errors import ConfigError, DiskFull, UserError, shown
from transformer_jax.io import layout, storage
from transformer_jax.model import kernels, positions
from transformer_jax.model.spec import TransformerConfig

if TYPE_CHECKING:
    from transformer_jax.evaluation.restore import Loaded, WorkdirSpec

Matrices = dict[str, np.ndarray]

# The parts of each layer, in the order of the paper's Figure 1.
ENCODER_BLOCKS = ("self_attention",)
DECODER_BLOCKS = ("self_attention", "cross_attention")


@dataclasses.dataclass
class Weights:
    """A model as plain matrices (numpy float32), x @ W + b throughout.

    ``encoder`` and ``decoder`` hold one dict a layer with, for each attention block
    ("self_attention", and "cross_attention" in the decoder), ``{block}.{q,k,v,o}.{w,b}``,
    its Add & Norm's ``{block}.norm.{scale,bias}``, and ``ffn.{w1,w2}.{w,b}`` with
    ``ffn.norm.{scale,bias}``. ``final_norms`` (pre-LN only) maps "encoder"/"decoder" to
    (scale, bias). Embedding rows and the output columns are token ids.
    """

    source_embedding: np.ndarray  # [V, d]
    target_embedding: np.ndarray  # [V, d]
    output_kernel: np.ndarray  # [d, V]
    output_bias: np.ndarray  # [V]
    source_positions: np.ndarray  # [max_len, d]
    target_positions: np.ndarray  # [max_len, d]
    encoder: list[Matrices]
    decoder: list[Matrices]
    final_norms: dict[str, tuple[np.ndarray, np.ndarray]]


def check_exact_kernel(config: TransformerConfig, target: str) -> None:
    """ConfigError unless the attention kernel computes the paper's attention."""
    if not kernels.get(config.attention).traits.exact:
        raise ConfigError(f"model.attention={config.attention!r} is not the paper's softmax "
                          f"attention over every key, which {target} computes; the export would "
                          "translate differently (exact kernels: "
                          f"{', '.join(kernels.having('exact'))})")


def check_positions(config: TransformerConfig, target: str) -> None:
    """ConfigError for positions that are not a table added to the embeddings (rotary),
    which is all our targets take."""
    if not positions.get(config.positions).traits.added:
        raise ConfigError(f"model.positions={config.positions!r}: {target} takes a position "
                          "table added to the embeddings, not positions inside attention (the "
                          f"export would translate differently; tables: "
                          f"{', '.join(positions.having('added'))})")


def check_heads(config: TransformerConfig, target: str) -> None:
    """ConfigError for grouped key/value heads or d_k != d_v, which our targets lack."""
    if config.kv_heads != config.num_heads:
        raise ConfigError(f"model.num_kv_heads={config.num_kv_heads}: {target} gives every "
                          "query head its own keys and values")
    if config.d_k != config.d_v:
        raise ConfigError(f"model.d_v={config.d_v} differs from model.d_k={config.d_k}; "
                          f"{target} has one head size")


def _np(x: Any) -> np.ndarray:
    return np.asarray(x, np.float32)


def _positions(params: Any, config: TransformerConfig, side: str) -> np.ndarray:
    return _np(positions.get(config.positions).module.table(config, params[side].get("embed")))


def _attention(p: Any, config: TransformerConfig, cross: bool) -> Matrices:
    h, d_k, d_v = config.num_heads, config.d_k, config.d_v
    d = config.d_model
    if cross:
        q_w, q_b = _np(p["query"]["kernel"]).reshape(d, h * d_k), _np(p["query"]["bias"])
        kv_w, kv_b = _np(p["key_value"]["kernel"]), _np(p["key_value"]["bias"])  # [d,h,dk+dv]
        k_w, v_w = kv_w[:, :, :d_k], kv_w[:, :, d_k:]
        v_b = kv_b  # the key has no bias
    else:
        qkv_w, qkv_b = _np(p["qkv"]["kernel"]), _np(p["qkv"]["bias"])  # [d, h, 2dk+dv]
        q_w, k_w, v_w = qkv_w[:, :, :d_k], qkv_w[:, :, d_k:2 * d_k], qkv_w[:, :, 2 * d_k:]
        q_b, v_b = qkv_b[:, :d_k], qkv_b[:, d_k:]
    return {"q.w": q_w.reshape(d, h * d_k), "q.b": q_b.reshape(h * d_k),
            "k.w": k_w.reshape(d, h * d_k), "k.b": np.zeros(h * d_k, np.float32),
            "v.w": v_w.reshape(d, h * d_v), "v.b": v_b.reshape(h * d_v),
            "o.w": _np(p["out"]["kernel"]), "o.b": _np(p["out"]["bias"])}


def _layer(p: Any, config: TransformerConfig, blocks: tuple[str, ...]) -> Matrices:
    out: Matrices = {}
    for block in blocks:
        for name, x in _attention(p[block], config, block == "cross_attention").items():
            out[f"{block}.{name}"] = x
        norm = p[f"{block}_add_norm"]["norm"]
        out[f"{block}.norm.scale"], out[f"{block}.norm.bias"] = (_np(norm["scale"]),
                                                                _np(norm["bias"]))
    for name in ("w1", "w2"):
        out[f"ffn.{name}.w"] = _np(p["ffn"][name]["kernel"])
        out[f"ffn.{name}.b"] = _np(p["ffn"][name]["bias"])
    norm = p["ffn_add_norm"]["norm"]
    out["ffn.norm.scale"], out["ffn.norm.bias"] = _np(norm["scale"]), _np(norm["bias"])
    return out


def layers_of(params: Any, config: TransformerConfig) -> Weights:
    """Our parameter tree as :class:`Weights` (grouped key/value heads are refused first by
    :func:`check_heads`)."""
    if config.share_embeddings:
        table = _np(params["shared_embedding"]["embedding"])
        source = target = table
        kernel, bias = table.T, _np(params["logits_bias"])
    else:
        source = _np(params["source_embedding"]["embedding"])
        target = _np(params["target_embedding"]["embedding"])
        kernel = _np(params["output_projection"]["kernel"])
        bias = _np(params["output_projection"]["bias"])
    finals = {}
    if config.norm == "pre":
        for side in ("encoder", "decoder"):
            norm = params[side]["final_norm"]
            finals[side] = (_np(norm["scale"]), _np(norm["bias"]))
    return Weights(
        source, target, kernel, bias, _positions(params, config, "encoder"),
        _positions(params, config, "decoder"),
        [_layer(params["encoder"][f"layer_{i}"], config, ENCODER_BLOCKS)
         for i in range(config.num_layers)],
        [_layer(params["decoder"][f"layer_{i}"], config, DECODER_BLOCKS)
         for i in range(config.num_layers)],
        finals)


def _attention_tree(m: Matrices, block: str, config: TransformerConfig) -> dict[str, Any]:
    h, d_k, d = config.num_heads, config.d_k, config.d_model
    heads = lambda x: x.reshape(d, h, -1)  # noqa: E731
    out = {"out": {"kernel": m[f"{block}.o.w"], "bias": m[f"{block}.o.b"]}}
    if block == "cross_attention":
        out["query"] = {"kernel": heads(m[f"{block}.q.w"]),
                        "bias": m[f"{block}.q.b"].reshape(h, d_k)}
        out["key_value"] = {
            "kernel": np.concatenate([heads(m[f"{block}.k.w"]), heads(m[f"{block}.v.w"])], -1),
            "bias": m[f"{block}.v.b"].reshape(h, -1)}
    else:
        out["qkv"] = {
            "kernel": np.concatenate([heads(m[f"{block}.{x}.w"]) for x in "qkv"], -1),
            "bias": np.concatenate([m[f"{block}.q.b"].reshape(h, d_k),
                                    m[f"{block}.v.b"].reshape(h, -1)], -1)}
    return out


def _layer_tree(m: Matrices, config: TransformerConfig, blocks: tuple[str, ...]) -> Any:
    out: dict[str, Any] = {}
    for block in blocks:
        out[block] = _attention_tree(m, block, config)
        out[f"{block}_add_norm"] = {"norm": {"scale": m[f"{block}.norm.scale"],
                                             "bias": m[f"{block}.norm.bias"]}}
    out["ffn"] = {name: {"kernel": m[f"ffn.{name}.w"], "bias": m[f"ffn.{name}.b"]}
                  for name in ("w1", "w2")}
    out["ffn_add_norm"] = {"norm": {"scale": m["ffn.norm.scale"], "bias": m["ffn.norm.bias"]}}
    return out


def from_layers(w: Weights, config: TransformerConfig) -> dict[str, Any]:
    """:class:`Weights` as our parameter tree (the inverse of :func:`layers_of`; the key
    biases, which our model has not, must be zero)."""
    for side, layers in (("encoder", w.encoder), ("decoder", w.decoder)):
        for i, m in enumerate(layers):
            for name, x in m.items():
                if name.endswith(".k.b") and np.any(x != 0):
                    raise UserError(f"{side} layer {i}: {name[:-4]}'s key projection has a "
                                    "bias, which this model has not")
    tree: dict[str, Any] = {}
    for side, layers, blocks in (("encoder", w.encoder, ENCODER_BLOCKS),
                                 ("decoder", w.decoder, DECODER_BLOCKS)):
        tree[side] = {f"layer_{i}": _layer_tree(m, config, blocks)
                      for i, m in enumerate(layers)}
        scheme = positions.get(config.positions)
        if scheme.traits.learned:
            table = w.source_positions if side == "encoder" else w.target_positions
            tree[side]["embed"] = {scheme.module.PARAM: table}
        if config.norm == "pre":
            scale, bias = w.final_norms[side]
            tree[side]["final_norm"] = {"scale": scale, "bias": bias}
    if config.share_embeddings:
        tree["shared_embedding"] = {"embedding": w.source_embedding}
        tree["logits_bias"] = w.output_bias
    else:
        tree["source_embedding"] = {"embedding": w.source_embedding}
        tree["target_embedding"] = {"embedding": w.target_embedding}
        tree["output_projection"] = {"kernel": w.output_kernel, "bias": w.output_bias}
    return tree


# ----------------------------------------------------------------------------------------
# The output directory


def check_new(out: storage.PathLike) -> storage.Path:
    """``out`` as a path; UserError if it exists already (a dangling symbolic link too, which
    the export would replace), its parent does not, or the directory :func:`writing` makes
    beside it cannot be made there (a name too long, no permission): checked before anything
    is read."""
    path = storage.path(out)
    given = shown(os.fspath(out))
    if path.exists():
        raise UserError(f"--out={given} exists already; name a new directory")
    if not storage.is_remote(path) and os.path.islink(path):
        raise UserError(f"--out={given} is a symbolic link to "
                        f"{shown(os.readlink(path))}, which does not exist; name a new directory")
    if not path.parent.is_dir():
        raise UserError(f"--out={given}: no directory {shown(os.fspath(path.parent))}")
    try:
        os.rmdir(_partial(path))
    except OSError as e:
        raise UserError(f"--out={given} cannot be written: {storage.describe_error(e)}"
                        ) from None
    return path


def _partial(path: storage.Path) -> str:
    """A new, empty directory beside ``path``, for :func:`writing`."""
    return tempfile.mkdtemp(prefix=f".{path.name}.partial-", dir=os.path.dirname(path))


@contextlib.contextmanager
def writing(out: storage.PathLike) -> Iterator[str]:
    """A new directory beside ``out`` to write into, renamed to ``out`` when the block ends
    without error and removed when it raises: no half-written ``out`` is ever seen. A write
    refused there for want of space, whichever library made it, is DiskFull naming ``out``."""
    path = check_new(out)
    local = os.fspath(path)
    partial = _partial(path)
    try:
        yield partial
        os.rename(partial, local)
    except Exception as e:
        if not storage.out_of_space(e):
            raise
        raise DiskFull(f"--out={shown(os.fspath(out))}: no space left on device for the "
                       "export: nothing was written there, its unfinished copy was removed; "
                       "free some space and run the same command again") from e
    finally:
        if os.path.isdir(partial):
            shutil.rmtree(partial)


# ----------------------------------------------------------------------------------------
# The workdir


def load(workdir: storage.PathLike, run: WorkdirSpec, average: int | None = None) -> Loaded:
    """The restore.Loaded of a trained workdir (``run``: the restore.WorkdirSpec of its
    config), its last ``average`` checkpoints averaged (None: as the run's config says).
    Every way a workdir can be unfit (no checkpoints, a damaged one) is a UserError of one
    line."""
    from transformer_jax.evaluation import restore

    try:
        return restore.load_workdir(workdir, run, average)
    except UserError:
        raise
    except Exception as e:  # noqa: BLE001 -- whatever a damaged file makes orbax raise
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise UserError(f"{storage.path(workdir) / layout.CHECKPOINTS}: a checkpoint does not "
                        f"restore ({first})") from e


def vocabulary(tokenizer: Any, size: int) -> list[str]:
    """The tokens of ids 0 .. size - 1: the SentencePiece pieces, then (for rows the model
    has beyond the vocabulary) placeholders no text encodes to."""
    pieces = [tokenizer.sp.id_to_piece(i) for i in range(tokenizer.vocab_size)]
    return pieces + [f"<unused_{i}>" for i in range(len(pieces), size)]
