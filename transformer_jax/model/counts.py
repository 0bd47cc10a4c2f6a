"""A config's parameters: initialised, and counted with their FLOPs without allocating a
weight (``jax.eval_shape``).

    python -m transformer_jax.params --config=configs/table3.py:C_N2
    params: 33690760
    flops_per_target_token: ...

FLOPs follow the usual accounting for training (forward + backward = 3 x forward): 6 FLOPs
per parameter per target token for every matmul parameter (the encoder's as well as the
decoder's, taking source and target lengths as equal; the shared embedding counted once, as
the output projection), plus attention's two matmuls, QK^T and AV, over the rows trained on
in each of the 3N attention blocks (here ``data.row_len``, or ``data.max_len`` when the row
length is chosen from the data; the trainer uses the rows it chose).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from transformer_jax.model import positions
from transformer_jax.model.spec import TransformerConfig
from transformer_jax.model.transformer import Transformer


def init_params(model_config: TransformerConfig, key: jax.Array) -> Any:
    """Initial parameters (a [1, 1] dummy batch fixes every shape but the batch)."""
    dummy = jnp.ones((1, 1), jnp.int32)
    return Transformer(model_config.replace(deterministic=True)).init(key, dummy, dummy)["params"]


def param_shapes(model_config: TransformerConfig) -> Any:
    """The parameter pytree as ShapeDtypeStructs (nothing is allocated)."""
    return jax.eval_shape(lambda: init_params(model_config, jax.random.key(0)))


def count(tree: Any) -> int:
    return int(sum(np.prod(x.shape) for x in jax.tree.leaves(tree)))


@functools.cache
def num_params(model_config: TransformerConfig) -> int:
    """All trainable parameters of the model, counted once a model in a process: each count
    traces the model's initialisation (about a second on a CPU), and a sweep's report counts
    every run's, most of them with the model of another."""
    return count(param_shapes(model_config))


def embedding_params(model_config: TransformerConfig) -> int:
    """Parameters used only as lookups (not as matmuls)."""
    table = model_config.vocab_size * model_config.d_model
    lookups = 0 if model_config.share_embeddings else 2 * table  # source + target tables
    if positions.get(model_config.positions).traits.learned:
        lookups += 2 * model_config.max_len * model_config.d_model
    return lookups


def attention_flops_per_token(model_config: TransformerConfig, seq_len: int) -> int:
    """Training FLOPs of QK^T and AV per target token, all 3N attention blocks."""
    m = model_config
    forward = 2 * seq_len * m.num_heads * (m.d_k + m.d_v)  # per token, per block
    return 3 * (3 * m.num_layers) * forward


def train_flops_per_token(model_config: TransformerConfig, seq_len: int) -> int:
    """6 x (non-embedding + output-projection parameters) + attention, per target token."""
    matmul_params = num_params(model_config) - embedding_params(model_config)
    return 6 * matmul_params + attention_flops_per_token(model_config, seq_len)


def attention_matrix_bytes(seq_len: int, bytes_per_value: int = 2) -> int:
    """Memory of one n x n attention matrix (one head, one layer), fp16 by default."""
    return seq_len * seq_len * bytes_per_value


def attention_matrices_per_forward(model_config: TransformerConfig) -> int:
    """Attention matrices a forward pass stores, counted as the explainers do: one per head
    per layer, encoder and decoder layers together (the base model: 8 x 12 = 96). The
    decoder's cross-attention adds another num_heads x N, of size target x source."""
    return model_config.num_heads * 2 * model_config.num_layers
