"""A MarianMT directory (as :mod:`transformer_jax.exports.hf` writes it, or from elsewhere)
read back into a new workdir: ``python -m transformer_jax.export hf --from_hf=DIR
--out=WORKDIR`` (:func:`import_directory`). Every size, tensor, the vocabulary and the
exported run's own config are checked before anything is written (docs/export.md). Not an
export target: ``exports.names()`` leaves it out.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from transformer_jax import config as config_lib
from transformer_jax.config import resume
from transformer_jax.data.tokenizer import EOS_ID, PAD_ID, Tokenizer
from transformer_jax.errors import ConfigError, UserError
from transformer_jax.exports import hf, mapping
from transformer_jax.exports.hf import CONFIG, RUN_CONFIG, SOURCE_SPM, TARGET_SPM, WEIGHTS
from transformer_jax.io import layout, storage, strict_json
from transformer_jax.model.spec import TransformerConfig


def _read_json(path: str) -> dict[str, Any]:
    """The JSON object ``path`` holds, read by strict_json's rules; UserError naming it."""
    _check_file(path)
    return strict_json.read(path)


def _check_file(path: str) -> None:
    """UserError unless ``path`` is a regular file (a named pipe would be waited on)."""
    why = storage.not_a_file(path)
    if why:
        raise UserError(f"{path}: {why}; --from_hf must be a MarianMT directory")


# The sizes of a MarianMT config.json and the fields of ours they become (their ranges).
SIZES = {"vocab_size": "data.vocab_size", "d_model": "model.d_model",
         "encoder_layers": "model.num_layers", "decoder_layers": "model.num_layers",
         "encoder_ffn_dim": "model.d_ff", "decoder_ffn_dim": "model.d_ff",
         "encoder_attention_heads": "model.num_heads",
         "decoder_attention_heads": "model.num_heads",
         "max_position_embeddings": "model.max_len"}


def model_config_of(marian: Any, path: str) -> TransformerConfig:
    """Our model of a MarianMT config.json; UserError naming a field we cannot take."""
    wanted = {"activation_function": "relu", "scale_embedding": True,
              "normalize_before": False, "share_encoder_decoder_embeddings": True}
    for field, value in wanted.items():
        if marian.get(field, value if field.startswith("normalize") else None) != value:
            raise UserError(f"{path}: {field}={marian.get(field)!r}; this model needs {value}")
    for a, b in (("encoder_layers", "decoder_layers"), ("encoder_ffn_dim", "decoder_ffn_dim"),
                 ("encoder_attention_heads", "decoder_attention_heads")):
        if marian.get(a) != marian.get(b):
            raise UserError(f"{path}: {a}={marian.get(a)} but {b}={marian.get(b)}; this model "
                            "has one value for both")
    for field, value in (("pad_token_id", PAD_ID), ("eos_token_id", EOS_ID),
                         ("decoder_start_token_id", PAD_ID)):
        if marian.get(field) != value:
            raise UserError(f"{path}: {field}={marian.get(field)}; this model's is {value}")
    for field, ours in SIZES.items():
        value = marian.get(field)
        if field not in marian:
            raise UserError(f"{path}: no {field}; a MarianMT config.json gives it")
        if isinstance(value, bool) or not isinstance(value, int):
            raise UserError(f"{path}: {field}={value!r} is not an integer")
        try:
            config_lib.check_value(ours, value)
        except ConfigError as e:
            raise UserError(f"{path}: {field}={value!r}: {e}") from None
    d, h = marian["d_model"], marian["encoder_attention_heads"]
    if d % h or d % 2:
        raise UserError(f"{path}: d_model={d} must be even and split into "
                        f"encoder_attention_heads={h} heads")
    return TransformerConfig(
        vocab_size=marian["vocab_size"], num_layers=marian["encoder_layers"], d_model=d,
        d_ff=marian["encoder_ffn_dim"], num_heads=h, d_k=d // h, d_v=d // h,
        max_len=marian["max_position_embeddings"], deterministic=True)


