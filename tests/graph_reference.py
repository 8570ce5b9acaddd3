"""Plain-Python reference implementations of the Graphalytics algorithms, k-hop and graph generators.

Written from the definitions in the conformance README, with no gyreflow code: they are the oracles
the graph algorithm tests compare against. A graph is ``(vertices, edges, directed)`` with
``vertices`` a list of ids and ``edges`` a list of ``(src, dst)`` or ``(src, dst, weight)`` tuples.

Conventions for inputs the Graphalytics definitions leave open (the library follows the same ones):

- Duplicate edges are kept: PageRank and CDLP count them with multiplicity (a vertex with the edge
  ``u -> v`` twice sends ``v`` two shares of its rank and counts as two neighbours); BFS, SSSP and WCC
  are not affected; LCC works on neighbour sets, so duplicates do not change it.
- A self-loop ``v -> v`` is an out- and an in-edge of ``v`` in a directed graph and one incident edge
  in an undirected graph: it counts in PageRank's out-degree and in CDLP's neighbour multiset, and
  LCC ignores it (``N(v)`` excludes ``v``).
"""

from __future__ import annotations

import heapq
import math
import random
from collections import Counter, defaultdict, deque

UNREACHABLE = 9223372036854775807


def _weight(edge: tuple) -> float:
    return float(edge[2]) if len(edge) > 2 and edge[2] is not None else 1.0


def out_lists(vertices, edges, directed: bool) -> dict:
    """Every vertex's out-neighbours as a list with multiplicity (undirected: incident neighbours;
    a self-loop once)."""
    out = {v: [] for v in vertices}
    for edge in edges:
        src, dst = edge[0], edge[1]
        out[src].append(dst)
        if not directed and src != dst:
            out[dst].append(src)
    return out


def in_lists(vertices, edges, directed: bool) -> dict:
    """Every vertex's in-neighbours with multiplicity (undirected: the same as ``out_lists``)."""
    if not directed:
        return out_lists(vertices, edges, directed)
    incoming = {v: [] for v in vertices}
    for edge in edges:
        incoming[edge[1]].append(edge[0])
    return incoming


def bfs(vertices, edges, directed: bool, source) -> dict:
    """Hop count from ``source`` along out-edges; ``UNREACHABLE`` when there is no path."""
    out = out_lists(vertices, edges, directed)
    depth = dict.fromkeys(vertices, UNREACHABLE)
    if source not in depth:
        return depth
    depth[source] = 0
    queue = deque([source])
    while queue:
        vertex = queue.popleft()
        for other in out[vertex]:
            if depth[other] == UNREACHABLE:
                depth[other] = depth[vertex] + 1
                queue.append(other)
    return depth


def pagerank(vertices, edges, directed: bool, damping: float, iterations: int) -> dict:
    """Graphalytics PageRank: ``iterations`` synchronous updates, dangling rank spread evenly."""
    n = len(vertices)
    if n == 0:
        return {}
    out = out_lists(vertices, edges, directed)
    incoming = in_lists(vertices, edges, directed)
    rank = dict.fromkeys(vertices, 1.0 / n)
    for _ in range(iterations):
        dangling = sum(rank[v] for v in vertices if not out[v])
        rank = {
            v: (1 - damping) / n
            + damping * (sum(rank[u] / len(out[u]) for u in incoming[v]) + dangling / n)
            for v in vertices
        }
    return rank


def wcc(vertices, edges) -> dict:
    """The smallest vertex id of each vertex's weakly connected component (union-find)."""
    parent = {v: v for v in vertices}

    def find(v):
        root = v
        while parent[root] != root:
            root = parent[root]
        while parent[v] != root:
            parent[v], v = root, parent[v]
        return root

    for edge in edges:
        a, b = find(edge[0]), find(edge[1])
        if a != b:
            parent[max(a, b)] = min(a, b)
    return {v: find(v) for v in vertices}


def cdlp(vertices, edges, directed: bool, iterations: int) -> dict:
    """Synchronous label propagation: the most frequent neighbour label, the smallest on ties."""
    out = out_lists(vertices, edges, directed)
    incoming = in_lists(vertices, edges, directed) if directed else {v: [] for v in vertices}
    label = {v: v for v in vertices}
    for _ in range(iterations):
        updated = {}
        for v in vertices:
            counts = Counter(label[u] for u in out[v])
            counts.update(label[u] for u in incoming[v])
            if not counts:
                updated[v] = label[v]
                continue
            best = max(counts.values())
            updated[v] = min(lab for lab, count in counts.items() if count == best)
        label = updated
    return label


def lcc(vertices, edges, directed: bool) -> dict:
    """Local clustering coefficient: ordered neighbour pairs linked ``a -> b`` over ``d * (d - 1)``."""
    successors = defaultdict(set)
    for edge in edges:
        src, dst = edge[0], edge[1]
        if src == dst:
            continue
        successors[src].add(dst)
        if not directed:
            successors[dst].add(src)
    neighbours = {v: set(successors[v]) for v in vertices}
    for v in vertices:
        for u in successors[v]:
            neighbours[u].add(v)
    result = {}
    for v in vertices:
        near = neighbours[v]
        d = len(near)
        if d < 2:
            result[v] = 0.0
            continue
        links = sum(1 for a in near for b in successors[a] if b != a and b in near)
        result[v] = links / (d * (d - 1))
    return result


