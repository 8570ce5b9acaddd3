"""Windowed streams: event time (timestamps and watermarks), event-time and per-processing-window
aggregation, late records, and the stream-table join.

>>> from gyreflow.api import Environment, Tumbling
>>> p = Environment.local(progress=False).pipeline("clicks")
>>> @p.task
... def clicks(ctx):
...     events = ctx.source([("a", 1.0), ("b", 2.5), ("a", 4.0), ("a", 12.0), ("a", 2.0)])
...     counted = (events.with_timestamps(lambda e: e[1], max_delay=1.0)
...                .key_by(lambda e: e[0]).window(Tumbling(5)).count())
...     counted.collect("counts")
...     counted.late().collect("late")
>>> result = p.execute()["clicks"]
>>> for line in sorted(result.output("counts")): print(line)
WindowResult(key='a', start=0.0, end=5.0, value=2)
WindowResult(key='a', start=10.0, end=15.0, value=1)
WindowResult(key='b', start=0.0, end=5.0, value=1)
>>> result.output("late")  # at 2.0, after the watermark passed 5.0 (12.0 - 1.0)
[('a', 2.0)]
"""

from __future__ import annotations

from collections.abc import Callable

from gyreflow.plan import operators as specs
from gyreflow.runtime.dataflow.columns.batch import Column
from gyreflow.runtime.dataflow.time import windows
from gyreflow.runtime.dataflow.time.event_columns import EventColumn
from gyreflow.runtime.dataflow.time.event_time import LateRecord, WindowResult
from gyreflow.runtime.errors import KeyRequiredError


def _is_result(item) -> bool:
    return type(item) is WindowResult


def _is_late(item) -> bool:
    return type(item) is LateRecord


def _late_record(item):
    return item.record


def _identity(record):
    return record


class EventTimeStream:
    """A stream whose records have event timestamps; key it, then window it.

    Only ``key_by`` follows: records travel with their timestamp and the watermark before them.
    """

    def __init__(self, stream) -> None:
        self._stream = stream

    def __getattr__(self, name: str):
        if name in KeyRequiredError.OPERATIONS:
            raise KeyRequiredError.for_operation(name, " (event-time windows are keyed too)")
        msg = (f"an event-time stream has no {name}(): key it, then window it, e.g. "
               "stream.with_timestamps(...).key_by(fn).window(Tumbling(60)).count()")
        raise AttributeError(msg)

    def key_by(self, key_fn: Callable | str | None = None) -> EventKeyedStream:
        """Partition by ``key_fn(record)`` (the record itself when omitted), or by a column
        (``key_by("user")``): column batches are then windowed and aggregated as arrays."""
        if isinstance(key_fn, str):
            return EventKeyedStream(self._stream, Column(key_fn))
        if key_fn is not None and not callable(key_fn):
            msg = f"key_by needs a function, got {type(key_fn).__name__}"
            raise TypeError(msg)
        return EventKeyedStream(self._stream, specs.identity if key_fn is None else key_fn)

    def with_parallelism(self, parallelism: int) -> EventTimeStream:
        """Run the timestamp operator with ``parallelism`` tasks."""
        self._stream.with_parallelism(parallelism)
        return self

    def with_name(self, name: str) -> EventTimeStream:
        """Name the timestamp operator."""
        self._stream.with_name(name)
        return self


class EventKeyedStream:
    """A keyed stream with event timestamps: ``window(Tumbling | Sliding | Session)``."""

    def __init__(self, stream, key_fn: Callable) -> None:
        self._stream = stream
        self.key_fn = key_fn

    def window(self, assigner) -> WindowedStream:
        """Group each key's records into event-time windows."""
        spec = getattr(assigner, "spec", None)
        if spec is None or not callable(spec):
            msg = f"window needs Tumbling, Sliding or Session, got {type(assigner).__name__}"
            raise TypeError(msg)
        return WindowedStream(self._stream, self.key_fn, assigner.spec(), timestamped=True)


