"""The cycle scheduler at the end of input: the last window, cancelled launches, trailing reports, cleanup."""

from __future__ import annotations

from _cycle_scheduling import (
    ALL,
    CYCLE,
    ack,
    checkpoint,
    cleans,
    done,
    feed,
    finish,
    finished,
    launches,
    make_cycle,
    persist,
    source_done,
    to_execute,
    upstream_dones,
    window_dones,
)

from gyreflow.scheduler.cycle import CycleState
from gyreflow.scheduler.events import CycleFinished, DestroyTask, EventKind, SendEvents, WindowCompleted


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
