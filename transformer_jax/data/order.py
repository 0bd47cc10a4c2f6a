"""Stage 3: the epoch order, which pairs are read in what order, epoch after epoch.

In: the number of pairs of a split, the seed (``data.shuffle_seed``) and this reader's shard.
Out: :class:`EpochOrder`, the pair indices of the shard, position by position over an endless
sequence of epochs, each epoch shuffled anew; :class:`Chunks` cuts it into the chunks that
``packing.PackChunk`` reads and packs. Nothing is read here.

An epoch's order is computed on the fly, a chunk of positions at a time: position i of epoch
e is ``index_shuffle(i)`` under a key drawn from (seed, e), a keyed bijection of the shard's
positions (:func:`index_shuffle`). No permutation is kept, so the order's memory does not
grow with the corpus (a few KB for WMT14 EN-FR's 36 million pairs, where a numpy permutation
a epoch took 288 MB and two were kept), and the order's only state is the position, which
the grain iterator saves with every checkpoint.

``index_shuffle`` is a Feistel network of ``FEISTEL_ROUNDS`` rounds over the smallest
even number of bits that holds the shard, each round's function splitmix64's finalizer of
the other half and the round key; a result past the shard is mapped again until it falls
inside ("cycle walking"), which keeps it a bijection. It is the construction of grain's
``index_shuffle`` (a Feistel network, index by index in C++), vectorized over a chunk:
grain's, called pair by pair from Python while holding the GIL the reading threads need,
cost 2.6 CPU-µs a pair, this one 0.5 (``experiments/benchmarks/epoch_order.py``; reading
and packing a pair from the token cache costs 15-30).

Checkpoints saved before this order (their data position names no order) drew a numpy
permutation a epoch (``PERMUTATION``); a run resumed from one keeps it, so its batches go
on exactly as they would have (``batching.OrderedIterator``).
"""

from __future__ import annotations

import sys
import threading

import grain
import numpy as np

INDEX_SHUFFLE = "index_shuffle"  # the order of new runs (its name is saved with the position)
PERMUTATION = "permutation"  # a numpy permutation a epoch: checkpoints that name no order
ORDERS = (INDEX_SHUFFLE, PERMUTATION)
FEISTEL_ROUNDS = 12  # fewer leave tiny shards (ten pairs) measurably non-uniform

_U = np.uint64
_MIX = (_U(0xBF58476D1CE4E5B9), _U(0x94D049BB133111EB))  # splitmix64's multipliers


def shuffle_keys(seed: int, epoch: int) -> np.ndarray:
    """The round keys of epoch ``epoch`` under ``seed``: uint64 [FEISTEL_ROUNDS]."""
    return np.random.default_rng([seed, epoch]).integers(
        0, np.iinfo(np.uint64).max, FEISTEL_ROUNDS, dtype=np.uint64, endpoint=True)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer: every bit of the result depends on every bit of ``x``."""
    x = (x ^ (x >> _U(30))) * _MIX[0]
    x = (x ^ (x >> _U(27))) * _MIX[1]
    return x ^ (x >> _U(31))


def _feistel(x: np.ndarray, half_bits: int, keys: np.ndarray) -> np.ndarray:
    """A bijection of [0, 2 ** (2 * half_bits)): the Feistel network of ``keys``."""
    mask = _U((1 << half_bits) - 1)
    left, right = x >> _U(half_bits), x & mask
    for key in keys:
        left, right = right, left ^ (_mix(right ^ key) & mask)
    return (left << _U(half_bits)) | right


def index_shuffle(positions: np.ndarray, n: int, keys: np.ndarray) -> np.ndarray:
    """The images of ``positions`` (each in [0, n)) under the bijection of [0, n) that
    ``keys`` (:func:`shuffle_keys`) choose: int64 of the shape of ``positions``."""
    half_bits = max(1, ((max(n, 2) - 1).bit_length() + 1) // 2)
    x = _feistel(np.asarray(positions, _U), half_bits, keys)
    outside = np.flatnonzero(x >= n)
    while outside.size:  # cycle walking: fewer than 4 rounds on average, 2 typically
        x[outside] = _feistel(x[outside], half_bits, keys)
        outside = outside[x[outside] >= n]
    return x.astype(np.int64)


class EpochOrder(grain.MapDataset):
    """The indices of one shard's pairs (every ``num_shards``-th of ``num_pairs`` from
    ``shard``), epoch after epoch: element i of epoch e (index e * len + i) is element
    :func:`index_shuffle` (i) of the shard under the keys of (``seed``, e), so every epoch is
    reshuffled; in index order when ``seed`` is None. ``kind`` PERMUTATION draws the order of
    older checkpoints instead (see the module docstring)."""

    def __init__(self, num_pairs: int, seed: int | None, shard: int = 0, num_shards: int = 1,
                 kind: str = INDEX_SHUFFLE):
        super().__init__()
        self.num_pairs, self.seed, self.shard, self.num_shards = (num_pairs, seed, shard,
                                                                  num_shards)
        self.length = len(range(shard, num_pairs, num_shards))
        self.kind = kind
        self._keys: dict[int, np.ndarray] = {}  # of the last few epochs: a few bytes each
        self._permutations: dict[int, np.ndarray] = {}  # PERMUTATION only
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self.length

    def __str__(self) -> str:
        return (f"EpochOrder({self.num_pairs} pairs, seed={self.seed}, shard {self.shard} of "
                f"{self.num_shards}, {self.kind})")

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.slice(index)
        return int(self.positions(index, index + 1)[0])

    def use(self, kind: str) -> None:
        """Draws the order ``kind`` (one of ORDERS) from now on."""
        if kind not in ORDERS:
            raise ValueError(f"unknown epoch order {kind!r}; known: {', '.join(ORDERS)}")
        with self._lock:
            self.kind = kind
            self._permutations.clear()

    def _shuffled(self, epoch: int, at: np.ndarray) -> np.ndarray:
        """Positions ``at`` of the shard's epoch ``epoch``, shuffled."""
        with self._lock:
            if self.kind == PERMUTATION:
                return self._permutation(epoch)[at]
            keys = self._keys.get(epoch)
            if keys is None:
                keys = self._keys[epoch] = shuffle_keys(self.seed, epoch)
                for old in sorted(self._keys)[:-4]:
                    del self._keys[old]
        return index_shuffle(at, self.length, keys)

    def _permutation(self, epoch: int) -> np.ndarray:
        # The order of older checkpoints: numpy's permutation of the epoch, the latest two
        # kept (reading threads may ask for an older one: it is drawn again).
        order = self._permutations.get(epoch)
        if order is None:
            order = self._permutations[epoch] = np.random.default_rng(
                [self.seed, epoch]).permutation(self.length)
            for old in sorted(self._permutations)[:-2]:
                if old != epoch:
                    del self._permutations[old]
        return order

    def positions(self, start: int, stop: int) -> np.ndarray:
        """The pair indices at positions ``start`` to ``stop`` of the endless sequence of
        epochs: int64 [stop - start]."""
        parts = []
        while start < stop:
            epoch, at = divmod(start, self.length)
            take = min(stop - start, self.length - at)
            local = np.arange(at, at + take, dtype=np.int64)
            if self.seed is not None:
                local = self._shuffled(epoch, local)
            parts.append(self.shard + self.num_shards * local)
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


def epoch_order(num_pairs: int, seed: int | None, process_index: int = 0,
                process_count: int = 1) -> EpochOrder:
    """The indices of this process's pairs (every ``process_count``-th from
    ``process_index``) in the order of ``seed``: :class:`EpochOrder`."""
    return EpochOrder(num_pairs, seed, process_index, process_count)
