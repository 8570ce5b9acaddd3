"""The library's graph algorithms as array programs: one numpy/scipy operation per task and superstep.

Same definitions and conventions as the per-vertex programs of ``algorithms.py`` (LDBC Graphalytics;
duplicate edges and self-loops as documented there); the public functions (``pagerank``, ``bfs``, ...)
run these.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sparse
from scipy.sparse import csgraph

from gyreflow.api.graph.arrays import ArrayVertexCompute, ids_equal
from gyreflow.api.graph.repair import RepairingCompute
from gyreflow.api.graph.vertex_programs import pagerank_settings
from gyreflow.api.graph.views import Aggregator
from gyreflow.api.graph.weights import edge_weight as edge_weight  # importable from here too
from gyreflow.api.graph.weights import out_edge_weights

UNREACHABLE = 9223372036854775807
NO_LIMIT = 2**31 - 1


def _direction(directed: bool) -> str:
    return "both" if directed else "out"


def _labels(ids: np.ndarray) -> np.ndarray:
    return ids.copy()


def _improve(values: np.ndarray, inbox) -> tuple[np.ndarray, np.ndarray]:
    """Take the smaller incoming values; returns the values and the positions that improved."""
    if not len(inbox):
        return values, np.zeros(0, np.int64)
    better = np.asarray(inbox.values < values[inbox.positions], dtype=bool)
    positions = inbox.positions[better]
    if len(positions):
        values = values.copy()
        values[positions] = inbox.values[better]
    return values, positions


class ArrayPageRank(ArrayVertexCompute):
    """Graphalytics PageRank (see ``PageRank``): one sparse matrix-vector product per superstep."""

    always_active = True
    combine = "sum"
    aggregators = {"dangling": Aggregator.sum(0.0)}

    def __init__(self, damping: float = 0.85, iterations: int = 20) -> None:
        self.damping, self.iterations = pagerank_settings(damping, iterations)
        self.max_iterations = iterations + 1

    def init(self, ids: np.ndarray, given: np.ndarray) -> np.ndarray:
        """Set in iteration 1, once the number of vertices is known."""
        return np.zeros(len(ids))

    def compute(self, part, inbox) -> np.ndarray:
        """Sum the incoming shares, add the teleport and dangling terms, send the new shares."""
        n = part.num_vertices
        if n == 0:  # an empty graph (a version before the first edge): nothing to rank
            return part.values
        if part.iteration == 1:
            rank = np.full(part.num_local, 1.0 / n)
        else:
            d = self.damping
            incoming = inbox.dense(0.0, float)
            rank = (1.0 - d) / n + d * (incoming + part.aggregated("dangling") / n)
        if part.iteration <= self.iterations:
            degree = part.out_degree
            dangling = degree == 0
            share = np.divide(rank, degree, out=np.zeros_like(rank), where=~dangling)
            part.send_along(share)
            part.aggregate("dangling", float(rank[dangling].sum()))
        return rank


class ArrayBreadthFirstSearch(ArrayVertexCompute):
    """Hop count from ``source`` along out-edges (see ``BreadthFirstSearch``): each superstep sends
    ``hops + 1`` from the vertices whose count improved."""

    combine = "min"

    def __init__(self, source: Any, max_iterations: int = NO_LIMIT) -> None:
        self.source = source
        self.max_iterations = max_iterations

    def init(self, ids: np.ndarray, given: np.ndarray) -> np.ndarray:
        """0 for the source, ``UNREACHABLE`` otherwise."""
        return np.where(ids_equal(ids, self.source), 0, UNREACHABLE).astype(np.int64)

    def starters(self, part) -> np.ndarray:
        """The vertices that offer their count in iteration 1: every one that knows it."""
        return np.flatnonzero(part.values != UNREACHABLE)

    def compute(self, part, inbox) -> np.ndarray:
        """Take the smallest offered count; forward it from the vertices that improved."""
        hops, improved = _improve(part.values, inbox)
        if part.iteration == 1:
            improved = np.union1d(improved, self.starters(part))
        if len(improved):
            part.send_along(hops + 1, "out", where=improved)
        return hops


class ArrayIncrementalBreadthFirstSearch(RepairingCompute):
    """Hop counts in a changing graph, repaired after removals (``RepairingCompute``): each vertex
    keeps the neighbour its count came from, and a removed edge or vertex starts again only the
    vertices whose shortest path (the chain of parents) used it; a removed edge off every such
    path starts no vertex again. The vertices the window's input touched offer their count along
    every out-edge in its first superstep."""

    def __init__(self, source: Any, max_iterations: int = NO_LIMIT) -> None:
        self.source = source
        self.max_iterations = max_iterations

    def start(self, ids: np.ndarray, given: np.ndarray) -> np.ndarray:
        """0 for the source, ``UNREACHABLE`` otherwise."""
        return np.where(ids_equal(ids, self.source), 0, UNREACHABLE).astype(np.int64)

    def known(self, values: np.ndarray) -> np.ndarray:
        """The vertices with a count."""
        return values != UNREACHABLE

    def offer(self, values: np.ndarray, rows: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """One hop more."""
        return values[rows] + 1


class ArrayConnectedComponents(ArrayVertexCompute):
    """Weakly connected components (see ``ConnectedComponents``): the smallest vertex id of each
    component. Vertices with one label are known to be connected, so a task joins label classes
    along its own edges at once (``scipy.sparse.csgraph``) and only labels crossing to other
    tasks travel as messages; a class that receives a smaller label takes it whole."""

    combine = "min"
    max_iterations = NO_LIMIT

    def __init__(self, directed: bool = True) -> None:
        self.direction = _direction(directed)

    def init(self, ids: np.ndarray, given: np.ndarray) -> np.ndarray:
        """Every vertex starts as its own component."""
        return _labels(ids)

    def starters(self, part) -> np.ndarray:
        """Iteration 1: the vertices that offer their label along the new edges to other tasks."""
        return np.ones(part.num_local, dtype=bool)

    def compute(self, part, inbox) -> np.ndarray:
        """Join the classes along new local edges (iteration 1) or adopt smaller offered labels,
        then send the labels that dropped to the other tasks' neighbours."""
        n = part.num_local
        offer_rows = offer_columns = np.zeros(0, np.int64)
        if part.iteration == 1:
            labels = self.first_labels(part)
            if len(part.columns) > n:
                rows, columns = part.added_edges(self.direction)
                remote = columns >= n
                offering = self.starters(part)[rows[remote]]
                offer_rows, offer_columns = rows[remote][offering], columns[remote][offering]
        else:
            labels = _adopt(part.values, inbox.positions, inbox.values)
        if len(part.columns) > n:
            dropped = np.flatnonzero(np.asarray(labels != part.values, dtype=bool))
            rows, columns, _ = part.edges(dropped, self.direction)
            remote = columns >= n
            offer_rows = np.concatenate([offer_rows, rows[remote]])
            offer_columns = np.concatenate([offer_columns, columns[remote]])
        if len(offer_rows):
            part.send(offer_columns, labels[offer_rows])
        return labels

    def first_labels(self, part) -> np.ndarray:
        """The labels of iteration 1: every vertex is its own class, joined along local edges."""
        n = part.num_local
        if len(part.columns) == n:  # every edge is local: the task's out-edges as they are
            edges = part.out_edges
            graph = sparse.csr_matrix((np.ones(edges.nnz), edges.indices, edges.indptr),
                                      shape=(n, n))
        else:
            rows, columns = part.added_edges("out")
            local = columns < n
            graph = sparse.csr_matrix((np.ones(int(local.sum())), (rows[local], columns[local])),
                                      shape=(n, n))
        count, component = csgraph.connected_components(graph, directed=True, connection="weak")
        return _group_minimum(component, count, part.values)[component]


