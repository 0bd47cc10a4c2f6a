"""Your own parallel data: two line-aligned files or one TSV, read into the same pipeline;
bad lines are skipped and reported with their line numbers, or refused naming file and line."""

import importlib
import logging
from pathlib import Path

import pytest

from transformer_jax import config as config_lib
from transformer_jax.data import corpus, pipeline, sources, text
from transformer_jax.errors import ConfigError, DataError
from transformer_jax.training import train

from ..helpers import run_command

ROOT = Path(__file__).resolve().parents[2]
PAIRS = [(corpus.detokenize(en), corpus.detokenize(de)) for en, de in
         corpus.build_corpus(seed=1, sizes={"train": 400, "test": 40})["train"]]


def write(path: Path, lines: list[str | bytes]) -> str:
    path.write_bytes(b"".join((x if isinstance(x, bytes) else x.encode()) + b"\n"
                              for x in lines))
    return str(path)


def two_files(tmp_path, src_lines, tgt_lines, stem="train") -> str:
    return (write(tmp_path / f"{stem}.en", src_lines) + "," +
            write(tmp_path / f"{stem}.de", tgt_lines))


def test_two_files_give_line_aligned_pairs(tmp_path):
    spec = two_files(tmp_path, [en for en, _ in PAIRS[:3]], [de for _, de in PAIRS[:3]])
    pairs = text.load_pairs(spec)
    assert list(pairs) == PAIRS[:3]
    assert pairs.line_numbers.tolist() == [1, 2, 3] and pairs.report.skipped == 0


def test_one_tsv_file(tmp_path):
    spec = write(tmp_path / "pairs.tsv", [f"{en}\t{de}" for en, de in PAIRS[:5]])
    assert list(text.load_pairs(spec)) == PAIRS[:5]


def test_only_newline_ends_a_line(tmp_path, caplog):
    # A Windows line end is dropped, a byte-order mark ignored, and a form feed or Unicode
    # line separator inside a sentence does not shift the pairing (str.splitlines would):
    # each becomes a space, and the line is counted as cleaned.
    src = [b"\xef\xbb\xbfOne\r", "Two\x0cparts", "Three\u2028lines"]
    tgt = ["Eins\r", "Zwei", "Drei"]
    with caplog.at_level(logging.WARNING):
        pairs = text.load_pairs(two_files(tmp_path, src, tgt))
    assert list(pairs) == [("One", "Eins"), ("Two parts", "Zwei"), ("Three lines", "Drei")]
    assert pairs.report.cleaned == [2, 3] and pairs.report.skipped == 0
    assert "3 pairs from 3 lines; cleaned control characters in 2 (lines 2, 3)" in caplog.text


def test_control_characters_become_spaces_and_invisible_sentences_are_empty(tmp_path):
    src = ["a\x1b[0mb", "\ufeffmid-file mark", "\u200b\u200e \u2060", "tab\there", "ok\x7f"]
    tgt = ["A\x07", "B", "C", "D", "E\x85"]
    pairs = text.load_pairs(two_files(tmp_path, src, tgt))
    # ESC, BEL, DEL and NEL (a C1 control) become spaces; a byte-order mark past the first
    # line is removed; a side of zero-width characters alone is empty.
    assert list(pairs) == [("a [0mb", "A"), ("mid-file mark", "B"), ("tab here", "D"),
                           ("ok", "E")]
    assert pairs.report.cleaned == [1, 2, 4, 5] and pairs.report.empty == [3]


def test_utf16_binary_and_the_same_file_twice_are_refused(tmp_path):
    utf16 = tmp_path / "utf16.txt"
    utf16.write_bytes("Hallo\nWelt\n".encode("utf-16"))  # with its byte-order mark
    with pytest.raises(DataError, match=r"utf16.txt: UTF-16 text \(its byte-order mark\)"):
        text.load_pairs(str(utf16))
    bare = tmp_path / "bare.tsv"
    bare.write_bytes("a\tb\n".encode("utf-16-le"))  # no mark: NUL bytes
    with pytest.raises(DataError, match=r"bare.tsv:1: a NUL byte in the first 8,000 bytes"):
        text.load_pairs(str(bare))
    late = tmp_path / "late.tsv"  # a NUL far into the file is a control character, cleaned
    late.write_bytes(b"a\tb\n" * 2000 + b"c\x00d\te\n")
    pairs = text.load_pairs(str(late))
    assert pairs[-1] == ("c d", "e") and pairs.report.cleaned == [2001]
    spec = write(tmp_path / "same.txt", ["a", "b"])
    with pytest.raises(DataError, match="the source and target are the same file"):
        text.load_pairs(f"{spec},{tmp_path}/./same.txt")


