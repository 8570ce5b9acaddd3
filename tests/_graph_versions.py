"""Oracles for a changing graph's incremental results: networkx on each version, and a job's
per-window changes folded into the result after each window."""

from __future__ import annotations

import math

import networkx as nx

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


def fold_changes(by_window: dict, windows: int) -> list[dict]:
    """The result after each window of a job that emits, per window, ``(vertex, value)`` for the
    vertices whose value changed (``None``: the vertex went); each vertex at most once a window,
    and only when its value changed."""
    state: dict = {}
    after = []
    for window in range(1, windows + 1):
        records = by_window.get(window, [])
        assert len({v for v, _ in records}) == len(records), f"window {window}: a vertex twice"
        assert not [v for v, x in records if v in state and state[v] == x], window
        for vertex, value in records:
            if value is None:
                state.pop(vertex, None)
            else:
                state[vertex] = value
        after.append(dict(state))
    return after
