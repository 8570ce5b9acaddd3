"""Event time and per-window operators: timestamps and watermarks, event-time windows (tumbling,
sliding, session) with late records, per-processing-window aggregation, and the stream-table join.

Watermarks are computed per record at the source (the largest timestamp seen before it minus the
allowed delay) and travel two ways: inside every record (what it is judged against), and as a
``Watermark`` batch that each timestamp task broadcasts at the end of each processing window (so that
tasks which received no record learn how far time went; +infinity at the end of the input). Every
piece of state (the largest timestamp, each source's watermark, open windows and their accumulators,
tables) lives in keyed state tables, so it is snapshotted with the window and restored exactly.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from typing import NamedTuple

from gyreflow.runtime.dataflow.operators import Operator, frozen
from gyreflow.runtime.errors import RecordError
from gyreflow.state.keygroups import key_group_of

INF = math.inf


class Watermark(NamedTuple):
    """Source task ``source`` of ``of`` has seen time up to ``value``; ``idle``: it stopped holding
    the watermark back (no record for its idle timeout)."""

    source: int
    of: int
    value: float
    idle: bool = False


class WindowResult(NamedTuple):
    """One key's result for one event-time window ``[start, end)`` (a session ends at its last
    event's time plus the gap)."""

    key: object
    start: float
    end: float
    value: object


class LateRecord(NamedTuple):
    """A record every window of which had fired when it arrived (the side output)."""

    record: object


def is_watermark_batch(batch: list) -> bool:
    """Whether ``batch`` is a watermark announcement (sent to every downstream task)."""
    return len(batch) == 1 and type(batch[0]) is Watermark


def seconds(value) -> float:
    """A timestamp as seconds: numbers as they are, ``datetime`` through ``timestamp()``."""
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    msg = f"a timestamp must be seconds (int or float) or a datetime, got {type(value).__name__}"
    raise TypeError(msg)


def own_key(ctx, tag: str):
    """A state key in the key groups of this task: state of the task rather than of a record key."""
    groups = ctx.state.key_groups
    max_parallelism = ctx.state.max_parallelism
    n = 0
    while True:
        key = (tag, ctx.task_index, n)
        if key_group_of(key, max_parallelism) in groups:
            return key
        n += 1


# --- aggregations -----------------------------------------------------------------------------


class Aggregation:
    """What a window computes: ``init``/``add``/``merge``/``result`` (an ``AggregateFunction``)."""

    def __init__(self, init: Callable, add: Callable, merge: Callable,
                 result: Callable = lambda acc: acc) -> None:
        self.init = init
        self.add = add
        self.merge = merge
        self.result = result

    @classmethod
    def of(cls, function) -> Aggregation:
        """Wrap a user ``AggregateFunction``."""
        return cls(function.init, function.add, function.merge, function.result)


class EventWindow(NamedTuple):
    """The event-time window a window function runs for: ``[start, end)``."""

    start: float
    end: float


def collecting(fn: Callable) -> Aggregation:
    """The window's records, handed to ``fn(key, records, window)`` when the window ends;
    ``window`` is an ``EventWindow`` (event time) or a ``WindowContext`` (processing windows)."""
    aggregation = Aggregation(list, _append, lambda a, b: a + b)
    aggregation.window_fn = fn
    return aggregation


def _append(acc: list, record) -> list:
    acc.append(record)
    return acc


def counting() -> Aggregation:
    return Aggregation(lambda: 0, lambda acc, _r: acc + 1, lambda a, b: a + b)


def summing(value: Callable) -> Aggregation:
    return Aggregation(lambda: 0, lambda acc, r: acc + value(r), lambda a, b: a + b)


def _pick(better: Callable, value: Callable) -> Aggregation:
    def add(acc, r):
        v = value(r)
        return v if acc is None or better(v, acc) else acc

    def merge(a, b):
        if a is None:
            return b
        if b is None:
            return a
        return b if better(b, a) else a

    return Aggregation(lambda: None, add, merge)


def minimum(value: Callable) -> Aggregation:
    return _pick(lambda v, acc: v < acc, value)