def import_directory(source: str, out: storage.PathLike,
                     start_training: Callable[[str, Any], None] | None = None) -> None:
    """Reads the MarianMT directory ``source`` into the new workdir ``out``: config.json
    (the exported run's, or the base config with the MarianMT model's shape), the shared
    vocabulary and checkpoint 0 with the parameters, which ``translate``, ``evaluate`` and
    ``visualize`` read.

    ``start_training(workdir, params)`` writes that checkpoint as a new run's, with the
    optimizer and data state training resumes from (``training.warm_start``); where it
    cannot (a UserError: the config's data is not on this machine) or is not given, the
    checkpoint holds the parameters alone, and a warning says training cannot resume it.
    """
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    mapping.check_new(out)
    marian = _read_json(os.path.join(source, CONFIG))
    mc = model_config_of(marian, os.path.join(source, CONFIG))
    weights_path = os.path.join(source, WEIGHTS)
    _check_file(weights_path)
    try:
        sd = load_file(weights_path)
    except (SafetensorError, OSError) as e:
        raise UserError(f"{weights_path}: damaged ({e})") from None
    for name in (SOURCE_SPM, TARGET_SPM):
        _check_file(os.path.join(source, name))
    with open(os.path.join(source, SOURCE_SPM), "rb") as a, \
            open(os.path.join(source, TARGET_SPM), "rb") as b:
        spm_bytes = a.read()
        if spm_bytes != b.read():
            raise UserError(f"{source}: {SOURCE_SPM} and {TARGET_SPM} differ; this model "
                            "shares one vocabulary")
    params = _params(sd, mc, weights_path)
    model = {"num_layers": mc.num_layers, "d_model": mc.d_model, "d_ff": mc.d_ff,
             "num_heads": mc.num_heads, "max_len": mc.max_len}
    run_path = os.path.join(source, RUN_CONFIG)
    # Without the exported run's config (a MarianMT model from elsewhere), the base config's
    # with the directory's model, its sentences no longer than its positions.
    saved: Any = _read_json(run_path) if os.path.lexists(run_path) else {
        "model": model, "data": {"max_len": min(mc.max_len, config_lib.base_config().data.max_len)}}
    if not isinstance(saved, dict) or not isinstance(saved.get("model", {}), dict):
        raise UserError(f"{run_path}: not a config of sections (model, data, ...)")
    saved.setdefault("data", {})
    if not isinstance(saved["data"], dict):
        raise UserError(f"{run_path}: data is {saved['data']!r}, not an object of fields")
    saved["data"]["vocab_size"] = mc.vocab_size
    merged = _merged(config_lib.base_config().to_dict(), saved)
    run_config = resume.config_from_dict(merged, run_path)
    check_run_model(TransformerConfig.from_config(run_config.model, mc.vocab_size), mc, run_path)
    with mapping.writing(out) as directory:
        with open(os.path.join(directory, layout.CONFIG), "w", encoding="utf-8") as f:
            json.dump(merged, f, indent=2, default=str)
        os.makedirs(os.path.join(directory, layout.VOCAB))
        vocab_path = os.path.join(directory, layout.VOCAB, layout.VOCAB_MODEL)
        with open(vocab_path, "wb") as f:
            f.write(spm_bytes)
        try:
            pieces = Tokenizer(vocab_path).vocab_size
        except UserError as e:
            raise UserError(f"{os.path.join(source, SOURCE_SPM)}: "
                            f"{str(e).split(': ', 1)[-1]}") from None
        if pieces != mc.vocab_size:
            raise UserError(f"{os.path.join(source, SOURCE_SPM)} has {pieces} pieces but "
                            f"{CONFIG} says vocab_size={mc.vocab_size}")
        try:
            if start_training is None:
                raise UserError("no training state asked for")
            start_training(directory, params)
        except (UserError, FileNotFoundError) as e:  # the latter: the data is not prepared
            logging.warning("warning: %s; %s holds the parameters alone: translate, evaluate "
                            "and visualize read them, training cannot resume from them", e, out)
            _save_params(directory, params, mc.vocab_size, source,
                         resume.model_record(run_config))


def check_run_model(run_model: TransformerConfig, mc: TransformerConfig, run_path: str) -> None:
    """UserError naming ``run_path`` (the exported run's config) when its model
    (``run_model``) is not the one of the directory's config.json (``mc``): another size, or
    a model MarianMT cannot express (pre-LN, learned or rotary positions, grouped heads,
    another kernel...), which the weights would be read into and computed otherwise, without
    a word."""
    try:
        hf.check(run_model)
    except ConfigError as e:
        raise UserError(f"{run_path}: {e}") from None
    differ = [f"model.{k}: {getattr(run_model, k)!r} there, {getattr(mc, k)!r} in {CONFIG}"
              for k in ("num_layers", "d_model", "d_ff", "num_heads", "d_k", "d_v", "kv_heads",
                        "max_len") if getattr(run_model, k) != getattr(mc, k)]
    if differ:
        raise UserError(f"{run_path} describes another model than {CONFIG}: "
                        f"{'; '.join(differ)}")


def _params(sd: dict[str, np.ndarray], mc: TransformerConfig, weights_path: str) -> Any:
    """Our parameter tree of the safetensors ``sd``; UserError naming the file and the
    tensor that is missing, of another shape than the config's model, or not finite."""
    from transformer_jax.model import counts

    try:
        params = mapping.from_layers(hf.weights_of(sd, mc), mc)
    except KeyError as e:
        raise UserError(f"{weights_path}: no tensor {e.args[0]}") from None
    except (IndexError, ValueError) as e:  # a tensor of another shape than the config's
        raise UserError(f"{weights_path}: its tensors do not fit {CONFIG}'s model "
                        f"({str(e).splitlines()[0][:120]})") from None
    import jax

    wanted = jax.tree_util.tree_leaves_with_path(counts.param_shapes(mc))
    got = dict(jax.tree_util.tree_leaves_with_path(params))
    for path, spec in wanted:
        name = jax.tree_util.keystr(path, simple=True, separator="/")
        value = got.get(path)
        if value is None or tuple(np.shape(value)) != tuple(spec.shape):
            raise UserError(f"{weights_path}: {name} has shape "
                            f"{None if value is None else tuple(np.shape(value))}, not "
                            f"{tuple(spec.shape)} as {CONFIG}'s model needs")
        if not np.all(np.isfinite(np.asarray(value, np.float32))):
            raise UserError(f"{weights_path}: {name} holds NaN or Inf")
    return jax.tree.map(lambda x: np.asarray(x, np.float32), params)


def _save_params(directory: str, params: Any, vocab_size: int, source: str,
                 model: dict[str, Any]) -> None:
    from transformer_jax.io import checkpoints

    ckpts = checkpoints.Checkpoints(directory, 1)
    try:
        ckpts.save(0, {"params": params}, None, {"step": 0, "vocab_size": vocab_size,
                                                  "from_hf": os.path.abspath(source),
                                                  resume.MODEL_RECORD: model},
                   force=True)
    finally:
        ckpts.close()


def _merged(base: dict[str, Any], saved: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in saved.items():
        out[key] = (_merged(base[key], value) if isinstance(value, dict)
                    and isinstance(base.get(key), dict) else value)
    return out
