"""The Spark executor: the same plan and the same cycle scheduler, each window round one Spark job.

Per round (window ``w``), every execution vertex becomes a ``mapPartitionsWithIndex`` stage whose
partition ``i`` runs task ``i`` of the vertex (see ``spark_tasks``). Records leave a task in batches
tagged with the target task index, so a ``key`` edge is a Spark shuffle with gyreflow's key-group
partitioner (``partitionBy`` on the target index); a keyed count or aggregate pre-combines in the
sending task (``spark_combine``). Done events (metrics, collected output, checkpoint acknowledgements)
ride downstream with the data to the tail stages, and one action per round, a ``collect`` of the tail
stages, brings them to the driver, where the scheduler runs. A stage is persisted only when two
downstream vertices read it, so no stage runs or is read twice.

Keyed state lives in the configured backend, by key group, so any Python worker can serve any task: a
task restores its key groups from the backend unless the worker that ran it in the previous round
still holds them (a reused Python worker keeps module state, but partition-to-worker affinity is not
stable, so the cache is only an optimisation). Stores are opened inside the task and closed in
``finally``; on Spark every window's changes are written, because the next round may run anywhere.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from collections import deque
from collections.abc import Callable

import attrs

from gyreflow.plan.execution import ExecutionGraph
from gyreflow.runtime.checkpoint import CheckpointCoordinator, RecoveryOptions
from gyreflow.runtime.faults import crash_point
from gyreflow.runtime.local.host import JobListener
from gyreflow.runtime.metrics import TaskResult, WindowMetrics
from gyreflow.runtime.local.snapshot_writers import SnapshotWriter
from gyreflow.runtime.spark.graph_steps import SparkGraphRunner
from gyreflow.runtime.spark.session import SPARK_LOG, spark_session
from gyreflow.runtime.spark.partition import Round, RunPlan, stage
from gyreflow.scheduler.cycle import JobScheduler
from gyreflow.scheduler.events import (
    Done,
    EventKind,
    JobFailed,
    SendEvents,
    TaskFailed,
    WindowCompleted,
    WindowFinished,
)
from gyreflow.state.backends import RocksDBStateBackend

__all__ = ["SPARK_LOG", "PlanNotShippableError", "SparkExecutor", "spark_session"]

_ACKED = (EventKind.INIT_CYCLE, EventKind.ROLLBACK, EventKind.CLEAN_CYCLE)
PRUNE_EVERY = 10  # commits between two prunes of old versions by the driver


class _DriverWriter(SnapshotWriter):
    """The driver's commits and prunes: one store, opened at the first commit and kept for the run.

    Opening a store per commit cost ~0.3 s per window with RocksDB (databases opened, synced, closed).
    The driver's store only ever opens the job meta, which no task opens; pruning opens the state
    databases that tasks write, so it runs on a store of its own, between rounds, every
    ``PRUNE_EVERY`` commits and at the end (pruning is cumulative: a later horizon covers the earlier
    ones; a resume only returns to retained versions, which pruning keeps).
    """

    def __init__(self, backend) -> None:
        self.backend = backend
        self.store = None
        self.pending: dict[str, tuple[list[int], int]] = {}
        self.commits = 0

    def write(self, snapshot, on_done) -> None:  # tasks write their own snapshots on Spark
        msg = "the Spark driver writes no task snapshots"
        raise NotImplementedError(msg)

    def commit(self, meta, on_done) -> None:
        if self.store is None:
            self.store = self.backend.open_store()
        self.store.commit(meta)
        on_done()
        self.commits += 1
        if self.commits % PRUNE_EVERY == 0:
            self.flush()

    def prune(self, job, crossing, horizon, drop=None) -> None:
        versions, _ = self.pending.get(job, ([], 0))
        self.pending[job] = ([*versions, *crossing], horizon)
        if drop:  # once, after a resume with another parallelism: drop the old layout now
            self._with_store(lambda store: [store.drop_other_ranges(job, table, ranges)
                                            for table, ranges in drop.items()])

    def flush(self) -> None:
        pending, self.pending = self.pending, {}
        jobs = [(job, versions, horizon) for job, (versions, horizon) in pending.items() if versions]
        if jobs:
            self._with_store(lambda store: [store.prune(job, versions, horizon)
                                            for job, versions, horizon in jobs])

    def _with_store(self, action: Callable) -> None:
        store = self.backend.open_store()
        try:
            action(store)
        finally:
            store.close()

    def close(self) -> None:
        try:
            if self.store is not None:
                self.store.close()
                self.store = None
        finally:
            self.flush()


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
        plan = _shippable_plan(name, graph)
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
            return self._drive(spark, name, graph, plan, backend, coordinator, resume_from)
        finally:
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)

    def _drive(self, spark, name, graph, plan, backend, coordinator, resume_from) -> TaskResult:
        sc = spark.sparkContext
        scheduler = JobScheduler(graph.cycles(), self.config["scheduler.max_flying_windows"],
                                 resume_from, backend.snapshot_every)
        run_id = uuid.uuid4().hex
        graphs = SparkGraphRunner(scheduler, graph, _by_index)  # graph vertices: a job per step
        sink_writers = self._sink_writers(graph)
        driver = _DriverWriter(backend)
        shipped = sc.broadcast(plan)  # the plan travels once per run, not in every stage's closure
        result = TaskResult(name)
        sources = tuple(v.name for v in graph.pipeline.sources())
        completed = {cycle: resume_from for cycle in scheduler.cycles}
        committed = resume_from
        started = time.monotonic()
        launched: dict[int, float] = {}
        self.listener.on_start(name, graph)
        pending = deque(scheduler.start())
        windows_to_run: list[int] = []
        try:
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
                        metrics = WindowMetrics.from_dones(name, instruction.cycle,
                                                           instruction.window, seconds,
                                                           instruction.dones, sources)
                        result.windows.append(metrics)
                        result.add_collected(instruction.window, instruction.dones)
                        self.listener.on_window(metrics)
                    elif isinstance(instruction, WindowCompleted):
                        completed[instruction.cycle] = instruction.window
                        lowest = min(completed.values())
                        if lowest > committed:
                            committed = lowest
                            crash_point("before-commit", committed)
                            coordinator.commit(committed, driver, lambda: None)
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
                rescaled = (frozenset(coordinator.rescaled) if window == resume_from + 1
                            else frozenset())
                spec = Round(run_id, shipped, -1, window, backend, self.config["runtime.batch_size"],
                             horizon, rescaled)
                dones = self._run_round(sc, graph, spec, graphs)
                pending.extend(graphs.take_instructions())
                for event in dones:
                    pending.extend(scheduler.handle(event))
        except BaseException:
            # The job failed: clean up without letting a clean-up error hide why it failed.
            for action in (graphs.close, driver.close, shipped.destroy):
                _quietly(action)
            raise
        graphs.close()
        driver.close()
        _quietly(shipped.destroy)
        for writer in sink_writers:
            writer.close()
        result.seconds = time.monotonic() - started
        result.last_completed = committed
        self.listener.on_finish(result)
        return result

    def _run_round(self, sc, graph: ExecutionGraph, template: Round,
                   graphs: SparkGraphRunner | None = None) -> list:
        """One Spark job for one window: a stage per execution vertex, one collect of Done events."""
        outputs = {}
        persisted = []
        tails = []
        for vertex in _vertex_order(graph):
            spec = attrs.evolve(template, vertex_id=vertex.id)
            upstream = sorted({e.source for e in graph.inputs(vertex.id)})
            if not upstream:  # one element per slice: partition i runs task i, no shuffle
                base = sc.parallelize([(i, None) for i in range(vertex.parallelism)],
                                      vertex.parallelism)
            else:
                parts = [_read(outputs[u], vertex.id, _consumers(graph, u)) for u in upstream]
                base = (parts[0] if len(parts) == 1 else sc.union(parts)).partitionBy(
                    vertex.parallelism, _by_index)
            if graphs is not None and graphs.handles(vertex):
                rdd = graphs.run(sc, vertex, base, spec)
            else:
                rdd = base.mapPartitionsWithIndex(stage(spec))
            consumers = _consumers(graph, vertex.id)
            if consumers > 1:  # read by two downstream stages: run it once
                rdd.persist()
                persisted.append(rdd)
            elif not consumers:
                tails.append(rdd)
            outputs[vertex.id] = rdd
        try:
            dones = (tails[0] if len(tails) == 1 else sc.union(tails)).map(_payload).collect()
        finally:
            for rdd in persisted:
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


def _quietly(action: Callable) -> None:
    try:
        action()
    except Exception:  # noqa: BLE001, S110 - best effort clean-up
        pass


class PlanNotShippableError(TypeError):
    """A pipeline holds an object that cannot be sent to Spark executors."""


def _shippable_plan(name: str, graph: ExecutionGraph) -> bytes:
    """The run's plan, pickled for the executors; fails before any data moves if it cannot be."""
    from pyspark import cloudpickle

    for vertex in graph.pipeline.vertices:
        sink = getattr(vertex.spec, "sink", None)
        if getattr(sink, "in_process_only", False):
            msg = (f"job {name!r}: operator {vertex.name!r} cannot be sent to Spark executors: "
                   f"{sink.describe()} writes to an object of this process; use it with the local "
                   "environment (--env local), or leave its stream unset to print on the executors")
            raise PlanNotShippableError(msg)
    try:
        return cloudpickle.dumps(RunPlan.build(name, graph))
    except Exception as exc:  # noqa: BLE001 - any pickling failure: name the operator
        for vertex in graph.pipeline.vertices:
            try:
                cloudpickle.dumps(vertex.spec)
            except Exception as found:  # noqa: BLE001
                msg = (
                    f"job {name!r}: operator {vertex.name!r} cannot be sent to Spark executors "
                    f"({type(found).__name__}: {found}). Sources, sinks and functions must be "
                    "picklable: in-memory streams, open files and locks work only with the local "
                    "environment (--env local)"
                )
                raise PlanNotShippableError(msg) from found
        msg = f"job {name!r}: its plan cannot be sent to Spark executors ({type(exc).__name__}: {exc})"
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


def _consumers(graph: ExecutionGraph, vertex_id: int) -> int:
    return len({e.target for e in graph.outputs(vertex_id)})


def _read(rdd, vertex_id: int, consumers: int):
    """The items of ``rdd`` addressed to ``vertex_id``, keyed by target task index. Without a
    persist, PySpark pipelines this into the producing stage's Python pass."""
    if consumers > 1:
        rdd = rdd.filter(_for_vertex(vertex_id))
    return rdd.map(_keyed)


def _by_index(index: int) -> int:
    return index


def _for_vertex(vertex_id: int):
    return lambda item: item[0] == vertex_id


def _keyed(item):
    return item[1], item[2]


def _payload(item):
    return item[2]
