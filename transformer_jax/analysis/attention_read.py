"""A trained model's attention read out: the model of a workdir loaded, the weights of every
layer and head of the three kinds of attention sown by a teacher-forced pass, and one
sentence pair's attention with its tokens, which the pictures draw (pictures.py)."""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from transformer_jax.data.tokenizer import Tokenizer
from transformer_jax.decoding.decode import DecodeConfig
from transformer_jax.errors import UserError
from transformer_jax.evaluation import restore
from transformer_jax.model.spec import TransformerConfig
from transformer_jax.model.transformer import Transformer

# kind -> (stack, sub-module, title, axes), in the order of the paper's Figure 1.
KINDS: dict[str, tuple[str, str, str, str]] = {
    "encoder_self": ("encoder", "self_attention", "encoder self-attention",
                     "rows: source tokens (queries), columns: source tokens (keys)"),
    "decoder_self": ("decoder", "self_attention", "decoder masked self-attention",
                     "rows: output tokens, columns: decoder inputs (outputs shifted right)"),
    "decoder_cross": ("decoder", "cross_attention", "decoder cross-attention",
                      "rows: output tokens, columns: source tokens"),
}
START = "<start>"  # the decoder's first input (token id 0)


@dataclasses.dataclass
class LoadedModel:
    """A workdir's latest parameters with what is needed to run them."""

    decode: DecodeConfig  # how the run's config says to translate
    model_config: TransformerConfig
    params: Any
    tokenizer: Tokenizer
    step: int


def load_model(workdir: str | os.PathLike, run: restore.WorkdirSpec) -> LoadedModel:
    """Rebuilds the model of ``workdir`` (``run``, the spec of its config.json, with the
    checkpoint's vocabulary size) and restores its parameters (averaged as the run's config
    says: restore.load_workdir)."""
    loaded = restore.load_workdir(workdir, run)
    return LoadedModel(run.decode, loaded.model_config.replace(deterministic=True),
                       loaded.params, loaded.tokenizer, loaded.steps[-1])


@functools.partial(jax.jit, static_argnames=("model_config",))
def _sown_weights(variables: Any, inputs: jax.Array, targets: jax.Array, *,
                  model_config: TransformerConfig) -> Any:
    model = Transformer(model_config.replace(deterministic=True, decode=False))
    _, state = model.apply(variables, inputs, targets, mutable=["intermediates"])
    return state["intermediates"]


def attention_weights(model_params: Any, model_config: TransformerConfig, inputs: np.ndarray,
                      targets: np.ndarray) -> dict[str, list[np.ndarray]]:
    """Teacher-forced attention weights of every layer and head.

    Args:
      inputs: [b, s] source ids, 0-padded; targets: [b, t] target ids, 0-padded.
    Returns:
      {kind: [layer 0, layer 1, ...]} with each layer [b, heads, q, k]: encoder self [b, h,
      s, s], decoder self [b, h, t, t], decoder cross [b, h, t, s].
    """
    sown = _sown_weights({"params": model_params}, jnp.asarray(inputs), jnp.asarray(targets),
                         model_config=model_config)
    return {kind: [np.asarray(sown[stack][f"layer_{i}"][module]["attention_weights"][0])
                   for i in range(model_config.num_layers)]
            for kind, (stack, module, _, _) in KINDS.items()}


@dataclasses.dataclass
class SentenceAttention:
    """One sentence pair's attention: ``weights[kind][layer]`` is [heads, q, k]."""

    source: str
    target: str
    source_tokens: list[str]
    target_tokens: list[str]
    weights: dict[str, list[np.ndarray]]

    def labels(self, kind: str) -> tuple[list[str], list[str]]:
        """(row labels, column labels) of a kind of attention."""
        if kind == "encoder_self":
            return self.source_tokens, self.source_tokens
        if kind == "decoder_self":
            return self.target_tokens, [START] + self.target_tokens[:-1]
        return self.target_tokens, self.source_tokens


def read_sentence(model_params: Any, model_config: TransformerConfig, tokenizer: Tokenizer,
                  source: str, target: str) -> SentenceAttention:
    """Runs one pair through the model (both ending in EOS) and keeps its attention."""
    src, tgt = tokenizer.encode(source), tokenizer.encode(target)
    if len(src) > model_config.max_len or len(tgt) > model_config.max_len:
        raise UserError(f"the sentence has {max(len(src), len(tgt))} tokens; the model "
                        f"takes at most model.max_len={model_config.max_len}")
    weights = attention_weights(model_params, model_config, np.asarray([src]),
                                np.asarray([tgt]))
    return SentenceAttention(source, target, tokenizer.pieces(src), tokenizer.pieces(tgt),
                             {k: [w[0] for w in layers] for k, layers in weights.items()})
