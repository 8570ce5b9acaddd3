"""Array vertex programs in jobs against networkx, the plain-Python references and plain loops.

The library algorithms on string vertex ids and several tasks, and on one task holding the whole
graph; a user-written ``ArrayVertexCompute``; a graph built from blocks of arrays; windows of vertices
alone reaching a growing graph; a program that ends before its neighbour keeping its last window; and
a program error naming the operator.
"""

from __future__ import annotations

import math
import random
from collections import Counter

import graph_reference as ref
import networkx as nx
import numpy as np
import pytest

from gyreflow.api import SizeTumblingWindow
from gyreflow.api.graph import (
    Aggregator,
    ArrayVertexCompute,
    EdgeBlock,
    GraphView,
    VertexBlock,
    algorithms,
)
from gyreflow.api.graph.array_algorithms import ArrayConnectedComponents
from gyreflow.runtime.errors import UserFunctionError


def _close(got: float, expected: float) -> bool:
    if math.isinf(expected) or math.isinf(got):
        return got == expected
    return abs(got - expected) <= 1e-9 * max(1.0, abs(expected))


def _named_graph(seed: int, n: int, m: int):
    vertices, edges = ref.random_graph(seed, n, m, self_loops=True, duplicates=True, weights=True,
                                       isolated=2)
    name = {v: f"v{v:03d}" for v in vertices}
    return [name[v] for v in vertices], [(name[a], name[b], w) for a, b, w in edges]


@pytest.mark.parametrize("directed", [True, False])
def test_library_algorithms_on_string_ids_and_three_tasks_match_networkx(make_env, directed):
    vertices, edges = _named_graph(7 if directed else 8, 18, 40)
    source = vertices[0]
    pipeline = make_env(3).pipeline("named-graph")

    @pipeline.task
    def run(ctx):
        graph = GraphView(ctx.source(vertices), ctx.source(edges), directed=directed)
        algorithms.pagerank(graph, 0.85, 4).collect("pr")
        algorithms.bfs(graph, source).collect("bfs")
        algorithms.wcc(graph).collect("wcc")
        algorithms.sssp(graph, source).collect("sssp")
        algorithms.cdlp(graph, 3).collect("cdlp")
        algorithms.lcc(graph).collect("lcc")

    result = pipeline.execute()
    got = {name: dict(result.output(name)) for name in ("pr", "bfs", "wcc", "sssp", "cdlp", "lcc")}
    g = nx.MultiDiGraph() if directed else nx.MultiGraph()
    g.add_nodes_from(vertices)
    g.add_weighted_edges_from(edges)
    hops = nx.single_source_shortest_path_length(g, source)
    assert got["bfs"] == {v: hops.get(v, ref.UNREACHABLE) for v in vertices}
    distances = nx.single_source_dijkstra_path_length(g, source)
    assert all(_close(got["sssp"][v], distances.get(v, math.inf)) for v in vertices)
    components = nx.weakly_connected_components(g) if directed else nx.connected_components(g)
    assert got["wcc"] == {v: min(c) for c in components for v in c}
    ranks = ref.pagerank(vertices, edges, directed, 0.85, 4)
    assert all(_close(got["pr"][v], ranks[v]) for v in vertices)
    assert got["cdlp"] == ref.cdlp(vertices, edges, directed, 3)
    coefficients = ref.lcc(vertices, edges, directed)
    assert all(_close(got["lcc"][v], coefficients[v]) for v in vertices)


class LargestInNeighbour(ArrayVertexCompute):
    """Each vertex ends with the largest value the vertex stream gave its in-neighbours (-1 when it
    has none), and an aggregator counts the messages."""

    combine = "max"
    max_iterations = 2
    aggregators = {"messages": Aggregator.sum()}

    def init(self, ids, given):
        return np.full(len(ids), -1, dtype=np.int64)

    def compute(self, part, inbox):
        if part.iteration == 1:
            given = np.array([-1 if g is None else g for g in part.given.tolist()], dtype=np.int64)
            part.send_along(given, "out")
            part.aggregate("messages", int(part.out_degree.sum()))
            return part.values
        values = part.values.copy()
        values[inbox.positions] = inbox.values
        return values


