"""Text data files: any bytes, in any encoding, as two files or one TSV, at any kind of path.
Accepted, the pairs are those the rules of data/text.py's docstring give (worked out here
byte by byte, character by character) and every line is counted in the load report;
refused, in one DataError naming the field or the file. Likewise the attention benchmark's
results that ``visualize --measured`` reads."""

import json
import os
import tempfile
import unicodedata
from pathlib import Path

from hypothesis import example, given, strategies as st

from transformer_jax.analysis import attention_cost
from transformer_jax.data import text
from transformer_jax.errors import DataError

from . import strategies as gen
from .fuzzing import accepted, examples, outcome

FIELD = "data.train_files"

# Lines as users' files hold them: any text without a newline (non-Latin scripts, control
# characters, blanks, invisible characters), very long lines, and bytes that are not UTF-8.
# (Lone surrogates are left out: a str holding one has no UTF-8 form; st.binary covers bytes.)
ANY_TEXT = st.text(st.characters(exclude_characters="\n", exclude_categories=("Cs",)),
                   max_size=40)
LINES = st.one_of(
    ANY_TEXT,
    st.sampled_from(["", " ", "\t \r", "\u3000", "Привет мир", "こんにちは世界", "مرحبا",
                     "a\x00b\x07c\x1b[0m", "\u202eright-to-left", "\ufeffbom", "\u200b\u200e",
                     "\u2060 \ufeff", "x\x85y", "form\x0cfeed", "line\u2028sep", "a\tb"]),
    st.builds(lambda piece, n: piece * n, st.text(
        st.characters(exclude_characters="\n", exclude_categories=("Cs",)), min_size=1,
        max_size=3), st.integers(2000, 6000)),
    st.binary(max_size=20).filter(lambda b: b"\n" not in b),
)
# How the bytes of a file are made from its lines.
ENCODINGS = ["utf-8", "utf-8-bom", "utf-16", "utf-16-le", "utf-32", "latin-1"]
# What the path given is.
KINDS = ["file", "file", "file", "file", "named pipe", "directory", "missing", "same file"]


def encode(lines, encoding, crlf, final_newline) -> bytes:
    end = "\r\n" if crlf else "\n"
    if encoding in ("utf-16", "utf-16-le", "utf-32", "latin-1"):
        texts = [x.decode("utf-8", "replace") if isinstance(x, bytes) else x for x in lines]
        joined = end.join(texts) + (end if final_newline else "")
        return joined.encode(encoding, errors="replace")
    raw = [x if isinstance(x, bytes) else x.encode("utf-8") for x in lines]
    data = end.encode().join(raw) + (end.encode() if final_newline else b"")
    return (b"\xef\xbb\xbf" + data) if encoding == "utf-8-bom" else data


def raw_lines(data: bytes):
    """The file's lines as the docstring says: split on \\n only, one \\r before it dropped,
    a UTF-8 byte-order mark dropped from the first."""
    pieces = data.split(b"\n")
    if pieces and pieces[-1] == b"":
        pieces.pop()
    lines = [p[:-1] if p.endswith(b"\r") else p for p in pieces]
    if lines and lines[0].startswith(b"\xef\xbb\xbf"):
        lines[0] = lines[0][3:]
    return lines


def refused_as_not_text(data: bytes) -> bool:
    """UTF-16 or UTF-32 (a byte-order mark first), or binary (a NUL byte in the first 8,000)."""
    return data[:2] in (b"\xff\xfe", b"\xfe\xff") or data[:4] == b"\x00\x00\xfe\xff" or \
        b"\x00" in data[:8000]


def side(raw: bytes):
    """One side of a pair as the docstring's rules keep it: None if it is not UTF-8; else its
    text with each control character (category Cc) and line or paragraph separator made a
    space and byte-order marks removed, stripped; "" when nothing visible is left."""
    try:
        decoded = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    out = ""
    for c in decoded:
        if c == "\ufeff":
            continue
        out += " " if unicodedata.category(c) == "Cc" or c in "\u2028\u2029" else c
    out = out.strip()
    shown = [c for c in out if not c.isspace() and unicodedata.category(c) not in ("Cc", "Cf")]
    return out if shown else ""


def expected_pairs(files: list[bytes]):
    """(pairs, their 1-based line numbers), or None when the files must be refused."""
    if any(refused_as_not_text(data) for data in files):
        return None
    lines = [raw_lines(data) for data in files]
    if len(files) == 1:
        fields = [line.split(b"\t") for line in lines[0]]
        if any(len(f) != 2 for f in fields):
            return None
        sides = fields
    else:
        if len(lines[0]) != len(lines[1]):
            return None
        sides = list(zip(lines[0], lines[1], strict=True))
    pairs, numbers = [], []
    for number, (src, tgt) in enumerate(sides, start=1):
        a, b = side(src), side(tgt)
        if a and b:
            pairs.append((a, b))
            numbers.append(number)
    return (pairs, numbers) if pairs else None


