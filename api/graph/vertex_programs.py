"""The graph algorithms as per-vertex programs (``VertexCentricCompute``): BFS, PageRank, WCC, CDLP,
LCC, SSSP, k-hop and incremental WCC and BFS, Graphalytics' definitions written vertex by vertex.
The library's functions (``algorithms.py``) run the array programs instead; these are the readable
definitions, the k-hop traversal's program, and a start for custom variants."""

from __future__ import annotations

import math
import operator
from collections import Counter
from typing import Any

from gyreflow.api.graph.views import Aggregator, VertexCentricCompute
from gyreflow.api.graph.weights import edge_weight

UNREACHABLE = 9223372036854775807  # Graphalytics' BFS value for a vertex the source cannot reach
NO_LIMIT = 2**31 - 1  # max_iterations of programs that stop when no messages are left


def _direction(directed: bool) -> str:
    # In an undirected graph out_edges already lists every incident edge: "both" would send twice.
    return "both" if directed else "out"


# ---------------------------------------------------------------------------------------------
# Programs


class BreadthFirstSearch(VertexCentricCompute):
    """Hop count from ``source`` along out-edges (every edge in an undirected graph);
    ``UNREACHABLE`` for the vertices it cannot reach.

    The same program serves static and incremental compute: a vertex starts at 0 (the source) or
    ``UNREACHABLE``; in the first iteration every active vertex that knows its distance offers it to
    its neighbours, later a vertex only forwards an improvement. New edges can only shorten paths,
    so values that persist across windows stay exact.
    """

    combine = min

    def __init__(self, source: Any, max_iterations: int = NO_LIMIT) -> None:
        self.source = source
        self.max_iterations = max_iterations

    def init(self, vertex_id: Any, value: Any) -> int:
        """0 for the source, ``UNREACHABLE`` otherwise."""
        return 0 if vertex_id == self.source else UNREACHABLE

    def compute(self, vertex, messages: list) -> None:
        """Take the smallest offered hop count; forward it when it improved (or in iteration 1)."""
        hops = vertex.value
        if messages and messages[0] < hops:
            hops = messages[0]
            vertex.value = hops
        elif vertex.iteration != 1 or hops == UNREACHABLE:
            return
        vertex.send_to_neighbours(hops + 1)


def pagerank_settings(damping: float, iterations: int) -> tuple[float, int]:
    """PageRank's damping and iteration count, checked: a ValueError names the one out of range."""
    if not 0.0 <= damping <= 1.0:
        msg = f"damping must be between 0 and 1, got {damping!r}"
        raise ValueError(msg)
    if not isinstance(iterations, int) or iterations < 0:
        msg = f"iterations must be an int >= 0, got {iterations!r}"
        raise ValueError(msg)
    return float(damping), iterations


class PageRank(VertexCentricCompute):
    """Graphalytics PageRank: ``iterations`` synchronous updates starting from ``1 / n``, the rank of
    dangling vertices (no out-edges) spread evenly over all vertices through an aggregator.

    Iteration 1 sets the initial rank and sends the shares; iteration ``i + 1`` computes the rank
    after ``i`` updates, so the program runs ``iterations + 1`` supersteps.
    """

    always_active = True
    combine = operator.add
    aggregators = {"dangling": Aggregator.sum(0.0)}

    def __init__(self, damping: float = 0.85, iterations: int = 20) -> None:
        self.damping, self.iterations = pagerank_settings(damping, iterations)
        self.max_iterations = iterations + 1

    def init(self, vertex_id: Any, value: Any) -> float:
        """Set in iteration 1, once the number of vertices is known."""
        return 0.0

    def compute(self, vertex, messages: list) -> None:
        """Sum the incoming shares, add the teleport and dangling terms, send the new shares."""
        n = vertex.num_vertices
        iteration = vertex.iteration
        if iteration == 1:
            rank = 1.0 / n
        else:
            d = self.damping
            incoming = messages[0] if messages else 0.0
            rank = (1.0 - d) / n + d * (incoming + vertex.aggregated("dangling") / n)
        vertex.value = rank
        if iteration <= self.iterations:
            degree = vertex.out_degree
            if degree:
                vertex.send_to_neighbours(rank / degree)
            else:
                vertex.aggregate("dangling", rank)


class ConnectedComponents(VertexCentricCompute):
    """Weakly connected components: every vertex ends with the smallest vertex id of its component
    (edge direction ignored).

    Works for static and incremental compute: labels only decrease, and a vertex touched by a new
    edge offers its label to all its neighbours in the first iteration of the window.
    """

    combine = min
    max_iterations = NO_LIMIT

    def __init__(self, directed: bool = True) -> None:
        self.direction = _direction(directed)

    def init(self, vertex_id: Any, value: Any) -> Any:
        """Every vertex starts as its own component."""
        return vertex_id

    def compute(self, vertex, messages: list) -> None:
        """Adopt a smaller label and pass it on; in iteration 1 offer the own label."""
        label = vertex.value
        if messages and messages[0] < label:
            label = messages[0]
            vertex.value = label
        elif vertex.iteration != 1:
            return
        vertex.send_to_neighbours(label, self.direction)


