"""The attention kernel registry: every registered kernel does what its traits claim (checked
against softmax attention written out in numpy), an unknown name is one line naming the known
ones, and a kernel added as one file in a directory of TRANSFORMER_JAX_KERNELS is found by
name, trains from the command line and gets the dense kernel's losses."""

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.helpers import ROOT, command_line, tiny_config
from transformer_jax import config as config_lib
from transformer_jax.config import resume
from transformer_jax.errors import ConfigError
from transformer_jax.io import workdirs
from transformer_jax.model import attention, kernels
from transformer_jax.model.kernels import performer
from transformer_jax.training import train

KERNELS = kernels.names()
# Two rows of 21 positions (no multiple of the blockwise kernel's 8-wide tiles), padding at
# the end: packed (2 and 3 sentences) and one sentence a row, for a kernel without segment ids.
PACKED = np.array([[1] * 6 + [2] * 9 + [0] * 6, [1] * 4 + [2] * 5 + [3] * 8 + [0] * 4])
PLAIN = np.array([[1] * 15 + [0] * 6, [1] * 17 + [0] * 4])
WINDOW = 3
GLOBAL = 2  # global positions a sentence, for kernels with the global_tokens trait
FEATURES = 64  # the performer kernel's random features


def first_positions(seg, count):
    """[b, n] booleans: the first ``count`` positions of every run of one non-zero id."""
    seg = np.asarray(seg)
    out = np.zeros(seg.shape, bool)
    for b, row in enumerate(seg):
        run = 0
        for i, s in enumerate(row):
            run = run + 1 if i and s == row[i - 1] else 1
            out[b, i] = s != 0 and run <= count
    return out


def allowed_keys(q_seg, kv_seg, causal=False, window=None, global_tokens=0):
    """[b, q, k]: a key of the query's own segment, not padding (0), not after it if causal,
    and with a window at most ``window`` away unless the query or the key is one of the
    first ``global_tokens`` of its sentence."""
    q_seg, kv_seg = np.asarray(q_seg), np.asarray(kv_seg)
    q_pos, k_pos = np.arange(q_seg.shape[1])[:, None], np.arange(kv_seg.shape[1])[None, :]
    allowed = (q_seg[:, :, None] == kv_seg[:, None, :]) & (kv_seg[:, None, :] != 0)
    if causal:
        allowed &= k_pos <= q_pos
    if window is not None:
        near = np.abs(q_pos - k_pos) <= window
        if global_tokens:
            near = near | first_positions(q_seg, global_tokens)[:, :, None] | \
                first_positions(kv_seg, global_tokens)[:, None, :]
        allowed &= near
    return allowed


def softmax_attention(q, k, v, q_seg, kv_seg, causal=False, window=None, global_tokens=0):
    """softmax(Q K^T / sqrt(d_k)) V over the keys each query may see (:func:`allowed_keys`),
    in float64 numpy. Query head i shares key/value head i // (h / h_kv). Returns outputs
    [b, h, q, d_v] and weights [b, h, q, k]; a query that sees no key gets NaN."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    groups = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, groups, axis=1), np.repeat(v, groups, axis=1)
    allowed = allowed_keys(q_seg, kv_seg, causal, window, global_tokens)
    logits = np.einsum("bhqd,bhkd->bhqk", q, k) / np.sqrt(q.shape[-1])
    logits = np.where(allowed[:, None], logits, -np.inf)
    with np.errstate(invalid="ignore"):
        weights = np.exp(logits - logits.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
    return np.einsum("bhqk,bhkd->bhqd", weights, v), weights


def elu_plus_one(x, is_query):
    """The linear transformer's feature map, elementwise."""
    return np.where(x > 0, x + 1.0, np.exp(np.minimum(x, 0)))


def favor(x, is_query):
    """Performer's positive random features of x [..., d] (scaled by d^-1/4), with the
    kernel's own draws of directions: exp(W x - |x|^2 / 2) / sqrt(m)."""
    x = np.asarray(x, np.float64) * x.shape[-1] ** -0.25
    w = performer.projection(FEATURES, x.shape[-1]).astype(np.float64)
    return np.exp(x @ w.T - 0.5 * (x * x).sum(-1, keepdims=True)) / np.sqrt(FEATURES)


