"""The model: the paper's formulas, masks that leak nothing, and the read-out of attention."""

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_jax.model.transformer import (
    Transformer,
    TransformerConfig,
    shift_right,
    sinusoidal_positions,
)

TINY = TransformerConfig(vocab_size=50, num_layers=2, d_model=32, d_ff=64, num_heads=4, d_k=8,
                         d_v=8, dropout_rate=0.0, max_len=64, deterministic=True)


def init(config=TINY, src_len=7, tgt_len=6):
    model = Transformer(config)
    src = jnp.ones((2, src_len), jnp.int32)
    tgt = jnp.ones((2, tgt_len), jnp.int32)
    return model, model.init(jax.random.key(0), src, tgt)


def random_tokens(shape, seed):
    return jnp.asarray(np.random.default_rng(seed).integers(3, 50, shape), jnp.int32)


def test_sinusoidal_positions_seed_example():
    pe = sinusoidal_positions(3, 4)
    np.testing.assert_allclose(pe[0], [0, 1, 0, 1], atol=5e-4)
    np.testing.assert_allclose(pe[1], [0.841, 0.540, 0.010, 1.000], atol=5e-4)
    np.testing.assert_allclose(pe[2], [0.909, -0.416, 0.020, 1.000], atol=5e-4)


def test_sinusoidal_positions_formula():
    pe = sinusoidal_positions(50, 16)
    pos, i = 37, 5  # dimension 2i = 10 and 2i + 1 = 11
    np.testing.assert_allclose(pe[pos, 2 * i], np.sin(pos / 10000 ** (2 * i / 16)), rtol=1e-6)
    np.testing.assert_allclose(pe[pos, 2 * i + 1], np.cos(pos / 10000 ** (2 * i / 16)),
                               rtol=1e-6)


def test_causal_mask_leaks_nothing():
    model, variables = init()
    src = random_tokens((2, 7), 0)
    tgt = random_tokens((2, 6), 1)
    changed = tgt.at[:, 4:].set(random_tokens((2, 2), 2))
    a = model.apply(variables, src, tgt)
    b = model.apply(variables, src, changed)
    # Logits at position t depend on targets < t (inputs are shifted right): 0..4 unchanged.
    np.testing.assert_allclose(a[:, :5], b[:, :5], atol=1e-6)
    assert not np.allclose(a[:, 5], b[:, 5])


def test_padding_changes_no_real_logit():
    model, variables = init()
    src = random_tokens((2, 7), 3)
    tgt = random_tokens((2, 6), 4)
    a = model.apply(variables, src, tgt)
    padded = model.apply(variables, jnp.pad(src, ((0, 0), (0, 9))),
                         jnp.pad(tgt, ((0, 0), (0, 5))))
    np.testing.assert_allclose(a, padded[:, :6], atol=1e-5)


def test_packed_row_equals_separate_sequences():
    model, variables = init()
    s1, s2 = random_tokens((1, 4), 5), random_tokens((1, 3), 6)
    t1, t2 = random_tokens((1, 3), 7), random_tokens((1, 5), 8)
    packed = model.apply(
        variables, jnp.concatenate([s1, s2], 1), jnp.concatenate([t1, t2], 1),
        inputs_segment_ids=jnp.array([[1, 1, 1, 1, 2, 2, 2]]),
        targets_segment_ids=jnp.array([[1, 1, 1, 2, 2, 2, 2, 2]]),
        inputs_positions=jnp.array([[0, 1, 2, 3, 0, 1, 2]]),
        targets_positions=jnp.array([[0, 1, 2, 0, 1, 2, 3, 4]]))
    np.testing.assert_allclose(packed[:, :3], model.apply(variables, s1, t1), atol=1e-5)
    np.testing.assert_allclose(packed[:, 3:], model.apply(variables, s2, t2), atol=1e-5)


def test_shift_right_restarts_each_segment():
    targets = jnp.array([[5, 6, 7, 8, 9, 0]])
    segments = jnp.array([[1, 1, 2, 2, 2, 0]])
    np.testing.assert_array_equal(shift_right(targets), [[0, 5, 6, 7, 8, 9]])
    np.testing.assert_array_equal(shift_right(targets, segments), [[0, 5, 0, 7, 8, 0]])


