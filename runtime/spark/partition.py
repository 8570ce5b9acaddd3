"""Spark tasks: what one Spark partition runs for one execution vertex in one window round.

Partition ``i`` of a vertex's stage runs task ``i`` with the local runtime's own Task, Worker,
FetchService, EmitterService, TaskRunner and Dispatcher. It returns ``(target vertex, target index,
payload)`` items: channel messages for downstream tasks, and Done events. A stage with downstream
vertices forwards its Done events (and those it received) to task 0 of its first downstream vertex, so
they reach the driver through the tail stages' collect without any stage being read twice.

The plan (execution graph, channel wiring, combining edges) travels once per run as a Spark broadcast
of its cloudpickled bytes; each Python worker unpickles it once per run and keeps it, like its tasks,
in module state (``_PLANS``, ``_TASKS``), for the rounds it serves next.
"""

from __future__ import annotations

import itertools
import time

import attrs

from gyreflow.plan.execution import ExecutionGraph
from gyreflow.runtime.dataflow.channels import link_channels
from gyreflow.runtime.dataflow.combine import build_emitter, combine_kinds, takes_combined
from gyreflow.runtime.dataflow.iteration import task_class_for
from gyreflow.runtime.dataflow.task import Task, TaskCheckpoints
from gyreflow.runtime.dataflow.task_runner import Dispatcher, TaskError, TaskRunner, failed_task
from gyreflow.runtime.snapshot_writers import InlineSnapshotWriter
from gyreflow.runtime.spark.round_order import RoundOrderError, tell_finished, wait_for_previous
from gyreflow.scheduler.events import Done, EventKind, LaunchSource, TaskEvent, TaskFailed
from gyreflow.state.shared.snapshot import SnapshotCorruptedError

DONE = -1  # target vertex (or channel) of items that carry a Done event


@attrs.frozen(eq=False)
class RunPlan:
    """What every task of a run needs, whatever the round: shipped once per run (broadcast)."""

    job: str
    graph: ExecutionGraph
    cycle_of: dict[int, int]
    channels: dict[int, list[tuple[int, int, int, int]]]  # task id -> [(edge, target vertex, idx, ch)]
    ordinals: dict[int, list[int]]  # task id -> input ordinals by channel
    combine: dict[tuple[int, int], str]  # (vertex id, output edge index) -> combine kind
    forward_to: dict[int, int]  # vertex id -> the downstream vertex its Done events go to

    @classmethod
    def build(cls, job: str, graph: ExecutionGraph) -> RunPlan:
        ordinals, channels = _link_channels(graph)
        cycle_of = {t.id: c.id for c in graph.cycles() for t in c.tasks}
        combine = combine_kinds(graph)
        forward_to = {}
        for vertex in graph.vertices:
            outputs = graph.outputs(vertex.id)
            if outputs:
                forward_to[vertex.id] = min(edge.target for edge in outputs)
        return cls(job, graph, cycle_of, channels, ordinals, combine, forward_to)


@attrs.frozen(eq=False)
class Round:
    """One vertex's part of one window round (pickled into the stage's closure: keep it small)."""

    run_id: str
    plan: object  # a Spark Broadcast of the cloudpickled RunPlan
    vertex_id: int
    window: int
    backend: object
    batch_size: int
    horizon: int = 0  # the oldest retained version: older versions are trimmed as keys are written
    rescaled: frozenset[str] = frozenset()
    checkpoint: bool = True  # whether the driver asked for the window's snapshot
    cycle_ends: tuple[tuple[int, int], ...] = ()  # see TaskCheckpoints.cycle_ends
    order: tuple[str, int, str] | None = None  # the driver's round order service (windows in flight)
    controls: tuple = ()  # control messages every task applies as it starts the window


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


# A reused Python worker keeps these between rounds: run id -> plan, and
# (run id, vertex, index) -> (task, holder, window).
_PLANS: dict[str, RunPlan] = {}
_TASKS: dict[tuple[str, int, int], tuple[Task, _Holder, int]] = {}


def _plan(spec: Round) -> RunPlan:
    plan = _PLANS.get(spec.run_id)
    if plan is None:
        from pyspark import cloudpickle

        for stale in [k for k in _TASKS if k[0] != spec.run_id]:
            _close_quietly(_TASKS.pop(stale)[0])
        _PLANS.clear()
        plan = _PLANS[spec.run_id] = cloudpickle.loads(spec.plan.value)
    return plan