def maximum(value: Callable) -> Aggregation:
    return _pick(lambda v, acc: v > acc, value)


_NOTHING = object()


def reducing(fn: Callable) -> Aggregation:
    def add(acc, r):
        return r if acc is _NOTHING else fn(acc, r)

    def merge(a, b):
        if a is _NOTHING:
            return b
        return a if b is _NOTHING else fn(a, b)

    return Aggregation(lambda: _NOTHING, add, merge)


def top(k: int, score: Callable) -> Aggregation:
    """The ``k`` records with the highest ``score`` (ties: the earlier record first)."""

    def add(acc, r):
        acc = [*acc, (score(r), r)]
        acc.sort(key=lambda pair: pair[0], reverse=True)
        return acc[:k]

    def merge(a, b):
        merged = sorted([*a, *b], key=lambda pair: pair[0], reverse=True)
        return merged[:k]

    return Aggregation(list, add, merge, lambda acc: [r for _, r in acc])


# --- timestamps ---------------------------------------------------------------------------------


class TimestampOperator(Operator):
    """Gives each record its event time and the watermark before it: emits ``(ts, watermark,
    source task, source tasks, record)``, and a ``Watermark`` batch at the end of every processing
    window."""

    emits_on_finish = True

    def __init__(self, name: str, ts_fn: Callable, max_delay: float,
                 idle_timeout: float | None) -> None:
        super().__init__(name)
        self.ts_fn = ts_fn
        self.max_delay = float(max_delay)
        self.idle_timeout = idle_timeout
        self.last_record_at = None

    def open(self, ctx) -> None:
        super().open(ctx)
        self.table = ctx.state.table(self.name)
        self.key = own_key(ctx, "max-ts")

    def process(self, batch: list) -> None:
        self.records_in += len(batch)
        ts_fn, delay, index, of = self.ts_fn, self.max_delay, self.ctx.task_index, self.ctx.parallelism
        data = self.table.data
        latest = data.get(self.key, -INF)
        out = []
        record = None
        try:
            for record in batch:
                ts = ts_fn(record)
                if type(ts) is not float:
                    ts = seconds(ts)
                out.append((ts, latest - delay, index, of, record))
                if ts > latest:
                    latest = ts
        except Exception as exc:
            raise RecordError(self.name, record, exc) from exc
        if batch:
            data[self.key] = latest
            self.table.mark_changed((self.key,))
            self.last_record_at = _now()
        self._emit(out)

    def finish(self, window: int) -> None:
        ctx = self.ctx
        latest = self.table.data.get(self.key, -INF)
        idle = False
        if self.idle_timeout is not None and not getattr(ctx, "input_ended", False):
            now = _now()
            if self.last_record_at is None:
                self.last_record_at = now
            idle = now - self.last_record_at >= self.idle_timeout
        value = INF if getattr(ctx, "input_ended", False) else latest - self.max_delay
        self.out([Watermark(ctx.task_index, ctx.parallelism, value, idle)])


def _now() -> float:
    import time

    return time.monotonic()


class _Watermarks:
    """The watermark of each upstream timestamp task and their minimum (idle ones left out), kept
    in a state table under a key of this task (read back lazily: tables are restored after open)."""

    def __init__(self, table, ctx) -> None:
        self.table = table
        self.key = own_key(ctx, "watermarks")
        self.sources: dict[int, tuple[float, bool]] = {}  # source -> (watermark, idle)
        self.of = 0
        self.current = -INF
        self.loaded = False

    def load(self) -> None:
        """Read what was restored; entries of tasks of an earlier layout keep the furthest."""
        self.loaded = True
        for entry in list(self.table.data.values()):
            of, sources = entry
            self.of = max(self.of, of)
            for source, (value, idle) in sources.items():
                before = self.sources.get(source)
                self.sources[source] = (value if before is None else max(value, before[0]), idle)
        self.current = self._minimum()

    def _minimum(self) -> float:
        if self.of == 0:
            return -INF
        values = []
        for source in range(self.of):
            value, idle = self.sources.get(source, (-INF, False))
            if not idle:
                values.append(value)
        return min(values) if values else max(v for v, _ in self.sources.values())

    def see(self, source: int, of: int, value: float, idle: bool = False) -> None:
        before = self.sources.get(source)
        if before is None or value > before[0] or idle != before[1] or of > self.of:
            self.sources[source] = (value if before is None else max(value, before[0]), idle)
            self.of = max(self.of, of)
            self.current = self._minimum()
            self.table.data[self.key] = (self.of, dict(self.sources))
            self.table.mark_changed((self.key,))


