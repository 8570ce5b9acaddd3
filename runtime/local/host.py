"""The local executor: runs an execution graph in this process under the cycle scheduler."""

from __future__ import annotations

import enum
import functools
import itertools
import queue
import threading
import time
from collections import deque
from collections.abc import Callable

import attrs

from gyreflow.plan.execution import ExecutionGraph
from gyreflow.plan.graph import Partitioning
from gyreflow.runtime.checkpoint import CheckpointCoordinator, RecoveryOptions
from gyreflow.runtime.dataflow.emitter import EmitterService, OutputEdge
from gyreflow.runtime.errors import SnapshotWriteError
from gyreflow.runtime.faults import crash_point
from gyreflow.runtime.dataflow.iteration import task_class_for, wire_iterations
from gyreflow.runtime.metrics import TaskResult, WindowMetrics
from gyreflow.runtime.local.snapshot_writers import InlineSnapshotWriter, ProcessSnapshotWriter
from gyreflow.runtime.dataflow.task import TaskCheckpoints
from gyreflow.runtime.dataflow.task_runner import Dispatcher, TaskRunner
from gyreflow.scheduler.cycle import JobScheduler
from gyreflow.scheduler.events import (
    CycleFinished,
    EventKind,
    JobFailed,
    SendEvents,
    WindowCompleted,
    WindowFinished,
)


class JobListener:
    """Receives progress while a job runs; the default does nothing."""

    def on_start(self, name: str, graph: ExecutionGraph) -> None:
        """The job is about to start."""

    def on_window(self, metrics: WindowMetrics) -> None:
        """A window finished."""

    def on_finish(self, result: TaskResult) -> None:
        """The job finished."""


@attrs.frozen
class _WriterFailed:
    error: BaseException


@attrs.frozen
class _Committed:
    window: int


@attrs.frozen
class _Flushed:
    """Every snapshot write handed to the writer before this marker is durable."""


class _Flush(enum.Enum):
    NOT_SENT = "not sent"
    SENT = "sent"
    DONE = "done"


class _WatchedWriter:
    """Passes operations to a snapshot writer and remembers which are not yet durable, so that a
    store failure can name the window it failed on (operations are applied in order)."""

    def __init__(self, writer) -> None:
        self.writer = writer
        self._pending: dict[int, tuple[int, bool]] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()

    def _watch(self, window: int, committing: bool, on_done: Callable[[], None]):
        ident = next(self._ids)
        with self._lock:
            self._pending[ident] = (window, committing)

        def done() -> None:
            with self._lock:
                self._pending.pop(ident, None)
            on_done()

        return done

    def write(self, snapshot, on_done) -> None:
        if snapshot is None:
            self.writer.write(None, on_done)
        else:
            self.writer.write(snapshot, self._watch(snapshot.version, False, on_done))

    def commit(self, meta, on_done) -> None:
        self.writer.commit(meta, self._watch(meta.last_completed, True, on_done))

    def prune(self, job, crossing, horizon, drop=None) -> None:
        self.writer.prune(job, crossing, horizon, drop)

    def close(self) -> None:
        self.writer.close()

    def oldest_pending(self) -> tuple[int, bool] | None:
        """(window, is a commit) of the oldest operation not yet durable."""
        with self._lock:
            return self._pending[min(self._pending)] if self._pending else None