def _build_task(plan: RunPlan, spec: Round, index: int) -> tuple[Task, _Holder]:
    graph = plan.graph
    vertex = graph.vertex(spec.vertex_id)
    task_spec = next(t for t in graph.tasks() if t.vertex_id == vertex.id and t.index == index)
    holder = _Holder()
    checkpoints = TaskCheckpoints(plan.job, None, _RoundWriter(), True, frozenset())
    task = task_class_for(vertex)(task_spec, vertex, plan.cycle_of[task_spec.id],
                                  plan.ordinals[task_spec.id], None, spec.backend, spec.batch_size,
                                  lambda event: holder.dones.append(event), time.monotonic,
                                  checkpoints)

    def deliverer(target_vertex: int, target_index: int, channel: int):
        def deliver(message) -> None:
            holder.out.append((target_vertex, target_index, (channel, next(holder.seq), message)))
        return deliver

    by_edge: dict[int, list] = {}
    for edge_index, target_vertex, target_index, channel in plan.channels[task_spec.id]:
        by_edge.setdefault(edge_index, []).append(deliverer(target_vertex, target_index, channel))
    task.emitter = build_emitter(graph, vertex.id, index, by_edge, plan.combine,
                                 spec.backend.max_parallelism)
    task.combined_input = takes_combined(graph, vertex.id, plan.combine)
    task.create()
    return task, holder


def run_partition(spec: Round, index: int, messages: list) -> list:
    """Run task ``index`` of ``spec.vertex_id`` for window ``spec.window`` inside a Spark task.

    With windows in flight (``spec.order``), the task first waits until the same task finished the
    window before, whose state and source offset it reads, and says when it has finished its own.
    """
    if spec.order is None:
        return _run_partition(spec, index, messages)
    try:
        wait_for_previous(spec.order, spec.vertex_id, index, spec.window)
    except RoundOrderError as exc:
        plan = _plan(spec)
        task = next(t for t in plan.graph.tasks() if t.vertex_id == spec.vertex_id and t.index == index)
        error = TaskError(f"task {task.name!r} could not start window {spec.window}: {exc}")
        failed = TaskFailed(plan.cycle_of[task.id], task.id, spec.window, error)
        return _done_items(plan, spec, [m[2] for m in messages if m[0] == DONE] + [failed])
    items = _run_partition(spec, index, messages)
    if not any(isinstance(_event_of(item), TaskFailed) for item in items):
        # Only a task that finished its window lets the next one start (a failed one's state and
        # offset were not written: the next window would read the window before).
        tell_finished(spec.order, spec.vertex_id, index, spec.window)
    return items


def _run_partition(spec: Round, index: int, messages: list) -> list:
    plan = _plan(spec)
    window = spec.window
    key = (spec.run_id, spec.vertex_id, index)
    forwarded = [m[2] for m in messages if m[0] == DONE]
    cached = _TASKS.pop(key, None)
    fresh = cached is None or cached[2] != window - 1
    if fresh:
        task, holder = _build_task(plan, spec, index)
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
        checkpoints = attrs.evolve(task.checkpoints, store=store, horizon=spec.horizon,
                                   rescaled=spec.rescaled if fresh else frozenset())
        task.enter_window(window, checkpoints, restore=fresh)
        if spec.controls:
            task.take_controls(spec.controls)
        messages = [m for m in messages if m[0] != DONE]
        messages.sort(key=lambda m: (m[0], m[1]))
        runner.inbox.extend((channel, message) for channel, _seq, message in messages)
        if task.source_reader is not None:
            dispatcher.dispatch(LaunchSource(task.cycle, task.spec.id, window, spec.checkpoint))
        while runner.step():
            pass
        if runner.failed or not task.finished_window(window):
            # Without a failure here, an unfinished window means an upstream task failed (every
            # healthy round brings each task its barrier): drop what this task staged of it.
            _close_quietly(task)
        else:
            _TASKS[key] = (task, holder, window)
    except Exception as exc:  # noqa: BLE001 - restoring failed: reported to the driver
        _close_quietly(task)
        where = f"task {task.name!r} could not restore window {window - 1}"
        if isinstance(exc, SnapshotCorruptedError):  # keeps its type: the caller can name a version
            error: Exception = SnapshotCorruptedError(f"{where}: {exc}")
        else:
            error = TaskError(f"{where}: {type(exc).__name__}: {exc}")
        error.__cause__ = exc
        holder.dones.append(TaskFailed(task.cycle, task.spec.id, window, error))
    finally:
        store.close()
        writer.store = None
    items = holder.out
    holder.out = []
    items.extend(_done_items(plan, spec, forwarded + holder.dones))
    return items


def _event_of(item):
    """The Done event an item carries (to the driver or forwarded downstream), or None."""
    target, _index, payload = item
    if target == DONE:
        return payload
    return payload[2] if payload[0] == DONE else None


def _done_items(plan: RunPlan, spec: Round, dones: list) -> list:
    """Done events as items: to task 0 of the first downstream vertex, or to the driver."""
    target = plan.forward_to.get(spec.vertex_id, DONE)
    seq = itertools.count()
    return [(target, 0, (DONE, next(seq), event)) if target != DONE else (DONE, 0, event)
            for event in dones]


