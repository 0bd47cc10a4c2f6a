"""Stage 4: packing sentence pairs into fixed-length rows, several pairs to a row (numpy).

In: a chunk of pair indices of the epoch order (``order.py``) and the split's ids
(``tokens.py``). Out: rows, a dict of six int32 arrays [rows, row_len] (:class:`PackChunk`),
which ``batching.py`` cuts into batches. Training skips the pairs longer than a row, counted
by :class:`LengthFilter`; evaluation truncates them.

A packed row holds the source sides of some pairs in its ``inputs`` and their target sides,
in the same order, in its ``targets``. Pair k of a row has segment id k (1, 2, ...) on both
sides and positions that restart at 0, so the model's masks keep pairs apart; 0 is padding::

    inputs               [a1 a2 EOS b1 EOS  0 ]    targets              [A1 EOS B1 B2 EOS 0 ]
    inputs_segment_ids   [1  1  1   2  2    0 ]    targets_segment_ids  [1  1   2  2  2   0 ]
    inputs_positions     [0  1  2   0  1    0 ]    targets_positions    [0  1   0  1  2   0 ]

The algorithm is first fit over a window of open rows: each pair goes to the oldest open row
with room on both sides, or opens a new row; when more than ``open_rows`` rows are open the
oldest is closed. It runs once per chunk of a few thousand pairs, in a Python loop of a few
operations per pair; the arrays are then filled with vectorized numpy.

The pairs come as ``tokens.Ragged`` ids, a side's sequences end to end with their lengths:
selecting, truncating and packing them is array work with no Python loop over tokens.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence

import numpy as np

from transformer_jax.data.tokens import Ids, Ragged, ragged

FEATURES = ("inputs", "targets")
OPEN_ROWS = 32  # more open rows pack tighter and cost more per pair


def assign_rows(input_lengths: Sequence[int], target_lengths: Sequence[int], max_len: int,
                open_rows: int = OPEN_ROWS) -> list[int]:
    """The row each pair goes to (first fit over the last ``open_rows`` rows opened).

    Every length must be <= ``max_len``. Rows are numbered in the order they are opened.
    """
    rows: list[int] = []
    free_inputs: list[int] = []
    free_targets: list[int] = []
    window: list[int] = []
    for a, b in zip(input_lengths, target_lengths, strict=True):
        for row in window:
            if free_inputs[row] >= a and free_targets[row] >= b:
                break
        else:
            row = len(free_inputs)
            free_inputs.append(max_len)
            free_targets.append(max_len)
            window.append(row)
            if len(window) > open_rows:
                window.pop(0)
        free_inputs[row] -= a
        free_targets[row] -= b
        rows.append(row)
    return rows


def pack(inputs: Sequence[Sequence[int]], targets: Sequence[Sequence[int]], max_len: int,
         packing: bool = True, open_rows: int = OPEN_ROWS) -> dict[str, np.ndarray]:
    """Pairs of id lists -> packed rows: a dict of six int32 arrays [rows, max_len].

    ``inputs[k]`` and ``targets[k]`` are the two sides of pair k, each at most ``max_len``
    ids. Without ``packing`` every pair gets a row of its own.
    """
    return pack_ragged(ragged(inputs), ragged(targets), max_len, packing, open_rows)


def pack_ragged(inputs: Ragged, targets: Ragged, max_len: int, packing: bool = True,
                open_rows: int = OPEN_ROWS) -> dict[str, np.ndarray]:
    """:func:`pack` of pairs given as :class:`Ragged` ids, side by side."""
    sides = {"inputs": inputs, "targets": targets}
    n = len(inputs)
    if len(targets) != n:
        raise ValueError(f"{n} source sides but {len(targets)} target sides")
    if n and max(inputs.lengths.max(), targets.lengths.max()) > max_len:
        raise ValueError(f"a sequence is longer than max_len={max_len}")
    if packing:
        row_of = np.asarray(assign_rows(inputs.lengths.tolist(), targets.lengths.tolist(),
                                        max_len, open_rows), np.int64)
    else:
        row_of = np.arange(n, dtype=np.int64)
    num_rows = int(row_of.max()) + 1 if n else 0
    order = np.argsort(row_of, kind="stable")  # by row, in arrival order within a row
    rows = row_of[order]
    item = np.arange(n)
    first_in_row = np.ones(n, bool)
    first_in_row[1:] = rows[1:] != rows[:-1]
    row_start = np.maximum.accumulate(np.where(first_in_row, item, 0))
    segment = item - row_start + 1
    out: dict[str, np.ndarray] = {}
    for name, side in sides.items():
        flat, lens = side.take(order)
        total = len(flat)
        start = np.cumsum(lens) - lens  # of each pair in `flat`
        position = np.arange(total) - np.repeat(start, lens)
        column = np.repeat(start - start[row_start], lens) + position
        token_row = np.repeat(rows, lens)
        for suffix, values in (("", flat), ("_segment_ids", np.repeat(segment, lens)),
                               ("_positions", position)):
            array = np.zeros((num_rows, max_len), np.int32)
            array[token_row, column] = values
            out[name + suffix] = array
    return out


def padding_fraction(batch: dict[str, np.ndarray], feature: str = "targets") -> float:
    """Fraction of the slots of ``feature`` in the batch that hold padding."""
    return float(np.mean(batch[feature + "_segment_ids"] == 0))


@dataclasses.dataclass
class LengthFilter:
    """Counts the pairs that fit ``max_len`` tokens per side and those that do not.

    Called from grain's reading threads, hence the lock. The counts include pairs read
    ahead of the trainer and restart at 0 in a resumed run.
    """

    max_len: int
    skipped: int = 0
    kept: int = 0
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False)

    def fits(self, inputs: Ragged, targets: Ragged) -> np.ndarray:
        """Whether each pair fits; the counts go up by the pairs seen."""
        keep = np.maximum(inputs.lengths, targets.lengths) <= self.max_len
        kept = int(keep.sum())
        with self._lock:
            self.kept += kept
            self.skipped += len(keep) - kept
        return keep


class PackChunk:
    """A chunk of pair indices -> packed rows (read ids, filter or truncate, pack).

    Training drops over-long pairs through ``length_filter`` and shuffles the chunk's rows
    with a generator seeded by ``seed`` and the chunk's index (so the result depends on
    nothing but the data and the seed); evaluation (``length_filter=None``) truncates them,
    counting them in ``truncated``.
    """

    def __init__(self, ids: Ids, max_len: int, *, packing: bool = True,
                 length_filter: LengthFilter | None = None, seed: int | None = None):
        self.ids = ids
        self.max_len = max_len
        self.packing = packing
        self.length_filter = length_filter
        self.seed = seed
        self.truncated = 0
        self._lock = threading.Lock()

    def __call__(self, index: int, indices: np.ndarray) -> dict[str, np.ndarray]:
        inputs, targets = self.ids.read_ids(indices)
        if self.length_filter is not None:
            keep = self.length_filter.fits(inputs, targets)
            if not keep.all():
                inputs, targets = inputs.take(keep), targets.take(keep)
        else:
            n = self.max_len
            long_ = int(np.sum(np.maximum(inputs.lengths, targets.lengths) > n))
            if long_:
                with self._lock:
                    self.truncated += long_
                inputs, targets = inputs.truncated(n), targets.truncated(n)
        rows = pack_ragged(inputs, targets, self.max_len, self.packing)
        if self.seed is not None:
            order = np.random.default_rng([self.seed, index]).permutation(len(rows["inputs"]))
            rows = {k: v[order] for k, v in rows.items()}
        return rows
