"""Pictures of a trained model: attention read out of a real run, the files and panels written,
positional encodings, the quadratic bill, and the HTML page in headless Chromium."""

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import jax
import numpy as np
import pytest

from transformer_jax.analysis import attention_read, pictures as visualize
from transformer_jax.data.batching import pad_batch
from transformer_jax.data.sources import SourceSpec
from transformer_jax.decoding.decode import DecodeConfig
from transformer_jax.errors import UserError
from transformer_jax.model.counts import init_params
from transformer_jax.model.spec import TransformerConfig
from transformer_jax.training import train

from .. import needs
from ..conftest import once_per_session
from ..helpers import tiny_config, workdir_spec

ROOT = Path(__file__).resolve().parents[2]
LAYERS, HEADS = 2, 4
SENTENCE = 4  # test split: "He says that I have come." -> "Er sagt, dass ich gekommen bin."


# Tests marked slow share `run`: about 75 s on a 2-core CPU to train it and draw its pictures,
# so made once for the session, whichever pytest-xdist workers its tests land on.
@pytest.fixture(scope="session")
def run(tmp_path_factory, builtin_data_dir):
    """A 2-layer, 4-head model trained for a few steps, ending with pictures of one sentence."""
    config = tiny_config(builtin_data_dir, num_steps=20, visualize_sentences=(SENTENCE,))
    config.model.num_layers = LAYERS
    return once_per_session(tmp_path_factory, "visualize_run",
                            lambda workdir: train.train_and_evaluate(config, workdir))


@pytest.fixture(scope="module")
def model(run):
    return attention_read.load_model(run, workdir_spec(run))


@pytest.mark.slow
def test_load_model_rebuilds_the_run(model):
    assert model.step == 20
    assert model.model_config.num_layers == LAYERS and model.model_config.num_heads == HEADS
    assert model.model_config.vocab_size == model.tokenizer.vocab_size
    assert model.model_config.deterministic


def test_load_model_names_what_is_missing(tmp_path):
    with pytest.raises(UserError, match=r"config\.json: no such file"):
        attention_read.load_model(tmp_path, workdir_spec(tmp_path))


@pytest.mark.slow
def test_rows_sum_to_one_and_masked_positions_get_zero_weight(model):
    tok = model.tokenizer
    pairs = [("He says that I have come.", "Er sagt, dass ich gekommen bin."),
             ("The dog sleeps.", "Der Hund schläft.")]
    src = [tok.encode(s) for s, _ in pairs]
    tgt = [tok.encode(t) for _, t in pairs]
    s_len, t_len = max(map(len, src)) + 3, max(map(len, tgt)) + 3  # padding in every row
    weights = attention_read.attention_weights(model.params, model.model_config,
                                          pad_batch(src, s_len), pad_batch(tgt, t_len))
    assert set(weights) == {"encoder_self", "decoder_self", "decoder_cross"}
    for kind, layers in weights.items():
        assert len(layers) == LAYERS
        q_lens, k_lens = {"encoder_self": (src, src), "decoder_self": (tgt, tgt),
                          "decoder_cross": (tgt, src)}[kind]
        for w in layers:
            assert w.shape[:2] == (2, HEADS)
            for b in range(2):
                q, k = len(q_lens[b]), len(k_lens[b])
                real = w[b, :, :q, :]
                np.testing.assert_allclose(real.sum(-1), 1.0, atol=1e-5)
                assert np.all(real[:, :, k:] == 0.0), f"{kind}: padding keys got weight"
                if kind == "decoder_self":  # no query sees a later position
                    later = np.triu_indices(q, 1)
                    assert np.all(real[:, later[0], later[1]] == 0.0)


