"""The epoch order: a new shuffle every epoch, disjoint shards, memory that does not grow with
the corpus, and checkpoints of the older order resumed on it."""

import json
import logging
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from transformer_jax.data import batching, order as order_lib
from transformer_jax.data.tokens import ragged
from transformer_jax.errors import DataError

from .test_pipeline import assert_same, batches


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 5000), seed=st.integers(0, 2**32 - 1), epoch=st.integers(0, 1000))
def test_index_shuffle_is_a_permutation_of_any_size(n, seed, epoch):
    shuffled = order_lib.index_shuffle(np.arange(n), n, order_lib.shuffle_keys(seed, epoch))
    assert shuffled.dtype == np.int64
    assert np.array_equal(np.sort(shuffled), np.arange(n))


def test_every_element_lands_anywhere_as_often():
    # 10 elements over 4,000 seeds: each (element, position) cell expects 400. A uniform
    # shuffle gives a chi-square of about 81 (9 x 9 degrees of freedom, 125 at p = 0.001);
    # a 4-round network gives ~230 at this size, the identity 36,000.
    n, draws = 10, 4000
    counts = np.zeros((n, n))
    for seed in range(draws):
        counts[np.arange(n), order_lib.index_shuffle(np.arange(n), n,
                                                    order_lib.shuffle_keys(seed, 0))] += 1
    expected = draws / n
    assert ((counts - expected) ** 2 / expected).sum() < 125


def test_each_epoch_is_a_new_permutation():
    order = order_lib.epoch_order(100, seed=0).repeat(None)
    first = [order[i] for i in range(100)]
    second = [order[i] for i in range(100, 200)]
    assert sorted(first) == sorted(second) == list(range(100))
    assert first != second
    # Neither is the identity nor close to it: positions and indices are uncorrelated.
    assert abs(np.corrcoef(np.arange(100), first)[0, 1]) < 0.4


@pytest.mark.parametrize("count", [2, 3])
def test_processes_read_disjoint_shards_that_make_the_whole_split(count):
    for epoch in range(2):
        seen = []
        for index in range(count):
            order = order_lib.epoch_order(1001, seed=7, process_index=index,
                                          process_count=count).repeat(None)
            n = len(order_lib.epoch_order(1001, 7, index, count))
            seen.append({order[i] for i in range(epoch * n, (epoch + 1) * n)})
        assert sum(len(s) for s in seen) == 1001
        assert set().union(*seen) == set(range(1001))


def test_the_order_of_36_million_pairs_takes_kilobytes():
    # WMT14 EN-FR's 36M pairs in one shard: a numpy permutation an epoch was 288 MB.
    tracemalloc.start()
    try:
        order = order_lib.EpochOrder(36_000_000, seed=1)
        chunk = order.positions(36_000_000 - 2048, 36_000_000 + 2048)  # across epochs 0-1
        far = order.positions(10 * 36_000_000 + 5, 10 * 36_000_000 + 4101)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 << 20  # a chunk's arrays: 4,096 positions a few times over
    assert len(chunk) == len(far) == 4096
    assert len(set(chunk[:2048].tolist())) == 2048 and chunk.max() < 36_000_000


def test_an_epoch_older_than_the_latest_is_read_again_the_same():
    # Reading threads can ask for epoch 4 after epochs 5 and 6 were drawn (a small split read
    # ahead): it is the epoch a fresh order draws first, a permutation of the split.
    for kind in order_lib.ORDERS:
        order = order_lib.EpochOrder(10, seed=3, kind=kind)
        order.positions(50, 70)  # epochs 5 and 6
        again = order.positions(40, 50)
        assert sorted(again.tolist()) == list(range(10))
        assert again.tolist() == order_lib.EpochOrder(10, seed=3, kind=kind).positions(
            40, 50).tolist()


def test_the_older_order_is_numpys_permutation_of_each_epoch():
    order = order_lib.EpochOrder(1001, seed=5, shard=1, num_shards=3,
                                 kind=order_lib.PERMUTATION)
    for epoch in range(2):
        expected = 1 + 3 * np.random.default_rng([5, epoch]).permutation(334)
        assert order.positions(epoch * 334, (epoch + 1) * 334).tolist() == expected.tolist()


class CountingIds:
    """Pair k: source [k + 3], target [k + 3, 3] (ids above the reserved ones)."""

    name = "counting"

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def read_ids(self, indices):
        return (ragged([[int(i) + 3] for i in indices]),
                ragged([[int(i) + 3, 3] for i in indices]))


def first_sources(batch):
    """The pair index of each row's first pair."""
    return (batch["inputs"][:, 0] - 3).tolist()


def test_a_checkpoint_of_the_older_order_resumes_on_it(caplog):
    # A data position saved before the order was computed on the fly names no order: the
    # run resumed from it keeps drawing numpy permutations, so its batches go on as they
    # would have.
    def fresh():
        return batching.train_data(CountingIds(300), None, max_len=4, rows=4, seed=3,
                                   packing=False, chunk_pairs=32)

    old = fresh()
    for o in old.iterator.orders:
        o.use(order_lib.PERMUTATION)  # as the older version drew it
    head = batches(old, 5)
    state = json.loads(json.dumps(old.iterator.batches.get_state()))  # its checkpoint
    assert "order" not in state
    expected = batches(old, 120)  # past the end of the first two epochs
    restored = fresh()
    with caplog.at_level(logging.WARNING):
        restored.iterator.set_state(state)
    assert_same(batches(restored, 120), expected)
    assert "follows the epoch order of older versions" in caplog.text
    assert restored.iterator.get_state()["order"] == order_lib.PERMUTATION
    # A new run draws the new order; so does one resumed from its checkpoints.
    new = fresh()
    assert new.iterator.get_state()["order"] == order_lib.INDEX_SHUFFLE
    assert [first_sources(b) for b in batches(new, 5)] != [first_sources(b) for b in head]


def test_an_unknown_order_in_a_checkpoint_is_refused_in_one_line():
    data = batching.train_data(CountingIds(50), None, max_len=4, rows=2, seed=0)
    with pytest.raises(DataError, match=r"epoch order 'zigzag', which this version does not "
                                        r"know \(it knows index_shuffle, permutation\)"):
        data.iterator.set_state({"order": "zigzag", "batches": {}})
