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
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

import attrs

from gyreflow.plan.execution import ExecutionGraph
from gyreflow.runtime.errors import PlanNotShippableError, SnapshotWriteError
from gyreflow.runtime.host import HostLink
from gyreflow.runtime.snapshot_writers import SnapshotWriter
from gyreflow.runtime.spark.barrier import is_local_master
from gyreflow.runtime.spark.graph_steps import SparkGraphRunner
from gyreflow.runtime.spark.partition import Round, RunPlan, control_stage, stage
from gyreflow.runtime.spark.round_order import RoundOrder, widest, windows_in_flight
from gyreflow.runtime.spark.session import spark_log_path, spark_session
from gyreflow.runtime.spark.shipping import pickle_for_executors, ship_user_modules_if_needed
from gyreflow.scheduler.events import EventKind, TaskFailed
from gyreflow.state.backends import RocksDBStateBackend

__all__ = ["PlanNotShippableError", "SparkHost", "SparkState", "spark_log_path", "spark_session"]

PRUNE_EVERY = 10  # commits between two prunes of old versions by the driver


class _DriverWriter(SnapshotWriter):
    """The driver's commits and prunes: one store, opened at the first commit and kept for the run.

    Opening a store per commit cost ~0.3 s per window with RocksDB (databases opened, synced, closed).
    The driver's store only ever opens the job meta, which no task opens; pruning opens the state
    databases that tasks write, so it runs on a store of its own, when no round is running, after
    every ``PRUNE_EVERY`` commits and at the end (pruning is cumulative: a later horizon covers the earlier
    ones; a resume only returns to retained versions, which pruning keeps).
    """

    def __init__(self, backend) -> None:
        self.backend = backend
        self.store = None
        self.pending: dict[str, tuple[list[int], int]] = {}
        self.commits = 0
        self.prune_due = False

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
            self.prune_due = True  # the host prunes when no round is running

    def prune(self, job, crossing, horizon, drop=None) -> None:
        versions, _ = self.pending.get(job, ([], 0))
        self.pending[job] = ([*versions, *crossing], horizon)
        if drop:  # once, after a resume with another parallelism: drop the old layout now
            self._with_store(lambda store: [store.drop_other_ranges(job, table, ranges)
                                            for table, ranges in drop.items()])

    def flush(self) -> None:
        self.prune_due = False
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


class SparkState:
    """Where the Spark tasks of one run keep their state: the configured backend, or for the memory
    backend a scratch RocksDB directory (Spark tasks run in other processes) that lives as long as
    the run, so it survives nothing, like the memory backend, but every host of the run (a rescale
    builds a new one) finds the windows the run completed. ``close`` removes it.
    """

    def __init__(self, backend) -> None:
        self.directory = None
        if backend.name == "memory":
            self.directory = tempfile.mkdtemp(prefix="gyreflow-spark-state-")
            backend = RocksDBStateBackend(backend.max_parallelism, backend.snapshot_every,
                                          backend.retained_snapshots, path=self.directory)
        self.backend = backend

    def close(self) -> None:
        """Remove the scratch directory (nothing for a configured location)."""
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None


