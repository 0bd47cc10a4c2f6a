"""Linear attention (the linear and performer kernels): the kernels against their formula
written out in numpy, Performer's random features approaching softmax attention within a
stated bound that falls as the features grow, causal attention and cached decoding from a
recurrent state agreeing, a decoded token costing the same at any length, and the model
decoding with every new kernel and position scheme as it computes with teacher forcing."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.model.test_attention import REAL, SEGMENTS, qkv, value_and_grads
from tests.model.test_kernels import elu_plus_one, favor, feature_attention
from transformer_jax.config import resume
from transformer_jax.decoding import decode, loops
from transformer_jax.model import kernels
from transformer_jax.model.kernels import _linear, linear, performer
from transformer_jax.model.spec import TransformerConfig
from transformer_jax.model.transformer import Transformer, shift_right

FEATURES = 64  # tests/model/test_kernels.py's favor() draws this many


def run(name, q, k, v, seg, causal):
    options = {"random_features": FEATURES} if name == "performer" else {}
    return kernels.get(name).run(q, k, v, seg, seg, causal=causal, **options)[0]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name,phi", [("linear", elu_plus_one), ("performer", favor)])
def test_the_kernel_is_its_formula_written_out(name, phi, causal):
    q, k, v = qkv(21)
    out = run(name, q, k, v, SEGMENTS, causal)
    expected, _ = feature_attention(q, k, v, SEGMENTS, SEGMENTS, causal, phi)
    rows = lambda x: np.asarray(x).swapaxes(1, 2)[REAL]  # noqa: E731
    np.testing.assert_allclose(rows(out), rows(expected), atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("chunk", [4, 7, 64])
def test_the_chunked_scan_and_the_written_out_weights_agree_in_value_and_gradient(causal,
                                                                                  chunk):
    q, k, v = qkv(22)
    weights = jax.random.normal(jax.random.key(3), (2, 4, 37, 6)) * REAL[:, None, :, None]
    phi = performer.feature_map(FEATURES)
    scanned = lambda q, k, v: _linear.attention(  # noqa: E731
        q, k, v, SEGMENTS, SEGMENTS, phi, causal=causal, chunk=chunk)[0]
    explicit = lambda q, k, v: _linear.explicit(  # noqa: E731
        q, k, v, SEGMENTS, SEGMENTS, phi, causal=causal)[0]
    (out_a, grads_a), (out_b, grads_b) = (value_and_grads(f, q, k, v, weights)
                                          for f in (scanned, explicit))
    np.testing.assert_allclose(np.asarray(out_a).swapaxes(1, 2)[REAL],
                               np.asarray(out_b).swapaxes(1, 2)[REAL], atol=1e-5)
    for a, b in zip(grads_a, grads_b, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-4)


def softmax(q, k, v):
    logits = np.einsum("bhqd,bhkd->bhqk", q, k) / np.sqrt(q.shape[-1])
    w = np.exp(logits - logits.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    return w @ v, w


def test_performer_approaches_softmax_attention_within_the_stated_bound():
    # The bound: each random-feature estimate of exp(q'.k') (q' = q / d^1/4) has a relative
    # standard deviation of at most sqrt(B_ij / m), B_ij = exp(|q'_i + k'_j|^2) - 1 (Lemma 2 of
    # the Performer paper, independent features; orthogonal ones do no worse). To first
    # order an output then moves by sum_j w_ij e_ij (v_j - out_i), whose standard deviation
    # is at most sum_j w_ij sqrt(B_ij / m) |v_j - out_i|: a bound falling as 1 / sqrt(m).
    rng = np.random.default_rng(1)
    d = 16
    q, k = rng.normal(size=(4, 2, 16, d)) * 0.5, rng.normal(size=(4, 2, 64, d)) * 0.5
    v = rng.normal(size=(4, 2, 64, 8))
    exact, w = softmax(q, k, v)
    qs, ks = q / d ** 0.25, k / d ** 0.25
    b = np.exp(((qs[:, :, :, None] + ks[:, :, None]) ** 2).sum(-1)) - 1  # [b, h, q, k]
    spread = np.abs(v[:, :, None] - exact[:, :, :, None])  # [b, h, q, k, d_v]
    seg_q, seg_k = np.ones((4, 16), np.int32), np.ones((4, 64), np.int32)
    errors = {}
    for m in (16, 256, 4096):
        out, _ = performer.run(*(jnp.asarray(x, jnp.float32) for x in (q, k, v)), seg_q, seg_k,
                               random_features=m)
        errors[m] = np.sqrt(np.mean((np.asarray(out) - exact) ** 2))
        bound = np.sqrt(np.mean(np.einsum("bhqk,bhqkc->bhqc", w * np.sqrt(b / m), spread) ** 2))
        assert errors[m] <= bound, (m, errors[m], bound)
    # 256 times the features: 16 times less error in theory; at least 8 times here.
    assert errors[4096] < errors[256] < errors[16] and errors[4096] * 8 < errors[16]


@pytest.mark.parametrize("name", ["linear", "performer"])
def test_causal_attention_and_cached_decoding_from_the_state_agree(name):
    q, k, v = qkv(23, q_len=30, kv_len=30)
    ones = jnp.ones((2, 30), jnp.int32)
    full = run(name, q, k, v, ones, causal=True)
    module = kernels.get(name).module
    options = {"random_features": FEATURES}
    state = module.init_state(k[:, :, :1], v[:, :, :1], **options)
    step = jax.jit(lambda state, q, k, v: module.step(state, q, k, v, **options))
    outs = []
    for t in range(30):
        out, state = step(state, q[:, :, t:t + 1], k[:, :, t:t + 1], v[:, :, t:t + 1])
        outs.append(out)
    np.testing.assert_allclose(jnp.concatenate(outs, axis=2), full, atol=1e-5)
    # The state: one [m, d_v + 1] sum per key/value head, whatever the length.
    m = 8 if name == "linear" else FEATURES
    assert jax.tree.map(jnp.shape, state) == {"sums": (2, 2, m, 7)}


TINY = TransformerConfig(vocab_size=50, num_layers=1, d_model=32, d_ff=64, num_heads=4, d_k=8,
                         d_v=8, dropout_rate=0.0, max_len=64, deterministic=True,
                         num_kv_heads=2, local_window=2, global_tokens=2, random_features=32)


def init(config):
    src = jnp.ones((2, 7), jnp.int32)
    return jax.jit(Transformer(config).init)(jax.random.key(0), src, src)["params"]


def step_flops(config, max_len):
    """FLOPs XLA counts for one cached decoding step with a cache of ``max_len``."""
    params = init(config)
    src = jnp.ones((2, 7), jnp.int32)
    encoded, segments = decode.encode(params, config, src)
    cache = decode.init_cache(params, config, encoded, segments, max_len=max_len)
    ids = jnp.ones((2,), jnp.int32)
    compiled = jax.jit(lambda c: decode.decode_step(params, config, c, encoded, segments, ids)
                       ).lower(cache).compile()
    cost = compiled.cost_analysis()
    return (cost[0] if isinstance(cost, list | tuple) else cost)["flops"]


@pytest.mark.slow
def test_a_decoded_token_costs_the_same_at_any_length_with_a_recurrent_kernel():
    linear_costs = [step_flops(TINY.replace(attention="linear"), n) for n in (16, 512)]
    dense_costs = [step_flops(TINY.replace(attention="dense"), n) for n in (16, 512)]
    assert linear_costs[0] == linear_costs[1]
    assert dense_costs[1] > 2 * dense_costs[0]  # the key/value cache is read whole


@pytest.mark.parametrize("attention,positions", [
    ("local_global", "sinusoidal"), ("local_global", "rotary"), ("linear", "learned"),
    ("linear", "rotary"), ("performer", "sinusoidal"), ("dense", "rotary")])
@pytest.mark.slow
def test_cached_decoding_gives_the_logits_of_full_recomputation(attention, positions):
    config = TINY.replace(attention=attention, positions=positions)
    params = init(config)
    rng = np.random.default_rng(5)
    src = jnp.asarray(rng.integers(3, 50, (2, 7)), jnp.int32).at[1, 4:].set(0)
    tgt = jnp.asarray(rng.integers(3, 50, (2, 9)), jnp.int32)
    full = jax.jit(Transformer(config).apply)({"params": params}, src, tgt)
    encoded, segments = decode.encode(params, config, src)
    cache = decode.init_cache(params, config, encoded, segments, max_len=12)
    step = jax.jit(lambda c, ids: decode.decode_step(params, config, c, encoded, segments, ids))
    inputs = shift_right(tgt)
    for t in range(9):
        logits, cache = step(cache, inputs[:, t])
        np.testing.assert_allclose(logits, full[:, t], atol=1e-5, rtol=0)
    layer = cache["decoder"]["layer_0"]["self_attention"]
    recurrent = kernels.get(attention).traits.recurrent
    assert ("kernel_state" in layer) == recurrent and ("cached_key" in layer) != recurrent


def test_a_run_may_not_switch_to_or_from_an_approximate_kernel_when_it_resumes():
    def conflicts(old, new):
        return resume.resume_conflicts({"model": {"attention": old}},
                                       {"model": {"attention": new}})

    assert conflicts("dense", "blockwise") == []
    for old, new in (("dense", "linear"), ("linear", "dense"), ("linear", "performer"),
                     ("local_global", "local"), ("blockwise", "local_global")):
        assert conflicts(old, new) == [f"model.attention: {old!r} in the workdir, {new!r} asked"]
    assert resume.resume_conflicts({"model": {"random_features": 256}},
                                   {"model": {"random_features": 128}}) != []
    assert linear.TRAITS.exact is False and performer.TRAITS.exact is False


@pytest.mark.parametrize("attention", ["linear", "local_global"])
@pytest.mark.slow
def test_beam_search_reorders_the_recurrent_state_and_the_sparse_cache_with_its_beams(
        attention):
    # The score of each returned hypothesis is log P(hypothesis) / lp(length) under the
    # model recomputed whole: the state (or cache) followed its beam at every step.
    config = TINY.replace(attention=attention)
    params = init(config)
    params = {**params, "logits_bias": params["logits_bias"].at[1].set(2.5)}  # EOS likely
    src = jnp.asarray(np.random.default_rng(6).integers(3, 50, (2, 7)), jnp.int32)
    k, alpha = 3, 0.6
    encoded, segments = decode.encode(params, config, src)
    step, cache = decode.cached_step(params, config, jnp.repeat(encoded, k, 0),
                                     jnp.repeat(segments, k, 0), 12)
    seqs, scores = jax.jit(lambda c: loops.beam_search(
        step, c, beam_size=k, alpha=alpha, max_lengths=jnp.array([12, 9], jnp.int32),
        max_len=12))(cache)
    seqs, scores = np.asarray(seqs).reshape(2 * k, 12), np.asarray(scores).reshape(2 * k)
    logits = Transformer(config).apply({"params": params}, jnp.repeat(src, k, 0),
                                       jnp.asarray(seqs))
    log_probs = np.asarray(jax.nn.log_softmax(logits.at[..., 0].set(-jnp.inf)))
    for i in range(2 * k):
        hyp = list(seqs[i])
        hyp = hyp[:hyp.index(1) + 1] if 1 in hyp else [t for t in hyp if t]
        total = sum(log_probs[i, t, token] for t, token in enumerate(hyp))
        assert scores[i] == pytest.approx(total / loops.length_penalty(len(hyp), alpha),
                                          abs=1e-4), (i, hyp)
