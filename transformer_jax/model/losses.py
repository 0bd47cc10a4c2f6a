"""The training objective: label-smoothed cross-entropy, summed over a batch's tokens.

Shared by training (step.py) and evaluation (perplexity.py), so the perplexity a run logs and
the one the evaluate command reports come from one function.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from transformer_jax.model.transformer import Transformer


def label_smoothed_cross_entropy(logits: jax.Array, targets: jax.Array, weights: jax.Array,
                                 label_smoothing: float) -> tuple[jax.Array, jax.Array]:
    """Sums over tokens of the smoothed cross-entropy and of the plain NLL.

    The smoothed target puts 1 - eps + eps/V on the right token and eps/V on every token
    (V = 5, eps = 0.1 gives [0.92, 0.02, 0.02, 0.02, 0.02]), so per token

        loss = (1 - eps) * NLL + eps * (logsumexp(z) - mean(z)),  NLL = logsumexp(z) - z_target.

    The target's logit is picked by comparing the vocabulary index with the target id inside
    the reduction: no one-hot [b, t, V] array and no gather, whose gradient would be a
    scatter over the whole [b, t, V] gradient; everything fuses into passes over the logits.

    Args:
      logits: [b, t, V]; targets: [b, t] ids; weights: [b, t], 0 for padding.
    Returns:
      (sum of smoothed cross-entropy, sum of NLL), each a scalar.
    """
    logits = logits.astype(jnp.float32)
    vocab = logits.shape[-1]
    lse = jax.nn.logsumexp(logits, axis=-1)
    is_target = jax.lax.broadcasted_iota(jnp.int32, logits.shape, logits.ndim - 1) == \
        targets[..., None]
    target_logit = jnp.sum(jnp.where(is_target, logits, 0.0), axis=-1)
    nll = lse - target_logit
    loss = (1.0 - label_smoothing) * nll + label_smoothing * (
        lse - jnp.sum(logits, axis=-1) / vocab)
    return jnp.sum(loss * weights), jnp.sum(nll * weights)


# The arrays of a batch the model reads, each [rows, row length] int32.
BATCH_FIELDS = ("inputs", "targets", "inputs_segment_ids", "targets_segment_ids",
                "inputs_positions", "targets_positions")


def model_inputs(batch: dict[str, jax.Array]) -> dict[str, jax.Array]:
    return {k: batch[k] for k in BATCH_FIELDS}


def batch_sums(params: Any, batch: dict[str, jax.Array], *, model: Transformer,
               label_smoothing: float) -> dict[str, jax.Array]:
    """Summed loss, NLL and target tokens of one batch (of the rows this device holds)."""
    weights = (batch["targets_segment_ids"] > 0).astype(jnp.float32)
    logits = model.apply({"params": params}, **model_inputs(batch))
    loss_sum, nll_sum = label_smoothed_cross_entropy(logits, batch["targets"], weights,
                                                     label_smoothing)
    return {"loss_sum": loss_sum, "nll_sum": nll_sum, "tokens": jnp.sum(weights)}
