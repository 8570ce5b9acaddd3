"""Keyed event-time windows: records join their windows that have not fired (by the watermark before
them, ``window_assignment``), windows fire once the watermark passes their end, and their results go
out as ``WindowResult`` in order of start and end."""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter

from gyreflow.runtime.dataflow.columns.batch import Column, ColumnBatch
from gyreflow.runtime.dataflow.operators import _IMMUTABLE, Operator, frozen
from gyreflow.runtime.dataflow.time import event_columns
from gyreflow.runtime.dataflow.time.event_time import (
    EventWindow,
    Watermark,
    Watermarks,
    WindowResult,
)
from gyreflow.runtime.dataflow.time.window_assignment import WindowAssignment
from gyreflow.runtime.dataflow.time.window_grid import end_of_start
from gyreflow.runtime.dataflow.time.windows import accumulated
from gyreflow.runtime.errors import RecordError, locate_failure


class EventWindowOperator(WindowAssignment, Operator):
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
        self.marks = Watermarks(ctx.state.table(self.name + ":watermarks"), ctx)
        self.pending: list = []  # results of windows fired by a record, emitted at the window's end

    def restored_across(self, read_whole) -> None:
        """After a restore: the watermarks from every task's entry (``Watermarks.load``)."""
        self.marks.load(read_whole(self.marks.table.name))

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

    def finish(self, window: int) -> None:
        if not self.marks.loaded:
            self.marks.load()
        wm = self.marks.current
        out = self.pending  # sessions closed below are added to it too
        table = self.table
        data = table.data
        session = self.assigner[0] == "session"
        size = self.assigner[1]
        slide = self.assigner[2] if len(self.assigner) > 2 else size
        ends: dict[float, float] = {}  # start -> end, computed once per window in this finish
        emptied = []
        for key, entry in data.items():
            if session:
                before = len(entry)
                self._close_sessions(key, entry, wm)
                if len(entry) != before:
                    table.changed.add(key)
            else:
                fired = [(start, end) for start in entry
                         if (end := ends.get(start)) is not None and end <= wm
                         or (end := ends.setdefault(start, end_of_start(start, size, slide))) <= wm]
                if fired:
                    pop = entry.pop
                    out.extend([(key, start, end, pop(start)) for start, end in fired])
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
        new = tuple.__new__  # WindowResult's own __new__ is a Python function: one call less each
        try:
            if window_fn is None and result is accumulated:  # a count, sum, min or max
                fired_results = [new(WindowResult, (key, start, end, acc if type(acc) in _IMMUTABLE
                                                    else frozen(acc)))
                                 for key, start, end, acc in remaining]
            elif window_fn is None:
                fired_results = [new(WindowResult, (key, start, end, frozen(result(acc))))
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