class _Offered:
    """An incremental program's value: the result plus how many out- and in-edges the vertex has
    already offered it along. Equal when the results are equal, so that offering a value along new
    edges is not a change the window emits."""

    __slots__ = ("in_seen", "out_seen", "result")

    def __init__(self, result: Any, out_seen: int = 0, in_seen: int = 0) -> None:
        self.result = result
        self.out_seen = out_seen
        self.in_seen = in_seen

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Offered) and self.result == other.result

    def __hash__(self) -> int:
        return hash(self.result)

    def __reduce__(self):
        return _Offered, (self.result, self.out_seen, self.in_seen)

    def __repr__(self) -> str:
        return f"_Offered({self.result!r}, out_seen={self.out_seen}, in_seen={self.in_seen})"


class IncrementalConnectedComponents(VertexCentricCompute):
    """Weakly connected components of a growing graph, with work proportional to what a window
    changes: a vertex offers its label along the edges added since it last offered it (new edges
    are appended to a vertex's edge lists), and along every edge only when its label improves.

    The value remembers how many edges were offered the label; it compares equal by label, so only
    label changes are emitted. A count older than the edge list (after a restore) only causes a
    label to be offered again, which is harmless.
    """

    combine = min
    max_iterations = NO_LIMIT

    def __init__(self, directed: bool = True) -> None:
        self.directed = directed
        self.direction = _direction(directed)

    def init(self, vertex_id: Any, value: Any) -> _Offered:
        """Every vertex starts as its own component."""
        return _Offered(vertex_id)

    def compute(self, vertex, messages: list) -> None:
        """Adopt a smaller label and pass it on; offer the label along edges added since."""
        state = vertex.value
        label = state.result
        out_neighbours = vertex.out_neighbours
        in_neighbours = vertex.in_neighbours if self.directed else ()
        if messages and messages[0] < label:
            label = messages[0]
            vertex.send_to_neighbours(label, self.direction)
            vertex.value = _Offered(label, len(out_neighbours), len(in_neighbours))
        elif len(out_neighbours) > state.out_seen or len(in_neighbours) > state.in_seen:
            send = vertex.send
            for other in out_neighbours[state.out_seen:]:
                send(other, label)
            for other in in_neighbours[state.in_seen:]:
                send(other, label)
            vertex.value = _Offered(label, len(out_neighbours), len(in_neighbours))

    def result(self, vertex_id: Any, value: _Offered) -> Any:
        """The component label."""
        return value.result


class IncrementalBreadthFirstSearch(VertexCentricCompute):
    """Hop counts from ``source`` in a growing graph: a vertex offers ``hops + 1`` along the out-edges
    added since it last did, and along every out-edge only when its own count improves (see
    ``IncrementalConnectedComponents``)."""

    combine = min

    def __init__(self, source: Any, max_iterations: int = NO_LIMIT) -> None:
        self.source = source
        self.max_iterations = max_iterations

    def init(self, vertex_id: Any, value: Any) -> _Offered:
        """0 for the source, ``UNREACHABLE`` otherwise."""
        return _Offered(0 if vertex_id == self.source else UNREACHABLE)

    def compute(self, vertex, messages: list) -> None:
        """Take a smaller hop count and pass it on; offer it along out-edges added since."""
        state = vertex.value
        hops = state.result
        out_neighbours = vertex.out_neighbours
        if messages and messages[0] < hops:
            hops = messages[0]
            vertex.send_to_neighbours(hops + 1)
            vertex.value = _Offered(hops, len(out_neighbours))
        elif len(out_neighbours) > state.out_seen:
            if hops != UNREACHABLE:
                send = vertex.send
                for other in out_neighbours[state.out_seen:]:
                    send(other, hops + 1)
            vertex.value = _Offered(hops, len(out_neighbours))

    def result(self, vertex_id: Any, value: _Offered) -> int:
        """The hop count."""
        return value.result


class LabelPropagation(VertexCentricCompute):
    """CDLP: labels start as vertex ids; in each of ``iterations`` synchronous steps a vertex takes
    the most frequent label among its neighbours (in- and out-neighbours with multiplicity in a
    directed graph), the smallest on ties. A vertex without neighbours keeps its label."""

    def __init__(self, iterations: int = 10, directed: bool = True) -> None:
        if not isinstance(iterations, int) or iterations < 0:
            msg = f"iterations must be an int >= 0, got {iterations!r}"
            raise ValueError(msg)
        self.iterations = iterations
        self.max_iterations = iterations + 1
        self.direction = _direction(directed)

    def init(self, vertex_id: Any, value: Any) -> Any:
        """The vertex's own id."""
        return vertex_id

    def compute(self, vertex, messages: list) -> None:
        """Take the most frequent received label, then send the label to every neighbour."""
        if messages:
            counts = Counter(messages)
            best = max(counts.values())
            vertex.value = min(label for label, count in counts.items() if count == best)
        if vertex.iteration <= self.iterations:
            vertex.send_to_neighbours(vertex.value, self.direction)


