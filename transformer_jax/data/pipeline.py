"""From text pairs to batches: tokenize, skip over-long pairs (counted), pack, batch (grain).

Training batches are packed (``packing.py``): each row of ``row_len`` slots holds several
sentence pairs, told apart by segment ids (1, 2, ...; 0 is padding) and restarting
positions, which the model's masks use. A batch is a dict of int32 arrays [rows, row_len]::

    inputs, inputs_segment_ids, inputs_positions,
    targets, targets_segment_ids, targets_positions

grain orders the work: the pair indices of an epoch are shuffled by the seed (reshuffled every
epoch, :class:`EpochOrder`), cut into chunks of ``CHUNK_PAIRS``, and each chunk's ids are read
and packed in one go by reading threads; ``RebatchIterDataset`` cuts the rows into batches.
The ids come from the split's token cache, tokenized once (``token_cache.py``), or, without
one, from SentencePiece on the fly; both give the same ids, hence the same batches. Doing a
chunk at a time batches the array_record reads (and SentencePiece calls), which cost far more
one pair at a time.

The paper's ~25,000 source and ~25,000 target tokens per step become ``rows`` rows of
``row_len`` slots per side (:func:`batch_shape`): rows x row_len x grad_accum_steps is
about ``data.tokens_per_batch``; the padding fraction of each batch is logged.

The row length (:func:`row_len_of`) is ``data.row_len`` when set. Otherwise the built-in
corpus and text files get rows sized to their sentences, chosen once when the vocabulary is
built: the smallest multiple of 64 slots that holds 99.9% of a sample of pairs (at most
``data.max_len``), logged and recorded next to the vocabulary, so that a resumed run keeps
it; WMT keeps rows of ``data.max_len``. Short sentences in rows of 256 slots would pay for
256 x 256 attention scores a row, nearly all of them masked. Training pairs longer than a
row are counted and skipped, as those longer than ``data.max_len`` are; evaluation packs
rows of ``data.max_len`` and truncates only beyond it.

The training iterator is a grain ``DatasetIterator``: it follows the seed, and its position
(``get_state``) is saved with every checkpoint, so a resumed run sees exactly the batches an
uninterrupted one would have. In a multi-host run each process reads every
``process_count``-th pair starting at its ``process_index``, so in every epoch the processes
see disjoint parts of the split that together make all of it.

:func:`data_for` puts it together for a config: source, vocabulary, batch shape, iterator.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
import os
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import grain
import numpy as np

from transformer_jax.config import datasets
from transformer_jax.data import (
    packing as packing_lib,
    sources,
    text,
    token_cache,
    tokenizer as tokenizer_lib,
)
from transformer_jax.data.packing import Ragged
from transformer_jax.data.token_cache import Ids, TokenizedPairs, encode_pairs, read_pairs
from transformer_jax.data.tokenizer import Tokenizer
from transformer_jax.errors import DataError
from transformer_jax.io import layout, storage, workdirs

FEATURES = packing_lib.FEATURES
# Pairs read, tokenized and packed together. Bigger chunks pack tighter (only the last few
# rows of a chunk are left part-empty) and batch the reads and SentencePiece calls better.
CHUNK_PAIRS = 4096
# Threads that read (and tokenize) and pack chunks ahead of the trainer (array_record reads and
# SentencePiece run outside the GIL); experiments/benchmarks/input_pipeline.py measures it.
READ_THREADS = max(2, min(8, (os.cpu_count() or 2) // 2))
PREFETCH_CHUNKS = 2 * READ_THREADS  # chunks read ahead (a chunk is a few batches)
TOKENS_PER_BATCH_TOLERANCE = 0.1  # warn when whole rows miss data.tokens_per_batch by more


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


def as_ids(source: Sequence[tuple[str, str]] | Ids, tokenizer: Tokenizer | None) -> Ids:
    """The ids of a split: ``source`` itself when it holds ids (a token cache), its pairs
    tokenized on the fly by ``tokenizer`` otherwise."""
    if hasattr(source, "read_ids"):
        return source  # type: ignore[return-value]
    if tokenizer is None:
        raise ValueError(f"{source!r} holds text: a tokenizer is needed")
    return TokenizedPairs(source, tokenizer)  # type: ignore[arg-type]


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
        rows = packing_lib.pack_ragged(inputs, targets, self.max_len, self.packing)
        if self.seed is not None:
            order = np.random.default_rng([self.seed, index]).permutation(len(rows["inputs"]))
            rows = {k: v[order] for k, v in rows.items()}
        return rows


def _read_options() -> grain.ReadOptions:
    return grain.ReadOptions(num_threads=READ_THREADS, prefetch_buffer_size=PREFETCH_CHUNKS)


def _has_rows(rows: dict[str, np.ndarray]) -> bool:
    """False for a chunk whose every pair was too long (rebatching needs a row at least)."""
    return len(rows["inputs"]) > 0


@dataclasses.dataclass
class TrainData:
    """The training iterator and the filter whose counts are logged."""

    iterator: Any  # grain DatasetIterator: next(), get_state(), set_state()
    length_filter: LengthFilter
    rows: int  # rows per batch on this process

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        return self.iterator


def rows_per_batch(tokens_per_batch: float, row_len: int, multiple: int) -> int:
    """Rows of ``row_len`` slots that hold about ``tokens_per_batch`` tokens, rounded to the
    nearest positive multiple of ``multiple`` (the number of devices)."""
    return max(1, round(tokens_per_batch / row_len / multiple)) * multiple


@dataclasses.dataclass(frozen=True)
class BatchShape:
    """How ``data.tokens_per_batch`` per optimizer step becomes rows of ``row_len`` slots.

    ``rows`` is the rows of one micro-batch summed over all devices and processes; an
    optimizer step sums ``grad_accum_steps`` micro-batches.
    """

    rows: int
    row_len: int
    grad_accum_steps: int
    process_count: int

    @property
    def local_rows(self) -> int:
        """Rows of a micro-batch that this process reads."""
        return self.rows // self.process_count

    @property
    def slots_per_step(self) -> int:
        """Token slots per side per optimizer step: an upper bound on its tokens."""
        return self.rows * self.row_len * self.grad_accum_steps


def batch_shape(tokens_per_batch: int, row_len: int, grad_accum_steps: int = 1,
                num_devices: int = 1, process_count: int = 1, num_shards: int = 0) -> BatchShape:
    """The rows of ``row_len`` slots per micro-batch for about ``tokens_per_batch`` slots per
    optimizer step.

    ``num_devices`` is the devices per process; every device gets the same whole rows, and
    so does every data shard (``num_shards``, 0: one per process).
    """
    rows = rows_per_batch(tokens_per_batch / grad_accum_steps, row_len,
                          math.lcm(num_devices * process_count, num_shards or process_count))
    return BatchShape(rows, row_len, grad_accum_steps, process_count)


class EpochOrder(grain.MapDataset):
    """The indices of one shard's pairs (every ``num_shards``-th of ``num_pairs`` from
    ``shard``), epoch after epoch: element i of epoch e (index e * len + i) is element i of
    the permutation of the shard drawn by ``np.random.default_rng([seed, e])``, so every
    epoch is reshuffled; in index order when ``seed`` is None. Nothing is read.

    A numpy permutation a epoch (kept for the two latest epochs) costs nanoseconds a pair,
    where shuffling index by index costs microseconds: as much as reading and packing a pair
    from the token cache.
    """

    def __init__(self, num_pairs: int, seed: int | None, shard: int = 0, num_shards: int = 1):
        super().__init__()
        self.num_pairs, self.seed, self.shard, self.num_shards = (num_pairs, seed, shard,
                                                                  num_shards)
        self.length = len(range(shard, num_pairs, num_shards))
        self._epochs: dict[int, np.ndarray] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self.length

    def __str__(self) -> str:
        return (f"EpochOrder({self.num_pairs} pairs, seed={self.seed}, shard {self.shard} of "
                f"{self.num_shards})")

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.slice(index)
        return int(self.positions(index, index + 1)[0])

    def _epoch(self, epoch: int) -> np.ndarray:
        # Reading threads may ask for an epoch older than the two kept (a small split read
        # ahead over several epochs): it is drawn again and returned, whatever is kept.
        with self._lock:
            indices = self._epochs.get(epoch)
            if indices is None:
                order = np.arange(self.length, dtype=np.int64)
                if self.seed is not None:
                    order = np.random.default_rng([self.seed, epoch]).permutation(self.length)
                indices = self._epochs[epoch] = self.shard + self.num_shards * order
                for old in sorted(self._epochs)[:-2]:
                    del self._epochs[old]
            return indices

    def positions(self, start: int, stop: int) -> np.ndarray:
        """The pair indices at positions ``start`` to ``stop`` of the endless sequence of
        epochs."""
        parts = []
        while start < stop:
            epoch, at = divmod(start, self.length)
            take = min(stop - start, self.length - at)
            parts.append(self._epoch(epoch)[at:at + take])
            start += take
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)


class Chunks(grain.MapDataset):
    """Chunk k: the indices at positions k x ``size`` to (k + 1) x ``size`` of ``order``;
    ``endless``: over the epochs one after another (every chunk whole), otherwise over one
    epoch (the last chunk holds what is left)."""

    def __init__(self, order: EpochOrder, size: int, endless: bool):
        super().__init__()
        self.order, self.size, self.endless = order, size, endless

    def __len__(self) -> int:
        return sys.maxsize if self.endless else -(-len(self.order) // self.size)

    def __str__(self) -> str:
        return f"Chunks({self.order}, {self.size} pairs, endless={self.endless})"

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.slice(index)
        stop = (index + 1) * self.size
        return self.order.positions(index * self.size,
                                    stop if self.endless else min(stop, len(self.order)))


def epoch_order(num_pairs: int, seed: int, process_index: int = 0,
                process_count: int = 1) -> EpochOrder:
    """The indices of this process's pairs (every ``process_count``-th from
    ``process_index``) in the order of ``seed``: one epoch (:class:`EpochOrder`)."""
    return EpochOrder(num_pairs, seed, process_index, process_count)


def train_data(source: Sequence[tuple[str, str]] | Ids, tokenizer: Tokenizer | None, *,
               max_len: int,
               rows: int, seed: int, packing: bool = True, process_index: int = 0,
               process_count: int = 1, num_shards: int = 0,
               chunk_pairs: int = CHUNK_PAIRS) -> TrainData:
    """An endless, shuffled (reshuffled every epoch), packed stream of training batches.

    ``rows`` is the number of rows per batch on this process, each of ``max_len`` slots (the
    row length); longer pairs are skipped and counted by the returned ``length_filter``. The
    data is cut into ``num_shards`` shards (0: one per process), shard s holding every
    num_shards-th pair from s; process p reads shards p, p + process_count, ... and its batch
    is their batches side by side. The global batch therefore depends on the seed and the
    number of shards, not on how many processes read them: 1 process reading 2 shards sees
    what 2 processes see.
    Pairs of a shard are taken in the order of :func:`epoch_order`, ``chunk_pairs`` at a
    time, and packed chunk by chunk. ``source`` holds text pairs, tokenized by ``tokenizer``
    on the fly, or their ids (a token cache, ``tokenizer`` unused): the batches are the same.
    """
    ids = as_ids(source, tokenizer)
    num_shards = num_shards or process_count
    if num_shards % process_count:
        raise DataError(f"data.num_shards={num_shards} must be a multiple of the "
                        f"{process_count} processes")
    mine = list(range(process_index, num_shards, process_count))
    if rows % len(mine):
        raise DataError(f"{rows} rows per process do not split over its {len(mine)} shards")
    length_filter = LengthFilter(max_len)

    def shard(index: int) -> grain.IterDataset:
        chunks = Chunks(epoch_order(len(ids), seed, index, num_shards), chunk_pairs,
                        endless=True).map_with_index(
            PackChunk(ids, max_len, packing=packing, length_filter=length_filter, seed=seed))
        return grain.experimental.RebatchIterDataset(
            chunks.to_iter_dataset(_read_options()).filter(_has_rows),
            batch_size=rows // len(mine), drop_remainder=True)

    if len(mine) == 1:
        batches = shard(mine[0])
    else:
        batches = grain.experimental.ZipIterDataset([shard(i) for i in mine]).map(
            lambda parts: {k: np.concatenate([p[k] for p in parts]) for k in parts[0]})
    return TrainData(iter(batches), length_filter, rows)


def eval_batches(source: Sequence[tuple[str, str]] | Ids, tokenizer: Tokenizer | None, *,
                 max_len: int, rows: int, max_batches: int = 0,
                 chunk_pairs: int = CHUNK_PAIRS) -> Iterator[dict[str, np.ndarray]]:
    """One ordered pass over a split in packed batches for loss and perplexity.

    Pairs longer than ``max_len`` are truncated (evaluation must see every sentence) and
    their number is logged at the end. The last batch is padded with empty rows so every
    batch has the same shape. ``source`` is text pairs or their ids, as for
    :func:`train_data`.
    """
    ids = as_ids(source, tokenizer)
    pack_chunk = PackChunk(ids, max_len)
    chunks = Chunks(EpochOrder(len(ids), None), chunk_pairs, endless=False).map_with_index(
        pack_chunk)
    batches = grain.experimental.RebatchIterDataset(
        chunks.to_iter_dataset(_read_options()), batch_size=rows, drop_remainder=False)
    try:
        for i, batch in enumerate(batches):
            if max_batches and i >= max_batches:
                return
            n = len(batch["inputs"])
            if n < rows:
                batch = {k: np.pad(v, ((0, rows - n), (0, 0))) for k, v in batch.items()}
            yield batch
    finally:
        if pack_chunk.truncated:
            logging.warning("%s: %d pair(s) longer than data.max_len=%d tokens truncated for "
                            "evaluation", ids.name,
                            pack_chunk.truncated, max_len)


def process_rows(batch: dict[str, np.ndarray], process_index: int,
                 process_count: int) -> dict[str, np.ndarray]:
    """This process's share of a global batch that every process built alike (evaluation):
    the rows its devices hold."""
    if process_count == 1:
        return batch
    rows = len(batch["inputs"]) // process_count
    return {k: v[process_index * rows:(process_index + 1) * rows] for k, v in batch.items()}


def padding_fraction(batch: dict[str, np.ndarray]) -> float:
    """Fraction of target slots in the batch that hold padding."""
    return packing_lib.padding_fraction(batch, "targets")


def pad_batch(sequences: Sequence[Sequence[int]], length: int) -> np.ndarray:
    """Right-pads id lists with 0 into an int32 array [len(sequences), length]."""
    out = np.zeros((len(sequences), length), np.int32)
    for i, seq in enumerate(sequences):
        out[i, : len(seq)] = seq[:length]
    return out


def report_long_pairs(source: text.TextPairs, ids: Ids, max_len: int,
                      chunk: int = 10_000, limit: str = "") -> list[int]:
    """Line numbers of the pairs of a text split with a side longer than ``max_len`` tokens
    (end of sentence included), logged in one line; training skips these pairs. ``ids`` are
    the split's ids (:func:`as_ids`). ``limit`` names the setting that bounds them in the
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


