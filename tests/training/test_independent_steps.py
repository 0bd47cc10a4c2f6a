"""The first train steps of the demo-scale base and big models against an independent
computation: a numpy forward pass written from the paper, its loss differentiated by central
differences, and Adam with the paper's schedule written out in numpy.

For each model (configs/table3.py's ``base`` and ``big`` at the demo scale: 3 layers, d_model
128 / 256, d_ff 512 / 1,024, 8 / 16 heads, vocabulary 1,000) and each of three steps:

* the loss the train step reports equals the label-smoothed cross-entropy per target token
  of the numpy pass on the same parameters (float64);
* the gradient the model gives, dotted with random directions, equals the numpy loss's
  central difference along them;
* the parameters after the step are those of Adam (beta1 0.9, beta2 0.98, eps 1e-9) at the
  learning rate d_model^-0.5 * min(t^-0.5, t * 300^-1.5) for step t = 1, 2, 3, computed here
  from that gradient.

Dropout is off (P_drop is checked apart: the train step's masks are not reproducible outside
the code; tests/model/test_dropout.py checks their rate and scaling, and the last test here
big's 0.3 of the paper at the demo's shapes; the demo scale trains big with 0.1). The numpy
pass reads the parameter tree as the model lays it out (model/transformer.py's Projection: per
head, its query, key and value columns side by side) and does everything else itself:
sqrt(d_model) embeddings, the paper's sinusoids (sin on even channels, cos on odd), masked
softmax(QK^T / sqrt(d_k))V, post-LN Add & Norm, ReLU feed-forward, the shared output matrix.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_jax import config as config_lib
from transformer_jax.model.dropout import keep_mask
from transformer_jax.model.spec import TransformerConfig
from transformer_jax.model.transformer import Transformer
from transformer_jax.training import schedules
from transformer_jax.training.step import create_train_state, train_step

VOCAB = 1000
EPS_LN = 1e-6  # the model's LayerNorm epsilon (the paper gives none)
SMOOTHING = 0.1
LENGTHS = [(9, 11), (12, 7), (5, 12), (12, 12)]  # (source, target) tokens of the 4 rows
ROW = 12


def demo_model(variant):
    c = config_lib.build(variant, "builtin", "demo")
    c.model.dropout_rate = 0.0
    return c, TransformerConfig.from_config(c.model, VOCAB)


def batch():
    rng = np.random.default_rng(7)
    out = {k: np.zeros((len(LENGTHS), ROW), np.int32) for k in (
        "inputs", "targets", "inputs_segment_ids", "targets_segment_ids", "inputs_positions",
        "targets_positions")}
    for i, (s, t) in enumerate(LENGTHS):
        for side, n in (("inputs", s), ("targets", t)):
            out[side][i, :n] = rng.integers(1, VOCAB, n)
            out[f"{side}_segment_ids"][i, :n] = 1
            out[f"{side}_positions"][i, :n] = np.arange(n)
    return out


# ----------------------------------------------------------------------------------------
# The paper's model in numpy, float64


def sinusoids(n, d):
    pos, i = np.arange(n)[:, None], np.arange(d)[None, :]
    angle = pos / 10000.0 ** (2 * (i // 2) / d)
    return np.where(i % 2 == 0, np.sin(angle), np.cos(angle))


def layer_norm(x, p):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + EPS_LN) * p["scale"] + p["bias"]


def dense(x, p):
    return x @ p["kernel"] + p["bias"]


def attention(p, x, memory, allowed, mc, cross):
    """Multi-head attention of queries from x [b, t, d] over memory [b, s, d]."""
    h, d_k, d_v = mc.num_heads, mc.d_k, mc.d_v
    if cross:
        q = np.einsum("btd,dhk->bhtk", x, p["query"]["kernel"]) + p["query"]["bias"][:, None]
        kv = np.einsum("bsd,dhk->bhsk", memory, p["key_value"]["kernel"])
        k, v = kv[..., :d_k], kv[..., d_k:] + p["key_value"]["bias"][:, None]
    else:
        qkv = np.einsum("btd,dhk->bhtk", x, p["qkv"]["kernel"])
        bias = p["qkv"]["bias"]  # the query's and the value's: the key has none
        q = qkv[..., :d_k] + bias[:, None, :d_k]
        k = qkv[..., d_k:2 * d_k]
        v = qkv[..., 2 * d_k:] + bias[:, None, d_k:]
    scores = np.einsum("bhtk,bhsk->bhts", q, k) / np.sqrt(d_k)
    scores = np.where(allowed[:, None], scores, -1e30)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    heads = np.einsum("bhts,bhsv->bthv", weights, v).reshape(*x.shape[:2], h * d_v)
    return dense(heads, p["out"])


def add_norm(x, y, p):
    return layer_norm(x + y, p["norm"])


def ffn(x, p):
    return dense(np.maximum(dense(x, p["w1"]), 0.0), p["w2"])


def numpy_loss(params, b, mc):
    """Label-smoothed cross-entropy per target token of the paper's model."""
    params = jax.tree.map(lambda a: np.asarray(a, np.float64), params)
    table = params["shared_embedding"]["embedding"]
    d = mc.d_model
    src, tgt = b["inputs"], b["targets"]
    s_seg, t_seg = b["inputs_segment_ids"], b["targets_segment_ids"]
    pe = sinusoids(ROW, d)
    x = table[src] * np.sqrt(d) + pe
    enc_allowed = (s_seg[:, :, None] == s_seg[:, None, :]) & (s_seg[:, None, :] > 0)
    for i in range(mc.num_layers):
        p = params["encoder"][f"layer_{i}"]
        x = add_norm(x, attention(p["self_attention"], x, x, enc_allowed, mc, False),
                     p["self_attention_add_norm"])
        x = add_norm(x, ffn(x, p["ffn"]), p["ffn_add_norm"])
    shifted = np.pad(tgt, ((0, 0), (1, 0)))[:, :-1]  # teacher forcing: 0 starts each row
    y = table[shifted] * np.sqrt(d) + pe
    causal = np.tril(np.ones((ROW, ROW), bool))[None]
    dec_allowed = causal & (t_seg[:, :, None] == t_seg[:, None, :]) & (t_seg[:, None, :] > 0)
    cross_allowed = (t_seg[:, :, None] == s_seg[:, None, :]) & (s_seg[:, None, :] > 0)
    for i in range(mc.num_layers):
        p = params["decoder"][f"layer_{i}"]
        y = add_norm(y, attention(p["self_attention"], y, y, dec_allowed, mc, False),
                     p["self_attention_add_norm"])
        y = add_norm(y, attention(p["cross_attention"], y, x, cross_allowed, mc, True),
                     p["cross_attention_add_norm"])
        y = add_norm(y, ffn(y, p["ffn"]), p["ffn_add_norm"])
    z = y @ table.T + params["logits_bias"]
    lse = np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1)) + z.max(-1)
    nll = lse - np.take_along_axis(z, tgt[..., None], -1)[..., 0]
    smooth = lse - z.mean(-1)
    loss = (1 - SMOOTHING) * nll + SMOOTHING * smooth
    weights = t_seg > 0
    return float((loss * weights).sum() / weights.sum())


