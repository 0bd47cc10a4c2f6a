"""The train state and the compiled steps: one optimizer step (its micro-batches
accumulated inside it), the validation step, and the executor that runs them on the
devices."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import optax
from flax.training import train_state

from transformer_jax.model import dropout
from transformer_jax.model.counts import init_params
from transformer_jax.model.losses import batch_sums, label_smoothed_cross_entropy, model_inputs
from transformer_jax.model.spec import TransformerConfig
from transformer_jax.model.transformer import Transformer
from transformer_jax.training import parallel, schedules
from transformer_jax.training.optimizer import make_optimizer
from transformer_jax.training.spec import LoopSpec, OptimSpec


class TrainState(train_state.TrainState):
    """Params, optimizer state and step: the number of optimizer steps taken (each of
    ``optim.grad_accum_steps`` micro-batches)."""


def train_step(state: TrainState, batch: dict[str, jax.Array], dropout_key: jax.Array, *,
               model: Transformer, label_smoothing: float, schedule: Callable[[Any], Any],
               grad_accum_steps: int,
               axis_name: str | None = None) -> tuple[TrainState, dict[str, jax.Array]]:
    """One optimizer step: the gradient of the step's loss per target token, then Adam.

    ``batch`` holds [rows, row_len] arrays, or with ``grad_accum_steps`` k > 1 the step's k
    micro-batches stacked as [k, rows, row_len]. The loss is the smoothed cross-entropy
    summed over the step's target tokens and divided by their number, counted over all k
    micro-batches (and all devices): the paper's per-token loss of the whole step, as one
    batch of k * rows rows would give it, whatever each micro-batch holds. A ``lax.scan``
    runs the micro-batches one after the other, summing their gradients into one buffer
    the size of the parameters, and Adam is applied once. This is t5x's and MaxText's
    accumulation: one compiled program an optimizer step, so the train state, its step
    count, checkpoints and logs all count optimizer steps, and memory holds the
    activations of one micro-batch. ``optax.MultiSteps`` instead ran one program a
    micro-batch and averaged micro-batch means (a micro-batch of few tokens weighed as
    much as a full one), kept the running sum in the optimizer state (saved with every
    checkpoint), and counted micro-batches. With k = 1 there is no scan and no buffer.

    With ``axis_name`` it runs on one device's (or data shard's) rows of each micro-batch,
    inside ``pmap``, or ``shard_map`` over the mesh's "data" axis when accumulating
    (parallel.ShardedExecutor): the token count is summed over devices first and the
    gradients after the scan (one all-reduce a step, not one a micro-batch), and the dropout
    masks are the device's block of the whole batch's (``dropout.rows_block``), so the
    result is the step on the global batch, which it is written for when ``axis_name`` is
    None (jit over a mesh, XLA placing the collectives).
    """
    psum, _, num_devices, device_index = parallel.collectives(axis_name)
    k = grad_accum_steps
    weights = (batch["targets_segment_ids"] > 0).astype(jnp.float32)
    tokens = psum(jnp.sum(weights))
    scale = 1.0 / jnp.maximum(tokens, 1.0)

    def micro_step(micro_batch: dict[str, jax.Array], index: jax.Array | int) -> tuple:
        """(gradient of the micro-batch's loss sum over the step's tokens, loss sum, NLL
        sum) of this device's rows of one micro-batch."""
        # Micro-batch i of step s draws the masks micro-step s * k + i drew when the step
        # counted micro-batches; the 0 is the device index every device once folded in.
        key = jax.random.fold_in(jax.random.fold_in(dropout_key, state.step * k + index), 0)

        def loss_fn(params):
            logits = model.apply({"params": params}, **model_inputs(micro_batch),
                                 rngs={"dropout": key})
            loss_sum, nll_sum = label_smoothed_cross_entropy(
                logits, micro_batch["targets"],
                (micro_batch["targets_segment_ids"] > 0).astype(jnp.float32), label_smoothing)
            return loss_sum * scale, (loss_sum, nll_sum)

        grads, sums = jax.grad(loss_fn, has_aux=True)(state.params)
        return grads, sums

    with dropout.rows_block(device_index, num_devices):
        if k == 1:
            grads, (loss_sum, nll_sum) = micro_step(batch, 0)
        else:
            def accumulate(carry: tuple, xs: tuple) -> tuple[tuple, None]:
                grads, sums = micro_step(*xs)
                return jax.tree.map(jnp.add, carry, (grads, sums)), None

            zero = jnp.zeros((), jnp.float32)
            start = (jax.tree.map(jnp.zeros_like, state.params), (zero, zero))
            (grads, (loss_sum, nll_sum)), _ = jax.lax.scan(
                accumulate, start, (batch, jnp.arange(k)))
    grads = psum(grads)
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
        "tokens": tokens,
        "source_tokens": psum(jnp.sum(batch["inputs_segment_ids"] > 0).astype(jnp.float32)),
        "grad_norm": grad_norm,
        "learning_rate": schedule(state.step),
        "nonfinite": 1.0 - finite.astype(jnp.float32),  # 1: the step was skipped
    }
    return new_state, metrics


