"""The Spark executor: the same plan and the same cycle scheduler, each window round one Spark job.

Per round (window ``w``), every execution vertex becomes a ``mapPartitionsWithIndex`` stage whose
partition ``i`` runs task ``i`` of the vertex: the Task, its Worker, FetchService and EmitterService
are the local runtime's own. Records leave a task in batches tagged with the target task index, so a
``key`` edge is a Spark shuffle with gyreflow's key-group partitioner (``partitionBy`` on the target
index). One action per round collects the tasks' Done events (metrics, collected output, checkpoint
acknowledgements) back to the driver, where the scheduler runs.

Keyed state lives in the configured backend, by key group, so any Python worker can serve any task: a
task restores its key groups from the backend unless the worker that ran it in the previous round
still holds them (a reused Python worker keeps module state, but partition-to-worker affinity is not
stable, so the cache is only an optimisation). Stores are opened inside the task and closed in
``finally``; on Spark every window's changes are written, because the next round may run anywhere.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections import deque
from collections.abc import Callable

import attrs

from gyreflow.plan.execution import ExecutionGraph
from gyreflow.plan.graph import Partitioning
from gyreflow.runtime.checkpoint import CheckpointCoordinator, RecoveryOptions
from gyreflow.runtime.emitter import EmitterService, OutputEdge
from gyreflow.runtime.faults import crash_point
from gyreflow.runtime.local_executor import JobListener
from gyreflow.runtime.metrics import TaskResult, WindowMetrics
from gyreflow.runtime.snapshot_writers import InlineSnapshotWriter
from gyreflow.runtime.task import Task, TaskCheckpoints
from gyreflow.runtime.task_runner import Dispatcher, TaskError, TaskRunner
from gyreflow.scheduler.cycle import JobScheduler
from gyreflow.scheduler.events import (
    Done,
    EventKind,
    JobFailed,
    LaunchSource,
    SendEvents,
    TaskFailed,
    WindowCompleted,
    WindowFinished,
)
from gyreflow.state.backends import RocksDBStateBackend

_DONE = -1  # target vertex of items that carry a Done event to the driver
_ACKED = (EventKind.INIT_CYCLE, EventKind.ROLLBACK, EventKind.CLEAN_CYCLE)


@attrs.frozen(eq=False)
class _Round:
    """What a Spark task needs to run its part of one window round (pickled with the closure)."""

    job: str
    run_id: str
    graph: ExecutionGraph
    vertex_id: int
    window: int
    backend: object
    batch_size: int
    cycle_of: dict[int, int]
    channels: dict[int, list[tuple[int, int, int, int]]]  # task id -> [(edge, target vertex, idx, ch)]
    ordinals: dict[int, list[int]]  # task id -> input ordinals by channel
    horizon: int = 0  # the oldest retained version: older versions are trimmed as keys are written
    rescaled: frozenset[str] = frozenset()


class _Holder:
    """Per-task mutable slots the task's callbacks write into; swapped every round."""

    def __init__(self) -> None:
        self.out: list = []
        self.dones: list = []
        self.seq = itertools.count()


class _RoundWriter(InlineSnapshotWriter):
    """An inline writer whose store is opened for one round and closed in ``finally``."""

    def __init__(self) -> None:
        super().__init__(None, lambda exc: None)


# A reused Python worker keeps these between rounds: (run id, vertex, index) -> (task, holder, window).
_TASKS: dict[tuple[str, int, int], tuple[Task, _Holder, int]] = {}


def _build_task(spec: _Round, index: int) -> tuple[Task, _Holder]:
    graph = spec.graph
    vertex = graph.vertex(spec.vertex_id)
    task_spec = next(t for t in graph.tasks() if t.vertex_id == vertex.id and t.index == index)
    holder = _Holder()
    writer = _RoundWriter()
    checkpoints = TaskCheckpoints(spec.job, None, writer, 1, frozenset())
    task = Task(task_spec, vertex, spec.cycle_of[task_spec.id], spec.ordinals[task_spec.id], None,
                spec.backend, spec.batch_size, lambda event: holder.dones.append(event),
                time.monotonic, checkpoints)

    def deliverer(target_vertex: int, target_index: int, channel: int):
        def deliver(message) -> None:
            holder.out.append((target_vertex, target_index, (channel, next(holder.seq), message)))
        return deliver

    by_edge: dict[int, list] = {}
    for edge_index, target_vertex, target_index, channel in spec.channels[task_spec.id]:
        by_edge.setdefault(edge_index, []).append(deliverer(target_vertex, target_index, channel))
    outputs = graph.outputs(vertex.id)
    edges = [OutputEdge(edge.partitioning, by_edge.get(i, []), edge.key_fn,
                        graph.vertex(edge.target).head.name, index)
             for i, edge in enumerate(outputs)]
    task.emitter = EmitterService(edges, spec.backend.max_parallelism)
    task.create()
    return task, holder


