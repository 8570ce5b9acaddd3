"""Dispatcher and TaskRunner: route scheduler events and channel messages to tasks, one queue each."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from gyreflow.runtime.errors import RecordError, UserFunctionError
from gyreflow.runtime.task import Task
from gyreflow.scheduler.events import TaskEvent, TaskFailed


class TaskError(RuntimeError):
    """A task failed outside user functions (reading input, writing output, engine faults)."""


class TaskRunner:
    """Owns one task and its queue of events and channel messages; ``step`` handles one item."""

    def __init__(self, task: Task, report: Callable[[object], None]) -> None:
        self.task = task
        self.report = report
        self.inbox: deque = deque()
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
            window = task.ctx.window if task.ctx else 0
            error = TaskError(f"task {task.name!r} failed in window {window}: "
                              f"{type(exc).__name__}: {exc}")
            error.__cause__ = exc
            self._fail(error)
        return True

    def _fail(self, error: BaseException) -> None:
        self.failed = True
        task = self.task
        window = task.ctx.window if task.ctx else 0
        self.report(TaskFailed(task.cycle, task.spec.id, window, error))


class Dispatcher:
    """Routes scheduler events to the TaskRunner of the task each event names."""

    def __init__(self, runners: dict[int, TaskRunner]) -> None:
        self.runners = runners

    def dispatch(self, event: TaskEvent) -> None:
        """Queue ``event`` at its task's runner."""
        self.runners[event.task].inbox.append(event)
