"""Repair, not restart: incremental WCC, BFS and SSSP keep each vertex's parent, and a removal
starts again only the vertices whose value rested on a removed edge or vertex.

Every version of a changing graph (additions, removals that split components, removals of tree
and non-tree edges, vertices removed with their edges) is checked against networkx; the hooks'
choice of vertices is checked against a plain-Python walk of the parent chains; and the vertices
a removal starts again are counted where the program hands them to the runtime.
"""

from __future__ import annotations

import random

import networkx as nx
import numpy as np
import pytest
from _graph_versions import fold_changes, networkx_results, run_incremental

from gyreflow.api import Environment, SizeTumblingWindow
from gyreflow.api import graph_algorithms as algorithms
from gyreflow.api.graph import Edge, GraphView, RemoveEdge, RemoveVertex
from gyreflow.api.graph.array_algorithms import (
    ArrayIncrementalBreadthFirstSearch,
    ArrayIncrementalConnectedComponents,
)
from gyreflow.api.graph.incremental_algorithms import ArrayIncrementalShortestPaths
from gyreflow.api.graph.repair import NO_PARENT, PARENT, value_dtype
from gyreflow.api.graph.trimming import subtrees


def clustered_windows(seed: int, clusters: int, size: int, windows: int, directed: bool):
    """``(batches, versions)``: dense clusters joined by a few bridges, then windows that remove
    bridges (splitting components), edges inside clusters (tree or not), vertices with their
    edges, and add edges; ``versions`` holds ``(vertices, {(src, dst): weight})`` after each."""
    rng = random.Random(seed)
    edges: dict = {}
    vertices: set = set()

    def norm(a, b):
        return (a, b) if directed else (min(a, b), max(a, b))

    def add(batch, a, b):
        if a != b and norm(a, b) not in edges:
            edges[norm(a, b)] = rng.randint(1, 9)
            vertices.update((a, b))
            batch.append(Edge(a, b, edges[norm(a, b)]))

    first: list = []
    for c in range(clusters):
        members = range(c * size, (c + 1) * size)
        for _ in range(size * 2):
            add(first, rng.choice(members), rng.choice(members))
        if c:
            add(first, rng.randrange(c * size), rng.choice(members))  # a bridge to earlier ones
    batches, versions = [first], [(set(vertices), dict(edges))]
    n = clusters * size
    for _ in range(windows - 1):
        batch: list = []
        for _ in range(6):
            if edges and rng.random() < 0.6:
                pair = rng.choice(sorted(edges))
                del edges[pair]
                batch.append(RemoveEdge(*pair))
            else:
                add(batch, rng.randrange(n + 5), rng.randrange(n))
        if rng.random() < 0.5:
            vertex = rng.choice(sorted(vertices))
            vertices.discard(vertex)
            for pair in [pair for pair in edges if vertex in pair]:
                del edges[pair]
            batch.append(RemoveVertex(vertex, detach=True))
        batches.append(batch)
        versions.append((set(vertices), dict(edges)))
    return batches, versions


@pytest.mark.parametrize("parallelism", [1, 3])
@pytest.mark.parametrize("directed", [False, True], ids=["undirected", "directed"])
def test_repaired_results_equal_networkx_on_every_version(make_env, directed, parallelism):
    batches, versions = clustered_windows(5 + directed, 4, 12, 9, directed)
    source = 0
    programs = {"wcc": ArrayIncrementalConnectedComponents(directed),
                "bfs": ArrayIncrementalBreadthFirstSearch(source),
                "sssp": ArrayIncrementalShortestPaths(source)}
    outputs = run_incremental(make_env(), batches, directed, parallelism, programs)
    for name in programs:
        folded = fold_changes(outputs[name], len(batches))
        for window, version in enumerate(versions, start=1):
            want = networkx_results(version, directed, source)[name]
            assert folded[window - 1] == want, f"{name} after window {window}"


def test_components_split_by_removed_bridges_equal_networkx():
    """A path of cliques: removing each bridge in turn splits off the rest, whose label becomes
    its smallest id; adding the bridge back joins them again."""
    cliques = [list(range(k * 4, k * 4 + 4)) for k in range(5)]
    first = [Edge(a, b) for c in cliques for a in c for b in c if a < b]
    first += [Edge(cliques[k][3], cliques[k + 1][0]) for k in range(4)]
    batches = [first, [RemoveEdge(3, 4)], [RemoveEdge(11, 12)], [Edge(3, 4)],
               [RemoveEdge(7, 8), RemoveEdge(15, 16)], [Edge(11, 12), Edge(0, 19)]]
    edges = {(e.src, e.dst) for e in first}
    versions = []
    for batch in batches[1:]:
        for record in batch:
            if isinstance(record, RemoveEdge):
                edges.discard((record.src, record.dst))
            else:
                edges.add((record.src, record.dst))
        versions.append(set(edges))
    env = Environment.local(progress=False)
    out = run_incremental(env, batches, False, 2, {"wcc": ArrayIncrementalConnectedComponents(False)})
    folded = fold_changes(out["wcc"], len(batches))
    for window, pairs in enumerate(versions, start=2):
        graph = nx.Graph(list(pairs))
        want = {v: min(part) for part in nx.connected_components(graph) for v in part}
        assert folded[window - 1] == want, window


