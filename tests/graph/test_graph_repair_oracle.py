"""Repair against networkx on small random changing graphs that Hypothesis makes: edges added with
weights 0 to 3, removed, and removed and added again in one window with another weight, vertices
removed with their edges; ``incremental_wcc``, ``incremental_bfs`` and ``incremental_sssp`` on one
task (a window's whole repair in its first superstep) and on two (resets and requests between
tasks) equal networkx after every window. Also: a window on one task takes one superstep, and a
re-weighted edge restarts only the distances that rested on it."""

from __future__ import annotations

import random

import networkx as nx
import pytest
from _graph_versions import fold_changes, networkx_results, run_incremental
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gyreflow.api import Environment, SizeTumblingWindow
from gyreflow.api.graph import Edge, GraphView, RemoveEdge, RemoveVertex
from gyreflow.api.graph.array_algorithms import (
    ArrayIncrementalBreadthFirstSearch,
    ArrayIncrementalConnectedComponents,
)
from gyreflow.api.graph.incremental_algorithms import ArrayIncrementalShortestPaths

SOURCE = 0


def play(steps: list, directed: bool) -> tuple[list, list]:
    """``(batches, versions)`` from windows of steps ``("edge", a, b, w)`` (skipped when the
    edge is there), ``("cut", a, b)``, ``("reweigh", a, b, w)`` (the edge removed and added
    again with weight ``w`` in the window) and ``("drop", v)`` (the vertex goes with its edges,
    after the window's other changes)."""
    vertices: set = set()
    edges: dict = {}
    batches, versions = [], []

    def norm(a, b):
        return (a, b) if directed else (min(a, b), max(a, b))

    for window in steps:
        batch, drops = [], []
        for step in window:
            kind, *rest = step
            if kind == "drop":
                drops.append(rest[0])
                continue
            a, b = rest[0], rest[1]
            here = norm(a, b) in edges
            if kind == "edge" and a != b and not here:
                edges[norm(a, b)] = rest[2]
                vertices |= {a, b}
                batch.append(Edge(a, b, rest[2]))
            elif kind == "cut" and here:
                del edges[norm(a, b)]
                batch.append(RemoveEdge(a, b))
            elif kind == "reweigh" and here:
                edges[norm(a, b)] = rest[2]
                batch += [RemoveEdge(a, b), Edge(a, b, rest[2])]
        for vertex in dict.fromkeys(drops):
            if vertex in vertices:
                for pair in [pair for pair in edges if vertex in pair]:
                    del edges[pair]
                vertices.discard(vertex)
                batch.append(RemoveVertex(vertex, detach=True))
        batches.append(batch)
        versions.append((set(vertices), dict(edges)))
    return batches, versions


def run(batches, directed: bool, parallelism: int, programs: dict, **config) -> dict:
    env = Environment.local(progress=False, config=config)
    return run_incremental(env, batches, directed, parallelism, programs)


def assert_repairs_equal_networkx(steps: list, directed: bool, parallelism: int) -> None:
    """``incremental_wcc``, ``incremental_bfs`` and ``incremental_sssp`` over the windows of
    ``steps`` (see ``play``) equal networkx after every window."""
    batches, versions = play(steps, directed)
    programs = {"wcc": ArrayIncrementalConnectedComponents(directed),
                "bfs": ArrayIncrementalBreadthFirstSearch(SOURCE),
                "sssp": ArrayIncrementalShortestPaths(SOURCE)}
    outputs = run(batches, directed, parallelism, programs)
    for name in programs:
        after = fold_changes(outputs[name], len(batches))
        for window, version in enumerate(versions, start=1):
            assert after[window - 1] == networkx_results(version, directed, SOURCE)[name], (name, window)


VERTEX = st.integers(0, 6)
WEIGHT = st.integers(0, 3)
STEP = st.one_of(
    st.tuples(st.just("edge"), VERTEX, VERTEX, WEIGHT),
    st.tuples(st.just("edge"), VERTEX, VERTEX, WEIGHT),
    st.tuples(st.just("cut"), VERTEX, VERTEX),
    st.tuples(st.just("reweigh"), VERTEX, VERTEX, WEIGHT),
    st.tuples(st.just("drop"), VERTEX),
)


@pytest.mark.parametrize("parallelism", [1, 2])
@pytest.mark.parametrize("directed", [False, True], ids=["undirected", "directed"])
@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.lists(STEP, max_size=8), min_size=1, max_size=6))
def test_repaired_results_equal_networkx_after_every_window(directed, parallelism, steps):
    assert_repairs_equal_networkx(steps, directed, parallelism)


SUPERSTEPS: dict = {}


