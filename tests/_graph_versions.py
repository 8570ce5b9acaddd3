"""Oracles for a changing graph's incremental results: networkx on each version, and a job's
per-window changes folded into the result after each window."""

from __future__ import annotations

import math

import networkx as nx

from gyreflow.api import SizeTumblingWindow
from gyreflow.api.graph import GraphView
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
    once a window, and only when its value changed."""
    state: dict = {}
    after = []
    for window in range(1, windows + 1):
        records = by_window.get(window, [])
        if exact:
            assert len({v for v, _ in records}) == len(records), f"window {window}: a vertex twice"
            same = [v for v, x in records if v in state and state[v] == x]
            assert not same, f"window {window} emitted unchanged vertices {same}"
        for vertex, value in records:
            if value is None:
                state.pop(vertex, None)
            else:
                state[vertex] = value
        after.append(dict(state))
    return after
