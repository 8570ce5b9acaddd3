"""The cycle scheduler's failures: a failed task fails the job; events the state does not allow raise."""

from __future__ import annotations

import pytest
from _cycle_scheduling import (
    ALL,
    CYCLE,
    ack,
    checkpoint,
    done,
    feed,
    finish,
    make_cycle,
    persist,
    source_done,
    to_execute,
)

from gyreflow.scheduler.cycle import CycleScheduler, CycleState, SchedulingError
from gyreflow.scheduler.events import EventKind, JobFailed, TaskFailed


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