def eval_step(params: Any, batch: dict[str, jax.Array], *, model: Transformer,
              label_smoothing: float, axis_name: str | None = None) -> dict[str, jax.Array]:
    """Summed loss, NLL and target tokens of one batch (over all devices)."""
    return parallel.collectives(axis_name)[0](
        batch_sums(params, batch, model=model, label_smoothing=label_smoothing))


def initial_state(optim: OptimSpec, model_config: TransformerConfig,
                  key: jax.Array) -> TrainState:
    """A new run's train state: the model's initial parameters and Adam's state."""
    tx = make_optimizer(optim, model_config.d_model)
    model = Transformer(model_config)
    return TrainState.create(apply_fn=model.apply, params=init_params(model_config, key), tx=tx)


def executor_for(optim: OptimSpec, loop: LoopSpec, model_config: TransformerConfig,
                 abstract_state: Any, devices: Sequence[jax.Device] | None = None
                 ) -> parallel.PmapExecutor | parallel.ShardedExecutor:
    """The train and eval steps, compiled for ``loop.parallel`` ("sharded" or "pmap") on
    ``devices`` (default: those ``train.devices`` names; compile-only devices compile the
    steps for an accelerator this machine lacks, planning/compiled.py); the train step takes
    a batch of ``optim.grad_accum_steps`` stacked micro-batches when that is above 1
    (:func:`train_step`)."""
    train_fn = functools.partial(
        train_step, model=Transformer(model_config), label_smoothing=optim.label_smoothing,
        schedule=schedules.learning_rate(optim.schedule, optim.settings, model_config.d_model),
        grad_accum_steps=optim.grad_accum_steps)
    eval_fn = functools.partial(eval_step,
                                model=Transformer(model_config.replace(deterministic=True)),
                                label_smoothing=optim.label_smoothing)
    micro_batches = optim.grad_accum_steps
    if loop.parallel == "sharded":
        if devices is None and loop.devices:
            devices = parallel.local_devices(loop.devices)
        mesh = parallel.make_mesh(loop.model_parallel, devices)
        return parallel.ShardedExecutor(train_fn, eval_fn, mesh, abstract_state, micro_batches)
    return parallel.PmapExecutor(train_fn, eval_fn,
                                 devices or parallel.local_devices(loop.devices),
                                 micro_batches)


def state_bytes(optim: OptimSpec, model_config: TransformerConfig) -> int:
    """Bytes of one checkpoint's arrays (parameters, optimizer state, step) of the model
    ``model_config``; nothing is allocated."""
    shapes = jax.eval_shape(lambda: initial_state(optim, model_config, jax.random.key(0)))
    return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(shapes))


# For callers that hold an experiment config (scripts, tests): each reads the config into the
# specs and calls the function above. The package itself calls those (tests/test_specs.py).


def create_train_state(config: ml_collections.ConfigDict, model_config: TransformerConfig,
                       key: jax.Array) -> TrainState:
    """:func:`initial_state` of ``config``'s optimiser."""
    return initial_state(OptimSpec.from_config(config), model_config, key)


def make_executor(config: ml_collections.ConfigDict, model_config: TransformerConfig,
                  abstract_state: Any, devices: Sequence[jax.Device] | None = None
                  ) -> parallel.PmapExecutor | parallel.ShardedExecutor:
    """:func:`executor_for` of ``config``'s optimiser and loop."""
    return executor_for(OptimSpec.from_config(config), LoopSpec.from_config(config),
                        model_config, abstract_state, devices)


def checkpoint_bytes(config: ml_collections.ConfigDict) -> int:
    """:func:`state_bytes` of ``config``'s model, with the vocabulary size it asks for."""
    return state_bytes(OptimSpec.from_config(config),
                       TransformerConfig.from_config(config.model, config.data.vocab_size))