def make_path(directory: Path, name: str, data: bytes, kind: str) -> Path:
    path = directory / name
    if kind == "named pipe":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind != "missing":
        path.write_bytes(data)
    return path


@examples(60)
@given(st.lists(st.tuples(LINES, LINES), min_size=1, max_size=8), st.booleans(),
       st.sampled_from(ENCODINGS), st.sampled_from(ENCODINGS), st.booleans(), st.booleans(),
       st.sampled_from(KINDS))
@example([("the dog", "der Hund"), ("a cat", "eine Katze")], True, "utf-8", "utf-8", False,
         True, "file")  # valid
@example([("a", "b")], False, "utf-16", "utf-8", False, True, "file")  # UTF-16 read as text
@example([("a", "b")], True, "utf-16-le", "utf-8", False, True, "file")  # no mark: NULs
@example([("a\x00b", "c")], False, "utf-8", "utf-8", False, True, "file")  # NUL
@example([("x", "y"), ("\ufeffz", "w")], False, "utf-8", "utf-8", False, True, "file")
@example([("\u200b", "y")], False, "utf-8", "utf-8", False, True, "file")  # invisible only
@example([("a", "b")], False, "utf-8", "utf-8", False, True, "same file")
@example([("a", "b")], False, "utf-8", "utf-8", False, True, "named pipe")  # was a hang
def test_any_text_file_gives_the_pairs_of_the_rules_or_one_line(
        line_pairs, tsv, src_encoding, tgt_encoding, crlf, final_newline, kind):
    with tempfile.TemporaryDirectory() as directory:
        directory = Path(directory)
        if tsv:
            lines = [(s if isinstance(s, bytes) else s.encode()) + b"\t" +
                     (t if isinstance(t, bytes) else t.encode()) for s, t in line_pairs]
            files = [encode(lines, src_encoding, crlf, final_newline)]
            paths = [make_path(directory, "pairs.tsv", files[0], kind)]
        else:
            files = [encode([s for s, _ in line_pairs], src_encoding, crlf, final_newline),
                     encode([t for _, t in line_pairs], tgt_encoding, crlf, final_newline)]
            paths = [make_path(directory, "src.txt", files[0], kind)]
            paths.append(paths[0] if kind == "same file" else
                         make_path(directory, "tgt.txt", files[1], "file"))
        spec = ",".join(map(str, paths))
        expected = expected_pairs(files) if kind in ("file", "same file") else None
        if kind == "same file" and not tsv:
            expected = None
        ok, pairs = outcome(lambda: text.load_pairs(spec, FIELD),
                            names=[FIELD, *map(str, paths)], errors=(DataError,),
                            expect=None if kind == "same file" else expected is not None)
    if not ok:
        assert expected is None, f"refused although its pairs are {expected}: {pairs}"
        return
    report = pairs.report
    accepted(expected is not None and list(pairs) == expected[0]
             and list(pairs.line_numbers) == expected[1]
             and report.total_lines == report.kept + report.skipped
             and report.kept == len(expected[0]),
             f"read {list(pairs)[:3]}..., the rules give {expected}")


MEASURED = attention_cost.MEASURED_FILE.read_bytes()


@examples(30)
@given(st.one_of(gen.damaged_bytes(MEASURED), gen.mutated_json(json.loads(MEASURED)).map(
    lambda d: json.dumps(d).encode()), st.binary(max_size=40)),
    st.sampled_from(["file", "file", "file", "named pipe", "directory", "missing"]))
@example(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "file")  # found: a UnicodeDecodeError
@example(MEASURED, "file")
def test_any_measured_file_gives_results_or_one_line(raw, kind):
    """``visualize --measured=FILE``: the attention benchmark's results, each of the types
    the pictures use, or a refusal naming the file."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "attention_scaling.json"
        if kind == "named pipe":
            os.mkfifo(path)
        elif kind == "directory":
            path.mkdir()
        elif kind == "file":
            path.write_bytes(raw)
        ok, measured = outcome(lambda: attention_cost.measured_memory(path), names=[str(path)],
                               expect={MEASURED: True, b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR": False
                                       }.get(raw) if kind == "file" else False)
        if not ok:
            return
        rows = measured["results"]
        if raw == MEASURED:  # each row measured, a failed one left out
            accepted([(r["kind"], r["n"], r["pass"], r["time_s"]) for r in rows] == [
                (r["kind"], r["n"], r["pass"], r["time_s"])
                for r in json.loads(MEASURED)["results"] if not r["error"]], f"read {rows[:2]}")
            return
        accepted(all(type(r["n"]) is int and r["n"] > 0 and type(r["peak_bytes"]) is int
                     and r["pass"] in ("forward", "backward") for r in rows)
                 and isinstance(attention_cost.bill_table(attention_cost.quadratic_bill(),
                                                          measured), str),
                 f"read {rows[:2]}")
