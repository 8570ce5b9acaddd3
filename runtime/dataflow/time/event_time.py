"""Event time: timestamps and per-record watermarks, and keyed event-time windows (tumbling,
sliding, session) that fire once the watermark passes their end, with late records on the side.

Watermarks are computed per record at the source (the largest timestamp seen before it minus the
allowed delay) and travel two ways: inside every record (what it is judged against), and as a
``Watermark`` batch that each timestamp task broadcasts at the end of each processing window (so that
tasks which received no record learn how far time went; +infinity at the end of the input). Every
piece of state (the largest timestamp, each source's watermark, open windows and their accumulators)
lives in keyed state tables, so it is snapshotted with the window and restored exactly.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime
from operator import itemgetter
from typing import NamedTuple

from gyreflow.runtime.dataflow.columns.batch import Column, ColumnBatch
from gyreflow.runtime.dataflow.operators import Operator, frozen
from gyreflow.runtime.dataflow.time import event_columns
from gyreflow.runtime.errors import RecordError, locate_failure
from gyreflow.state.keys.keygroups import key_group_of

INF = math.inf
_NOTHING = object()


class Watermark(NamedTuple):
    """Source task ``source`` of ``of`` has seen time up to ``value``; ``idle``: it stopped holding
    the watermark back (no record for its idle timeout)."""

    source: int
    of: int
    value: float
    idle: bool = False


class EventWindow(NamedTuple):
    """The event-time window a window function runs for: ``[start, end)``."""

    start: float
    end: float


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
        self.watermark: float | None = None
        # Times in a column: a column batch is stamped whole and stays columnar.
        self.emits_columns = isinstance(ts_fn, Column)

    takes_columns = True

    def open(self, ctx) -> None:
        super().open(ctx)
        self.table = ctx.state.table(self.name)
        self.key = own_key(ctx, "max-ts")

    def process(self, batch: list) -> None:
        self.records_in += len(batch)
        if type(batch) is ColumnBatch:
            if self.emits_columns and self._stamp_columns(batch):
                return
            batch = batch.rows()
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

    def _stamp_columns(self, batch: ColumnBatch) -> bool:
        """Stamp a column batch whose times are numbers (or zoned timestamps) as arrays; False
        when the row path must read them."""
        try:
            ts = event_columns.timestamp_seconds(batch, self.ts_fn.name)
        except KeyError as exc:
            raise RecordError(self.name, batch[0], exc) from exc
        if ts is None:
            return False
        if batch.column(self.ts_fn.name).null_count:  # the row path's error, naming the record
            nulls = batch.column(self.ts_fn.name).is_null().to_pylist()
            raise RecordError(self.name, batch[nulls.index(True)], TypeError(
                "a timestamp must be seconds (int or float) or a datetime, got NoneType"))
        data = self.table.data
        before, latest = event_columns.watermarks_before(ts, data.get(self.key, -INF))
        before -= self.max_delay
        if len(batch):
            data[self.key] = latest
            self.table.mark_changed((self.key,))
            self.last_record_at = _now()
        self._emit(event_columns.stamp(batch, ts, before, self.ctx.task_index,
                                       self.ctx.parallelism))
        return True

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
        self.watermark = value  # read into the window's metrics
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

    def __init__(self, name: str, key_fn: Callable, assigner: tuple, aggregation) -> None:
        super().__init__(name)
        self.key_fn = key_fn
        self.assigner = assigner
        self.aggregation = aggregation  # a windows.Aggregation
        # Tumbling and sliding counts, sums, minima and maxima keyed by a column: a stamped column
        # batch is assigned and aggregated whole, in Arrow (others get it as rows).
        self.form = event_columns.column_form(aggregation)
        self.takes_columns = (self.form is not None and assigner[0] != "session"
                              and isinstance(key_fn, Column))

    def open(self, ctx) -> None:
        super().open(ctx)
        self.table = ctx.state.table(self.name)
        self.marks = _Watermarks(ctx.state.table(self.name + ":watermarks"), ctx)
        self.pending: list = []  # results of windows fired by a record, emitted at the window's end

    def process(self, batch: list) -> None:
        if not self.marks.loaded:
            self.marks.load()
        if type(batch) is ColumnBatch:
            if self._fixed_columns(batch):
                return
            batch = batch.rows()
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

    def _assign(self, batch: list, place: Callable) -> None:
        """Judge each record against the watermark before it: ``place(ts, watermark, key, record)``
        adds it to its open windows and says whether there was one; if not, it is late."""
        marks, key_fn = self.marks, self.key_fn
        late = []
        item = None
        try:
            for item in batch:
                ts, before, source, of, record = item
                if before > marks.sources.get(source, (-INF, False))[0] or of > marks.of:
                    marks.see(source, of, before)
                if not place(ts, marks.current, key_fn(record), record):
                    late.append(LateRecord(record))
        except Exception as exc:
            raise RecordError(self.name, item[4] if isinstance(item, tuple) else item, exc) from exc
        self._emit(late)

    def _fixed(self, batch: list) -> None:
        init, add = self.aggregation.init, self.aggregation.add
        data, changed = self.table.data, self.table.changed
        size = self.assigner[1]
        slide = self.assigner[2] if len(self.assigner) > 2 else size

        def place(ts: float, wm: float, key, record) -> bool:
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
            return joined

        self._assign(batch, place)

    def _fixed_columns(self, batch: ColumnBatch) -> bool:
        """Assign and aggregate a stamped column batch of one source task whose times are finite;
        False when the row path must take it. The watermark before each row is the row path's:
        the minimum over the source tasks, this batch's own advancing row by row."""
        import numpy as np

        if not len(batch):
            return True
        source = event_columns.single_source(batch)
        if source is None:
            return False
        marks = self.marks
        own, of = source
        if marks.sources.get(own, (-INF, False))[1]:
            return False  # an idle source that speaks again: the row path's rules, row by row
        data = batch.data
        ts = data.column(data.schema.get_field_index(event_columns.TS)).to_numpy()
        if not event_columns.finite(ts):
            return False
        self.records_in += len(batch)
        befores = data.column(data.schema.get_field_index(event_columns.WATERMARK)).to_numpy()
        marks.see(own, of, float(befores[0]))  # what the first row tells (as the row path)
        others = [marks.sources.get(s, (-INF, False)) for s in range(marks.of) if s != own]
        floor = min((value for value, idle in others if not idle), default=INF)
        seen = np.fmax.accumulate(np.fmax(befores, marks.sources[own][0]))
        current = np.minimum(seen, floor)
        marks.see(own, of, float(seen[-1]))
        size = self.assigner[1]
        slide = self.assigner[2] if len(self.assigner) > 2 else size
        rows, starts, late = event_columns.window_starts(ts, current, size, slide)
        try:
            if len(rows):
                groups = event_columns.aggregate_windows(batch, self.key_fn, rows, starts,
                                                         self.form)
                event_columns.merge_windows(self.table.data, self.table.changed, groups,
                                            self.aggregation.merge)
        except Exception as exc:
            raise RecordError(self.name, batch[0], exc) from exc
        if len(late):
            late_rows = batch.take(late).rows()
            self._emit([LateRecord(item[4]) for item in late_rows])
        return True

    def _sessions(self, batch: list) -> None:
        agg = self.aggregation
        data, changed = self.table.data, self.table.changed
        gap = self.assigner[1]

        def place(ts: float, wm: float, key, record) -> bool:
            sessions = data.get(key)
            if sessions:
                self._close_sessions(key, sessions, wm)
            merged = [s for s in sessions or () if ts <= s[1] + gap and s[0] <= ts + gap]
            if not merged and ts + gap <= wm:
                return False
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
            return True

        self._assign(batch, place)

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
                if fired:
                    pop = entry.pop
                    out.extend([(key, start, start + size, pop(start)) for start in fired])
                    table.changed.add(key)
            if not entry:
                emptied.append(key)
        for key in emptied:
            table.delete(key)
        self.pending = []
        if not out:
            return
        out.sort(key=itemgetter(1, 2))
        result = self.aggregation.result
        window_fn = getattr(self.aggregation, "window_fn", None)
        fired_results = []
        key = None
        remaining = iter(out)  # names the failing key without calling result again
        try:
            if window_fn is None:
                fired_results = [WindowResult(key, start, end, frozen(result(acc)))
                                 for key, start, end, acc in remaining]
            else:
                for key, start, end, acc in out:
                    value = window_fn(key, acc, EventWindow(start, end))
                    fired_results.append(WindowResult(key, start, end, frozen(value)))
        except Exception as exc:
            if window_fn is None:  # the comprehension does not say which key
                key = locate_failure(self.name, out, remaining, exc).record
                key = key[0] if key is not None else None
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
