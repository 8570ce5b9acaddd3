"""The whole-item array helpers of graph programs' values (``rows_at``, ``set_rows``, ``assign``
in ``runtime/dataflow/graph/arrays.py``) against a plain Python loop over the items' lists, for
structured values (the repairing programs' and PageRank's), plain numbers and objects."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gyreflow.runtime.dataflow.graph.arrays import assign, rows_at, set_rows

STRUCTURED = np.dtype([("value", np.int64), ("parent", np.int64), ("rank", np.float64)])
DTYPES = [STRUCTURED, np.dtype(np.int64), np.dtype(np.float64), np.dtype(object)]


def make(dtype: np.dtype, items: list[int]) -> np.ndarray:
    array = np.empty(len(items), dtype=dtype)
    if dtype == STRUCTURED:
        array[:] = [(i, -i, i / 3) for i in items]
    elif dtype.hasobject:
        array[:] = [("text", i) if i % 2 else i for i in items]
    else:
        array[:] = items
    return array


arrays = st.tuples(st.sampled_from(DTYPES), st.lists(st.integers(-10**6, 10**6), max_size=60))


@settings(max_examples=200, deadline=None)
@given(arrays, st.data())
def test_rows_at_and_set_rows_equal_a_loop(drawn, data):
    dtype, items = drawn
    array = make(dtype, items)
    positions = data.draw(st.lists(st.integers(0, max(len(items) - 1, 0)),
                                   max_size=len(items) * 2 if items else 0))
    positions = np.array(positions, dtype=np.int64)
    listed = array.tolist()

    taken = rows_at(array, positions)
    assert taken.dtype == array.dtype
    assert taken.tolist() == [listed[p] for p in positions.tolist()]

    replacement = make(dtype, [7 * p + 1 for p in range(len(positions))])
    set_rows(array, positions, replacement)
    want = list(listed)
    for p, value in zip(positions.tolist(), replacement.tolist(), strict=True):
        want[p] = value  # the last of repeated positions wins, as in indexing
    assert array.tolist() == want


@settings(max_examples=100, deadline=None)
@given(arrays)
def test_assign_copies_every_item(drawn):
    dtype, items = drawn
    source = make(dtype, items)
    target = make(dtype, [i + 1 for i in items])
    assign(target, source)
    assert target.tolist() == source.tolist()
    assert not np.shares_memory(target, source)


def test_set_rows_refuses_a_length_that_differs():
    array = make(STRUCTURED, [1, 2, 3])
    with pytest.raises(ValueError, match="2 positions for 1 values"):
        set_rows(array, np.array([0, 1]), make(STRUCTURED, [5]))
    with pytest.raises(IndexError):
        rows_at(array, np.array([3]))
