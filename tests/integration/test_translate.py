"""The translate command: stdin or a file in, one translation per line out, in order."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from transformer_jax import translate
from transformer_jax.config import resume
from transformer_jax.data import sources
from transformer_jax.decoding import decode
from transformer_jax.errors import DataError
from transformer_jax.evaluation import restore, translation

from ..helpers import run_command

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def workdir(trained_workdir):
    return trained_workdir


def command(workdir, *args, stdin=b""):
    """The translate command, run in this process."""
    return run_command("translate", f"--workdir={workdir}", *args, stdin=stdin)


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
    loaded = restore.load_workdir(workdir, config)
    decoding = decode.DecodeConfig.from_config(config.decode).replace(max_len_offset=20)
    assert decoding.strategy == "beam" and decoding.beam_size == 4
    expected = translation.translate(loaded.params, loaded.model_config, loaded.tokenizer, lines,
                                     decoding)
    assert got[:-1] == expected
    assert got[1] == got[3] == "" and all(got[i] for i in (0, 2, 4, 5, 6))


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
    loaded = restore.load_workdir(workdir, config)
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
    ("config.json", "not a JSON config (Expecting value: line 1 column 1 (char 0))"),
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
    config = resume.workdir_config(workdir)
    return restore.load_workdir(workdir, config)


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(INPUT_LINES, max_size=5), st.booleans())
def test_any_input_gives_one_translation_line_per_line(loaded, tmp_path, lines, final_newline):
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
        assert output == "" if not sentence.strip() else isinstance(output, str)
