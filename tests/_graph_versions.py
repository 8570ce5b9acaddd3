"""Changing graphs for the graph tests: seeded windows of changes with the graph after each,
jobs running the library's incremental algorithms on them, and oracles for their results:
networkx on each version, and a job's per-window changes folded into the result after each window."""

from __future__ import annotations

import math
import random

import networkx as nx

from gyreflow.api import SizeTumblingWindow
from gyreflow.api import graph_algorithms as algorithms
from gyreflow.api.graph import Edge, GraphView, RemoveEdge, RemoveVertex
from gyreflow.api.graph_algorithms import UNREACHABLE


def networkx_results(version: tuple, directed: bool, source) -> dict:
    """``{"wcc", "bfs", "sssp": {vertex: value}}`` of ``version`` (``(vertices, {(a, b): weight})``),
    by networkx: the smallest vertex of each component, hops and weighted distances from
    ``source``."""
    vertices, edges = version
    graph = nx.DiGraph() if directed else nx.Graph()
    graph.add_nodes_from(vertices)
    graph.add_weighted_edges_from((a, b, w) for (a, b), w in edges.items())
    parts = nx.weakly_connected_components(graph) if directed else nx.connected_components(graph)
    hops = nx.single_source_shortest_path_length(graph, source) if source in graph else {}
    distance = nx.single_source_dijkstra_path_length(graph, source) if source in graph else {}
    return {"wcc": {v: min(part) for part in parts for v in part},
            "bfs": {v: hops.get(v, UNREACHABLE) for v in graph},
            "sssp": {v: float(distance.get(v, math.inf)) for v in graph}}


def run_incremental(env, batches: list, directed: bool, parallelism: int, programs: dict) -> dict:
    """``{name: result.by_window(name)}`` of each incremental program of ``programs`` over a graph
    changed by ``batches`` (a window each), on ``env``."""
    pipeline = env.pipeline("changing-graph")

    @pipeline.task
    def changing(ctx):
        edges = ctx.source(batches, SizeTumblingWindow(1), parallelism=1).flat_map(list)
        graph = GraphView(None, edges, directed=directed, parallelism=parallelism)
        for name, program in programs.items():
            graph.incremental_compute(program, name=name).collect(name)

    result = pipeline.execute()
    return {name: result.by_window(name) for name in programs}


def fold_changes(by_window: dict, windows: int, exact: bool = True) -> list[dict]:
    """The result after each window of a job that emits, per window, ``(vertex, value)`` for the
    vertices whose value changed (``None``: the vertex went); with ``exact``, each vertex at most
    once a window, only when its value changed, and deleted only when it was there."""
    state: dict = {}
    after = []
    for window in range(1, windows + 1):
        records = by_window.get(window, [])
        if exact:
            assert len({v for v, _ in records}) == len(records), f"window {window}: a vertex twice"
            same = [v for v, x in records if v in state and state[v] == x]
            assert not same, f"window {window} emitted unchanged vertices {same}"
            ghosts = [v for v, x in records if x is None and v not in state]
            assert not ghosts, f"window {window} deleted vertices no version had {ghosts}"
        for vertex, value in records:
            if value is None:
                state.pop(vertex, None)
            else:
                state[vertex] = value
        after.append(dict(state))
    return after


def change_windows(seed: int, n: int, windows: int, per_window: int, removal_share: float,
                   directed: bool, detaches: int = 0):
    """``(batches, versions)``: each window's change records, and after it the graph as
    ``(vertices, {(src, dst): weight})`` (undirected: the pair in sorted order). ``detaches``: how
    many vertices that still have edges each window removes with them (``detach=True``)."""
    rng = random.Random(seed)
    vertices: set = set()
    edges: dict = {}
    batches, versions = [], []

    def norm(src, dst):
        return (src, dst) if directed else (min(src, dst), max(src, dst))

    for _ in range(windows):
        batch = []
        for _ in range(per_window):
            roll = rng.random()
            if edges and roll < removal_share:
                pair = rng.choice(sorted(edges))
                del edges[pair]
                batch.append(RemoveEdge(*pair) if rng.random() < 0.5 or directed
                             else RemoveEdge(pair[1], pair[0]))  # either order, undirected
            elif edges and roll < removal_share + 0.05:
                pair = rng.choice(sorted(edges))  # a new weight: the edge removed and added again
                edges[pair] = rng.randint(1, 9)
                batch += [RemoveEdge(*pair), Edge(*pair, edges[pair])]
            else:
                src, dst = rng.randrange(n), rng.randrange(n)
                if src == dst or norm(src, dst) in edges:
                    continue
                edges[norm(src, dst)] = rng.randint(1, 9)
                vertices |= {src, dst}
                batch.append(Edge(src, dst, edges[norm(src, dst)]))
        linked = {v for pair in edges for v in pair}
        isolated = sorted(vertices - linked)
        for vertex in rng.sample(isolated, min(2, len(isolated))):
            vertices.discard(vertex)
            batch.append(RemoveVertex(vertex))
        for vertex in rng.sample(sorted(linked), min(detaches, len(linked))):
            vertices.discard(vertex)
            for pair in [pair for pair in edges if vertex in pair]:
                del edges[pair]
            batch.append(RemoveVertex(vertex, detach=True))
        batches.append(batch)
        versions.append((set(vertices), dict(edges)))
    return batches, versions


def nx_graph(version, directed: bool):
    vertices, edges = version
    graph = nx.DiGraph() if directed else nx.Graph()
    graph.add_nodes_from(vertices)
    graph.add_weighted_edges_from((s, d, w) for (s, d), w in edges.items())
    return graph


def expected(version, directed: bool, source) -> dict[str, dict]:
    graph = nx_graph(version, directed)
    components = nx.weakly_connected_components(graph) if directed else nx.connected_components(graph)
    wcc = {v: min(component) for component in components for v in component}
    hops = nx.single_source_shortest_path_length(graph, source) if source in graph else {}
    distance = nx.single_source_dijkstra_path_length(graph, source) if source in graph else {}
    ranks = nx.pagerank(graph, alpha=0.85, tol=1e-13, max_iter=10_000, weight=None)
    return {"wcc": wcc,
            "bfs": {v: hops.get(v, UNREACHABLE) for v in graph},
            "sssp": {v: float(distance.get(v, math.inf)) for v in graph},
            "pagerank": ranks}


def run_changes(env, batches, directed: bool, source, names, parallelism: int = 2):
    pipeline = env.pipeline("changing-graph")

    @pipeline.task
    def changing(ctx):
        edges = ctx.source(batches, SizeTumblingWindow(1), parallelism=1).flat_map(list)
        graph = GraphView(None, edges, directed=directed, parallelism=parallelism)
        outputs = {"wcc": lambda: algorithms.incremental_wcc(graph),
                   "bfs": lambda: algorithms.incremental_bfs(graph, source),
                   "sssp": lambda: algorithms.incremental_sssp(graph, source),
                   "pagerank": lambda: algorithms.incremental_pagerank(graph, tolerance=1e-12),
                   "record_wcc": lambda: graph.incremental_compute(
                       algorithms.ConnectedComponents(directed)),
                   "record_bfs": lambda: graph.incremental_compute(
                       algorithms.IncrementalBreadthFirstSearch(source)),
                   "record_sssp": lambda: graph.incremental_compute(
                       algorithms.ShortestPaths(source)),
                   "static_wcc": lambda: algorithms.wcc(graph)}
        for name in names:
            outputs[name]().collect(name)

    result = pipeline.execute()
    return {name: result.by_window(name) for name in names}
