"""Rows sized to the data: the row length chosen from the corpus, recorded next to the
vocabulary and kept on resume, an explicit data.row_len honoured, WMT's rows of max_len, and
pairs longer than a row counted and logged."""

import importlib
import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest

from transformer_jax import config as config_lib
from transformer_jax.data import corpus, pipeline, rows as rows_lib, tokenizer as tokenizer_lib
from transformer_jax.errors import DataError
from transformer_jax.io import workdirs
from transformer_jax.training import train

from ..helpers import tiny_config

# Words without digits (SentencePiece splits digits off): each becomes one piece.
WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
         "juliett", "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo",
         "sierra", "tango", "uniform", "victor", "whiskey", "xray", "yankee", "zulu"]
NUM_PAIRS = 4096  # one chunk of the pipeline is one epoch: a chunk holds every long pair


def sentence(rng, words):
    return " ".join(rng.choice(WORDS, words))


def made_up_corpus(medium=12, long_=4, seed=0):
    """NUM_PAIRS pairs whose longer side has a known number of words: most 5-40, ``medium``
    70-100 (source side), ``long_`` 150-180 (target side); and the 1-based line numbers of
    the medium and long pairs. Every word is one piece of the vocabulary trained on it."""
    rng = np.random.default_rng(seed)
    lines = rng.permutation(NUM_PAIRS)[:medium + long_] + 1
    src, tgt = [], []
    for line in range(1, NUM_PAIRS + 1):
        a, b = rng.integers(5, 41, 2)
        if line in lines[:medium]:
            a = rng.integers(70, 101)
        elif line in lines[medium:]:
            b = rng.integers(150, 181)
        src.append(sentence(rng, a))
        tgt.append(sentence(rng, b))
    return src, tgt, sorted(lines[:medium].tolist()), sorted(lines[medium:].tolist())


def write_corpus(tmp_path, src, tgt, stem="train"):
    for side, lines in (("src", src), ("tgt", tgt)):
        (tmp_path / f"{stem}.{side}").write_text("\n".join(lines) + "\n")
    return f"{tmp_path / stem}.src,{tmp_path / stem}.tgt"


def text_config(tmp_path, train_files, **data):
    c = importlib.import_module("configs.text").get_config()
    c.data.update(train_files=train_files, eval_files=train_files, vocab_size=300,
                  vocab_sample=200_000, max_len=256, tokens_per_batch=8 * 128)
    c.data.update(data)
    c.model.update(num_layers=1, d_model=32, d_ff=64, num_heads=4, max_len=256)
    c.train.update(devices=1)
    return config_lib.validate(c)


@pytest.fixture(scope="module")
def made_up(tmp_path_factory):
    """(train_files, medium lines, long lines) of made_up_corpus(). Tests that change the
    files take a copy (own_corpus)."""
    tmp = tmp_path_factory.mktemp("rows")
    src, tgt, medium, long_ = made_up_corpus()
    return write_corpus(tmp, src, tgt), medium, long_


@pytest.fixture
def own_corpus(made_up, tmp_path):
    """A copy of the made-up corpus for a test that may change it."""
    train_files, medium, long_ = made_up
    copies = []
    for path in train_files.split(","):
        copies.append(str(tmp_path / path.rsplit("/", 1)[1]))
        shutil.copy(path, copies[-1])
    return ",".join(copies), medium, long_


def data_for(config, workdir):
    return pipeline.data_for(config, workdir, num_devices=1, process_index=0, process_count=1)


def test_the_smallest_multiple_of_64_that_holds_99_9_percent():
    # 1,000 pairs: one may be left out. The second longest decides.
    assert rows_lib.row_len_holding(np.array([10] * 997 + [64, 65, 300]), 256) == 128
    assert rows_lib.row_len_holding(np.array([10] * 998 + [64, 300]), 256) == 64
    assert rows_lib.row_len_holding(np.array([10] * 998 + [129, 300]), 256) == 192
    # 999 pairs: 0.999 x 999 = 998.001 must fit, so none may be left out.
    assert rows_lib.row_len_holding(np.array([10] * 998 + [65]), 256) == 128
    # Never beyond data.max_len, even where it is no multiple of 64.
    assert rows_lib.row_len_holding(np.array([300] * 10), 256) == 256
    assert rows_lib.row_len_holding(np.array([10] * 8 + [90, 90]), 100) == 100
    assert rows_lib.row_len_holding(np.array([3, 5]), 16) == 16
    with pytest.raises(DataError, match="no sentence pair to size the rows by"):
        rows_lib.row_len_holding(np.array([], np.int64), 256)


