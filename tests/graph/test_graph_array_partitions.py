"""Array partitions and their chunks changed in place, against plain loops; residual PageRank on one."""

from __future__ import annotations

import random
from collections import Counter, defaultdict

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gyreflow.api.graph.residual_pagerank import ResidualPageRank
from gyreflow.runtime.dataflow.graph.array_context import ArrayContext, receive, split_outgoing
from gyreflow.runtime.dataflow.graph.arrays import id_array, key_groups
from gyreflow.runtime.dataflow.graph.chunks import add_window_input, chunk_key
from gyreflow.runtime.dataflow.graph.partition import Partition
from gyreflow.runtime.dataflow.graph.removals import apply_changes
from gyreflow.state.keys.keygroups import key_group_of


@pytest.mark.parametrize("directed", [True, False])
def test_a_partition_extended_in_place_lists_each_vertex_edges_in_arrival_order(directed):
    rng = random.Random(17)
    first = [(v, (v + 1) % 12) for v in range(12)]  # every vertex exists after the first window
    later = [(rng.randrange(12), rng.randrange(12), None) for _ in range(40)]
    chunks: dict = {}
    halves = [(a, b, None, 1) for a, b in first]
    if directed:
        halves += [(b, a, None, 3) for a, b in first]
    else:
        halves += [(b, a, None, 1) for a, b in first if a != b]
    add_window_input(chunks, [("edge", halves)], 8, directed)
    part = Partition([(g, chunks[chunk_key(g, 8)]) for g in range(8) if chunk_key(g, 8) in chunks],
                     directed, 1, 8)
    more = [(a, b, None, 1) for a, b, _ in later]
    if directed:
        more += [(b, a, None, 3) for a, b, _ in later]
    else:
        more += [(b, a, None, 1) for a, b, _ in later if a != b]
    _, _, added = add_window_input(chunks, [("edge", more)], 8, directed)
    assert part.extend(added)
    expected_out = {v: [] for v in range(12)}
    expected_in = {v: [] for v in range(12)}
    for vertex, other, _, side in halves + more:
        (expected_out if side == 1 else expected_in)[vertex].append(other)

    def listed(matrix):
        return {int(part.ids[r]): [int(part.columns_ids[c]) for c in
                                   matrix.indices[matrix.indptr[r]:matrix.indptr[r + 1]]]
                for r in range(part.n)}

    assert listed(part.out_edges) == expected_out
    assert listed(part.in_edges) == (expected_in if directed else expected_out)
    assert part.out_degree.tolist() == [len(expected_out[int(v)]) for v in part.ids]
    assert not part.extend((np.array([99]), np.array([1]), np.array([1], np.int8), None))


_CHANGE = st.tuples(st.sampled_from(["add", "remove", "vertex"]), st.integers(0, 15),
                    st.integers(0, 15),
                    st.one_of(st.none(), st.integers(1, 9)))


@settings(max_examples=80, deadline=None)
@given(directed=st.booleans(), parallelism=st.sampled_from([1, 2]),
       windows=st.lists(st.tuples(st.lists(_CHANGE, max_size=12), st.booleans()), min_size=1,
                        max_size=4))