def test_a_named_pipe_is_refused_not_waited_on(tmp_path):
    import os

    os.mkfifo(tmp_path / "pipe.tsv")
    with pytest.raises(DataError, match="data.train_files: .*pipe.tsv is a named pipe, not a "
                                        "regular file"):
        text.load_pairs(str(tmp_path / "pipe.tsv"))


def test_empty_and_undecodable_lines_are_skipped_and_reported(tmp_path, caplog):
    src = ["Hello .", "", "Good day .", "Bad \xff".encode("latin-1"), "  ", "Bye .", "x"]
    tgt = ["Hallo .", "Leer", "", "Schlecht", "Leer", "Tschüss .", "\xe9".encode("latin-1")]
    spec = two_files(tmp_path, src, tgt)
    with caplog.at_level(logging.WARNING):
        pairs = text.load_pairs(spec, "data.eval_files")
    assert list(pairs) == [("Hello .", "Hallo ."), ("Bye .", "Tschüss .")]
    assert pairs.line_numbers.tolist() == [1, 6]
    assert pairs.report.empty == [2, 3, 5] and pairs.report.invalid_utf8 == [4, 7]
    assert (f"data.eval_files={spec}: 2 pairs from 7 lines; skipped 3 with an empty side "
            "(lines 2, 3, 5), 2 not valid UTF-8 (lines 4, 7)") in caplog.text


def test_the_report_quotes_the_first_five_line_numbers():
    report = text.LoadReport("f", total_lines=10, kept=3, empty=[1, 2, 3, 4, 5, 6, 7])
    assert report.summary() == ("f: 3 pairs from 10 lines; skipped 7 with an empty side "
                                "(lines 1, 2, 3, 4, 5, ...)")


def test_files_of_different_lengths_are_refused(tmp_path):
    spec = two_files(tmp_path, ["a", "b", "c", "d"], ["A", "B"])
    with pytest.raises(DataError, match=r"train.de has 2 lines but .*train.en has 4: line 3 "
                                         r"of .*train.en has no counterpart"):
        text.load_pairs(spec)
    spec = two_files(tmp_path, ["a"], ["A", "B", "C"], stem="dev")
    with pytest.raises(DataError, match=r"dev.en has 1 lines but .*dev.de has 3"):
        text.load_pairs(spec)


def test_a_tsv_line_without_one_tab_is_refused_naming_it(tmp_path):
    spec = write(tmp_path / "pairs.tsv", ["a\tA", "b\tB", "no tab here", "c\tC"])
    with pytest.raises(DataError, match=r"pairs.tsv:3: expected 2 tab-separated fields "
                                         r"\(source<TAB>target\), found 1"):
        text.load_pairs(spec)
    write(tmp_path / "pairs.tsv", ["a\tA\textra"])
    with pytest.raises(DataError, match="pairs.tsv:1: .* found 3"):
        text.load_pairs(spec)


@pytest.mark.parametrize("spec,message", [
    ("missing.tsv", "data.train_files: no such file missing.tsv"),
    ("a,b,c", "data.train_files='a,b,c': expected 'source.txt,target.txt' or 'pairs.tsv'"),
    ("", "data.train_files='': expected"),
])
def test_bad_file_specs_are_refused(tmp_path, spec, message):
    with pytest.raises(DataError, match=message.replace("(", r"\(").replace(")", r"\)")):
        text.load_pairs(spec)


def test_a_split_with_no_usable_pair_is_refused(tmp_path):
    spec = two_files(tmp_path, ["", "x"], ["y", ""])
    with pytest.raises(DataError, match=r"0 pairs from 2 lines; skipped 2 with an empty side "
                                         r"\(lines 1, 2\): no usable sentence pair"):
        text.load_pairs(spec)


def text_config(tmp_path, **data):
    c = importlib.import_module("configs.text").get_config()
    c.data.update(vocab_size=300, vocab_sample=100_000, max_len=32, tokens_per_batch=8 * 32)
    c.data.update(data)
    c.model.update(num_layers=1, d_model=32, d_ff=64, num_heads=4, max_len=64)
    c.train.update(num_steps=3, log_every=1, eval_every=3, eval_batches=1, checkpoint_every=3,
                   devices=1)
    return c