class SparkHost:
    """Runs a job's tasks on Spark for the driver: each window a Spark job (a round), each batch of
    lifecycle events a small control job whose tasks acknowledge what they did."""

    name = "spark"

    def __init__(self, config, backend, session_factory: Callable[[], object]) -> None:
        self.config = config
        self.session_factory = session_factory
        # Given the memory backend, this host is the whole run: it keeps the state in a scratch
        # directory of its own and removes it when it closes. A run that may build several hosts
        # (a rescale) makes its ``SparkState`` once and hands each host its backend.
        self._scratch = SparkState(backend) if backend.name == "memory" else None
        self.backend = backend if self._scratch is None else self._scratch.backend
        self._writer: _DriverWriter | None = None
        # launched windows: (window, snapshot it, cycle, a head task)
        self._windows: deque[tuple[int, bool, int, int]] = deque()
        self._flying = 1  # rounds that may run at once (windows in flight)
        self._in_flight: dict[int, Future] = {}  # window -> its round, running in a thread
        self._in_flight_lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._order: RoundOrder | None = None
        self._control: list = []  # lifecycle events for the next control job
        self._destroy: list = []  # DestroyTask events, carried out when the host closes
        self._sink_writers: list = []
        self._graphs: SparkGraphRunner | None = None
        self._shipped = None
        self._sc = None
        self._controls: dict[int, list] = {}  # window -> control messages for its round
        self._parameters: list = []  # "set" controls, in the order they came

    @property
    def writer(self) -> _DriverWriter:
        """The driver's commits and prunes (tasks write their own snapshots inside Spark tasks)."""
        return self._writer

    def open(self, job: str, graph: ExecutionGraph, store, link: HostLink, resume_from: int,
             rescaled: frozenset[str], horizon: int, cycle_ends=None) -> None:
        """Ship the plan once (a broadcast). The driver's store is closed: it may hold state
        databases open that the tasks open next, in other processes."""
        store.close()
        # The session first: whether the user's modules travel by value depends on who started
        # its JVM, and the choice stays for the life of this process.
        self._sc = self.session_factory().sparkContext
        ship_user_modules_if_needed(is_local_master(self.config["spark.master"]))
        plan = _shippable_plan(job, graph)  # fails before any data moves
        self._writer = _DriverWriter(self.backend)
        self.graph = graph
        self.link = link
        self.resume_from = resume_from
        self.rescaled = rescaled
        self.horizon = horizon
        self.cycle_ends = tuple(sorted((cycle_ends or {}).items()))
        self._shipped = self._sc.broadcast(plan)  # travels once per run, not in every closure
        self._run_id = uuid.uuid4().hex
        self._graphs = SparkGraphRunner(link, graph, _by_index)  # graph vertices: a job per step
        self._sink_writers = _sink_writers(graph)
        self._task_of = {t.id: (t.vertex_id, t.index) for t in graph.tasks()}
        flying = self.config["scheduler.max_flying_windows"]
        if flying > 1 and not any(self._graphs.handles(v) for v in graph.vertices):
            # Windows in flight: each round a Spark job of its own, submitted from a thread while
            # the one before runs; tasks keep window order through the driver's round order
            # service, and only as many rounds run at once as the task slots allow (round_order).
            width = widest({v.id: v.parallelism for v in graph.vertices},
                           [(e.source, e.target) for e in graph.edges])
            self._flying = windows_in_flight(flying, self._sc.defaultParallelism, width)
        if self._flying > 1:
            host = self._sc.getConf().get("spark.driver.host", "127.0.0.1")
            self._order = RoundOrder(host, base=resume_from)
            self._pool = ThreadPoolExecutor(max_workers=self._flying,
                                            thread_name_prefix="gyreflow-round")

    def send(self, events) -> None:
        """Queue launched windows for their rounds, iteration events for the graph runner and
        lifecycle events for the next control job."""
        for event in events:
            if event.kind is EventKind.LAUNCH_SOURCE:
                if all(queued[0] != event.window for queued in self._windows) and (
                        event.window not in self._in_flight):
                    self._windows.append((event.window, event.checkpoint, event.cycle, event.task))
            elif self._graphs.takes(event):
                continue
            elif event.kind is EventKind.DESTROY_TASK:
                self._destroy.append(event)
            else:
                self._control.append(event)

    def control(self, window: int, controls) -> None:
        """The controls ride in the round of ``window``, to every task of it. Parameters ride in
        every later round too: a task rebuilt in another worker starts with none."""
        for control in controls:
            if control.kind == "set":
                self._parameters.append(control)
            else:
                self._controls.setdefault(window, []).append(control)

    def _controls_of(self, window: int) -> tuple:
        """The controls of round ``window``: its own, and the parameters in force by then."""
        latest = {}
        for control in self._parameters:
            if control.window <= window:
                latest[control.operator, control.name] = control
        return (*latest.values(), *self._controls.pop(window, ()))

    def step(self) -> bool:
        """Run the queued lifecycle events (one control job, once no round runs) or start the next
        window's round: at once, or in a thread while up to ``max_flying_windows - 1`` others run."""
        running = bool(self._in_flight)
        if self._writer.prune_due and not running:
            self._writer.flush()
        if self._control:
            if running:
                return False  # lifecycle events apply between rounds
            events, self._control = self._control, []
            self._report(self._run_control(events))
            return True
        if not self._windows or self._writer.prune_due or len(self._in_flight) >= self._flying:
            return False
        window, checkpoint, cycle, task = self._windows.popleft()
        if self._pool is None:
            self._report(self._run_round(window, checkpoint))
            return True
        with self._in_flight_lock:
            self._in_flight[window] = self._pool.submit(self._round_in_thread, window, checkpoint,
                                                        cycle, task)
        return True

    def drain_step(self, before: int | None) -> bool:
        """The job fails or stops: nothing new starts, and rounds already running end (a round after
        a failed one is released by the round order service and reports why)."""
        self._windows.clear()
        self._control.clear()
        running = list(self._in_flight.values())
        if not running:
            return False
        wait(running, return_when=FIRST_COMPLETED)
        return True

    def has_work(self) -> bool:
        """Whether a window or lifecycle events wait to run, or a round runs."""
        return bool(self._windows or self._control or self._in_flight)

    def _round_in_thread(self, window: int, checkpoint: bool, cycle: int, task: int) -> None:
        """One round as a Spark job of its own group; its Done events go to the driver's queue.

        The job is submitted only once the previous round's job is, so that Spark's FIFO
        scheduler serves the earlier round's pending tasks first (see ``round_order``).
        """
        self._sc.setJobGroup(self._job_group(window), f"gyreflow window {window}")
        tracker = self._sc.statusTracker()
        while window - 1 in self._in_flight and not tracker.getJobIdsForGroup(
                self._job_group(window - 1)):
            time.sleep(0.002)
        try:
            dones = self._run_round(window, checkpoint)
        except BaseException as exc:  # noqa: BLE001 - reported to the driver as the round's failure
            dones = [TaskFailed(cycle, task, window, exc)]
        with self._in_flight_lock:
            self._in_flight.pop(window, None)
        self._report(dones)  # before later rounds are released: the first failure is this one
        if any(isinstance(d, TaskFailed) for d in dones):
            self._order.fail_from(window)
        else:
            for vertex_id, index in self._task_of.values():
                self._order.finished(vertex_id, index, window)

    def _job_group(self, window: int) -> str:
        return f"gyreflow-{self._run_id}-{window}"

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
        if self._pool is not None:
            actions.append(self._stop_rounds)
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
                self._scratch.close()

    def _stop_rounds(self) -> None:
        """Cancel rounds still running (a failed job), wait for their threads, stop the service."""
        for window in list(self._in_flight):
            self._sc.cancelJobGroup(self._job_group(window))
        self._order.fail_from(0)
        self._pool.shutdown(wait=True)
        self._order.close()

    # Spark jobs -----------------------------------------------------------------------------

    def _report(self, events) -> None:
        for event in events:
            self.link.report(event)

    def _spec(self, window: int, checkpoint: bool = True, controls: tuple = ()) -> Round:
        rescaled = self.rescaled if window in (self.resume_from, self.resume_from + 1) else frozenset()
        return Round(self._run_id, self._shipped, -1, window, self.backend,
                     self.config["runtime.batch_size"], self.horizon, rescaled, checkpoint,
                     self.cycle_ends, self._order.address if self._order is not None else None,
                     controls)

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
        template = self._spec(window, checkpoint, self._controls_of(window))
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
    return pickle_for_executors(name, graph, RunPlan.build(name, graph))


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
