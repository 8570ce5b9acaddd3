"""Event time: timestamps and per-record watermarks, and the values of keyed event-time windows
(tumbling, sliding, session: ``event_windows`` runs them), which fire once the watermark passes their
end, with late records on the side.

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
from typing import NamedTuple

from gyreflow.runtime.dataflow.columns.batch import Column, ColumnBatch
from gyreflow.runtime.dataflow.operators import Operator
from gyreflow.runtime.dataflow.time import event_columns
from gyreflow.runtime.errors import RecordError
from gyreflow.state.keys.keygroups import key_group_of

INF = math.inf


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


class Watermarks:
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
