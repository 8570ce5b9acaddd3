"""Streams: the operations users chain, recorded into a PipelineGraph by a GraphBuilder."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from gyreflow.plan import operators as specs
from gyreflow.plan.graph import Partitioning, PipelineEdge, PipelineGraph, PipelineVertex
from gyreflow.runtime.dataflow.columns.batch import Column, ColumnAggregate
from gyreflow.runtime.errors import (
    KeyRequiredError,
    ParallelismError,
    PipelineDefinitionError,
    parallelism_error,
)
from gyreflow.state.records import define


@define
class _Draft:
    id: int
    spec: specs.OperatorSpec
    name: str | None
    parallelism: int | None
    inputs: list[tuple[int, Partitioning, Callable | None]]


class DuplicateCollectError(PipelineDefinitionError, ValueError):
    """Two streams of one pipeline task are collected under the same name: their records would be
    merged into one list of ``execute()``'s result. Refused where the second ``collect`` is called,
    before any data moves; the message names both lines.

    Outputs are kept per task: two tasks may each collect under the same name.
    """


class GraphBuilder:
    """Collects operators while a pipeline task's function runs, then builds the PipelineGraph."""

    def __init__(self, default_parallelism: int, config=None, task: str | None = None) -> None:
        self.default_parallelism = default_parallelism
        self.config = config  # the run's Config (None when built outside a pipeline)
        self.task = task  # the pipeline task's name, for errors
        self.drafts: list[_Draft] = []
        self.collected: dict[str, str] = {}  # collect name -> "file:line" of the call that took it

    def claim_collect_name(self, name: str) -> None:
        """Take ``name`` for one ``collect`` of this task, or refuse it if another took it already."""
        here = _user_line()
        if name not in self.collected:
            self.collected[name] = here
            return
        first = self.collected[name]
        task = f"pipeline task {self.task!r}" if self.task else "one pipeline task"
        where = (f"both at {here} (a loop or a helper that collects more than once)"
                 if first == here else f"at {first} and at {here}")
        msg = (f"two streams of {task} are collected under the same name {name!r}, {where}: "
               f"their records would be merged into one list; give one of them another name, "
               f"e.g. .collect(\"another name\")")
        raise DuplicateCollectError(msg)

    def add(self, spec: specs.OperatorSpec, inputs: list[Stream], parallelism: int | None = None,
            name: str | None = None) -> int:
        """Record an operator fed by ``inputs`` and return its id."""
        if parallelism is not None:  # refused at the line that asks for it
            self.check_parallelism(parallelism, name or f"{spec.op}-{len(self.drafts)}")
        draft = _Draft(len(self.drafts), spec, name, parallelism,
                       [(s.node, s.partitioning, s.key_fn) for s in inputs])
        self.drafts.append(draft)
        return draft.id

    def check_parallelism(self, parallelism: object, name: str) -> None:
        """Refuse a parallelism below 1 or above the key groups, as ``control rescale`` does."""
        groups = 128 if self.config is None else self.config["state.max_parallelism"]
        refused = parallelism_error(parallelism, groups)
        if refused is not None:
            msg = f"operator {name!r}: {refused}"
            raise ParallelismError(msg)

    def build(self) -> PipelineGraph:
        """Build the graph of every operator that feeds a sink or collect (walking back from them)."""
        sinks = [d.id for d in self.drafts if d.spec.kind is specs.OperatorKind.SINK]
        if not sinks:
            msg = "the pipeline task defines no sink: end at least one stream with .sink() or .collect()"
            raise ValueError(msg)
        keep: set[int] = set()
        stack = list(sinks)
        while stack:
            node = stack.pop()
            if node not in keep:
                keep.add(node)
                stack.extend(i for i, _, _ in self.drafts[node].inputs)
        vertices = {}
        for d in self.drafts:
            if d.id in keep:
                name = d.name or f"{d.spec.op}-{d.id}"
                parallelism = self.default_parallelism if d.parallelism is None else d.parallelism
                self.check_parallelism(parallelism, name)  # environment.parallelism, say
                vertices[d.id] = PipelineVertex(d.id, name, d.spec, parallelism)
        edges = []
        for d in self.drafts:
            if d.id not in keep:
                continue
            for ordinal, (source, partitioning, key_fn) in enumerate(d.inputs):
                if partitioning is Partitioning.FORWARD and (
                    vertices[source].parallelism != vertices[d.id].parallelism
                ):
                    partitioning = Partitioning.REBALANCE
                edges.append(PipelineEdge(source, d.id, partitioning, ordinal, key_fn))
        return PipelineGraph(tuple(vertices.values()), tuple(edges))