def test_a_partition_updated_in_place_equals_a_plain_loop_and_a_rebuilt_partition(
        directed, parallelism, windows):
    """Windows of edge additions (with and without values, parallel edges, new vertices at one or
    both ends), vertex values (of present and new vertices) and, in some windows, removals,
    applied to the chunks of task 0 of ``parallelism`` and to its partition in place as the
    operator does it (``remove``, ``extend`` with the chunks, ``update_given``): each vertex's
    out- and in-edges, weights and values equal per-vertex lists kept by a loop, its vertex value
    the last one given, and the vertices, their order and the other tasks' columns equal a
    partition built again from the chunks."""
    ring = [(v, (v + 1) % 8, None) for v in range(8)]  # vertices 8-15 come in later windows
    out: dict = defaultdict(list)
    into: dict = defaultdict(list)
    given: dict = {}

    def owned(vertex) -> bool:
        return key_group_of(vertex, 8) * parallelism // 8 == 0

    def halves(a, b, value, removal):
        side_out, side_in = (-1, -3) if removal else (1, 3)
        if directed:
            found = [(a, b, value, side_out), (b, a, value, side_in)]
        else:
            found = [(a, b, value, side_out)] + ([(b, a, value, side_out)] if a != b else [])
        return [h for h in found if owned(h[0])]  # the task gets its own vertices' halves

    def model(a, b, value, removal):
        pairs = [(out, a, b), (into, b, a)] if directed else [(out, a, b)] + (
            [(out, b, a)] if a != b else [])
        for lists, vertex, other in pairs:
            if removal:
                lists[vertex] = [e for e in lists[vertex] if e[0] != other]
            else:
                lists[vertex].append((other, value))

    def rebuilt():
        return Partition([(g, chunks[chunk_key(g, 8)]) for g in range(8)
                          if chunk_key(g, 8) in chunks], directed, parallelism, 8)

    chunks: dict = {}
    first = [h for a, b, v in ring for h in halves(a, b, v, False)]
    add_window_input(chunks, [("edge", first)], 8, directed)
    for a, b, v in ring:
        model(a, b, v, False)
    part = rebuilt()
    for changes, removing in windows:
        edges = [(kind, a, b, v) for kind, a, b, v in changes if kind != "vertex"]
        if not removing:
            edges = [change for change in edges if change[0] == "add"]
        batch = [h for kind, a, b, v in edges for h in halves(a, b, v, kind == "remove")]
        for kind, a, b, v in edges:
            model(a, b, None if kind == "remove" else v, kind == "remove")
        vertices = [(a, v) for kind, a, _, v in changes if kind == "vertex" and owned(a)]
        given.update(vertices)
        records = [("edge", batch), ("vertex", vertices)]
        if removing:
            records[0][1].extend(halves(0, 1, None, True))  # an edge that may be absent
            model(0, 1, None, True)
            applied = apply_changes(chunks, records, 8, directed, None)
            assert not applied.reshaped
            part.remove(*applied.removals)
            added = applied.added or (np.zeros(0, np.int64), np.zeros(0, np.int64),
                                      np.zeros(0, np.int8), None)
            ensured, given_ids = applied.ensured, applied.given
        else:
            _, _, added = add_window_input(chunks, records, 8, directed)
            ensured, given_ids = np.zeros(0, np.int64), id_array([a for a, _ in vertices])
        assert part.extend(added, chunks, np.concatenate([ensured, given_ids]))
        assert part.update_given(chunks, given_ids)
        assert {int(v): g for v, g in zip(part.ids, part.given, strict=True) if g is not None} == {
            v: g for v, g in given.items() if g is not None}
        again = rebuilt()
        assert part.ids.tolist() == again.ids.tolist()
        assert part.given.tolist() == again.given.tolist()
        assert (part.groups, part.offsets.tolist()) == (again.groups, again.offsets.tolist())
        # Removals leave columns no edge uses any more; the ones a rebuild has are all there, in
        # the block of their owning task.
        assert set(again.remote_ids.tolist()) <= set(part.remote_ids.tolist())
        owners = key_groups(part.remote_ids, 8) * parallelism // 8
        blocks = np.searchsorted(part.bounds, part.n + np.arange(len(owners)), side="right") - 1
        assert owners.tolist() == blocks.tolist()
        assert part.bounds[0] == part.n and part.bounds[-1] == part.m

        def listed(p, matrix, with_values):
            found = {}
            for r in range(p.n):
                lo, hi = matrix.indptr[r], matrix.indptr[r + 1]
                others = [int(p.columns_ids[c]) for c in matrix.indices[lo:hi]]
                weights = matrix.data[lo:hi].tolist()
                values = (p.out_values[lo:hi].tolist() if with_values and p.out_values
                          is not None else [None] * (hi - lo))
                found[int(p.ids[r])] = (others, weights, values)
            return found

        def expect(lists, with_values):
            return {v: ([o for o, _ in lists[v]], [1.0 if x is None else float(x)
                                                   for _, x in lists[v]],
                        [x for _, x in lists[v]] if with_values else [None] * len(lists[v]))
                    for v in part.ids.tolist()}

        for p in (part, again):  # the partition changed in place and the chunks it is built from
            assert listed(p, p.out_edges, True) == expect(out, True)
            if directed:
                assert listed(p, p.in_edges, False) == expect(into, False)
        assert part.out_degree.tolist() == [len(out[int(v)]) for v in part.ids]
        assert part.out_edges.shape == (part.n, part.m) and part.n == again.n


