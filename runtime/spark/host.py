"""The Spark host: the job driver's events run on Spark, each window round one Spark job.

Per round (window ``w``), every execution vertex becomes a ``mapPartitionsWithIndex`` stage whose
partition ``i`` runs task ``i`` of the vertex (see ``partition``). Records leave a task in batches
tagged with the target task index, so a ``key`` edge is a Spark shuffle with gyreflow's key-group
partitioner (``partitionBy`` on the target index); a keyed count or aggregate pre-combines in the
sending task (``combine``). Done events (metrics, collected output, checkpoint acknowledgements)
ride downstream with the data to the tail stages, and one action per round, a ``collect`` of the tail
stages, brings them to the driver, where the scheduler runs. A stage is persisted only when two
downstream vertices read it, so no stage runs or is read twice. Lifecycle events (create, roll back,
initialise, clean) run in a small control job whose tasks acknowledge what they did.

Keyed state lives in the configured backend, by key group, so any Python worker can serve any task: a
task restores its key groups from the backend unless the worker that ran it in the previous round
still holds them (a reused Python worker keeps module state, but partition-to-worker affinity is not
stable, so the cache is only an optimisation). Stores are opened inside the task and closed in
``finally``; on Spark every window's changes are written, because the next round may run anywhere.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections import deque
from collections.abc import Callable

import attrs

from gyreflow.plan.execution import ExecutionGraph
from gyreflow.runtime.errors import PlanNotShippableError, SnapshotWriteError
from gyreflow.runtime.host import HostLink
from gyreflow.runtime.snapshot_writers import SnapshotWriter
from gyreflow.runtime.spark.graph_steps import SparkGraphRunner
from gyreflow.runtime.spark.partition import Round, RunPlan, control_stage, stage
from gyreflow.runtime.spark.session import spark_log_path, spark_session
from gyreflow.runtime.spark.shipping import explain_unpicklable
from gyreflow.scheduler.events import EventKind, TaskFailed
from gyreflow.state.backends import RocksDBStateBackend

__all__ = ["PlanNotShippableError", "SparkHost", "spark_log_path", "spark_session"]

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

    def write(self, snapshot, on_done) -> None:
        if snapshot is not None:  # tasks write their own snapshots on Spark
            msg = "the Spark driver writes no task snapshots"
            raise NotImplementedError(msg)
        on_done()  # nothing is in flight between rounds

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


class SparkHost:
    """Runs a job's tasks on Spark for the driver: each window a Spark job (a round), each batch of
    lifecycle events a small control job whose tasks acknowledge what they did."""

    name = "spark"

    def __init__(self, config, backend, session_factory: Callable[[], object]) -> None:
        self.config = config
        self.session_factory = session_factory
        self._scratch = None
        if backend.name == "memory":
            # Spark tasks run in other processes: memory state is kept in a scratch RocksDB that
            # lives as long as this run (so it survives nothing, like the memory backend).
            self._scratch = tempfile.mkdtemp(prefix="gyreflow-spark-state-")
            backend = RocksDBStateBackend(backend.max_parallelism, backend.snapshot_every,
                                          backend.retained_snapshots, path=self._scratch)
        self.backend = backend
        self._writer: _DriverWriter | None = None
        self._windows: deque[tuple[int, bool]] = deque()  # launched windows: (window, snapshot it)
        self._control: list = []  # lifecycle events for the next control job
        self._destroy: list = []  # DestroyTask events, carried out when the host closes
        self._sink_writers: list = []
        self._graphs: SparkGraphRunner | None = None
        self._shipped = None
        self._sc = None

    @property
    def writer(self) -> _DriverWriter:
        """The driver's commits and prunes (tasks write their own snapshots inside Spark tasks)."""
        return self._writer

    def open(self, job: str, graph: ExecutionGraph, store, link: HostLink, resume_from: int,
             rescaled: frozenset[str], horizon: int, cycle_ends=None) -> None:
        """Ship the plan once (a broadcast). The driver's store is closed: it may hold state
        databases open that the tasks open next, in other processes."""
        store.close()
        plan = _shippable_plan(job, graph)  # fails before any data moves
        self._writer = _DriverWriter(self.backend)
        self.graph = graph
        self.link = link
        self.resume_from = resume_from
        self.rescaled = rescaled
        self.horizon = horizon
        self.cycle_ends = tuple(sorted((cycle_ends or {}).items()))
        self._sc = self.session_factory().sparkContext
        self._shipped = self._sc.broadcast(plan)  # travels once per run, not in every closure
        self._run_id = uuid.uuid4().hex
        self._graphs = SparkGraphRunner(link, graph, _by_index)  # graph vertices: a job per step
        self._sink_writers = _sink_writers(graph)
        self._task_of = {t.id: (t.vertex_id, t.index) for t in graph.tasks()}

    def send(self, events) -> None:
        """Queue launched windows for their rounds, iteration events for the graph runner and
        lifecycle events for the next control job."""
        for event in events:
            if event.kind is EventKind.LAUNCH_SOURCE:
                if all(window != event.window for window, _ in self._windows):
                    self._windows.append((event.window, event.checkpoint))
            elif self._graphs.takes(event):
                continue
            elif event.kind is EventKind.DESTROY_TASK:
                self._destroy.append(event)
            else:
                self._control.append(event)

    def step(self) -> bool:
        """Run the queued lifecycle events (one control job) or the next window (one round)."""
        if self._control:
            events, self._control = self._control, []
            self._report(self._run_control(events))
            return True
        if self._windows:
            window, checkpoint = self._windows.popleft()
            self._report(self._run_round(window, checkpoint))
            return True
        return False

    def drain_step(self, before: int | None) -> bool:
        """Rounds run to their end: once the job fails, nothing is in flight and nothing starts."""
        self._windows.clear()
        self._control.clear()
        return False

    def has_work(self) -> bool:
        """Whether a window or lifecycle events wait to run."""
        return bool(self._windows or self._control)

    def publishers(self):
        """The sinks' writers, on the driver: they make a committed window's staged output visible."""
        return [writer.publish for writer in self._sink_writers]

    def describe_write_failure(self, error: BaseException, durable: int,
                               committed: int) -> SnapshotWriteError:
        """The error for a failed commit (the driver's only writes)."""
        out = SnapshotWriteError(self.backend.describe(), committed, durable, error, True)
        out.__cause__ = error
        return out

    def close(self, failed: bool) -> None:
        """Close the tasks the workers hold, release cached RDDs, the writer and the scratch state."""
        actions = []
        if self._destroy and not failed:
            actions.append(lambda: self._run_control(self._destroy))
        if self._graphs is not None:
            actions.append(self._graphs.close)
        if self._writer is not None:
            actions.append(self._writer.close)
        if self._shipped is not None:
            actions.append(self._shipped.destroy)
        if not failed:
            actions.extend(writer.close for writer in self._sink_writers)
        try:
            for action in actions:
                if failed:
                    _quietly(action)  # a clean-up error must not hide why the job failed
                else:
                    action()
        finally:
            if self._scratch is not None:
                shutil.rmtree(self._scratch, ignore_errors=True)

    # Spark jobs -----------------------------------------------------------------------------

    def _report(self, events) -> None:
        for event in events:
            self.link.report(event)

    def _spec(self, window: int, checkpoint: bool = True) -> Round:
        rescaled = self.rescaled if window in (self.resume_from, self.resume_from + 1) else frozenset()
        return Round(self._run_id, self._shipped, -1, window, self.backend,
                     self.config["runtime.batch_size"], self.horizon, rescaled, checkpoint,
                     self.cycle_ends)

    def _run_control(self, events) -> list:
        """One Spark job carrying out lifecycle events in the tasks; returns their acknowledgements."""
        by_task: dict[int, list] = {}
        for event in events:
            by_task.setdefault(event.task, []).append(event)
        items = [(*self._task_of[task], tuple(queued)) for task, queued in by_task.items()]
        slices = max(1, min(len(items), self._sc.defaultParallelism))
        spec = self._spec(max(event.window for event in events))
        acks = self._sc.parallelize(items, slices).mapPartitions(control_stage(spec)).collect()
        failures = [a for a in acks if isinstance(a, TaskFailed)]
        return failures[:1] if failures else acks

    def _run_round(self, window: int, checkpoint: bool) -> list:
        """One Spark job for one window: a stage per execution vertex, one collect of Done events."""
        sc, graph, graphs = self._sc, self.graph, self._graphs
        template = self._spec(window, checkpoint)
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
            if graphs.handles(vertex):
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
        return failures[:1] if failures else dones


def _sink_writers(graph: ExecutionGraph) -> list:
    """Driver-side writers of every sink task: they publish staged output."""
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
    except Exception as exc:
        for vertex in graph.pipeline.vertices:
            error = explain_unpicklable(name, vertex.name, vertex.spec, cloudpickle.dumps)
            if error is not None:
                raise error from None
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