def feature_attention(q, k, v, q_seg, kv_seg, causal, phi):
    """Linear attention written out in float64: weights phi(q_i) . phi(k_j) over the keys
    the query may see, each row divided by its sum."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    groups = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, groups, axis=1), np.repeat(v, groups, axis=1)
    scores = np.einsum("bhqm,bhkm->bhqk", phi(q, True), phi(k, False))
    scores = scores * allowed_keys(q_seg, kv_seg, causal)[:, None]
    with np.errstate(invalid="ignore"):
        weights = scores / scores.sum(-1, keepdims=True)
    return np.einsum("bhqk,bhkd->bhqd", weights, v), weights


# What each approximate kernel claims to compute instead of softmax attention over every key
# (those with a window: softmax over their window, and global positions where they have them).
FEATURE_MAPS = {"linear": elu_plus_one, "performer": favor}


def claimed(name, q, k, v, q_seg, kv_seg, causal):
    """(outputs, weights) of what kernel ``name`` claims to compute, worked out here."""
    traits = kernels.get(name).traits
    if traits.exact:
        return softmax_attention(q, k, v, q_seg, kv_seg, causal)
    if traits.window:
        return softmax_attention(q, k, v, q_seg, kv_seg, causal, WINDOW,
                                 GLOBAL if traits.global_tokens else 0)
    return feature_attention(q, k, v, q_seg, kv_seg, causal, FEATURE_MAPS[name])


def qkv(seed, d_v=6, length=21):
    """Random q [2, 4, n, 8], k [2, 2, n, 8], v [2, 2, n, d_v]: two query heads a key head."""
    rng = np.random.default_rng(seed)
    normal = lambda *shape: jnp.asarray(rng.normal(size=(2, *shape)), jnp.float32)  # noqa: E731
    return normal(4, length, 8), normal(2, length, 8), normal(2, length, d_v)


def setup(name, seed):
    """The kernel, its q, k, v (d_v = d_k if it needs them equal), the segment ids it can
    take, the window it needs (or None) and the real queries [b, q]."""
    kernel = kernels.get(name)
    segments = PACKED if kernel.traits.segment_ids else PLAIN
    q, k, v = qkv(seed, d_v=8 if kernel.traits.needs_equal_head_dims else 6)
    window = WINDOW if kernel.traits.window else None
    return kernel, (q, k, v), jnp.asarray(segments), window, segments > 0


def call(kernel, q, k, v, segments, **options):
    """``kernel.run`` with every keyword the registry passes (the kernels module docstring)."""
    defaults = dict(causal=False, q_offset=0, window=None, global_tokens=GLOBAL, block_size=8,
                    random_features=FEATURES, dropout_rate=0.0, dropout_rng=None,
                    dropout_impl="hash", return_weights=False)
    return kernel.run(q, k, v, segments, segments, **(defaults | options))


def rows(x, real):
    """[b, h, q, ...] -> the real queries' rows, [real queries, h, ...]."""
    return np.asarray(x).swapaxes(1, 2)[real]


# ----------------------------------------------------------------------------------------
# Every registered kernel against its traits


def test_the_registry_lists_the_kernel_modules_dense_first():
    assert KERNELS == ("dense", "blockwise", "cudnn", "linear", "local", "local_global",
                       "performer")
    for name in KERNELS:
        kernel = kernels.get(name)
        assert kernel.name == name and isinstance(kernel.traits, kernels.Traits)
    assert kernels.having("exact") == ("dense", "blockwise", "cudnn")
    assert kernels.having("returns_weights") == ("dense", "linear", "performer")
    assert kernels.having("supports_dropout") == ("dense",)
    assert kernels.having("window") == ("local", "local_global")
    assert kernels.having("global_tokens") == ("local_global",)
    assert kernels.having("recurrent") == ("linear", "performer")
    # local is local_global's module with no global positions, whatever the call asks.
    local, local_global = kernels.get("local"), kernels.get("local_global")
    assert local.module is local_global.module and local.options == {"global_tokens": 0}


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", KERNELS)
def test_exact_kernels_attend_to_every_allowed_key_and_the_others_compute_what_they_claim(
        name, causal):
    kernel, (q, k, v), segments, window, real = setup(name, 1)
    out, _ = call(kernel, q, k, v, segments, causal=causal, window=window)
    full, _ = softmax_attention(q, k, v, segments, segments, causal)
    if kernel.traits.exact:
        np.testing.assert_allclose(rows(out, real), rows(full, real), atol=1e-5)
    else:  # it claims to compute something else: a resumed run may not switch to it
        assert not np.allclose(rows(out, real), rows(full, real), atol=1e-3)
    expected, _ = claimed(name, q, k, v, segments, segments, causal)
    np.testing.assert_allclose(rows(out, real), rows(expected, real), atol=1e-5)


