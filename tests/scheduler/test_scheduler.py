"""State-machine tests of the cycle scheduler: feed events, compare the instructions exactly.

Cycles are built by hand, so every expectation below is derived from the cycle's shape (its tasks,
heads and tails) and the event sequence, never from the scheduler's earlier output.

The protocol: heads get LaunchSource per window; a window is *finished* (``WindowFinished``, with
the Dones of every task) when every task reported it (upstream reports may reach the scheduler
after the tails' on hosts with several processes), and *completed* (``WindowCompleted``) when it
is finished and every task's snapshot of it is durable (a ``Done(CHECKPOINT)`` per task, or the
task's end-of-input report). Launching follows finishing; cleaning up follows completing the last
window.
"""

from __future__ import annotations

import pytest

from gyreflow.plan.execution import (
    ExecutionCycle,
    ExecutionTask,
    ExecutionVertexGroup,
    GroupKind,
)
from gyreflow.scheduler.cycle import CycleScheduler, CycleState, SchedulingError
from gyreflow.scheduler.events import (
    CleanCycle,
    CreateTask,
    CycleFinished,
    DestroyTask,
    Done,
    EventKind,
    InitCycle,
    JobFailed,
    LaunchSource,
    Rollback,
    SendEvents,
    TaskFailed,
    WindowCompleted,
    WindowFinished,
)

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


# --- START -> INIT -> EXECUTE_COMPUTE -------------------------------------------------------------


def test_new_scheduler_is_in_start():
    sched = CycleScheduler(make_cycle())
    assert sched.state is CycleState.START
    assert sched.task_ids == ALL


def test_start_creates_every_task_then_inits_the_cycle():
    sched = CycleScheduler(make_cycle(), max_flying_windows=2)
    out = sched.start()
    assert out == [
        SendEvents(
            (
                CreateTask(CYCLE, 0),
                CreateTask(CYCLE, 1),
                CreateTask(CYCLE, 2),
                CreateTask(CYCLE, 3),
                CreateTask(CYCLE, 4),
            )
        ),
        SendEvents(
            (
                InitCycle(CYCLE, 0, 0),
                InitCycle(CYCLE, 1, 0),
                InitCycle(CYCLE, 2, 0),
                InitCycle(CYCLE, 3, 0),
                InitCycle(CYCLE, 4, 0),
            )
        ),
    ]
    assert sched.state is CycleState.INIT


def test_event_helpers_build_the_documented_events():
    assert CreateTask(3, 5).kind is EventKind.CREATE_TASK
    assert (CreateTask(3, 5).cycle, CreateTask(3, 5).task, CreateTask(3, 5).window) == (3, 5, 0)
    assert InitCycle(3, 5, 2).kind is EventKind.INIT_CYCLE and InitCycle(3, 5, 2).window == 2
    assert LaunchSource(3, 5, 9).kind is EventKind.LAUNCH_SOURCE
    assert LaunchSource(3, 5, 9).window == 9
    assert Rollback(3, 5, 4).kind is EventKind.ROLLBACK and Rollback(3, 5, 4).window == 4
    assert CleanCycle(3, 5).kind is EventKind.CLEAN_CYCLE
    assert DestroyTask(3, 5).kind is EventKind.DESTROY_TASK
    # Events are values: equal when every field is equal.
    assert LaunchSource(3, 5, 9) == LaunchSource(3, 5, 9)
    assert LaunchSource(3, 5, 9) != LaunchSource(3, 5, 8)
    assert LaunchSource(3, 5, 9) != LaunchSource(3, 4, 9)


@pytest.mark.parametrize("max_flying", [1, 2, 3, 5])
def test_init_waits_for_every_ack_then_launches_max_flying_windows(max_flying):
    sched = CycleScheduler(make_cycle(), max_flying_windows=max_flying)
    sched.start()
    # Acks in an arbitrary order: nothing happens until the last one.
    for task in (3, 0, 4, 2):
        assert sched.handle(ack(task, EventKind.INIT_CYCLE)) == []
        assert sched.state is CycleState.INIT
    out = sched.handle(ack(1, EventKind.INIT_CYCLE))
    assert out == [launches(range(1, max_flying + 1))]
    assert sched.state is CycleState.EXECUTE_COMPUTE