def test_attention_weights_read_out_without_changing_outputs():
    model, variables = init()
    src, tgt = random_tokens((2, 7), 9), random_tokens((2, 6), 10)
    plain = model.apply(variables, src, tgt)
    logits, state = model.apply(variables, src, tgt, mutable=["intermediates"])
    np.testing.assert_array_equal(plain, logits)
    inter = state["intermediates"]
    enc = inter["encoder"]["layer_1"]["self_attention"]["attention_weights"][0]
    dec_self = inter["decoder"]["layer_0"]["self_attention"]["attention_weights"][0]
    cross = inter["decoder"]["layer_0"]["cross_attention"]["attention_weights"][0]
    assert enc.shape == (2, 4, 7, 7)
    assert dec_self.shape == (2, 4, 6, 6)
    assert cross.shape == (2, 4, 6, 7)
    np.testing.assert_allclose(np.triu(dec_self[0, 0], 1), 0.0)  # causal
    np.testing.assert_allclose(cross.sum(-1), 1.0, rtol=1e-5)


def test_dk_and_dv_are_independent_of_d_model():
    config = TINY.replace(num_heads=2, d_k=4, d_v=12)
    _, variables = init(config)
    attn = variables["params"]["encoder"]["layer_0"]["self_attention"]
    # Fused Q, K, V projection, head-major: 2 heads x (4 + 4 + 12).
    assert attn["qkv"]["kernel"].shape == (32, 2, 4 + 4 + 12)
    assert attn["qkv"]["bias"].shape == (2, 4 + 12)  # no key bias
    assert attn["out"]["kernel"].shape == (2 * 12, 32)


def test_one_matrix_shared_by_source_target_and_softmax():
    _, variables = init()
    params = variables["params"]
    assert [k for k in params if "embed" in k] == ["shared_embedding"]
    _, unshared = init(TINY.replace(share_embeddings=False))
    names = set(unshared["params"])
    assert {"source_embedding", "target_embedding", "output_projection"} <= names


def _without(params, name):
    """The params with every entry called ``name`` left out (at any depth)."""
    if not isinstance(params, dict):
        return params
    return {k: _without(v, name) for k, v in params.items() if k != name}


def _as_multi_head(params, group=2, d_k=8):
    """Grouped-query params as the multi-head model's: each key/value head repeated for
    the ``group`` query heads that share it (the fused kernel of a group holds its queries'
    columns, then the key's, then the value's; the key has no bias)."""
    if not isinstance(params, dict):
        return params
    out = {k: _as_multi_head(v, group, d_k) for k, v in params.items()}
    if "qkv" in params:
        kernel, bias = np.asarray(params["qkv"]["kernel"]), np.asarray(params["qkv"]["bias"])
        q = group * d_k
        heads = [(g, j) for g in range(kernel.shape[1]) for j in range(group)]
        out["qkv"] = {
            "kernel": np.stack([np.concatenate([kernel[:, g, j * d_k:(j + 1) * d_k],
                                                kernel[:, g, q:]], -1) for g, j in heads], 1),
            "bias": np.stack([np.concatenate([bias[g, j * d_k:(j + 1) * d_k], bias[g, q:]])
                              for g, j in heads])}
    if "key_value" in params:
        out["key_value"] = {k: np.repeat(np.asarray(v), group, axis=-2 if k == "kernel" else 0)
                            for k, v in params["key_value"].items()}
    return out


@pytest.mark.parametrize("change", [dict(norm="pre"), dict(positions="learned"),
                                    dict(num_kv_heads=2)])
def test_switches_build_and_run(change):
    config = TINY.replace(**change)
    model, variables = init(config)
    src, tgt = random_tokens((2, 7), 11), random_tokens((2, 6), 12)
    out = model.apply(variables, src, tgt)
    assert out.shape == (2, 6, 50) and np.all(np.isfinite(out))
    params = variables["params"]
    if "num_kv_heads" in change:
        # 2 key/value heads for 4 query heads is the 4-head model with each key/value head
        # repeated for the 2 query heads that share it.
        assert params["encoder"]["layer_0"]["self_attention"]["qkv"]["kernel"].shape == (
            32, 2, 2 * 8 + 8 + 8)
        full = Transformer(TINY).apply({"params": _as_multi_head(params)}, src, tgt)
        np.testing.assert_allclose(out, full, atol=1e-5)
        return
    # The paper's model with the same weights (less the switch's own) computes other logits.
    name = "final_norm" if "norm" in change else "position_embedding"
    assert name in (params["encoder"] if "norm" in change else params["encoder"]["embed"])
    default = Transformer(TINY).apply({"params": _without(params, name)}, src, tgt)
    assert not np.allclose(out, default, atol=1e-3)
    # Without layers the logits can be worked out by hand: the decoder's input embedding,
    # scaled by sqrt(d_model), plus its positions (pre-norm: then LayerNorm, scale 1 and bias
    # 0 as initialised), times the shared matrix, plus the softmax bias.
    model, variables = init(config.replace(num_layers=0))
    params = variables["params"]
    logits = model.apply(variables, src[:1], tgt[:1])[0]
    table = np.asarray(params["shared_embedding"]["embedding"], np.float64)
    if "positions" in change:
        positions = np.asarray(params["decoder"]["embed"]["position_embedding"])[:6]
    else:
        positions = sinusoidal_positions(6, 32)
    x = table[np.asarray(shift_right(tgt[:1]))[0]] * np.sqrt(32) + positions
    if "norm" in change:
        x = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(logits, x @ table.T + np.asarray(params["logits_bias"]),
                               rtol=1e-4, atol=1e-4)


