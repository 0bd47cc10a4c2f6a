"""Evaluation: translating a list of sentences, BLEU (sacreBLEU) and perplexity."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import sacrebleu

from transformer_jax import decode
from transformer_jax.data.pipeline import pad_batch
from transformer_jax.data.tokenizer import Tokenizer
from transformer_jax.model import TransformerConfig

LENGTH_BUCKET = 16  # decode lengths are rounded up to this, to bound recompilations


def bleu(hypotheses: Sequence[str], references: Sequence[str]) -> tuple[float, str]:
    """sacreBLEU on detokenized text: (score, signature)."""
    metric = sacrebleu.metrics.BLEU()
    score = metric.corpus_score(list(hypotheses), [list(references)])
    return score.score, str(metric.get_signature())


def perplexity(nll_sum: float, tokens: float) -> float:
    """exp(mean negative log-likelihood per target token)."""
    return math.exp(nll_sum / max(tokens, 1.0))


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def translate(params: Any, config: TransformerConfig, tokenizer: Tokenizer,
              sentences: Sequence[str], *, batch_size: int = 64, max_len_offset: int = 50,
              progress: Callable[[int], None] | None = None) -> list[str]:
    """Greedy translations of ``sentences``, in their order.

    Sentences are decoded in batches of similar length; the output may be up to
    ``max_len_offset`` tokens longer than the input (the paper's rule), within the model's
    ``max_len``. Empty or whitespace-only inputs give empty outputs.
    """
    encoded = [tokenizer.encode(s) if s.strip() else [] for s in sentences]
    order = sorted(range(len(sentences)), key=lambda i: len(encoded[i]))
    results = [""] * len(sentences)
    for start in range(0, len(order), batch_size):
        idx = [i for i in order[start:start + batch_size] if encoded[i]]
        if idx:
            src_len = min(_round_up(max(len(encoded[i]) for i in idx), LENGTH_BUCKET),
                          config.max_len)
            out_len = min(_round_up(src_len + max_len_offset, LENGTH_BUCKET), config.max_len)
            # A fixed batch shape: one compilation per length bucket.
            rows = [encoded[i] for i in idx] + [[]] * (batch_size - len(idx))
            outputs = np.asarray(decode.greedy_decode(
                params, pad_batch(rows, src_len), config=config, max_len=out_len))
            for row, i in enumerate(idx):
                results[i] = tokenizer.decode(outputs[row])
        if progress is not None:
            progress(min(start + batch_size, len(order)))
    return results
