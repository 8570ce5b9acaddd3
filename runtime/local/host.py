"""The in-process host: every task of a job runs in this process, stepped cooperatively.

A Dispatcher routes the driver's events to TaskRunners (one queue each); each TaskRunner handles one
queued item per turn, so results do not depend on thread timing and nothing is pickled. Snapshots are
written by a child process (or inline for the memory backend) while the next windows compute.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable

from gyreflow.plan.execution import ExecutionGraph
from gyreflow.plan.operators import OperatorKind
from gyreflow.runtime.dataflow.channels import link_channels
from gyreflow.runtime.dataflow.combine import COUNT, build_emitter, combine_kinds, takes_combined
from gyreflow.runtime.dataflow.task import Task, TaskCheckpoints
from gyreflow.runtime.dataflow.task_runner import Dispatcher, TaskRunner
from gyreflow.runtime.errors import SnapshotWriteError
from gyreflow.runtime.host import HostLink
from gyreflow.runtime.snapshot_writers import InlineSnapshotWriter, ProcessSnapshotWriter


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


class LocalHost:
    """Runs every task of a job in this process."""

    name = "local"

    def __init__(self, config, backend, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.backend = backend
        self.clock = clock
        self.runners: dict[int, TaskRunner] = {}
        self._runner_list: list[TaskRunner] = []
        self._writer: _WatchedWriter | None = None
        self._store = None
        self._sinks: list = []

    @property
    def writer(self) -> _WatchedWriter:
        """The job's snapshot writer."""
        return self._writer

    def open(self, job: str, graph: ExecutionGraph, store, link: HostLink, resume_from: int,
             rescaled: frozenset[str], horizon: int, cycle_ends=None) -> None:
        """Build every task's runner; tasks restore from ``store`` (in this process) before the
        writer process opens it for their first snapshot."""
        self._store = store
        if self.backend.name == "memory":
            writer = InlineSnapshotWriter(store, link.writer_failed)
        else:
            # The parent reads the store to resume; the writer process owns it from its first write.
            writer = ProcessSnapshotWriter(self.backend, link.writer_failed, before_start=store.close)
        self._writer = _WatchedWriter(writer)
        checkpoints = TaskCheckpoints(job, store, self._writer, False, rescaled,
                                      cycle_ends=dict(cycle_ends or {}))
        self.runners = self._build_runners(graph, link.report, checkpoints)
        self._runner_list = list(self.runners.values())
        self._dispatcher = Dispatcher(self.runners)
        self._sinks = [r.task for r in self._runner_list
                       if any(v.spec.kind.value == "sink" for v in r.task.vertex.chain)]

    def send(self, events) -> None:
        """Queue each event at its task's runner."""
        dispatch = self._dispatcher.dispatch
        for event in events:
            dispatch(event)

    def control(self, window: int, controls) -> None:
        """Every task keeps the controls until it starts ``window``."""
        for runner in self._runner_list:
            runner.task.take_controls(controls)

    def step(self) -> bool:
        """One turn of every runner; False when none had work."""
        return any([runner.step() for runner in self._runner_list])

    def drain_step(self, before: int | None) -> bool:
        """One draining turn of every runner (see ``TaskRunner.drain_step``)."""
        return any([runner.drain_step(before) for runner in self._runner_list])

    def has_work(self) -> bool:
        """Whether a runner has queued items or source work."""
        return any(r.has_work() for r in self._runner_list)

    def publishers(self):
        """The sink tasks' publish functions."""
        return [task.publish for task in self._sinks]

    def describe_write_failure(self, error: BaseException, durable: int,
                               committed: int) -> SnapshotWriteError:
        """The error for a failed snapshot store: which backend, which window."""
        failed = self._writer.oldest_pending()
        if failed is None:
            window, committing = (committed, True) if committed > durable else (durable + 1, False)
        else:
            window, committing = failed
        out = SnapshotWriteError(self.backend.describe(), window, durable, error, committing)
        out.__cause__ = error
        return out

    def close(self, failed: bool) -> None:
        """Destroy every task (best effort), close the writer and the store."""
        for runner in self._runner_list:
            if runner.task.ctx is not None:
                try:
                    runner.task.destroy()
                except Exception:  # noqa: BLE001, S110 - best effort on the way out
                    pass
        if self._writer is not None:
            self._writer.close()
        if self._store is not None and self.backend.name != "memory":
            self._store.close()

    def _build_runners(self, graph: ExecutionGraph, report,
                       checkpoints: TaskCheckpoints) -> dict[int, TaskRunner]:
        tasks = graph.tasks()
        cycle_of = {t.id: c.id for c in graph.cycles() for t in c.tasks}
        inputs, links = link_channels(graph)
        runners: dict[int, TaskRunner] = {}
        batch_size = self.config["runtime.batch_size"]
        task_class_for = _task_classes(graph)
        for t in tasks:
            vertex = graph.vertex(t.vertex_id)
            task = task_class_for(vertex)(t, vertex, cycle_of[t.id], inputs[t.id], None,
                                          self.backend, batch_size, report, self.clock,
                                          checkpoints)
            runners[t.id] = TaskRunner(task, report)
        delivers: dict[tuple[int, int], list] = {}
        for edge, s, t, channel in links:
            delivers.setdefault((s.id, id(edge)), []).append(runners[t.id].deliverer(channel))
        kinds = counts_split_by_key(graph)
        for t in tasks:
            by_edge = {i: delivers.get((t.id, id(edge)), [])
                       for i, edge in enumerate(graph.outputs(t.vertex_id))}
            task = runners[t.id].task
            task.emitter = build_emitter(graph, t.vertex_id, t.index, by_edge, kinds,
                                         self.backend.max_parallelism)
            task.combined_input = takes_combined(graph, t.vertex_id, kinds)
        if task_class_for is not _plain_task:
            from gyreflow.runtime.dataflow.iteration import wire_iterations

            wire_iterations([r.task for r in runners.values()])
        return runners


def _plain_task(vertex) -> type[Task]:
    return Task


def _task_classes(graph: ExecutionGraph):
    """``task_class_for`` of ``graph``: the iteration module (graph operators, supersteps) is imported
    only by a graph with an iteration in it."""
    if all(v.kind is not OperatorKind.ITERATION for vertex in graph.vertices for v in vertex.chain):
        return _plain_task
    from gyreflow.runtime.dataflow.iteration import task_class_for

    return task_class_for


def counts_split_by_key(graph: ExecutionGraph) -> dict[tuple[int, int], str]:
    """The key edges into a keyed ``count`` of more than one task, which count in the sending task
    (``combine.CountCombiner``): without it, every record is routed to its key's task one at a time
    in Python (the key's group looked up per record); with it, the records are counted by
    ``Counter.update`` (C) and only a window's distinct keys are routed. Other combining edges
    (aggregates, associative reduces) pass their records on in this process: their user functions
    run in the task of the operator that names them."""
    return {(vertex, index): kind for (vertex, index), kind in combine_kinds(graph).items()
            if kind == COUNT
            and graph.vertex(graph.outputs(vertex)[index].target).parallelism > 1}