def sssp(vertices, edges, directed: bool, source) -> dict:
    """Weighted shortest-path distance from ``source`` (Dijkstra); ``inf`` when unreachable."""
    out = {v: [] for v in vertices}
    for edge in edges:
        out[edge[0]].append((edge[1], _weight(edge)))
        if not directed:
            out[edge[1]].append((edge[0], _weight(edge)))
    dist = dict.fromkeys(vertices, math.inf)
    if source not in dist:
        return dist
    dist[source] = 0.0
    heap = [(0.0, 0, source)]
    tie = 1
    while heap:
        d, _, v = heapq.heappop(heap)
        if d > dist[v]:
            continue
        for other, weight in out[v]:
            if d + weight < dist[other]:
                dist[other] = d + weight
                heapq.heappush(heap, (d + weight, tie, other))
                tie += 1
    return dist


def khop(vertices, edges, directed: bool, start, k: int) -> dict:
    """Every vertex within ``k`` hops of ``start`` along out-edges, with its hop count (``start`` at
    0); empty when ``start`` is not a vertex."""
    depth = bfs(vertices, edges, directed, start)
    return {v: d for v, d in depth.items() if d <= k}


# ---------------------------------------------------------------------------------------------
# Seeded random graphs


def random_graph(seed: int, n: int, m: int, *, self_loops: bool = False, duplicates: bool = False,
                 weights: bool = False, isolated: int = 0, dangling: int | None = None,
                 ) -> tuple[list, list]:
    """``n`` vertices (ids 0..n-1 in a shuffled order) and ``m`` random edges.

    Vertices ``n - isolated .. n - 1`` get no edges at all; edges are drawn between the others. The
    last ``dangling`` of those (default: a tenth) are never a source, so they have in-edges at most
    and no out-edges; sources are skewed towards low ids, which makes some vertices hubs.
    Without ``self_loops`` no edge ``v -> v`` is drawn; without ``duplicates`` no ``(src, dst)`` pair
    repeats (so ``m`` is capped by the number of possible pairs). ``weights`` adds a third column:
    a weight in [0.1, 10) rounded to 3 places.

    >>> random_graph(1, 5, 4) == random_graph(1, 5, 4)
    True
    """
    rng = random.Random(seed)
    vertices = list(range(n))
    rng.shuffle(vertices)
    linked = n - isolated
    if dangling is None:
        dangling = linked // 10
    sources = linked - dangling
    edges: list[tuple] = []
    seen: set[tuple] = set()
    possible = sources * linked - (0 if self_loops else sources)
    target = m if duplicates else min(m, max(possible, 0))
    attempts = 0
    while len(edges) < target and attempts < 50 * (target + 10):
        attempts += 1
        src = int(sources * rng.random() ** 1.5) if sources else 0
        dst = rng.randrange(linked) if linked else 0
        if not sources or (src == dst and not self_loops):
            continue
        if not duplicates:
            if (src, dst) in seen:
                continue
            seen.add((src, dst))
        if weights:
            edges.append((src, dst, round(rng.uniform(0.1, 10.0), 3)))
        else:
            edges.append((src, dst))
    return vertices, edges


def undirected_simple(edges: list) -> list:
    """Keep one copy of each undirected edge (drops ``(b, a)`` after ``(a, b)``)."""
    seen: set[frozenset] = set()
    kept = []
    for edge in edges:
        key = frozenset(edge[:2])
        if key not in seen:
            seen.add(key)
            kept.append(edge)
    return kept


def read_graphalytics(directory, name: str) -> tuple[list, list, dict]:
    """The vertices, weighted edges and properties of the example graph ``name``."""
    from pathlib import Path

    directory = Path(directory)
    vertices = [int(line) for line in (directory / f"{name}.v").read_text().split()]
    edges = []
    for line in (directory / f"{name}.e").read_text().splitlines():
        if line.strip():
            src, dst, weight = line.split()
            edges.append((int(src), int(dst), float(weight)))
    properties = {}
    for line in (directory / f"{name}.properties").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            properties[key.strip().removeprefix(f"graph.{name}.")] = value.strip()
    return vertices, edges, properties


def read_expected(path) -> dict:
    """An expected-output file: ``vertex value`` per line, values as floats (``infinity`` included)."""
    from pathlib import Path

    expected = {}
    for line in Path(path).read_text().splitlines():
        if line.strip():
            vertex, value = line.split()
            expected[int(vertex)] = float(value)
    return expected


def close(got: float, expected: float, tolerance: float = 1e-9) -> bool:
    if math.isinf(expected) or math.isinf(got):
        return got == expected
    return abs(got - expected) <= tolerance * max(1.0, abs(expected))