def paper_rate(d_model, step, warmup=300):
    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


def adam(m, v, g, t, lr):
    """One Adam step of one array from float64 moments: (m, v, update, settled). ``settled``
    is False where the update turns on the gradient's last float32 digits: where sqrt(v-hat)
    is within a few hundred times Adam's eps (1e-9), g / (|g| + eps) does, and two
    computations that sum the gradient in other orders differ there (a gradient of exactly
    0, a ReLU unit that never opened, moves neither and is settled)."""
    m = 0.9 * m + 0.1 * g
    v = 0.98 * v + 0.02 * g * g
    m_hat, root = m / (1 - 0.9 ** t), np.sqrt(v / (1 - 0.98 ** t))
    return m, v, -lr * m_hat / (root + 1e-9), (root > 1e-6) | (root == 0)


def slope_along(params, b, mc, rng, h=1e-4):
    """A random unit direction of parameter space and the numpy loss's central difference
    along it."""
    direction = [rng.standard_normal(a.shape) for a in jax.tree.leaves(params)]
    norm = np.sqrt(sum(np.sum(u ** 2) for u in direction))
    direction = [u / norm for u in direction]
    tree = jax.tree.structure(params)
    shifted = [jax.tree.unflatten(tree, [p + sign * h * u for p, u in
                                         zip(jax.tree.leaves(params), direction, strict=True)])
               for sign in (1, -1)]
    return direction, (numpy_loss(shifted[0], b, mc) - numpy_loss(shifted[1], b, mc)) / (2 * h)


