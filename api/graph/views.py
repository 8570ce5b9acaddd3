"""Graph views and vertex-centric programs: static compute, incremental compute and traversal."""

from __future__ import annotations

import abc
import operator
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, Protocol

import attrs

from gyreflow.api.language.stream import Stream
from gyreflow.plan.graph import Partitioning
from gyreflow.plan.graph_changes import REMOVE_IN, REMOVE_OUT, REMOVE_VERTEX, RemoveEdge, RemoveVertex
from gyreflow.plan.operators import COMPLETED, GraphComputeSpec, GraphMode


@attrs.frozen
class Vertex:
    """A vertex of a graph view: its id and an optional value."""

    id: Any
    value: Any = None


@attrs.frozen
class Edge:
    """An edge from ``src`` to ``dst`` with an optional value (a weight, a label)."""

    src: Any
    dst: Any
    value: Any = None


@attrs.frozen
class Aggregator:
    """A global aggregator: every vertex may add values with ``ctx.aggregate(name, value)``; the
    combined value of an iteration is visible to every vertex in the next one (``ctx.aggregated``).

    >>> Aggregator.sum().combine(2, 3), Aggregator.min().combine(2, 3)
    (5, 2)
    """

    zero: Any
    combine: Callable[[Any, Any], Any]

    @classmethod
    def sum(cls, zero: Any = 0) -> Aggregator:
        """Adds the values up."""
        return cls(zero, operator.add)

    @classmethod
    def min(cls, zero: Any = float("inf")) -> Aggregator:
        """Keeps the smallest value."""
        return cls(zero, min)

    @classmethod
    def max(cls, zero: Any = float("-inf")) -> Aggregator:
        """Keeps the largest value."""
        return cls(zero, max)


def identity_default(method: Callable) -> Callable:
    """Marks a default method that returns the value it is given: the running graph operator skips
    calling it when a program does not override it."""
    method.identity_default = True
    return method


class VertexCentricCompute(abc.ABC):
    """A vertex program: ``compute`` runs once per active vertex in every iteration (superstep).

    In the first iteration every vertex is active (static compute) or every vertex the window touched
    (incremental compute; traversal: the vertices that received a start message). Later, a vertex is
    active when messages reached it, or always when ``always_active`` is true. The iteration stops when
    no messages are in flight, after ``max_iterations``, or when ``terminate`` says so.

    Messages to one vertex are combined with ``combine`` when a subclass defines it (``operator.add``,
    ``min`` and ``max`` take a fast path); ``compute`` then receives a list of one combined message.
    A message cannot be None. Messages to a vertex the graph does not have are dropped.

    Incremental compute emits a vertex when its value changed in the window, judged by ``!=`` on the
    values (a program may keep bookkeeping in a value object whose equality looks at the result
    only). A vertex's edges keep their arrival order and a window's new edges are appended at the
    end, so a program can tell the new ones by remembering how many it has seen.

    When a window removes edges or vertices (``RemoveEdge``, ``RemoveVertex``), an incremental
    program starts every vertex again from ``init`` and runs over the whole graph in that window,
    which keeps its results exact whatever it remembers (array programs can narrow that down:
    ``ArrayVertexCompute.removal_scope``). A removed vertex is emitted as ``(vertex_id, None)``, an
    upsert stream's delete.
    """

    max_iterations: int = 100
    always_active: bool = False
    combine: ClassVar[Callable[[Any, Any], Any] | None] = None
    aggregators: ClassVar[dict[str, Aggregator]] = {}

    @identity_default
    def init(self, vertex_id: Any, value: Any) -> Any:
        """The value a vertex starts with (static compute: every window; otherwise when it appears)."""
        return value

    @abc.abstractmethod
    def compute(self, vertex: VertexContext, messages: list) -> None:
        """Run one vertex for one iteration: read ``messages``, set the value, send messages."""

    def terminate(self, iteration: int, aggregates: dict[str, Any]) -> bool:
        """Whether to stop after ``iteration``, given the aggregates combined in it."""
        return False

    @identity_default
    def result(self, vertex_id: Any, value: Any) -> Any:
        """What the output stream carries for a vertex: ``(vertex_id, result(vertex_id, value))``."""
        return value

    def on_notify(self, vertex: VertexContext, iteration: int) -> None:  # noqa: B027 - optional
        """Superstep ``iteration`` of the window is complete on every task, and ``vertex`` asked
        for it (``vertex.notify_at(iteration)``). Runs once per request, before the next superstep
        (or when the window's supersteps end): it may change the vertex's value, aggregate, emit
        (traversal) and send messages, which arrive in the superstep after the running one."""

    def start(self, request: Any) -> Iterable[tuple[Any, Any]]:
        """Traversal only: the ``(vertex_id, message)`` pairs one request starts with (a traversal
        refuses a program that does not define it)."""
        return ()


