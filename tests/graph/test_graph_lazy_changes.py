"""Windows recorded on the chunks without reading them (``lazy_changes``): the chunks they leave
equal, array for array, the ones the eager path makes, each vertex's halves equal per-vertex
lists kept by a plain loop, and the logged changes applied to the window-1 chunks (what a restore
does) give the same chunks again."""

from __future__ import annotations

import random
from collections import defaultdict

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gyreflow.api import SizeTumblingWindow
from gyreflow.api.graph import ArrayVertexCompute, Edge, GraphView, RemoveEdge
from gyreflow.runtime.dataflow.graph.changelog import PendingChunk, apply_chunk_change
from gyreflow.runtime.dataflow.graph.chunks import add_window_input, chunk_key
from gyreflow.runtime.dataflow.graph.lazy_changes import can_log, log_window
from gyreflow.runtime.dataflow.graph.partition import Partition
from gyreflow.runtime.dataflow.graph.removals import apply_changes, has_removals
from gyreflow.state.keys.keygroups import key_group_of

MP = 8
_ID = st.integers(min_value=0, max_value=14)
_CHANGE = st.tuples(st.sampled_from(["add", "add", "remove", "vertex"]), _ID, _ID,
                    st.one_of(st.none(), st.integers(min_value=1, max_value=3)))


def _halves(a, b, value, removal, directed):
    side_out, side_in = (-1, -3) if removal else (1, 3)
    if directed:
        return [(a, b, value, side_out), (b, a, value, side_in)]
    return [(a, b, value, side_out)] + ([(b, a, value, side_out)] if a != b else [])


def _listed(chunks: dict) -> dict:
    """Per chunk key: the ids, the given values and (vertex, other, value, side) per half."""
    found = {}
    for key, chunk in chunks.items():
        chunk = list(chunk)
        values = chunk[4].tolist() if chunk[4] is not None else [None] * len(chunk[2])
        found[key] = (chunk[0].tolist(), chunk[1].tolist(),
                      list(zip(chunk[2].tolist(), chunk[3].tolist(), values,
                               chunk[5].tolist(), strict=True)))
    return found


@settings(max_examples=120, deadline=None)
@given(directed=st.booleans(), names=st.booleans(),
       windows=st.lists(st.lists(_CHANGE, max_size=12), min_size=1, max_size=5))
def test_logged_windows_leave_the_chunks_the_eager_path_and_a_loop_leave(directed, names, windows):
    def ident(v):
        return f"v{v}" if names else v

    first = [h for v in range(6) for h in _halves(ident(v), ident((v + 1) % 6), None, False,
                                                    directed)]
    eager: dict = {}
    add_window_input(eager, [("edge", first)], MP, directed)
    lazy = {key: list(chunk) for key, chunk in eager.items()}
    base = {key: list(chunk) for key, chunk in eager.items()}
    part = Partition([(g, lazy[chunk_key(g, MP)]) for g in range(MP) if chunk_key(g, MP) in lazy],
                     directed, 1, MP)
    logged: dict = defaultdict(list)
    lists: dict = defaultdict(list)  # the loop: each vertex's halves in arrival order
    for half in first:
        lists[half[0]].append((half[1], half[2], half[3]))
    for changes in windows:
        edges, vertices = [], []
        for kind, a, b, value in changes:
            if kind == "vertex":
                vertices.append((ident(a), value))
            else:
                edges += _halves(ident(a), ident(b), value, kind == "remove", directed)
        records = [("edge", edges), ("vertex", vertices)]
        assert can_log(records)
        if has_removals(records):
            apply_changes(eager, records, MP, directed, None)
        else:
            add_window_input(eager, records, MP, directed)
        window = log_window(lazy, records, part, MP, lambda key, change: logged[key].append(change))
        assert part.extend(window.added, lazy, None, new=window.new)
        for vertex, other, _value, side in edges:  # removals first, then additions, in order
            if side < 0:
                lists[vertex] = [h for h in lists[vertex] if (h[0], h[2]) != (other, -side)]
        for i, (vertex, other, value, side) in enumerate(edges):
            later = {(h[0], h[1], -h[3]) for h in edges[i + 1:] if h[3] < 0}
            if side > 0 and (vertex, other, side) not in later:
                lists[vertex].append((other, value, side))
        assert all(isinstance(chunk, (list, PendingChunk)) for chunk in lazy.values())
        assert _listed(lazy) == _listed(eager)
        halves = defaultdict(list)
        for _, _, stored in _listed(lazy).values():
            for vertex, other, value, side in stored:
                halves[vertex].append((other, value, side))
        assert {v: h for v, h in halves.items() if h} == {v: h for v, h in lists.items() if h}
    restored = {}
    for key, chunk in base.items():
        for change in logged.get(key, ()):
            chunk = apply_chunk_change(chunk, change)
        restored[key] = chunk
    for key in set(logged) - set(base):
        chunk = None
        for change in logged[key]:
            chunk = apply_chunk_change(chunk, change)
        restored[key] = chunk
    assert _listed(restored) == _listed(eager)


