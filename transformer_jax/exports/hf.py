"""Hugging Face: a trained model as a MarianMT directory (``transformers.MarianMTModel`` and
``MarianTokenizer``), written from numpy with safetensors. Such a directory is read back
into a workdir by :mod:`transformer_jax.exports.from_hf`, through :func:`weights_of`.

What is mapped (docs/export.md):

* positions: MarianMT's static table puts the sines of the d/2 frequencies in channels
  0 .. d/2 - 1 and the cosines after them, where ours interleaves them (sine 2i, cosine
  2i + 1). Channel j of the export is our channel ``CHANNELS[j]`` (0, 2, 4, ..., 1, 3, ...):
  the permutation is applied to every weight that reads or writes the model dimension (the
  embeddings, every projection's input or output, every LayerNorm), which LayerNorm, the
  residual sums and the shared output layer leave unchanged;
* ids: vocab.json lists our SentencePiece pieces in id order, so no row moves; the config
  names padding (0, also the decoder's start), end of sentence (1); generation forbids
  padding as an output (``bad_words_ids``), as our search does;
* the output bias is ``final_logits_bias``; embeddings are scaled by sqrt(d_model).

What MarianMT cannot express is refused (:func:`check`). One difference stays: MarianMT's
LayerNorms use epsilon 1e-5 (fixed in transformers), ours 1e-6; the logits differ by far
less than 1e-4 (the slow test measures it), and reading the directory back gives ours
exactly.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import TYPE_CHECKING, Any

import numpy as np

from transformer_jax.data.tokenizer import EOS_ID, PAD_ID, UNK_ID
from transformer_jax.errors import ConfigError
from transformer_jax.exports import Traits, mapping
from transformer_jax.io import provenance, workdirs
from transformer_jax.model.spec import TransformerConfig
from transformer_jax.model.transformer import sinusoidal_positions

if TYPE_CHECKING:
    from transformer_jax.decoding.decode import DecodeConfig
    from transformer_jax.evaluation.restore import Loaded, WorkdirSpec

TRAITS = Traits()
NAME = "MarianMT"
WEIGHTS = "model.safetensors"
CONFIG = "config.json"
GENERATION_CONFIG = "generation_config.json"
SOURCE_SPM, TARGET_SPM, VOCAB = "source.spm", "target.spm", "vocab.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
# The run's own config, for reading the directory back into a workdir.
RUN_CONFIG = "transformer_jax_config.json"
BLOCKS = {"self_attention": "self_attn", "cross_attention": "encoder_attn"}
NORMS = {"self_attention": "self_attn_layer_norm", "cross_attention": "encoder_attn_layer_norm",
         "ffn": "final_layer_norm"}


def channels(d_model: int) -> np.ndarray:
    """Channel j of MarianMT's position table is our channel channels(d)[j]."""
    return np.concatenate([np.arange(0, d_model, 2), np.arange(1, d_model, 2)])


def check(config: TransformerConfig) -> None:
    """ConfigError naming the field MarianMT cannot express."""
    mapping.check_exact_kernel(config, NAME)
    mapping.check_positions(config, NAME)
    mapping.check_heads(config, NAME)
    if config.d_k * config.num_heads != config.d_model:
        raise ConfigError(f"model.d_k={config.d_k} x model.num_heads={config.num_heads} is not "
                          f"model.d_model={config.d_model}; {NAME}'s heads split d_model")
    if config.norm != "post":
        raise ConfigError(f"model.norm={config.norm!r}: {NAME}'s layers are post-LN only")
    if config.positions != "sinusoidal":
        raise ConfigError(f"model.positions={config.positions!r}: {NAME}'s positions are a "
                          "static sinusoidal table")
    if not config.share_embeddings:
        raise ConfigError("model.share_embeddings=False: the export shares one vocabulary "
                          "and one embedding matrix")
    if config.d_model % 2:
        raise ConfigError(f"model.d_model={config.d_model} is odd; the position tables "
                          "pair sines and cosines")


