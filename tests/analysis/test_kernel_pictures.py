"""The pictures of local + global attention's mask and of rotary positions' similarity: drawn
from the model's own functions (its mask, its rotation), equal to what is written out by hand,
and shown on the attention page."""

import json

import jax.numpy as jnp
import numpy as np

from tests.model.test_sparse_attention import HAND_CAUSAL, HAND_MASK, HAND_SEGMENTS
from transformer_jax.analysis import attention_read, kernel_pictures, pictures
from transformer_jax.analysis.kernel_pictures import GLOBAL, HIDDEN, WINDOW
from transformer_jax.model import masks
from transformer_jax.model.positions import rotary
from transformer_jax.model.spec import TransformerConfig

CONFIG = TransformerConfig(vocab_size=50, num_layers=1, d_model=32, d_ff=64, num_heads=4,
                           d_k=8, d_v=8, max_len=64)


def images(fig):
    """The arrays shown by the figure's image panels, in order."""
    return [np.asarray(ax.images[0].get_array()) for ax in fig.axes if ax.images]


def hand_cells(mask):
    """The hand-written mask's cells: WINDOW within one position of the query, GLOBAL for
    the other keys it sees."""
    mask = np.asarray(mask, bool)
    near = np.abs(np.subtract.outer(np.arange(10), np.arange(10))) <= 1
    return np.where(mask & near, WINDOW, np.where(mask, GLOBAL, HIDDEN))


def test_the_mask_cells_are_the_hand_written_mask():
    row = np.asarray(HAND_SEGMENTS[0])
    for causal, mask in ((False, HAND_MASK), (True, HAND_CAUSAL)):
        np.testing.assert_array_equal(kernel_pictures.sparse_mask_cells(row, 1, 2, causal),
                                      hand_cells(mask))


def test_the_mask_picture_is_drawn_from_the_models_own_mask(monkeypatch):
    config = CONFIG.replace(attention="local_global", local_window=3, global_tokens=1)
    assert kernel_pictures.mask_settings(config) == (3, 1, True)
    encoder, decoder = images(kernel_pictures.plot_sparse_mask(config))
    seg = jnp.asarray([kernel_pictures.ROW])
    for shown, causal in ((encoder, False), (decoder, True)):
        allowed = np.asarray(masks.make_mask(seg, seg, causal=causal, window=3,
                                             global_tokens=1))[0, 0]
        np.testing.assert_array_equal(shown != HIDDEN, allowed)
    # A model with no window is shown an example, said so.
    assert kernel_pictures.mask_settings(CONFIG) == (2, 2, False)
    # Change the model's mask, and the picture follows: here key 0 hidden from everyone.
    own = masks.make_mask
    monkeypatch.setattr(masks, "make_mask", lambda *a, **k: own(*a, **k).at[..., 0].set(False))
    encoder, _ = images(kernel_pictures.plot_sparse_mask(config))
    assert np.all(encoder[:, 0] == HIDDEN) and encoder[1, 1] == WINDOW


def test_rotary_similarity_is_the_cosine_sum_and_the_picture_the_models_rotation(monkeypatch):
    d, n = 8, 30
    theta = 10000.0 ** (-np.arange(0, d, 2) / d)
    distance = np.subtract.outer(np.arange(n), np.arange(n))
    for scale in (1.0, 1 / 3):
        expected = (2 / d) * np.cos(distance[..., None] * scale * theta).sum(-1)
        np.testing.assert_allclose(kernel_pictures.rotary_similarity(n, d, scale), expected,
                                   atol=1e-5)
    plain, interpolated = images(kernel_pictures.plot_rotary_similarity(n, d, 1 / 3))
    np.testing.assert_allclose(plain, kernel_pictures.rotary_similarity(n, d), atol=1e-12)
    np.testing.assert_allclose(interpolated, kernel_pictures.rotary_similarity(n, d, 1 / 3),
                               atol=1e-12)
    assert plain[0, 3] < interpolated[0, 3]  # interpolation: neighbours look nearer
    # Drawn from the model's rotation: without it every position looks the same.
    monkeypatch.setattr(rotary, "rotate", lambda x, positions, scale=1.0: x)
    plain, _ = images(kernel_pictures.plot_rotary_similarity(n, d, 1 / 3))
    np.testing.assert_allclose(plain, 1.0)


def test_the_model_pictures_and_the_page_show_them(tmp_path):
    written = pictures.write_model_pictures(tmp_path, CONFIG.replace(attention="local_global"))
    names = [p.name for p in written]
    assert "sparse_mask.png" in names and "rotary_similarity.png" in names
    for name in ("sparse_mask.png", "rotary_similarity.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rng = np.random.default_rng(0)
    sentence = attention_read.SentenceAttention(
        "a b", "c d", ["a", "b"], ["c", "d"],
        {kind: [rng.random((2, 2, 2))] for kind in attention_read.KINDS})
    page = pictures.render_page(sentence, {}, written)
    payload = page.split('<script id="data" type="application/json">', 1)[1].split(
        "</script>", 1)[0]
    titles = [e["title"] for e in json.loads(payload)["extras"]]
    assert "sparse mask" in titles and "rotary similarity" in titles


def test_the_quadratic_bill_draws_each_kernels_measured_memory_and_time():
    from transformer_jax.analysis import attention_cost

    rows = [{"kind": kind, "n": n, "pass": "backward", "peak_bytes": scale * n * n // 64,
             "cpu_s": scale * n / 1000} for kind, scale in (("dense", 4), ("linear", 1))
            for n in (512, 1024, 2048)]
    rows.append({"kind": "dense", "n": 512, "pass": "forward", "peak_bytes": 10 ** 6})
    fig = pictures.plot_quadratic_bill(attention_cost.quadratic_bill(),
                                       {"heads": 8, "source": "s", "machine": "m",
                                        "results": rows})
    memory_ax, time_ax = fig.axes[2], fig.axes[3]
    lines = {line.get_label(): line for line in memory_ax.get_lines()}
    assert set(lines) == {"dense", "linear"}
    assert list(lines["linear"].get_ydata()) == [512 * 8, 1024 * 16, 2048 * 32]
    times = {line.get_label(): list(line.get_ydata()) for line in time_ax.get_lines()}
    assert times["dense"] == [2.048, 4.096, 8.192]
