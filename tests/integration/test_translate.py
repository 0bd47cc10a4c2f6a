"""The translate command: stdin or a file in, one translation per line out, in order."""

import itertools
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import sentencepiece
from hypothesis import HealthCheck, given, settings, strategies as st

from transformer_jax import translate
from transformer_jax.config import resume
from transformer_jax.data import sources
from transformer_jax.decoding import decode
from transformer_jax.errors import DataError
from transformer_jax.evaluation import restore, translation
from transformer_jax.evaluation.restore import WorkdirSpec
from transformer_jax.io import layout

from .. import helpers
from ..helpers import run_command

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def workdir(trained_workdir):
    return trained_workdir


def command(workdir, *args, stdin=b""):
    """The translate command, run in this process."""
    return run_command("translate", f"--workdir={workdir}", *args, stdin=stdin)


@pytest.mark.slow
def test_translates_a_file_in_order_with_empty_lines_kept(workdir, tmp_path):
    config = resume.workdir_config(workdir)
    source = sources.get_source(config.data, "test")
    sentences = [source[i][0] for i in range(5)]
    lines = [sentences[0], "", sentences[1], "  \t", *sentences[2:]]
    src = tmp_path / "src.txt"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = command(workdir, f"--input={src}", f"--output={tmp_path / 'out.txt'}",
                  "--config.decode.batch_size=2", "--config.decode.max_len_offset=20")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "translating" in out.stderr  # progress on stderr
    got = (tmp_path / "out.txt").read_text(encoding="utf-8").split("\n")
    assert got[-1] == "" and len(got) - 1 == len(lines)
    # The config's strategy (the paper's beam search), exactly as the library translates.
    loaded = restore.load_workdir(workdir, WorkdirSpec.from_config(config))
    decoding = decode.DecodeConfig.from_config(config.decode).replace(max_len_offset=20)
    assert decoding.strategy == "beam" and decoding.beam_size == 4
    expected = translation.translate(loaded.params, loaded.model_config, loaded.tokenizer, lines,
                                     decoding)
    assert got[:-1] == expected
    assert got[1] == got[3] == "" and all(got[i] for i in (0, 2, 4, 5, 6))


@pytest.mark.slow
def test_stdin_to_stdout_with_decode_overrides(workdir):
    config = resume.workdir_config(workdir)
    source = sources.get_source(config.data, "validation")
    sentences = [source[i][0] for i in range(3)]
    # The one run of the translate command in a process of its own: stdin and stdout pipes.
    out = subprocess.run([sys.executable, "-m", "transformer_jax.translate",
                          f"--workdir={workdir}", "--config.decode.strategy=greedy"], cwd=ROOT,
                         input="\r\n".join(sentences).encode(),  # CRLF, no final newline
                         capture_output=True, timeout=600)
    assert out.returncode == 0, out.stderr.decode()[-3000:]
    loaded = restore.load_workdir(workdir, WorkdirSpec.from_config(config))
    expected = translation.translate(loaded.params, loaded.model_config, loaded.tokenizer,
                                     sentences, decode.DecodeConfig(strategy="greedy"))
    assert out.stdout.decode().splitlines() == expected


def test_invalid_utf8_is_one_error_naming_the_line(workdir, tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"a good line\nanother\nbad \xff byte\n")
    with pytest.raises(DataError, match=r"bad.txt line 3: not valid UTF-8 \(byte 0xff at "
                                        r"byte 5\)"):
        translate.read_lines(str(bad))
    out = command(workdir, f"--input={bad}")
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        f"error: {bad} line 3: not valid UTF-8 (byte 0xff at byte 5)"]


def token_counts(workdir, lines):
    """Each line's length as the model takes it: the pieces of the workdir's SentencePiece
    model and the end-of-sentence token (0 for a blank line)."""
    sp = sentencepiece.SentencePieceProcessor(
        model_file=str(Path(workdir) / layout.VOCAB / layout.VOCAB_MODEL))
    return [len(sp.encode(line)) + 1 if line.strip() else 0 for line in lines]