def test_duplicate_init_ack_does_not_count_for_another_task():
    sched = CycleScheduler(make_cycle())
    sched.start()
    for task in (0, 0, 1, 1, 2, 3):
        assert sched.handle(ack(task, EventKind.INIT_CYCLE)) == []
    assert sched.state is CycleState.INIT
    assert sched.handle(ack(4, EventKind.INIT_CYCLE)) == [launches([1])]


def test_launches_go_to_heads_only():
    cycle = make_cycle(heads=(0, 1, 5), middle=(), tails=(3,))
    sched = to_execute(max_flying=2, cycle=cycle)
    assert sched.context.in_flight == {1, 2}
    out = finish(sched, 1, tasks=(0, 1, 5, 3))
    assert out == [
        finished(1, done(0, 1), done(1, 1), done(5, 1), done(3, 1)),
        SendEvents(
            (LaunchSource(CYCLE, 0, 3), LaunchSource(CYCLE, 1, 3), LaunchSource(CYCLE, 5, 3))
        ),
    ]


# --- finishing windows ----------------------------------------------------------------------------


def test_window_finishes_only_when_every_tail_reported():
    sched = to_execute(max_flying=2)
    # Heads and the middle task report window 1: the tails have not.
    assert feed(sched, [done(0, 1), done(1, 1), done(2, 1)]) == []
    assert sched.handle(done(3, 1)) == []
    assert sched.context.last_finished == 0
    out = sched.handle(done(4, 1))
    assert out == [
        finished(1, done(0, 1), done(1, 1), done(2, 1), done(3, 1), done(4, 1)),
        launches([3]),
    ]
    assert sched.state is CycleState.EXECUTE_COMPUTE
    assert sched.context.last_finished == 1
    assert sched.context.in_flight == {2, 3}


def test_tails_do_not_finish_a_window_before_every_upstream_task_reported_it():
    # Worker processes report on their own connections: the tails' reports of a window may reach
    # the scheduler before an upstream task's, whose metrics belong to the same window.
    sched = to_execute(max_flying=1)
    assert feed(sched, [done(0, 1), done(3, 1), done(4, 1), done(2, 1)]) == []
    assert sched.context.last_finished == 0
    out = sched.handle(done(1, 1))
    assert out == [
        finished(1, done(0, 1), done(3, 1), done(4, 1), done(2, 1), done(1, 1)),
        launches([2]),
    ]


def test_same_tail_reporting_twice_does_not_finish_a_window():
    sched = to_execute(max_flying=1)
    assert feed(sched, [*upstream_dones(1), done(3, 1), done(3, 1)]) == []
    assert sched.context.last_finished == 0
    assert finished_windows(sched.handle(done(4, 1))) == [1]


def test_each_finished_window_launches_the_next():
    sched = to_execute(max_flying=1)
    for window in range(1, 6):
        out = finish(sched, window)
        assert out == [finished(window, *window_dones(window)), launches([window + 1])]
        assert sched.context.in_flight == {window + 1}


def test_windows_finish_in_order_even_when_later_window_reports_first():
    sched = to_execute(max_flying=2)
    # Both tails report window 2 before window 1: window 2 must wait.
    assert finish(sched, 2) == []
    assert sched.context.last_finished == 0
    assert feed(sched, [*upstream_dones(1), done(4, 1)]) == []
    out = sched.handle(done(3, 1))
    assert out == [
        finished(1, *upstream_dones(1), done(4, 1), done(3, 1)),
        finished(2, *window_dones(2)),
        launches([3, 4]),
    ]
    assert sched.context.last_finished == 2
    assert sched.context.in_flight == {3, 4}


