"""Operator specifications: what each vertex of a plan computes, as immutable values.

The plan only describes operators; ``gyreflow.runtime.dataflow.operator_factory`` turns each spec into
a running operator.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

from gyreflow.state.records import frozen


def identity(record: object) -> object:
    """The key function of ``key_by()`` without arguments: the record is its own key."""
    return record


class OperatorKind(enum.Enum):
    """GeaFlow's operator families."""

    SOURCE = "source"
    ONE_INPUT = "one-input"
    TWO_INPUT = "two-input"
    ITERATION = "iteration"
    SINK = "sink"


@frozen(eq=False)
class OperatorSpec:
    """Base of every operator spec; ``op`` is the short operator name shown by ``explain``."""

    op = "operator"
    kind = OperatorKind.ONE_INPUT
    keyed = False


@frozen(eq=False)
class SourceSpec(OperatorSpec):
    """Read records from ``source``, cut into windows by ``window``."""

    source: object
    window: object
    op = "source"
    kind = OperatorKind.SOURCE


@frozen(eq=False)
class MapSpec(OperatorSpec):
    """Emit ``fn(record)`` for every record."""

    fn: Callable
    op = "map"


@frozen(eq=False)
class ContextMapSpec(OperatorSpec):
    """Emit ``fn(record, ctx)`` for every record (``ctx.window``: the processing window)."""

    fn: Callable
    op = "map_with_context"


@frozen(eq=False)
class FlatMapSpec(OperatorSpec):
    """Emit every item of ``fn(record)``."""

    fn: Callable
    op = "flat_map"


@frozen(eq=False)
class FilterSpec(OperatorSpec):
    """Keep the records for which ``fn(record)`` is true."""

    fn: Callable
    op = "filter"


@frozen(eq=False)
class ReduceSpec(OperatorSpec):
    """Fold records with equal ``key_fn(record)`` with ``fn``; state persists across windows.
    ``associative``: the user declares ``fn`` associative, so records may fold before they cross
    between processes (map-side combine)."""

    key_fn: Callable
    fn: Callable
    associative: bool = False
    op = "reduce"
    keyed = True


@frozen(eq=False)
class AggregateSpec(OperatorSpec):
    """Aggregate records per key with an ``AggregateFunction``; emits ``(key, result)`` per updated key."""

    key_fn: Callable
    function: object
    op = "aggregate"
    keyed = True


@frozen(eq=False)
class CountSpec(OperatorSpec):
    """Count records per key across windows; emits ``(key, count)`` per key updated in a window."""

    key_fn: Callable
    op = "count"
    keyed = True


@frozen(eq=False)
class UnionSpec(OperatorSpec):
    """Merge any number of inputs into one stream."""

    op = "union"
    kind = OperatorKind.TWO_INPUT


@frozen(eq=False)
class JoinSpec(OperatorSpec):
    """Inner join of two keyed inputs within each window: emits ``fn(left, right)`` per matching pair."""

    left_key: Callable
    right_key: Callable
    fn: Callable | None = None
    op = "join"
    kind = OperatorKind.TWO_INPUT
    keyed = True


@frozen(eq=False)
class StreamJoinSpec(OperatorSpec):
    """Join of two keyed inputs across windows (``how``: inner, left, right, full): each key's rows
    of both sides are kept, each window joins its rows with everything so far; ``ttl`` (windows)
    drops a row that many windows after its own."""

    left_key: Callable
    right_key: Callable
    fn: Callable | None = None
    how: str = "inner"
    ttl: int | None = None
    op = "stream_join"
    kind = OperatorKind.TWO_INPUT
    keyed = True


@frozen(eq=False)
class TimestampSpec(OperatorSpec):
    """Give every record its event time ``ts_fn(record)``; the watermark trails the largest time seen
    by ``max_delay`` seconds; a task without records for ``idle_timeout`` seconds stops holding it."""

    ts_fn: Callable
    max_delay: float
    idle_timeout: float | None = None
    op = "timestamps"


