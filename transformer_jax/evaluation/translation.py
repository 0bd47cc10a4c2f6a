"""Translating sentences with a model's parameters, in batches of similar length."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from transformer_jax.data.pipeline import pad_batch
from transformer_jax.data.tokenizer import Tokenizer
from transformer_jax.decoding import decode
from transformer_jax.model.spec import TransformerConfig

LENGTH_BUCKET = 16  # source and output lengths are rounded up to this, to bound recompilations


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def translate(params: Any, config: TransformerConfig, tokenizer: Tokenizer,
              sentences: Sequence[str], decoding: decode.DecodeConfig,
              progress: Callable[[int], None] | None = None) -> list[str]:
    """Translations of ``sentences``, in their order, with the strategy of ``decoding``.

    Sentences are decoded in batches of ``decoding.batch_size`` of similar length. A
    translation may be up to ``decoding.max_len_offset`` tokens longer than its source (the
    paper's rule: input length + 50), within the model's ``max_len``; sources longer than
    that are truncated. Empty or whitespace-only inputs give empty outputs.
    ``progress(n)`` is called as each batch of n sentences is done.
    """
    encoded = [tokenizer.encode(s)[: config.max_len] if s.strip() else [] for s in sentences]
    order = sorted((i for i in range(len(sentences)) if encoded[i]),
                   key=lambda i: len(encoded[i]))
    results = [""] * len(sentences)
    if progress is not None and len(order) < len(sentences):
        progress(len(sentences) - len(order))
    # One batch shape for the whole call: one compilation per length bucket.
    rows = max(min(decoding.batch_size, len(order)), 1)
    base_key = jax.random.key(decoding.seed)
    # The fields that shape the computation: changing the others compiles nothing anew.
    graph = decoding.replace(seed=0, batch_size=0, max_len_offset=0)
    for number, start in enumerate(range(0, len(order), rows)):
        idx = order[start:start + rows]
        src_len = min(_round_up(max(len(encoded[i]) for i in idx), LENGTH_BUCKET),
                      config.max_len)
        out_len = min(_round_up(src_len + decoding.max_len_offset, LENGTH_BUCKET),
                      config.max_len)
        batch = [encoded[i] for i in idx] + [[]] * (rows - len(idx))
        # The source length without its EOS, plus the offset; 0 for the filler rows.
        max_lengths = np.array([min(len(ids) - 1 + decoding.max_len_offset, out_len)
                                for ids in batch[: len(idx)]] + [0] * (rows - len(idx)),
                               np.int32)
        outputs = np.asarray(decode.generate(
            params, pad_batch(batch, src_len), max_lengths,
            jax.random.fold_in(base_key, number), config=config, decoding=graph,
            max_len=out_len))
        for row, i in enumerate(idx):
            results[i] = tokenizer.decode(outputs[row])
        if progress is not None:
            progress(len(idx))
    return results


def describe(decoding: dict[str, Any]) -> str:
    """The decoding settings in a few words, e.g. "beam 4, alpha 0.6, offset 50"."""
    d = decoding
    if d["strategy"] == "beam":
        how = f"beam {d['beam_size']}, alpha {d['alpha']}"
    elif d["strategy"] == "sample":
        how = f"sampling, temperature {d['temperature']}, top-k {d['top_k']}, top-p {d['top_p']}"
    else:
        how = "greedy"
    return f"{how}, max length input + {d['max_len_offset']}"
