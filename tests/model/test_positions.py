"""Position schemes as a registry: each one module with its traits, found by name (a scheme
added as one file too); rotary positions against the rotation written out, relative by
construction, in every self-attention layer and nowhere else; position interpolation as a
scale set when translating; and the config refusing what a scheme cannot do, in one line."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given, settings, strategies as st

from transformer_jax import config as config_lib
from transformer_jax.decoding import decode
from transformer_jax.errors import ConfigError
from transformer_jax.evaluation import translation
from transformer_jax.model import positions
from transformer_jax.model.positions import rotary, sinusoidal
from transformer_jax.model.spec import TransformerConfig
from transformer_jax.model.transformer import Transformer, shift_right

TINY = TransformerConfig(vocab_size=50, num_layers=1, d_model=32, d_ff=64, num_heads=4, d_k=8,
                         d_v=8, dropout_rate=0.0, max_len=64, deterministic=True)


def tokens(shape, seed):
    return jnp.asarray(np.random.default_rng(seed).integers(3, 50, shape), jnp.int32)


def init(config, src_len=7, tgt_len=6):
    src, tgt = jnp.ones((2, src_len), jnp.int32), jnp.ones((2, tgt_len), jnp.int32)
    return jax.jit(Transformer(config).init)(jax.random.key(0), src, tgt)["params"]


# ----------------------------------------------------------------------------------------
# The registry


def test_the_schemes_are_modules_with_traits():
    assert positions.names() == ("sinusoidal", "learned", "rotary")
    assert positions.having("added") == ("sinusoidal", "learned")
    assert positions.having("learned") == ("learned",)
    assert positions.having("rotates") == ("rotary",)
    assert positions.having("interpolates") == ("sinusoidal", "rotary")
    with pytest.raises(ConfigError) as raised:
        positions.get("alibi")
    assert str(raised.value) == "model.positions='alibi' is not one of sinusoidal, learned, rotary"
    c = config_lib.build("base")
    c.model.positions = "alibi"
    with pytest.raises(ConfigError, match="^model.positions='alibi' is not one of"):
        config_lib.validate(c)


# No positions at all: a scheme of one file, the model's embeddings left as they are.
NONE = '''
import jax.numpy as jnp
from transformer_jax.model.positions import Traits

TRAITS = Traits(added=True, learned=False, rotates=False, interpolates=False)


def embedding(module, positions, config):
    return jnp.zeros((*positions.shape, config.d_model))


def table(config, params=None):
    return jnp.zeros((config.max_len, config.d_model))
'''


def test_a_scheme_added_as_one_file_is_found_by_name_and_used(tmp_path, monkeypatch):
    (tmp_path / "nowhere.py").write_text(NONE)
    monkeypatch.setattr(positions, "__path__", [*positions.__path__, str(tmp_path)])
    assert positions.names() == ("sinusoidal", "learned", "nowhere", "rotary")
    config = TINY.replace(positions="nowhere")
    params = init(config)
    src = tokens((1, 5), 1)
    # Without positions the encoder is blind to order: reversing the source reverses its
    # output rows (the encoder's mask is symmetric), which any position scheme would break.
    model = Transformer(config)
    encode = lambda s: model.apply({"params": params}, s, method=Transformer.encode)  # noqa: E731
    np.testing.assert_allclose(encode(src[:, ::-1]), encode(src)[:, ::-1], atol=1e-5)
    sinusoid = Transformer(TINY)
    encode = lambda s: sinusoid.apply({"params": params}, s, method=Transformer.encode)  # noqa: E731
    assert not np.allclose(encode(src[:, ::-1]), encode(src)[:, ::-1], atol=1e-3)


# ----------------------------------------------------------------------------------------
# Rotary positions


def rotated(x, positions_, scale=1.0, base=10000.0):
    """Pairs (x_2i, x_2i+1) at position p turned by the angle p * scale * base^(-2i/d), one
    position and pair at a time, in float64."""
    x = np.asarray(x, np.float64)
    out = np.empty_like(x)
    d = x.shape[-1]
    for n, p in enumerate(positions_):
        for i in range(d // 2):
            angle = p * scale * base ** (-2 * i / d)
            a, b = x[..., n, 2 * i], x[..., n, 2 * i + 1]
            out[..., n, 2 * i] = a * np.cos(angle) - b * np.sin(angle)
            out[..., n, 2 * i + 1] = a * np.sin(angle) + b * np.cos(angle)
    return out


def test_rotary_turns_each_pair_of_dimensions_by_its_positions_angle():
    x = np.random.default_rng(0).normal(size=(2, 3, 5, 8)).astype(np.float32)
    where = np.array([0, 1, 2, 7, 40])
    np.testing.assert_allclose(rotary.rotate(jnp.asarray(x), where), rotated(x, where),
                               atol=1e-5)
    # Position interpolation: positions times the scale, so 2p at 1/2 is p.
    np.testing.assert_allclose(rotary.rotate(jnp.asarray(x), 2 * where, 0.5),
                               rotary.rotate(jnp.asarray(x), where), atol=1e-5)
    np.testing.assert_allclose(rotary.rotate(jnp.asarray(x), where, 0.25),
                               rotated(x, where, 0.25), atol=1e-5)


def test_rotary_scores_depend_on_the_distance_alone():
    rng = np.random.default_rng(1)
    q, k = rng.normal(size=(1, 1, 1, 8)), rng.normal(size=(1, 1, 1, 8))

    def score(i, j):
        qi = rotary.rotate(jnp.asarray(q, jnp.float32), jnp.array([i]))
        kj = rotary.rotate(jnp.asarray(k, jnp.float32), jnp.array([j]))
        return float(jnp.sum(qi * kj))

    assert score(3, 1) == pytest.approx(score(33, 31), abs=1e-4)
    assert score(3, 1) == pytest.approx(score(10, 8), abs=1e-4)
    assert score(3, 1) != pytest.approx(score(3, 2), abs=1e-3)


def test_a_rotary_model_adds_nothing_to_its_embeddings_and_learns_no_positions():
    names = lambda params: {jax.tree_util.keystr(path)  # noqa: E731
                            for path, _ in jax.tree_util.tree_leaves_with_path(params)}
    assert not any("position" in n for n in names(init(TINY.replace(positions="rotary"))))
    assert any("position" in n for n in names(init(TINY.replace(positions="learned"))))
    config = TINY.replace(positions="rotary", num_layers=0)
    params = init(config)
    src, tgt = tokens((1, 4), 2), tokens((1, 6), 3)
    logits = Transformer(config).apply({"params": params}, src, tgt)[0]
    # No layers: the decoder's input embedding times sqrt(d), times the shared matrix, plus
    # the bias; with the paper's sinusoids the positions would be added.
    table = np.asarray(params["shared_embedding"]["embedding"], np.float64)
    x = table[np.asarray(shift_right(tgt))[0]] * np.sqrt(32)
    np.testing.assert_allclose(logits, x @ table.T + np.asarray(params["logits_bias"]),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_rotary_turns_self_attention_only_and_packed_rows_equal_separate_sentences():
    config = TINY.replace(positions="rotary", num_layers=2)
    params = init(config)
    model = Transformer(config)
    s1, s2, t1, t2 = tokens((1, 4), 5), tokens((1, 3), 6), tokens((1, 3), 7), tokens((1, 5), 8)
    packed = model.apply(
        {"params": params}, jnp.concatenate([s1, s2], 1), jnp.concatenate([t1, t2], 1),
        inputs_segment_ids=jnp.array([[1, 1, 1, 1, 2, 2, 2]]),
        targets_segment_ids=jnp.array([[1, 1, 1, 2, 2, 2, 2, 2]]),
        inputs_positions=jnp.array([[0, 1, 2, 3, 0, 1, 2]]),
        targets_positions=jnp.array([[0, 1, 2, 0, 1, 2, 3, 4]]))
    # Sentence 2 sits at row positions 4.. of the source and 3.. of the target: rotations of
    # relative positions within each self-attention give it the logits it has alone (were
    # cross-attention turned too, its target-minus-source offset would change them).
    np.testing.assert_allclose(packed[:, :3], model.apply({"params": params}, s1, t1), atol=1e-5)
    np.testing.assert_allclose(packed[:, 3:], model.apply({"params": params}, s2, t2), atol=1e-5)
    # The encoder output of a sentence is the same wherever its row puts it.
    encode = lambda s, seg: model.apply({"params": params}, s, seg,  # noqa: E731
                                        method=Transformer.encode)
    shifted = encode(jnp.concatenate([s2, s1], 1), jnp.array([[1, 1, 1, 2, 2, 2, 2]]))
    np.testing.assert_allclose(shifted[:, 3:], encode(s1, jnp.ones((1, 4), jnp.int32)),
                               atol=1e-5)


# ----------------------------------------------------------------------------------------
# Interpolation: a scale set when translating


def test_sinusoids_at_a_scale_are_the_formula_at_scaled_positions():
    config = TINY.replace(position_scale=0.5)
    where = jnp.arange(10)[None]
    scaled = sinusoidal.embedding(None, where, config)
    pe = np.zeros((10, 32))
    for p in range(10):
        for i in range(16):
            angle = 0.5 * p / 10000 ** (2 * i / 32)
            pe[p, 2 * i], pe[p, 2 * i + 1] = np.sin(angle), np.cos(angle)
    np.testing.assert_allclose(scaled[0], pe, atol=1e-5)
    # Scale 1 reads the paper's table itself.
    np.testing.assert_array_equal(sinusoidal.embedding(None, where, TINY)[0],
                                  sinusoidal.table(TINY)[:10])


@pytest.mark.slow
def test_decode_position_scale_reaches_the_model_when_translating():
    config = TINY.replace(positions="rotary")
    params = init(config)
    src = tokens((2, 7), 9)
    scaled = decode.DecodeConfig(strategy="greedy", position_scale=0.5)
    out = decode.generate(params, src, jnp.full((2,), 10), jax.random.key(0), config=config,
                          decoding=scaled, max_len=10)
    # What greedy search picks is the argmax of the scaled model's teacher-forced logits...
    logits = Transformer(config.replace(position_scale=0.5)).apply(
        {"params": params}, src, out, targets_segment_ids=jnp.ones_like(out))
    logits = logits.at[..., 0].set(-jnp.inf)  # id 0 (padding) is never an output
    np.testing.assert_array_equal(np.argmax(logits[:, :3], -1), np.asarray(out)[:, :3])
    # ...and not the unscaled one's (random weights: the positions decide).
    plain = decode.generate(params, src, jnp.full((2,), 10), jax.random.key(0), config=config,
                            decoding=scaled.replace(position_scale=1.0), max_len=10)
    assert not np.array_equal(out, plain)
    assert translation.describe({**vars(scaled)}).endswith("positions x 0.5")


def test_the_config_refuses_what_a_scheme_cannot_do_in_one_line():
    c = config_lib.build("base")
    c.model.positions = "learned"
    c.decode.position_scale = 0.5
    with pytest.raises(ConfigError) as raised:
        config_lib.validate(c)
    assert str(raised.value) == (
        "decode.position_scale=0.5 needs positions that take fractions (sinusoidal, rotary); "
        "model.positions='learned' has a row per position")
    c = config_lib.build("base")
    c.model.update(positions="rotary", d_k=63)
    with pytest.raises(ConfigError, match=r"^model.positions='rotary' turns pairs of dimensions "
                       "and needs an even d_k, got 63$"):
        config_lib.validate(c)


@settings(max_examples=60, deadline=None)
@given(scale=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-3, 3),
                       st.text(max_size=3), st.booleans()),
       positions_=st.sampled_from(["sinusoidal", "learned", "rotary"]))
@example(scale=0.5, positions_="sinusoidal")  # taken
@example(scale=2, positions_="rotary")  # taken: an integer is a float here
@example(scale=0.5, positions_="learned")  # refused: a row per position
@example(scale="0.5", positions_="sinusoidal")  # refused: text, as the command line gives it
@example(scale=math.inf, positions_="sinusoidal")  # refused
def test_any_position_scale_is_taken_or_refused_in_one_line_naming_the_field(scale,
                                                                             positions_):
    # Taken, by hand: a finite number above 0 (an integer, or a bool, which ml_collections
    # reads as 0.0 or 1.0), other than 1 only where positions take fractions; text is not of
    # the field's type. Set as the command line and sweeps set a field.
    value = scale if isinstance(scale, str) else float(scale)
    taken = (not isinstance(scale, str) and 0 < value < math.inf
             and (value == 1.0 or positions_ != "learned"))
    c = config_lib.build("base")
    c.model.positions = positions_
    try:
        config_lib.validate(config_lib.apply_overrides(c, {"decode.position_scale": scale}))
    except ConfigError as e:
        assert not taken, f"position_scale={scale!r} with {positions_} positions refused: {e}"
        assert f"decode.position_scale={value!r}" in str(e) and "\n" not in str(e), str(e)
        return
    assert taken, f"position_scale={scale!r} with {positions_} positions taken"
    assert c.decode.position_scale == value


@settings(max_examples=40, deadline=None)
@given(field=st.sampled_from(["global_tokens", "random_features", "local_window"]),
       value=st.integers(-5, 10 ** 6))
def test_the_new_kernels_settings_are_taken_or_refused_in_one_line(field, value):
    c = config_lib.build("base")
    c.model[field] = value
    lowest = 0 if field == "global_tokens" else 1
    if value >= lowest:
        config_lib.validate(c)
        return
    with pytest.raises(ConfigError) as raised:
        config_lib.validate(c)
    assert str(raised.value) == f"model.{field}={value} must be an integer >= {lowest}"
