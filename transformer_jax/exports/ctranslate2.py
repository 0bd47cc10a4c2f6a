"""CTranslate2: a trained model as a ``ctranslate2.Translator`` directory, built with
CTranslate2's own spec API (``ctranslate2.specs.TransformerSpec``) from numpy arrays.

What is mapped (docs/export.md):

* post-LN or pre-LN (``pre_norm``; pre-LN with the final LayerNorms), ReLU, embeddings scaled
  by sqrt(d_model), LayerNorm epsilon (``layer_norm_epsilon``), the fused query-key-value
  projection and the key/value projection of cross-attention, the output layer and its bias;
* positions: the position table is given explicitly (``position_encodings.encodings``), our
  interleaved sines and cosines (or learned rows) as they are, so no channel is permuted;
  CTranslate2's own table would have other frequencies and the two halves side by side;
* ids: the vocabulary is our SentencePiece pieces in id order, so every id keeps its row.
  The special tokens are named by their pieces: unknown and end of sentence, and padding
  as the decoder's start token (id 0 starts our decoder); the source gets its end of
  sentence appended by CTranslate2 (``add_source_eos``), as our tokenizer appends it.

``id_order`` and ``positions`` exist for the tests: a wrong id order or position table must
make the export translate differently.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from transformer_jax.data.tokenizer import EOS_ID, PAD_ID, UNK_ID
from transformer_jax.exports import Traits, mapping
from transformer_jax.io import layout
from transformer_jax.model.spec import TransformerConfig
from transformer_jax.model.transformer import LAYER_NORM_EPSILON

if TYPE_CHECKING:
    from transformer_jax.evaluation.restore import Loaded, WorkdirSpec

TRAITS = Traits(options=("quantization",))
NAME = "CTranslate2"
QUANTIZATIONS = ("int8", "int8_float32", "int16", "float16", "bfloat16", "float32")


def check(config: TransformerConfig) -> None:
    """ConfigError naming the field CTranslate2 cannot express."""
    mapping.check_exact_kernel(config, NAME)
    mapping.check_positions(config, NAME)
    mapping.check_heads(config, NAME)


def _linear(spec: Any, w: np.ndarray, b: np.ndarray) -> None:
    spec.weight = np.ascontiguousarray(w.T)  # CTranslate2 keeps [out, in]
    spec.bias = b


def _norm(spec: Any, m: mapping.Matrices, prefix: str) -> None:
    spec.gamma, spec.beta = m[f"{prefix}.scale"], m[f"{prefix}.bias"]


def _self_attention(spec: Any, m: mapping.Matrices, block: str) -> None:
    fused_w = np.concatenate([m[f"{block}.{x}.w"] for x in "qkv"], axis=1)
    fused_b = np.concatenate([m[f"{block}.{x}.b"] for x in "qkv"])
    _linear(spec.linear[0], fused_w, fused_b)
    _linear(spec.linear[1], m[f"{block}.o.w"], m[f"{block}.o.b"])
    _norm(spec.layer_norm, m, f"{block}.norm")


def _cross_attention(spec: Any, m: mapping.Matrices, block: str) -> None:
    _linear(spec.linear[0], m[f"{block}.q.w"], m[f"{block}.q.b"])
    _linear(spec.linear[1], np.concatenate([m[f"{block}.k.w"], m[f"{block}.v.w"]], axis=1),
            np.concatenate([m[f"{block}.k.b"], m[f"{block}.v.b"]]))
    _linear(spec.linear[2], m[f"{block}.o.w"], m[f"{block}.o.b"])
    _norm(spec.layer_norm, m, f"{block}.norm")


def _ffn(spec: Any, m: mapping.Matrices) -> None:
    _linear(spec.linear_0, m["ffn.w1.w"], m["ffn.w1.b"])
    _linear(spec.linear_1, m["ffn.w2.w"], m["ffn.w2.b"])
    _norm(spec.layer_norm, m, "ffn.norm")


def build_spec(weights: mapping.Weights, config: TransformerConfig, tokens: Sequence[str],
               id_order: np.ndarray | None = None, positions: np.ndarray | None = None) -> Any:
    """The ``ctranslate2.specs.TransformerSpec`` of ``weights``, with ``tokens`` as the
    vocabulary of both sides. ``id_order`` (a permutation of the ids: row i of the export,
    the token of our id i, holds the weights of our id ``id_order[i]``) and ``positions``
    (a table instead of the model's) are for the tests that show a wrong mapping fails."""
    from ctranslate2 import specs

    order = np.arange(len(tokens)) if id_order is None else np.asarray(id_order)
    pre = config.norm == "pre"
    head_dim = None if config.d_k * config.num_heads == config.d_model else config.d_k
    encoder = specs.TransformerEncoderSpec(config.num_layers, config.num_heads, pre_norm=pre,
                                           head_dim=head_dim)
    decoder = specs.TransformerDecoderSpec(config.num_layers, config.num_heads, pre_norm=pre,
                                           head_dim=head_dim)
    encoder.embeddings[0].weight = weights.source_embedding[order]
    decoder.embeddings.weight = weights.target_embedding[order]
    _linear(decoder.projection, weights.output_kernel[:, order], weights.output_bias[order])
    encoder.position_encodings.encodings = (weights.source_positions if positions is None
                                            else positions)
    decoder.position_encodings.encodings = (weights.target_positions if positions is None
                                            else positions)
    for layer, m in zip(encoder.layer, weights.encoder, strict=True):
        _self_attention(layer.self_attention, m, "self_attention")
        _ffn(layer.ffn, m)
    for layer, m in zip(decoder.layer, weights.decoder, strict=True):
        _self_attention(layer.self_attention, m, "self_attention")
        _cross_attention(layer.attention, m, "cross_attention")
        _ffn(layer.ffn, m)
    if pre:
        for spec, side in ((encoder, "encoder"), (decoder, "decoder")):
            spec.layer_norm.gamma, spec.layer_norm.beta = weights.final_norms[side]
    spec = specs.TransformerSpec(encoder, decoder)
    spec.config.unk_token = tokens[UNK_ID]
    spec.config.eos_token = tokens[EOS_ID]
    # We have no start-of-sentence piece: padding starts the decoder, and stands for it.
    spec.config.bos_token = spec.config.decoder_start_token = tokens[PAD_ID]
    spec.config.add_source_eos = True
    spec.config.layer_norm_epsilon = LAYER_NORM_EPSILON
    spec.register_source_vocabulary(list(tokens))
    spec.register_target_vocabulary(list(tokens))
    return spec


def write(directory: str, spec: Any, quantization: str | None) -> None:
    """Saves ``spec`` into the existing, empty ``directory`` (CTranslate2's converter)."""
    from ctranslate2.converters import Converter

    class _Ours(Converter):
        def _load(self) -> Any:
            return spec

    _Ours().convert(directory, quantization=quantization, force=True)


README = """\
# {name}: a CTranslate2 model

Exported from the transformer_jax run `{workdir}` (checkpoint(s) {steps}{quantized}).
The vocabulary is the run's SentencePiece model, `{spm}`; CTranslate2 appends the end of
sentence to each source itself. The position table has {max_len} rows: sources and outputs
of at most {max_len} tokens (`max_input_length`, `max_decoding_length`).

```python
import ctranslate2
import sentencepiece as spm

sp = spm.SentencePieceProcessor(model_file="{spm}")
translator = ctranslate2.Translator(".", device="cpu")
sources = [sp.encode(s, out_type=str) for s in ["A sentence to translate."]]
results = translator.translate_batch(
    sources, beam_size={beam_size}, length_penalty={alpha},
    max_input_length={max_len},
    max_decoding_length=min(max(len(s) for s in sources) + {offset}, {max_len}),
    suppress_sequences=[["<pad>"]])  # padding starts the decoder and is never an output
print([sp.decode(r.hypotheses[0]) for r in results])
```

`translator.score_batch(sources, targets)` gives the log-probability of each target token
(its end of sentence included). The run's own beam search divides a hypothesis's
log-probability by ((5 + length) / 6) ** alpha (GNMT's length penalty); CTranslate2's
`length_penalty` divides it by length ** alpha, so beam-search outputs can differ in a few
sentences; greedy search (`beam_size=1`) gives the same output.
"""


def export(loaded: Loaded, run: WorkdirSpec, workdir: str, directory: str,
           quantization: str | None = None) -> None:
    """Writes the CTranslate2 model of ``loaded`` (restore.Loaded) into ``directory`` (new,
    empty), with the SentencePiece model beside it and a README (its decoding as the run's
    config says: ``run``, its restore.WorkdirSpec)."""
    model_config = loaded.model_config
    check(model_config)
    weights = mapping.layers_of(loaded.params, model_config)
    tokens = mapping.vocabulary(loaded.tokenizer, model_config.vocab_size)
    write(directory, build_spec(weights, model_config, tokens), quantization)
    spm_path = os.path.join(directory, layout.VOCAB_MODEL)
    with open(spm_path, "wb") as f:
        f.write(loaded.tokenizer.path.read_bytes())
    d = run.decode
    with open(os.path.join(directory, "README.md"), "w") as f:
        f.write(README.format(
            name=os.path.basename(os.path.normpath(workdir)), workdir=workdir,
            steps=", ".join(map(str, loaded.steps)), spm=layout.VOCAB_MODEL,
            quantized=f", weights quantized to {quantization}" if quantization else "",
            beam_size=d.beam_size, alpha=d.alpha, offset=d.max_len_offset,
            max_len=model_config.max_len))