def run_control(spec: Round, items: list[tuple[int, int, tuple[TaskEvent, ...]]]) -> list:
    """Carry out lifecycle events inside a Spark task; ``items`` are (vertex id, task index, events).

    CreateTask builds the task (operators opened, source reader created) and keeps it in this
    worker; Rollback restores its state, source offset and sinks' staged output to the event's
    window; InitCycle and CleanCycle ready the task for the next window or end its launches;
    DestroyTask closes the task if this worker holds it. Each task reports its own acknowledgement,
    or TaskFailed naming what it could not do. A task kept here serves the next round when that
    round runs on this worker; on any other worker the round restores it from the backend.
    """
    plan = _plan(spec)
    out: list = []
    store = None
    try:
        for vertex_id, index, events in items:
            task_spec = attrs.evolve(spec, vertex_id=vertex_id)
            for event in events:
                if event.kind is EventKind.ROLLBACK and store is None:
                    store = spec.backend.open_store()
                failure = _control(plan, task_spec, index, event, store, out)
                if failure is not None:
                    out.append(failure)
                    break
    finally:
        if store is not None:
            store.close()
    return out


def _control(plan: RunPlan, spec: Round, index: int, event: TaskEvent, store, out: list):
    key = (spec.run_id, spec.vertex_id, index)
    kind = event.kind
    cached = _TASKS.pop(key, None)
    task = None
    try:
        if kind is EventKind.CREATE_TASK:
            if cached is not None:
                _close_quietly(cached[0])
            task, holder = _build_task(plan, spec, index)
            _TASKS[key] = (task, holder, 0)
            return None
        if kind is EventKind.DESTROY_TASK:
            if cached is not None:
                _close_quietly(cached[0])
            return None
        if kind is EventKind.ROLLBACK:
            if cached is not None:
                _close_quietly(cached[0])
            task, holder = _build_task(plan, spec, index)
            task.checkpoints = attrs.evolve(task.checkpoints, store=store, horizon=spec.horizon,
                                            rescaled=spec.rescaled, cycle_ends=dict(spec.cycle_ends))
            task.checkpoints.writer.store = store
            try:
                task.rollback(event.window)  # state, source offset and the sinks' staged output
            finally:
                task.checkpoints.writer.store = None
            cached = (task, holder, event.window)
        elif kind is EventKind.INIT_CYCLE:
            if cached is not None and cached[2] == event.window:
                task = cached[0]
                task.ctx.window = event.window + 1
                task.last_snapshot = event.window
                cached = (task, cached[1], event.window)
            else:  # not built here: the first round restores it from the backend
                cached = None
        elif kind is EventKind.CLEAN_CYCLE:
            if cached is not None:
                cached[0].launches.clear()
        else:
            msg = f"a Spark control job cannot carry out {kind.value}"
            raise NotImplementedError(msg)
        if cached is not None:
            _TASKS[key] = cached
        out.append(Done(plan.cycle_of[event.task], event.task, event.window, kind))
        return None
    except Exception as exc:  # noqa: BLE001 - reported to the driver
        if task is not None:
            _close_quietly(task)
        name = next(t.name for t in plan.graph.tasks() if t.id == event.task)
        where = f"task {name!r} could not carry out {kind.value} (window {event.window})"
        if isinstance(exc, SnapshotCorruptedError):
            error: Exception = SnapshotCorruptedError(f"{where}: {exc}")
        else:
            error = failed_task(where, exc)
        error.__cause__ = exc
        return TaskFailed(plan.cycle_of[event.task], event.task, event.window, error)


def control_stage(spec: Round):
    """The function of a control job's ``mapPartitions``: lifecycle events in, acknowledgements out."""

    def run(iterator):
        return iter(run_control(spec, list(iterator)))

    return run


def _close_quietly(task: Task) -> None:
    try:
        task.destroy()
    except Exception:  # noqa: BLE001, S110 - best effort: the task is being dropped
        pass


def _link_channels(graph: ExecutionGraph):
    """For every task: its input ordinals by channel, and where each of its outputs goes as
    (output edge index, target vertex, target index, channel)."""
    ordinals, links = link_channels(graph)
    channels: dict[int, list[tuple[int, int, int, int]]] = {t.id: [] for t in graph.tasks()}
    for edge, s, t, channel in links:
        channels[s.id].append((graph.outputs(edge.source).index(edge), edge.target, t.index, channel))
    return ordinals, channels


def stage(spec: Round):
    """The function of a vertex's ``mapPartitionsWithIndex`` stage for one round."""

    def run(index: int, iterator):
        messages = [payload for _, payload in iterator if payload is not None]
        return iter(run_partition(spec, index, messages))

    return run