def test_a_user_array_program_matches_a_plain_loop(make_env):
    rng = random.Random(3)
    given = {v: rng.randrange(100) for v in range(25)}
    edges = [(rng.randrange(30), rng.randrange(30)) for _ in range(60)]  # ids 25..29: no value
    pipeline = make_env(2).pipeline("user-array-program")

    @pipeline.task
    def run(ctx):
        graph = GraphView(ctx.source(list(given.items())), ctx.source(edges), directed=True)
        graph.compute(LargestInNeighbour()).collect("largest")

    got = dict(pipeline.execute().output("largest"))
    expected = {v: -1 for v in [*given, *(x for e in edges for x in e)]}
    for src, dst in edges:
        expected[dst] = max(expected[dst], given.get(src, -1))
    assert got == expected


def test_incremental_wcc_over_windows_folds_to_networkx(make_env):
    rng = random.Random(5)
    edges = [(f"n{rng.randrange(40)}", f"n{rng.randrange(40)}") for _ in range(45)]
    pipeline = make_env(2).pipeline("growing-named")

    @pipeline.task
    def grow(ctx):
        graph = GraphView(None, ctx.source(edges, SizeTumblingWindow(15), parallelism=1))
        algorithms.incremental_wcc(graph).collect("wcc")

    by_window = pipeline.execute().by_window("wcc")
    labels: dict = {}
    for window in sorted(by_window):
        labels.update(dict(by_window[window]))
        g = nx.Graph(edges[: 15 * window])
        assert labels == {v: min(c) for c in nx.connected_components(g) for v in c}


class WrongShape(ArrayVertexCompute):
    def init(self, ids, given):
        return np.zeros(len(ids))

    def compute(self, part, inbox):
        return np.zeros(part.num_local + 1)


def test_values_of_the_wrong_shape_stop_the_job_naming_the_operator():
    from gyreflow.api import Environment

    pipeline = Environment.local(progress=False).pipeline("bad-array-program")

    @pipeline.task
    def run(ctx):
        graph = GraphView(None, ctx.source([(1, 2), (2, 3)]))
        graph.compute(WrongShape(), name="shapes").collect("out")

    with pytest.raises(UserFunctionError, match="shapes") as failure:
        pipeline.execute()
    assert "returned values of shape (4,) for 3 vertices" in str(failure.value.cause)


def test_a_graph_from_blocks_of_arrays_equals_networkx(make_env):
    vertices, edges = ref.random_graph(9, 30, 90, self_loops=True, duplicates=True, weights=True,
                                       isolated=3)
    table = np.array(edges)
    blocks = [EdgeBlock(table[i:i + 25, 0].astype(np.int64), table[i:i + 25, 1].astype(np.int64),
                        table[i:i + 25, 2]) for i in range(0, len(table), 25)]
    source = vertices[0]
    pipeline = make_env(3).pipeline("graph-from-blocks")

    @pipeline.task
    def run(ctx):
        graph = GraphView.from_arrays(ctx.source([VertexBlock(np.array(vertices))]),
                                      ctx.source(blocks), directed=True)
        algorithms.sssp(graph, source).collect("sssp")
        algorithms.wcc(graph).collect("wcc")

    result = pipeline.execute()
    g = nx.MultiDiGraph()
    g.add_nodes_from(vertices)
    g.add_weighted_edges_from(edges)
    distances = nx.single_source_dijkstra_path_length(g, source)
    got = dict(result.output("sssp"))
    assert got.keys() == set(vertices)
    assert all(_close(got[v], distances.get(v, math.inf)) for v in vertices)
    assert dict(result.output("wcc")) == {v: min(c) for c in nx.weakly_connected_components(g)
                                          for v in c}


