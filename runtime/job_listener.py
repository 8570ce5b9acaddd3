"""What a job tells its listeners: the ``JobListener`` protocol (start, each window's metrics,
each completed checkpoint, restarts, the end), a fan-out to several, and the completed checkpoint's
metrics."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING

from gyreflow.state.records import frozen

if TYPE_CHECKING:
    from gyreflow.plan.execution import ExecutionGraph
    from gyreflow.runtime.metrics import Restart, TaskResult, WindowMetrics


@frozen
class CheckpointMetrics:
    """A completed checkpoint: the window it made durable, the seconds from that window's end to
    its commit being durable, and the bytes of state and offsets its tasks wrote."""

    window: int
    seconds: float
    bytes: int


class JobListener:
    """Receives progress while a job runs; the default does nothing."""

    def on_start(self, name: str, graph: ExecutionGraph) -> None:
        """The job is about to start."""

    def on_resumed(self, window: int) -> None:
        """The run resumes after ``window``, the last completed window of an earlier run (told
        after ``on_start``, before the first window, only when the run resumes)."""

    def on_window(self, metrics: WindowMetrics) -> None:
        """A window finished."""

    def on_checkpoint(self, checkpoint: CheckpointMetrics) -> None:
        """A window's commit is durable: the job resumes after it."""

    def on_iteration_restored(self, window: int, superstep: int) -> None:
        """A resumed window goes on after ``superstep`` from its iteration snapshot."""

    def on_restart(self, name: str, graph: ExecutionGraph, window: int,
                   restart: Restart | None = None) -> None:
        """The run goes on after ``window`` with its tasks built again as ``graph``: ``restart``
        says why (a rescale, a rebalance, or a failover and its cause). ``on_start`` was called
        once, when the run started; a listener whose ``on_restart`` takes three arguments is
        called with three."""

    def on_finish(self, result: TaskResult) -> None:
        """The job finished."""


class Listeners(JobListener):
    """Several listeners told of the same progress, in order."""

    def __init__(self, listeners) -> None:
        self.listeners = tuple(listeners)

    def on_start(self, name: str, graph: ExecutionGraph) -> None:
        for listener in self.listeners:
            listener.on_start(name, graph)

    def on_resumed(self, window: int) -> None:
        for listener in self.listeners:
            tell_resumed(listener, window)

    def on_window(self, metrics: WindowMetrics) -> None:
        for listener in self.listeners:
            listener.on_window(metrics)

    def on_checkpoint(self, checkpoint: CheckpointMetrics) -> None:
        for listener in self.listeners:
            listener.on_checkpoint(checkpoint)

    def on_iteration_restored(self, window: int, superstep: int) -> None:
        for listener in self.listeners:
            listener.on_iteration_restored(window, superstep)

    def on_restart(self, name: str, graph: ExecutionGraph, window: int,
                   restart: Restart | None = None) -> None:
        for listener in self.listeners:
            tell_restart(listener, name, graph, window, restart)

    def on_finish(self, result: TaskResult) -> None:
        for listener in self.listeners:
            listener.on_finish(result)


def tell_restart(listener: JobListener, name: str, graph: ExecutionGraph, window: int,
                 restart: Restart | None) -> None:
    """Call ``listener.on_restart`` with ``restart`` when it takes it (listeners written for the
    three-argument form keep working)."""
    method = listener.on_restart
    try:
        inspect.signature(method).bind(name, graph, window, restart)
    except (TypeError, ValueError):
        method(name, graph, window)
    else:
        method(name, graph, window, restart)


def tell_resumed(listener: JobListener, window: int) -> None:
    """Call ``listener.on_resumed`` when it has one (a listener need not derive from JobListener)."""
    method = getattr(listener, "on_resumed", None)
    if method is not None:
        method(window)