class LocalClusteringCoefficient(VertexCentricCompute):
    """LCC in two supersteps: every vertex sends its out-neighbour set to each of its neighbours
    ``N(v)`` (in- and out-neighbours without itself), which then count the links among ``N(v)``."""

    max_iterations = 2

    def init(self, vertex_id: Any, value: Any) -> Any:
        """Replaced in iteration 1."""
        return 0.0

    def compute(self, vertex, messages: list) -> None:
        """Iteration 1: share the out-neighbour set; iteration 2: count links between neighbours."""
        if vertex.iteration == 1:
            me = vertex.id
            successors = set(vertex.out_neighbours)
            successors.discard(me)
            near = successors.union(vertex.in_neighbours)
            near.discard(me)
            vertex.value = near if len(near) >= 2 else 0.0
            shared = frozenset(successors)
            send = vertex.send
            for other in near:
                send(other, shared)
            return
        near = vertex.value
        if isinstance(near, float):
            return
        links = 0
        for successors in messages:
            links += len(near & successors)
        degree = len(near)
        vertex.value = links / (degree * (degree - 1))

    def result(self, vertex_id: Any, value: Any) -> float:
        """The coefficient (0.0 for a vertex with fewer than two neighbours)."""
        return value if isinstance(value, float) else 0.0


class ShortestPaths(VertexCentricCompute):
    """Single-source shortest paths: the smallest sum of edge weights from ``source``; ``inf`` for
    unreachable vertices. An edge weighs its value when that is a number, 1 without a value, its
    property ``weight`` when the value is a property map (``weights.edge_weight``)."""

    combine = min

    def __init__(self, source: Any, max_iterations: int = NO_LIMIT,
                 weight: str | None = "weight") -> None:
        self.source = source
        self.max_iterations = max_iterations
        self.weight = weight

    def init(self, vertex_id: Any, value: Any) -> float:
        """0.0 for the source, ``inf`` otherwise."""
        return 0.0 if vertex_id == self.source else math.inf

    def compute(self, vertex, messages: list) -> None:
        """Take the smallest offered distance; relax the out-edges when it improved."""
        distance = vertex.value
        if messages and messages[0] < distance:
            distance = messages[0]
            vertex.value = distance
        elif vertex.iteration != 1 or distance == math.inf:
            return
        send = vertex.send
        key = self.weight
        for other, value in vertex.out_edges:
            if type(value) is float or type(value) is int:
                send(other, distance + (value if key is not None else 1.0))
            else:
                send(other, distance + edge_weight(value, key, "ShortestPaths", vertex.id,
                                                          other))


class KHopNeighbourhood(VertexCentricCompute):
    """Traversal: for each request ``(key, start)`` emits ``(key, vertex, hops)`` for every vertex
    within ``k`` hops of ``start`` along ``direction`` edges (``start`` itself at 0).

    A request may also be a bare vertex id (the key is then the id). Requests of one window run
    together; a vertex remembers which keys reached it in the current window, so each is emitted
    once, at its smallest hop count.
    """

    def __init__(self, k: int, direction: str = "out") -> None:
        if not isinstance(k, int) or k < 0:
            msg = f"k must be an int >= 0, got {k!r}"
            raise ValueError(msg)
        if direction not in ("out", "in", "both"):
            msg = f"direction must be 'out', 'in' or 'both', got {direction!r}"
            raise ValueError(msg)
        self.k = k
        self.direction = direction
        self.max_iterations = k + 1

    def start(self, request: Any) -> list[tuple[Any, Any]]:
        """One start message: the request key, sent to the start vertex."""
        key, start = request_key(request), request_start(request)
        return [(start, key)]

    def compute(self, vertex, messages: list) -> None:
        """Emit the keys that reach this vertex for the first time this window; pass them on."""
        state = vertex.value
        window = vertex.window
        if type(state) is not _Reached or state.window != window:
            state = _Reached(window)
        seen = state.keys
        hops = vertex.iteration - 1
        forward = hops < self.k
        for key in messages:
            if key not in seen:
                seen.add(key)
                vertex.emit((key, vertex.id, hops))
                if forward:
                    vertex.send_to_neighbours(key, self.direction)
        vertex.value = state


class _Reached:
    """The request keys that reached a vertex in one window."""

    __slots__ = ("keys", "window")

    def __init__(self, window: int) -> None:
        self.window = window
        self.keys: set = set()

    def __getstate__(self):
        return self.window, self.keys

    def __setstate__(self, state) -> None:
        self.window, self.keys = state


def request_key(request: Any) -> Any:
    """The key of a k-hop request: the first item of ``(key, start)``, else the request itself."""
    return request[0] if isinstance(request, tuple) else request


def request_start(request: Any) -> Any:
    """The start vertex of a k-hop request: the second item of ``(key, start)``, else the request."""
    return request[1] if isinstance(request, tuple) else request
