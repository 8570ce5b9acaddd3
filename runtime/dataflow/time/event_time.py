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

    def restored_across(self, read_whole) -> None:
        """After a restore, with ``read_whole(table)`` (a table over every key group): on the same
        layout of timestamp tasks each keeps its own largest time; on another, every new task
        starts from the smallest of the old tasks' (one that saw nothing counts as -inf), so
        that the watermark the job had reached is where it goes on from: nothing that was on
        time becomes late, and no window fires before the slowest old task would have let it."""
        latest = {key[1]: value for key, value in read_whole(self.name).items()
                  if type(key) is tuple and key[:1] == ("max-ts",)}
        if not latest:
            return
        ctx = self.ctx
        same_layout = set(latest) == set(range(ctx.parallelism))
        data = self.table.data
        for key in [k for k in data if k != self.key]:
            self.table.delete(key)  # an old layout's entry: its time is merged below
        data[self.key] = latest[ctx.task_index] if same_layout else min(latest.values())
        self.table.mark_changed((self.key,))

    def finish(self, window: int) -> None:
        ctx = self.ctx
        latest = self.table.data.get(self.key)
        if latest is None:  # stored even so: a task that saw nothing holds the watermark back
            latest = self.table.data[self.key] = -INF
            self.table.mark_changed((self.key,))
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
    in a state table under a key of this task.

    On a resume with another number of timestamp tasks (a new ``of``), the old tasks' watermarks
    are forgotten and the one they had reached stays as ``base``: the watermark never moves back
    (a fired window would open again) and rises again once every new task has passed it.
    """

    def __init__(self, table, ctx) -> None:
        self.table = table
        self.key = own_key(ctx, "watermarks")
        self.sources: dict[int, tuple[float, bool]] = {}  # source -> (watermark, idle)
        self.of = 0
        self.base = -INF  # what an earlier layout of timestamp tasks reached
        self.current = -INF
        self.loaded = False

    def load(self, entries: dict | None = None) -> None:
        """Go on from ``entries`` (every task's entry, read over all key groups on a restore; this
        task's table when None). Entries of one snapshot agree (every task saw the same
        end-of-window watermarks); the furthest is taken, so that one left by an earlier layout of
        this operator, which lags, never counts. Entries this task holds under other keys go."""
        self.loaded = True
        entries = dict(self.table.data) if entries is None else entries
        best = None
        for entry in entries.values():
            self.of, self.sources = entry[0], dict(entry[1])
            self.base = entry[2] if len(entry) > 2 else -INF
            reached = self._minimum()
            if best is None or reached > best[0]:
                best = (reached, entry)
        if best is not None:
            self.of, self.sources = best[1][0], dict(best[1][1])
            self.base = best[1][2] if len(best[1]) > 2 else -INF
        self.current = self._minimum()
        for key in [k for k in self.table.data if k != self.key]:
            self.table.delete(key)
        if best is not None:
            self._store()

    def _minimum(self) -> float:
        if self.of == 0:
            return self.base
        values = []
        for source in range(self.of):
            value, idle = self.sources.get(source, (-INF, False))
            if not idle:
                values.append(value)
        lowest = min(values) if values else max(v for v, _ in self.sources.values())
        return max(lowest, self.base)

    def see(self, source: int, of: int, value: float, idle: bool = False) -> None:
        if of != self.of:
            if self.of:  # timestamp tasks of another layout (a resume with another parallelism)
                self.base = max(self.base, self.current)
            self.sources, self.of = {}, of
        before = self.sources.get(source)
        if before is None or value > before[0] or idle != before[1]:
            self.sources[source] = (value if before is None else max(value, before[0]), idle)
            self.current = self._minimum()
            self._store()

    def _store(self) -> None:
        self.table.data[self.key] = (self.of, dict(self.sources), self.base)
        self.table.mark_changed((self.key,))
