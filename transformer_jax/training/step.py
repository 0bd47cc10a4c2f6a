"""The train state and the compiled steps: one optimizer step (or micro-step), the
validation step, and the executor that runs them on the devices."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import optax
from flax.training import train_state

from transformer_jax.model.losses import batch_sums, label_smoothed_cross_entropy, model_inputs
from transformer_jax.model.params import init_params
from transformer_jax.model.spec import TransformerConfig
from transformer_jax.model.transformer import Transformer
from transformer_jax.training import parallel, schedules
from transformer_jax.training.optimizer import make_optimizer


class TrainState(train_state.TrainState):
    """Params, optimizer state and step (the number of micro-batches seen)."""


def train_step(state: TrainState, batch: dict[str, jax.Array], dropout_key: jax.Array, *,
               model: Transformer, label_smoothing: float, schedule: Callable[[Any], Any],
               grad_accum_steps: int,
               axis_name: str | None = None) -> tuple[TrainState, dict[str, jax.Array]]:
    """One optimizer step (or micro-step when accumulating gradients).

    With ``axis_name`` it runs inside ``pmap`` on one device's rows: the loss is normalised
    by the target tokens of the *global* batch and the gradients are averaged with pmean, so
    the result equals the single-device step on the whole batch. Without, it is written for
    the global batch and run by ``jit`` over a mesh.
    """
    psum, pmean, num_devices, device_index = parallel.collectives(axis_name)
    step_key = jax.random.fold_in(jax.random.fold_in(dropout_key, state.step), device_index)
    weights = (batch["targets_segment_ids"] > 0).astype(jnp.float32)
    global_tokens = psum(jnp.sum(weights))

    def loss_fn(params):
        logits = model.apply({"params": params}, **model_inputs(batch),
                             rngs={"dropout": step_key})
        loss_sum, nll_sum = label_smoothed_cross_entropy(logits, batch["targets"], weights,
                                                         label_smoothing)
        return loss_sum * num_devices / jnp.maximum(global_tokens, 1.0), (loss_sum, nll_sum)

    grads, (loss_sum, nll_sum) = jax.grad(loss_fn, has_aux=True)(state.params)
    grads = pmean(grads)
    loss_sum, nll_sum = psum(loss_sum), psum(nll_sum)
    updated = state.apply_gradients(grads=grads)
    # A step whose loss, gradients or results are not finite leaves the whole state as it
    # was (its step count too): one bad batch or overflow cannot poison the parameters or
    # Adam's moments. The values are summed over devices first, so every replica agrees.
    # The test is on scalars: a global norm is finite only if every element is (and not
    # when their squares overflow). Adam's moments are finite when the gradients are.
    # Testing every leaf instead made the step's compilation about seven times slower.
    grad_norm = optax.global_norm(grads)
    finite = (jnp.isfinite(loss_sum) & jnp.isfinite(nll_sum) & jnp.isfinite(grad_norm)
              & jnp.isfinite(optax.global_norm(updated.params)))
    new_state = jax.tree.map(lambda new, old: jnp.where(finite, new, old), updated, state)
    metrics = {
        "loss_sum": loss_sum,
        "nll_sum": nll_sum,
        "tokens": global_tokens,
        "source_tokens": psum(jnp.sum(batch["inputs_segment_ids"] > 0).astype(jnp.float32)),
        "grad_norm": grad_norm,
        "learning_rate": schedule(state.step // grad_accum_steps),
        "nonfinite": 1.0 - finite.astype(jnp.float32),  # 1: the step was skipped
    }
    return new_state, metrics


def eval_step(params: Any, batch: dict[str, jax.Array], *, model: Transformer,
              label_smoothing: float, axis_name: str | None = None) -> dict[str, jax.Array]:
    """Summed loss, NLL and target tokens of one batch (over all devices)."""
    return parallel.collectives(axis_name)[0](
        batch_sums(params, batch, model=model, label_smoothing=label_smoothing))


def create_train_state(config: ml_collections.ConfigDict, model_config: TransformerConfig,
                       key: jax.Array) -> TrainState:
    tx = make_optimizer(config, model_config.d_model)
    model = Transformer(model_config)
    return TrainState.create(apply_fn=model.apply, params=init_params(model_config, key), tx=tx)


def make_executor(config: ml_collections.ConfigDict, model_config: TransformerConfig,
                  abstract_state: Any) -> parallel.PmapExecutor | parallel.ShardedExecutor:
    """The train and eval steps, compiled for ``config.train.parallel`` ("pmap" or
    "sharded")."""
    train_fn = functools.partial(train_step, model=Transformer(model_config),
                                 label_smoothing=config.train.label_smoothing,
                                 schedule=schedules.schedule_of(config, model_config.d_model),
                                 grad_accum_steps=config.optim.grad_accum_steps)
    eval_fn = functools.partial(eval_step,
                                model=Transformer(model_config.replace(deterministic=True)),
                                label_smoothing=config.train.label_smoothing)
    if config.train.parallel == "sharded":
        devices = parallel.local_devices(config.train.devices) if config.train.devices else None
        mesh = parallel.make_mesh(config.train.model_parallel, devices)
        return parallel.ShardedExecutor(train_fn, eval_fn, mesh, abstract_state)
    return parallel.PmapExecutor(train_fn, eval_fn,
                                 parallel.local_devices(config.train.devices))


def checkpoint_bytes(config: ml_collections.ConfigDict) -> int:
    """Bytes of one checkpoint's arrays (parameters, optimizer state, step) for ``config``,
    with the vocabulary size it asks for; nothing is allocated."""
    model_config = TransformerConfig.from_config(config.model, config.data.vocab_size)
    shapes = jax.eval_shape(lambda: create_train_state(config, model_config, jax.random.key(0)))
    return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(shapes))