class Stream:
    """A stream of records inside a pipeline task; every operation returns a new stream.

    >>> from gyreflow.api import Environment
    >>> env = Environment.local(progress=False)
    >>> p = env.pipeline("demo")
    >>> @p.task
    ... def double(ctx):
    ...     ctx.source([1, 2, 3]).map(lambda x: 2 * x).collect("out")
    >>> p.execute()["double"].output("out")
    [2, 4, 6]
    """

    partitioning = Partitioning.FORWARD
    key_fn: Callable | None = None

    def __init__(self, builder: GraphBuilder, node: int) -> None:
        self.builder = builder
        self.node = node

    def __getattr__(self, name: str):
        if name in KeyRequiredError.OPERATIONS:
            raise KeyRequiredError.for_operation(name)
        msg = f"{type(self).__name__!r} object has no attribute {name!r}"
        raise AttributeError(msg)

    # Configuration of the operator that produced this stream --------------------------------

    def with_parallelism(self, parallelism: int) -> Stream:
        """Run the operator that produced this stream with ``parallelism`` tasks (from 1 to
        ``state.max_parallelism``, the number of key groups)."""
        draft = self.builder.drafts[self.node]
        self.builder.check_parallelism(parallelism, draft.name or f"{draft.spec.op}-{draft.id}")
        draft.parallelism = parallelism
        return self

    def with_name(self, name: str) -> Stream:
        """Name the operator that produced this stream (shown in explain, metrics and errors)."""
        self.builder.drafts[self.node].name = name
        return self

    # Operations ------------------------------------------------------------------------------

    def _then(self, spec: specs.OperatorSpec, inputs: list[Stream] | None = None,
              parallelism: int | None = None) -> Stream:
        return Stream(self.builder, self.builder.add(spec, inputs or [self], parallelism))

    def map(self, fn: Callable) -> Stream:
        """Emit ``fn(record)`` for each record."""
        return self._then(specs.MapSpec(_callable(fn, "map")))

    def flat_map(self, fn: Callable) -> Stream:
        """Emit every item of the iterable ``fn(record)`` for each record."""
        return self._then(specs.FlatMapSpec(_callable(fn, "flat_map")))

    def filter(self, fn: Callable) -> Stream:
        """Keep the records for which ``fn(record)`` is true."""
        return self._then(specs.FilterSpec(_callable(fn, "filter")))

    def key_by(self, key_fn: Callable | str | None = None) -> KeyedStream:
        """Partition by ``key_fn(record)`` (the record itself when omitted): records with equal keys
        meet in the same task.

        A column name (``key_by("word")``) keys a record by its value in that column: column
        batches (``ArrowSource``, ``DirectorySource(format="parquet", columnar=True)``) are then
        routed, and counted by ``count()``, as arrays; a row (a dict) by ``row["word"]``."""
        if key_fn is None:
            return KeyedStream(self.builder, self.node, specs.identity)
        if isinstance(key_fn, str):
            return KeyedStream(self.builder, self.node, Column(key_fn))
        return KeyedStream(self.builder, self.node, _callable(key_fn, "key_by"))

    def with_timestamps(self, timestamp: Callable | str, max_delay: float = 0.0,
                        idle_timeout: float | None = None):
        """Event time: ``timestamp(record)`` gives each record its time (seconds, or a
        ``datetime``), or a column does (``with_timestamps("ts")``: column batches are then
        stamped, windowed and aggregated as arrays, with ``key_by("column")``); the watermark is
        the largest time seen before a record minus ``max_delay`` (the out-of-orderness allowed),
        +infinity at the end of bounded input. A task that reads
        nothing for ``idle_timeout`` seconds stops holding the watermark back. Then ``key_by`` and
        ``window(Tumbling | Sliding | Session)``."""
        from gyreflow.api.language.windowed import EventTimeStream

        if max_delay < 0:
            msg = f"max_delay must be >= 0 seconds, got {max_delay!r}"
            raise ValueError(msg)
        timestamp = Column(timestamp) if isinstance(timestamp, str) else timestamp
        spec = specs.TimestampSpec(_callable(timestamp, "with_timestamps"), float(max_delay),
                                   idle_timeout)
        return EventTimeStream(self._then(spec))

    def map_with_context(self, fn: Callable) -> Stream:
        """Emit ``fn(record, ctx)``: ``ctx.window`` is the processing window the record is in."""
        return self._then(specs.ContextMapSpec(_callable(fn, "map_with_context")))

    def broadcast(self) -> Stream:
        """Send every record to every task of the next operator."""
        return _Broadcast(self.builder, self.node)

    def union(self, *others: Stream) -> Stream:
        """Merge this stream with ``others`` (records keep no order across inputs)."""
        if not others:
            msg = "union needs at least one other stream"
            raise ValueError(msg)
        for other in others:
            if other.builder is not self.builder:
                msg = "union of streams from different pipeline tasks"
                raise ValueError(msg)
        return self._then(specs.UnionSpec(), [self, *others])

    def sink(self, sink) -> Stream:
        """Write every record to ``sink`` (a ``gyreflow.api.connectors.sinks.Sink``)."""
        return self._then(specs.SinkSpec(sink), parallelism=getattr(sink, "default_parallelism", None))

    def collect(self, name: str = "collect") -> Stream:
        """Return every record from ``execute()`` under ``name``, by window.

        A name stands for one stream within a pipeline task: collecting a second stream of the
        same task under it raises ``DuplicateCollectError`` (two tasks may share a name).
        """
        self.builder.claim_collect_name(name)
        return self._then(specs.CollectSpec(name))