def test_incremental_pagerank_on_a_task_holding_the_whole_graph_ends_in_one_superstep():
    """A task that holds every vertex and edge pushes the residuals along its own edges within
    one superstep, from the last window's ``y`` (here off by a factor in its total), and stops
    there with every rank within the tolerance."""
    graph = nx.barabasi_albert_graph(300, 3, seed=5)
    ranks = nx.pagerank(graph, alpha=0.85, tol=1e-15, max_iter=10_000)
    chunks: dict = {}
    halves = [(a, b, None, 1) for a, b in graph.edges] + [(b, a, None, 1) for a, b in graph.edges]
    add_window_input(chunks, [("edge", halves)], 8, False)
    part = Partition([(g, chunks[chunk_key(g, 8)]) for g in range(8) if chunk_key(g, 8) in chunks],
                     False, 1, 8)
    program = ResidualPageRank(tolerance=1e-9)
    values = program.init(part.ids, part.given)
    values["y"] = np.array([ranks[int(v)] for v in part.ids]) * 1.5 * part.n / 0.15
    previous: dict = {}
    pieces: list = []
    for iteration in range(1, 200):
        if iteration > 1 and program.terminate(iteration - 1, previous):
            break
        ctx = ArrayContext(part, program.combine, program.aggregators)
        ctx.values, ctx.iteration, ctx.num_vertices = values, iteration, part.n
        ctx._previous = previous or {name: agg.zero for name, agg in program.aggregators.items()}
        values = program.compute(ctx, receive(pieces, part, program.combine))
        local, _ = split_outgoing(part, *ctx.outbox.finish())
        pieces, previous = [local], ctx.aggregates
    assert iteration == 2  # superstep 1 did it all
    assert all(abs(value - ranks[int(v)]) < 1e-9
               for v, value in zip(part.ids, program.result(part.ids, values), strict=True))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4)), max_size=20),
       st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), max_size=8),
       st.booleans(), st.sampled_from([int, "v{}".format]))
def test_removed_edges_leave_exactly_the_other_halves_in_the_chunks(edges, removed, directed,
                                                                    name):
    """Removing edges (parallel ones all at once, absent ones doing nothing) from chunks of integer
    or string ids leaves the halves a plain loop keeps."""
    def halves(a, b, sign):
        a, b = name(a), name(b)
        if directed:
            return [(a, b, None, sign), (b, a, None, 3 * sign)]
        return [(a, b, None, sign)] + ([(b, a, None, sign)] if a != b else [])

    chunks: dict = {}
    add_window_input(chunks, [("edge", [h for a, b in edges for h in halves(a, b, 1)])], 8,
                     directed)
    apply_changes(chunks, [("edge", [h for a, b in removed for h in halves(a, b, -1)])], 8,
                  directed, None)
    left = Counter((v, o, s) for c in chunks.values()
                   for v, o, s in zip(c[2].tolist(), c[3].tolist(), c[5].tolist(), strict=True))
    gone = {(v, o, -s) for a, b in removed for v, o, _, s in halves(a, b, -1)}
    assert left == Counter((v, o, s) for a, b in edges for v, o, _, s in halves(a, b, 1)
                           if (v, o, s) not in gone)