def test_dones_of_different_windows_are_kept_apart():
    sched = to_execute(max_flying=3)
    upstream = [d for w in (3, 1, 2) for d in upstream_dones(w)]
    out = feed(sched, [*upstream, done(3, 3), done(3, 1), done(4, 3), done(4, 2), done(3, 2)])
    assert out == []  # window 1 still misses tail 4
    out = sched.handle(done(4, 1))
    assert out == [
        finished(1, *upstream_dones(1), done(3, 1), done(4, 1)),
        finished(2, *upstream_dones(2), done(4, 2), done(3, 2)),
        finished(3, *upstream_dones(3), done(3, 3), done(4, 3)),
        launches([4, 5, 6]),
    ]


# --- completing windows (finished and durable) ----------------------------------------------------


def test_window_completes_when_finished_and_every_task_snapshot_is_durable():
    sched = to_execute(max_flying=1)
    finish(sched, 1)
    # Every task must report its snapshot, heads and middle included, not only the tails.
    for task in (4, 3, 0, 1):
        assert sched.handle(checkpoint(task, 1)) == []
    assert sched.handle(checkpoint(3, 1)) == []  # a repeated ack does not stand in for task 2
    assert sched.handle(checkpoint(2, 1)) == [WindowCompleted(CYCLE, 1)]
    assert sched.state is CycleState.EXECUTE_COMPUTE


def test_durable_but_unfinished_window_completes_when_it_finishes():
    sched = to_execute(max_flying=1)
    assert persist(sched, 1) == []
    assert feed(sched, [*upstream_dones(1), done(3, 1)]) == []
    assert sched.handle(done(4, 1)) == [
        finished(1, *window_dones(1)),
        WindowCompleted(CYCLE, 1),
        launches([2]),
    ]


def test_windows_complete_in_order():
    sched = to_execute(max_flying=2)
    finish(sched, 1)
    finish(sched, 2)
    assert persist(sched, 2) == []  # window 1 is not durable yet
    assert persist(sched, 1) == [WindowCompleted(CYCLE, 1), WindowCompleted(CYCLE, 2)]


def test_launching_does_not_wait_for_snapshots():
    # Snapshots are written asynchronously: finished windows free their slot at once.
    sched = to_execute(max_flying=1)
    for window in (1, 2, 3):
        assert launched_windows(finish(sched, window)) == [window + 1] * len(HEADS)
    assert persist(sched, 1) + persist(sched, 2) == [WindowCompleted(CYCLE, 1),
                                                      WindowCompleted(CYCLE, 2)]


def test_snapshot_every_n_windows_completes_only_commit_points():
    cycle = make_cycle()
    sched = CycleScheduler(cycle, max_flying_windows=3, snapshot_every=2)
    sched.start()
    launches = feed(sched, [ack(t.id, EventKind.INIT_CYCLE) for t in cycle.tasks])
    # The scheduler alone decides which windows are snapshotted: the request rides on the launch.
    flags = {e.window: e.checkpoint for i in launches for e in i.events}
    assert flags == {1: False, 2: True, 3: False}
    assert sorted(sched.checkpoints.pending) == [2]
    finish(sched, 1)
    finish(sched, 2)
    assert persist(sched, 2) == [WindowCompleted(CYCLE, 2)]
    finish(sched, 3)
    # The input ends in window 3: the last window is a commit point too.
    feed(sched, [source_done(0, 3, exhausted=True), source_done(1, 3, exhausted=True)])
    assert sorted(sched.checkpoints.pending) == [3]
    assert persist(sched, 3) == [WindowCompleted(CYCLE, 3), cleans(3)]
    assert sched.state is CycleState.CLEAN_CYCLE


def test_checkpoint_of_an_already_completed_window_is_ignored():
    sched = to_execute(max_flying=1)
    finish(sched, 1)
    persist(sched, 1)
    assert sched.handle(checkpoint(2, 1)) == []
    assert sched.handle(checkpoint(2, 0)) == []


# --- end of input ---------------------------------------------------------------------------------


def test_source_exhaustion_needs_every_head():
    sched = to_execute(max_flying=2)
    assert sched.handle(source_done(0, 1, exhausted=True)) == []
    assert sched.context.terminate is None
    assert sched.handle(source_done(1, 1)) == []
    assert sched.context.terminate is None
    # Head 1 ends at window 2: the last window is the latest end among the heads.
    assert sched.handle(source_done(1, 2, exhausted=True)) == []
    assert sched.context.terminate == 2
    assert sched.state is CycleState.EXECUTE_COMPUTE