def test_embeddings_scaled_by_sqrt_d_model():
    model, variables = init(TINY.replace(num_layers=0))
    # With no layers the decoder output is embed * sqrt(d) + PE; the logits are its product
    # with the embedding matrix.
    src = random_tokens((1, 3), 13)
    tgt = random_tokens((1, 4), 14)
    logits = model.apply(variables, src, tgt)
    table = variables["params"]["shared_embedding"]["embedding"]
    inputs = shift_right(tgt)
    x = table[inputs[0]] * np.sqrt(32) + sinusoidal_positions(4, 32)
    bias = variables["params"]["logits_bias"]
    np.testing.assert_allclose(logits[0], x @ table.T + bias, rtol=1e-4, atol=1e-4)


def test_dropout_is_active_in_training_and_off_in_evaluation():
    config = TINY.replace(dropout_rate=0.3, deterministic=False)
    model, variables = init(config.replace(deterministic=True))
    src, tgt = random_tokens((2, 7), 15), random_tokens((2, 6), 16)
    a = Transformer(config).apply(variables, src, tgt, rngs={"dropout": jax.random.key(1)})
    b = Transformer(config).apply(variables, src, tgt, rngs={"dropout": jax.random.key(2)})
    assert not np.allclose(a, b)
    e1 = model.apply(variables, src, tgt)
    e2 = model.apply(variables, src, tgt)
    np.testing.assert_array_equal(e1, e2)


@pytest.mark.slow
def test_remat_changes_nothing_but_memory():
    model, variables = init()
    src, tgt = random_tokens((2, 7), 17), random_tokens((2, 6), 18)
    remat = Transformer(TINY.replace(remat=True))

    def loss(m):
        return lambda p: jnp.sum(m.apply({"params": p}, src, tgt) ** 2)

    g1 = jax.grad(loss(model))(variables["params"])
    g2 = jax.grad(loss(remat))(variables["params"])
    for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g2), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_bfloat16_compute_keeps_float32_params_and_logits():
    config = TINY.replace(dtype=jnp.bfloat16)
    model, variables = init(config)
    assert all(p.dtype == jnp.float32 for p in jax.tree.leaves(variables["params"]))
    src, tgt = random_tokens((2, 7), 19), random_tokens((2, 6), 20)
    logits = model.apply(variables, src, tgt)
    assert logits.dtype == jnp.float32
    reference = Transformer(TINY).apply(variables, src, tgt)
    # bf16 keeps ~3 significant digits: close to float32, not equal.
    assert 0 < float(jnp.max(jnp.abs(logits - reference))) < 0.1


# ----------------------------------------------------------------------------------------
# Attention kernels (model.attention) and grouped key/value heads (model.num_kv_heads)


@pytest.fixture(scope="module")
def padded_batch_and_dense_logits():
    model = Transformer(TINY)
    variables = jax.jit(model.init)(jax.random.key(0), jnp.ones((2, 7), jnp.int32),
                                    jnp.ones((2, 6), jnp.int32))
    src = jnp.pad(random_tokens((2, 7), 17), ((0, 0), (0, 3)))
    tgt = jnp.pad(random_tokens((2, 6), 18), ((0, 0), (0, 2)))
    return variables, src, tgt, jax.jit(model.apply)(variables, src, tgt)


@pytest.mark.parametrize("kernel", ["blockwise", "local", "cudnn"])
def test_every_kernel_gives_the_dense_models_logits(kernel, padded_batch_and_dense_logits):
    variables, src, tgt, dense_logits = padded_batch_and_dense_logits
    # Local attention with r beyond the sentence length sees what dense attention sees.
    other = Transformer(TINY.replace(attention=kernel, block_size=4, local_window=16))
    np.testing.assert_allclose(jax.jit(other.apply)(variables, src, tgt)[:, :6],
                               dense_logits[:, :6], atol=1e-5)


def test_local_attention_restricts_what_the_encoder_sees():
    # r = 1 and 2 layers: encoder position 0 sees positions 0..2, nothing beyond.
    local = Transformer(TINY.replace(attention="local", local_window=1))
    _, variables = init()
    src = random_tokens((1, 9), 19)
    encode = jax.jit(lambda s: local.apply(variables, s, method=Transformer.encode))
    changed = encode(src.at[:, 3:].set(random_tokens((1, 6), 20)))
    np.testing.assert_allclose(encode(src)[:, :1], changed[:, :1], atol=1e-6)
    assert not np.allclose(encode(src)[:, 2], changed[:, 2])


