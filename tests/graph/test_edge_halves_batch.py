"""A graph's edge records turned into halves a batch at a time equal the same done a record at a time."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gyreflow.api.graph import Edge, RemoveEdge, RemoveVertex
from gyreflow.api.graph.views import _detached, _EdgeHalves
from gyreflow.runtime.dataflow.operators import FlatMapOperator
from gyreflow.runtime.errors import RecordError

ids = st.one_of(st.integers(-3, 3), st.sampled_from(["a", "b", ""]))
values = st.one_of(st.none(), st.integers(), st.floats(allow_nan=False), st.text(max_size=3))
records = st.one_of(
    st.builds(Edge, ids, ids, values),
    st.builds(Edge, ids, ids),
    st.builds(RemoveEdge, ids, ids),
    st.builds(RemoveVertex, ids, detach=st.booleans()),
    st.tuples(ids, ids),
    st.tuples(ids, ids, values),
)


class SubEdge(Edge):
    """An edge record of a user's own subclass: it takes the per-record path."""


def one_at_a_time(fn, items: list) -> list:
    """The oracle: the per-record loop FlatMapOperator runs for any function."""
    return [half for item in items for half in fn(item)]


@settings(max_examples=300, deadline=None)
@given(items=st.lists(records, max_size=40), directed=st.booleans())
def test_a_batch_of_edge_records_gives_the_halves_of_each_record_in_order(items, directed):
    halves = _EdgeHalves(directed)
    assert halves.flat_map_batch(items) == one_at_a_time(halves, items)


@settings(max_examples=200, deadline=None)
@given(items=st.lists(records, max_size=40))
def test_a_batch_gives_the_ids_of_the_vertices_removed_with_their_edges(items):
    assert _detached.flat_map_batch(items) == one_at_a_time(_detached, items)


def test_self_loops_and_subclassed_edges_in_a_batch():
    items = [Edge(1, 1, "w"), RemoveEdge(2, 2), SubEdge(3, 4, 5), Edge(5, 6)]
    for directed in (False, True):
        halves = _EdgeHalves(directed)
        assert halves.flat_map_batch(items) == one_at_a_time(halves, items)
    assert len(_EdgeHalves(False).flat_map_batch(items[:2])) == 2  # a self-loop is one half


@pytest.mark.parametrize("directed", [False, True])
def test_the_operator_takes_the_batch_path_and_still_names_a_bad_record(directed):
    operator = FlatMapOperator("halves", _EdgeHalves(directed))
    emitted = []
    operator._emit = emitted.append
    good = [Edge(1, 2), RemoveEdge(2, 3), (4, 5, 0.5)]
    operator.process(good)
    assert emitted == [one_at_a_time(_EdgeHalves(directed), good)]

    bad = [Edge(1, 2), "not an edge", Edge(3, 4)]
    with pytest.raises(RecordError) as raised:
        operator.process(bad)
    assert raised.value.operator == "halves"
    assert raised.value.record == "not an edge"
    assert isinstance(raised.value.cause, ValueError)