def vocab_sample(source: Sequence[tuple[str, str]], max_chars: int,
                 seed: int = 0) -> Iterator[str]:
    """Sentences of both sides in a seeded random order until ``max_chars`` per side: the
    sample the vocabulary is trained on. Lazy: nothing is read unless it is consumed."""
    order = epoch_order(len(source), seed)

    def pairs() -> Iterator[tuple[str, str]]:
        for start in range(0, len(order), CHUNK_PAIRS):
            yield from read_pairs(source, order.positions(start, min(start + CHUNK_PAIRS,
                                                                     len(order))))

    return tokenizer_lib.sample_text(pairs(), max_chars)


# ----------------------------------------------------------------------------------------
# The row length: rows sized to the data

ROW_MULTIPLE = 64  # a row length chosen from the data is a multiple of this many slots,
ROW_SHARE = 0.999  # the smallest that holds this share of the pairs measured
ROW_SAMPLE_PAIRS = 20_000  # pairs measured, in the vocabulary sample's order
# Which datasets' rows are sized to the data when data.row_len is 0 is their Dataset's
# rows_from_data (config/datasets/). WMT keeps rows of data.max_len: its pairs run long, and
# those rows are the paper's recipe.


def row_len_path(workdir: storage.PathLike) -> storage.Path:
    """Where a run records the row length chosen from its data: next to its vocabulary."""
    return tokenizer_lib.vocab_path(workdir).with_name(layout.ROW_LEN)