@pytest.fixture(scope="module")
def long_input(workdir, tmp_path_factory):
    """(a file of short lines, a blank one and two too long for the model: one of 2,100
    words; its lines, their token counts, the model's limit)."""
    config = resume.workdir_config(workdir)
    source = sources.get_source(config.data, "test")
    short = [source[i][0] for i in range(3)]
    words = " ".join(short).split()
    lines = [short[0], " ".join(itertools.islice(itertools.cycle(words), 2100)), "", short[1],
             " ".join(words * 3), short[2]]
    limit = json.loads((Path(workdir) / layout.CONFIG).read_text())["model"]["max_len"]
    counts = token_counts(workdir, lines)
    assert [n > limit for n in counts] == [False, True, False, False, True, False], counts
    path = tmp_path_factory.mktemp("long") / "src.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path, lines, counts, limit


def test_long_lines_are_shortened_each_named_on_stderr(workdir, long_input, tmp_path):
    src, lines, counts, limit = long_input
    out = command(workdir, f"--input={src}", f"--output={tmp_path / 'out.txt'}",
                  "--config.decode.strategy=greedy", "--config.decode.max_len_offset=4")
    assert out.returncode == 0, out.stderr[-3000:]
    assert [line for line in out.stderr.splitlines() if "shortened" in line] == [
        f"warning: {src} line 2: {counts[1]} tokens, more than the model's {limit}; shortened "
        f"to its first {limit - 1} and the end-of-sentence token",
        f"warning: {src} line 5: {counts[4]} tokens, more than the model's {limit}; shortened "
        f"to its first {limit - 1} and the end-of-sentence token",
        f"warning: 2 of 6 lines shortened to the model's limit of {limit} tokens"]
    got = (tmp_path / "out.txt").read_text(encoding="utf-8").splitlines()
    assert len(got) == len(lines) and got[2] == "" and got[1]


def errors(out):
    """The error lines of a command's stderr (the others are its log); no traceback."""
    assert "Traceback" not in out.stderr
    return [line for line in out.stderr.splitlines() if line.startswith("error:")]


def test_max_input_len_refuses_a_longer_line_and_writes_nothing(workdir, long_input,
                                                                 tmp_path):
    src, lines, counts, limit = long_input
    most = max(n for n in counts if n <= limit)  # the short lines pass, the long ones do not
    target = tmp_path / "out.txt"
    out = command(workdir, f"--input={src}", f"--output={target}", f"--max_input_len={most}")
    assert out.returncode == 2
    assert errors(out) == [f"error: {src} line 2: {counts[1]} tokens, more than "
                           f"--max_input_len={most} (and 1 more)"]
    assert not target.exists() and list(tmp_path.iterdir()) == []
    # From stdin, the one long line alone.
    out = command(workdir, f"--max_input_len={most}", stdin=(lines[4] + "\n").encode())
    assert out.returncode == 2 and out.stdout == ""
    assert errors(out) == [
        f"error: <stdin> line 1: {counts[4]} tokens, more than --max_input_len={most}"]
    # More than the model takes is an error of the flag.
    out = command(workdir, f"--max_input_len={limit + 1}", stdin=b"x\n")
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        f"error: --max_input_len={limit + 1} must be between 1 and the model's limit of "
        f"{limit} tokens (model.max_len)"]


@pytest.mark.parametrize("args,message", [
    (["--config.model.d_model=64"], "error: --config.model.d_model: only --config.decode.* "
                                    "may be set here"),
    (["--config.decode.strategy=nucleus"], "error: decode.strategy='nucleus' is not one of "
                                           "greedy, beam, sample"),
    (["--config.decode.top_p=0"], "error: decode.top_p=0.0 must be a number in (0.0, 1.0]"),
    (["--config.decode.beam_size=x"], "error: flag --config.decode.beam_size=x: invalid "
                                      "literal for int()"),
    (["--config.decode.nosuch=1"], "error: unknown config field config.decode.nosuch"),
])
def test_bad_overrides_are_one_line(workdir, args, message):
    out = command(workdir, *args, stdin=b"x\n")
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), lines