def test_head_ending_early_keeps_its_first_end():
    sched = to_execute(max_flying=2)
    feed(sched, [source_done(0, 1, exhausted=True), source_done(0, 1, exhausted=True)])
    assert finish(sched, 1) == [finished(1, *window_dones(1)), launches([3])]
    assert sched.handle(source_done(1, 3, exhausted=True)) == []
    assert sched.context.terminate == 3  # max(1, 3)


def test_full_lifecycle_with_exhaustion_and_cancelled_launches():
    sched = to_execute(max_flying=2)  # windows 1 and 2 launched
    assert finish(sched, 1) == [finished(1, *window_dones(1)), launches([3])]
    assert persist(sched, 1) == [WindowCompleted(CYCLE, 1)]
    assert sched.context.in_flight == {2, 3}

    # Both heads end their input in window 2: window 3 was launched but is cancelled.
    assert feed(sched, [source_done(0, 2, exhausted=True), source_done(1, 2, exhausted=True)]) == []
    assert sched.context.terminate == 2
    assert sched.context.in_flight == {2}
    # A LaunchSource Done of the cancelled window 3: ignored.
    assert sched.handle(source_done(0, 3, exhausted=True)) == []
    assert sched.state is CycleState.EXECUTE_COMPUTE

    # The last window finishes: no launch beyond it, but no cleanup before it is durable.
    assert feed(sched, [*upstream_dones(2), done(3, 2)]) == []
    out = sched.handle(done(4, 2))
    assert out == [finished(2, *window_dones(2))]
    assert sched.state is CycleState.EXECUTE_COMPUTE
    out = persist(sched, 2)
    assert out == [WindowCompleted(CYCLE, 2), cleans(2)]
    assert sched.state is CycleState.CLEAN_CYCLE

    # A late LaunchSource Done of the cancelled window is still ignored after CLEAN_CYCLE began,
    # and so is a task's trailing end-of-input report.
    assert sched.handle(source_done(1, 3, exhausted=True)) == []
    assert sched.handle(done(3, 2, exhausted=True)) == []

    for task in (4, 0, 3, 2):
        assert sched.handle(ack(task, EventKind.CLEAN_CYCLE, 2)) == []
        assert sched.state is CycleState.CLEAN_CYCLE
    out = sched.handle(ack(1, EventKind.CLEAN_CYCLE, 2))
    assert out == [
        SendEvents(tuple(DestroyTask(CYCLE, t, 2) for t in ALL)),
        CycleFinished(CYCLE, 2),
    ]
    assert sched.state is CycleState.END
    # Destroy acks and trailing reports in END are accepted and change nothing.
    assert feed(sched, [ack(t, EventKind.DESTROY_TASK, 2) for t in ALL]) == []
    assert sched.handle(done(4, 2, exhausted=True)) == []
    assert sched.handle(checkpoint(4, 2)) == []
    assert sched.state is CycleState.END


def test_end_of_input_reports_make_the_last_window_durable():
    # A task's end-of-input Done comes once its last state is durable: it stands in for the
    # checkpoint of the last window.
    sched = to_execute(max_flying=1)
    feed(sched, [source_done(0, 1, exhausted=True), source_done(1, 1, exhausted=True)])
    assert finish(sched, 1) == [finished(1, *window_dones(1))]
    assert feed(sched, [done(t, 1, exhausted=True) for t in (0, 1, 2, 3)]) == []
    assert sched.handle(done(4, 1, exhausted=True)) == [WindowCompleted(CYCLE, 1), cleans(1)]