class WindowedStream:
    """Per-window aggregation; each window gets its own result, not a running total.

    Event-time windows emit ``WindowResult(key, start, end, value)`` once per key and window, when
    the watermark passes the window's end (``late()`` gives the records that came too late).
    Processing windows (``KeyedStream.window()``) emit ``(key, value)`` at each window's end.
    """

    def __init__(self, stream, key_fn: Callable, assigner: tuple | None, timestamped: bool) -> None:
        self._stream = stream
        self.key_fn = key_fn
        self.assigner = assigner
        self.timestamped = timestamped

    def _keyed_key(self) -> Callable:
        key_fn = self.key_fn
        if not self.timestamped:
            return key_fn
        if isinstance(key_fn, Column):  # routes stamped column batches by the column
            return EventColumn(key_fn.name)
        return lambda item: key_fn(item[4])  # (ts, watermark, source, sources, record)

    def _build(self, aggregation, count: bool = False):
        keyed = self._stream.key_by(self._keyed_key())
        if self.assigner is None:
            spec = specs.WindowAggregateSpec(self.key_fn, None if count else aggregation)
            return keyed._then(spec)
        node = keyed._then(specs.EventWindowSpec(self.key_fn, self.assigner, aggregation))
        return EventWindowResults(node.filter(_is_result), node)

    def count(self):
        """The number of records per key and window."""
        return self._build(windows.counting(), count=True)

    def sum(self, value: Callable | str = _identity):
        """The sum of ``value(record)`` per key and window; of a column when ``value`` is its name
        (None values skipped; column batches aggregated in Arrow)."""
        if isinstance(value, str):
            return self._build(windows.of_column("sum", value))
        return self._build(windows.summing(value))

    def min(self, value: Callable | str = _identity):
        """The smallest ``value(record)`` per key and window; of a column when ``value`` is its name
        (None values skipped; column batches aggregated in Arrow)."""
        if isinstance(value, str):
            return self._build(windows.of_column("min", value))
        return self._build(windows.minimum(value))

    def max(self, value: Callable | str = _identity):
        """The largest ``value(record)`` per key and window; of a column when ``value`` is its name
        (None values skipped; column batches aggregated in Arrow)."""
        if isinstance(value, str):
            return self._build(windows.of_column("max", value))
        return self._build(windows.maximum(value))

    def reduce(self, fn: Callable):
        """Fold each key's records of a window with ``fn(accumulated, record)``."""
        return self._build(windows.reducing(fn))

    def aggregate(self, function):
        """Aggregate each key's records of a window with an ``AggregateFunction``."""
        for method in ("init", "add", "merge", "result"):
            if not callable(getattr(function, method, None)):
                msg = f"aggregate needs an AggregateFunction with init/add/merge/result; missing {method}"
                raise TypeError(msg)
        return self._build(windows.Aggregation.of(function))

    def apply(self, fn: Callable):
        """Call ``fn(key, records, window)`` once per key and window with the window's records
        (in arrival order); its return value is the window's value. ``window`` has ``start`` and
        ``end`` for event-time windows, ``window`` (the id) for processing windows."""
        if not callable(fn):
            msg = f"apply needs a function, got {type(fn).__name__}"
            raise TypeError(msg)
        return self._build(windows.collecting(fn))

    def top(self, k: int, by: Callable = _identity):
        """The ``k`` records of each key and window with the highest ``by(record)``, best first."""
        if not isinstance(k, int) or k < 1:
            msg = f"top needs a positive k, got {k!r}"
            raise ValueError(msg)
        return self._build(windows.top(k, by))


class EventWindowResults:
    """The results of event-time windows: a stream of ``WindowResult``, plus ``late()``."""

    def __init__(self, results, node) -> None:
        self._results = results
        self._node = node

    def late(self):
        """The records that arrived after every window they belong to had fired, unchanged."""
        return self._node.filter(_is_late).map(_late_record)

    def __getattr__(self, name: str):
        # Everything else is the stream of results (map, filter, sink, collect, key_by, ...).
        return getattr(self._results, name)
