"""Packing: every pair lands once, whole and in order, in a row the model's masks can split."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from transformer_jax.data import packing


def unpack(rows: dict[str, np.ndarray]) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """The (inputs, targets) pairs of packed rows, read back through the segment ids."""
    pairs = []
    for r in range(len(rows["inputs"])):
        for seg in range(1, int(rows["inputs_segment_ids"][r].max()) + 1):
            sides = []
            for f in packing.FEATURES:
                where = rows[f + "_segment_ids"][r] == seg
                assert where.any(), "each segment has both sides"
                positions = rows[f + "_positions"][r][where]
                assert list(positions) == list(range(len(positions)))  # restart at 0
                cols = np.flatnonzero(where)
                assert list(cols) == list(range(cols[0], cols[0] + len(cols)))  # contiguous
                sides.append(tuple(rows[f][r][where].tolist()))
            pairs.append(tuple(sides))
    return pairs


def test_the_docstring_picture():
    rows = packing.pack([[11, 12, 1], [21, 1]], [[31, 1], [41, 42, 1]], max_len=6)
    assert rows["inputs"].tolist() == [[11, 12, 1, 21, 1, 0]]
    assert rows["inputs_segment_ids"].tolist() == [[1, 1, 1, 2, 2, 0]]
    assert rows["inputs_positions"].tolist() == [[0, 1, 2, 0, 1, 0]]
    assert rows["targets"].tolist() == [[31, 1, 41, 42, 1, 0]]
    assert rows["targets_segment_ids"].tolist() == [[1, 1, 2, 2, 2, 0]]
    assert rows["targets_positions"].tolist() == [[0, 1, 0, 1, 2, 0]]
    assert all(v.dtype == np.int32 for v in rows.values())


def test_first_fit_takes_the_oldest_row_with_room_on_both_sides():
    # Row 0 has 2 input slots left after pair 0 but pair 1 needs 3 -> row 1; pair 2 fits row 0
    # on both sides; pair 3 fits neither (row 0 target side is full) -> row 1.
    rows = packing.assign_rows([8, 3, 2, 1], [5, 3, 5, 2], max_len=10)
    assert rows == [0, 1, 0, 1]


def test_the_window_closes_old_rows():
    # Ten-slot pairs fill a row each; with one open row, a later 1-slot pair cannot go back.
    assert packing.assign_rows([6, 6, 1], [1, 1, 1], max_len=10, open_rows=1) == [0, 1, 1]
    assert packing.assign_rows([6, 6, 1], [1, 1, 1], max_len=10, open_rows=2) == [0, 1, 0]


def test_without_packing_every_pair_has_a_row():
    rows = packing.pack([[5, 1], [6, 1]], [[7, 1], [8, 1]], max_len=4, packing=False)
    assert rows["inputs"].tolist() == [[5, 1, 0, 0], [6, 1, 0, 0]]
    assert rows["targets_segment_ids"].tolist() == [[1, 1, 0, 0], [1, 1, 0, 0]]


def test_a_sequence_longer_than_a_row_is_refused():
    with pytest.raises(ValueError, match="longer than max_len=4"):
        packing.pack([[1, 2, 3, 4, 5]], [[1]], max_len=4)


def test_padding_fraction():
    rows = packing.pack([[5, 1]], [[7, 8, 1]], max_len=4)
    assert packing.padding_fraction(rows) == 0.25
    assert packing.padding_fraction(rows, "inputs") == 0.5


pairs_strategy = st.lists(
    st.tuples(st.lists(st.integers(3, 99), min_size=1, max_size=16),
              st.lists(st.integers(3, 99), min_size=1, max_size=16)),
    max_size=60)


@settings(max_examples=60, deadline=None)
@given(pairs=pairs_strategy, open_rows=st.integers(1, 8), packed=st.booleans())
def test_every_pair_comes_back_whole_and_no_row_overflows(pairs, open_rows, packed):
    inputs = [p[0] for p in pairs]
    targets = [p[1] for p in pairs]
    rows = packing.pack(inputs, targets, max_len=16, packing=packed, open_rows=open_rows)
    assert sorted(unpack(rows)) == sorted((tuple(a), tuple(b)) for a, b in pairs)
    for f in packing.FEATURES:
        assert rows[f].shape == (len(rows["inputs"]), 16)
        assert np.all((rows[f] == 0) == (rows[f + "_segment_ids"] == 0))
    if packed and pairs:
        # No fewer rows than the tokens need, and never more than one per pair.
        total = sum(len(a) for a in inputs), sum(len(b) for b in targets)
        assert -(-max(total) // 16) <= len(rows["inputs"]) <= len(pairs)