def _run_partition(spec: _Round, index: int, messages) -> list:
    """Run task ``index`` of ``spec.vertex_id`` for window ``spec.window`` inside a Spark task."""
    window = spec.window
    key = (spec.run_id, spec.vertex_id, index)
    for stale in [k for k in _TASKS if k[0] != spec.run_id]:
        _close_quietly(_TASKS.pop(stale)[0])
    cached = _TASKS.pop(key, None)
    fresh = cached is None or cached[2] != window - 1
    if fresh:
        task, holder = _build_task(spec, index)
    else:
        task, holder, _ = cached
    holder.out, holder.dones = [], []
    writer = task.checkpoints.writer
    store = spec.backend.open_store()
    writer.store = store
    # The local runtime's own pieces run the task: a Dispatcher routes the round's LaunchSource to
    # the task's TaskRunner, whose queue also holds the channel messages fetched for this task.
    runner = TaskRunner(task, holder.dones.append)
    dispatcher = Dispatcher({task.spec.id: runner})
    try:
        task.ctx.window = window
        task.last_snapshot = window - 1
        task.checkpoints = attrs.evolve(task.checkpoints, store=store, horizon=spec.horizon,
                                        rescaled=spec.rescaled if fresh else frozenset())
        if fresh and window > 1:
            task.rollback(window - 1, recover_sinks=False)
        # Channels that ended in an earlier round end again, for tasks that start fresh downstream.
        if task.source_reader is not None and task.exhausted:
            task.emitter.end_of_input()
        elif task.source_reader is None and task.worker.ended and not fresh:
            task.emitter.end_of_input()
        runner.inbox.extend((channel, message) for channel, _seq, message
                            in sorted(messages, key=lambda m: (m[0], m[1])))
        if task.source_reader is not None:
            dispatcher.dispatch(LaunchSource(task.cycle, task.spec.id, window))
        while runner.step():
            pass
        finished = task.ctx.window > window or task.worker.ended or task.exhausted
        if runner.failed or not finished:
            # Without a failure here, an unfinished window means an upstream task failed (every
            # healthy round brings each task its barrier): drop what this task staged of it.
            _close_quietly(task)
        else:
            _TASKS[key] = (task, holder, window)
    except Exception as exc:  # noqa: BLE001 - restoring failed: reported to the driver
        _close_quietly(task)
        error = TaskError(f"task {task.name!r} failed to restore window {window - 1}: "
                          f"{type(exc).__name__}: {exc}")
        holder.dones.append(TaskFailed(task.cycle, task.spec.id, window, error))
    finally:
        store.close()
        writer.store = None
    items = [(tv, ti, payload) for tv, ti, payload in holder.out]
    items.extend((_DONE, 0, event) for event in holder.dones)
    return items


def _close_quietly(task: Task) -> None:
    try:
        task.destroy()
    except Exception:  # noqa: BLE001, S110 - best effort: the task is being dropped
        pass


def _link_channels(graph: ExecutionGraph):
    """For every task: its input ordinals by channel, and where each of its outputs goes."""
    tasks = graph.tasks()
    by_vertex: dict[int, list] = {}
    for t in tasks:
        by_vertex.setdefault(t.vertex_id, []).append(t)
    ordinals: dict[int, list[int]] = {t.id: [] for t in tasks}
    channels: dict[int, list[tuple[int, int, int, int]]] = {t.id: [] for t in tasks}
    for edge in graph.edges:
        edge_index = graph.outputs(edge.source).index(edge)
        for s in by_vertex[edge.source]:
            targets = by_vertex[edge.target]
            if edge.partitioning is Partitioning.FORWARD:
                targets = [targets[s.index]]
            for t in targets:
                ordinals[t.id].append(edge.ordinal)
                channel = len(ordinals[t.id]) - 1
                channels[s.id].append((edge_index, edge.target, t.index, channel))
    return ordinals, channels