class ArrayIncrementalConnectedComponents(RepairingCompute):
    """Components of a changing graph, repaired after removals (``RepairingCompute``): labels
    travel along edges (both directions of a directed graph) and each vertex keeps the neighbour
    its label came from, a tree per component rooted at the vertex whose id is the label. A
    removed edge starts again only the subtree below it (every other vertex keeps its label); a
    removed edge off the tree starts no vertex again."""

    def __init__(self, directed: bool = True) -> None:
        self.direction = _direction(directed)

    def start(self, ids: np.ndarray, given: np.ndarray) -> np.ndarray:
        """Every vertex starts as its own component."""
        return _labels(ids)

    def offer(self, values: np.ndarray, rows: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """The label as it is."""
        return values[rows]


def _group_minimum(groups: np.ndarray, count: int, values: np.ndarray) -> np.ndarray:
    """The smallest of ``values`` in each group ``0..count-1`` (any ordered dtype)."""
    order = np.argsort(values, kind="stable")
    present, first = np.unique(groups[order], return_index=True)
    smallest = np.empty(count, dtype=values.dtype)
    smallest[present] = values[order[first]]
    return smallest


def _join_classes(labels: np.ndarray, rows: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """The labels after joining, along the edges ``rows``-``columns`` between a task's own
    vertices, the classes of vertices with one label: each joined class takes its smallest. The
    cost follows the edges that link two classes, not the vertices."""
    ends = labels[rows], labels[columns]
    apart = np.asarray(ends[0] != ends[1], dtype=bool)
    if not apart.any():
        return labels
    classes, codes = np.unique(np.concatenate([ends[0][apart], ends[1][apart]]),
                               return_inverse=True)
    codes = codes.reshape(2, -1)
    k = len(classes)
    graph = sparse.csr_matrix((np.ones(codes.shape[1]), (codes[0], codes[1])), shape=(k, k))
    count, component = csgraph.connected_components(graph, directed=True, connection="weak")
    joined = _group_minimum(component, count, classes)[component]
    return _relabel(labels, classes, joined)


def _relabel(labels: np.ndarray, classes: np.ndarray, new: np.ndarray) -> np.ndarray:
    """``labels`` with every label found in the sorted ``classes`` replaced by its ``new``."""
    at = np.minimum(np.searchsorted(classes, labels), len(classes) - 1)
    hit = np.asarray(classes[at] == labels, dtype=bool)
    labels = labels.copy()
    labels[hit] = new[at[hit]]
    return labels


def _adopt(labels: np.ndarray, positions: np.ndarray, offered: np.ndarray) -> np.ndarray:
    """The labels after the vertices at ``positions`` were offered ``offered``: every class (the
    vertices of one label) with a smaller offer takes the smallest one it got."""
    if not len(positions):
        return labels
    better = np.asarray(offered < labels[positions], dtype=bool)
    if not better.any():
        return labels
    old, offered = labels[positions[better]], offered[better]
    order = np.argsort(offered, kind="stable")
    classes, first = np.unique(old[order], return_index=True)
    return _relabel(labels, classes, offered[order[first]])


class ArrayShortestPaths(ArrayVertexCompute):
    """Single-source shortest paths (see ``ShortestPaths``): edges relaxed from the vertices whose
    distance dropped, the edge weights being the CSR data, or property ``weight`` of edges whose
    values are property maps (``edge_weight``)."""

    combine = "min"
    algorithm = "sssp"

    def __init__(self, source: Any, max_iterations: int = NO_LIMIT,
                 weight: str | None = "weight") -> None:
        self.source = source
        self.max_iterations = max_iterations
        self.weight = weight

    def init(self, ids: np.ndarray, given: np.ndarray) -> np.ndarray:
        """0.0 for the source, ``inf`` otherwise."""
        return np.where(ids_equal(ids, self.source), 0.0, np.inf)

    def compute(self, part, inbox) -> np.ndarray:
        """Take the smallest offered distance; relax the out-edges of the improved vertices."""
        distance, improved = _improve(part.values, inbox)
        if part.iteration == 1:
            improved = np.union1d(improved, np.flatnonzero(np.isfinite(distance)))
        if len(improved):
            rows, columns, weights = self.weights(part, improved)
            part.send(columns, distance[rows] + weights)
        return distance

    def weights(self, part, where: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``out_edge_weights`` of the vertices ``where``, reading each property once per edge."""
        read = self.__dict__.get("_read")
        if read is None:
            read = self._read = {}
        return out_edge_weights(part, where, self.weight, self.algorithm, read)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_read", None)  # what this process read: not shipped
        return state


class ArrayLabelPropagation(ArrayVertexCompute):
    """CDLP (see ``LabelPropagation``): labels travel along every edge and each vertex takes the
    most frequent one it received (a label histogram per vertex), the smallest on ties."""

    combine = "histogram"

    def __init__(self, iterations: int = 10, directed: bool = True) -> None:
        if not isinstance(iterations, int) or iterations < 0:
            msg = f"iterations must be an int >= 0, got {iterations!r}"
            raise ValueError(msg)
        self.iterations = iterations
        self.max_iterations = iterations + 1
        self.direction = _direction(directed)

    def init(self, ids: np.ndarray, given: np.ndarray) -> np.ndarray:
        """The vertex's own id."""
        return _labels(ids)

    def compute(self, part, inbox) -> np.ndarray:
        """Take the most frequent received label, then send the label to every neighbour."""
        labels = part.values
        if len(inbox):
            labels = labels.copy()
            labels[inbox.positions] = inbox.values
        if part.iteration <= self.iterations:
            part.send_along(labels, self.direction)
        return labels


class ArrayLocalClusteringCoefficient(ArrayVertexCompute):
    """LCC (see ``LocalClusteringCoefficient``) in two supersteps: every vertex sends the ids of
    its out-neighbours to each neighbour, which counts those that are its own neighbours."""

    combine = None
    max_iterations = 2

    def init(self, ids: np.ndarray, given: np.ndarray) -> np.ndarray:
        """Replaced in iteration 1."""
        return np.zeros(len(ids))

    def compute(self, part, inbox) -> np.ndarray:
        """Iteration 1: share the out-neighbours; iteration 2: count links between neighbours. A
        task whose vertices have only neighbours of its own counts at once, without messages."""
        n, m = part.num_local, len(part.columns)
        if m == n:
            return local_clustering(part.out_edges) if part.iteration == 1 else part.values
        rows, columns = _pairs(part, "both")
        degree = np.bincount(rows, minlength=n)
        if part.iteration == 1:
            out_rows, out_columns = _pairs(part, "out")
            _send_products(part, rows, columns, degree, out_rows, out_columns)
            return degree.astype(float)
        links = np.zeros(n)
        if len(inbox):
            at, found = part.column_positions(inbox.values)
            targets = inbox.positions[found]
            asked = targets * m + at[found]
            hits = np.isin(asked, rows * m + columns)
            links = np.bincount(targets[hits], minlength=n).astype(float)
        pairs = degree * (degree - 1.0)
        return np.divide(links, pairs, out=np.zeros(n), where=degree >= 2)


def _pairs(part, direction: str) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (vertex, neighbour column) pairs of ``direction``, self-loops left out,
    sorted by vertex and column."""
    rows, columns, _ = part.edges(None, direction)
    keep = columns != rows
    m = len(part.columns)
    keys = np.unique(rows[keep].astype(np.int64) * m + columns[keep])
    return keys // m, keys % m


def _send_products(part, rows, columns, degree, out_rows, out_columns) -> None:
    """For every vertex v, send each out-neighbour id of v to each neighbour of v."""
    n = part.num_local
    out_degree = np.bincount(out_rows, minlength=n)
    per_vertex = degree * out_degree
    total = int(per_vertex.sum())
    if total == 0:
        return
    vertex = np.repeat(np.arange(n), per_vertex)
    within = np.arange(total) - np.repeat(np.cumsum(per_vertex) - per_vertex, per_vertex)
    width = out_degree[vertex]
    near_start = np.cumsum(degree) - degree
    out_start = np.cumsum(out_degree) - out_degree
    targets = columns[near_start[vertex] + within // width]
    shared = out_columns[out_start[vertex] + within % width]
    part.send(targets, part.columns[shared])


def local_clustering(out_edges) -> np.ndarray:
    """LCC of every vertex of a graph given whole as a square matrix of out-edges (rows: sources),
    by triangle counting: the neighbour sets as a symmetric matrix whose entries count the
    directions linking two vertices (1 or 2), oriented from lower to higher degree; a sparse
    product finds the pairs that close triangles, and each triangle adds the linking directions
    of its opposite pair to each of its corners."""
    n = out_edges.shape[0]
    sources = np.repeat(np.arange(n), np.diff(out_edges.indptr))
    other = sources != out_edges.indices  # self-loops do not count
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(sources[other], minlength=n), out=indptr[1:])
    structure = sparse.csr_matrix((np.ones(int(other.sum())), out_edges.indices[other], indptr),
                                  shape=(n, n))
    structure.sum_duplicates()
    structure.data[:] = 1.0
    linked = (structure + structure.T).tocsr()  # the directions linking each neighbour pair
    linked.sum_duplicates()
    degree = np.diff(linked.indptr)
    rank = np.empty(n, np.int64)
    rank[np.lexsort((np.arange(n), degree))] = np.arange(n)
    rows = np.repeat(np.arange(n), degree)
    upward = rank[rows] < rank[linked.indices]
    indptr = np.zeros(n + 1, np.int64)  # the entries kept stay in (row, column) order
    np.cumsum(np.bincount(rows[upward], minlength=n), out=indptr[1:])
    oriented = sparse.csr_matrix((linked.data[upward], linked.indices[upward], indptr),
                                 shape=(n, n))
    ones = sparse.csr_matrix((np.ones(oriented.nnz, bool), oriented.indices, oriented.indptr),
                             shape=(n, n))
    closing = (ones @ ones).multiply(ones).tocoo()  # (low, high) pairs with middles between
    links = np.zeros(n)
    if closing.nnz:
        low, high = closing.row.astype(np.int64), closing.col.astype(np.int64)
        starts, lengths = oriented.indptr[low], np.diff(oriented.indptr)[low]
        pair = np.repeat(np.arange(len(low)), lengths)
        middle = oriented.indices[np.arange(len(pair)) - np.repeat(np.cumsum(lengths) - lengths,
                                                                  lengths) + starts[pair]]
        keys = np.repeat(np.arange(n, dtype=np.int64), np.diff(oriented.indptr)) * n \
            + oriented.indices
        found, at = _find(keys, middle.astype(np.int64) * n + high[pair])
        low, middle, high = low[pair[found]], middle[found].astype(np.int64), high[pair[found]]
        weight = oriented.data

        def between(a, b):
            return weight[_find(keys, a * n + b)[1]]

        links = (np.bincount(low, between(middle, high), n)
                 + np.bincount(middle, between(low, high), n)
                 + np.bincount(high, between(low, middle), n))
    pairs = degree * (degree - 1.0)
    return np.divide(links, pairs, out=np.zeros(n), where=degree >= 2)


def _find(keys: np.ndarray, query: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(found, at)``: whether each query is in the sorted ``keys`` and where."""
    at = np.minimum(np.searchsorted(keys, query), max(len(keys) - 1, 0))
    return keys[at] == query, at
