"""Plain-Python loops of BFS, WCC, SSSP, CDLP and LCC (the Graphalytics definitions, as
tests/graph_reference.py has them): the loops ``benchmarks/graph.py`` measures gyreflow against."""

from __future__ import annotations

import heapq
import math
import time
from collections import Counter, deque

from gyreflow.api.graph_algorithms import UNREACHABLE

SEARCH: dict[str, float] = {}  # the last plain or scipy loop's time without building its graph


def adjacency(vertices: list, edges: list) -> tuple[dict, dict]:
    """Out- and in-neighbour lists of a directed graph, with multiplicity."""
    out: dict = {v: [] for v in vertices}
    into: dict = {v: [] for v in vertices}
    for edge in edges:
        out[edge[0]].append(edge[1])
        into[edge[1]].append(edge[0])
    return out, into


def plain_bfs(vertices: list, edges: list, source) -> dict:
    """Hop counts from ``source`` with a queue."""
    out, _ = adjacency(vertices, edges)
    started = time.perf_counter()
    depth = dict.fromkeys(vertices, UNREACHABLE)
    depth[source] = 0
    queue = deque([source])
    while queue:
        vertex = queue.popleft()
        next_depth = depth[vertex] + 1
        for other in out[vertex]:
            if depth[other] == UNREACHABLE:
                depth[other] = next_depth
                queue.append(other)
    SEARCH["seconds"] = time.perf_counter() - started
    return depth


def plain_wcc(vertices: list, edges: list) -> dict:
    """The smallest id of each weakly connected component, by depth-first search."""
    out, into = adjacency(vertices, edges)
    started = time.perf_counter()
    label: dict = {}
    for start in sorted(vertices):
        if start in label:
            continue
        label[start] = start
        stack = [start]
        while stack:
            vertex = stack.pop()
            for other in (*out[vertex], *into[vertex]):
                if other not in label:
                    label[other] = start
                    stack.append(other)
    SEARCH["seconds"] = time.perf_counter() - started
    return label


def plain_sssp(vertices: list, edges: list, source) -> dict:
    """Dijkstra with a heap; ``inf`` for unreachable vertices."""
    out: dict = {v: [] for v in vertices}
    for src, dst, weight in edges:
        out[src].append((dst, weight))
    started = time.perf_counter()
    distance = dict.fromkeys(vertices, math.inf)
    distance[source] = 0.0
    heap = [(0.0, source)]
    while heap:
        d, vertex = heapq.heappop(heap)
        if d > distance[vertex]:
            continue
        for other, weight in out[vertex]:
            candidate = d + weight
            if candidate < distance[other]:
                distance[other] = candidate
                heapq.heappush(heap, (candidate, other))
    SEARCH["seconds"] = time.perf_counter() - started
    return distance


def plain_cdlp(vertices: list, edges: list, iterations: int) -> dict:
    """Label propagation: the most frequent in- and out-neighbour label, the smallest on ties."""
    out, into = adjacency(vertices, edges)
    started = time.perf_counter()
    label = {v: v for v in vertices}
    for _ in range(iterations):
        new = {}
        for vertex in vertices:
            counts = Counter(label[u] for u in out[vertex])
            counts.update(label[u] for u in into[vertex])
            if counts:
                best = max(counts.values())
                new[vertex] = min(x for x, c in counts.items() if c == best)
            else:
                new[vertex] = label[vertex]
        label = new
    SEARCH["seconds"] = time.perf_counter() - started
    return label


def plain_lcc(vertices: list, edges: list) -> dict:
    """Directed local clustering coefficient: links among the neighbours over d(d-1)."""
    out, into = adjacency(vertices, edges)
    started = time.perf_counter()
    successors = {v: set(out[v]) - {v} for v in vertices}
    result = {}
    for vertex in vertices:
        near = (successors[vertex] | set(into[vertex])) - {vertex}
        degree = len(near)
        if degree < 2:
            result[vertex] = 0.0
            continue
        links = sum(len(near & successors[u]) for u in near)
        result[vertex] = links / (degree * (degree - 1))
    SEARCH["seconds"] = time.perf_counter() - started
    return result