def _state_dict(w: mapping.Weights, config: TransformerConfig) -> dict[str, np.ndarray]:
    p = channels(config.d_model)
    out: dict[str, np.ndarray] = {}
    table = w.source_embedding[:, p]
    out["model.shared.weight"] = table
    out["final_logits_bias"] = w.output_bias[None]
    for side, layers in (("encoder", w.encoder), ("decoder", w.decoder)):
        out[f"model.{side}.embed_positions.weight"] = sinusoidal_positions(
            config.max_len, config.d_model)[:, p]
        for i, m in enumerate(layers):
            prefix = f"model.{side}.layers.{i}"
            for ours, theirs in BLOCKS.items():
                if f"{ours}.q.w" not in m:
                    continue
                for x in "qkv":  # read the model dimension: rows permuted
                    out[f"{prefix}.{theirs}.{x}_proj.weight"] = m[f"{ours}.{x}.w"][p].T
                    out[f"{prefix}.{theirs}.{x}_proj.bias"] = m[f"{ours}.{x}.b"]
                out[f"{prefix}.{theirs}.out_proj.weight"] = m[f"{ours}.o.w"][:, p].T
                out[f"{prefix}.{theirs}.out_proj.bias"] = m[f"{ours}.o.b"][p]
            out[f"{prefix}.fc1.weight"] = m["ffn.w1.w"][p].T
            out[f"{prefix}.fc1.bias"] = m["ffn.w1.b"]
            out[f"{prefix}.fc2.weight"] = m["ffn.w2.w"][:, p].T
            out[f"{prefix}.fc2.bias"] = m["ffn.w2.b"][p]
            for ours, theirs in NORMS.items():
                if f"{ours}.norm.scale" in m:
                    out[f"{prefix}.{theirs}.weight"] = m[f"{ours}.norm.scale"][p]
                    out[f"{prefix}.{theirs}.bias"] = m[f"{ours}.norm.bias"][p]
    return {k: np.ascontiguousarray(v, np.float32) for k, v in out.items()}


def weights_of(sd: dict[str, np.ndarray], config: TransformerConfig) -> mapping.Weights:
    """The inverse of :func:`_state_dict`: the matrices of a MarianMT state dict."""
    inverse = np.argsort(channels(config.d_model))
    table = sd["model.shared.weight"][:, inverse]
    sides = []
    for side, blocks in (("encoder", mapping.ENCODER_BLOCKS),
                         ("decoder", mapping.DECODER_BLOCKS)):
        layers = []
        for i in range(config.num_layers):
            prefix = f"model.{side}.layers.{i}"
            m: mapping.Matrices = {}
            for ours in blocks:
                theirs = BLOCKS[ours]
                for x in "qkv":
                    m[f"{ours}.{x}.w"] = sd[f"{prefix}.{theirs}.{x}_proj.weight"].T[inverse]
                    m[f"{ours}.{x}.b"] = sd[f"{prefix}.{theirs}.{x}_proj.bias"]
                m[f"{ours}.o.w"] = sd[f"{prefix}.{theirs}.out_proj.weight"].T[:, inverse]
                m[f"{ours}.o.b"] = sd[f"{prefix}.{theirs}.out_proj.bias"][inverse]
            m["ffn.w1.w"] = sd[f"{prefix}.fc1.weight"].T[inverse]
            m["ffn.w1.b"] = sd[f"{prefix}.fc1.bias"]
            m["ffn.w2.w"] = sd[f"{prefix}.fc2.weight"].T[:, inverse]
            m["ffn.w2.b"] = sd[f"{prefix}.fc2.bias"][inverse]
            for ours in (*blocks, "ffn"):
                m[f"{ours}.norm.scale"] = sd[f"{prefix}.{NORMS[ours]}.weight"][inverse]
                m[f"{ours}.norm.bias"] = sd[f"{prefix}.{NORMS[ours]}.bias"][inverse]
            layers.append(m)
        sides.append(layers)
    positions = sinusoidal_positions(config.max_len, config.d_model)
    return mapping.Weights(table, table, table.T, sd["final_logits_bias"].reshape(-1),
                           positions, positions, sides[0], sides[1], {})


def marian_config(config: TransformerConfig) -> dict[str, Any]:
    return {
        "architectures": ["MarianMTModel"], "model_type": "marian",
        "vocab_size": config.vocab_size, "decoder_vocab_size": config.vocab_size,
        "max_position_embeddings": config.max_len, "d_model": config.d_model,
        "encoder_layers": config.num_layers, "decoder_layers": config.num_layers,
        "encoder_attention_heads": config.num_heads, "decoder_attention_heads": config.num_heads,
        "encoder_ffn_dim": config.d_ff, "decoder_ffn_dim": config.d_ff,
        "activation_function": "relu", "scale_embedding": True, "static_position_embeddings": True,
        "normalize_before": False, "normalize_embedding": False,
        "share_encoder_decoder_embeddings": True, "tie_word_embeddings": True,
        "dropout": config.dropout_rate,
        "attention_dropout": config.attention_dropout_rate,
        "activation_dropout": 0.0,
        "pad_token_id": PAD_ID, "eos_token_id": EOS_ID, "decoder_start_token_id": PAD_ID,
        "forced_eos_token_id": None, "bos_token_id": None, "is_encoder_decoder": True,
    }


