"""Cycle scheduler tests beyond one cycle's state machine: the JobScheduler routing events between
cycles, the WindowContext's window bookkeeping, and a property test of completion order under random
interleavings of task reports (helpers and the cycle shape come from _cycle_scheduling)."""

from __future__ import annotations

import pytest
from _cycle_scheduling import (
    ack,
    checkpoint,
    cleans,
    completed_windows,
    done,
    finished_windows,
    launched_windows,
    make_cycle,
    persist,
    source_done,
    to_execute,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from gyreflow.scheduler.context import WindowContext
from gyreflow.scheduler.cycle import CycleState, JobScheduler
from gyreflow.scheduler.events import (
    CleanCycle,
    CommitDurable,
    CommitWindow,
    CreateTask,
    CycleFinished,
    DestroyTask,
    EventKind,
    InitCycle,
    LaunchSource,
    PublishWindow,
    SendEvents,
    WindowFinished,
)
from gyreflow.scheduler.states import SchedulingError

# --- JobScheduler ---------------------------------------------------------------------------------


def test_job_scheduler_routes_events_by_cycle_and_finishes_when_every_cycle_ends():
    one = make_cycle(heads=(0,), middle=(), tails=(0,), cycle_id=1)
    two = make_cycle(heads=(1,), middle=(), tails=(2,), cycle_id=2)
    job = JobScheduler([one, two], max_flying_windows=1)
    out = job.start()
    assert out == [
        SendEvents((CreateTask(1, 0),)),
        SendEvents((InitCycle(1, 0, 0),)),
        SendEvents((CreateTask(2, 1), CreateTask(2, 2))),
        SendEvents((InitCycle(2, 1, 0), InitCycle(2, 2, 0))),
    ]
    assert job.handle(ack(0, EventKind.INIT_CYCLE, cycle=1)) == [
        SendEvents((LaunchSource(1, 0, 1),))
    ]
    assert job.cycles[2].state is CycleState.INIT
    for event in (
        source_done(0, 1, exhausted=True, cycle=1),
        done(0, 1, cycle=1),
        checkpoint(0, 1, cycle=1),
        ack(0, EventKind.CLEAN_CYCLE, 1, cycle=1),
    ):
        job.handle(event)
    assert job.cycles[1].state is CycleState.END
    assert not job.finished
    for event in (
        ack(1, EventKind.INIT_CYCLE, cycle=2),
        ack(2, EventKind.INIT_CYCLE, cycle=2),
        source_done(1, 1, exhausted=True, cycle=2),
        done(1, 1, cycle=2),
        checkpoint(1, 1, cycle=2),
        checkpoint(2, 1, cycle=2),
    ):
        job.handle(event)
    assert job.handle(done(2, 1, cycle=2)) == [
        WindowFinished(2, 1, (done(1, 1, cycle=2), done(2, 1, cycle=2))),
        CommitWindow(1),  # job level: every cycle completed window 1
        SendEvents((CleanCycle(2, 1, 1), CleanCycle(2, 2, 1))),
    ]
    job.handle(ack(1, EventKind.CLEAN_CYCLE, 1, cycle=2))
    assert not job.finished
    assert job.handle(ack(2, EventKind.CLEAN_CYCLE, 1, cycle=2)) == [
        SendEvents((DestroyTask(2, 1, 1), DestroyTask(2, 2, 1))),
        CycleFinished(2, 1),
    ]
    assert not job.finished  # the commit of window 1 is not durable yet
    with pytest.raises(SchedulingError):
        job.handle(CommitDurable(2))
    assert job.handle(CommitDurable(1)) == [PublishWindow(1)]
    assert job.finished


# --- WindowContext --------------------------------------------------------------------------------


def test_window_context_launches_up_to_max_flying():
    ctx = WindowContext(max_flying_windows=3)
    assert ctx.windows_to_launch() == [1, 2, 3]
    assert ctx.windows_to_launch() == []
    assert ctx.in_flight == {1, 2, 3}
    ctx.finish(1)
    ctx.finish(2)
    assert ctx.windows_to_launch() == [4, 5]
    assert ctx.in_flight == {3, 4, 5}
    assert ctx.last_finished == 2
    assert not ctx.all_finished()


def test_window_context_rejects_out_of_order_completion():
    ctx = WindowContext(max_flying_windows=2)
    ctx.windows_to_launch()
    with pytest.raises(ValueError, match="window 2 completed out of order"):
        ctx.finish(2)
    ctx.finish(1)
    with pytest.raises(ValueError, match=r"last completed: 1"):
        ctx.finish(1)


def test_window_context_terminate_cancels_later_windows():
    ctx = WindowContext(max_flying_windows=4)
    assert ctx.windows_to_launch() == [1, 2, 3, 4]
    ctx.terminate_at(2)
    assert ctx.in_flight == {1, 2}
    assert ctx.windows_to_launch() == []
    ctx.finish(1)
    assert not ctx.all_finished()
    assert ctx.windows_to_launch() == []
    ctx.finish(2)
    assert ctx.all_finished()


def test_window_context_terminate_before_launch_limits_launches():
    ctx = WindowContext(max_flying_windows=5)
    ctx.terminate_at(2)
    assert ctx.windows_to_launch() == [1, 2]
    assert not ctx.all_finished()


def test_window_context_not_finished_without_terminate():
    ctx = WindowContext(max_flying_windows=1)
    for window in range(1, 4):
        assert ctx.windows_to_launch() == [window]
        ctx.finish(window)
        assert not ctx.all_finished()


def test_window_context_resume_after():
    ctx = WindowContext(max_flying_windows=2)
    ctx.windows_to_launch()
    ctx.resume_after(5)
    assert ctx.in_flight == set()
    assert ctx.last_finished == 5
    assert ctx.windows_to_launch() == [6, 7]
    ctx.finish(6)
    assert ctx.last_finished == 6


# --- property: completion order under random interleavings ----------------------------------------


@st.composite
def interleavings(draw):
    """Random interleavings of per-task event streams, each stream in window order.

    A stream is ("done", task) -- the task's compute Dones for windows 1..N, the head's too -- or
    ("checkpoint", task) -- the task's durable-snapshot reports for windows 1..N. Streams are
    independent (snapshots are written asynchronously), so any interleaving is possible.
    """
    windows = draw(st.integers(min_value=1, max_value=5))
    tails = draw(st.integers(min_value=1, max_value=3))
    with_checkpoints = draw(st.booleans())
    tail_ids = tuple(100 + t for t in range(tails))
    task_ids = (0, *tail_ids)
    streams = [("done", t) for t in task_ids]
    if with_checkpoints:
        streams += [("checkpoint", t) for t in task_ids]
    order = draw(st.permutations([s for s in streams for _ in range(windows)]))
    return windows, tail_ids, task_ids, with_checkpoints, order


@settings(max_examples=200, deadline=None)
@given(interleavings())
def test_finished_and_completed_windows_are_the_fully_reported_prefix(case):
    windows, tail_ids, task_ids, with_checkpoints, order = case
    cycle = make_cycle(heads=(0,), middle=(), tails=tail_ids)
    sched = to_execute(max_flying=windows, cycle=cycle)

    counts = {stream: 0 for stream in set(order)}
    finished_list: list[int] = []
    completed_list: list[int] = []
    launched: list[int] = []
    for stream in order:
        kind, task = stream
        counts[stream] += 1
        window = counts[stream]
        event = done(task, window) if kind == "done" else checkpoint(task, window)
        out = sched.handle(event)
        finished_list.extend(finished_windows(out))
        completed_list.extend(completed_windows(out))
        launched.extend(launched_windows(out))
        # Oracle: window w is finished when every task reported it (w <= the smallest count of
        # the tasks' Done streams), durable when every task reported its snapshot, and completed
        # when it and every window before it are finished and durable.
        k_finished = min(counts[("done", t)] for t in task_ids)
        k_durable = min(counts.get(("checkpoint", t), 0) for t in task_ids)
        assert finished_list == list(range(1, k_finished + 1))
        assert completed_list == list(range(1, min(k_finished, k_durable) + 1))
        # Every finished window frees a slot for the next window, launched in order.
        assert launched == list(range(windows + 1, windows + k_finished + 1))
        assert sched.state is CycleState.EXECUTE_COMPUTE

    # The source ends at the last window: later launches are cancelled; the cycle cleans up once
    # the last window is durable.
    out = sched.handle(source_done(0, windows, exhausted=True))
    if not with_checkpoints:
        assert out == []
        # Every window is a commit point (snapshot_every=1): each needs its snapshots, in order.
        for window in range(windows, 0, -1):
            assert sched.state is CycleState.EXECUTE_COMPUTE
            out = persist(sched, window, tasks=task_ids)
            completed_list.extend(completed_windows(out))
        assert completed_list == list(range(1, windows + 1))
    assert out[-1] == cleans(windows, tasks=task_ids)
    assert sched.state is CycleState.CLEAN_CYCLE
