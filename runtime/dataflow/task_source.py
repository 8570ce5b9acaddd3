"""A head task's source, read window by window: a batch at a time, a window ended by its size, its
time or the end of the input, one record read ahead so that the last window is known to be last."""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from gyreflow.runtime.dataflow.columns.batch import ColumnBatch
from gyreflow.runtime.faults import crash_point
from gyreflow.scheduler.events import Done, EventKind

if TYPE_CHECKING:
    from gyreflow.runtime.dataflow.task import Task


def read_step(task: Task) -> None:
    """Read one batch of the current window (or start the next launched one)."""
    if task.reading is None:
        window, checkpoint = task.launches.popleft()
        if task.exhausted:
            task.report(Done(task.cycle, task.spec.id, task.exhausted_at,
                             EventKind.LAUNCH_SOURCE, exhausted=True))
            return
        task.ctx.window = window
        if task.controls:
            task._apply_controls()
        task.window_started = task.clock()
        task.reading = WindowRead.start(window, checkpoint, task.window_spec, task.clock)
    read = task.reading
    budget = read.budget(task.read_size)
    live = getattr(task.source_reader, "live", False)
    batch = _poll(task, budget, read) if live else _take(task, budget)
    if read.count == 0:
        crash_point("mid-window", read.window)
    if batch:
        read.count += len(batch)
        task.source_records += len(batch)
        if task.head is not None:
            if type(batch) is ColumnBatch and not task.head_takes_columns:
                batch = batch.rows()
            task.head.process(batch)
        else:
            task.emitter.emit(batch)
    # Readers return a short batch only at the end of their input (live readers say when it
    # ended); a full window peeks one record ahead so that the last window is known to be last
    # (no empty trailing window; a live reader is waited for only in size windows).
    ended = task.source_reader.exhausted and not task.lookahead if live else len(batch) < budget
    full = read.full(task.clock)
    if ended or full:
        task.source_offset = task.source_reader.offset()  # before the look-ahead below
    if full and not ended:
        if live and read.deadline is not None:
            ended = _live_peek(task, read)
        else:  # a live reader's empty look-ahead is a pause, not an end, until it says so
            ahead = 1 if live else min(task.read_size, read.size or task.read_size)
            ended = not _peek(task, ahead) and (not live or task.source_reader.exhausted)
    if ended or full:
        task.reading = None
        task.exhausted = ended
        if ended:
            task.exhausted_at = read.window
        task.ctx.input_ended = ended
        task._finish_window(read.window, read.checkpoint)
        task.report(Done(task.cycle, task.spec.id, read.window, EventKind.LAUNCH_SOURCE,
                         exhausted=ended))
        if ended:
            task._end_of_input()

def _live_peek(task: Task, read) -> bool:
    """A processing-time window of a live reader is over: whether the input ended with it,
    waiting a little (a tenth of the window, at most 0.1 s) for the end or the next record."""
    grace = min(0.1, getattr(task.window_spec, "seconds", 1.0) / 10)
    task.lookahead = task.source_reader.poll(1, grace)
    return not task.lookahead and task.source_reader.exhausted

def _poll(task: Task, count: int, read) -> list:
    """Up to ``count`` records of a live reader, waiting no longer than the window lasts."""
    if task.lookahead:
        batch, task.lookahead = task.lookahead, []
        return batch
    timeout = None if read.deadline is None else max(0.0, read.deadline - task.clock())
    return task.source_reader.poll(count, timeout)

def _take(task: Task, count: int) -> list:
    failed = task.lookahead_error
    if failed is not None:  # the look-ahead met bad input: it is this window's to report
        task.lookahead_error = None
        raise failed
    if task.lookahead:
        batch, task.lookahead = task.lookahead, []
        if len(batch) > count:  # a whole batch read ahead: the rest comes with the next read
            batch, task.lookahead = batch[:count], batch[count:]
        elif count > len(batch):
            batch.extend(task.source_reader.read(count - len(batch)))
        return batch
    return task.source_reader.read(count)

def _peek(task: Task, count: int) -> bool:
    """Read ahead ``count`` records, the next window's first batch (what a reader costs per call,
    a pyarrow parse of JSON lines, then comes once, not for one record and again for the rest);
    the offset was taken before them, so a resume reads them again. Bad input among them is
    the next window's: the error is kept and raised when that window reads (the window before
    completes)."""
    try:
        task.lookahead = task.source_reader.read(count)
    except Exception as exc:  # noqa: BLE001 (raised again, by the window it belongs to)
        task.lookahead, task.lookahead_error = [], exc
        return True
    return bool(task.lookahead)


@attrs.define
class WindowRead:
    """Progress of reading one window from a source."""

    window: int
    checkpoint: bool
    size: int | None
    deadline: float | None
    count: int = 0

    @classmethod
    def start(cls, window: int, checkpoint: bool, spec, clock) -> WindowRead:
        size = getattr(spec, "size", None)
        seconds = getattr(spec, "seconds", None)
        return cls(window, checkpoint, size, None if seconds is None else clock() + seconds)

    def budget(self, batch_size: int) -> int:
        if self.size is None:
            return batch_size
        return min(batch_size, self.size - self.count)

    def full(self, clock) -> bool:
        if self.size is not None and self.count >= self.size:
            return True
        return self.deadline is not None and clock() >= self.deadline