def pair_lengths(source: Sequence[tuple[str, str]], tokenizer: Tokenizer,
                 num_pairs: int = ROW_SAMPLE_PAIRS, seed: int = 0) -> np.ndarray:
    """Tokens of the longer side (end of sentence included) of ``num_pairs`` pairs of
    ``source`` (all of them if fewer), taken in the order of :func:`epoch_order`."""
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


def row_len_of(config: Any, workdir: storage.PathLike, source: Sequence[tuple[str, str]],
               tokenizer: Tokenizer, is_chief: bool = True) -> int:
    """The slots of a training row (see the module docstring): ``data.row_len`` when set;
    ``data.max_len`` for datasets whose rows are not sized to the data (their Dataset's
    ``rows_from_data``); otherwise the length recorded in the workdir (:func:`row_len_path`)
    or, the first time, :func:`row_len_holding` of :func:`pair_lengths`, logged and
    recorded (by the chief).

    The record is read, not measured again, so a resumed run keeps its rows even if the data
    files changed. A workdir with checkpoints and no record trained on rows of data.max_len
    (before rows were sized to the data), and keeps them.
    """
    d = config.data
    if d.row_len:
        return d.row_len
    if not datasets.get(d.name).rows_from_data:
        return d.max_len
    path = row_len_path(workdir)
    if path.exists():
        return _recorded_row_len(path, d.max_len)
    if workdirs.checkpoint_steps_on_disk(workdir):
        row_len = d.max_len
        record: dict[str, Any] = {"row_len": row_len, "chosen_by": "data.max_len: checkpoints "
                                  "trained before rows were sized to the data"}
        logging.warning("%s: no recorded row length; its checkpoints were trained on rows of "
                        "data.max_len=%d slots, which it keeps", workdir, row_len)
    else:
        lengths = pair_lengths(source, tokenizer)
        row_len = row_len_holding(lengths, d.max_len)
        held = float(np.mean(lengths <= row_len))
        record = {"row_len": row_len,
                  "chosen_by": f"the smallest multiple of {ROW_MULTIPLE} slots holding "
                               f"{ROW_SHARE:.1%} of the pairs measured, at most "
                               f"data.max_len={d.max_len}",
                  "pairs_measured": len(lengths), "share_held": round(held, 6),
                  "longest_measured": int(lengths.max())}
        logging.info("rows of %d slots, sized to the data (data.row_len=0): they hold %.2f%% "
                     "of %d pairs measured (the longest %d tokens; data.max_len=%d); longer "
                     "training pairs are counted and skipped", row_len, 100 * held,
                     len(lengths), record["longest_measured"], d.max_len)
    if is_chief:
        path.parent.mkdir(parents=True, exist_ok=True)
        storage.write_atomically(path, json.dumps(record, indent=2))
    return row_len


