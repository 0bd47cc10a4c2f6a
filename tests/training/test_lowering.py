"""The train step of base and big (bfloat16, both parallel paths), the default attention
kernel and the cached decoder step, exported with ``jax.export`` for TPU and CUDA from a
CPU-only machine: traced and lowered to StableHLO, serialized and read back, never compiled
or run. What a test asserts of each module: its platforms and device count, its inputs' and
outputs' shapes and dtypes, that it computes in bfloat16 where the config asks for it, and
that it calls nothing a CPU alone provides.

Parameters and optimizer state are ``jax.eval_shape``'s: no base or big weights are
allocated. The sharded path's mesh is the 8 fake CPU devices of ``tests/conftest.py``."""

import functools
import re

import jax
import jax.numpy as jnp
import pytest
from jax import export
from jax.sharding import NamedSharding, PartitionSpec as P

from transformer_jax import config as config_lib
from transformer_jax.decoding import decode
from transformer_jax.model import kernels
from transformer_jax.model.losses import BATCH_FIELDS
from transformer_jax.model.spec import TransformerConfig
from transformer_jax.training import parallel
from transformer_jax.training.step import create_train_state, make_executor

PLATFORMS = ("tpu", "cuda")
DEVICES = 8  # tests/conftest.py's fake CPU devices
MODEL_PARALLEL = 2  # the sharded path splits heads and d_ff over 2 of them
# Custom calls that mean the same on every platform (sharding annotations of the SPMD
# partitioner). Any other target is a platform's own (a CPU's LAPACK or host callback, a GPU's
# cuDNN), which a module exported for TPU and CUDA must not hold.
PORTABLE_CUSTOM_CALLS = {"Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape"}


def custom_calls(text):
    """The targets of the custom calls in a StableHLO module's text."""
    return set(re.findall(r"custom_call @([\w$.]+)", text)
               + re.findall(r'call_target_name = "([^"]+)"', text))


def bf16_matmuls(text):
    """The types of the dot_general ops of a module whose operands are bfloat16, each once
    ("(tensor<...xbf16>, tensor<...xbf16>) -> tensor<...>"; a module exported for several
    platforms may hold an op once for each)."""
    return {m.group(1) for m in re.finditer(
        r"stablehlo\.dot_general .*: (\(tensor<[^>]*xbf16>, tensor<[^>]*xbf16>\) -> "
        r"tensor<[^>]*>)", text)}


def check_portable(exported):
    """Platforms, no CPU-only call, and a serialized form that reads back the same."""
    assert exported.platforms == PLATFORMS
    text = exported.mlir_module()
    assert custom_calls(text) <= PORTABLE_CUSTOM_CALLS
    # Exported for several platforms, the module takes which one it runs on as an argument.
    assert 'jax.global_constant = "_platform_index"' in text
    blob = exported.serialize()
    back = export.deserialize(blob)
    assert len(blob) > len(exported.mlir_module_serialized) > 0
    assert back.mlir_module_serialized == exported.mlir_module_serialized
    assert back.platforms == PLATFORMS
    assert avals(back.in_avals) == avals(exported.in_avals)
    assert avals(back.out_avals) == avals(exported.out_avals)
    assert back.nr_devices == exported.nr_devices
    return text


def avals(tree):
    """(shape, dtype) of every leaf of ``tree`` (arrays, abstract arrays, a module's avals)."""
    return [(tuple(x.shape), str(x.dtype)) for x in jax.tree.leaves(tree)]


def model_config(variant):
    config = config_lib.build(variant)
    config.model.dtype = "bfloat16"  # as on an accelerator (docs/scale.md)
    return config, TransformerConfig.from_config(config.model, config.data.vocab_size)


def abstract_state(config, mc):
    return jax.eval_shape(lambda: create_train_state(config, mc, jax.random.key(0)))


def batch_rows(config):
    """The rows of a paper-sized batch (~25,000 target tokens), a multiple of the devices."""
    return config.data.tokens_per_batch // config.data.max_len // DEVICES * DEVICES


KEY = jax.ShapeDtypeStruct((), jax.random.key(0).dtype)