def test_a_pending_chunk_reads_and_pickles_as_the_chunk_it_stands_for():
    import pickle

    chunks: dict = {}
    add_window_input(chunks, [("edge", [(1, 2, None, 1), (2, 1, None, 1)])], MP, False)
    key = chunk_key(key_group_of(1, MP), MP)
    part = Partition([(g, chunks[chunk_key(g, MP)]) for g in range(MP)
                      if chunk_key(g, MP) in chunks], False, 1, MP)
    log_window(chunks, [("edge", [(1, 3, 7, 1), (3, 1, 7, 1)])], part, MP, lambda *_: None)
    pending = chunks[key]
    assert isinstance(pending, PendingChunk)
    back = pickle.loads(pickle.dumps(pending))
    assert type(back) is list and len(pending) == 6
    assert [np.asarray(a).tolist() for a in back if a is not None] == [
        np.asarray(a).tolist() for a in pending if a is not None]


class OutValueSums(ArrayVertexCompute):
    """Each vertex's sum of its out-edges' values, read from ``part.out_values`` every window."""

    combine = "min"
    max_iterations = 1

    def init(self, ids, given):
        return np.zeros(len(ids), dtype=np.int64)

    def compute(self, part, inbox):
        values = part.out_values
        if values is None:
            return np.zeros(part.num_local, dtype=np.int64)
        weights = np.array([0 if v is None else v for v in values.tolist()], dtype=np.int64)
        rows = np.repeat(np.arange(part.num_local), np.diff(part.out_edges.indptr))
        return np.bincount(rows, weights=weights, minlength=part.num_local).astype(np.int64)

    def removal_scope(self, values):
        return frozenset()

    def restarts(self, values, scope):
        return np.zeros(len(values), dtype=bool)


def test_edge_values_read_in_later_windows_equal_a_loop(make_env):
    rng = random.Random(11)
    windows, present = [], {}
    for _ in range(6):
        batch = []
        for _ in range(25):
            a, b = rng.randrange(12), rng.randrange(12)
            if present and rng.random() < 0.3:
                a, b = rng.choice(sorted(present))
                del present[(a, b)]
                batch.append(RemoveEdge(a, b))
            else:
                present[(a, b)] = present.get((a, b), 0) + 1  # parallel edges add up
                batch.append(Edge(a, b, rng.choice([1, 2, 5])))
        windows.append(batch)
    pipeline = make_env(2).pipeline("edge-value-sums")

    @pipeline.task
    def sums(ctx):
        edges = ctx.source(windows, SizeTumblingWindow(1), parallelism=1).flat_map(list)
        GraphView(None, edges, directed=True).incremental_compute(OutValueSums()).collect("sums")

    by_window = pipeline.execute().by_window("sums")
    folded: dict = {}
    graph: dict = {}
    for window, batch in enumerate(windows, 1):
        for record in batch:  # a removal takes every edge a -> b
            if isinstance(record, RemoveEdge):
                graph.pop((record.src, record.dst), None)
            else:
                graph.setdefault((record.src, record.dst), []).append(record.value)
        folded.update(dict(by_window.get(window, [])))
        expected = defaultdict(int)
        for (a, _), values in graph.items():
            expected[a] += sum(values)
        assert {v: s for v, s in folded.items() if s} == {v: s for v, s in expected.items() if s}