def generation_config(d: DecodeConfig, config: TransformerConfig) -> dict[str, Any]:
    return {"decoder_start_token_id": PAD_ID, "pad_token_id": PAD_ID, "eos_token_id": EOS_ID,
            "bad_words_ids": [[PAD_ID]], "num_beams": d.beam_size, "length_penalty": d.alpha,
            "max_length": config.max_len, "forced_eos_token_id": None}


MODEL_CARD = """\
---
library_name: transformers
pipeline_tag: translation
language: [{source}, {target}]
---

# {name}

The Transformer of "Attention Is All You Need", trained with transformer_jax and exported
as MarianMT (ReLU, post-LN, static sinusoidal positions, one shared SentencePiece
vocabulary). Parameters: checkpoint(s) {steps} of the run.

```python
from transformers import MarianMTModel, MarianTokenizer

tokenizer = MarianTokenizer.from_pretrained(".")
model = MarianMTModel.from_pretrained(".")
batch = tokenizer(["A sentence to translate."], return_tensors="pt", padding=True)
print(tokenizer.batch_decode(model.generate(**batch), skip_special_tokens=True))
```

MarianMT's LayerNorm epsilon is 1e-5, the run's 1e-6: logits differ in the sixth digit.
Beam search here divides by length ** alpha, the run's by ((5 + length) / 6) ** alpha.

## Model

```json
{model}
```

## Provenance

```json
{provenance}
```

## Final metrics

```json
{metrics}
```
"""


def export(loaded: Loaded, run: WorkdirSpec, workdir: str, directory: str) -> None:
    """Writes the MarianMT directory of ``loaded`` (restore.Loaded) into ``directory``, with
    the run's config (``run``, its restore.WorkdirSpec) beside it."""
    from safetensors.numpy import save_file

    mc = loaded.model_config
    check(mc)
    weights = mapping.layers_of(loaded.params, mc)
    save_file(_state_dict(weights, mc), os.path.join(directory, WEIGHTS),
              metadata={"format": "pt"})
    files = {
        CONFIG: marian_config(mc),
        GENERATION_CONFIG: generation_config(run.decode, mc),
        VOCAB: {t: i for i, t in enumerate(mapping.vocabulary(loaded.tokenizer,
                                                              mc.vocab_size))},
        TOKENIZER_CONFIG: {
            "tokenizer_class": "MarianTokenizer", "source_lang": run.source_lang,
            "target_lang": run.target_lang, "unk_token": loaded.tokenizer.pieces(
                [UNK_ID])[0], "eos_token": loaded.tokenizer.pieces([EOS_ID])[0],
            "pad_token": loaded.tokenizer.pieces([PAD_ID])[0], "separate_vocabs": False,
            "model_max_length": mc.max_len},
        RUN_CONFIG: json.loads(run.record),
    }
    for name, value in files.items():
        with open(os.path.join(directory, name), "w", encoding="utf-8") as f:
            json.dump(value, f, indent=2, ensure_ascii=False)
    for name in (SOURCE_SPM, TARGET_SPM):
        shutil.copyfile(os.fspath(loaded.tokenizer.path), os.path.join(directory, name))
    runs = provenance.read(workdir)
    metrics = workdirs.read_final(workdir) or None
    with open(os.path.join(directory, "README.md"), "w", encoding="utf-8") as f:
        f.write(MODEL_CARD.format(
            name=os.path.basename(os.path.normpath(workdir)),
            source=run.source_lang, target=run.target_lang,
            steps=", ".join(map(str, loaded.steps)),
            model=json.dumps(files[RUN_CONFIG]["model"], indent=2),
            provenance=json.dumps(runs[-1] if runs else "none recorded", indent=2),
            metrics=json.dumps(metrics if metrics is not None else "none recorded", indent=2)))