def test_weights_read_out_falls_back_to_the_dense_kernel():
    model = Transformer(TINY.replace(attention="blockwise", block_size=4))
    _, variables = init()
    src, tgt = random_tokens((2, 7), 21), random_tokens((2, 6), 22)
    logits, state = model.apply(variables, src, tgt, mutable=["intermediates"])
    np.testing.assert_allclose(logits, jax.jit(model.apply)(variables, src, tgt), atol=1e-5)
    weights = state["intermediates"]["encoder"]["layer_0"]["self_attention"]["attention_weights"]
    assert weights[0].shape == (2, 4, 7, 7)


@pytest.mark.parametrize("num_kv_heads", [0, 2, 1])
def test_grouped_key_value_heads_shrink_the_decoding_cache(num_kv_heads):
    from transformer_jax.decoding import decode  # decode only drives the model's own cache

    config = TINY.replace(num_kv_heads=num_kv_heads)
    src = random_tokens((2, 7), 23)
    params = jax.eval_shape(lambda: Transformer(config).init(jax.random.key(0), src, src))
    cache = jax.eval_shape(lambda p: decode.init_cache(
        p, config, *decode.encode(p, config, src), max_len=12), params["params"])
    layer = cache["decoder"]["layer_0"]
    kv_heads = num_kv_heads or 4
    # [b, h_kv, max_len, d_k]: 4 query heads share 4 (the paper's), 2 (grouped) or 1
    # (multi-query) key/value heads; the cross-attention's [b, h_kv, s, d_k] likewise.
    assert layer["self_attention"]["cached_key"].shape == (2, kv_heads, 12, 8)
    assert layer["self_attention"]["cached_value"].shape == (2, kv_heads, 12, 8)
    assert layer["cross_attention"]["cross_key"].shape == (2, kv_heads, 7, 8)
    cache_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(cache))
    counters = 2 * 4 + 4  # each layer's cache index and the position
    assert cache_bytes - counters == 2 * 2 * (2 * 12 + 2 * 7) * kv_heads * 8 * 4
    assert cache_bytes - counters == {4: 19_456, 2: 9_728, 1: 4_864}[kv_heads]


@pytest.mark.slow
def test_cached_decoding_with_local_multi_query_attention_matches_teacher_forcing():
    from transformer_jax.decoding import decode

    config = TINY.replace(num_kv_heads=1, attention="local", local_window=3)
    model, variables = init(config)
    src = random_tokens((2, 7), 24)
    # Each step reads only the r + 1 cached keys in reach (the sliced path); teacher forcing
    # runs the blocked path over the whole output at once. They must pick the same tokens.
    out = decode.greedy_decode(variables["params"], src, config=config, max_len=12)
    logits = jax.jit(model.apply)(variables, src, out, targets_segment_ids=jnp.ones_like(out))
    for row, tokens in enumerate(np.asarray(out).tolist()):
        end = tokens.index(1) + 1 if 1 in tokens else 12  # up to the first EOS (id 1)
        np.testing.assert_array_equal(np.argmax(logits[row, :end], -1), tokens[:end])


PAPER_PATH = """
import sys
import jax, jax.numpy as jnp
from transformer_jax.model.transformer import Transformer, TransformerConfig
config = TransformerConfig(vocab_size=50, num_layers=1, d_model=32, d_ff=64, num_heads=4,
                           d_k=8, d_v=8, max_len=16, decode={decode})
model, x = Transformer(config), jnp.ones((2, 5), jnp.int32)
jax.eval_shape(model.init, jax.random.key(0), x, x[:, :1] if {decode} else x)  # traced only
print(" ".join(sorted(m for m in sys.modules if m.startswith("transformer_jax"))))
"""


@pytest.mark.parametrize("decode", [False, True])
def test_the_papers_path_imports_no_registry_entry(decode):
    # The paper's model calls its own attention and sinusoids: a fresh process that builds
    # and runs the base model (for training, and primed for cached decoding) has imported
    # the registries' contracts but no kernel or position module (kernels/dense.py included).
    out = subprocess.run([sys.executable, "-c", PAPER_PATH.format(decode=decode)],
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert out.returncode == 0, out.stderr[-2000:]
    modules = out.stdout.split()
    assert "transformer_jax.model.transformer" in modules
    assert "transformer_jax.model.kernels" in modules
    assert [m for m in modules if m.startswith(("transformer_jax.model.kernels.",
                                                "transformer_jax.model.positions."))] == []
