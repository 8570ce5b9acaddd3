"""Array vertex programs: one call per task partition and superstep, on numpy arrays and CSR matrices.

An ``ArrayVertexCompute`` runs where a ``VertexCentricCompute`` runs (``GraphView.compute`` and
``incremental_compute``), with the same supersteps, aggregators, termination, snapshots and recovery;
instead of one Python call per vertex it gets, per task and superstep, its partition's vertex values
as an array, its edges as ``scipy.sparse`` CSR matrices and the combined incoming messages as arrays:

>>> import numpy as np
>>> from gyreflow.api import Environment
>>> from gyreflow.api.graph import ArrayVertexCompute, GraphView
>>> class InDegree(ArrayVertexCompute):
...     max_iterations = 2
...     def init(self, ids, given):
...         return np.zeros(len(ids), dtype=np.int64)
...     def compute(self, part, inbox):
...         if part.iteration == 1:
...             part.send_along(np.ones(len(part.ids), dtype=np.int64))
...             return part.values
...         return inbox.dense(0, np.int64)
>>> p = Environment.local(progress=False).pipeline("degrees")
>>> @p.task
... def degrees(ctx):
...     graph = GraphView(None, ctx.source([(1, 2), (3, 2), (2, 1)]))
...     graph.compute(InDegree()).collect("in")
>>> sorted(p.execute().output("in"))
[(1, 1), (2, 2), (3, 0)]
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar, Protocol

import numpy as np

from gyreflow.api.graph.views import Aggregator, identity_default


class ArrayVertexCompute(abc.ABC):
    """A vertex program over arrays: ``compute`` runs once per task and superstep.

    ``combine`` says how the messages to one vertex are combined before ``compute`` sees them:
    ``"sum"``, ``"min"``, ``"max"``, ``"histogram"`` (the most frequent value, the smallest on ties:
    label propagation) or None (every message is delivered). ``max_iterations``, ``always_active``
    (the iteration goes on while no messages are in flight), ``aggregators`` and ``terminate`` mean
    what they mean for ``VertexCentricCompute``.

    Incremental compute, a window that removed edges or vertices: each task gives
    ``removal_scope`` the values of its vertices that lost an edge and the last values of those the
    window removed (a source of a search, say, whose neighbours' values tell nothing of what rested
    on it); the scopes of all tasks are
    joined (a set union) and ``restarts`` picks, on every task, the vertices that start again from
    ``init``. Those count as touched, and when any does, every edge counts as new in that
    window. The defaults start every vertex again; ``RepairingCompute`` (``incremental_wcc``,
    ``incremental_bfs``, ``incremental_sssp``) restarts none there and picks, in its first
    superstep, only the vertices whose value rested on a removed edge or vertex.
    """

    array_program: ClassVar[bool] = True
    max_iterations: int = 100
    always_active: bool = False
    combine: ClassVar[str | None] = "sum"
    aggregators: ClassVar[dict[str, Aggregator]] = {}
    # Incremental: ``compute`` changes ``part.values`` in place and returns them, and calls
    # ``part.changing(positions)`` before it changes values there; a window then keeps, compares
    # and stores the values there only, not every vertex's.
    reports_changes: ClassVar[bool] = False

    @abc.abstractmethod
    def init(self, ids: np.ndarray, given: np.ndarray) -> np.ndarray:
        """The start values of the vertices ``ids`` (``given``: what the vertex stream gave, an
        object array, None for vertices only edges named). Static compute: every vertex in every
        window; incremental: each vertex once, when it appears."""

    @abc.abstractmethod
    def compute(self, part: ArrayPartition, inbox: ArrayInbox) -> np.ndarray | None:
        """One superstep of the task's partition: read ``part.values`` and ``inbox``, send
        messages (``part.send``, ``part.send_along``), return the new values (None: unchanged)."""

    def terminate(self, iteration: int, aggregates: dict[str, Any]) -> bool:
        """Whether to stop after ``iteration``, given the aggregates combined in it."""
        return False

    def removal_scope(self, values: np.ndarray) -> frozenset | None:
        """From the values of this task's vertices that lost an edge in the window and the last
        values of its vertices the window removed, what every task needs to pick the vertices that
        start again (None: all of them). Not called when none of them had a value."""
        return None

    def restarts(self, values: np.ndarray, scope: frozenset) -> np.ndarray:
        """A mask of the vertices that start again from ``init``, given the tasks' joined scope
        (empty when no vertex that lost an edge or went had a value: all came in the window)."""
        return np.ones(len(values), dtype=bool)

    @identity_default
    def result(self, ids: np.ndarray, values: np.ndarray) -> np.ndarray:
        """What the output stream carries: ``(id, result)`` pairs of ``ids`` and this array."""
        return values


class ArrayInbox(Protocol):
    """The messages that reached a partition in a superstep, combined per vertex.

    ``positions`` (dense vertex positions, sorted, each once; every message when the combiner is
    None) and ``values``; with ``"histogram"``, ``values`` holds the chosen labels and ``histogram``
    the ``(positions, labels, counts)`` they were chosen from. ``len(inbox)`` counts the entries.
    """

    positions: np.ndarray
    values: np.ndarray
    histogram: tuple | None

    def received(self) -> np.ndarray:
        """A boolean mask of the vertices that received messages."""

    def dense(self, fill: Any, dtype: Any = None) -> np.ndarray:
        """One value per vertex: the combined message, ``fill`` where none arrived."""


class ArrayPartition(Protocol):
    """What ``compute`` sees of its task's partition; the running graph operator implements it.

    ``ids`` (vertex ids by dense position ``0..n-1``), ``values`` (their current values),
    ``given`` (vertex stream values), ``touched`` (mask of the vertices the window's input touched),
    ``iteration`` (1-based), ``window``, ``num_vertices`` (whole graph), ``num_local`` (n).

    ``out_edges`` and ``in_edges``: ``scipy.sparse.csr_matrix`` of shape ``(n, m)`` with one entry
    per edge (duplicates kept, each row in arrival order), the data being the edge weight (the edge
    value, 1.0 without one). Columns ``0..n-1`` are the partition's own vertices, ``n..m-1`` vertices
    of other tasks; ``columns`` holds the vertex id of every column. In an undirected graph both are
    the matrix of every incident edge. ``out_degree`` is the row lengths of ``out_edges``;
    ``out_values`` the raw out-edge values in CSR order (None when no edge has a value).
    """

    ids: np.ndarray
    values: np.ndarray
    given: np.ndarray
    touched: np.ndarray
    iteration: int
    window: int
    num_vertices: int
    num_local: int
    out_edges: Any
    in_edges: Any
    out_degree: np.ndarray
    out_values: np.ndarray | None
    columns: np.ndarray

    def send(self, columns: np.ndarray, values: Any) -> None:
        """Send ``values[i]`` (or one value to every target) to column ``columns[i]``."""

    def send_along(self, values: np.ndarray, direction: str = "out", where: Any = None) -> None:
        """Each vertex (those ``where`` selects: a mask or positions) sends ``values[v]`` along
        every ``"out"``, ``"in"`` or ``"both"`` edge (undirected: every incident edge once)."""

    def edges(self, where: Any = None, direction: str = "out") -> tuple:
        """``(rows, columns, weights)``: one entry per edge of the selected vertices."""

    def added_edges(self, direction: str = "out") -> tuple:
        """``(rows, columns)``: one entry per edge new to the window's supersteps (incremental:
        those the window's input added; static: every edge)."""

    def removed_edges(self) -> tuple | None:
        """``(rows, others)``: one entry per edge the window's input removed at the partition's
        vertices (incremental), the vertex's position and the other end's id; None when the
        removals are not known edge by edge (a window that removed vertices)."""

    def changing(self, positions: Any) -> None:
        """Say that ``values`` are about to change in place at ``positions`` (a program with
        ``reports_changes``)."""

    def column_positions(self, ids: Any) -> tuple[np.ndarray, np.ndarray]:
        """``(columns, found)``: the columns of vertex ids."""

    def aggregate(self, name: str, value: Any) -> None:
        """Add ``value`` to aggregator ``name`` of this superstep."""

    def aggregated(self, name: str) -> Any:
        """The combined value of aggregator ``name`` in the previous superstep."""


def ids_equal(ids: np.ndarray, vertex: Any) -> np.ndarray:
    """A mask of the ids equal to ``vertex`` (any id type).

    >>> ids_equal(np.array([1, 2]), 2).tolist(), ids_equal(np.array([1, 2]), "2").tolist()
    ([False, True], [False, False])
    """
    if ids.dtype == object:
        return np.fromiter((v == vertex for v in ids.tolist()), dtype=bool, count=len(ids))
    if not isinstance(vertex, (int, float, np.number)):
        return np.zeros(len(ids), dtype=bool)
    return ids == vertex