class SparkExecutor:
    """Runs an execution graph on Spark: the driver runs the scheduler, each round is a Spark job."""

    def __init__(self, config, state_backend, session_factory: Callable[[], object],
                 listener: JobListener | None = None) -> None:
        self.config = config
        self.state_backend = state_backend
        self.session_factory = session_factory
        self.listener = listener or JobListener()

    def run(self, name: str, graph: ExecutionGraph,
            recovery: RecoveryOptions | None = None) -> TaskResult:
        """Run ``graph`` to the end of its input on Spark and return its result."""
        _check_shippable(name, graph)
        backend = self.state_backend
        scratch = None
        if backend.name == "memory":
            # Spark tasks run in other processes: memory state is kept in a scratch RocksDB that
            # lives as long as this run (so it survives nothing, like the memory backend).
            scratch = tempfile.mkdtemp(prefix="gyreflow-spark-state-")
            backend = RocksDBStateBackend(backend.max_parallelism, backend.snapshot_every,
                                          backend.retained_snapshots, path=scratch)
        store = backend.open_store()
        try:
            coordinator = CheckpointCoordinator(name, graph, store, backend)
            resume_from = coordinator.prepare(recovery or RecoveryOptions())
        finally:
            store.close()
        try:
            spark = self.session_factory()
            return self._drive(spark, name, graph, backend, coordinator, resume_from)
        finally:
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)

    def _driver_store(self, backend, action: Callable) -> None:
        store = backend.open_store()
        try:
            action(store)
        finally:
            store.close()

    def _drive(self, spark, name, graph, backend, coordinator, resume_from) -> TaskResult:
        sc = spark.sparkContext
        scheduler = JobScheduler(graph.cycles(), self.config["scheduler.max_flying_windows"],
                                 resume_from, backend.snapshot_every)
        ordinals, channels = _link_channels(graph)
        cycle_of = {t.id: c.id for c in graph.cycles() for t in c.tasks}
        run_id = uuid.uuid4().hex
        sink_writers = self._sink_writers(graph)
        result = TaskResult(name)
        sources = tuple(v.name for v in graph.pipeline.sources())
        completed = {cycle: resume_from for cycle in scheduler.cycles}
        committed = resume_from
        started = time.monotonic()
        launched: dict[int, float] = {}
        self.listener.on_start(name, graph)
        pending = deque(scheduler.start())
        windows_to_run: list[int] = []
        while True:
            while pending:
                instruction = pending.popleft()
                if isinstance(instruction, SendEvents):
                    for event in instruction.events:
                        if event.kind is EventKind.LAUNCH_SOURCE:
                            if event.window not in windows_to_run:
                                windows_to_run.append(event.window)
                                launched.setdefault(event.window, time.monotonic())
                        elif event.kind is EventKind.ROLLBACK:
                            for writer in sink_writers:
                                writer.recover(event.window)
                            pending.extend(scheduler.handle(
                                Done(event.cycle, event.task, event.window, event.kind)))
                        elif event.kind in _ACKED:
                            pending.extend(scheduler.handle(
                                Done(event.cycle, event.task, event.window, event.kind)))
                elif isinstance(instruction, WindowFinished):
                    crash_point("window-finished", instruction.window)
                    seconds = time.monotonic() - launched.pop(instruction.window, started)
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

                        def commit(store, window=committed):
                            writer = InlineSnapshotWriter(store, _raise)
                            coordinator.commit(window, writer, lambda: None)

                        self._driver_store(backend, commit)
                        crash_point("after-commit", committed)
                        for index, writer in enumerate(sink_writers):
                            writer.publish(committed)
                            if index == 0:
                                crash_point("mid-publish", committed)
                elif isinstance(instruction, JobFailed):
                    raise instruction.error
            if scheduler.finished:
                break
            if not windows_to_run:
                msg = f"job {name!r} stalled: the scheduler launched no window and did not finish"
                raise RuntimeError(msg)
            window = windows_to_run.pop(0)
            horizon = coordinator.retained[0] if coordinator.retained else 0
            rescaled = frozenset(coordinator.rescaled) if window == resume_from + 1 else frozenset()
            for event in self._run_round(sc, _Round(
                    name, run_id, graph, -1, window, backend, self.config["runtime.batch_size"],
                    cycle_of, channels, ordinals, horizon, rescaled)):
                pending.extend(scheduler.handle(event))
        for writer in sink_writers:
            writer.close()
        result.seconds = time.monotonic() - started
        result.last_completed = committed
        self.listener.on_finish(result)
        return result

    def _run_round(self, sc, template: _Round) -> list:
        """One Spark job for one window: a stage per execution vertex, one collect of Done events."""
        graph = template.graph
        outputs = {}
        order = _vertex_order(graph)
        for vertex in order:
            spec = attrs.evolve(template, vertex_id=vertex.id)
            upstream = sorted({e.source for e in graph.inputs(vertex.id)})
            if not upstream:  # one element per slice: partition i runs task i, no shuffle
                base = sc.parallelize([(i, None) for i in range(vertex.parallelism)],
                                      vertex.parallelism)
            else:
                parts = [outputs[u].filter(_for_vertex(vertex.id)).map(_keyed) for u in upstream]
                base = (parts[0] if len(parts) == 1 else sc.union(parts)).partitionBy(
                    vertex.parallelism, _by_index)
            stage = base.mapPartitionsWithIndex(_stage(spec)).persist()
            outputs[vertex.id] = stage
        try:
            done_rdds = [rdd.filter(_for_vertex(_DONE)).map(_payload) for rdd in outputs.values()]
            dones = sc.union(done_rdds).collect()
        finally:
            for rdd in outputs.values():
                rdd.unpersist(blocking=False)
        failures = [d for d in dones if isinstance(d, TaskFailed)]
        if failures:
            return [failures[0]]
        return dones

    def _sink_writers(self, graph: ExecutionGraph) -> list:
        """Driver-side writers of every sink task: they publish and recover staged output."""
        writers = []
        for vertex in graph.pipeline.vertices:
            sink = getattr(vertex.spec, "sink", None)
            if sink is not None:
                writers.extend(sink.create_writer(i, vertex.parallelism)
                               for i in range(vertex.parallelism))
        return writers