@pytest.mark.parametrize("name", KERNELS)
def test_kernels_with_weights_return_them_and_the_others_hand_over_to_dense(name):
    kernel, (q, k, v), segments, window, real = setup(name, 2)
    expected_out, expected = claimed(name, q, k, v, segments, segments, True)
    if kernel.traits.returns_weights:
        out, weights = call(kernel, q, k, v, segments, causal=True, window=window,
                            return_weights=True)
        weights = np.asarray(weights)
        assert weights.shape == (2, 4, 21, 21)
        np.testing.assert_allclose(rows(weights, real).sum(-1), 1.0, rtol=1e-6)
        np.testing.assert_allclose(rows(weights, real), rows(expected, real), atol=1e-6)
        assert np.all(rows(weights, real)[rows(expected, real) == 0] == 0)
    else:
        assert call(kernel, q, k, v, segments, causal=True, window=window,
                    return_weights=True)[1] is None
        out, weights = attention.attend(name, q, k, v, segments, segments, causal=True,
                                        window=window, global_tokens=GLOBAL, block_size=8,
                                        return_weights=True)
        np.testing.assert_allclose(rows(weights, real), rows(expected, real), atol=1e-6)
    np.testing.assert_allclose(rows(out, real), rows(expected_out, real), atol=1e-5)


@pytest.mark.parametrize("name", KERNELS)
def test_kernels_with_dropout_drop_weights_and_the_others_refuse_it(name):
    # One query, uniform weights over 1000 keys whose values are all 1: the output is 1;
    # dropping half the weights and doubling the rest keeps it near 1, never exactly.
    kernel = kernels.get(name)
    q, k, v = jnp.zeros((1, 1, 1, 4)), jnp.ones((1, 1, 1000, 4)), jnp.ones((1, 1, 1000, 4))
    q_seg, kv_seg = jnp.ones((1, 1), jnp.int32), jnp.ones((1, 1000), jnp.int32)
    window = 1000 if kernel.traits.window else None
    drop = dict(dropout_rate=0.5, dropout_rng=jax.random.key(0))
    if kernel.traits.supports_dropout:
        out, _ = attention.attend(name, q, k, v, q_seg, kv_seg, window=window, **drop)
        assert 0.9 < float(out[0, 0, 0, 0]) < 1.1 and float(out[0, 0, 0, 0]) != 1.0
    else:
        with pytest.raises(ValueError, match=f"the {name!r} kernel has none"):
            attention.attend(name, q, k, v, q_seg, kv_seg, window=window, **drop)
        c = config_lib.build("base")
        c.model.update(attention=name, attention_dropout_rate=0.1)
        with pytest.raises(ConfigError, match="model.attention_dropout_rate=0.1 needs"):
            config_lib.validate(c)


@pytest.mark.parametrize("name", KERNELS)
def test_kernels_that_need_equal_head_widths_refuse_others(name):
    kernel = kernels.get(name)
    q, k, v = qkv(3, d_v=6)  # d_k = 8
    c = config_lib.build("base")
    c.model.update(attention=name, d_v=32)  # d_k = 64
    if kernel.traits.needs_equal_head_dims:
        with pytest.raises(ValueError, match="d_k == d_v"):
            call(kernel, q, k, v, jnp.asarray(PACKED), window=WINDOW)
        with pytest.raises(ConfigError, match=f"model.attention={name!r} needs d_k == d_v"):
            config_lib.validate(c)
    else:
        out, _ = call(kernel, q, k, v, jnp.asarray(PACKED), window=WINDOW)
        assert out.shape == (2, 4, 21, 6)
        config_lib.validate(c)