def test_exhaustion_after_a_window_finished_cancels_the_launched_next_window():
    # Head and tail in one task: its compute Done for window 1 arrives before its source Done.
    cycle = make_cycle(heads=(0,), middle=(), tails=(0,))
    sched = to_execute(max_flying=1, cycle=cycle)
    out = sched.handle(done(0, 1))
    assert out == [finished(1, done(0, 1)), launches([2], heads=(0,))]
    assert sched.handle(source_done(0, 1, exhausted=True)) == []
    assert sched.context.terminate == 1
    assert sched.context.in_flight == set()
    out = sched.handle(checkpoint(0, 1))
    assert out == [WindowCompleted(CYCLE, 1), cleans(1, tasks=(0,))]
    assert sched.state is CycleState.CLEAN_CYCLE
    # The cancelled window 2, reported under its own number: ignored.
    assert sched.handle(source_done(0, 2, exhausted=True)) == []
    # The task's own end-of-input report trails the last window: ignored too.
    assert sched.handle(done(0, 1, exhausted=True)) == []
    out = sched.handle(ack(0, EventKind.CLEAN_CYCLE, 1))
    assert out == [SendEvents((DestroyTask(CYCLE, 0, 1),)), CycleFinished(CYCLE, 1)]
    assert sched.state is CycleState.END


def test_cancelled_launch_reported_under_the_last_window_is_ignored_after_cleanup_began():
    # runtime/dataflow/task.py (read_step): an exhausted head answers every later LaunchSource with
    # Done(LAUNCH_SOURCE, window=<the window its input ended in>, exhausted=True). When it handles
    # the cancelled LaunchSource(2) only after window 1 completed, that answer reaches a cycle in
    # CLEAN_CYCLE; like every trailing report it changes nothing and must not be an error.
    cycle = make_cycle(heads=(0,), middle=(), tails=(0,))
    sched = to_execute(max_flying=2, cycle=cycle)  # windows 1 and 2 launched
    sched.handle(done(0, 1))  # launches window 3
    feed(sched, [source_done(0, 1, exhausted=True), checkpoint(0, 1)])
    assert sched.state is CycleState.CLEAN_CYCLE
    assert sched.handle(source_done(0, 1, exhausted=True)) == []  # the answer to LaunchSource(2)
    assert sched.state is CycleState.CLEAN_CYCLE


def test_late_report_of_a_head_that_ended_early_is_accepted_after_the_last_window():
    # Head 0's input ends in window 1, head 1's in window 2: the last window is 2. Head 0 still
    # receives LaunchSource(2) and answers it with an exhausted Done; nothing orders that answer
    # before the tails' Dones for window 2, so it may arrive once the cycle is cleaning up.
    sched = to_execute(max_flying=2)
    feed(sched, [source_done(0, 1, exhausted=True), source_done(1, 1)])
    finish(sched, 1)  # launches window 3
    persist(sched, 1)
    assert sched.handle(source_done(1, 2, exhausted=True)) == []
    assert sched.context.terminate == 2
    finish(sched, 2)
    out = persist(sched, 2)
    assert out == [WindowCompleted(CYCLE, 2), cleans(2)]
    assert sched.state is CycleState.CLEAN_CYCLE
    assert sched.handle(source_done(0, 2, exhausted=True)) == []
    assert sched.state is CycleState.CLEAN_CYCLE


def test_exhaustion_in_the_first_window_with_one_window_in_flight():
    sched = to_execute(max_flying=1)
    feed(sched, [source_done(0, 1, exhausted=True), source_done(1, 1, exhausted=True)])
    assert finish(sched, 1) == [finished(1, *window_dones(1))]
    assert persist(sched, 1) == [WindowCompleted(CYCLE, 1), cleans(1)]


def test_non_exhausted_source_dones_change_nothing():
    sched = to_execute(max_flying=2)
    assert feed(sched, [source_done(0, 1), source_done(1, 1), source_done(0, 2)]) == []
    assert sched.context.terminate is None
    assert sched.context.in_flight == {1, 2}


