"""Graph algorithms by ``CALL name(args) YIELD (...)``, on a script's graph, as GeaFlow's DSL names them."""

from __future__ import annotations

from collections import deque

from gyreflow.api.dsl.iterative import ITERATIVE
from gyreflow.api.dsl.queries import QueryError


def _out(graph, v):
    return [e.dst for e in graph.out_edges.get(v, ()) if e.dst in graph.vertices]


def _in(graph, v):
    return [e.src for e in graph.in_edges.get(v, ()) if e.src in graph.vertices]


def _neighbours(graph, v) -> set:
    return (set(_out(graph, v)) | set(_in(graph, v))) - {v}


def _same(graph, value):
    """A vertex id as the graph spells it (a request may give ``"1"`` for 1 or 1 for ``"1"``)."""
    if value in graph.vertices:
        return value
    for vid in graph.vertices:
        if str(vid) == str(value):
            return vid
    return value


def _distances(graph, source, step) -> dict:
    seen, queue = {source: 0}, deque([source])
    while queue:
        v = queue.popleft()
        for w in step(graph, v):
            if w not in seen:
                seen[w] = seen[v] + 1
                queue.append(w)
    return seen


def sssp(graph, source, edge_label=None, vertex_label=None):
    """Hops from ``source`` along edges (every edge counts one; only edges of ``edge_label`` and
    vertices of ``vertex_label`` when given), reachable vertices only."""
    edges = str(edge_label).lower() if edge_label is not None else None
    vertices = str(vertex_label).lower() if vertex_label is not None else None

    def step(g, v):
        for e in g.out_edges.get(v, ()):
            if e.dst not in g.vertices or (edges is not None and e.label.lower() != edges):
                continue
            if vertices is None or g.vertices[e.dst].label.lower() == vertices:
                yield e.dst
    return list(_distances(graph, _same(graph, source), step).items())


def khop(graph, source, k):
    """Vertices at most ``k`` hops from ``source`` along edges, with their hop count."""
    return [(v, d) for v, d in _distances(graph, _same(graph, source), _out).items() if d <= int(k)]


def page_rank(graph, damping=0.85, epsilon=0.01, iterations=20):
    """``(1 - d) + d * sum(rank(u) / outdegree(u))`` over in-edges, from 1.0, until ``iterations``."""
    rank = dict.fromkeys(graph.vertices, 1.0)
    degree = {v: len(_out(graph, v)) for v in graph.vertices}
    for _ in range(int(iterations)):
        rank = {v: (1 - damping) + damping * sum(rank[u] / degree[u] for u in _in(graph, v))
                for v in graph.vertices}
    return list(rank.items())


def wcc(graph, *_):
    """The smallest vertex id of each vertex's weakly connected component."""
    component = {}
    for start in graph.vertices:
        if start in component:
            continue
        members = _distances(graph, start, lambda g, v: _neighbours(g, v))
        smallest = min(members, key=lambda x: (str(type(x)), x))
        component.update(dict.fromkeys(members, smallest))
    return list(component.items())


def kcore(graph, k=1):
    """Each vertex's degree in the ``k``-core (0 outside it); degrees count edges in either direction."""
    alive = set(graph.vertices)

    def degree(v):
        return sum(1 for w in _out(graph, v) if w in alive and w != v) + sum(
            1 for w in _in(graph, v) if w in alive and w != v)
    changed = True
    while changed:
        changed = False
        for v in list(alive):
            if degree(v) < int(k):
                alive.discard(v)
                changed = True
    return [(v, degree(v) if v in alive else 0) for v in graph.vertices]


def triangle_count(graph, label=None):
    """Triangles through each vertex (of ``label``, counting only vertices of ``label`` when given)."""
    wanted = str(label).lower() if label is not None else None

    def near(v):
        return {w for w in _neighbours(graph, v)
                if wanted is None or graph.vertices[w].label.lower() == wanted}
    rows = []
    for v, vertex in graph.vertices.items():
        if wanted is not None and vertex.label.lower() != wanted:
            continue
        around = near(v)
        rows.append((v, sum(1 for a in around for b in around if str(a) < str(b) and b in near(a))))
    return rows


def cluster_coefficient(graph, *args):
    """Local clustering: links among a vertex's neighbours over the pairs of them (0.0 below two).
    With arguments (a label, a smallest degree), as GeaFlow's ``ClusterCoefficient`` (iterative.py)."""
    if args:
        from gyreflow.api.dsl.iterative import cluster_coefficient_of

        return cluster_coefficient_of(graph, *args)
    rows = []
    for v in graph.vertices:
        near = sorted(_neighbours(graph, v), key=str)
        pairs = len(near) * (len(near) - 1) / 2
        links = sum(1 for i, a in enumerate(near) for b in near[i + 1:] if b in _neighbours(graph, a))
        rows.append((v, links / pairs if pairs else 0.0))
    return rows


def walks(graph, k):
    """GeaFlow's ``inc_khop(k)``: every walk of exactly ``k`` edges, as text: its vertex ids, each
    followed by a comma (``0,11342,0,``)."""
    found = [[v] for v in graph.vertices]
    for _ in range(int(k)):
        found = [path + [w] for path in found for w in _out(graph, path[-1])]
    return [("".join(f"{v}," for v in path),) for path in found]


def edge_iterator_test(graph, *_):
    """GeaFlow's test class ``TestEdgeIteratorUdf``: it reads every vertex's edges, changes nothing
    and yields each vertex's id and the first field of its value."""
    rows = []
    for v, vertex in graph.vertices.items():
        id_column = graph.id_columns.get(vertex.label)
        value = next((x for key, x in vertex.items() if key != id_column), None)
        rows.append((v, value))
    return rows


def common_neighbors(graph, a, b):
    a, b = _same(graph, a), _same(graph, b)
    return [(v,) for v in sorted(_neighbours(graph, a) & _neighbours(graph, b), key=str)]


def jaccard_similarity(graph, a, b):
    a, b = _same(graph, a), _same(graph, b)
    left, right = _neighbours(graph, a), _neighbours(graph, b)
    union = left | right
    return [(a, b, len(left & right) / len(union) if union else 0.0)]


def closeness_centrality(graph, source):
    """GeaFlow's closeness of one vertex: (n - 1) over the sum of hops to it along edges."""
    distances = _distances(graph, _same(graph, source), _in)
    total = sum(distances.values())
    return [(_same(graph, source), (len(graph.vertices) - 1) / total if total else 0.0)]


ALGORITHMS = {
    "sssp": sssp, "khop": khop, "page_rank": page_rank, "pagerank": page_rank, "wcc": wcc,
    "kcore": kcore, "triangle_count": triangle_count, "cluster_coefficient": cluster_coefficient,
    "common_neighbors": common_neighbors, "jaccard_similarity": jaccard_similarity,
    "closeness_centrality": closeness_centrality, "inc_khop": walks,
    "edge_iterator_test": edge_iterator_test,
    "inc_wcc": wcc,  # over a graph read once: every vertex's component (its first window)
}
ALGORITHMS.update(ITERATIVE)


def call(name: str, graph, args: list):
    """The rows of ``CALL name(args)``."""
    fn = ALGORITHMS.get(name)
    if fn is None:
        raise QueryError(f"no graph algorithm {name}",
                         hint=f"algorithms: {', '.join(sorted(ALGORITHMS))}")
    return fn(graph, *args)