class VertexContext(Protocol):
    """What ``compute`` sees of its vertex; the running graph operator provides the implementation.

    Attributes: ``id``, ``value`` (assign to change it), ``iteration`` (1-based), ``window``,
    ``num_vertices`` (in the whole graph), ``out_neighbours`` and ``in_neighbours`` (lists of vertex
    ids, one per edge; read-only), ``out_edges`` and ``in_edges`` (new lists of ``(other vertex, edge
    value)`` pairs), ``out_degree``. In an undirected graph out and in both list every incident edge,
    and ``send_to_neighbours`` sends once per incident edge whatever the direction ("both" included).
    """

    id: Any
    value: Any
    iteration: int
    window: int
    num_vertices: int
    out_neighbours: list
    in_neighbours: list
    out_edges: list
    in_edges: list
    out_degree: int

    def send(self, target: Any, message: Any) -> None:
        """Send ``message`` to vertex ``target`` for the next iteration."""

    def send_to_neighbours(self, message: Any, direction: str = "out") -> None:
        """Send ``message`` along every ``"out"``, ``"in"`` or ``"both"`` edge."""

    def aggregate(self, name: str, value: Any) -> None:
        """Add ``value`` to the global aggregator ``name`` of this iteration."""

    def aggregated(self, name: str) -> Any:
        """The combined value of aggregator ``name`` in the previous iteration (its zero at first)."""

    def emit(self, record: Any) -> None:
        """Traversal: emit ``record`` on the output stream when the iteration finishes."""

    def notify_at(self, iteration: int) -> None:
        """Ask for ``on_notify(vertex, iteration)`` once superstep ``iteration`` (this one or a
        later one) is complete on every task: Naiad's notification at ``(window, iteration)``."""


@attrs.frozen(eq=False)
class EdgeBlock:
    """Many edges as arrays, for ``GraphView.from_arrays``: ``src[i] -> dst[i]`` with value
    ``values[i]`` (``values`` None: no edge has a value)."""

    src: Any
    dst: Any
    values: Any = None


@attrs.frozen(eq=False)
class VertexBlock:
    """Many vertices as arrays, for ``GraphView.from_arrays``: ids and optional values."""

    ids: Any
    values: Any = None


def _vertex_record(item: Any) -> tuple[Any, Any]:
    if isinstance(item, Vertex):
        return item.id, item.value
    if isinstance(item, RemoveVertex):
        return item.id, item  # the graph operator knows the marker by its type
    if isinstance(item, tuple):
        if len(item) == 2:
            return item
        if len(item) == 1:
            return item[0], None
        msg = f"a vertex is an id, (id, value) or Vertex, not a {len(item)}-tuple: {item!r}"
        raise ValueError(msg)
    return item, None


def _edge_record(item: Any) -> tuple[Any, Any, Any]:
    if isinstance(item, Edge):
        return item.src, item.dst, item.value
    if isinstance(item, tuple) and len(item) in (2, 3):
        return (item[0], item[1], item[2] if len(item) == 3 else None)
    msg = f"an edge is (src, dst), (src, dst, value) or Edge, not {item!r}"
    raise ValueError(msg)


def _first(record: tuple) -> Any:
    return record[0]


def _detached(item: Any) -> tuple:
    """The id of a vertex removed with its edges (``RemoveVertex(id, detach=True)``), else nothing."""
    if type(item) is RemoveVertex and item.detach:
        return (item.id,)
    return ()


