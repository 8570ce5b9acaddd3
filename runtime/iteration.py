"""Iteration tasks: graph operators that run supersteps inside a window, driven by the scheduler."""

from __future__ import annotations

from gyreflow.runtime.task import Task


def task_class_for(vertex) -> type[Task]:
    """The task class that runs ``vertex``: iteration vertices get an ``IterationTask``."""
    return Task


def wire_iterations(tasks: list[Task]) -> None:
    """Connect the tasks of every iteration vertex through an in-process loop exchange."""
