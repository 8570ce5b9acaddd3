"""TaskRunner and Dispatcher (runtime/dataflow/task_runner.py): events reach the runner of the task
they name, a runner handles one queued item per step, a failing user function becomes one TaskFailed
naming operator, window, task and record and stops the runner, and a draining runner reads no window
from the failed one on."""

from __future__ import annotations

import queue

from gyreflow.api import Environment, SizeTumblingWindow
from gyreflow.runtime.errors import UserFunctionError
from gyreflow.runtime.host import HostLink
from gyreflow.runtime.local.host import LocalHost
from gyreflow.scheduler.events import CreateTask, Done, EventKind, InitCycle, LaunchSource, TaskFailed


def open_host(build, parallelism: int = 1):
    env = Environment.local(parallelism, config={"progress.enabled": False, "state.backend": "memory"})
    pipeline = env.pipeline("runner")
    pipeline.task(build, name="job")
    ((_, _, graph),) = pipeline.plans()
    host = LocalHost(env.config, env.state_backend)
    reports: queue.SimpleQueue = queue.SimpleQueue()
    host.open("runner/job", graph, env.state_backend.open_store(),
              HostLink(reports.put, lambda: None, reports.put), 0, frozenset(), 0)
    cycle = graph.cycles()[0]
    host.send([CreateTask(cycle.id, t.id) for t in cycle.tasks]
              + [InitCycle(cycle.id, t.id, 0) for t in cycle.tasks])
    while host.step():
        pass
    return host, cycle, reports


def drain(reports: queue.SimpleQueue) -> list:
    out = []
    while not reports.empty():
        out.append(reports.get())
    return out


def test_the_dispatcher_queues_each_event_at_its_task_and_a_step_handles_one_item():
    host, cycle, reports = open_host(lambda ctx: ctx.source(list(range(6)), SizeTumblingWindow(3))
                                     .key_by().count().collect("out"), parallelism=2)
    assert {r.task for r in drain(reports) if r.phase is EventKind.INIT_CYCLE} == {
        t.id for t in cycle.tasks}
    head = cycle.heads[0]
    runner = host.runners[head]
    others = [r for task, r in host.runners.items() if task != head]
    host.send([LaunchSource(cycle.id, head, 1)])
    assert len(runner.inbox) == 1 and all(not r.inbox for r in others)
    assert runner.has_work()
    assert runner.step()  # the launch is taken from the queue, nothing read yet
    assert not runner.inbox and runner.task.has_source_work()
    assert not drain(reports)
    while runner.step():
        pass
    launched = [r for r in drain(reports) if r.phase is EventKind.LAUNCH_SOURCE]
    assert [(r.task, r.window) for r in launched] == [(head, 1)]
    assert not runner.has_work()
    assert any(r.inbox for r in others)  # the head's output and barrier wait at the next tasks


def test_a_failing_function_reports_one_task_failure_naming_the_record_and_stops_the_runner():
    def explode(x):
        if x == 4:
            raise ValueError("four")
        return x

    host, cycle, reports = open_host(lambda ctx: ctx.source(list(range(9)), SizeTumblingWindow(3))
                                     .map(explode).with_name("explode").collect("out"))
    drain(reports)
    head = cycle.heads[0]
    runner = host.runners[head]
    host.send([LaunchSource(cycle.id, head, w) for w in (1, 2, 3)])
    while host.step():
        pass
    failures = [r for r in drain(reports) if isinstance(r, TaskFailed)]
    assert len(failures) == 1
    error = failures[0].error
    assert isinstance(error, UserFunctionError)
    assert failures[0].window == 2
    text = str(error)
    assert "explode" in text and "4" in text and "window 2" in text and runner.task.name in text
    assert runner.failed and not runner.step() and not runner.has_work()


def test_a_draining_runner_reads_no_window_from_the_given_one_on():
    host, cycle, reports = open_host(lambda ctx: ctx.source(list(range(9)), SizeTumblingWindow(3))
                                     .collect("out"))
    drain(reports)
    head = cycle.heads[0]
    runner = host.runners[head]
    host.send([LaunchSource(cycle.id, head, w) for w in (1, 2, 3)])
    runner.step()
    runner.step()
    runner.step()  # three launches queued at the task
    while runner.drain_step(2):
        pass
    finished = [r.window for r in drain(reports)
                if isinstance(r, Done) and r.phase is EventKind.LAUNCH_SOURCE]
    assert finished == [1]
    assert runner.next_source_window() == 2
    assert not runner.drain_step(None)