def _detached_of_batch(items: list) -> list:
    """``_detached`` of every record of a batch, in one pass (a window's edges come by the thousand
    and seldom hold a ``RemoveVertex``)."""
    if RemoveVertex not in set(map(type, items)):
        return []
    return [item.id for item in items if type(item) is RemoveVertex and item.detach]


_detached.flat_map_batch = _detached_of_batch  # see FlatMapOperator.process


def _detached_vertex(item: Any) -> tuple:
    """``_detached`` of a vertex stream's record, which may also be ``(id, RemoveVertex(...))``."""
    return _detached(item[1] if type(item) is tuple and len(item) == 2 else item)


def _is_array_program(program: Any) -> bool:
    # ArrayVertexCompute (gyreflow.api.graph.arrays, which imports this module) marks its programs.
    return getattr(type(program), "array_program", False) is True


def _check_program(program: Any) -> None:
    if not isinstance(program, VertexCentricCompute) and not _is_array_program(program):
        msg = ("a graph computation needs a VertexCentricCompute or ArrayVertexCompute instance, "
               f"got {type(program).__name__}")
        raise TypeError(msg)
    if not isinstance(program.max_iterations, int) or program.max_iterations < 1:
        msg = f"max_iterations must be a positive int, got {program.max_iterations!r}"
        raise ValueError(msg)


