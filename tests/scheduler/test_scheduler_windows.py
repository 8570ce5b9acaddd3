"""The cycle scheduler's windows: finished once every task reported, completed once durable too."""

from __future__ import annotations

from _cycle_scheduling import (
    CYCLE,
    HEADS,
    ack,
    checkpoint,
    cleans,
    done,
    feed,
    finish,
    finished,
    finished_windows,
    launched_windows,
    launches,
    make_cycle,
    persist,
    source_done,
    to_execute,
    upstream_dones,
    window_dones,
)

from gyreflow.scheduler.cycle import CycleScheduler, CycleState
from gyreflow.scheduler.events import EventKind, WindowCompleted

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
