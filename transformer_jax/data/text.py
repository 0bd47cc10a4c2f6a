"""Your own parallel data: plain-text files read into a random-access source of pairs.

A split is named by one config field (``data.train_files``, ``data.eval_files`` or
``data.test_files``) in one of two forms:

* ``"source.txt,target.txt"``: two files with one sentence per line, line i of one being the
  translation of line i of the other;
* ``"pairs.tsv"``: one file with ``source<TAB>target`` on every line.

Files are UTF-8 text; lines end with ``\\n`` (a trailing ``\\r`` is dropped) and only ``\\n``
separates lines, so a stray form feed or Unicode line separator inside a sentence cannot shift
the pairing. What is not text is handled by one of three rules, each stated here and in
docs/data.md, never silently:

* refused with :class:`DataError` naming the file (and line): a missing file, or a path that
  is not a regular file (a named pipe or device would be waited on forever); the same file
  given as source and target; a file in UTF-16 or UTF-32 (its byte-order mark) or with a
  NUL byte in its first 8,000 bytes (binary, or UTF-16/32 without a mark, as git judges a
  file); files with different line counts; a TSV line without exactly one tab; a split with
  no usable pair;
* cleaned, counted and reported: control characters (Unicode category Cc, such as NUL past
  the first 8,000 bytes, ESC, BEL, form feed, DEL and the C1 controls; in a sentence a tab
  too) and the Unicode line and paragraph separators become a space, and byte-order marks
  inside the file (U+FEFF, as left by concatenating files) are removed;
* skipped, counted and reported: pairs with a side that is empty once cleaned, or holds
  nothing visible (only blanks and invisible format characters such as U+200B zero width
  space or U+200E left-to-right mark), and lines that are not valid UTF-8.

The load report is one line at the end of loading, with the first line numbers of each
kind. Pairs too long for a training row (``data.max_len`` tokens, or fewer where the rows
are sized to the data) are counted once the vocabulary exists
(``rows.report_long_pairs``) and skipped by the training pipeline's length filter.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import re
import unicodedata
from collections.abc import Iterator, Sequence

import numpy as np

from transformer_jax.errors import DataError
from transformer_jax.io import storage

FIRST_LINES_SHOWN = 5  # line numbers quoted per kind of skipped line
# A NUL byte in a file's first bytes makes it binary (git's rule, over its first 8,000):
# refused. A NUL later is a control character like any other, cleaned.
BINARY_PROBE = 8000


@dataclasses.dataclass
class LoadReport:
    """What loading a split kept and skipped; ``lines`` are 1-based line numbers."""

    spec: str
    total_lines: int = 0
    kept: int = 0
    empty: list[int] = dataclasses.field(default_factory=list)
    invalid_utf8: list[int] = dataclasses.field(default_factory=list)
    cleaned: list[int] = dataclasses.field(default_factory=list)  # kept, control chars cleaned

    @property
    def skipped(self) -> int:
        return len(self.empty) + len(self.invalid_utf8)

    def summary(self) -> str:
        """One line: pairs kept, the lines cleaned and each kind of skipped line, with
        their first line numbers."""
        line = f"{self.spec}: {self.kept:,} pairs from {self.total_lines:,} lines"
        if self.cleaned:
            line += (f"; cleaned control characters in {len(self.cleaned):,} "
                     f"({describe_lines(self.cleaned)})")
        kinds = [(self.empty, "with an empty side"), (self.invalid_utf8, "not valid UTF-8")]
        parts = [f"{len(lines):,} {what} ({describe_lines(lines)})"
                 for lines, what in kinds if lines]
        return line + ("; skipped " + ", ".join(parts) if parts else "; nothing skipped")


# Control characters (category Cc: C0 but newline, DEL, C1) and the Unicode line and
# paragraph separators become a space; byte-order marks inside the text are removed.
_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029]")
_BOM = "\ufeff"
# Byte-order marks of the encodings read as text by mistake, longest first.
_OTHER_ENCODINGS = ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"),
                    (b"\xff\xfe", "UTF-16"), (b"\xfe\xff", "UTF-16"))


def clean(text: str) -> tuple[str, bool]:
    """(``text`` with its control characters and line separators replaced by a space and
    its byte-order marks removed, stripped; whether anything was replaced or removed)."""
    cleaned = _CONTROL.sub(" ", text.replace(_BOM, ""))
    return cleaned.strip(), cleaned != text


def visible(text: str) -> bool:
    """Whether ``text`` shows anything: a character that is not blank, a control or an
    invisible format character (category Cf: zero-width spaces and joiners, direction
    marks)."""
    return any(not c.isspace() and unicodedata.category(c) not in ("Cc", "Cf") for c in text)


def describe_lines(lines: list[int]) -> str:
    shown = ", ".join(str(n) for n in lines[:FIRST_LINES_SHOWN])
    more = ", ..." if len(lines) > FIRST_LINES_SHOWN else ""
    return f"line{'s' if len(lines) > 1 else ''} {shown}{more}"


class TextPairs(Sequence):
    """Random access to the (source, target) pairs of a text split, with their line numbers.

    ``line_numbers[i]`` is the 1-based line that pair ``i`` came from.
    """

    def __init__(self, pairs: list[tuple[str, str]], line_numbers: np.ndarray,
                 report: LoadReport):
        self.pairs = pairs
        self.line_numbers = line_numbers
        self.report = report
        self.name = report.spec

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, index: int) -> tuple[str, str]:  # type: ignore[override]
        return self.pairs[index]

    def __repr__(self) -> str:
        return f"TextPairs({self.name}, {len(self)} pairs)"


def split_spec(spec: str, field: str) -> list[storage.Path]:
    """``"a.txt,b.txt"`` or ``"pairs.tsv"`` -> one or two paths of regular files; DataError
    for anything else (a missing file, a named pipe, the same file twice)."""
    parts = [p.strip() for p in spec.split(",")]
    if not spec.strip() or len(parts) > 2 or not all(parts):
        raise DataError(f"{field}={spec!r}: expected 'source.txt,target.txt' or 'pairs.tsv'")
    try:
        paths = [storage.path(p) for p in parts]
    except ValueError as e:  # a NUL in the name
        raise DataError(f"{field}={spec!r}: not a file name ({e})") from None
    for part, path in zip(parts, paths, strict=True):
        why = storage.not_a_file(path)
        if why == "no such file":
            raise DataError(f"{field}: no such file {part}")
        if why:
            raise DataError(f"{field}: {part} is {why}, not a regular file")
    if len(paths) == 2 and _same_file(*paths):
        raise DataError(f"{field}={spec!r}: the source and target are the same file; give "
                        "the two sides' files, or one 'pairs.tsv'")
    return paths


def _same_file(a: storage.Path, b: storage.Path) -> bool:
    if storage.is_remote(a) or storage.is_remote(b):
        return os.fspath(a) == os.fspath(b)
    return os.path.samefile(os.fspath(a), os.fspath(b))


def _lines(path: storage.Path) -> Iterator[bytes]:
    """The raw lines of a file split on b"\\n" only, without the line end (and a leading UTF-8
    BOM); DataError for a file in UTF-16 or UTF-32, or with a NUL byte in its first
    BINARY_PROBE bytes (binary, as git judges a file)."""
    with path.open("rb") as f:
        offset = 0
        for number, line in enumerate(f, start=1):
            if number == 1:
                for mark, encoding in _OTHER_ENCODINGS:
                    if line.startswith(mark):
                        raise DataError(f"{path}: {encoding} text (its byte-order mark); the "
                                        f"files must be UTF-8 (iconv -f {encoding} -t UTF-8)")
            if offset < BINARY_PROBE and b"\0" in line[:BINARY_PROBE - offset]:
                raise DataError(f"{path}:{number}: a NUL byte in the first {BINARY_PROBE:,} "
                                "bytes: the file is binary, or UTF-16/UTF-32 without a "
                                "byte-order mark, not UTF-8 text (convert it to UTF-8)")
            offset += len(line)
            if number == 1:
                line = line.removeprefix(b"\xef\xbb\xbf")
            yield line.rstrip(b"\n").removesuffix(b"\r")


def _raw_pairs(paths: list[storage.Path]) -> Iterator[tuple[int, bytes, bytes]]:
    """(line number, source bytes, target bytes) for every line; refuses structural errors."""
    if len(paths) == 1:
        for number, line in enumerate(_lines(paths[0]), start=1):
            fields = line.split(b"\t")
            if len(fields) != 2:
                raise DataError(f"{paths[0]}:{number}: expected 2 tab-separated fields "
                                f"(source<TAB>target), found {len(fields)}")
            yield number, fields[0], fields[1]
        return
    src_path, tgt_path = paths
    missing = object()
    src_lines, tgt_lines = _lines(src_path), _lines(tgt_path)
    for number, (src, tgt) in enumerate(
            itertools.zip_longest(src_lines, tgt_lines, fillvalue=missing), start=1):
        if src is missing or tgt is missing:
            short, long_, rest = ((src_path, tgt_path, tgt_lines) if src is missing
                                  else (tgt_path, src_path, src_lines))
            total = number + sum(1 for _ in rest)
            raise DataError(f"{short} has {number - 1:,} lines but {long_} has {total:,}: "
                            f"line {number} of {long_} has no counterpart; the files must "
                            "be line-aligned translations")
        yield number, src, tgt  # type: ignore[misc]


def load_pairs(spec: str, field: str = "data.train_files") -> TextPairs:
    """Reads a text split (see the module docstring) into memory.

    ``field`` names the config field in error messages and the report. Logs the report's
    summary at the end of loading; raises DataError for structural errors or when no pair is
    left.
    """
    paths = split_spec(spec, field)
    report = LoadReport(f"{field}={spec}")
    pairs: list[tuple[str, str]] = []
    numbers: list[int] = []
    for number, src_bytes, tgt_bytes in _raw_pairs(paths):
        report.total_lines = number
        try:
            (src, src_cleaned), (tgt, tgt_cleaned) = (
                clean(src_bytes.decode("utf-8")), clean(tgt_bytes.decode("utf-8")))
        except UnicodeDecodeError:
            report.invalid_utf8.append(number)
            continue
        if not visible(src) or not visible(tgt):
            report.empty.append(number)
            continue
        if src_cleaned or tgt_cleaned:
            report.cleaned.append(number)
        pairs.append((src, tgt))
        numbers.append(number)
    report.kept = len(pairs)
    if not pairs:
        raise DataError(f"{report.summary()}: no usable sentence pair")
    log = logging.warning if report.skipped or report.cleaned else logging.info
    log("loaded %s", report.summary())
    return TextPairs(pairs, np.asarray(numbers, np.int64), report)