class LocalExecutor:
    """Runs every task in this process, cooperatively: each TaskRunner handles one queued item per
    turn, so results do not depend on thread timing and nothing is pickled. Snapshots are written by
    a background thread while the next windows compute."""

    def __init__(self, config, state_backend, listener: JobListener | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.state_backend = state_backend
        self.listener = listener or JobListener()
        self.clock = clock

    def run(self, name: str, graph: ExecutionGraph,
            recovery: RecoveryOptions | None = None) -> TaskResult:
        """Run ``graph`` to the end of its input and return its result."""
        backend = self.state_backend
        store = backend.open_store()  # an unreachable backend fails here, before any data moves
        reports: queue.SimpleQueue = queue.SimpleQueue()

        def on_error(exc: BaseException) -> None:
            reports.put(_WriterFailed(exc))

        if backend.name == "memory":
            writer = InlineSnapshotWriter(store, on_error)
        else:
            # The parent reads the store to resume; the writer process owns it from its first write.
            writer = ProcessSnapshotWriter(backend, on_error, before_start=store.close)
        writer = _WatchedWriter(writer)
        coordinator = CheckpointCoordinator(name, graph, store, backend)
        runners: dict[int, TaskRunner] = {}
        try:
            resume_from = coordinator.prepare(recovery or RecoveryOptions())
            checkpoints = TaskCheckpoints(name, store, writer, backend.snapshot_every,
                                          frozenset(coordinator.rescaled))
            runners = self._build_runners(graph, reports.put, checkpoints)
            return self._drive(name, graph, runners, reports, coordinator, writer, resume_from)
        finally:
            for runner in runners.values():
                if runner.task.ctx is not None:
                    try:
                        runner.task.destroy()
                    except Exception:  # noqa: BLE001, S110 - best effort on the way out
                        pass
            writer.close()
            if backend.name != "memory":
                store.close()

    def _drive(self, name, graph, runners, reports, coordinator, writer,
               resume_from) -> TaskResult:
        dispatcher = Dispatcher(runners)
        scheduler = JobScheduler(graph.cycles(), self.config["scheduler.max_flying_windows"],
                                 resume_from, self.state_backend.snapshot_every)
        result = TaskResult(name)
        sources = tuple(v.name for v in graph.pipeline.sources())
        launched: dict[tuple[int, int], float] = {}
        completed = {cycle: resume_from for cycle in scheduler.cycles}
        finished = dict(completed)
        committed = resume_from  # the last window whose commit was sent
        durable = resume_from  # the last window whose commit is durable
        outstanding_commits = 0
        failure: BaseException | None = None
        flush = _Flush.NOT_SENT
        sink_tasks = [r.task for r in runners.values() if any(
            v.spec.kind.value == "sink" for v in r.task.vertex.chain)]
        started = self.clock()
        self.listener.on_start(name, graph)
        pending = deque(scheduler.start())
        runner_list = list(runners.values())
        while True:
            while pending:
                instruction = pending.popleft()
                if isinstance(instruction, SendEvents):
                    if failure is not None:
                        continue  # failing: launch nothing new, clean nothing up
                    for event in instruction.events:
                        if event.kind is EventKind.LAUNCH_SOURCE:
                            launched.setdefault((event.cycle, event.window), self.clock())
                        dispatcher.dispatch(event)
                elif isinstance(instruction, WindowFinished):
                    crash_point("window-finished", instruction.window)
                    finished[instruction.cycle] = instruction.window
                    key = (instruction.cycle, instruction.window)
                    seconds = self.clock() - launched.pop(key, started)
                    metrics = WindowMetrics.from_dones(name, instruction.cycle, instruction.window,
                                                       seconds, instruction.dones, sources)
                    result.windows.append(metrics)
                    result.add_collected(instruction.window, instruction.dones)
                    self.listener.on_window(metrics)
                elif isinstance(instruction, WindowCompleted):
                    completed[instruction.cycle] = instruction.window
                    lowest = min(completed.values())
                    if lowest > committed:
                        committed = lowest
                        crash_point("before-commit", committed)
                        coordinator.commit(committed, writer,
                                           functools.partial(reports.put, _Committed(committed)))
                        outstanding_commits += 1
                elif isinstance(instruction, JobFailed):
                    if failure is None:
                        # Stop, but first let every window that was finishing complete: its
                        # snapshots may be durable already, and completed windows stay completed.
                        failure = instruction.error
                elif isinstance(instruction, CycleFinished):
                    pass
            report = _poll(reports)
            if report is None:
                if failure is None:
                    if (scheduler.finished and not outstanding_commits
                            and not any(r.has_work() for r in runner_list)):
                        break
                    if any([runner.step() for runner in runner_list]):
                        continue
                else:
                    before = getattr(failure, "window", None)
                    if any([runner.drain_step(before) for runner in runner_list]):
                        flush = _Flush.NOT_SENT
                        continue
                    if flush is _Flush.NOT_SENT and min(finished.values()) > committed:
                        # The writer applies operations in order: once this no-op is durable,
                        # every snapshot handed to it before has been acknowledged.
                        flush = _Flush.SENT
                        writer.write(None, functools.partial(reports.put, _Flushed()))
                    elif flush is not _Flush.SENT and not outstanding_commits:
                        raise failure
                # Only snapshot writes are outstanding: wait for the writer to report.
                try:
                    report = reports.get(timeout=300)
                except queue.Empty:
                    if failure is not None:
                        raise failure from None
                    msg = f"job {name!r} stalled: no task has work and no snapshot completed in 300 s"
                    raise RuntimeError(msg) from None
            if isinstance(report, _Committed):
                outstanding_commits -= 1
                durable = report.window
                crash_point("after-commit", report.window)
                for index, task in enumerate(sink_tasks):  # durable: its output may be seen
                    task.publish(report.window)
                    if index == 0:
                        crash_point("mid-publish", report.window)
            elif isinstance(report, _Flushed):
                flush = _Flush.DONE
            elif isinstance(report, _WriterFailed):
                if failure is not None:
                    raise failure  # the first failure is the one to report
                raise self._write_error(report.error, writer, durable, committed)
            elif failure is None:
                pending.extend(scheduler.handle(report))
            else:
                try:
                    pending.extend(scheduler.handle(report))
                except Exception:  # noqa: BLE001 - already failing: report the first failure
                    raise failure from None
        result.seconds = self.clock() - started
        result.last_completed = committed
        self.listener.on_finish(result)
        return result

    def _write_error(self, error: BaseException, writer, durable: int,
                     committed: int) -> SnapshotWriteError:
        """The error for a failed snapshot store: which backend, which window."""
        failed = writer.oldest_pending()
        if failed is None:
            window, committing = (committed, True) if committed > durable else (durable + 1, False)
        else:
            window, committing = failed
        out = SnapshotWriteError(self.state_backend.describe(), window, durable, error, committing)
        out.__cause__ = error
        return out

    def _build_runners(self, graph: ExecutionGraph, report,
                       checkpoints: TaskCheckpoints) -> dict[int, TaskRunner]:
        tasks = graph.tasks()
        by_vertex: dict[int, list] = {}
        for t in tasks:
            by_vertex.setdefault(t.vertex_id, []).append(t)
        cycle_of = {t.id: c.id for c in graph.cycles() for t in c.tasks}
        inputs: dict[int, list[int]] = {t.id: [] for t in tasks}
        links = []
        for edge in graph.edges:
            for s in by_vertex[edge.source]:
                targets = by_vertex[edge.target]
                if edge.partitioning is Partitioning.FORWARD:
                    targets = [targets[s.index]]
                for t in targets:
                    inputs[t.id].append(edge.ordinal)
                    links.append((edge, s, t, len(inputs[t.id]) - 1))
        runners: dict[int, TaskRunner] = {}
        batch_size = self.config["runtime.batch_size"]
        for t in tasks:
            vertex = graph.vertex(t.vertex_id)
            task = task_class_for(vertex)(t, vertex, cycle_of[t.id], inputs[t.id], None,
                                          self.state_backend, batch_size, report, self.clock,
                                          checkpoints)
            runners[t.id] = TaskRunner(task, report)
        delivers: dict[tuple[int, int], list] = {}
        for edge, s, t, channel in links:
            delivers.setdefault((s.id, id(edge)), []).append(runners[t.id].deliverer(channel))
        for t in tasks:
            edges = [OutputEdge(edge.partitioning, delivers.get((t.id, id(edge)), []), edge.key_fn,
                                graph.vertex(edge.target).head.name, t.index)
                     for edge in graph.outputs(t.vertex_id)]
            runners[t.id].task.emitter = EmitterService(edges, self.state_backend.max_parallelism)
        wire_iterations([r.task for r in runners.values()])
        return runners


def _poll(reports: queue.SimpleQueue):
    try:
        return reports.get_nowait()
    except queue.Empty:
        return None
