"""The local executor: runs an execution graph in this process under the cycle scheduler."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from gyreflow.plan.execution import ExecutionGraph
from gyreflow.plan.graph import Partitioning
from gyreflow.runtime.emitter import EmitterService, OutputEdge
from gyreflow.runtime.metrics import TaskResult, WindowMetrics
from gyreflow.runtime.task import Task
from gyreflow.runtime.task_runner import Dispatcher, TaskRunner
from gyreflow.scheduler.cycle import JobScheduler
from gyreflow.scheduler.events import (
    CycleFinished,
    EventKind,
    JobFailed,
    SendEvents,
    WindowCompleted,
)


class JobListener:
    """Receives progress while a job runs; the default does nothing."""

    def on_start(self, name: str, graph: ExecutionGraph) -> None:
        """The job is about to start."""

    def on_window(self, metrics: WindowMetrics) -> None:
        """A window completed."""

    def on_finish(self, result: TaskResult) -> None:
        """The job finished."""


class LocalExecutor:
    """Runs every task in this process, cooperatively: each TaskRunner handles one queued item per
    turn, so results do not depend on thread timing and nothing is pickled."""

    def __init__(self, config, state_backend, listener: JobListener | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.state_backend = state_backend
        self.listener = listener or JobListener()
        self.clock = clock

    def run(self, name: str, graph: ExecutionGraph) -> TaskResult:
        """Run ``graph`` to the end of its input and return its result."""
        outbox: deque = deque()
        runners = self._build_runners(graph, outbox.append)
        dispatcher = Dispatcher(runners)
        scheduler = JobScheduler(graph.cycles(), self.config["scheduler.max_flying_windows"])
        result = TaskResult(name)
        sources = tuple(v.name for v in graph.pipeline.sources())
        launched: dict[tuple[int, int], float] = {}
        started = self.clock()
        self.listener.on_start(name, graph)
        pending = deque(scheduler.start())
        runner_list = list(runners.values())
        try:
            while True:
                while pending:
                    instruction = pending.popleft()
                    if isinstance(instruction, SendEvents):
                        for event in instruction.events:
                            if event.kind is EventKind.LAUNCH_SOURCE:
                                launched.setdefault((event.cycle, event.window), self.clock())
                            dispatcher.dispatch(event)
                    elif isinstance(instruction, WindowCompleted):
                        key = (instruction.cycle, instruction.window)
                        seconds = self.clock() - launched.pop(key, started)
                        metrics = WindowMetrics.from_dones(name, instruction.cycle,
                                                           instruction.window, seconds,
                                                           instruction.dones, sources)
                        result.windows.append(metrics)
                        result.add_collected(instruction.window, instruction.dones)
                        self.listener.on_window(metrics)
                    elif isinstance(instruction, JobFailed):
                        raise instruction.error
                    elif isinstance(instruction, CycleFinished):
                        pass
                if outbox:
                    pending.extend(scheduler.handle(outbox.popleft()))
                    continue
                if scheduler.finished and not any(r.has_work() for r in runner_list):
                    break
                progressed = False
                for runner in runner_list:
                    if runner.step():
                        progressed = True
                if not progressed and not outbox:
                    msg = f"job {name!r} stalled: no task has work and the scheduler waits"
                    raise RuntimeError(msg)
        finally:
            for runner in runner_list:
                if runner.task.ctx is not None and runner.task.operators is not None:
                    try:
                        runner.task.destroy()
                    except Exception:  # noqa: BLE001, S110 - best effort on the way out
                        pass
        result.seconds = self.clock() - started
        self.listener.on_finish(result)
        return result

    def _build_runners(self, graph: ExecutionGraph, report) -> dict[int, TaskRunner]:
        tasks = graph.tasks()
        by_vertex: dict[int, list] = {}
        for t in tasks:
            by_vertex.setdefault(t.vertex_id, []).append(t)
        cycle_of = {t.id: c.id for c in graph.cycles() for t in c.tasks}
        # Input channels of each task: (ordinal, source task id), in a fixed order.
        inputs: dict[int, list[tuple[int, int]]] = {t.id: [] for t in tasks}
        links: list[tuple[object, object, object, int]] = []
        for edge in graph.edges:
            for s in by_vertex[edge.source]:
                targets = by_vertex[edge.target]
                if edge.partitioning is Partitioning.FORWARD:
                    targets = [targets[s.index]]
                for t in targets:
                    inputs[t.id].append((edge.ordinal, s.id))
                    links.append((edge, s, t, len(inputs[t.id]) - 1))
        runners: dict[int, TaskRunner] = {}
        outputs: dict[int, dict[int, list]] = {t.id: {} for t in tasks}
        batch_size = self.config["runtime.batch_size"]
        # Build tasks first with empty emitters, then wire delivers once runners exist.
        emitters: dict[int, list[OutputEdge]] = {t.id: [] for t in tasks}
        for t in tasks:
            vertex = graph.vertex(t.vertex_id)
            ordinals = [ordinal for ordinal, _ in inputs[t.id]]
            task = Task(t, vertex, cycle_of[t.id], ordinals, None, self.state_backend, batch_size,
                        report, self.clock)
            runners[t.id] = TaskRunner(task, report)
        for edge, s, t, channel in links:
            outputs[s.id].setdefault(id(edge), []).append(runners[t.id].deliverer(channel))
        for t in tasks:
            for edge in graph.outputs(t.vertex_id):
                delivers = outputs[t.id].get(id(edge), [])
                target_name = graph.vertex(edge.target).head.name
                emitters[t.id].append(OutputEdge(edge.partitioning, delivers, edge.key_fn,
                                                 target_name, t.index))
            runners[t.id].task.emitter = EmitterService(emitters[t.id],
                                                        self.state_backend.max_parallelism)
        return runners