def test_the_text_config_validates_its_files(tmp_path):
    c = text_config(tmp_path)
    assert c.data.name == "text"
    with pytest.raises(ConfigError, match="data.train_files is empty; data.name='text' needs"):
        config_lib.validate(c)
    c.data.train_files = "a.en,a.de"
    with pytest.raises(ConfigError, match="data.eval_files is empty"):
        config_lib.validate(c)
    c.data.eval_files = "dev.tsv"
    config_lib.validate(c)  # no test files needed: nothing is decoded at the end
    c.train.bleu_sentences = 10
    with pytest.raises(ConfigError, match=r"data.test_files is empty.*set both to 0"):
        config_lib.validate(c)
    c.data.test_files = "a,b,c"
    with pytest.raises(ConfigError, match="data.test_files='a,b,c' must be"):
        config_lib.validate(c)


def test_long_pairs_are_reported_with_their_lines_before_training(tmp_path, caplog):
    long_en = " ".join(en for en, _ in PAIRS[:12])
    src = [en for en, _ in PAIRS[:100]] + [long_en] + [en for en, _ in PAIRS[100:]]
    tgt = [de for _, de in PAIRS[:100]] + ["Lang ."] + [de for _, de in PAIRS[100:]]
    c = text_config(tmp_path, train_files=two_files(tmp_path, src, tgt),
                    eval_files=two_files(tmp_path, src[:20], tgt[:20], stem="dev"))
    with caplog.at_level(logging.WARNING):
        tok, data, rows, _, _, *_ = pipeline.data_for(c, tmp_path / "run", 1, 0, 1)
    too_long = [n + 1 for n, (a, b) in enumerate(zip(src, tgt, strict=True))
                if max(len(tok.encode(a)), len(tok.encode(b))) > 32]
    assert 101 in too_long
    assert (f"{len(too_long)} of {len(src)} pairs longer than data.max_len=32 tokens are "
            f"skipped in training (line{'s' if len(too_long) > 1 else ''} "
            f"{too_long[0]}") in caplog.text
    assert next(data.iterator)["inputs"].shape == (rows, 32)


def test_a_split_too_long_for_max_len_is_refused(tmp_path):
    long_en = " ".join(en for en, _ in PAIRS[:12])
    c = text_config(tmp_path, train_files=two_files(tmp_path, [long_en] * 3, ["Lang ."] * 3),
                    eval_files=two_files(tmp_path, ["a"], ["A"], stem="dev"))
    with pytest.raises(DataError, match="every pair is longer than data.max_len=32 tokens"):
        pipeline.data_for(c, tmp_path / "run", 1, 0, 1)


@pytest.mark.slow  # ~50 s on a busy 2-core CPU, mostly compiling the steps
def test_training_on_text_files(tmp_path):
    src, tgt = [en for en, _ in PAIRS], [de for _, de in PAIRS]
    c = text_config(tmp_path, train_files=two_files(tmp_path, src, tgt),
                    eval_files=write(tmp_path / "dev.tsv", [f"{a}\t{b}" for a, b in
                                                            PAIRS[:40]]))
    final = train.train_and_evaluate(c, tmp_path / "run")
    assert final["tokens"] > 0 and (tmp_path / "run" / "vocab" / "spm.model").exists()
    assert len(sources.get_source(c.data, "validation")) == 40


# A model whose checkpoints fit any disk: the free-space check before training (faults.py)
# comes first, and a base model's 6 checkpoints need about 5 GiB.
SMALL_MODEL = ("--config.model.num_layers=1", "--config.model.d_model=32",
               "--config.model.d_ff=64")


def test_the_main_command_names_the_bad_file(tmp_path):
    spec = two_files(tmp_path, ["a", "b", "c"], ["A", "B"])
    result = run_command("main", "--config=configs/text.py", f"--workdir={tmp_path / 'run'}",
                         f"--config.data.train_files={spec}", f"--config.data.eval_files={spec}",
                         *SMALL_MODEL)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and "train.de has 2 lines but" in last
    assert "line 3 of" in last


# Any bytes at all, in any encoding, at any path: tests/fuzz/test_text_files.py.