def test_rows_are_sized_to_the_corpus_recorded_and_long_pairs_counted(made_up, tmp_path,
                                                                     caplog):
    train_files, medium, long_ = made_up
    c = text_config(tmp_path, train_files)
    with caplog.at_level(logging.INFO):
        tok, data, rows, shape, eval_rows, *_ = data_for(c, tmp_path / "run")
    assert [len(tok.encode(x)) for x in ("echo golf zulu", " ".join(WORDS))] == [4, 27]
    # 4,096 pairs, 4 may be left out: the 4 long ones (151-181 tokens). The longest medium
    # pair (71-101 tokens) needs 128 slots.
    assert shape.row_len == 128
    assert (rows, eval_rows) == (8, 4)  # 1,024 tokens a batch: 8 rows of 128, 4 of 256
    batch = next(data.iterator)
    assert batch["inputs"].shape == batch["targets"].shape == (8, 128)
    record = json.loads((tmp_path / "run" / "vocab" / "row_len.json").read_text())
    assert record["row_len"] == 128 and record["pairs_measured"] == NUM_PAIRS
    assert record["share_held"] == round(4092 / 4096, 6)
    longest = max(len(line.split()) for path in train_files.split(",")
                  for line in Path(path).read_text().splitlines()) + 1
    assert record["longest_measured"] == longest and 151 <= longest <= 181
    assert ("rows of 128 slots, sized to the data (data.row_len=0): they hold 99.90% of 4096 "
            "pairs measured") in caplog.text
    assert "8 rows x 128 slots x 1 accumulation steps = 1024 slots" in caplog.text
    assert (f"4 of 4096 pairs longer than the 128 slots of rows sized to the data are skipped "
            f"in training (lines {', '.join(map(str, long_))})") in caplog.text
    # Training skips exactly the 4 long pairs of every epoch (a chunk, read ahead or not).
    skipped, kept = data.length_filter.skipped, data.length_filter.kept
    # The medium pairs (71-101 tokens, longer than rows of 64) are among those kept.
    assert skipped > 0 and skipped % 4 == 0 and kept == skipped // 4 * (NUM_PAIRS - 4)


def test_a_resumed_run_keeps_its_rows_when_the_corpus_changes(own_corpus, tmp_path, caplog):
    train_files, _, _ = own_corpus
    data_for(text_config(tmp_path, train_files), tmp_path / "run")
    # The same files now hold no medium pair: measured afresh they would want rows of 64.
    src, tgt, _, _ = made_up_corpus(medium=0, long_=4, seed=1)
    changed = write_corpus(tmp_path, src, tgt, stem="changed")
    fresh = data_for(text_config(tmp_path, changed), tmp_path / "fresh")
    assert fresh.shape.row_len == 64
    shutil.copy(tmp_path / "changed.src", train_files.split(",")[0])
    shutil.copy(tmp_path / "changed.tgt", train_files.split(",")[1])
    with caplog.at_level(logging.INFO):
        resumed = data_for(text_config(tmp_path, train_files), tmp_path / "run")
    assert resumed.shape.row_len == 128
    assert next(resumed.train.iterator)["inputs"].shape == (8, 128)
    assert f"rows of 128 slots, as recorded in {tmp_path / 'run/vocab/row_len.json'}" in \
        caplog.text
    assert "sized to the data (data.row_len=0)" not in caplog.text  # not measured again


def test_an_explicit_row_len_is_honoured(own_corpus, tmp_path, caplog):
    train_files, medium, long_ = own_corpus
    c = text_config(tmp_path, train_files, row_len=64)
    with caplog.at_level(logging.INFO):
        _, data, rows, shape, _, *_ = data_for(c, tmp_path / "run")
    assert (shape.row_len, rows) == (64, 16)
    assert next(data.iterator)["targets"].shape == (16, 64)
    assert not (tmp_path / "run" / "vocab" / "row_len.json").exists()
    lines = sorted(medium + long_)
    assert (f"16 of 4096 pairs longer than data.row_len=64 tokens are skipped in training "
            f"(lines {', '.join(map(str, lines[:5]))}, ...)") in caplog.text
    skipped, kept = data.length_filter.skipped, data.length_filter.kept
    assert skipped > 0 and kept == skipped // 16 * (NUM_PAIRS - 16)


def test_row_len_at_max_len_keeps_every_pair_up_to_max_len(own_corpus, tmp_path, caplog):
    train_files, _, _ = own_corpus
    with caplog.at_level(logging.INFO):
        _, data, rows, shape, _, *_ = data_for(text_config(tmp_path, train_files, row_len=256),
                                           tmp_path / "run")
    assert (shape.row_len, rows) == (256, 4)
    next(data.iterator)
    assert data.length_filter.skipped == 0 and "skipped in training" not in caplog.text