@pytest.mark.parametrize("name", KERNELS)
def test_kernels_with_segment_ids_keep_packed_sentences_apart(name):
    kernel, (q, k, v), _, window, _ = setup(name, 4)
    segments = jnp.asarray(PACKED)
    # Other keys and values for row 0's first sentence (positions 0..5): its second sentence
    # (6..14) must not see the change.
    first = (jnp.arange(21) < 6)[None, None, :, None] & (jnp.arange(2) == 0)[:, None, None, None]
    k2, v2 = (jnp.where(first, x + 5.0, x) for x in (k, v))
    out, _ = call(kernel, q, k, v, segments, window=window)
    changed, _ = call(kernel, q, k2, v2, segments, window=window)
    c = config_lib.build("base")
    c.model.attention = name
    assert c.data.packing
    if kernel.traits.segment_ids:
        np.testing.assert_allclose(changed[0, :, 6:15], out[0, :, 6:15], atol=1e-6)
        config_lib.validate(c)
    else:
        with pytest.raises(ConfigError, match="data.packing=True needs a kernel"):
            config_lib.validate(c)


@pytest.mark.parametrize("name", KERNELS)
def test_windowed_kernels_hand_calls_without_a_window_over_and_the_others_ignore_it(name):
    kernel = kernels.get(name)
    q, k, v = qkv(5, d_v=8)
    segments = jnp.asarray(PACKED)
    without, _ = attention.attend(name, q, k, v, segments, segments, block_size=8)
    if kernel.traits.window:
        other = kernels.get(kernel.traits.without_window)
        assert not other.traits.window
        np.testing.assert_allclose(without, call(other, q, k, v, segments)[0], atol=1e-6)
    else:  # the model passes model.local_window to every kernel's self-attention
        with_window, _ = attention.attend(name, q, k, v, segments, segments, window=WINDOW,
                                          block_size=8)
        np.testing.assert_array_equal(with_window, without)


@pytest.mark.parametrize("name", KERNELS)
def test_unavailable_is_none_or_one_line(name):
    why = kernels.get(name).unavailable()
    assert why is None or (isinstance(why, str) and why and "\n" not in why)


# ----------------------------------------------------------------------------------------
# Unknown names


def test_an_unknown_kernel_is_one_line_naming_the_known_ones():
    message = ("model.attention='flash' is not one of dense, blockwise, cudnn, linear, local, "
               "local_global, performer")
    with pytest.raises(ConfigError) as raised:
        kernels.get("flash")
    assert str(raised.value) == message
    q, k, v = qkv(6)
    with pytest.raises(ConfigError, match=f"^{message}$"):
        attention.attend("flash", q, k, v, jnp.asarray(PACKED), jnp.asarray(PACKED))


# ----------------------------------------------------------------------------------------
# A kernel added as one file

# Softmax attention in plain jnp, in float32: the paper's function, by another road.
TOY = '''
import jax
import jax.numpy as jnp

from transformer_jax.model.kernels import Traits
from transformer_jax.model.masks import make_mask

TRAITS = Traits(exact=True, returns_weights=False, supports_dropout=False, segment_ids=True)


def run(q, k, v, q_segment_ids, kv_segment_ids, *, causal=False, q_offset=0, **_):
    groups = q.shape[1] // k.shape[1]
    k, v = (jnp.repeat(x, groups, axis=1).astype(jnp.float32) for x in (k, v))
    logits = jnp.einsum("bhqd,bhkd->bhqk", q.astype(jnp.float32), k) / jnp.sqrt(q.shape[-1])
    mask = make_mask(q_segment_ids, kv_segment_ids, causal=causal, q_offset=q_offset)
    weights = jax.nn.softmax(jnp.where(mask, logits, -1e9), axis=-1)
    return jnp.einsum("bhqk,bhkd->bhqd", weights, v).astype(q.dtype), None
'''


def write_kernels(directory):
    """``toy`` (exact), ``toy_padding`` (the same traits but no segment ids) and a helper
    module, which is no kernel: one file each."""
    directory.mkdir(exist_ok=True)
    (directory / "toy.py").write_text(TOY)
    (directory / "toy_padding.py").write_text(TOY.replace("segment_ids=True", "segment_ids=False"))
    (directory / "_helper.py").write_text("")
    return directory


@pytest.fixture
def added_kernels(tmp_path, monkeypatch):
    """The directory of write_kernels searched by the registry in this process, as
    TRANSFORMER_JAX_KERNELS makes it searched in a new one."""
    directory = write_kernels(tmp_path / "kernels")
    monkeypatch.setattr(kernels, "__path__", [*kernels.__path__, str(directory)])
    yield directory
    for name in ("toy", "toy_padding", "no_traits", "typo"):
        sys.modules.pop(f"{kernels.__name__}.{name}", None)
        if hasattr(kernels, name):
            delattr(kernels, name)