class GraphView:
    """A graph built from a vertex stream and an edge stream, partitioned by vertex key group.

    Vertices are ids, ``(id, value)`` pairs or ``Vertex``; edges are ``(src, dst)``, ``(src, dst,
    value)`` or ``Edge``. A vertex named by an edge but absent from the vertex stream is created with
    value ``None``; a vertex record for a vertex the graph has replaces its value. Each window
    applies what its streams carry: additions, and the removals ``RemoveEdge`` (edge stream) and
    ``RemoveVertex`` (either stream). The graph and the results live in the configured state backend
    and are snapshotted and restored with the window.

    Every window is a version of the graph: version ``w`` is the graph after window ``w`` (version
    0 is empty). With ``retained_versions = k`` the computations that read versions (``snapshot``,
    ``traversal(..., version=...)``) can read versions ``w - k`` to ``w`` in window ``w``; None
    takes ``graph.retained_versions`` from the configuration.
    """

    def __init__(self, vertices: Stream | None, edges: Stream, directed: bool = True,
                 parallelism: int | None = None, name: str | None = None,
                 retained_versions: int | None = None) -> None:
        if retained_versions is None:
            config = getattr(edges.builder, "config", None)
            retained_versions = 0 if config is None else config["graph.retained_versions"]
        if not isinstance(retained_versions, int) or retained_versions < 0:
            msg = f"retained_versions must be an int >= 0, got {retained_versions!r}"
            raise ValueError(msg)
        self.vertices = vertices
        self.edges = edges
        self.directed = directed
        self.parallelism = parallelism
        self.name = name
        self.retained_versions = retained_versions
        self.blocks = False

    @classmethod
    def from_arrays(cls, vertices: Stream | None, edges: Stream, directed: bool = True,
                    parallelism: int | None = None, name: str | None = None) -> GraphView:
        """A graph whose streams carry ``VertexBlock`` and ``EdgeBlock`` records (numpy arrays of
        many vertices or edges each), for array programs only. Every graph task receives every
        block and keeps the vertices of its key groups, so no record per edge is ever made."""
        view = cls(vertices, edges, directed, parallelism, name)
        view.blocks = True
        return view

    def compute(self, program: VertexCentricCompute | Any, name: str | None = None) -> Stream:
        """Static compute: in every window, start every vertex from ``program.init`` and run the
        iterations over the whole graph; emits ``(vertex_id, result)`` for every vertex."""
        return self._operator(program, GraphMode.STATIC, None, name)

    def incremental_compute(self, program: VertexCentricCompute | Any,
                            name: str | None = None) -> Stream:
        """Dynamic compute: values persist across windows; each window starts from the vertices its
        vertices and edges touched; emits ``(vertex_id, result)`` for the vertices whose result
        changed in the window."""
        return self._operator(program, GraphMode.INCREMENTAL, None, name)

    def traversal(self, requests: Stream, program: VertexCentricCompute,
                  name: str | None = None, version: Callable[[Any], Any] | None = None) -> Stream:
        """Traversal: each request's ``program.start(request)`` messages start the iteration in the
        request's window, on the current graph or, with ``version``, on the version
        ``version(request)`` names (a window id; None: the current one; ``"completed"``: the window
        before); emits what ``ctx.emit`` produced."""
        if _is_array_program(program):
            msg = f"traversal runs per-vertex programs; {type(program).__name__} is an array program"
            raise TypeError(msg)
        if type(program).start is VertexCentricCompute.start:
            msg = f"traversal needs a program that defines start(request); {type(program).__name__} does not"
            raise TypeError(msg)
        everywhere = bool(getattr(program, "starts_at_every_vertex", False))
        if version is None:
            starts = requests.flat_map(program.start)
            return self._operator(program, GraphMode.TRAVERSAL, starts, name,
                                  broadcast_starts=everywhere)
        if type(program).on_notify is not VertexCentricCompute.on_notify:
            msg = (f"a traversal that reads versions does not run on_notify; "
                   f"{type(program).__name__} defines it")
            raise TypeError(msg)
        starts = requests.flat_map(_VersionedStarts(program.start, version))
        return self._operator(program, GraphMode.TRAVERSAL, starts, name, versioned=True,
                              broadcast_starts=everywhere)

    def snapshot(self, version: int | None = None) -> GraphSnapshot:
        """A read view of one version: ``version`` (a window id), or, None, the latest completed
        version (in window ``w``: version ``w - 1``), while later windows go on changing the graph.
        Needs ``retained_versions`` of at least 1."""
        if self.retained_versions < 1:
            msg = "a snapshot reads past versions: build the GraphView with retained_versions >= 1"
            raise ValueError(msg)
        if version is not None and (not isinstance(version, int) or isinstance(version, bool)
                                    or version < 0):
            msg = f"a version is a window id (an int >= 0) or None (the latest completed), not {version!r}"
            raise ValueError(msg)
        return GraphSnapshot(self, COMPLETED if version is None else version)

    def _operator(self, program, mode, starts, name, versioned: bool = False,
                  version: Any = None, broadcast_starts: bool = False) -> Stream:
        _check_program(program)
        if self.blocks:
            if not _is_array_program(program):
                msg = (f"a graph view from arrays runs array programs; {type(program).__name__} is "
                       "a per-vertex program (build the view from records instead)")
                raise TypeError(msg)
            inputs = [s.broadcast() for s in (self.vertices, self.edges) if s is not None]
        else:
            edges = self.edges.flat_map(_EdgeHalves(self.directed))
            vertices = self.vertices.map(_vertex_record) if self.vertices is not None else None
            inputs = [s.key_by(_first) for s in (vertices, edges) if s is not None]
            if starts is not None:  # every task sees every start when one may be for every vertex
                inputs.append(starts.broadcast() if broadcast_starts else starts.key_by(_first))
            # Every task holds halves of a detached vertex's edges: its id goes to all of them.
            detached = [s.flat_map(find) for s, find in ((self.vertices, _detached_vertex),
                                                          (self.edges, _detached))
                        if s is not None]
            inputs.append((detached[0].union(*detached[1:]) if len(detached) > 1
                           else detached[0]).broadcast())
        spec = GraphComputeSpec(program, self.directed, mode, self.vertices is not None,
                                starts is not None, arrays=_is_array_program(program),
                                versioned=versioned, retained_versions=self.retained_versions,
                                version=version, broadcast_starts=broadcast_starts,
                                detaches=not self.blocks)
        builder = self.edges.builder
        node = builder.add(spec, inputs, self.parallelism, name or self.name)
        # Messages between supersteps travel on a loop edge from the operator to itself.
        builder.drafts[node].inputs.append((node, Partitioning.LOOP, None))
        return Stream(builder, node)