@frozen(eq=False)
class EventWindowSpec(OperatorSpec):
    """Keyed event-time windows (``assigner``: ``("tumbling", size)``, ``("sliding", size, slide)``
    or ``("session", gap)``) computing ``aggregation``; emits window results and late records."""

    key_fn: Callable
    assigner: tuple
    aggregation: object
    op = "event_window"
    keyed = True


@frozen(eq=False)
class WindowAggregateSpec(OperatorSpec):
    """Aggregate per key within each processing window (``aggregation`` None: count)."""

    key_fn: Callable
    aggregation: object = None
    op = "window_aggregate"
    keyed = True


@frozen(eq=False)
class TableJoinSpec(OperatorSpec):
    """Join a keyed stream with the latest value per key of a changelog stream (kept across windows)."""

    stream_key: Callable
    table_key: Callable
    value_fn: Callable
    fn: Callable
    inner: bool = True
    ttl: int | None = None
    merged: bool = False  # emit the record with the table value's fields added
    op = "table_join"
    kind = OperatorKind.TWO_INPUT
    keyed = True


@frozen(eq=False)
class ProcessSpec(OperatorSpec):
    """Hand each record of a keyed stream to ``function.process(record, ctx)``; call
    ``function.on_notify(window, ctx)`` once the input of a window it asked for is complete."""

    key_fn: Callable
    function: object
    op = "process"
    keyed = True


@frozen(eq=False)
class SinkSpec(OperatorSpec):
    """Hand every record to ``sink`` (a ``gyreflow.api.connectors.sinks.Sink``)."""

    sink: object
    op = "sink"
    kind = OperatorKind.SINK


@frozen(eq=False)
class CollectSpec(OperatorSpec):
    """Return every record to the caller of ``execute()`` under ``name``."""

    name: str
    op = "collect"
    kind = OperatorKind.SINK


class GraphMode(enum.Enum):
    """How a graph operator runs its vertex program in each window."""

    STATIC = "static"  # every vertex restarts from init(); emits every vertex
    INCREMENTAL = "incremental"  # values persist; starts from touched vertices; emits changed ones
    TRAVERSAL = "traversal"  # starts from request messages; emits what the program emits


COMPLETED = "completed"  # a graph version: the latest completed one (the window before the current)


class _EveryVertex:
    """The target of a traversal's start message that starts it at every vertex of the graph (of
    the version the request reads): ``EVERY_VERTEX``, one object in every process."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "EVERY_VERTEX"

    def __reduce__(self) -> str:
        return "EVERY_VERTEX"  # unpickled as this module's one instance


EVERY_VERTEX = _EveryVertex()


@frozen(eq=False)
class GraphComputeSpec(OperatorSpec):
    """Run a vertex-centric ``program`` over a graph view in supersteps inside every window.

    Inputs by ordinal: vertices ``(id, value)`` (when ``has_vertices``), edge halves ``(vertex, other,
    value, side)``, start messages ``(vertex, message)`` (when ``has_starts``), and the loop edge that
    carries messages between supersteps. ``arrays``: the program is an array program (one call per
    task and superstep on numpy arrays), not a per-vertex one. ``versioned``: the operator keeps
    ``retained_versions`` past versions readable; start messages are then ``(vertex, (version,
    message))``, and a static compute reads ``version`` (a window id or ``COMPLETED``; None: the
    current window's). ``broadcast_starts``: every task receives every start message, and one
    addressed to ``EVERY_VERTEX`` starts at each vertex of the task (its version's vertices).
    ``detaches``: a last input, broadcast, carries the ids of the vertices removed with their edges
    (``RemoveVertex(id, detach=True)``), so that every task drops its halves of their edges.
    """

    program: object
    directed: bool
    mode: GraphMode
    has_vertices: bool = True
    has_starts: bool = False
    broadcast_starts: bool = False
    detaches: bool = False
    arrays: bool = False
    versioned: bool = False
    retained_versions: int = 0
    version: object = None
    op = "graph"
    kind = OperatorKind.ITERATION
    keyed = True

    @property
    def max_iterations(self) -> int:
        """The iteration limit of the program."""
        return self.program.max_iterations