# --- event-time windows -------------------------------------------------------------------------


class EventWindowOperator(Operator):
    """Keyed event-time windows: records join their windows that have not fired (by the watermark
    before them), windows fire once the watermark passes their end, late records go out as
    ``LateRecord``. ``assigner`` is ``("tumbling", size)``, ``("sliding", size, slide)`` or
    ``("session", gap)``."""

    emits_on_finish = True

    def __init__(self, name: str, key_fn: Callable, assigner: tuple, aggregation: Aggregation,
                 process: Callable | None = None) -> None:
        super().__init__(name)
        self.key_fn = key_fn
        self.assigner = assigner
        self.aggregation = aggregation
        self.process_fn = process  # (key, WindowResult-like context, records) -> iterable

    def open(self, ctx) -> None:
        super().open(ctx)
        self.table = ctx.state.table(self.name)
        self.marks = _Watermarks(ctx.state.table(self.name + ":watermarks"), ctx)
        self.pending: list = []  # results of windows fired by a record, emitted at the window's end

    def process(self, batch: list) -> None:
        if not self.marks.loaded:
            self.marks.load()
        if type(batch[0]) is Watermark:
            for mark in batch:
                self.marks.see(mark.source, mark.of, mark.value, mark.idle)
            return
        self.records_in += len(batch)
        kind = self.assigner[0]
        if kind == "session":
            self._sessions(batch)
        else:
            self._fixed(batch)

    def _fixed(self, batch: list) -> None:
        marks, key_fn = self.marks, self.key_fn
        init, add = self.aggregation.init, self.aggregation.add
        data, changed = self.table.data, self.table.changed
        size = self.assigner[1]
        slide = self.assigner[2] if len(self.assigner) > 2 else size
        late = []
        item = None
        try:
            for item in batch:
                ts, before, source, of, record = item
                if before > marks.sources.get(source, (-INF, False))[0] or of > marks.of:
                    marks.see(source, of, before)
                wm = marks.current
                key = key_fn(record)
                entry = data.get(key)
                joined = False
                for start in _starts(ts, size, slide):
                    if start + size <= wm:
                        continue  # fired
                    if entry is None:
                        entry = data[key] = {}
                    acc = entry.get(start, _NOTHING)
                    entry[start] = add(init() if acc is _NOTHING else acc, record)
                    joined = True
                if joined:
                    changed.add(key)
                else:
                    late.append(LateRecord(record))
        except Exception as exc:
            raise RecordError(self.name, item[4] if isinstance(item, tuple) else item, exc) from exc
        self._emit(late)

    def _sessions(self, batch: list) -> None:
        marks, key_fn = self.marks, self.key_fn
        agg = self.aggregation
        data, changed = self.table.data, self.table.changed
        gap = self.assigner[1]
        late = []
        item = None
        try:
            for item in batch:
                ts, before, source, of, record = item
                if before > marks.sources.get(source, (-INF, False))[0] or of > marks.of:
                    marks.see(source, of, before)
                wm = marks.current
                key = key_fn(record)
                sessions = data.get(key)
                if sessions:
                    self._close_sessions(key, sessions, wm)
                merged = [s for s in sessions or () if ts <= s[1] + gap and s[0] <= ts + gap]
                if not merged and ts + gap <= wm:
                    late.append(LateRecord(record))
                    continue
                parts = sorted([*((s[0], s[2]) for s in merged),
                                (ts, agg.add(agg.init(), record))], key=lambda part: part[0])
                acc = parts[0][1]
                for _, more in parts[1:]:
                    acc = agg.merge(acc, more)
                start = min(ts, *(s[0] for s in merged)) if merged else ts
                last = max(ts, *(s[1] for s in merged)) if merged else ts
                rest = [s for s in sessions or () if not any(s is m for m in merged)]
                rest.append((start, last, acc))
                rest.sort(key=lambda s: s[0])
                data[key] = rest
                changed.add(key)
        except Exception as exc:
            raise RecordError(self.name, item[4] if isinstance(item, tuple) else item, exc) from exc
        self._emit(late)

    def _close_sessions(self, key, sessions: list, wm: float) -> None:
        gap = self.assigner[1]
        keep = []
        for start, last, acc in sessions:
            if last + gap <= wm:
                self.pending.append((key, start, last + gap, acc))
            else:
                keep.append((start, last, acc))
        if len(keep) != len(sessions):
            sessions[:] = keep
            self.table.changed.add(key)

    def finish(self, window: int) -> None:
        if not self.marks.loaded:
            self.marks.load()
        wm = self.marks.current
        out = self.pending  # sessions closed below are added to it too
        table = self.table
        data = table.data
        session = self.assigner[0] == "session"
        size = self.assigner[1]
        emptied = []
        for key, entry in data.items():
            if session:
                before = len(entry)
                self._close_sessions(key, entry, wm)
                if len(entry) != before:
                    table.changed.add(key)
            else:
                fired = [start for start in entry if start + size <= wm]
                for start in fired:
                    out.append((key, start, start + size, entry.pop(start)))
                if fired:
                    table.changed.add(key)
            if not entry:
                emptied.append(key)
        for key in emptied:
            table.delete(key)
        self.pending = []
        if not out:
            return
        out.sort(key=lambda r: (r[1], r[2]))
        result = self.aggregation.result
        window_fn = getattr(self.aggregation, "window_fn", None)
        fired_results = []
        key = None
        try:
            for key, start, end, acc in out:
                value = (result(acc) if window_fn is None
                         else window_fn(key, acc, EventWindow(start, end)))
                fired_results.append(WindowResult(key, start, end, frozen(value)))
        except Exception as exc:
            raise RecordError(self.name, key, exc) from exc
        self._emit(fired_results)


