"""The row length: how many slots a packed training row has, chosen once for a run.

In: :class:`RowSpec` (``data.row_len``, ``data.max_len``, the dataset's ``rows_from_data``),
the training split and the vocabulary. Out: the row length that packing (``packing.py``) and
the batch shape (``batching.py``) use, and the report of the pairs longer than a row.

The row length (:func:`row_len_of`) is ``data.row_len`` when set. Otherwise the built-in
corpus and text files get rows sized to their sentences, chosen once when the vocabulary is
built: the smallest multiple of 64 slots that holds 99.9% of a sample of pairs (at most
``data.max_len``), logged and recorded next to the vocabulary, so that a resumed run keeps
it; WMT keeps rows of ``data.max_len``. Short sentences in rows of 256 slots would pay for
256 x 256 attention scores a row, nearly all of them masked. Training pairs longer than a
row are counted and skipped, as those longer than ``data.max_len`` are; evaluation packs
rows of ``data.max_len`` and truncates only beyond it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from transformer_jax.data import text, tokenizer as tokenizer_lib
from transformer_jax.data.order import epoch_order
from transformer_jax.data.tokenizer import Tokenizer
from transformer_jax.data.tokens import Ids, encode_pairs, read_pairs
from transformer_jax.errors import DataError
from transformer_jax.io import layout, storage, strict_json, workdirs

ROW_MULTIPLE = 64  # a row length chosen from the data is a multiple of this many slots,
ROW_SHARE = 0.999  # the smallest that holds this share of the pairs measured
ROW_SAMPLE_PAIRS = 20_000  # pairs measured, in the vocabulary sample's order
CHUNK_PAIRS = 4096  # pairs tokenized together when measured


@dataclasses.dataclass(frozen=True)
class RowSpec:
    """What decides the row length: ``data.row_len`` (0: chosen), ``data.max_len`` and
    whether the dataset's rows are sized to its data (its Dataset's ``rows_from_data``)."""

    max_len: int
    row_len: int = 0
    from_data: bool = False


def row_len_path(workdir: storage.PathLike) -> storage.Path:
    """Where a run records the row length chosen from its data: next to its vocabulary."""
    return tokenizer_lib.vocab_path(workdir).with_name(layout.ROW_LEN)


def pair_lengths(source: Sequence[tuple[str, str]], tokenizer: Tokenizer,
                 num_pairs: int = ROW_SAMPLE_PAIRS, seed: int = 0) -> np.ndarray:
    """Tokens of the longer side (end of sentence included) of ``num_pairs`` pairs of
    ``source`` (all of them if fewer), taken in the order of :func:`order.epoch_order`."""
    order = epoch_order(len(source), seed)
    n = min(num_pairs, len(source))
    lengths: list[int] = []
    for start in range(0, n, CHUNK_PAIRS):
        inputs, targets = encode_pairs(tokenizer, read_pairs(
            source, order.positions(start, min(start + CHUNK_PAIRS, n))))
        lengths.extend(max(len(a), len(b)) for a, b in zip(inputs, targets, strict=True))
    return np.asarray(lengths, np.int64)


def row_len_holding(lengths: np.ndarray, max_len: int, share: float = ROW_SHARE,
                    multiple: int = ROW_MULTIPLE) -> int:
    """The smallest multiple of ``multiple`` slots that holds at least ``share`` of the pairs
    whose ``lengths`` (tokens of the longer side) are given, and at most ``max_len``."""
    if not len(lengths):
        raise DataError("no sentence pair to size the rows by")
    allowed_out = math.floor((1 - share) * len(lengths) + 1e-9)  # pairs that need not fit
    need = int(np.sort(lengths)[len(lengths) - 1 - allowed_out])
    return min(max_len, -(-need // multiple) * multiple)


def row_len_of(spec: RowSpec, workdir: storage.PathLike, source: Sequence[tuple[str, str]],
               tokenizer: Tokenizer, is_chief: bool = True) -> int:
    """The slots of a training row (see the module docstring): ``spec.row_len`` when set;
    ``spec.max_len`` for datasets whose rows are not sized to the data; otherwise the length
    recorded in the workdir (:func:`row_len_path`) or, the first time,
    :func:`row_len_holding` of :func:`pair_lengths`, logged and recorded (by the chief).

    The record is read, not measured again, so a resumed run keeps its rows even if the data
    files changed. A workdir with checkpoints and no record trained on rows of data.max_len
    (before rows were sized to the data), and keeps them.
    """
    if spec.row_len:
        return spec.row_len
    if not spec.from_data:
        return spec.max_len
    path = row_len_path(workdir)
    if path.exists():
        return _recorded_row_len(path, spec.max_len)
    if workdirs.checkpoint_steps_on_disk(workdir):
        row_len = spec.max_len
        record: dict[str, Any] = {"row_len": row_len, "chosen_by": "data.max_len: checkpoints "
                                  "trained before rows were sized to the data"}
        logging.warning("%s: no recorded row length; its checkpoints were trained on rows of "
                        "data.max_len=%d slots, which it keeps", workdir, row_len)
    else:
        lengths = pair_lengths(source, tokenizer)
        row_len = row_len_holding(lengths, spec.max_len)
        held = float(np.mean(lengths <= row_len))
        record = {"row_len": row_len,
                  "chosen_by": f"the smallest multiple of {ROW_MULTIPLE} slots holding "
                               f"{ROW_SHARE:.1%} of the pairs measured, at most "
                               f"data.max_len={spec.max_len}",
                  "pairs_measured": len(lengths), "share_held": round(held, 6),
                  "longest_measured": int(lengths.max())}
        logging.info("rows of %d slots, sized to the data (data.row_len=0): they hold %.2f%% "
                     "of %d pairs measured (the longest %d tokens; data.max_len=%d); longer "
                     "training pairs are counted and skipped", row_len, 100 * held,
                     len(lengths), record["longest_measured"], spec.max_len)
    if is_chief:
        path.parent.mkdir(parents=True, exist_ok=True)
        storage.write_atomically(path, json.dumps(record, indent=2))
    return row_len


def _recorded_row_len(path: storage.Path, max_len: int) -> int:
    try:
        record, why = strict_json.read(path), ""
    except strict_json.Damaged as e:
        record, why = None, f" ({str(e).removeprefix(f'{path}: ')})"
    row_len = record.get("row_len") if record is not None else None
    if isinstance(row_len, bool) or not isinstance(row_len, int) or not 1 <= row_len <= max_len:
        raise DataError(f"{path}: damaged{why}, no row length of 1 to data.max_len={max_len} slots "
                        "in it; restore it or train in another --workdir")
    logging.info("rows of %d slots, as recorded in %s", row_len, path)
    return row_len


def row_limit(spec: RowSpec, row_len: int) -> str:
    """The setting that bounds a training pair's length, in words for the logs:
    "data.max_len=256 tokens", "data.row_len=64 tokens" or "the 64 slots of rows sized to
    the data"."""
    if row_len == spec.max_len:
        return f"data.max_len={row_len} tokens"
    if spec.row_len:
        return f"data.row_len={row_len} tokens"
    return f"the {row_len} slots of rows sized to the data"