class GraphSnapshot:
    """One version of a ``GraphView`` (``GraphView.snapshot``): a fixed window's, or the latest
    completed one in every window."""

    def __init__(self, graph: GraphView, version: int | str) -> None:
        self.graph = graph
        self.version = version

    @property
    def directed(self) -> bool:
        """Whether the graph is directed (the library's static algorithms take a snapshot too)."""
        return self.graph.directed

    def compute(self, program: VertexCentricCompute | Any, name: str | None = None) -> Stream:
        """Static compute on the version, with a per-vertex or an array program: every vertex
        starts from ``program.init``; emits ``(vertex_id, result)`` for every vertex of the
        version. A fixed version is computed in its own window; the latest completed one in every
        window."""
        return self.graph._operator(program, GraphMode.STATIC, None, name, versioned=True,
                                    version=self.version)

    def traversal(self, requests: Stream, program: VertexCentricCompute,
                  name: str | None = None) -> Stream:
        """Traversal on the version: every request is answered on it (a fixed version from its own
        window on, while it is retained)."""
        return self.graph.traversal(requests, program, name, version=_Fixed(self.version))


@attrs.frozen
class _Fixed:
    """The version of every request: one fixed version."""

    version: Any

    def __call__(self, request: Any) -> Any:
        return self.version


@attrs.frozen
class _VersionedStarts:
    """A request's start messages, each with the version the request names."""

    start: Callable[[Any], Iterable[tuple[Any, Any]]]
    version: Callable[[Any], Any]

    def __call__(self, request: Any) -> list[tuple[Any, Any]]:
        version = self.version(request)
        return [(vid, (version, message)) for vid, message in self.start(request)]


_OUT, _IN = 1, 3  # where an edge half goes in a vertex's graph entry


@attrs.frozen
class _EdgeHalves:
    """Turns an edge into the records its endpoints store: ``(vertex, other, value, side)`` with side
    1 for an out-edge and 3 for an in-edge (their places in the vertex's graph entry); an undirected
    edge is an out-edge at both ends (a self-loop once)."""

    directed: bool

    def __call__(self, item: Any) -> tuple:
        if type(item) is tuple and len(item) == 2:
            src, dst = item
            value = None
        elif type(item) is tuple and len(item) == 3:
            src, dst, value = item
        elif isinstance(item, RemoveEdge):
            return self.removal(item)
        elif isinstance(item, RemoveVertex):
            return ((item.id, None, None, REMOVE_VERTEX),)
        else:
            src, dst, value = _edge_record(item)
        if self.directed:
            return ((src, dst, value, _OUT), (dst, src, value, _IN))
        if src == dst:
            return ((src, dst, value, _OUT),)
        return ((src, dst, value, _OUT), (dst, src, value, _OUT))

    def flat_map_batch(self, items: list) -> list:
        """``[half for item in items for half in self(item)]``, with ``Edge`` and ``RemoveEdge``
        records taken inline rather than through a call each (see FlatMapOperator.process)."""
        out: list = []
        add, extend = out.append, out.extend
        directed = self.directed
        back, back_removal = (_IN, REMOVE_IN) if directed else (_OUT, REMOVE_OUT)
        for item in items:
            kind = type(item)
            if kind is Edge:
                src, dst, value = item.src, item.dst, item.value
                if src == dst and not directed:
                    add((src, dst, value, _OUT))
                else:
                    extend(((src, dst, value, _OUT), (dst, src, value, back)))
            elif kind is RemoveEdge:
                src, dst = item.src, item.dst
                if src == dst and not directed:
                    add((src, dst, None, REMOVE_OUT))
                else:
                    extend(((src, dst, None, REMOVE_OUT), (dst, src, None, back_removal)))
            else:
                extend(self(item))
        return out

    def removal(self, item: RemoveEdge) -> tuple:
        """The halves that remove ``item``'s edges at both ends."""
        src, dst = item.src, item.dst
        if self.directed:
            return ((src, dst, None, REMOVE_OUT), (dst, src, None, REMOVE_IN))
        if src == dst:
            return ((src, dst, None, REMOVE_OUT),)
        return ((src, dst, None, REMOVE_OUT), (dst, src, None, REMOVE_OUT))
