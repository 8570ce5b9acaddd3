"""Graph algorithms on the public graph API: BFS, PageRank, WCC, CDLP, LCC, SSSP, k-hop, incremental.

Each algorithm is a vertex program plus a function that wires it to a ``GraphView`` and returns the
result stream of ``(vertex_id, value)`` pairs. The functions run the array programs of
``array_algorithms.py`` (one numpy/scipy operation per task and superstep); k-hop is a traversal and
runs its per-vertex program. The per-vertex ``VertexCentricCompute`` programs of
``vertex_programs.py`` are kept as readable definitions and for custom variants. The definitions
are LDBC Graphalytics' (see docs/graphs.md):

>>> from gyreflow.api import Environment
>>> from gyreflow.api.graph import GraphView
>>> p = Environment.local(progress=False).pipeline("demo")
>>> @p.task
... def hops(ctx):
...     graph = GraphView(ctx.source([1, 2, 3, 4]), ctx.source([(1, 2), (2, 3)]), directed=True)
...     bfs(graph, source=1).collect("hops")
>>> sorted(p.execute().output("hops"))
[(1, 0), (2, 1), (3, 2), (4, 9223372036854775807)]

Conventions the Graphalytics definitions leave open: duplicate edges count with multiplicity in
PageRank (one rank share per edge) and CDLP (one neighbour per edge), and change nothing elsewhere; a
self-loop counts in PageRank's out-degree and in CDLP's neighbours (twice in a directed graph: it is
an in- and an out-edge), and LCC ignores it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gyreflow.api.graph import array_algorithms as arrays
from gyreflow.api.graph.vertex_programs import (
    NO_LIMIT,
    UNREACHABLE,
    BreadthFirstSearch,
    ConnectedComponents,
    IncrementalBreadthFirstSearch,
    IncrementalConnectedComponents,
    KHopNeighbourhood,
    LabelPropagation,
    LocalClusteringCoefficient,
    PageRank,
    ShortestPaths,
    request_key,
    request_start,
)
from gyreflow.api.graph.views import GraphView
from gyreflow.api.language.functions import AggregateFunction

if TYPE_CHECKING:
    from gyreflow.api.language.stream import Stream


# The per-vertex programs (vertex_programs.py) are named here too: ``algorithms.PageRank`` and its
# kind are part of this module's interface.
__all__ = [
    "NO_LIMIT",
    "UNREACHABLE",
    "BreadthFirstSearch",
    "ConnectedComponents",
    "IncrementalBreadthFirstSearch",
    "IncrementalConnectedComponents",
    "KHopNeighbourhood",
    "LabelPropagation",
    "LocalClusteringCoefficient",
    "PageRank",
    "ShortestPaths",
    "request_key",
    "request_start",
    "bfs",
    "cdlp",
    "incremental_bfs",
    "incremental_pagerank",
    "incremental_sssp",
    "incremental_wcc",
    "khop",
    "lcc",
    "pagerank",
    "sssp",
    "wcc",
]

# ---------------------------------------------------------------------------------------------
# Wiring


def bfs(graph: GraphView, source: Any) -> Stream:
    """``(vertex, hops from source)`` for every vertex, ``UNREACHABLE`` when there is no path."""
    return graph.compute(arrays.ArrayBreadthFirstSearch(source), name="bfs")


def pagerank(graph: GraphView, damping: float = 0.85, iterations: int = 20) -> Stream:
    """``(vertex, rank)`` for every vertex after ``iterations`` Graphalytics PageRank updates."""
    return graph.compute(arrays.ArrayPageRank(damping, iterations), name="pagerank")


def wcc(graph: GraphView) -> Stream:
    """``(vertex, component label)``: the smallest vertex id of its weakly connected component."""
    return graph.compute(arrays.ArrayConnectedComponents(graph.directed), name="wcc")


def cdlp(graph: GraphView, iterations: int = 10) -> Stream:
    """``(vertex, community label)`` after ``iterations`` steps of label propagation."""
    return graph.compute(arrays.ArrayLabelPropagation(iterations, graph.directed), name="cdlp")


def lcc(graph: GraphView) -> Stream:
    """``(vertex, local clustering coefficient)`` for every vertex."""
    return graph.compute(arrays.ArrayLocalClusteringCoefficient(), name="lcc")


def sssp(graph: GraphView, source: Any, weight: str | None = "weight") -> Stream:
    """``(vertex, weighted distance from source)`` for every vertex, ``inf`` when unreachable.

    An edge weighs its value when that is a number, 1 without a value, and its property
    ``weight`` when the value is a property map or a ``(label, properties)`` pair (an edge without
    it stops the job naming the edge); ``weight=None`` counts every edge as 1."""
    return graph.compute(arrays.ArrayShortestPaths(source, weight=weight), name="sssp")


def incremental_wcc(graph: GraphView) -> Stream:
    """Components of a changing graph: each window emits ``(vertex, label)`` for the vertices whose
    label changed (including new vertices, and ``(vertex, None)`` for removed ones); folding the
    windows gives the current labelling. A removed edge starts again only the vertices whose label
    came through it (each vertex keeps the neighbour its label came from), none when it was off
    that tree."""
    return graph.incremental_compute(arrays.ArrayIncrementalConnectedComponents(graph.directed),
                                     name="incremental-wcc")


def incremental_bfs(graph: GraphView, source: Any) -> Stream:
    """Hop counts from ``source`` in a changing graph: each window emits ``(vertex, hops)`` for the
    vertices whose hop count changed (including new vertices, ``(vertex, None)`` for removed ones).
    A removed edge or vertex starts again only the vertices whose shortest path (the chain of
    neighbours each count came from) used it."""
    return graph.incremental_compute(arrays.ArrayIncrementalBreadthFirstSearch(source),
                                     name="incremental-bfs")


def incremental_sssp(graph: GraphView, source: Any, weight: str | None = "weight") -> Stream:
    """Weighted distances from ``source`` in a changing graph: each window emits ``(vertex,
    distance)`` for the vertices whose distance changed (``inf``: unreachable). Edge weights as
    in ``sssp``; a removed edge or vertex starts again only the vertices whose shortest path used
    it."""
    from gyreflow.api.graph.incremental_algorithms import ArrayIncrementalShortestPaths

    return graph.incremental_compute(ArrayIncrementalShortestPaths(source, weight=weight),
                                     name="incremental-sssp")


def incremental_pagerank(graph: GraphView, damping: float = 0.85,
                         tolerance: float = 1e-9) -> Stream:
    """PageRank of a changing graph, every rank within ``tolerance`` of the exact fixed point of
    the window's graph: a window pushes on only the residuals its changes left above a threshold
    (``residual_pagerank``); emits ``(vertex, rank)`` for the ranks that moved (``None`` for
    removed vertices). ``damping`` must be below 1."""
    from gyreflow.api.graph.residual_pagerank import ResidualPageRank

    return graph.incremental_compute(ResidualPageRank(damping, tolerance),
                                     name="incremental-pagerank")


def khop(graph: GraphView, requests: Stream, k: int, direction: str = "out") -> Stream:
    """One ``(key, {vertex: hops})`` per request ``(key, start)`` (or bare start id): the vertices
    within ``k`` hops of ``start``. A request whose start vertex is not in the graph gets ``{}``.

    Request keys should be unique: results are grouped per key (and kept across windows).
    """
    reached = graph.traversal(requests, KHopNeighbourhood(k, direction), name="khop")
    asked = requests.map(_request_marker)
    return reached.union(asked).key_by(_first).aggregate(_Neighbourhood())


def _first(record: tuple) -> Any:
    return record[0]


def _request_marker(request: Any) -> tuple:
    return (request_key(request), None, None)


class _Neighbourhood(AggregateFunction):
    """Collects ``(key, vertex, hops)`` records into ``{vertex: hops}``; markers add nothing."""

    def init(self) -> dict:
        return {}

    def add(self, accumulator: dict, record: tuple) -> dict:
        vertex = record[1]
        if record[2] is not None:
            hops = accumulator.get(vertex)
            if hops is None or record[2] < hops:
                accumulator[vertex] = record[2]
        return accumulator

    def merge(self, left: dict, right: dict) -> dict:
        merged = dict(left)
        for vertex, hops in right.items():
            if vertex not in merged or hops < merged[vertex]:
                merged[vertex] = hops
        return merged

    def result(self, accumulator: dict) -> dict:
        return dict(sorted(accumulator.items(), key=_by_hops))


def _by_hops(item: tuple) -> tuple:
    return item[1], item[0]

