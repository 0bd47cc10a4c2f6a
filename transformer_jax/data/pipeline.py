"""From text pairs to batches: tokenize, skip over-long pairs (counted), pack, batch (grain).

Training batches are packed: each row of ``max_len`` slots holds several sentence pairs, told
apart by segment ids (1, 2, ...; 0 is padding) and restarting positions, which the model's
masks use. A batch is a dict of int32 arrays [rows, max_len]::

    inputs, inputs_segment_ids, inputs_positions,
    targets, targets_segment_ids, targets_positions

The training iterator is a grain ``DatasetIterator``: it follows the seed, and its position
(``get_state``) is saved with every checkpoint, so a resumed run sees exactly the batches an
uninterrupted one would have. In a multi-host run each process reads every
``process_count``-th pair starting at its ``process_index``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any

import grain
import numpy as np

from transformer_jax.data.tokenizer import Tokenizer

FEATURES = ("inputs", "targets")


@dataclasses.dataclass
class LengthFilter:
    """Keeps pairs whose sides both fit ``max_len`` tokens; counts the ones it skips."""

    max_len: int
    skipped: int = 0
    kept: int = 0

    def __call__(self, example: dict[str, np.ndarray]) -> bool:
        fits = all(len(example[f]) <= self.max_len for f in FEATURES)
        if fits:
            self.kept += 1
        else:
            self.skipped += 1
        return fits


class Tokenize(grain.transforms.Map):
    """(source, target) text -> {"inputs": ids, "targets": ids}, each ending with EOS."""

    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer = tokenizer

    def map(self, pair: tuple[str, str]) -> dict[str, np.ndarray]:
        src, tgt = pair
        return {"inputs": np.asarray(self.tokenizer.encode(src), np.int32),
                "targets": np.asarray(self.tokenizer.encode(tgt), np.int32)}


def _pad_unpacked(example: dict[str, np.ndarray], max_len: int) -> dict[str, np.ndarray]:
    out = {}
    for f in FEATURES:
        ids = example[f]
        n = len(ids)
        out[f] = np.pad(ids, (0, max_len - n))
        out[f + "_segment_ids"] = (np.arange(max_len) < n).astype(np.int32)
        out[f + "_positions"] = np.where(np.arange(max_len) < n, np.arange(max_len), 0).astype(
            np.int32)
    return out


@dataclasses.dataclass
class TrainData:
    """The training iterator and the filter whose counts are logged."""

    iterator: Any  # grain DatasetIterator: next(), get_state(), set_state()
    length_filter: LengthFilter
    rows: int  # rows per batch on this process

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        return self.iterator


def rows_per_batch(tokens_per_batch: int, max_len: int, multiple: int) -> int:
    """Rows of ``max_len`` slots that hold about ``tokens_per_batch`` tokens, rounded to a
    positive multiple of ``multiple`` (the number of devices)."""
    rows = max(tokens_per_batch // max_len, 1)
    return max(multiple, (rows // multiple) * multiple)


def train_data(source: Sequence[tuple[str, str]], tokenizer: Tokenizer, *, max_len: int,
               rows: int, seed: int, packing: bool = True, process_index: int = 0,
               process_count: int = 1) -> TrainData:
    """An endless, shuffled (reshuffled every epoch), packed stream of training batches.

    ``rows`` is the number of rows per batch on this process.
    """
    length_filter = LengthFilter(max_len)
    ds = grain.MapDataset.source(source)
    if process_count > 1:
        ds = ds[process_index::process_count]
    ds = ds.shuffle(seed=seed).repeat(None).map(Tokenize(tokenizer)).filter(length_filter)
    it_ds = ds.to_iter_dataset()
    if packing:
        it_ds = grain.experimental.FirstFitPackIterDataset(
            it_ds, length_struct={f: max_len for f in FEATURES}, num_packing_bins=rows,
            seed=seed)
    else:
        it_ds = it_ds.map(lambda ex: _pad_unpacked(ex, max_len))
    it_ds = it_ds.batch(rows, drop_remainder=True)
    return TrainData(iter(it_ds), length_filter, rows)


def eval_batches(source: Sequence[tuple[str, str]], tokenizer: Tokenizer, *, max_len: int,
                 rows: int, max_batches: int = 0) -> Iterator[dict[str, np.ndarray]]:
    """One ordered pass over a split in packed batches for loss and perplexity.

    Pairs longer than ``max_len`` are truncated (evaluation must see every sentence). The
    last batch is padded with empty rows so every batch has the same shape.
    """

    def truncate(ex: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {f: ex[f][:max_len] for f in FEATURES}

    ds = grain.MapDataset.source(source).map(Tokenize(tokenizer)).map(truncate)
    it_ds = grain.experimental.FirstFitPackIterDataset(
        ds.to_iter_dataset(), length_struct={f: max_len for f in FEATURES},
        num_packing_bins=rows, shuffle_bins=False)
    it_ds = it_ds.batch(rows, drop_remainder=False)
    for i, batch in enumerate(it_ds):
        if max_batches and i >= max_batches:
            return
        n = len(batch["inputs"])
        if n < rows:
            batch = {k: np.pad(v, ((0, rows - n), (0, 0))) for k, v in batch.items()}
        yield batch


def padding_fraction(batch: dict[str, np.ndarray]) -> float:
    """Fraction of target slots in the batch that hold padding."""
    return float(np.mean(batch["targets_segment_ids"] == 0))


def pad_batch(sequences: Sequence[Sequence[int]], length: int) -> np.ndarray:
    """Right-pads id lists with 0 into an int32 array [len(sequences), length]."""
    out = np.zeros((len(sequences), length), np.int32)
    for i, seq in enumerate(sequences):
        out[i, : len(seq)] = seq[:length]
    return out
