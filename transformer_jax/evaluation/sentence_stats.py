"""A run's sufficient statistics, sentence by sentence: what every figure of a comparison is
recomputed from, without the run's workdir.

* ``test_bleu`` ``[S, 10]``: sacreBLEU's BLEU statistics of each test sentence (hypothesis
  and reference lengths, then matches and totals of 1- to 4-grams), its default 13a
  tokenization;
* ``test_chrf`` ``[S, 18]``: sacreBLEU's chrF statistics of each test sentence (character
  n-grams 1-6: hypothesis, reference and matching counts);
* ``dev_nll`` and ``dev_tokens`` ``[V]``: each validation sentence's summed negative
  log-likelihood (nats, no label smoothing) and target tokens, from which the run's
  validation perplexity is exp(sum nll / sum tokens).

Summing a statistic over any subset of the sentences and scoring the sum gives the corpus
figure of that subset (:data:`SCORES`), so the bootstrap of
:mod:`transformer_jax.evaluation.significance` and BLEU by length both work from these
arrays. They are written at the end of training to ``eval/sentence_stats.npz``
(:func:`write`) and kept, with the run's row, in a results folder's ``records/``.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

BLEU, CHRF, PPL = "test_bleu", "test_chrf", "dev_ppl"
NLL, TOKENS = "dev_nll", "dev_tokens"


def _bleu_metric():
    import sacrebleu

    return sacrebleu.metrics.BLEU()


def _chrf_metric():
    import sacrebleu

    return sacrebleu.metrics.CHRF()


def translation_stats(hypotheses: Sequence[str], references: Sequence[str]
                      ) -> dict[str, np.ndarray]:
    """{test_bleu: [S, 10], test_chrf: [S, 18]} of the translations against their
    references, sacreBLEU's own statistics."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    hyps, refs = list(hypotheses), [list(references)]
    return {BLEU: np.asarray(_bleu_metric()._extract_corpus_statistics(hyps, refs),
                             np.int64).reshape(len(hyps), -1),
            CHRF: np.asarray(_chrf_metric()._extract_corpus_statistics(hyps, refs),
                             np.int64).reshape(len(hyps), -1)}


def _each(stats: np.ndarray, one: Any) -> np.ndarray:
    stats = np.asarray(stats)
    flat = stats.reshape(-1, stats.shape[-1])
    return np.array([one(row) for row in flat], np.float64).reshape(stats.shape[:-1])


def bleu_score(stats: np.ndarray) -> np.ndarray:
    """sacreBLEU's corpus BLEU of summed statistics ``[..., 10]`` -> ``[...]``."""
    metric = _bleu_metric()
    return _each(stats, lambda row: metric._compute_score_from_stats(
        [int(x) for x in row]).score)


def chrf_score(stats: np.ndarray) -> np.ndarray:
    """sacreBLEU's corpus chrF of summed statistics ``[..., 18]`` -> ``[...]``."""
    metric = _chrf_metric()
    return _each(stats, lambda row: metric._compute_score_from_stats(
        [int(x) for x in row]).score)


def ppl_score(stats: np.ndarray) -> np.ndarray:
    """Perplexity of summed ``[..., 2]`` (nll, tokens): exp(nll / tokens)."""
    stats = np.asarray(stats, np.float64)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        return np.exp(stats[..., 0] / np.maximum(stats[..., 1], 1.0))


# figure -> (its statistics from a run's arrays [S, K], the score of their sum)
SCORES = {
    BLEU: (lambda arrays: arrays[BLEU], bleu_score),
    CHRF: (lambda arrays: arrays[CHRF], chrf_score),
    PPL: (lambda arrays: np.stack([arrays[NLL], arrays[TOKENS]], axis=-1), ppl_score),
}


def figure(arrays: dict[str, np.ndarray], name: str) -> float | None:
    """A run's corpus figure ``name`` from its sentence statistics (None without them)."""
    stats = statistics(arrays, name)
    return None if stats is None else float(SCORES[name][1](stats.sum(axis=0)))


def statistics(arrays: dict[str, np.ndarray] | None, name: str) -> np.ndarray | None:
    """The ``[S, K]`` statistics of figure ``name`` in a run's arrays, or None."""
    if not arrays:
        return None
    try:
        stats = SCORES[name][0](arrays)
    except KeyError:
        return None
    return stats if len(stats) else None


def dumps(arrays: dict[str, np.ndarray]) -> bytes:
    """The arrays as compressed .npz bytes (integers as the smallest type that holds
    them)."""
    out = {}
    for key, value in arrays.items():
        value = np.asarray(value)
        if value.dtype.kind in "iu" and value.size:
            value = value.astype(np.min_scalar_type(int(value.max())) if value.min() >= 0
                                 else np.int64)
        out[key] = value
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **out)
    return buffer.getvalue()


def loads(data: bytes) -> dict[str, np.ndarray]:
    """:func:`dumps`'s arrays back (integers as int64); ValueError when not such a file."""
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except (OSError, ValueError, EOFError) as e:
        raise ValueError(f"not sentence statistics ({type(e).__name__})") from e
    return {k: v.astype(np.int64) if v.dtype.kind in "iu" else v for k, v in arrays.items()}


def check(arrays: dict[str, np.ndarray]) -> str:
    """'' when the arrays are well formed, else what is wrong (one phrase)."""
    widths = {BLEU: 10, CHRF: 18}
    for key, width in widths.items():
        if key in arrays and (arrays[key].ndim != 2 or arrays[key].shape[1] != width):
            return f"{key} has shape {arrays[key].shape}, not [sentences, {width}]"
    if (NLL in arrays) != (TOKENS in arrays):
        return f"{NLL} and {TOKENS} come together"
    if NLL in arrays and arrays[NLL].shape != arrays[TOKENS].shape:
        return f"{NLL} and {TOKENS} differ in length"
    for key, value in arrays.items():
        if value.dtype.kind == "f" and not np.all(np.isfinite(value)):
            return f"{key} holds a value that is not finite"
        if value.dtype.kind in "iu" and value.size and value.min() < 0:
            return f"{key} holds a negative count"
    return ""


def perplexity(nll: np.ndarray, tokens: np.ndarray) -> float:
    """exp(sum nll / sum tokens), inf beyond a float's range."""
    try:
        return math.exp(float(np.sum(nll)) / max(float(np.sum(tokens)), 1.0))
    except OverflowError:
        return math.inf