# --- which vertices start again ---------------------------------------------------------------

RESTARTED: list = []


class CountingComponents(ArrayIncrementalConnectedComponents):
    """Records, per removal window, the vertices ``invalidated`` starts again."""

    def invalidated(self, part, values):
        mask = super().invalidated(part, values)
        RESTARTED.append(sorted(values["id"][mask].tolist()))
        return mask


class CountingHops(ArrayIncrementalBreadthFirstSearch):
    def invalidated(self, part, values):
        mask = super().invalidated(part, values)
        RESTARTED.append(sorted(values["id"][mask].tolist()))
        return mask


class CountingComponentsWithoutTrimming(CountingComponents):
    reanchors = False


@pytest.mark.parametrize(("program", "restarted"), [
    (CountingComponentsWithoutTrimming, [[], [3, 4, 5], [3, 4]]),
    (CountingComponents, [[], [3, 4], [3, 4]]),
])
def test_a_non_tree_edge_restarts_nothing_and_a_tree_edge_only_its_subtree(program, restarted):
    """Path 0-1-2-3-4-5: each vertex takes label 0 from the one before it. Edges 1-4 and 0-5,
    added later, join vertices that have label 0 already: off the tree. Removing 1-4 starts no
    vertex again; removing 2-3 cuts 3, 4 and 5 (the subtree below it): without trimming all
    three start again and take label 0 again through 0-5; trimmed, 5 keeps its label from 0,
    whose parent chain is whole (nothing changed: nothing emitted either way); removing 4-5
    then starts 4 and 3 again, a component of their own."""
    batches = [[Edge(a, a + 1) for a in range(5)], [Edge(1, 4), Edge(0, 5)], [RemoveEdge(1, 4)],
               [RemoveEdge(2, 3)], [RemoveEdge(4, 5)]]
    RESTARTED.clear()
    out = run_incremental(Environment.local(progress=False), batches, False, 1,
              {"wcc": program(False)})
    assert RESTARTED == restarted
    assert out["wcc"].get(3, []) == [] and out["wcc"].get(4, []) == []
    assert sorted(out["wcc"][5]) == [(3, 3), (4, 3)]
    assert fold_changes(out["wcc"], len(batches))[4] == {0: 0, 1: 0, 2: 0, 5: 0, 3: 3, 4: 3}


class CountingHopsWithoutTrimming(CountingHops):
    reanchors = False


@pytest.mark.parametrize(("program", "restarted"), [
    (CountingHopsWithoutTrimming, [[], [4], [4]]),
    (CountingHops, [[], [], [4]]),
])
def test_bfs_restarts_the_subtree_below_a_removed_tree_edge_only(program, restarted):
    """BFS from 0 on the path 0-1-2-3-4-5 with 1-4, 0-5 and 2-4 added: 4 is 2 hops away
    through 1, 5 one hop, 3 three hops through 2. Removing 2-4 (off the tree) starts nothing
    again; removing 1-4 leaves 4 without its parent, but 5, one hop away, offers it its 2 hops:
    trimming by value keeps it (without it, 4 starts again and comes back to 2 through 5);
    removing 4-5 then starts 4 again (4 hops, through 3), not 3, whose count comes from 2."""
    batches = [[Edge(a, a + 1) for a in range(5)], [Edge(1, 4), Edge(0, 5), Edge(2, 4)],
               [RemoveEdge(2, 4)], [RemoveEdge(1, 4)], [RemoveEdge(4, 5)]]
    RESTARTED.clear()
    out = run_incremental(Environment.local(progress=False), batches, False, 1, {"bfs": program(0)})
    assert RESTARTED == restarted
    hops = fold_changes(out["bfs"], len(batches))
    assert hops[1] == {0: 0, 1: 1, 2: 2, 3: 3, 4: 2, 5: 1}
    assert hops[3] == hops[1] and out["bfs"].get(4, []) == []
    assert hops[4] == {0: 0, 1: 1, 2: 2, 3: 3, 4: 4, 5: 1}