def test_checkpoints_from_before_recorded_rows_keep_rows_of_max_len(made_up, tmp_path,
                                                                    caplog):
    train_files, _, _ = made_up
    c = text_config(tmp_path, train_files)
    data_for(c, tmp_path / "new")
    # A workdir trained before row lengths were recorded: a vocabulary and checkpoints.
    shutil.copytree(tmp_path / "new" / "vocab", tmp_path / "old" / "vocab")
    (tmp_path / "old" / "vocab" / "row_len.json").unlink()
    (tmp_path / "old" / "checkpoints" / "300").mkdir(parents=True)
    with caplog.at_level(logging.WARNING):
        old = data_for(c, tmp_path / "old")
    assert old.shape.row_len == 256
    assert ("no recorded row length; its checkpoints were trained on rows of "
            "data.max_len=256 slots, which it keeps") in caplog.text
    record = json.loads((tmp_path / "old" / "vocab" / "row_len.json").read_text())
    assert record["row_len"] == 256


def test_a_damaged_record_is_refused_naming_the_file(made_up, tmp_path):
    train_files, _, _ = made_up
    c = text_config(tmp_path, train_files)
    data_for(c, tmp_path / "run")
    path = tmp_path / "run" / "vocab" / "row_len.json"
    for damage, why in (("{", r" \(cut short \(.*\)\)"), ('{"row_len": 512}', ""),
                        ('{"row_len": "64"}', ""), ("[64]", r" \(a list, not an object\)")):
        path.write_text(damage)
        with pytest.raises(DataError, match=f"{path}: damaged{why}, no row length of 1 to "
                                            "data.max_len=256 slots"):
            data_for(c, tmp_path / "run")


def spec_of(config):
    return pipeline.DataSpec.from_config(config).rows


@pytest.fixture(scope="module")
def builtin_pairs_and_vocab(tmp_path_factory):
    pairs = [(corpus.detokenize(en), corpus.detokenize(de)) for en, de in
             corpus.build_corpus(seed=0, sizes={"train": 3000})["train"]]
    workdir = tmp_path_factory.mktemp("builtin_vocab")
    tok = tokenizer_lib.load_or_train(
        workdir, tokenizer_lib.sample_text(iter(pairs), 1_000_000), vocab_size=1000)
    return pairs, tok


def test_the_builtin_corpus_gets_rows_of_64_and_wmt_keeps_max_len(builtin_pairs_and_vocab,
                                                                  tmp_path):
    pairs, tok = builtin_pairs_and_vocab
    builtin = config_lib.build("base", "builtin")
    assert builtin.data.row_len == 0 and builtin.data.max_len == 256
    lengths = np.array([max(len(tok.encode(a)), len(tok.encode(b))) for a, b in pairs])
    assert 20 < np.quantile(lengths, 0.999) <= 64  # sentences of 4-25 words
    assert rows_lib.row_len_of(spec_of(builtin), tmp_path / "builtin", pairs, tok) == 64
    assert json.loads(rows_lib.row_len_path(tmp_path / "builtin").read_text())["row_len"] == 64
    # WMT: rows of data.max_len, nothing measured or recorded.
    wmt = config_lib.build("base", "wmt14_ende")
    assert rows_lib.row_len_of(spec_of(wmt), tmp_path / "wmt", pairs, tok) == 256
    wmt.data.row_len = 128
    assert rows_lib.row_len_of(spec_of(wmt), tmp_path / "wmt", pairs, tok) == 128
    assert not (tmp_path / "wmt").exists()


@pytest.mark.slow  # ~40 s of CPU: two short runs, each compiling its steps
def test_a_run_trains_on_rows_sized_to_the_data_and_resumes_on_them(tmp_path,
                                                                   builtin_data_dir, caplog):
    # The built-in corpus with room for pairs of 128 tokens: with the demo's 1,000 pieces its
    # sentences take rows of 64.
    config = tiny_config(builtin_data_dir, num_steps=4, log_every=2, eval_every=4,
                         checkpoint_every=4, eval_batches=1, peak_flops=1e12)
    config.data.update(max_len=128, vocab_size=1000, vocab_sample=1_000_000)
    config.model.max_len = 128
    with caplog.at_level(logging.INFO):
        first = train.train_and_evaluate(config, tmp_path)
    # 512 tokens a batch: 8 rows of 64 to train on; evaluation packs 4 rows of 128.
    assert "batch 8 rows x 64 tokens on 1 device(s)" in caplog.text
    assert json.loads(rows_lib.row_len_path(tmp_path).read_text())["row_len"] == 64
    assert 0 < first["tokens"] <= 4 * 128
    caplog.clear()
    config.train.num_steps = 8
    with caplog.at_level(logging.INFO):
        train.train_and_evaluate(config, tmp_path)
    assert "resuming from step 4" in caplog.text
    assert f"rows of 64 slots, as recorded in {rows_lib.row_len_path(tmp_path)}" in caplog.text
    assert "batch 8 rows x 64 tokens on 1 device(s)" in caplog.text
    steps = workdirs.read_metrics(tmp_path)["train"]
    assert sorted(steps) == [2, 4, 6, 8] and steps[8]["skipped_long_pairs"] == 0