def test_not_a_workdir(tmp_path):
    out = command(tmp_path, stdin=b"x\n")
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'config.json'}: no such file; --workdir must be the workdir of a "
        "training run"]


@pytest.mark.parametrize("damaged,message", [
    ("vocab/spm.model", "damaged vocabulary, not a SentencePiece model"),
    ("config.json", "not JSON (Expecting value at line 1, column 1)"),
])
@pytest.mark.parametrize("module", ["translate", "evaluate"])
def test_a_damaged_workdir_file_is_one_line_naming_it(workdir, tmp_path, module, damaged,
                                                      message):
    copy = tmp_path / "run"
    shutil.copytree(workdir, copy)
    (copy / damaged).write_bytes(b"\x00\x13 a file cut short by a full disk")
    out = run_command(module, f"--workdir={copy}", "--config.decode.strategy=greedy",
                      stdin=b"x\n")
    assert out.returncode == 2
    lines = [line for line in out.stderr.splitlines() if "error" in line.lower()]
    assert lines == [f"error: {copy / damaged}: {message}"], out.stderr[-2000:]
    assert "Traceback" not in out.stderr


def test_read_lines_takes_crlf_a_byte_order_mark_and_a_missing_final_newline(tmp_path):
    path = tmp_path / "src.txt"
    path.write_bytes(b"\xef\xbb\xbfone\r\n\r\ntwo\n  \nthree")
    assert translate.read_lines(str(path)) == ["one", "", "two", "  ", "three"]


# ----------------------------------------------------------------------------------------
# Any input (hypothesis): one output line per input line, never an unhandled exception

INPUT_LINES = st.one_of(
    # Any text but newlines and lone surrogates (which UTF-8 files cannot hold).
    st.text(st.characters(exclude_characters="\n", exclude_categories=("Cs",)), max_size=30),
    st.sampled_from(["", " ", "\t \r", "\u3000\u00a0", "Привет, мир", "東京は晴れです",
                     "مرحبا بالعالم", "a\x00b\x07c\x1b[0m\x0c\x1c", "line\u2028separator",
                     "\u0085next\x0bline"]),
    st.builds(lambda word, n: " ".join([word] * n), st.sampled_from(["the", "Zug", "猫"]),
              st.integers(500, 2000)),  # far beyond the model's 64 positions
)


@pytest.fixture(scope="module")
def loaded(workdir):
    return restore.load_workdir(workdir, helpers.workdir_spec(workdir))


@pytest.fixture(scope="module")
def greedy_by_hand(workdir, loaded):
    return helpers.greedy_by_hand(loaded.params, loaded.model_config,
                                  workdir / "vocab" / layout.VOCAB_MODEL)


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(INPUT_LINES, max_size=5), st.booleans())
def test_any_input_gives_one_translation_line_per_line(loaded, greedy_by_hand, tmp_path, lines,
                                                       final_newline):
    source, target = tmp_path / "in.txt", tmp_path / "out.txt"
    # The last line ends with a newline if asked or if it is empty (else it would not be one).
    ends = bool(lines) and (final_newline or lines[-1] == "")
    source.write_bytes(("\n".join(lines) + ("\n" if ends else "")).encode("utf-8"))
    sentences = translate.read_lines(str(source))
    assert len(sentences) == len(lines)
    # Greedy, one sentence a batch, a short output: one compilation per length bucket.
    decoding = decode.DecodeConfig(strategy="greedy", batch_size=1, max_len_offset=4)
    translations = translation.translate(loaded.params, loaded.model_config, loaded.tokenizer,
                                         sentences, decoding)
    translate.write_lines(str(target), translations)
    written = target.read_bytes()
    assert written.count(b"\n") == len(lines) and (not written or written.endswith(b"\n"))
    assert translate.read_lines(str(target)) == translations
    for sentence, output in zip(sentences, translations, strict=True):
        assert output == (greedy_by_hand(sentence, 4) if sentence.strip() else ""), sentence