def test_tail_that_reported_end_of_input_counts_for_later_windows():
    sched = to_execute(max_flying=1)
    finish(sched, 1)
    # Tail 3's input ended after window 1: it reports no later window and no later snapshot.
    assert sched.handle(done(3, 1, exhausted=True)) == []
    out = finish(sched, 2, tasks=(0, 1, 2, 4))
    assert out == [finished(2, *upstream_dones(2), done(4, 2)), launches([3])]
    out = finish(sched, 3, tasks=(0, 1, 2, 4))
    assert out == [finished(3, *upstream_dones(3), done(4, 3)), launches([4])]
    # Window 1 still needs tail 3's checkpoint? No: its end-of-input report says its state up to
    # window 1 is durable. The others' checkpoints complete windows 1 to 3.
    assert persist(sched, 1, tasks=(0, 1, 2, 4)) == [WindowCompleted(CYCLE, 1)]
    assert persist(sched, 2, tasks=(0, 1, 2, 4)) == [WindowCompleted(CYCLE, 2)]


def test_tail_end_of_input_does_not_stand_in_for_its_own_last_window():
    sched = to_execute(max_flying=2)
    # Tail 3 says its input ended after window 1 before window 1 finished.
    assert sched.handle(done(3, 1, exhausted=True)) == []
    assert finish(sched, 1, tasks=(0, 1, 2, 4)) == []  # tail 3 has not reported window 1 itself
    assert finish(sched, 2, tasks=(0, 1, 2, 4)) == []  # window 2 waits for window 1
    out = sched.handle(done(3, 1))
    assert out == [
        finished(1, *upstream_dones(1), done(4, 1), done(3, 1)),
        finished(2, *upstream_dones(2), done(4, 2)),
        launches([3, 4]),
    ]


def test_all_tails_ended_and_sources_exhausted_ends_the_cycle():
    sched = to_execute(max_flying=1)
    finish(sched, 1)  # launches window 2
    persist(sched, 1)
    feed(sched, [done(3, 1, exhausted=True), source_done(0, 2, exhausted=True)])
    out = finish(sched, 2, tasks=(0, 1, 2, 4))
    assert out == [finished(2, *upstream_dones(2), done(4, 2)), launches([3])]
    # Head 0's input ended in window 2: it reports no later window.
    assert sched.handle(done(0, 2, exhausted=True)) == []
    out = sched.handle(source_done(1, 3, exhausted=True))
    assert sched.context.terminate == 3
    assert out == []  # tail 4 has not reported window 3
    assert finish(sched, 3, tasks=(1, 2)) == []
    assert sched.handle(done(4, 3)) == [finished(3, done(1, 3), done(2, 3), done(4, 3))]
    assert persist(sched, 2, tasks=(0, 1, 2, 4)) == [WindowCompleted(CYCLE, 2)]
    assert persist(sched, 3, tasks=(0, 1, 2, 4)) == [WindowCompleted(CYCLE, 3), cleans(3)]


# --- failures and invalid events ------------------------------------------------------------------


@pytest.mark.parametrize("phase", ["init", "execute", "clean"])
def test_task_failed_becomes_job_failed(phase):
    sched = CycleScheduler(make_cycle())
    sched.start()
    if phase != "init":
        feed(sched, [ack(t, EventKind.INIT_CYCLE) for t in ALL])
    if phase == "clean":
        feed(sched, [source_done(0, 1, exhausted=True), source_done(1, 1, exhausted=True)])
        finish(sched, 1)
        persist(sched, 1)
        assert sched.state is CycleState.CLEAN_CYCLE
    state = sched.state
    error = ZeroDivisionError("boom")
    assert sched.handle(TaskFailed(CYCLE, 2, 1, error)) == [JobFailed(error)]
    assert sched.state is state


def test_event_not_allowed_in_init_raises_with_history():
    sched = CycleScheduler(make_cycle())
    sched.start()
    first = ack(0, EventKind.INIT_CYCLE)
    sched.handle(first)
    with pytest.raises(SchedulingError) as info:
        sched.handle(done(3, 1))
    message = str(info.value)
    assert f"cycle {CYCLE}" in message
    assert "state INIT" in message
    assert "recent history" in message
    assert f"INIT: {first}" in message  # the earlier event, with the state it arrived in
    assert str(done(3, 1)) in message


