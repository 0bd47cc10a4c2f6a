"""Your own parallel data: plain-text files read into a random-access source of pairs.

A split is named by one config field (``data.train_files``, ``data.eval_files`` or
``data.test_files``) in one of two forms:

* ``"source.txt,target.txt"``: two files with one sentence per line, line i of one being the
  translation of line i of the other;
* ``"pairs.tsv"``: one file with ``source<TAB>target`` on every line.

Files are UTF-8; lines end with ``\\n`` (a trailing ``\\r`` is dropped) and only ``\\n``
separates lines, so a stray form feed or Unicode line separator inside a sentence cannot shift
the pairing. Bad input is handled in one of two ways, and never silently:

* refused with :class:`DataError` naming the file and line: a missing file, files with
  different line counts, a TSV line without exactly one tab, a split with no usable pair;
* skipped, counted, and reported in one line at the end of loading, with the first line
  numbers of each kind: pairs with an empty (or all-blank) side, and lines that are not valid
  UTF-8. Pairs too long for a training row (``data.max_len`` tokens, or fewer where the rows
  are sized to the data) are counted once the vocabulary exists
  (``pipeline.report_long_pairs``) and skipped by the training pipeline's length filter.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from collections.abc import Iterator, Sequence

import numpy as np

from transformer_jax.errors import DataError
from transformer_jax.io import storage

FIRST_LINES_SHOWN = 5  # line numbers quoted per kind of skipped line


@dataclasses.dataclass
class LoadReport:
    """What loading a split kept and skipped; ``lines`` are 1-based line numbers."""

    spec: str
    total_lines: int = 0
    kept: int = 0
    empty: list[int] = dataclasses.field(default_factory=list)
    invalid_utf8: list[int] = dataclasses.field(default_factory=list)

    @property
    def skipped(self) -> int:
        return len(self.empty) + len(self.invalid_utf8)

    def summary(self) -> str:
        """One line: pairs kept, and each kind of skipped line with its first line numbers."""
        line = f"{self.spec}: {self.kept:,} pairs from {self.total_lines:,} lines"
        kinds = [(self.empty, "with an empty side"), (self.invalid_utf8, "not valid UTF-8")]
        parts = [f"{len(lines):,} {what} ({describe_lines(lines)})"
                 for lines, what in kinds if lines]
        return line + ("; skipped " + ", ".join(parts) if parts else "; nothing skipped")


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
    """``"a.txt,b.txt"`` or ``"pairs.tsv"`` -> one or two paths; DataError for anything else."""
    parts = [p.strip() for p in spec.split(",")]
    if not spec.strip() or len(parts) > 2 or not all(parts):
        raise DataError(f"{field}={spec!r}: expected 'source.txt,target.txt' or 'pairs.tsv'")
    paths = [storage.path(p) for p in parts]
    for part, path in zip(parts, paths, strict=True):
        if not path.is_file():
            raise DataError(f"{field}: no such file {part}")
    return paths


def _lines(path: storage.Path) -> Iterator[bytes]:
    """The raw lines of a file split on b"\\n" only, without the line end (and a leading BOM)."""
    with path.open("rb") as f:
        for number, line in enumerate(f):
            if number == 0 and line.startswith(b"\xef\xbb\xbf"):
                line = line[3:]
            yield line.rstrip(b"\n").rstrip(b"\r")


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
            src, tgt = src_bytes.decode("utf-8").strip(), tgt_bytes.decode("utf-8").strip()
        except UnicodeDecodeError:
            report.invalid_utf8.append(number)
            continue
        if not src or not tgt:
            report.empty.append(number)
            continue
        pairs.append((src, tgt))
        numbers.append(number)
    report.kept = len(pairs)
    if not pairs:
        raise DataError(f"{report.summary()}: no usable sentence pair")
    log = logging.warning if report.skipped else logging.info
    log("loaded %s", report.summary())
    return TextPairs(pairs, np.asarray(numbers, np.int64), report)