def exported_train_step(variant, kind):
    """(exported train step, its abstract state, its model config) of ``variant`` on the
    ``kind`` path."""
    config, mc = model_config(variant)
    config.train.parallel = kind
    if kind == "sharded":
        config.train.model_parallel = MODEL_PARALLEL
    state = abstract_state(config, mc)
    executor = make_executor(config, mc, state)
    rows, length = batch_rows(config), config.data.max_len
    leaves, treedef = jax.tree.flatten(state)
    # jax.export serializes containers it knows; the train state (flax's TrainState, holding
    # its optimizer's functions, and optax's states) travels as its leaves.
    def flat_step(leaves, batch, key):
        new_state, metrics = executor._train(jax.tree.unflatten(treedef, leaves), batch, key)
        return jax.tree.leaves(new_state), metrics

    if kind == "sharded":
        shardings = jax.tree.leaves(executor.state_sharding)
        replicated = NamedSharding(executor.mesh, P())
        step = jax.jit(flat_step, in_shardings=(shardings, executor.batch_sharding, replicated),
                       out_shardings=(shardings, replicated))
        batch = {f: jax.ShapeDtypeStruct((rows, length), jnp.int32) for f in BATCH_FIELDS}
        args = ([jax.ShapeDtypeStruct(x.shape, x.dtype) for x in leaves], batch, KEY)
    else:
        # jax.export takes jit's functions only; pmap's goes in through a jit around it.
        step = jax.jit(flat_step)
        per_device = rows // DEVICES
        batch = {f: jax.ShapeDtypeStruct((DEVICES, per_device, length), jnp.int32)
                 for f in BATCH_FIELDS}
        args = ([jax.ShapeDtypeStruct((DEVICES, *x.shape), x.dtype) for x in leaves], batch,
                KEY)
    return export.export(step, platforms=PLATFORMS)(*args), state, mc


