"""The iteration scheduler: supersteps of a graph computation nested in the windows of its cycle."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gyreflow.plan.execution import (
    ExecutionCycle,
    ExecutionTask,
    ExecutionVertexGroup,
    GroupKind,
    IterationLoop,
)
from gyreflow.scheduler.cycle import CycleScheduler, SchedulingError
from gyreflow.scheduler.events import Done, EventKind, SendEvents, TaskEvent
from gyreflow.scheduler.iteration import IterationScheduler
from gyreflow.scheduler.states import CycleState

K = EventKind


def ready(task: int, window: int) -> Done:
    return Done(1, task, window, K.INPUT_READY)


def init_ack(task: int, window: int, vertices: int) -> Done:
    return Done(1, task, window, K.INIT_ITERATION, partials=(("__vertices__", vertices),))


def step(task: int, window: int, iteration: int, active: int, partials: tuple = ()) -> Done:
    kind = K.EXECUTE_FIRST_ITERATION if iteration == 1 else K.EXECUTE_COMPUTE
    return Done(1, task, window, kind, iteration, active=active, partials=partials)


def events(instructions: list) -> list[TaskEvent]:
    return [e for i in instructions if isinstance(i, SendEvents) for e in i.events]


def kinds(instructions: list) -> list[tuple[str, int, int, int]]:
    return [(e.kind.value, e.task, e.window, e.iteration) for e in events(instructions)]


@pytest.fixture
def sched() -> IterationScheduler:
    return IterationScheduler(cycle=1, loop=IterationLoop(2, (5, 6), max_iterations=3))


def test_a_window_iterates_once_every_task_holds_its_input(sched):
    assert sched.handle(ready(5, 1)) == []
    assert kinds(sched.handle(ready(6, 1))) == [("InitIteration", 5, 1, 0), ("InitIteration", 6, 1, 0)]
    assert sched.state is CycleState.ITERATION_INIT


def test_first_superstep_carries_every_tasks_init_partials_in_task_order(sched):
    sched.handle(ready(5, 1))
    sched.handle(ready(6, 1))
    sched.handle(init_ack(6, 1, 7))
    out = events(sched.handle(init_ack(5, 1, 3)))
    assert [(e.kind, e.task, e.iteration) for e in out] == [
        (K.EXECUTE_FIRST_ITERATION, 5, 1), (K.EXECUTE_FIRST_ITERATION, 6, 1)]
    assert out[0].payload == ((("__vertices__", 3),), (("__vertices__", 7),))


def _to_first_step(sched, window: int = 1) -> None:
    for t in (5, 6):
        sched.handle(ready(t, window))
    for t in (5, 6):
        sched.handle(init_ack(t, window, 1))


def test_supersteps_continue_while_work_is_left_and_pass_aggregates_on(sched):
    _to_first_step(sched)
    sched.handle(step(5, 1, 1, active=0, partials=(("sum", 1.5),)))
    out = events(sched.handle(step(6, 1, 1, active=4, partials=(("sum", 2.0),))))
    assert [(e.kind, e.iteration) for e in out] == [(K.EXECUTE_COMPUTE, 2)] * 2
    assert out[1].payload == ((("sum", 1.5),), (("sum", 2.0),))


def test_no_work_left_finishes_the_window(sched):
    _to_first_step(sched)
    sched.handle(step(5, 1, 1, active=0))
    assert kinds(sched.handle(step(6, 1, 1, active=0))) == [
        ("FinishIteration", 5, 1, 1), ("FinishIteration", 6, 1, 1)]
    assert sched.state is CycleState.INIT
    assert sched.window == 2


def test_the_iteration_limit_finishes_the_window_even_with_messages_in_flight(sched):
    _to_first_step(sched)
    for iteration in (1, 2):
        sched.handle(step(5, 1, iteration, active=1))
        sched.handle(step(6, 1, iteration, active=1))
    sched.handle(step(5, 1, 3, active=1))
    assert kinds(sched.handle(step(6, 1, 3, active=1)))[0] == ("FinishIteration", 5, 1, 3)


def test_the_next_window_waits_for_the_current_one_then_starts_at_once(sched):
    _to_first_step(sched)
    assert sched.handle(ready(5, 2)) == []
    assert sched.handle(ready(6, 2)) == []  # window 1 still iterating
    sched.handle(step(5, 1, 1, active=0))
    out = kinds(sched.handle(step(6, 1, 1, active=0)))
    assert out == [("FinishIteration", 5, 1, 1), ("FinishIteration", 6, 1, 1),
                   ("InitIteration", 5, 2, 0), ("InitIteration", 6, 2, 0)]


def test_a_report_for_the_wrong_iteration_is_refused_with_history(sched):
    _to_first_step(sched)
    with pytest.raises(SchedulingError, match="iteration group 2 of cycle 1"):
        sched.handle(step(5, 1, 2, active=1))


def test_resuming_starts_with_the_window_after_the_completed_one():
    sched = IterationScheduler(1, IterationLoop(2, (5,), 3), resume_from=4)
    assert kinds(sched.handle(ready(5, 5))) == [("InitIteration", 5, 5, 0)]


@given(st.lists(st.integers(min_value=0, max_value=3), min_size=1, max_size=12),
       st.integers(min_value=1, max_value=8))
def test_supersteps_run_until_no_work_or_the_limit(work, limit):
    """Property: the number of supersteps equals the first superstep that leaves no work, capped by
    the limit (a plain loop over the reported work is the oracle)."""
    sched = IterationScheduler(1, IterationLoop(2, (5,), limit))
    sched.handle(ready(5, 1))
    sched.handle(init_ack(5, 1, 1))
    expected = 0
    for left in work + [0] * limit:
        expected += 1
        if left == 0 or expected >= limit:
            break
    ran = 0
    for iteration in range(1, limit + 1):
        left = (work + [0] * limit)[iteration - 1]
        ran = iteration
        out = kinds(sched.handle(step(5, 1, iteration, active=left)))
        if out and out[0][0] == "FinishIteration":
            break
    assert ran == expected


def _cycle_with_loop() -> ExecutionCycle:
    tasks = tuple(ExecutionTask(i, i, 0, 1, f"t{i}") for i in range(3))
    child = ExecutionVertexGroup(2, GroupKind.ITERATION, (1,))
    group = ExecutionVertexGroup(1, GroupKind.WINDOW, (0, 1, 2), (child,))
    return ExecutionCycle(1, group, tasks, heads=(0,), tails=(2,), loops=(IterationLoop(2, (1,), 5),))


def test_the_cycle_routes_iteration_reports_to_its_loop_and_windows_as_before():
    sched = CycleScheduler(_cycle_with_loop())
    sched.start()
    for t in range(3):
        sched.handle(Done(1, t, 0, K.INIT_CYCLE))
    assert sched.state is CycleState.EXECUTE_COMPUTE
    assert kinds(sched.handle(ready(1, 1))) == [("InitIteration", 1, 1, 0)]
    assert kinds(sched.handle(init_ack(1, 1, 2)))[0][0] == "ExecuteFirstIteration"
    assert kinds(sched.handle(step(1, 1, 1, active=0))) == [("FinishIteration", 1, 1, 1)]
    assert sched.state is CycleState.EXECUTE_COMPUTE
    assert sched.cycle.iterative


def test_an_iteration_report_outside_execute_compute_is_refused():
    sched = CycleScheduler(_cycle_with_loop())
    sched.start()
    with pytest.raises(SchedulingError):
        sched.handle(ready(1, 1))


def test_a_graph_computation_is_an_iteration_group_nested_in_its_window_group():
    from gyreflow.api import Environment
    from gyreflow.api.graph import GraphView, VertexCentricCompute

    class Noop(VertexCentricCompute):
        max_iterations = 7

        def compute(self, vertex, messages):
            pass

    pipeline = Environment.local(progress=False, parallelism=2).pipeline("plan")

    @pipeline.task
    def graph(ctx):
        GraphView(ctx.source([1]), ctx.source([(1, 2)])).compute(Noop(), name="g").collect()

    ((_, _, plan),) = pipeline.plans()
    (cycle,) = plan.cycles()
    (loop,) = cycle.loops
    vertex = next(v for v in plan.vertices if v.head.name == "g")
    assert loop.max_iterations == 7
    assert loop.tasks == tuple(t.id for t in plan.tasks() if t.vertex_id == vertex.id)
    assert [g.kind for g in plan.root.children[0].children] == [GroupKind.ITERATION]