@pytest.mark.parametrize(
    ("setup", "event", "state"),
    [
        ("init", source_done(0, 1), "INIT"),
        ("init", checkpoint(0, 1), "INIT"),
        ("init", ack(0, EventKind.CLEAN_CYCLE), "INIT"),
        ("init", ack(0, EventKind.ROLLBACK), "INIT"),
        ("execute", ack(0, EventKind.INIT_CYCLE), "EXECUTE_COMPUTE"),
        ("execute", ack(0, EventKind.CLEAN_CYCLE), "EXECUTE_COMPUTE"),
        ("execute", ack(0, EventKind.DESTROY_TASK), "EXECUTE_COMPUTE"),
        ("clean", done(3, 2), "CLEAN_CYCLE"),
        ("clean", ack(0, EventKind.INIT_CYCLE), "CLEAN_CYCLE"),
        ("end", ack(0, EventKind.CLEAN_CYCLE, 1), "END"),
        ("end", done(3, 2), "END"),
    ],
)
def test_events_not_allowed_in_the_current_state_raise(setup, event, state):
    sched = CycleScheduler(make_cycle())
    sched.start()
    if setup != "init":
        feed(sched, [ack(t, EventKind.INIT_CYCLE) for t in ALL])
    if setup in ("clean", "end"):
        feed(sched, [source_done(0, 1, exhausted=True), source_done(1, 1, exhausted=True)])
        finish(sched, 1)
        persist(sched, 1)
    if setup == "end":
        feed(sched, [ack(t, EventKind.CLEAN_CYCLE, 1) for t in ALL])
    assert sched.state.name == state
    with pytest.raises(SchedulingError, match=f"in state {state} cannot handle"):
        sched.handle(event)


def test_history_in_error_is_limited_to_recent_events():
    sched = to_execute(max_flying=1)
    for window in range(1, 13):
        finish(sched, window)
    with pytest.raises(SchedulingError) as info:
        sched.handle(ack(0, EventKind.INIT_CYCLE))
    message = str(info.value)
    history = message.split("recent history:\n", 1)[1].splitlines()
    assert len(history) == 10
    assert history[-1] == f"  EXECUTE_COMPUTE: {ack(0, EventKind.INIT_CYCLE)}"
    assert history[0] == f"  EXECUTE_COMPUTE: {done(1, 11)}"
    assert str(done(3, 1)) not in message


# --- ROLLBACK -------------------------------------------------------------------------------------


def test_rollback_path_resumes_after_the_completed_window():
    sched = CycleScheduler(make_cycle(), max_flying_windows=2, resume_from=3)
    out = sched.start()
    assert out == [
        SendEvents(tuple(CreateTask(CYCLE, t) for t in ALL)),
        SendEvents(tuple(Rollback(CYCLE, t, 3) for t in ALL)),
    ]
    assert sched.state is CycleState.ROLLBACK
    # InitCycle acks are not allowed while rolling back.
    with pytest.raises(SchedulingError):
        sched.handle(ack(0, EventKind.INIT_CYCLE, 3))
    for task in (0, 1, 2, 3):
        assert sched.handle(ack(task, EventKind.ROLLBACK, 3)) == []
        assert sched.state is CycleState.ROLLBACK
    out = sched.handle(ack(4, EventKind.ROLLBACK, 3))
    assert out == [SendEvents(tuple(InitCycle(CYCLE, t, 3) for t in ALL))]
    assert sched.state is CycleState.INIT
    out = feed(sched, [ack(t, EventKind.INIT_CYCLE, 3) for t in ALL])
    assert out == [launches([4, 5])]
    assert sched.state is CycleState.EXECUTE_COMPUTE
    assert sched.context.last_finished == 3
    # Snapshots of windows up to the resume point (replayed writes) change nothing.
    assert persist(sched, 3) == []
    # The first window after the resume point comes first.
    assert finish(sched, 4) == [finished(4, *window_dones(4)), launches([6])]
    assert persist(sched, 4) == [WindowCompleted(CYCLE, 4)]


def test_no_rollback_without_resume_point():
    sched = CycleScheduler(make_cycle(), resume_from=0)
    out = sched.start()
    kinds = [e.kind for i in out for e in i.events]
    assert EventKind.ROLLBACK not in kinds
    assert sched.state is CycleState.INIT
