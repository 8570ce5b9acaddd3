"""Stored graph changes come back as they went: a change applied after a store round trip (pickled
and encoded as the logged table stores it) leaves the same chunk or value chunk as applied
directly, for every kind of value."""

from __future__ import annotations

import pickle

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gyreflow.runtime.dataflow.graph.changelog import (
    add_change,
    add_to_chunk,
    apply_chunk_change,
    apply_values_change,
    empty_chunk,
    set_change,
)
from gyreflow.state.keys.logged import decode_changes, encode_changes

_ID = st.integers(min_value=-(2**40), max_value=2**40)
_VALUE = st.one_of(st.none(), st.integers(min_value=-(2**63), max_value=2**63 - 1),
                   st.integers(min_value=2**63, max_value=2**70), st.floats(allow_nan=False),
                   st.text(max_size=4), st.booleans())


def _stored(change):
    """A change after the round trip a logged table gives it."""
    return decode_changes(pickle.loads(pickle.dumps(encode_changes([change]))))[0]


def _listed(chunk) -> list:
    return [None if a is None else (a.tolist(), [type(v) for v in a.tolist()]) for a in chunk]


@settings(max_examples=150, deadline=None)
@given(new=st.lists(_ID, max_size=5, unique=True),
       halves=st.lists(st.tuples(_ID, _ID, st.sampled_from([1, 3])), max_size=8),
       values=st.one_of(st.none(), st.lists(_VALUE, min_size=8, max_size=8)))
def test_an_added_chunk_change_round_trips(new, halves, values):
    ids = np.array(new, dtype=np.int64)
    vids = np.array([h[0] for h in halves], dtype=np.int64)
    others = np.array([h[1] for h in halves], dtype=np.int64)
    sides = np.array([h[2] for h in halves], dtype=np.int8)
    packed = None
    if values is not None:
        packed = np.empty(len(halves), dtype=object)
        packed[:] = values[:len(halves)]
    change = (ids, np.zeros(0, np.int64), None, vids, others, packed, sides)
    direct = add_to_chunk(empty_chunk(), *change)
    assert _listed(apply_chunk_change(None, _stored(add_change(*change)))) == _listed(direct)


_DTYPES = st.sampled_from([np.dtype(np.int64), np.dtype(np.float64), np.dtype(object),
                           np.dtype([("value", np.float64), ("id", np.int64),
                                     ("parent", np.int64), ("link", np.int8)])])


@settings(max_examples=150, deadline=None)
@given(dtype=_DTYPES, size=st.integers(min_value=0, max_value=6), data=st.data())
def test_a_value_chunk_change_round_trips(dtype, size, data):
    def values(count):
        found = np.zeros(count, dtype=dtype)
        for i in range(count):
            number = data.draw(st.integers(min_value=-50, max_value=50))
            found[i] = (number, number, -number, number % 3) if dtype.names else (
                str(number) if dtype.hasobject and number % 2 else number)
        return found

    stored = values(size)
    positions = np.array(data.draw(st.lists(st.integers(min_value=0, max_value=max(size - 1, 0)),
                                            max_size=size)), dtype=np.int64)[:size]
    change = set_change(positions, values(len(positions)), values(data.draw(
        st.integers(min_value=0, max_value=3))))
    direct = apply_values_change(stored.copy(), change)
    again = apply_values_change(stored.copy(), _stored(change))
    assert again.dtype == direct.dtype and again.tolist() == direct.tolist()
    assert again.flags.writeable  # later changes set positions in it
