"""The cycle scheduler's lifecycle: creating tasks, initialising the cycle, first launches, rollback."""

from __future__ import annotations

import pytest
from _cycle_scheduling import (
    ALL,
    CYCLE,
    ack,
    done,
    feed,
    finish,
    finished,
    launches,
    make_cycle,
    persist,
    to_execute,
    window_dones,
)

from gyreflow.scheduler.cycle import CycleScheduler, CycleState, SchedulingError
from gyreflow.scheduler.events import (
    CleanCycle,
    CreateTask,
    DestroyTask,
    EventKind,
    InitCycle,
    LaunchSource,
    Rollback,
    SendEvents,
    WindowCompleted,
)

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
