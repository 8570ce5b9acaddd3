"""Arrays appended in place (``arrays.appended``): every earlier version keeps its values, whichever
version is appended to next, as plain lists kept beside them say."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gyreflow.runtime.dataflow.graph.arrays import appended, index_of

_STEP = st.tuples(st.integers(min_value=0, max_value=50),  # which earlier version (mod count)
                  st.lists(st.integers(min_value=-5, max_value=5), max_size=40))


@settings(max_examples=150, deadline=None)
@given(steps=st.lists(_STEP, min_size=1, max_size=30), objects=st.booleans())
def test_appending_to_any_version_leaves_every_other_version_as_it_was(steps, objects):
    dtype = object if objects else np.int64
    versions = [np.zeros(0, dtype=dtype)]
    lists: list[list] = [[]]
    for pick, more in steps:
        at = pick % len(versions)
        extra = np.array(more, dtype=dtype) if more else np.zeros(0, dtype=dtype)
        versions.append(appended(versions[at], extra))
        lists.append(lists[at] + more)
        for version, expected in zip(versions, lists, strict=True):
            assert version.tolist() == expected


def test_a_version_appended_to_twice_gives_two_independent_arrays():
    base = appended(np.zeros(0, np.int64), np.array([1, 2, 3]))
    left = appended(base, np.array([4]))
    right = appended(base, np.array([5, 6]))  # base's buffer already holds left's 4: a copy
    assert (base.tolist(), left.tolist(), right.tolist()) == ([1, 2, 3], [1, 2, 3, 4],
                                                             [1, 2, 3, 5, 6])


def test_ints_appended_with_objects_become_objects():
    mixed = appended(np.array([1, 2], dtype=np.int64), np.array(["a"], dtype=object))
    assert mixed.dtype == object and mixed.tolist() == [1, 2, "a"]


def test_the_index_of_an_array_is_made_again_for_a_new_array():
    ids = np.array([7, 3, 9], dtype=np.int64)
    assert index_of(ids) is index_of(ids)
    longer = appended(ids, np.array([4], dtype=np.int64))
    positions, found = index_of(longer).lookup(np.array([4, 9, 8], dtype=np.int64))
    assert positions[found].tolist() == [3, 2] and found.tolist() == [True, True, False]


_VALUE = st.one_of(st.integers(min_value=-(2**70), max_value=2**70), st.floats(allow_nan=False),
                   st.booleans(), st.none(), st.text(max_size=3))


@given(values=st.lists(_VALUE, max_size=20))
def test_edge_values_kept_as_numbers_come_back_as_they_were(values):
    from gyreflow.runtime.dataflow.graph.partition_changes import plain_values

    array = np.empty(len(values), dtype=object)
    array[:] = values
    back = plain_values(array).tolist()
    assert back == values and [type(v) for v in back] == [type(v) for v in values]