def _recorded_row_len(path: storage.Path, max_len: int) -> int:
    record = workdirs.read_json(path)
    row_len = record.get("row_len") if isinstance(record, dict) else None
    if isinstance(row_len, bool) or not isinstance(row_len, int) or not 1 <= row_len <= max_len:
        raise DataError(f"{path}: damaged, no row length of 1 to data.max_len={max_len} slots "
                        "in it; restore it or train in another --workdir")
    logging.info("rows of %d slots, as recorded in %s", row_len, path)
    return row_len


def row_limit(data_config: Any, row_len: int) -> str:
    """The setting that bounds a training pair's length, in words for the logs:
    "data.max_len=256 tokens", "data.row_len=64 tokens" or "the 64 slots of rows sized to
    the data"."""
    if row_len == data_config.max_len:
        return f"data.max_len={row_len} tokens"
    if data_config.row_len:
        return f"data.row_len={row_len} tokens"
    return f"the {row_len} slots of rows sized to the data"


class Data(NamedTuple):
    """The data side of a training run (see :func:`data_for`)."""

    tokenizer: Tokenizer
    train: TrainData
    rows: int  # rows of a micro-batch over all devices and processes
    shape: BatchShape
    eval_rows: int  # rows of data.max_len slots of an evaluation batch (about as many tokens)


