"""Events between the scheduler and tasks, and the instructions the scheduler hands the runtime.

Every event names its cycle, window and task.
"""

from __future__ import annotations

import enum

from gyreflow.state.records import frozen


class EventKind(enum.Enum):
    """The command events of GeaFlow's cycle scheduler, plus Done."""

    CREATE_TASK = "CreateTask"
    INIT_CYCLE = "InitCycle"
    LAUNCH_SOURCE = "LaunchSource"
    EXECUTE_COMPUTE = "ExecuteCompute"
    INIT_ITERATION = "InitIteration"
    EXECUTE_FIRST_ITERATION = "ExecuteFirstIteration"
    FINISH_ITERATION = "FinishIteration"
    ROLLBACK = "Rollback"
    CLEAN_CYCLE = "CleanCycle"
    DESTROY_TASK = "DestroyTask"
    CHECKPOINT = "Checkpoint"  # a Done phase only: a task's snapshot of a window is durable
    INPUT_READY = "InputReady"  # a Done phase only: an iteration task holds all input of a window
    RESTORE_ITERATION = "RestoreIteration"  # go on from an iteration snapshot of the window
    DONE = "Done"


@frozen
class TaskEvent:
    """A command from the scheduler to one task."""

    kind: EventKind
    cycle: int
    task: int
    window: int = 0
    iteration: int = 0
    payload: tuple = ()  # iteration events: every task's partial aggregates of the previous step
    # LaunchSource: whether the driver asks for a snapshot of this window; ExecuteCompute: whether
    # the task snapshots its progress in the window (an iteration snapshot) before the superstep
    checkpoint: bool = True


def CreateTask(cycle: int, task: int, window: int = 0) -> TaskEvent:  # noqa: N802 - event names
    """Create the task's operators and open its state."""
    return TaskEvent(EventKind.CREATE_TASK, cycle, task, window)


def InitCycle(cycle: int, task: int, window: int = 0) -> TaskEvent:  # noqa: N802
    """Wire the task's input and output channels for a cycle."""
    return TaskEvent(EventKind.INIT_CYCLE, cycle, task, window)


def LaunchSource(cycle: int, task: int, window: int, checkpoint: bool = True) -> TaskEvent:  # noqa: N802
    """Read window ``window`` from a head task's source; with ``checkpoint`` every task snapshots it."""
    return TaskEvent(EventKind.LAUNCH_SOURCE, cycle, task, window, checkpoint=checkpoint)


def ExecuteCompute(cycle: int, task: int, window: int, iteration: int = 0,  # noqa: N802
                   payload: tuple = (), checkpoint: bool = False) -> TaskEvent:
    """Run one round: superstep ``iteration`` (> 1) of an iteration task; with ``checkpoint``, first
    snapshot the window's progress so far (an iteration snapshot)."""
    return TaskEvent(EventKind.EXECUTE_COMPUTE, cycle, task, window, iteration, payload,
                     checkpoint=checkpoint)


def RestoreIteration(cycle: int, task: int, window: int, iteration: int) -> TaskEvent:  # noqa: N802
    """Go on with window ``window`` from the iteration snapshot taken after superstep ``iteration``."""
    return TaskEvent(EventKind.RESTORE_ITERATION, cycle, task, window, iteration)


def InitIteration(cycle: int, task: int, window: int) -> TaskEvent:  # noqa: N802
    """An iteration task takes window ``window``'s input into its graph and prepares superstep 1."""
    return TaskEvent(EventKind.INIT_ITERATION, cycle, task, window)


def ExecuteFirstIteration(cycle: int, task: int, window: int, payload: tuple = ()) -> TaskEvent:  # noqa: N802
    """Run superstep 1 of window ``window``."""
    return TaskEvent(EventKind.EXECUTE_FIRST_ITERATION, cycle, task, window, 1, payload)


def FinishIteration(cycle: int, task: int, window: int, iteration: int) -> TaskEvent:  # noqa: N802
    """The supersteps of window ``window`` ended after ``iteration``: emit the results, finish it."""
    return TaskEvent(EventKind.FINISH_ITERATION, cycle, task, window, iteration)


