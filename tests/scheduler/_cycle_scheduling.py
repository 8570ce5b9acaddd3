"""A hand-built cycle for the cycle scheduler tests, the events its tasks send, the instructions expected."""

from __future__ import annotations

from gyreflow.plan.execution import ExecutionCycle, ExecutionTask, ExecutionVertexGroup, GroupKind
from gyreflow.scheduler.cycle import CycleScheduler, CycleState
from gyreflow.scheduler.events import (
    CleanCycle,
    Done,
    EventKind,
    LaunchSource,
    SendEvents,
    WindowCompleted,
    WindowFinished,
)

# Cycles are built by hand, so every expectation in the cycle scheduler tests is derived from the
# cycle's shape (its tasks, heads and tails) and the event sequence, never from the scheduler's earlier
# output.
#
# The protocol: heads get LaunchSource per window; a window is *finished* (``WindowFinished``, with
# the Dones of every task) when every task reported it (upstream reports may reach the scheduler
# after the tails' on hosts with several processes), and *completed* (``WindowCompleted``) when it
# is finished and every task's snapshot of it is durable (a ``Done(CHECKPOINT)`` per task, or the
# task's end-of-input report). Launching follows finishing; cleaning up follows completing the last
# window.

CYCLE = 7  # an id different from every task id, so that mixing them up shows
HEADS = (0, 1)  # vertex 0 ("src", parallelism 2)
MIDDLE = (2,)  # vertex 1 ("mid", parallelism 1)
TAILS = (3, 4)  # vertex 2 ("sink", parallelism 2)
ALL = HEADS + MIDDLE + TAILS


def make_cycle(
    heads: tuple[int, ...] = HEADS,
    middle: tuple[int, ...] = MIDDLE,
    tails: tuple[int, ...] = TAILS,
    cycle_id: int = CYCLE,
) -> ExecutionCycle:
    """A three-vertex cycle: heads -> middle -> tails (any layer may be shared or empty)."""
    layers = [("src", heads), ("mid", middle), ("sink", tails)]
    tasks = []
    seen: set[int] = set()
    for vertex_id, (name, ids) in enumerate(layers):
        for index, task_id in enumerate(ids):
            if task_id in seen:
                continue
            seen.add(task_id)
            label = f"{name}[{index + 1}/{len(ids)}]"
            tasks.append(ExecutionTask(task_id, vertex_id, index, len(ids), label))
    group = ExecutionVertexGroup(cycle_id, GroupKind.WINDOW, tuple(range(len(layers))))
    return ExecutionCycle(cycle_id, group, tuple(tasks), heads=heads, tails=tails)


def done(task: int, window: int, exhausted: bool = False, cycle: int = CYCLE) -> Done:
    """A task finished ``window`` (or, with ``exhausted``, its input ended after it)."""
    return Done(cycle, task, window, EventKind.EXECUTE_COMPUTE, exhausted=exhausted)


def source_done(task: int, window: int, exhausted: bool = False, cycle: int = CYCLE) -> Done:
    """A head finished reading ``window``."""
    return Done(cycle, task, window, EventKind.LAUNCH_SOURCE, exhausted=exhausted)


def checkpoint(task: int, window: int, cycle: int = CYCLE) -> Done:
    """A task's snapshot of ``window`` is durable."""
    return Done(cycle, task, window, EventKind.CHECKPOINT)


def ack(task: int, kind: EventKind, window: int = 0, cycle: int = CYCLE) -> Done:
    """A task acknowledges a lifecycle command."""
    return Done(cycle, task, window, kind)


def launches(windows, heads=HEADS, cycle: int = CYCLE) -> SendEvents:
    """LaunchSource of every window in ``windows`` to every head, window by window."""
    return SendEvents(tuple(LaunchSource(cycle, h, w) for w in windows for h in heads))


def cleans(window: int, tasks=ALL, cycle: int = CYCLE) -> SendEvents:
    return SendEvents(tuple(CleanCycle(cycle, t, window) for t in tasks))


def feed(sched, events) -> list:
    """Handle ``events`` in order; return every instruction they produced, concatenated."""
    out = []
    for event in events:
        out.extend(sched.handle(event))
    return out


def to_execute(max_flying: int = 1, cycle: ExecutionCycle | None = None,
               snapshot_every: int = 1) -> CycleScheduler:
    """A scheduler started and initialised: it has just launched its first windows."""
    cycle = cycle or make_cycle()
    sched = CycleScheduler(cycle, max_flying_windows=max_flying, snapshot_every=snapshot_every)
    sched.start()
    feed(sched, [ack(t.id, EventKind.INIT_CYCLE) for t in cycle.tasks])
    assert sched.state is CycleState.EXECUTE_COMPUTE
    return sched


def finish(sched: CycleScheduler, window: int, tasks=ALL) -> list:
    """Every task reports ``window``, upstream first."""
    return feed(sched, [done(t, window) for t in tasks])


def persist(sched: CycleScheduler, window: int, tasks=ALL) -> list:
    """Every task's snapshot of ``window`` becomes durable."""
    return feed(sched, [checkpoint(t, window) for t in tasks])


def finished(window: int, *dones: Done, cycle: int = CYCLE) -> WindowFinished:
    return WindowFinished(cycle, window, dones)


def upstream_dones(window: int) -> tuple[Done, ...]:
    """The reports of ``window`` by the tasks before the tails (heads and the middle)."""
    return tuple(done(t, window) for t in HEADS + MIDDLE)


def window_dones(window: int, tasks=ALL) -> tuple[Done, ...]:
    """Every task's report of ``window``, in the order ``finish`` feeds them."""
    return tuple(done(t, window) for t in tasks)


def finished_windows(instructions) -> list[int]:
    return [i.window for i in instructions if isinstance(i, WindowFinished)]


def completed_windows(instructions) -> list[int]:
    return [i.window for i in instructions if isinstance(i, WindowCompleted)]


def launched_windows(instructions) -> list[int]:
    return [
        e.window
        for i in instructions
        if isinstance(i, SendEvents)
        for e in i.events
        if e.kind is EventKind.LAUNCH_SOURCE
    ]