@pytest.mark.slow
def test_sentence_labels_follow_the_decoder_shift(model):
    sentence = attention_read.read_sentence(model.params, model.model_config, model.tokenizer,
                                       "The dog sleeps.", "Der Hund schläft.")
    rows, cols = sentence.labels("decoder_self")
    assert rows[-1] == "</s>" and cols[0] == attention_read.START and cols[1:] == rows[:-1]
    rows, cols = sentence.labels("decoder_cross")
    assert cols == sentence.source_tokens and cols[-1] == "</s>"
    assert sentence.weights["decoder_cross"][0].shape == (HEADS, len(rows), len(cols))


@pytest.mark.slow
def test_training_ends_with_pictures_of_every_layer_and_kind(run):
    pictures = run / "pictures"
    for name in ("positional_encoding.png", "position_similarity.png", "quadratic_bill.png",
                 "quadratic_bill.md", "quadratic_bill.csv"):
        assert (pictures / name).stat().st_size > 0, name
    sentence = pictures / f"test_{SENTENCE}"
    expected = {f"{kind}_attention_layer_{i}.png" for kind in attention_read.KINDS
                for i in range(LAYERS)} | {"causal_mask.png", "attention.html"}
    assert {p.name for p in sentence.iterdir()} == expected
    for name in expected - {"attention.html"}:
        assert (sentence / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name


@pytest.mark.slow
def test_a_sentence_outside_the_test_split_is_refused(run, model, builtin_data_dir):
    config = tiny_config(builtin_data_dir, visualize_sentences=(4, 1000))
    with pytest.raises(UserError, match=r"train.visualize_sentences: index 1000 is outside the "
                                        r"test split \(1000 sentences\)"):
        visualize.write_run_pictures(
            SourceSpec.from_config(config.data), config.train.visualize_sentences,
            DecodeConfig.from_config(config.decode), model.model_config, model.params,
            model.tokenizer, run)


@pytest.mark.slow
def test_every_grid_has_one_panel_per_head(model, tmp_path):
    sentence = attention_read.read_sentence(model.params, model.model_config, model.tokenizer,
                                       "The dog sleeps.", "Der Hund schläft.")
    written = visualize.write_sentence_pictures(tmp_path, sentence)
    grids = {p.name: n for p, n in written.items() if "_attention_layer_" in p.name}
    assert len(grids) == 3 * LAYERS and set(grids.values()) == {HEADS}
    rows, cols = sentence.labels("decoder_cross")
    fig = visualize.plot_attention(np.stack([sentence.weights["decoder_cross"][0][0]] * 6),
                                   rows, cols, "six heads")
    assert visualize.attention_panels(fig) == 6  # 6 panels on a 4 x 2 grid, 2 left empty
    ax = next(a for a in fig.axes if a.images)
    assert [t.get_text() for t in ax.get_xticklabels()] == cols
    assert [t.get_text() for t in ax.get_yticklabels()] == rows


def test_positional_encoding_near_positions_score_higher():
    sim = visualize.position_similarity(100, 512)
    assert np.allclose(np.diag(sim), 256.0)  # sin^2 + cos^2 = 1 in each of 256 pairs
    assert np.isclose(sim[10, 20], sim[60, 70]) and np.isclose(sim[10, 20], sim[20, 10])
    distance = np.abs(np.subtract.outer(np.arange(100), np.arange(100)))
    profile = [sim[distance == k].mean() for k in range(41)]
    assert np.all(np.diff(profile) < 0)  # falls with distance over the first 40 positions
    for i in range(100):  # a neighbour beats every position 10 or more away
        neighbour = sim[i, i + 1] if i < 99 else sim[i, i - 1]
        assert neighbour > sim[i][distance[i] >= 10].max()


@pytest.mark.slow
def test_command_translates_and_writes_the_page(run, tmp_path):
    out = tmp_path / "pictures"
    ok = subprocess.run(
        [sys.executable, "-m", "transformer_jax.visualize", f"--workdir={run}",
         "--src=The dog sleeps.", f"--out={out}"],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert "translation:" in ok.stderr
    assert str(out / "attention.html") in ok.stdout.splitlines()
    bad = subprocess.run(
        [sys.executable, "-m", "transformer_jax.visualize", f"--workdir={tmp_path / 'none'}",
         "--src=The dog sleeps."], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines()[-1] == (
        f"error: {tmp_path / 'none' / 'config.json'}: no such file; --workdir must be the "
        "workdir of a training run")


# ----------------------------------------------------------------------------------------
# The page in a real browser

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")


def _browser():
    webdriver = needs.require("selenium.webdriver", "the test extra: pip install -e '.[test]'")
    from selenium.webdriver.chrome.service import Service

    if not (CHROMIUM and CHROMEDRIVER):
        needs.missing("Chromium or chromedriver is not installed (Debian: apt-get install "
                      "chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync",
                 f"--user-data-dir={tempfile.mkdtemp(prefix='chromium-')}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """The page of an untrained 2-layer, 4-head model (seconds: no training, no tokenizer)."""
    config = TransformerConfig(vocab_size=40, num_layers=LAYERS, d_model=32, d_ff=64,
                               num_heads=HEADS, dropout_rate=0.0, max_len=16)
    params = init_params(config, jax.random.key(0))
    source = ["\u2581The", "\u2581dog", "\u2581sleeps", ".", "</s>"]
    target = ["\u2581Der", "\u2581Hund", "\u2581schl\u00e4ft", ".", "</s>"]
    weights = attention_read.attention_weights(params, config, np.asarray([[5, 6, 7, 8, 1]]),
                                          np.asarray([[9, 10, 11, 8, 1]]))
    sentence = attention_read.SentenceAttention(
        "The dog sleeps.", "Der Hund schl\u00e4ft.", source, target,
        {kind: [w[0] for w in layers] for kind, layers in weights.items()})
    out = tmp_path_factory.mktemp("page")
    visualize.write_sentence_pictures(out, sentence)
    return out / "attention.html"


def test_page_works_in_headless_chromium(page):
    text = page.read_text()
    for remote in ("http://", "https://", "<link", "<script src", "@import"):
        assert remote not in text, f"the page refers to something outside itself: {remote}"
    browser = _browser()
    try:
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import Select

        browser.get(page.as_uri())
        image = browser.find_element(By.ID, "heatmap")
        assert image.get_attribute("data-key") == "encoder_self/0/all"
        first = image.get_attribute("src")
        assert first.startswith("data:image/png;base64,")
        assert browser.execute_script("return arguments[0].naturalWidth", image) > 100

        shown = {first}
        for select, value in (("kind", "decoder_cross"), ("layer", "1"), ("head", "2")):
            Select(browser.find_element(By.ID, select)).select_by_value(value)
            shown.add(image.get_attribute("src"))
        assert image.get_attribute("data-key") == "decoder_cross/1/2"
        assert len(shown) == 4  # every change showed another image
        assert browser.execute_script("return arguments[0].naturalWidth", image) > 100

        # Clicking an output token (the last: </s>) shows its weights over the source tokens
        # for head 2.
        queries = browser.find_elements(By.CSS_SELECTOR, "#queries .query")
        target_tokens = json.loads(browser.execute_script(
            "return JSON.stringify(DATA.kinds.decoder_cross.rows)"))
        assert [q.text for q in queries] == target_tokens and target_tokens[-1] == "</s>"
        last = len(queries) - 1
        queries[last].click()
        assert "selected" in browser.find_elements(
            By.CSS_SELECTOR, "#queries .query")[last].get_attribute("class")
        rows = browser.find_elements(By.CSS_SELECTOR, "#weights .row")
        assert [r.get_attribute("data-head") for r in rows] == ["2"]
        shown_weights = [float(c.get_attribute("data-weight"))
                         for c in rows[0].find_elements(By.CSS_SELECTOR, ".key")]
        expected = json.loads(browser.execute_script(
            f"return JSON.stringify(DATA.kinds.decoder_cross.weights[1][2][{last}])"))
        assert shown_weights == expected and abs(sum(shown_weights) - 1.0) < 1e-2

        errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
        assert errors == []
    finally:
        browser.quit()