def report_long_pairs(source: text.TextPairs, ids: Ids, max_len: int,
                      chunk: int = 10_000, limit: str = "") -> list[int]:
    """Line numbers of the pairs of a text split with a side longer than ``max_len`` tokens
    (end of sentence included), logged in one line; training skips these pairs. ``ids`` are
    the split's ids (``tokens.as_ids``). ``limit`` names the setting that bounds them in the
    messages (:func:`row_limit`; default data.max_len)."""
    limit = limit or f"data.max_len={max_len} tokens"
    long_lines: list[int] = []
    for start in range(0, len(source), chunk):
        inputs, targets = ids.read_ids(range(start, min(start + chunk, len(source))))
        long_ = np.flatnonzero(np.maximum(inputs.lengths, targets.lengths) > max_len)
        long_lines.extend(source.line_numbers[start + long_].tolist())
    long_lines = sorted(set(long_lines))
    if len(long_lines) == len(source):
        fix = ("raise data.max_len (and model.max_len)" if limit.startswith("data.max_len")
               else "raise data.row_len (at most data.max_len)" if limit.startswith("data.")
               else "the rows were sized to other data; train in another --workdir")
        raise DataError(f"{source.name}: every pair is longer than {limit}; {fix}")
    if long_lines:
        logging.warning("%s: %d of %d pairs longer than %s are skipped in training (%s)",
                        source.name, len(long_lines), len(source), limit,
                        text.describe_lines(long_lines))
    return long_lines