# ----------------------------------------------------------------------------------------


# big in the slow tests: 23 s of one core in make test (2026-12-07), base's 21 s there.
@pytest.mark.parametrize("variant", ["base", pytest.param("big", marks=pytest.mark.slow)])
def test_three_train_steps_match_the_numpy_computation(variant):
    c, mc = demo_model(variant)
    assert c.optim.warmup_steps == 300 and c.train.label_smoothing == SMOOTHING
    state = create_train_state(c, mc, jax.random.key(0))
    model = Transformer(mc)
    b = batch()
    step = jax.jit(functools.partial(
        train_step, model=model, label_smoothing=SMOOTHING,
        schedule=schedules.schedule_of(c, mc.d_model), grad_accum_steps=1))
    weights = jnp.asarray(b["targets_segment_ids"] > 0, jnp.float32)

    def our_loss(params):
        logits = model.apply({"params": params}, **{k: jnp.asarray(v) for k, v in b.items()})
        lse = jax.nn.logsumexp(logits, -1)
        nll = lse - jnp.take_along_axis(logits, jnp.asarray(b["targets"])[..., None], -1)[..., 0]
        loss = (1 - SMOOTHING) * nll + SMOOTHING * (lse - logits.mean(-1))
        return jnp.sum(loss * weights) / jnp.sum(weights)

    rng = np.random.default_rng(0)
    size = sum(a.size for a in jax.tree.leaves(state.params))
    moments = [(np.zeros(a.shape), np.zeros(a.shape)) for a in jax.tree.leaves(state.params)]
    for t in (1, 2, 3):
        params = jax.tree.map(np.asarray, state.params)
        expected_loss = numpy_loss(params, b, mc)
        grads = [np.asarray(g, np.float64) for g in jax.tree.leaves(
            jax.grad(our_loss)(state.params))]
        for _ in range(2):  # the gradient along random directions against the numpy slope
            direction, slope = slope_along(params, b, mc, rng)
            ours = sum(np.sum(g * u) for g, u in zip(grads, direction, strict=True))
            assert abs(ours - slope) < 2e-3 * max(abs(slope), 1e-2), (variant, t, ours, slope)
        lr = paper_rate(mc.d_model, t)
        adam_steps = [adam(m, v, g, t, lr) for (m, v), g in zip(moments, grads, strict=True)]
        moments = [(m, v) for m, v, _, _ in adam_steps]

        state, metrics = step(state, {k: jnp.asarray(x) for k, x in b.items()},
                              jax.random.key(1))
        got_loss = float(metrics["loss_sum"] / metrics["tokens"])
        assert abs(got_loss - expected_loss) < 2e-5 * expected_loss, (variant, t)
        assert float(metrics["learning_rate"]) == pytest.approx(lr, rel=1e-6)
        unsettled = 0
        for new, old, (_, _, update, settled) in zip(
                jax.tree.leaves(state.params), jax.tree.leaves(params), adam_steps, strict=True):
            moved = np.asarray(new, np.float64) - old
            # A float32 parameter moved by lr ~ 1e-5 is rounded to its own spacing (1.2e-7
            # at 1.0): allowed, that spacing and 0.2% of the learning rate.
            off = np.abs(moved - update) - np.spacing(np.abs(old).astype(np.float32))
            assert np.all(off[settled] < 2e-3 * lr), (variant, t, off[settled].max(), lr)
            assert np.all(np.abs(moved) < 1.01 * np.abs(update).max() + 1e-12)
            unsettled += np.sum(~settled)
        assert unsettled < 0.01 * size, unsettled / size


def test_big_drops_three_tenths_of_its_activations_and_scales_the_rest():
    _, mc = demo_model("big")
    assert config_lib.build("big").model.dropout_rate == 0.3  # the paper's, on EN-DE
    keep = np.asarray(keep_mask(jax.random.key(3), (2048, mc.d_model), 0.3))
    # 524,288 draws: the kept fraction's standard deviation is 0.0006.
    assert abs(keep.mean() - 0.7) < 0.003
    from transformer_jax.model.dropout import dropout

    x = jnp.ones((2048, mc.d_model))
    y = np.asarray(dropout(x, 0.3, jax.random.key(3)))
    np.testing.assert_allclose(y[keep], 1 / 0.7, rtol=1e-6)
    assert np.all(y[~keep] == 0)
