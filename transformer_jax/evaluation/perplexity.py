"""Perplexity: of a model on a split, and the reduction the training loop's validation
shares with it."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable
from typing import Any

import jax
import numpy as np

from transformer_jax.io import metric_keys
from transformer_jax.model import losses
from transformer_jax.model.spec import TransformerConfig
from transformer_jax.model.transformer import Transformer


def perplexity(nll_sum: float, tokens: float) -> float:
    """exp(mean negative log-likelihood per target token); inf beyond a float's range (a
    diverged model)."""
    try:
        return math.exp(nll_sum / max(tokens, 1.0))
    except OverflowError:
        return math.inf


def loss_over_batches(batch_sums: Callable[[Any], dict[str, Any]],
                      batches: Iterable[Any]) -> dict[str, float]:
    """Loss and NLL per target token, perplexity and target tokens over ``batches``.

    ``batch_sums(batch)`` gives one batch's summed loss, NLL and target tokens (``loss_sum``,
    ``nll_sum``, ``tokens``): the training loop's validation and the evaluate command's
    perplexity both reduce them here.
    """
    totals = {"loss_sum": 0.0, "nll_sum": 0.0, "tokens": 0.0}
    for batch in batches:
        sums = batch_sums(batch)
        for k in totals:
            totals[k] += float(sums[k])
    n = max(totals["tokens"], 1.0)
    return {metric_keys.LOSS: totals["loss_sum"] / n, metric_keys.NLL: totals["nll_sum"] / n,
            metric_keys.PERPLEXITY: perplexity(totals["nll_sum"], n),
            metric_keys.TOKENS: int(totals["tokens"])}  # a count: readers take only integers


@functools.partial(jax.jit, static_argnames="config")
def _sums(params: Any, batch: dict[str, jax.Array], *,
          config: TransformerConfig) -> dict[str, jax.Array]:
    """Summed loss (unsmoothed), NLL and target tokens of one packed batch."""
    model = Transformer(config.replace(deterministic=True, decode=False))
    return losses.batch_sums(params, batch, model=model, label_smoothing=0.0)


def split_perplexity(params: Any, config: TransformerConfig,
                     batches: Iterable[dict[str, np.ndarray]]) -> dict[str, float]:
    """Perplexity (with NLL per token and target tokens) of the model on packed batches
    (``batching.eval_batches``) of a split."""
    return loss_over_batches(functools.partial(_sums, params, config=config), batches)



@functools.partial(jax.jit, static_argnames="config")
def _row_sums(params: Any, batch: dict[str, jax.Array], *,
              config: TransformerConfig) -> tuple[jax.Array, jax.Array]:
    """Each row's summed NLL (unsmoothed) and target tokens: [rows], [rows]."""
    import jax.numpy as jnp

    model = Transformer(config.replace(deterministic=True, decode=False))
    logits = model.apply({"params": params}, **losses.model_inputs(batch))
    weights = (batch["targets_segment_ids"] > 0).astype(jnp.float32)
    nll = jax.vmap(lambda z, t, w: losses.label_smoothed_cross_entropy(
        z, t, w, 0.0)[1])(logits, batch["targets"], weights)
    return nll, jnp.sum(weights, axis=1)


def sentence_nll(params: Any, config: TransformerConfig, source: Any, tokenizer: Any, *,
                 max_len: int, rows: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """(summed NLL, target tokens) of every pair of a split, in order: one pair a row,
    truncated to ``max_len`` as the validation's packed batches truncate it, so that
    exp(sum NLL / sum tokens) is the split's perplexity. ``source`` and ``tokenizer`` as
    for ``batching.eval_batches``."""
    from transformer_jax.data import batching
    from transformer_jax.data.packing import PackChunk

    ids = batching.as_ids(source, tokenizer)
    pack = PackChunk(ids, max_len, packing=False)
    nll, tokens = [], []
    for start in range(0, len(ids), rows):
        batch = pack(0, np.arange(start, min(start + rows, len(ids))))
        n = len(batch["inputs"])
        if n < rows:
            batch = {k: np.pad(v, ((0, rows - n), (0, 0))) for k, v in batch.items()}
        row_nll, row_tokens = _row_sums(params, batch, config=config)
        nll.append(np.asarray(row_nll, np.float64)[:n])
        tokens.append(np.asarray(row_tokens)[:n].round().astype(np.int64))
    return (np.concatenate(nll) if nll else np.zeros(0),
            np.concatenate(tokens) if tokens else np.zeros(0, np.int64))
