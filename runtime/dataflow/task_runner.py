"""Dispatcher and TaskRunner: route scheduler events and channel messages to tasks, one queue each."""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable

from gyreflow.runtime.dataflow.task import Task
from gyreflow.runtime.errors import DataError, RecordError, UserFunctionError
from gyreflow.runtime.user_code import raised_inside_gyreflow, user_location, user_traceback
from gyreflow.scheduler.events import EventKind, TaskEvent, TaskFailed
from gyreflow.state.shared.snapshot import SnapshotCorruptedError


class TaskError(RuntimeError):
    """A task failed outside user functions (reading input, writing output, engine faults)."""

    def __init__(self, message: str, window: int = 0) -> None:
        super().__init__(message)
        self.window = window


class UserCodeError(TaskError):
    """The user's own code raised in a task outside a function given a record: a ``Source``'s
    reader, a ``SinkWriter``'s ``finish_window`` or ``publish``. The message names the task, the
    window and the file and line; ``original_traceback`` holds the user's frames only."""

    def __init__(self, message: str, window: int = 0, original_traceback: str = "") -> None:
        super().__init__(message, window)
        self.original_traceback = original_traceback

    def __reduce__(self):
        return (type(self), (str(self), self.window, self.original_traceback))


class TaskRunner:
    """Owns one task and its queue of events and channel messages; ``step`` handles one item."""

    def __init__(self, task: Task, report: Callable[[object], None]) -> None:
        self.task = task
        self.report = report
        self.inbox: deque = deque()
        task.inbox = self.inbox  # its depth is part of a monitoring sample
        self.failed = False

    def deliverer(self, channel: int) -> Callable[[object], None]:
        """Return the function that puts messages of input ``channel`` into this runner's queue."""
        append = self.inbox.append
        return lambda message: append((channel, message))

    def has_work(self) -> bool:
        """Whether ``step`` would do something."""
        return not self.failed and (bool(self.inbox) or self.task.has_source_work())

    def step(self) -> bool:
        """Handle one queued item (or read one source batch); False when idle."""
        if self.failed:
            return False
        task = self.task
        item = None
        try:
            if self.inbox:
                item = self.inbox.popleft()
                if type(item) is tuple:
                    task.fetch.on_message(*item)
                else:
                    task.on_event(item)
            elif task.has_source_work():
                task.read_step()
            else:
                return False
        except RecordError as exc:
            self._fail(UserFunctionError(exc.operator, task.ctx.window if task.ctx else 0,
                                         task.name, exc.record, exc.cause, exc.located))
        except Exception as exc:  # noqa: BLE001 - every failure becomes a TaskFailed event
            self._fail(_task_error(task, item, exc))
        return True

    def drain_step(self, before: int | None) -> bool:
        """Like ``step`` after the job failed: queued items are still handled (windows that were
        finishing may complete), but a source reads only windows before ``before`` (none if None)."""
        if self.failed:
            return False
        if not self.inbox:
            window = self.next_source_window()
            if window is None or before is None or window >= before:
                return False
        return self.step()

    def next_source_window(self) -> int | None:
        """The window the task's source reads next, if it has one launched."""
        task = self.task
        if task.reading is not None:
            return task.reading.window
        return task.launches[0][0] if task.launches else None

    def _fail(self, error: BaseException) -> None:
        self.failed = True
        task = self.task
        window = getattr(error, "window", None) or (task.ctx.window if task.ctx else 0)
        self.report(TaskFailed(task.cycle, task.spec.id, window, error))


def _task_error(task: Task, item, exc: Exception) -> Exception:
    """The error a task failure stops the job with. Restoring names the window being restored; a
    damaged snapshot keeps its type (and its location in the message) so that callers can say how to
    resume from an earlier version."""
    restoring = getattr(item, "kind", None) is EventKind.ROLLBACK
    if restoring:
        window = item.window
        where = f"task {task.name!r} could not restore window {window}"
    else:
        window = task.ctx.window if task.ctx else 0
        if isinstance(exc, DataError) and exc.window:  # output of a window the error names
            window = exc.window
        where = f"task {task.name!r} failed in window {window}"
    if isinstance(exc, SnapshotCorruptedError):
        error: Exception = SnapshotCorruptedError(f"{where}: {exc}")
    elif isinstance(exc, DataError):  # its class too: an input or an output to fix
        error = type(exc)(f"{where}: {exc}", window)
    else:
        error = failed_task(where, exc, window)
    error.__cause__ = exc
    return error


def failed_task(where: str, exc: BaseException, window: int = 0) -> TaskError:
    """The error for a task that failed ``where`` (``task 'x' failed in window 3``) outside a user
    function given a record: the user's own code (``UserCodeError``, naming its file and line) when
    the exception was raised there, else a fault of gyreflow or its host (``TaskError``)."""
    location = user_location(exc)
    if location is not None and raised_inside_gyreflow(exc) is None:
        path, line = location
        return UserCodeError(f"{where} in {os.path.basename(path)}:{line}: "
                             f"{type(exc).__name__}: {exc}", window, user_traceback(exc))
    return TaskError(f"{where}: {type(exc).__name__}: {exc}", window)


class Dispatcher:
    """Routes scheduler events to the TaskRunner of the task each event names."""

    def __init__(self, runners: dict[int, TaskRunner]) -> None:
        self.runners = runners

    def dispatch(self, event: TaskEvent) -> None:
        """Queue ``event`` at its task's runner."""
        self.runners[event.task].inbox.append(event)