def split_ids(config: Any, workdir: storage.PathLike, split: str, tokenizer: Tokenizer,
              source: Sequence[tuple[str, str]] | None = None,
              is_chief: bool = True) -> Ids:
    """The ids of a split (its pairs ``source``, read from the config when None): from its
    token cache in the workdir, written the first time (by the chief; the others wait), when
    ``data.token_cache`` is on and the cache can be written; tokenized on the fly otherwise
    (``token_cache.open_or_write``)."""
    d = config.data
    source = sources.get_source(d, split) if source is None else source
    cached = (token_cache.open_or_write(workdir, split, source, tokenizer, d.source_lang,
                                        d.target_lang, is_chief=is_chief)
              if d.token_cache else None)
    return cached if cached is not None else TokenizedPairs(source, tokenizer)


def write_token_cache(config: Any, workdir: storage.PathLike,
                      splits: Sequence[str] = ("train", "validation")) -> dict[str, Ids]:
    """Writes the token cache of each of ``splits`` with the workdir's vocabulary (which
    must exist) where it is not there yet: what a run would write on first use. Returns the
    ids of each split (on the fly where the cache could not be written)."""
    tokenizer = Tokenizer(tokenizer_lib.vocab_path(workdir))
    config = config.copy_and_resolve_references()
    config.data.token_cache = True
    return {split: split_ids(config, workdir, split, tokenizer) for split in splits}