def _raise(exc: BaseException) -> None:
    raise exc


class PlanNotShippableError(TypeError):
    """A pipeline holds an object that cannot be sent to Spark executors."""


def _check_shippable(name: str, graph: ExecutionGraph) -> None:
    """Fail before any data moves if an operator cannot be pickled for the executors."""
    from pyspark import cloudpickle

    for vertex in graph.pipeline.vertices:
        sink = getattr(vertex.spec, "sink", None)
        if getattr(sink, "in_process_only", False):
            msg = (f"job {name!r}: operator {vertex.name!r} cannot be sent to Spark executors: "
                   f"{sink.describe()} writes to an object of this process; use it with the local "
                   "environment (--env local), or leave its stream unset to print on the executors")
            raise PlanNotShippableError(msg)
        try:
            cloudpickle.dumps(vertex.spec)
        except Exception as exc:  # noqa: BLE001 - any pickling failure
            msg = (
                f"job {name!r}: operator {vertex.name!r} cannot be sent to Spark executors "
                f"({type(exc).__name__}: {exc}). Sources, sinks and functions must be picklable: "
                "in-memory streams, open files and locks work only with the local environment "
                "(--env local)"
            )
            raise PlanNotShippableError(msg) from exc


def _vertex_order(graph: ExecutionGraph):
    order, seen = [], set()
    remaining = list(graph.vertices)
    while remaining:
        for vertex in remaining:
            if all(e.source in seen for e in graph.inputs(vertex.id)):
                order.append(vertex)
                seen.add(vertex.id)
                remaining.remove(vertex)
                break
    return order


def _by_index(index: int) -> int:
    return index


def _for_vertex(vertex_id: int):
    return lambda item: item[0] == vertex_id


def _keyed(item):
    return item[1], item[2]


def _payload(item):
    return item[2]


def _stage(spec: _Round):
    def run(index: int, iterator):
        messages = [payload for _, payload in iterator if payload is not None]
        return iter(_run_partition(spec, index, messages))

    return run


def spark_session(config) -> Callable[[], object]:
    """A factory for the SparkSession that ``config``'s ``[spark]`` keys describe (created once)."""
    cached: list = []

    def factory():
        if cached:
            return cached[0]
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        _share_import_path()
        from pyspark.sql import SparkSession

        builder = (SparkSession.builder.master(config["spark.master"])
                   .appName(config["spark.app_name"])
                   .config("spark.ui.showConsoleProgress", "false")
                   .config("spark.python.worker.reuse", "true")
                   # Tasks read their state from the backend, not from cached blocks: waiting
                   # for a block-local slot (3 s by default) only delays each round.
                   .config("spark.locality.wait", "0"))
        for key, value in config["spark.conf"]:
            builder = builder.config(key, value)
        with _jvm_output_to(SPARK_LOG):
            session = builder.getOrCreate()
        session.sparkContext.setLogLevel("ERROR")
        cached.append(session)
        return session

    return factory


SPARK_LOG = os.path.join(tempfile.gettempdir(), "gyreflow-spark.log")


def _share_import_path() -> None:
    """Let Python workers import what the driver imports from its own folders.

    cloudpickle pickles functions and classes of importable modules by reference, so a worker must be
    able to import the pipeline script's modules. Python workers inherit the driver's environment
    (through the JVM), so the driver's non-interpreter ``sys.path`` entries go into ``PYTHONPATH``.
    """
    prefixes = tuple({os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)})
    own = [p for p in (os.path.abspath(entry or os.curdir) for entry in sys.path)
           if os.path.isdir(p) and not os.path.realpath(p).startswith(prefixes)]
    existing = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(own + existing))


@contextlib.contextmanager
def _jvm_output_to(path: str):
    """Start the JVM with its standard error in ``path``: Spark's start-up chatter (log4j, JVM
    warnings) stays out of the user's terminal; gyreflow reports task failures itself."""
    sys.stderr.flush()
    saved = os.dup(2)
    log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(log, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(log)