def test_a_kernel_file_in_a_searched_directory_is_found_by_name(added_kernels, monkeypatch):
    assert kernels.names() == ("dense", "blockwise", "cudnn", "linear", "local", "local_global",
                               "performer", "toy", "toy_padding")
    assert "toy" in kernels.having("exact")
    q, k, v = qkv(7)
    segments = jnp.asarray(PACKED)
    out, weights = attention.attend("toy", q, k, v, segments, segments, causal=True)
    expected, _ = softmax_attention(q, k, v, PACKED, PACKED, True)
    np.testing.assert_allclose(rows(out, PACKED > 0), rows(expected, PACKED > 0), atol=1e-5)
    assert weights is None
    # Its traits are read: weights come from the dense kernel, a run may resume with it.
    assert attention.attend("toy", q, k, v, segments, segments, return_weights=True)[1] \
        is not None
    assert resume.resume_conflicts({"model": {"attention": "dense"}},
                                   {"model": {"attention": "toy"}}) == []
    assert resume.resume_conflicts({"model": {"attention": "local"}},
                                   {"model": {"attention": "toy"}}) == [
        "model.attention: 'local' in the workdir, 'toy' asked"]
    # A module without traits is refused by name, in one line.
    broken = added_kernels.parent / "broken"
    broken.mkdir()
    (broken / "no_traits.py").write_text("def run(*args, **kwargs):\n    pass\n")
    monkeypatch.setattr(kernels, "__path__", [*kernels.__path__, str(broken)])
    with pytest.raises(ConfigError, match=r"^model.attention='no_traits': .*no_traits.py must "
                       "define TRAITS"):
        kernels.get("no_traits")
    # A file that does not import is refused in one line naming the file and the error.
    typo = added_kernels.parent / "typo"
    typo.mkdir()
    (typo / "typo.py").write_text("TRAITS = Traits(\n")
    monkeypatch.setattr(kernels, "__path__", [*kernels.__path__, str(typo)])
    with pytest.raises(ConfigError, match=r"^model.attention='typo': .*typo.py cannot be "
                       r"imported: SyntaxError: [^\n]*$"):
        kernels.get("typo")


def logged_losses(workdir):
    return [(r["step"], r["loss"]) for r in workdirs.read_metric_records(workdir)
            if r["split"] == "train"]


@pytest.mark.slow
def test_a_kernel_file_trains_from_the_command_line_with_the_dense_kernels_losses(
        tmp_path, builtin_data_dir):
    directory = write_kernels(tmp_path / "kernels")
    env = {**os.environ, kernels.REGISTRY.variable: str(directory)}
    # Three steps; rows of a fixed length (none measured), the trained parameters evaluated
    # (none averaged), a given CPU peak (none probed).
    config = tiny_config(builtin_data_dir, num_steps=3, log_every=1, eval_every=3,
                         eval_batches=1, checkpoint_every=3, average_checkpoints=1,
                         peak_flops=1e9)
    config.data.row_len = 32
    config.model.attention = "toy"
    toy = subprocess.run([sys.executable, "-m", "transformer_jax.main", *command_line(config),
                          f"--workdir={tmp_path / 'toy'}"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert toy.returncode == 0, toy.stderr[-3000:]
    config.model.attention = "dense"
    train.train_and_evaluate(config, tmp_path / "dense")
    losses, expected = logged_losses(tmp_path / "toy"), logged_losses(tmp_path / "dense")
    assert [step for step, _ in losses] == [step for step, _ in expected] == [1, 2, 3]
    np.testing.assert_allclose([loss for _, loss in losses], [loss for _, loss in expected],
                               rtol=1e-5)


def test_a_kernel_files_traits_reach_the_config_on_the_command_line(tmp_path, builtin_data_dir):
    # No segment ids, so no packed rows: refused in one line before anything starts.
    env = {**os.environ, kernels.REGISTRY.variable: str(write_kernels(tmp_path / "kernels"))}
    config = tiny_config(builtin_data_dir)
    config.model.attention = "toy_padding"
    refused = subprocess.run([sys.executable, "-m", "transformer_jax.params",
                              *command_line(config)], cwd=ROOT, env=env, capture_output=True,
                             text=True, timeout=120)
    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        "error: data.packing=True needs a kernel that keeps packed sentences apart; "
        "model.attention='toy_padding' does not (set data.packing=False)")