def Rollback(cycle: int, task: int, window: int) -> TaskEvent:  # noqa: N802
    """Restore the task's state to the snapshot of window ``window``."""
    return TaskEvent(EventKind.ROLLBACK, cycle, task, window)


def CleanCycle(cycle: int, task: int, window: int = 0) -> TaskEvent:  # noqa: N802
    """Flush and close everything the cycle opened."""
    return TaskEvent(EventKind.CLEAN_CYCLE, cycle, task, window)


def DestroyTask(cycle: int, task: int, window: int = 0) -> TaskEvent:  # noqa: N802
    """Release the task."""
    return TaskEvent(EventKind.DESTROY_TASK, cycle, task, window)


@frozen
class OperatorMetrics:
    """Records into and out of one operator in one window of one task."""

    records_in: int = 0
    records_out: int = 0
    watermark: float | None = None  # an event-time operator's watermark at the window's end


@frozen
class Done:
    """A task reports that it finished ``phase`` for ``window``.

    ``phase`` is EXECUTE_COMPUTE when a task finished a window (with its metrics and collected
    output), LAUNCH_SOURCE when a head finished reading a window (``exhausted`` when its input ended
    there), CHECKPOINT when the task's snapshot of the window is durable (``size``: its bytes), and
    the event's own kind for lifecycle commands. ``exhausted`` on an EXECUTE_COMPUTE Done means the
    task's input ended after this window and its last state is durable: it reports no later window.

    Iteration tasks also report INPUT_READY (all input of a window arrived), INIT_ITERATION and each
    superstep (EXECUTE_FIRST_ITERATION, then EXECUTE_COMPUTE with ``iteration`` > 0) with ``active``,
    the work left for the next superstep (messages sent, plus vertices that stay active), and
    ``partials``, the task's partial aggregates as ``(name, value)`` pairs.
    """

    cycle: int
    task: int
    window: int
    phase: EventKind
    iteration: int = 0
    exhausted: bool = False
    metrics: tuple[tuple[str, OperatorMetrics], ...] = ()
    collected: tuple[tuple[str, tuple], ...] = ()
    seconds: float = 0.0
    active: int = 0
    partials: tuple = ()
    size: int = 0  # CHECKPOINT: bytes of state and offsets the task's snapshot wrote
    samples: tuple = ()  # EXECUTE_COMPUTE: monitoring samples a control asked for in this window
    # EXECUTE_COMPUTE: records the task sent to each key group of a keyed operator in this window,
    # as ``(operator, ((key group, records), ...))``: what a rebalance weighs key groups by.
    loads: tuple = ()
    # EXECUTE_COMPUTE: bytes the task sent to other processes in this window, per output edge, as
    # ``(("source->target", bytes), ...)`` (hosts whose channels cross processes measure them).
    sent: tuple = ()


@frozen
class TaskFailed:
    """A task failed while handling an event; ``error`` explains where and why."""

    cycle: int
    task: int
    window: int
    error: BaseException


# Instructions: what the scheduler asks the runtime to do.


@frozen
class SendEvents:
    """Deliver these events to their tasks, in order."""

    events: tuple[TaskEvent, ...]


@frozen
class WindowFinished:
    """Every tail of ``cycle`` reported ``window``: its output and metrics are final."""

    cycle: int
    window: int
    dones: tuple[Done, ...]


@frozen
class WindowCompleted:
    """``window`` finished and every task's state for it is durable: commit it, then publish."""

    cycle: int
    window: int


@frozen
class CommitWindow:
    """Job level: every cycle completed ``window``; record it as the job's last completed window
    (one atomic write), then report ``CommitDurable``."""

    window: int


@frozen
class CommitDurable:
    """The runtime's answer to ``CommitWindow``: the commit of ``window`` is durable."""

    window: int


@frozen
class PublishWindow:
    """Job level: the commit of ``window`` is durable; sinks may make its output visible."""

    window: int


@frozen
class CycleFinished:
    """The cycle reached END."""

    cycle: int
    last_window: int


@frozen
class JobFailed:
    """Stop the job: ``error`` explains why."""

    error: BaseException