def _starts(ts: float, size: float, slide: float) -> list[float]:
    """The starts of the windows ``[k * slide, k * slide + size)`` holding ``ts``, oldest first."""
    last = math.floor(ts / slide)
    while last * slide > ts:  # division rounded up across a boundary
        last -= 1
    while (last + 1) * slide <= ts:
        last += 1
    first = last
    while (first - 1) * slide + size > ts:
        first -= 1
    return [k * slide for k in range(first, last + 1)]


# --- per processing window -----------------------------------------------------------------------


class WindowContext(NamedTuple):
    """What a window-aware function sees: the processing window its record is in."""

    window: int
    task_index: int
    parallelism: int


class ContextMapOperator(Operator):
    """Emits ``fn(record, ctx)`` with ``ctx`` a ``WindowContext``."""

    def __init__(self, name: str, fn: Callable) -> None:
        super().__init__(name)
        self.fn = fn

    def process(self, batch: list) -> None:
        self.records_in += len(batch)
        ctx, fn = self.ctx, self.fn
        context = WindowContext(ctx.window, ctx.task_index, ctx.parallelism)
        record = None
        try:
            out = [fn(record, context) for record in batch]
        except Exception as exc:
            raise RecordError(self.name, record, exc) from exc
        self._emit(out)


class WindowCountOperator(Operator):
    """Count per key within each processing window (not across windows): ``(key, count)``."""

    emits_on_finish = True

    def __init__(self, name: str, key_fn: Callable | None) -> None:
        super().__init__(name)
        self.key_fn = key_fn
        self.partial: Counter = Counter()

    def process(self, batch: list) -> None:
        self.records_in += len(batch)
        key_fn = self.key_fn
        try:
            self.partial.update(batch if key_fn is None else map(key_fn, batch))
        except Exception as exc:
            record = next((r for r in batch if _fails(key_fn, r)), None)
            raise RecordError(self.name, record, exc) from exc

    def finish(self, window: int) -> None:
        partial, self.partial = self.partial, Counter()
        self._emit(list(partial.items()))


