"""Stage 5: batches and their shapes.

In: a split's ids (``tokens.py``), the epoch order (``order.py``), packing (``packing.py``)
and the rows a batch holds. Out: training batches, an endless grain iterator whose position
is saved with every checkpoint (:func:`train_data`), and one ordered pass over an
evaluation split (:func:`eval_batches`). A batch is a dict of int32 arrays [rows, row_len]::

    inputs, inputs_segment_ids, inputs_positions,
    targets, targets_segment_ids, targets_positions

grain orders the work: each shard's order is cut into chunks of ``CHUNK_PAIRS`` pairs, each
chunk's ids are read and packed in one go by reading threads (array_record reads and
SentencePiece run outside the GIL), and ``RebatchIterDataset`` cuts the rows into batches.
Doing a chunk at a time batches the reads (and SentencePiece calls), which cost far more one
pair at a time.

The paper's ~25,000 source and ~25,000 target tokens per step become ``rows`` rows of
``row_len`` slots per side (:func:`batch_shape`): rows x row_len x grad_accum_steps is about
``data.tokens_per_batch``. In a multi-host run the split is read in ``data.num_shards``
shards (0: one per process), shard s holding every num_shards-th pair from s; process p reads
shards p, p + process_count, ..., so in every epoch the processes see disjoint parts of the
split that together make all of it, and the global batch depends on the seed and the number
of shards, not on how many processes read them.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from collections.abc import Iterator, Sequence
from typing import Any

import grain
import numpy as np

from transformer_jax.data import order as order_lib, packing as packing_lib
from transformer_jax.data.order import Chunks, EpochOrder
from transformer_jax.data.packing import LengthFilter, PackChunk
from transformer_jax.data.tokenizer import Tokenizer
from transformer_jax.data.tokens import Ids, as_ids
from transformer_jax.errors import DataError
from transformer_jax.io import storage

FEATURES = packing_lib.FEATURES
# Pairs read, tokenized and packed together. Bigger chunks pack tighter (only the last few
# rows of a chunk are left part-empty) and batch the reads and SentencePiece calls better.
CHUNK_PAIRS = 4096
# Threads that read (and tokenize) and pack chunks ahead of the trainer;
# experiments/benchmarks/input_pipeline.py measures it.
READ_THREADS = max(2, min(8, (os.cpu_count() or 2) // 2))
PREFETCH_CHUNKS = 2 * READ_THREADS  # chunks read ahead (a chunk is a few batches)


@dataclasses.dataclass(frozen=True)
class BatchSpec:
    """How batches are made: ``data.tokens_per_batch`` slots per side per optimizer step in
    ``optim.grad_accum_steps`` micro-batches, evaluation rows of ``data.max_len``, packed or
    not (``data.packing``), read in ``data.num_shards`` shards in the order of
    ``data.shuffle_seed``."""

    tokens_per_batch: int
    max_len: int
    grad_accum_steps: int = 1
    packing: bool = True
    num_shards: int = 0
    seed: int = 0


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


class OrderedIterator(grain.DatasetIterator):
    """The training batches of :func:`train_data`, whose saved state names the epoch order
    they follow: ``{"order": kind, "batches": grain's position}``.

    A state without "order" was saved before the order was computed on the fly: restoring
    it draws that older order (``order.PERMUTATION``), so the run goes on with exactly the
    batches it would have had, and says so in one line.
    """

    def __init__(self, batches: grain.DatasetIterator, orders: Sequence[EpochOrder]):
        super().__init__(batches)
        self.batches, self.orders = batches, list(orders)

    def __next__(self) -> dict[str, np.ndarray]:
        return next(self.batches)

    def get_state(self) -> dict[str, Any]:
        return {"order": self.orders[0].kind, "batches": self.batches.get_state()}

    def set_state(self, state: dict[str, Any]) -> None:
        kind = state.get("order") if "batches" in state else order_lib.PERMUTATION
        if kind not in order_lib.ORDERS:
            raise DataError(f"the data position saved with the checkpoint follows the epoch "
                            f"order {kind!r}, which this version does not know (it knows "
                            f"{', '.join(order_lib.ORDERS)})")
        if kind == order_lib.PERMUTATION and self.orders[0].kind != kind:
            size = 2 * 8 * sum(len(o) for o in self.orders)
            logging.warning("the checkpoint's data position follows the epoch order of older "
                            "versions (a numpy permutation a epoch, %s of memory for this "
                            "process): the run keeps it, so its batches go on as they would "
                            "have", storage.human_bytes(size))
        for o in self.orders:
            o.use(kind)
        self.batches.set_state(state.get("batches", state))


def _read_options() -> grain.ReadOptions:
    return grain.ReadOptions(num_threads=READ_THREADS, prefetch_buffer_size=PREFETCH_CHUNKS)


def _has_rows(rows: dict[str, np.ndarray]) -> bool:
    """False for a chunk whose every pair was too long (rebatching needs a row at least)."""
    return len(rows["inputs"]) > 0


@dataclasses.dataclass
class TrainData:
    """The training iterator and the filter whose counts are logged."""

    iterator: OrderedIterator  # next(), get_state(), set_state()
    length_filter: LengthFilter
    rows: int  # rows per batch on this process

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        return self.iterator


def train_data(source: Sequence[tuple[str, str]] | Ids, tokenizer: Tokenizer | None, *,
               max_len: int, rows: int, seed: int, packing: bool = True, process_index: int = 0,
               process_count: int = 1, num_shards: int = 0,
               chunk_pairs: int = CHUNK_PAIRS) -> TrainData:
    """An endless, shuffled (reshuffled every epoch), packed stream of training batches.

    ``rows`` is the number of rows per batch on this process, each of ``max_len`` slots (the
    row length); longer pairs are skipped and counted by the returned ``length_filter``. The
    data is cut into ``num_shards`` shards (0: one per process; see the module docstring);
    this process's batch is its shards' batches side by side. Pairs of a shard are taken in
    the order of ``order.EpochOrder``, ``chunk_pairs`` at a time, and packed chunk by chunk.
    ``source`` holds text pairs, tokenized by ``tokenizer`` on the fly, or their ids (a token
    cache, ``tokenizer`` unused): the batches are the same.
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
    orders = [EpochOrder(len(ids), seed, index, num_shards) for index in mine]

    def shard(order: EpochOrder) -> grain.IterDataset:
        chunks = Chunks(order, chunk_pairs, endless=True).map_with_index(
            PackChunk(ids, max_len, packing=packing, length_filter=length_filter, seed=seed))
        return grain.experimental.RebatchIterDataset(
            chunks.to_iter_dataset(_read_options()).filter(_has_rows),
            batch_size=rows // len(mine), drop_remainder=True)

    if len(mine) == 1:
        batches = shard(orders[0])
    else:
        batches = grain.experimental.ZipIterDataset([shard(o) for o in orders]).map(
            lambda parts: {k: np.concatenate([p[k] for p in parts]) for k in parts[0]})
    return TrainData(OrderedIterator(iter(batches), orders), length_filter, rows)


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
                            "evaluation", ids.name, pack_chunk.truncated, max_len)


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