def data_for(config: Any, workdir: storage.PathLike, num_devices: int,
             process_index: int | None = None, process_count: int | None = None) -> Data:
    """The training source, shared vocabulary, row length and batch iterator of a config.

    The vocabulary is the workdir's, trained on ``data.vocab_sample`` characters per side the
    first time (by process 0 only; the others wait for its file); so are the row length
    (:func:`row_len_of`) and the training split's token cache (:func:`split_ids`).
    ``num_devices`` is the devices this process trains on; process index and count default
    to JAX's.
    """
    if process_index is None or process_count is None:
        import jax

        process_index, process_count = jax.process_index(), jax.process_count()
    d = config.data
    train_source = sources.get_source(d, "train")
    # The other splits are opened now so that a missing split or a bad file stops the run
    # before anything is trained; text files are read once (sources caches them).
    sources.get_source(d, "validation")
    if config.train.bleu_sentences or config.train.samples:
        sources.get_source(d, "test")
    # The vocabulary's sample does not follow data.shuffle_seed: replicas of a run over seeds
    # share one vocabulary, as the paper's variants do.
    tokenizer = tokenizer_lib.load_or_train(
        workdir, vocab_sample(train_source, d.vocab_sample, 0), d.vocab_size,
        is_chief=process_index == 0)
    train_ids = split_ids(config, workdir, "train", tokenizer, train_source,
                          is_chief=process_index == 0)
    row_len = row_len_of(config, workdir, train_source, tokenizer,
                         is_chief=process_index == 0)
    if isinstance(train_source, text.TextPairs):
        report_long_pairs(train_source, train_ids, row_len, limit=row_limit(d, row_len))
    shape_of = functools.partial(batch_shape, d.tokens_per_batch,
                                 grad_accum_steps=config.optim.grad_accum_steps,
                                 num_devices=num_devices, process_count=process_count,
                                 num_shards=d.num_shards)
    shape = shape_of(row_len)
    miss = shape.slots_per_step / d.tokens_per_batch - 1
    log = logging.warning if abs(miss) > TOKENS_PER_BATCH_TOLERANCE else logging.info
    log("batches: %d rows x %d slots x %d accumulation steps = %d slots per side per step "
        "(data.tokens_per_batch=%d, %+.0f%%) over %d device(s) x %d process(es)", shape.rows,
        row_len, shape.grad_accum_steps, shape.slots_per_step, d.tokens_per_batch,
        100 * miss, num_devices, process_count)
    train = train_data(train_ids, tokenizer, max_len=row_len, rows=shape.local_rows,
                       seed=d.shuffle_seed, packing=d.packing, process_index=process_index,
                       process_count=process_count, num_shards=d.num_shards)
    return Data(tokenizer, train, shape.rows, shape, shape_of(d.max_len).rows)