class CountedComponents(ArrayIncrementalConnectedComponents):
    """Records the last superstep of each window."""

    def compute(self, part, inbox):
        SUPERSTEPS[part.window] = max(SUPERSTEPS.get(part.window, 0), part.iteration)
        return super().compute(part, inbox)


def test_a_window_on_one_task_repairs_in_one_superstep():
    """A path 0-1-...-9 with a chord 0-9: cutting 4-5 restarts 5..8's labels, which come back
    through 9 and 0 within the window's first superstep; a path split in two takes its
    smallest id in the same superstep too."""
    batches = [[Edge(a, a + 1) for a in range(9)] + [Edge(0, 9)], [RemoveEdge(4, 5)],
               [RemoveEdge(0, 9)], [Edge(2, 7)]]
    SUPERSTEPS.clear()
    out = run(batches, False, 1, {"wcc": CountedComponents(False)})
    after = fold_changes(out["wcc"], len(batches))
    assert after[2] == {**{v: 0 for v in range(5)}, **{v: 5 for v in range(5, 10)}}
    assert after[3] == {v: 0 for v in range(10)}
    assert SUPERSTEPS == {1: 1, 2: 1, 3: 1, 4: 1}


RESTARTED: list = []


class CountedDistances(ArrayIncrementalShortestPaths):
    def invalidated(self, part, values):
        mask = super().invalidated(part, values)
        RESTARTED.append(sorted(values["id"][mask].tolist()))
        return mask


def test_a_reweighted_edge_restarts_only_the_distances_that_rested_on_it():
    """0-1 (1), 1-2 (1), 2-3 (1), 0-4 (5), 4-3 (5): 3 is 3 away through 1 and 2. Re-weighing
    1-2 to 4 restarts 2 and 3 (their distances rested on it; 4 is 5 away through 0, its parent
    lost no edge); removing 0-4 and adding it back with its weight restarts nothing (the edge
    gives 4 its distance again); re-weighing 0-1 to 0 restarts 1, 2 and 3, which get shorter."""
    batches = [[Edge(0, 1, 1), Edge(1, 2, 1), Edge(2, 3, 1), Edge(0, 4, 5), Edge(4, 3, 5)],
               [RemoveEdge(1, 2), Edge(1, 2, 4)],
               [RemoveEdge(0, 4), Edge(0, 4, 5)],
               [RemoveEdge(0, 1), Edge(0, 1, 0)]]
    RESTARTED.clear()
    out = run(batches, False, 1, {"sssp": CountedDistances(SOURCE)})
    assert RESTARTED == [[2, 3], [], [1, 2, 3]]
    after = fold_changes(out["sssp"], len(batches))
    assert after[1] == {0: 0.0, 1: 1.0, 2: 5.0, 3: 6.0, 4: 5.0}
    assert out["sssp"].get(3, []) == []
    assert after[3] == {0: 0.0, 1: 0.0, 2: 4.0, 3: 5.0, 4: 5.0}


def test_iteration_snapshots_between_supersteps_keep_results_and_changes_exact():
    """On two tasks with an iteration snapshot before every superstep (the values a window
    changed are then compared whole from that superstep on): the results equal networkx and
    each window emits exactly the vertices whose result changed."""
    steps = [[("edge", a, (a * 3 + 1) % 12, a % 4) for a in range(12)]
             + [("edge", a, a + 1, 1) for a in range(11)],
             [("cut", 0, 1), ("reweigh", 3, 4, 0), ("edge", 2, 9, 2)],
             [("cut", 4, 5), ("drop", 7), ("cut", 1, 4)],
             [("edge", 0, 11, 0), ("reweigh", 2, 9, 3), ("cut", 10, 11)]]
    for directed in (False, True):
        batches, versions = play(steps, directed)
        programs = {"wcc": ArrayIncrementalConnectedComponents(directed),
                    "bfs": ArrayIncrementalBreadthFirstSearch(SOURCE),
                    "sssp": ArrayIncrementalShortestPaths(SOURCE)}
        outputs = run(batches, directed, 2, programs,
                      **{"state.iteration_checkpoint_interval": 1})
        for name in programs:
            after = fold_changes(outputs[name], len(batches))
            for window, version in enumerate(versions, start=1):
                assert after[window - 1] == networkx_results(version, directed, SOURCE)[name], (name, window)