class _Broadcast(Stream):
    partitioning = Partitioning.BROADCAST


class KeyedStream(Stream):
    """A stream partitioned by key; keyed operations keep their state per key across windows."""

    partitioning = Partitioning.KEY

    def __init__(self, builder: GraphBuilder, node: int, key_fn: Callable) -> None:
        super().__init__(builder, node)
        self.key_fn = key_fn

    def reduce(self, fn: Callable, *, associative: bool = False) -> Stream:
        """Fold records of a key with ``fn(accumulated, record)``; emits each key's new value at the
        end of every window in which the key was updated.

        ``associative=True`` declares ``fn(fn(a, b), c) == fn(a, fn(b, c))`` (a sum, a minimum, a
        concatenation; commutativity is not needed). Where records cross between processes (worker
        processes, Spark), each sending task then folds its records per key before they cross
        and sends one partial value per key and window, as Spark's ``reduceByKey`` does. With a
        function that is not associative the results would differ: leave it False then.
        """
        if not isinstance(associative, bool):
            msg = f"reduce(associative=...) takes True or False, not {associative!r}"
            raise TypeError(msg)
        return self._then(specs.ReduceSpec(self.key_fn, _callable(fn, "reduce"), associative))

    def count(self) -> Stream:
        """Count records per key across windows; emits ``(key, count so far)`` for each key seen in a
        window, at the window's end. Faster than the equivalent ``map`` + ``reduce``: the counting
        loop runs in C.

        >>> from gyreflow.api import Environment, SizeTumblingWindow
        >>> p = Environment.local(progress=False).pipeline("count")
        >>> @p.task
        ... def words(ctx):
        ...     ctx.source(["a", "b", "a", "a"], SizeTumblingWindow(2)).key_by().count().collect()
        >>> p.execute().by_window()
        {1: [('a', 1), ('b', 1)], 2: [('a', 3)]}
        """
        return self._then(specs.CountSpec(self.key_fn))

    def sum(self, column: str) -> Stream:
        """The sum of ``column`` per key across windows: emits ``(key, sum so far)`` for each key
        seen in a window. Records are dicts (or column batches, aggregated in Arrow when keyed by
        a column: ``key_by("city").sum("price")``); a None value is skipped.

        >>> from gyreflow.api import Environment
        >>> p = Environment.local(progress=False).pipeline("sum")
        >>> @p.task
        ... def totals(ctx):
        ...     rows = [{"city": "Oslo", "price": 2}, {"city": "Oslo", "price": 3}]
        ...     ctx.source(rows).key_by("city").sum("price").collect("out")
        >>> p.execute()["totals"].output("out")
        [('Oslo', 5)]
        """
        return self.aggregate(ColumnAggregate("sum", column))

    def min(self, column: str) -> Stream:
        """The smallest value of ``column`` per key so far (None values skipped), as ``sum``."""
        return self.aggregate(ColumnAggregate("min", column))

    def max(self, column: str) -> Stream:
        """The largest value of ``column`` per key so far (None values skipped), as ``sum``."""
        return self.aggregate(ColumnAggregate("max", column))

    def mean(self, column: str) -> Stream:
        """The mean of ``column`` per key so far (None values skipped; None when a key has no
        value), as ``sum``."""
        return self.aggregate(ColumnAggregate("mean", column))

    def aggregate(self, function) -> Stream:
        """Aggregate records per key with an ``AggregateFunction``; emits ``(key, result)`` for
        each key updated in a window."""
        for method in ("init", "add", "merge", "result"):
            if not callable(getattr(function, method, None)):
                msg = f"aggregate needs an AggregateFunction with init/add/merge/result; missing {method}"
                raise TypeError(msg)
        return self._then(specs.AggregateSpec(self.key_fn, function))

    def process(self, function) -> Stream:
        """Run a ``ProcessFunction``: each record with its window and key, keyed state, and
        ``on_notify`` callbacks once a requested window's input is complete."""
        for method in ("process", "on_notify"):
            if not callable(getattr(function, method, None)):
                msg = f"process needs a ProcessFunction with process and on_notify; missing {method}"
                raise TypeError(msg)
        return self._then(specs.ProcessSpec(self.key_fn, function))

    def window(self, assigner=None):
        """Per-window aggregation (each window's own result, not a running total): with no
        argument, per processing window; ``Tumbling``/``Sliding``/``Session`` need event time
        (``with_timestamps`` before ``key_by``)."""
        from gyreflow.api.language.windowed import WindowedStream

        if assigner is not None:
            msg = (f"window({type(assigner).__name__}(...)) is an event-time window: give the "
                   "stream timestamps first, e.g. stream.with_timestamps(fn, max_delay=...)"
                   ".key_by(...).window(...)")
            raise TypeError(msg)
        return WindowedStream(self, self.key_fn, None, timestamped=False)

    def join_table(self, table: KeyedStream, fn: Callable | None = None,
                   value: Callable | None = None, inner: bool = True,
                   ttl: int | None = None, merged: bool = False) -> Stream:
        """Enrich this stream with the latest value per key of ``table`` (a changelog stream, kept
        across windows and snapshotted): emits ``fn(record, value)`` (``(record, value)`` when
        ``fn`` is None), where ``value`` is ``value(latest table record)`` (the record itself by
        default). Within a window the table's updates apply before the stream's records are
        joined. ``inner=False`` keeps records without a value (``value`` None); ``ttl`` forgets a
        key not updated for that many windows.

        ``merged=True`` emits each record (a dict) with the table value's fields added (a field
        both have keeps the record's value): keyed by columns on both sides
        (``key_by("user")``), column batches are joined whole, in Arrow."""
        if not isinstance(table, KeyedStream):
            msg = "join_table needs a keyed table stream: call .key_by(...) on it"
            raise TypeError(msg)
        if merged and fn is not None:
            msg = "join_table(merged=True) builds each output record itself: give no fn"
            raise ValueError(msg)
        if ttl is not None and (not isinstance(ttl, int) or ttl < 1):
            msg = f"ttl is a number of windows >= 1, got {ttl!r}"
            raise ValueError(msg)
        spec = specs.TableJoinSpec(self.key_fn, table.key_fn, value or specs.identity,
                                   fn or _pair, inner, ttl, merged)
        return self._then(spec, [self, table])

    def join(self, other: KeyedStream, fn: Callable | None = None, *, how: str = "inner",
             across_windows: bool = False, ttl: int | None = None) -> Stream:
        """Inner join with ``other`` per window: emits ``fn(left, right)`` for every pair of records
        with equal keys in the same window (``(key, left, right)`` when ``fn`` is None).

        ``across_windows=True`` is a regular stream join (Flink SQL's): each key's records of both
        sides are kept in keyed state, and a window emits its new records joined with every
        record so far of the other side (new with new once), at the cost of its own records and
        their matches. ``how`` (``"inner"``, ``"left"``, ``"right"``, ``"full"``): a new record
        without a match so far is emitted at its window's end with ``None`` for the other side,
        and its later matches as they come (nothing is retracted). ``ttl`` drops a record that
        many windows after its own (it meets the records of windows ``w`` to ``w + ttl``), so
        that state stays bounded. See docs/windows.md, *Stream-stream join*."""
        if not isinstance(other, KeyedStream):
            msg = "join needs a keyed stream on both sides: call .key_by(...) on the other stream"
            raise TypeError(msg)
        if how not in ("inner", "left", "right", "full"):
            msg = f"join how={how!r}: one of 'inner', 'left', 'right', 'full'"
            raise ValueError(msg)
        if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, int) or ttl < 1):
            msg = f"ttl is a number of windows >= 1, got {ttl!r}"
            raise ValueError(msg)
        if not across_windows and (how != "inner" or ttl is not None):
            msg = "join(how=..., ttl=...) joins across windows: add across_windows=True"
            raise ValueError(msg)
        if across_windows:
            spec = specs.StreamJoinSpec(self.key_fn, other.key_fn, fn, how, ttl)
        else:
            spec = specs.JoinSpec(self.key_fn, other.key_fn, fn)
        return self._then(spec, [self, other])


def _pair(record, value) -> tuple:
    return (record, value)


def _callable(fn: Callable, operation: str) -> Callable:
    if not callable(fn):
        msg = f"{operation} needs a function, got {type(fn).__name__}"
        raise TypeError(msg)
    return fn


_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_GYREFLOW_DIRS = tuple(os.path.join(_ROOT, part) + os.sep
                       for part in ("api", "plan", "scheduler", "runtime", "state", "gyreflow"))


def _user_line() -> str:
    """``file:line`` of the innermost frame of the user's code calling into gyreflow (the path
    relative to the working folder when inside it), as errors of a script name its lines."""
    frame = sys._getframe(1)  # the cheap way up the stack; every collect() asks
    # gyreflow's own frames (runtime.user_code.internal_frame without its look at the standard
    # library's folders, which imports sysconfig: the first frame outside gyreflow is the user's)
    while frame is not None and frame.f_code.co_filename.startswith(_GYREFLOW_DIRS):
        frame = frame.f_back
    if frame is None:
        return "<unknown line>"
    path = frame.f_code.co_filename
    if os.path.isabs(path) and not os.path.relpath(path).startswith(".."):
        path = os.path.relpath(path)
    return f"{path}:{frame.f_lineno}"
