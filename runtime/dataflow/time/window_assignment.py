"""How the records of a batch join their event-time windows: tumbling and sliding windows per record
or per stamped column batch (in Arrow), session windows merged and closed, each record judged against
the watermark before it; a record that joins no window goes out as a ``LateRecord``."""

from __future__ import annotations

from collections.abc import Callable

from gyreflow.runtime.dataflow.columns.batch import ColumnBatch
from gyreflow.runtime.dataflow.time import event_columns
from gyreflow.runtime.dataflow.time.event_time import INF, LateRecord
from gyreflow.runtime.dataflow.time.window_grid import end_of, start_of, windows_of
from gyreflow.runtime.errors import RecordError

_NOTHING = object()


class WindowAssignment:
    """The window assignment of ``EventWindowOperator`` (a part of it: the tables and watermarks it
    reads and writes are the operator's)."""

    def _assign(self, batch: list, place: Callable) -> None:
        """Judge each record against the watermark before it: ``place(ts, watermark, key, record)``
        adds it to its open windows and says whether there was one; if not, it is late."""
        marks, key_fn = self.marks, self.key_fn
        late = []
        item = None
        try:
            for item in batch:
                ts, before, source, of, record = item
                if before > marks.sources.get(source, (-INF, False))[0] or of != marks.of:
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
            for k in windows_of(ts, size, slide):
                if end_of(k, size, slide) <= wm:
                    continue  # fired
                start = start_of(k, slide)
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
        if not event_columns.finite(ts) or not event_columns.near_epoch(ts, self.assigner):
            return False
        self.records_in += len(batch)
        befores = data.column(data.schema.get_field_index(event_columns.WATERMARK)).to_numpy()
        marks.see(own, of, float(befores[0]))  # what the first row tells (as the row path)
        others = [marks.sources.get(s, (-INF, False)) for s in range(marks.of) if s != own]
        floor = min((value for value, idle in others if not idle), default=INF)
        seen = np.fmax.accumulate(np.fmax(befores, marks.sources[own][0]))
        # Never below what an earlier layout of timestamp tasks reached (``Watermarks.base``).
        current = np.maximum(np.minimum(seen, floor), marks.base)
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


def starts_of(ts: float, size: float, slide: float) -> list[float]:
    """The starts of the windows ``[k * slide, k * slide + size)`` holding ``ts``, oldest first
    (each bound rounded once: ``window_grid``)."""
    return [start_of(k, slide) for k in windows_of(ts, size, slide)]