def _fails(fn, record) -> bool:
    try:
        hash(fn(record))
    except Exception:  # noqa: BLE001 - looking for the failing record
        return True
    return False


class WindowAggregateOperator(Operator):
    """Aggregate per key within each processing window: ``(key, result)`` per key of the window.

    Keeps nothing across windows (an empty state table: a window is finished before it is
    snapshotted, so there is nothing in flight to save)."""

    emits_on_finish = True

    def __init__(self, name: str, key_fn: Callable, aggregation: Aggregation) -> None:
        super().__init__(name)
        self.key_fn = key_fn
        self.aggregation = aggregation
        self.partial: dict = {}

    def process(self, batch: list) -> None:
        self.records_in += len(batch)
        key_fn, partial = self.key_fn, self.partial
        init, add = self.aggregation.init, self.aggregation.add
        record = None
        try:
            for record in batch:
                key = key_fn(record)
                acc = partial.get(key, _NOTHING)
                partial[key] = add(init() if acc is _NOTHING else acc, record)
        except Exception as exc:
            raise RecordError(self.name, record, exc) from exc

    def finish(self, window: int) -> None:
        partial, self.partial = self.partial, {}
        result = self.aggregation.result
        window_fn = getattr(self.aggregation, "window_fn", None)
        ctx = self.ctx
        context = WindowContext(window, ctx.task_index, ctx.parallelism)
        out = []
        key = None
        try:
            for key, acc in partial.items():
                value = result(acc) if window_fn is None else window_fn(key, acc, context)
                out.append((key, frozen(value)))
        except Exception as exc:
            raise RecordError(self.name, key, exc) from exc
        self._emit(out)


# --- stream-table join ---------------------------------------------------------------------------


class TableJoinOperator(Operator):
    """Enrich a keyed stream (input 0) with the latest value per key of a changelog (input 1).

    Within a window every table update is applied before any stream record is joined, so the
    result never depends on how the two inputs interleave: a record of window ``w`` sees the table
    as of the end of ``w``. Emits ``fn(record, value)``; records whose key has no value are dropped
    (``inner``) or get ``None``. With ``ttl`` (a number of windows), a key not updated for that
    many windows is forgotten."""

    emits_on_finish = True

    def __init__(self, name: str, stream_key: Callable, table_key: Callable,
                 value_fn: Callable, fn: Callable, inner: bool, ttl: int | None) -> None:
        super().__init__(name)
        self.keys = (stream_key, table_key)
        self.value_fn = value_fn
        self.fn = fn
        self.inner = inner
        self.ttl = ttl
        self.waiting: list = []

    def open(self, ctx) -> None:
        super().open(ctx)
        self.table = ctx.state.table(self.name)

    def process(self, batch: list) -> None:
        self.process_input(0, batch)

    def process_input(self, ordinal: int, batch: list) -> None:
        self.records_in += len(batch)
        if ordinal == 0:
            self.waiting.extend(batch)
            return
        key_fn, value_fn = self.keys[1], self.value_fn
        data, changed = self.table.data, self.table.changed
        window = self.ctx.window
        record = None
        try:
            for record in batch:
                key = key_fn(record)
                data[key] = (value_fn(record), window)
                changed.add(key)
        except Exception as exc:
            raise RecordError(self.name, record, exc) from exc

    def finish(self, window: int) -> None:
        waiting, self.waiting = self.waiting, []
        key_fn, fn, data = self.keys[0], self.fn, self.table.data
        out = []
        record = None
        try:
            for record in waiting:
                found = data.get(key_fn(record))
                if found is None:
                    if not self.inner:
                        out.append(fn(record, None))
                    continue
                out.append(fn(record, found[0]))
        except Exception as exc:
            raise RecordError(self.name, record, exc) from exc
        if self.ttl is not None:
            expired = [k for k, (_, at) in data.items() if window - at >= self.ttl]
            for key in expired:
                self.table.delete(key)
        self._emit(out)