def test_a_graph_from_blocks_refuses_a_per_vertex_program():
    from gyreflow.api import Environment

    pipeline = Environment.local(progress=False).pipeline("blocks-per-vertex")

    @pipeline.task
    def run(ctx):
        graph = GraphView.from_arrays(None, ctx.source([EdgeBlock(np.array([1]), np.array([2]))]))
        with pytest.raises(TypeError, match="array programs"):
            graph.compute(algorithms.ConnectedComponents())
        graph.compute(ArrayConnectedComponents()).collect("wcc")

    assert sorted(pipeline.execute().output("wcc")) == [(1, 1), (2, 1)]


class IncidentEdges(ArrayVertexCompute):
    """Each vertex's number of incident edges, set in the first superstep (no messages)."""

    def init(self, ids, given):
        return np.zeros(len(ids), dtype=np.int64)

    def compute(self, part, inbox):
        return np.diff(part.out_edges.indptr).astype(np.int64)


def test_a_program_ending_before_its_neighbour_keeps_its_last_window(make_env):
    vertices, edges = ref.random_graph(31, 40, 120)
    pipeline = make_env(1).pipeline("two-graph-programs")

    @pipeline.task
    def grow(ctx):
        graph = GraphView(None, ctx.source(edges, SizeTumblingWindow(15), parallelism=1),
                          directed=False)
        graph.incremental_compute(IncidentEdges()).collect("degree")
        algorithms.incremental_bfs(graph, edges[0][0]).collect("bfs")

    folded: dict = {}
    for _, records in sorted(pipeline.execute().by_window("degree").items()):
        folded.update(records)
    expected = Counter(v for a, b in edges for v in ((a, b) if a != b else (a,)))
    assert folded == dict(expected)


@pytest.mark.parametrize("directed", [True, False])
def test_one_task_holding_the_whole_graph_matches_the_references(make_env, directed):
    vertices, edges = ref.random_graph(21 if directed else 22, 25, 140, self_loops=True,
                                       duplicates=True, isolated=3)
    pipeline = make_env(1).pipeline("whole-graph-task")

    @pipeline.task
    def run(ctx):
        graph = GraphView(ctx.source(vertices), ctx.source(edges), directed=directed,
                          parallelism=1)
        algorithms.wcc(graph).collect("wcc")
        algorithms.cdlp(graph, 4).collect("cdlp")
        algorithms.lcc(graph).collect("lcc")

    result = pipeline.execute()
    g = nx.MultiDiGraph() if directed else nx.MultiGraph()
    g.add_nodes_from(vertices)
    g.add_edges_from(edges)
    components = nx.weakly_connected_components(g) if directed else nx.connected_components(g)
    assert dict(result.output("wcc")) == {v: min(c) for c in components for v in c}
    assert dict(result.output("cdlp")) == ref.cdlp(vertices, edges, directed, 4)
    coefficients = ref.lcc(vertices, edges, directed)
    got = dict(result.output("lcc"))
    assert got.keys() == set(vertices)
    assert all(_close(got[v], coefficients[v]) for v in vertices)
    assert any(0.0 < c < 1.0 for c in coefficients.values())


class GivenValue(ArrayVertexCompute):
    """Each vertex's value from the vertex stream (-1 without one), set in the first superstep."""

    def init(self, ids, given):
        return np.full(len(ids), -1, dtype=np.int64)

    def compute(self, part, inbox):
        return np.array([-1 if g is None else g for g in part.given.tolist()], dtype=np.int64)


def test_windows_of_vertices_only_reach_a_growing_graph(make_env):
    edges = [(1, 2), (2, 3), (3, 1)]
    vertices = [(1, 10), (2, 20), (4, 40), (5, 50), (2, 21), (6, 60)]
    pipeline = make_env(1).pipeline("vertices-only-windows")

    @pipeline.task
    def grow(ctx):
        graph = GraphView(ctx.source(vertices, SizeTumblingWindow(2), parallelism=1),
                          ctx.source(edges, SizeTumblingWindow(3), parallelism=1), directed=True)
        graph.incremental_compute(GivenValue()).collect("given")

    folded: dict = {}
    for _, records in sorted(pipeline.execute().by_window("given").items()):
        folded.update(records)
    expected = {1: 10, 2: 21, 3: -1, 4: 40, 5: 50, 6: 60}
    assert folded == expected