def test_a_static_superstep_over_most_vertices_reads_the_merged_matrices(monkeypatch):
    """A changed partition answers a few vertices' edges from its changes, unmerged; a
    superstep that reads the edges of most vertices (a recomputing BFS's) reads the merged
    matrices instead (reading every vertex's edges from the changes cost twice as much: BFS
    recomputed on 200,000 vertices took 294 ms a window instead of 136). The hops equal
    networkx's either way."""
    from gyreflow.api import graph_algorithms as algorithms
    from gyreflow.runtime.dataflow.graph.partition import Partition

    asked: list = []
    unmerged = Partition.edges

    def edges(self, rows, direction):
        asked.append((len(rows), self.n))
        return unmerged(self, rows, direction)

    monkeypatch.setattr(Partition, "edges", edges)
    n = 400
    first = [Edge(v, (v * 7 + 1) % n) for v in range(n)] + [Edge(v, v + 1) for v in range(n - 1)]
    batches = [first, [RemoveEdge(5, 6), Edge(3, 300)], [Edge(10, 390), RemoveEdge(0, 1)]]
    pipeline = Environment.local(progress=False).pipeline("static-bfs")

    @pipeline.task
    def changing(ctx):
        edges = ctx.source(batches, SizeTumblingWindow(1), parallelism=1).flat_map(list)
        algorithms.bfs(GraphView(None, edges, directed=False), SOURCE).collect("bfs")

    out = pipeline.execute().by_window("bfs")
    graph = nx.Graph([(e.src, e.dst) for e in first])
    graph.remove_edge(5, 6)
    graph.add_edge(3, 300)
    graph.add_edge(10, 390)
    graph.remove_edge(0, 1)
    assert dict(out[3]) == nx.single_source_shortest_path_length(graph, SOURCE)
    assert asked and all(16 * rows < vertices for rows, vertices in asked)


@pytest.mark.parametrize("parallelism", [1, 2])
def test_added_property_edges_offer_their_weight_property(parallelism):
    """The window's new edges offer distances with the weight their property map names (read
    from the edges' values, as ``sssp`` reads its edges): networkx on each version, with an edge
    added again with another weight and one of weight 0."""
    windows = [[Edge(1, 2, {"label": "ROAD", "km": 5}), Edge(2, 3, ("ROAD", {"km": 1})),
                Edge(1, 3, {"km": 9}), Edge(3, 4, {"km": 2})],
               [RemoveEdge(1, 2), Edge(1, 2, {"km": 1}), Edge(4, 5, {"km": 0})],
               [RemoveEdge(2, 3), Edge(2, 3, ("ROAD", {"km": 20})), Edge(1, 5, {"km": 3})]]
    pipeline = Environment.local(progress=False).pipeline("property-weights")

    @pipeline.task
    def roads(ctx):
        edges = ctx.source(windows, SizeTumblingWindow(1), parallelism=1).flat_map(list)
        graph = GraphView(None, edges, directed=False, parallelism=parallelism)
        graph.incremental_compute(ArrayIncrementalShortestPaths(1, weight="km"),
                                  name="km").collect("km")

    out = pipeline.execute().by_window("km")
    graph = nx.Graph()
    after = fold_changes(out, len(windows))
    for window, changes in enumerate(windows, start=1):
        for change in changes:
            if isinstance(change, Edge):
                value = change.value
                graph.add_edge(change.src, change.dst,
                               **(value[1] if isinstance(value, tuple) else value))
        want = nx.single_source_dijkstra_path_length(graph, 1, weight="km")
        assert after[window - 1] == {v: float(d) for v, d in want.items()}, window


@pytest.mark.parametrize("parallelism", [1, 2])
@pytest.mark.parametrize("directed", [False, True], ids=["undirected", "directed"])
def test_trimmed_repairs_of_a_larger_social_graph_equal_networkx(directed, parallelism):
    """A preferential-attachment graph of 150 vertices (weights 0 to 3), then windows that cut
    edges of the source and of random vertices, re-weigh some and add others: the cut subtrees
    are deep and most of their vertices have another neighbour offering their value, so trimming
    keeps many of them. ``incremental_wcc``, ``incremental_bfs`` and ``incremental_sssp`` equal
    networkx after every window, on one task and on two."""
    rng = random.Random(29)
    graph = nx.barabasi_albert_graph(150, 3, seed=29)
    windows = [[("edge", a, b, rng.choice([0, 1, 1, 2, 3])) for a, b in graph.edges]]
    pairs = list(graph.edges)
    for _ in range(6):
        steps = [("cut", SOURCE, neighbour) for neighbour in rng.sample(sorted(graph[SOURCE]), 2)]
        for _ in range(14):
            a, b = rng.choice(pairs)
            kind = rng.random()
            if kind < 0.45:
                steps.append(("cut", a, b))
            elif kind < 0.55:
                steps.append(("reweigh", a, b, rng.randint(0, 3)))
            else:
                a, b = rng.randrange(160), rng.randrange(160)
                pairs.append((a, b))
                steps.append(("edge", a, b, rng.randint(1, 3)))
        windows.append(steps)
    assert_repairs_equal_networkx(windows, directed, parallelism)