TRAIN_STEPS = [
    pytest.param("base", "sharded"),
    pytest.param("base", "pmap"),
    pytest.param("big", "sharded", marks=pytest.mark.slow),
    pytest.param("big", "pmap", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("variant,kind", TRAIN_STEPS)
def test_train_step_lowers_for_tpu_and_gpu(variant, kind):
    exported, state, mc = exported_train_step(variant, kind)
    text = check_portable(exported)
    assert exported.nr_devices == DEVICES
    config, _ = model_config(variant)
    rows, length = batch_rows(config), config.data.max_len
    replicas = (DEVICES,) if kind == "pmap" else ()
    state_avals = [((*replicas, *shape), dtype) for shape, dtype in avals(state)]
    n = len(state_avals)
    # In: the state's leaves (float32 parameters and Adam moments, the step), the batch, the
    # key. Out: the same state, then the metrics (float32, one a device under pmap).
    ins, outs = avals(exported.in_avals), avals(exported.out_avals)
    assert ins[:n] == state_avals
    assert {dtype for _, dtype in ins[:n]} == {"float32", "int32"}
    batch_shape = (DEVICES, rows // DEVICES, length) if kind == "pmap" else (rows, length)
    assert ins[n:n + len(BATCH_FIELDS)] == [(batch_shape, "int32")] * len(BATCH_FIELDS)
    assert outs[:n] == state_avals
    assert outs[n:] == [(replicas, "float32")] * 7  # the metrics
    # Mixed precision: the feed-forward's first matmul takes bfloat16 activations and
    # weights and gives [rows, length, d_ff] in bfloat16 (a device's rows under pmap, the
    # global batch's under jit, whose module is written for the whole of it).
    d_model, d_ff = mc.d_model, mc.d_ff
    rows_seen = rows // DEVICES if kind == "pmap" else rows
    assert (f"(tensor<{rows_seen}x{length}x{d_model}xbf16>, tensor<{d_model}x{d_ff}xbf16>) -> "
            f"tensor<{rows_seen}x{length}x{d_ff}xbf16>") in bf16_matmuls(text)
    if kind == "sharded":
        # The heads and d_ff split over the model axis survive in the module.
        mesh = parallel.make_mesh(MODEL_PARALLEL)
        shardings = exported.in_shardings_jax(mesh)[:n]
        paths = [jax.tree_util.keystr(p, simple=True, separator="/")
                 for p, _ in jax.tree_util.tree_flatten_with_path(state)[0]]
        split = {path for path, s in zip(paths, shardings, strict=True)
                 if parallel.MODEL in jax.tree.leaves(tuple(s.spec))}
        w1 = "params/encoder/layer_0/ffn/w1/kernel"
        assert w1 in split and "params/shared_embedding/embedding" not in split


def test_default_attention_kernel_lowers_for_tpu_and_gpu():
    """The default kernel at the base model's shape, causal over packed rows, bfloat16."""
    _, mc = model_config("base")
    d_k = mc.d_k
    b, length = 12, 256
    q = jax.ShapeDtypeStruct((b, mc.num_heads, length, d_k), jnp.bfloat16)
    segments = jax.ShapeDtypeStruct((b, length), jnp.int32)
    run = kernels.get(TransformerConfig.attention).run
    fn = jax.jit(lambda q, k, v, qs, ks: run(q, k, v, qs, ks, causal=True)[0])
    exported = export.export(fn, platforms=PLATFORMS)(q, q, q, segments, segments)
    text = check_portable(exported)
    assert exported.nr_devices == 1
    assert avals(exported.out_avals) == [(q.shape, "bfloat16")]
    # Both products take bfloat16; the logits (and so the softmax) are float32.
    heads, grouped = f"{b}x{mc.num_heads}", f"{b}x{mc.num_heads}x1x{length}"
    assert bf16_matmuls(text) == {
        f"(tensor<{grouped}x{d_k}xbf16>, tensor<{heads}x{length}x{d_k}xbf16>) -> "
        f"tensor<{grouped}x{length}xf32>",
        f"(tensor<{grouped}x{length}xbf16>, tensor<{heads}x{length}x{d_k}xbf16>) -> "
        f"tensor<{grouped}x{d_k}xbf16>"}
    assert re.search(rf"tensor<{b}x{mc.num_heads}x1x{length}x{length}xf32>", text)


def test_cudnn_kernel_needs_a_gpu_to_lower():
    """cuDNN's fused attention is lowered only where cuDNN is: jax checks its version while
    tracing. On a machine without a GPU the cudnn kernel falls back to XLA's attention, so what
    it exports holds no cuDNN call (the default kernel's export is the test above)."""
    q = jax.ShapeDtypeStruct((2, 128, 4, 64), jnp.bfloat16)
    fused = jax.jit(functools.partial(jax.nn.dot_product_attention, implementation="cudnn"))
    cudnn = kernels.get("cudnn")
    segments = jax.ShapeDtypeStruct((2, 128), jnp.int32)
    head_major = jax.ShapeDtypeStruct((2, 4, 128, 64), jnp.bfloat16)
    fn = jax.jit(lambda q, k, v, s: cudnn.run(q, k, v, s, s, causal=True)[0])
    # cuDNN's call has no export compatibility guarantee: exporting it must be asked for.
    fmha = export.DisabledSafetyCheck.custom_call("__cudnn$fmhaSoftmax")
    if cudnn.unavailable() is None:  # a GPU with cuDNN: its fused kernel is in the module
        text = export.export(fn, platforms=("cuda",), disabled_checks=[fmha])(
            head_major, head_major, head_major, segments).mlir_module()
        assert any("cudnn" in target for target in custom_calls(text))
        return
    # JAX asks cuDNN's library for its version while tracing: without one it refuses; with one
    # installed (PyTorch's wheels bring cuDNN) it lowers the fused call even with no GPU here.
    try:
        text = export.export(fused, platforms=("cuda",), disabled_checks=[fmha])(
            q, q, q).mlir_module()
    except RuntimeError as e:
        assert re.search("cuDNN (is not detected|not found)", str(e)), e
    else:
        assert any("cudnn" in target for target in custom_calls(text))
    exported = export.export(fn, platforms=PLATFORMS)(head_major, head_major, head_major,
                                                      segments)
    check_portable(exported)


def test_cached_decoder_step_lowers_for_tpu_and_gpu():
    """One step of the base model's cached decoder: beam 4 of 8 sentences of 32 tokens."""
    config, mc = model_config("base")
    params = abstract_state(config, mc).params
    sentences, beams, source_len, cache_len = 8, 4, 32, 64
    inputs = jax.ShapeDtypeStruct((sentences, source_len), jnp.int32)
    encoded, segments = jax.eval_shape(functools.partial(decode.encode, config=mc), params,
                                       inputs=inputs)
    cache = jax.eval_shape(lambda p, e, s: decode.init_cache(p, mc, e, s, cache_len, beams),
                           params, encoded, segments)
    tokens = jax.ShapeDtypeStruct((sentences * beams,), jnp.int32)
    step = jax.jit(lambda p, c, e, s, t: decode.decode_step(p, mc, c, e, s, t))
    exported = export.export(step, platforms=PLATFORMS)(params, cache, encoded, segments,
                                                        tokens)
    text = check_portable(exported)
    assert encoded.dtype == jnp.bfloat16
    n_params = len(jax.tree.leaves(params))
    cache_avals = avals(cache)
    assert avals(exported.in_avals)[n_params:n_params + len(cache_avals)] == cache_avals
    logits, *new_cache = avals(exported.out_avals)
    assert logits == ((sentences * beams, mc.vocab_size), "float32")
    assert new_cache == cache_avals
    # The self-attention keys and values of every decoder layer, one row a beam, bfloat16.
    rows = (sentences * beams, mc.num_heads, cache_len)
    assert cache_avals.count(((*rows, mc.d_k), "bfloat16")) == 2 * mc.num_layers
    assert bf16_matmuls(text)