def test_a_vertex_kept_by_another_neighbour_keeps_its_subtree_and_anchors_others():
    """BFS from 0: 1 and 2 one hop away; 3 two hops through 1 (the smaller id; 2 beside it), 20
    below 3; 4 two hops through 1, 5 below it, and 30 four hops through 5 (20 beside it).
    Removing 0-1 cuts 1 and everything below it. 1 has no neighbour left one hop closer and
    starts again; 3 is offered its 2 hops by 2 and keeps them, and 20 with it; then 30 is
    offered its 4 hops by 20 and keeps them too. 4 and 5 find no such neighbour and start
    again."""
    edges = [(0, 1), (0, 2), (1, 3), (2, 3), (3, 20), (1, 4), (4, 5), (5, 30), (20, 30)]
    batches = [[Edge(a, b) for a, b in edges], [RemoveEdge(0, 1)]]
    RESTARTED.clear()
    out = run_incremental(Environment.local(progress=False), batches, False, 1,
                          {"bfs": CountingHops(0)})
    assert RESTARTED == [[1, 4, 5]]
    graph = nx.Graph([pair for pair in edges if pair != (0, 1)])
    assert fold_changes(out["bfs"], len(batches))[1] == nx.single_source_shortest_path_length(
        graph, 0)


def test_subtrees_are_the_vertices_a_plain_walk_of_the_parents_finds():
    """A random forest over 400 vertices and a few cut vertices: ``subtrees`` marks exactly the
    vertices whose parent chain (walked in plain Python) reaches one of them."""
    rng = random.Random(3)
    n = 400
    parent = {v: (rng.randrange(v) if v and rng.random() < 0.9 else None) for v in range(n)}
    values = np.zeros(n, dtype=value_dtype(np.dtype(np.int64), np.dtype(np.int64)))
    order = rng.sample(range(n), n)  # positions need not follow the ids
    values["id"] = order
    values["parent"] = [parent[v] if parent[v] is not None else 0 for v in order]
    values["link"] = [PARENT if parent[v] is not None else NO_PARENT for v in order]
    cuts = rng.sample(range(n), 6)

    def hit(v):
        while v is not None:
            if v in cuts:
                return True
            v = parent[v]
        return False

    mask = subtrees(values, cuts)
    assert sorted(values["id"][mask].tolist()) == [v for v in range(n) if hit(v)]
    assert 6 < mask.sum() < n // 2
    # walked along edges instead: the forest's edges (parent to child) among random others
    position = {v: i for i, v in enumerate(order)}
    edges = [(position[p], position[c]) for c, p in parent.items() if p is not None]
    edges += [(rng.randrange(n), rng.randrange(n)) for _ in range(3 * n)]
    rows_of = np.array([a for a, _ in edges]), np.array([b for _, b in edges])

    def children(at):
        picked = np.isin(rows_of[0], at)
        return rows_of[0][picked], rows_of[1][picked]

    assert subtrees(values, cuts, children).tolist() == mask.tolist()


def test_subtrees_with_string_ids():
    values = np.zeros(5, dtype=value_dtype(np.dtype(object), np.dtype(object)))
    values["id"] = ["r", "a", "b", "c", "d"]
    values["parent"] = [None, "r", "a", "b", "r"]
    values["link"] = [NO_PARENT, PARENT, PARENT, PARENT, PARENT]
    assert subtrees(values, ["a"]).tolist() == [False, True, True, True, False]


@pytest.mark.parametrize("directed", [False, True], ids=["undirected", "directed"])
def test_public_functions_repair_on_two_tasks(directed):
    """``incremental_wcc``, ``incremental_bfs`` and ``incremental_sssp`` on two tasks (parent
    chains that cross tasks: a RESET message carries the invalidation on)."""
    batches, versions = clustered_windows(31 + directed, 3, 15, 8, directed)
    env = Environment.local(progress=False)
    pipeline = env.pipeline("public")

    @pipeline.task
    def changing(ctx):
        edges = ctx.source(batches, SizeTumblingWindow(1), parallelism=1).flat_map(list)
        graph = GraphView(None, edges, directed=directed, parallelism=2)
        algorithms.incremental_wcc(graph).collect("wcc")
        algorithms.incremental_bfs(graph, 0).collect("bfs")
        algorithms.incremental_sssp(graph, 0).collect("sssp")

    result = pipeline.execute()
    for name in ("wcc", "bfs", "sssp"):
        folded = fold_changes(result.by_window(name), len(batches))
        for window, version in enumerate(versions, start=1):
            assert folded[window - 1] == networkx_results(version, directed, 0)[name], (name, window)
