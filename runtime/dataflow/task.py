"""Task: one parallel instance of an operator chain, driven by command events."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

import attrs

from gyreflow.plan.execution import ExecutionTask, ExecutionVertex
from gyreflow.runtime.control import TaskSample
from gyreflow.runtime.dataflow.columns.batch import ColumnBatch, rows_into
from gyreflow.runtime.dataflow.combine import accept_combined
from gyreflow.runtime.dataflow.emitter import EmitterService
from gyreflow.runtime.dataflow.fetch import FetchService, Worker
from gyreflow.runtime.dataflow.fusion import fuse
from gyreflow.runtime.dataflow.operator_factory import build_operator
from gyreflow.runtime.dataflow.operators import CollectOperator, Operator, SinkOperator
from gyreflow.runtime.dataflow.task_source import WindowRead, read_step
from gyreflow.runtime.dataflow.task_state import TaskCheckpoints, nothing, restore, write_snapshot
from gyreflow.scheduler.events import Done, EventKind, OperatorMetrics, TaskEvent
from gyreflow.state.keys.keygroups import task_key_groups


@attrs.define(eq=False)
class OperatorContext:
    """What a running operator may know about its task."""

    task_name: str
    task_index: int
    parallelism: int
    state: object
    window: int = 1
    input_ended: bool = False  # a source task's input ended with the window being finished
    # operator name -> {parameter: value}, as set by control commands at window boundaries
    parameters: dict = attrs.field(factory=dict)


class Task:
    """Runs a chain for one task: reads its source (head tasks) or aligns its inputs, finishes
    windows, reports Done events through ``report``."""

    def __init__(
        self,
        spec: ExecutionTask,
        vertex: ExecutionVertex,
        cycle: int,
        input_ordinals: list[int],
        emitter: EmitterService,
        state_backend,
        batch_size: int,
        report: Callable[[object], None],
        clock: Callable[[], float] = time.monotonic,
        checkpoints: TaskCheckpoints | None = None,
    ) -> None:
        self.spec = spec
        self.vertex = vertex
        self.cycle = cycle
        self.name = spec.name
        self.emitter = emitter
        self.state_backend = state_backend
        self.batch_size = batch_size
        self.report = report
        self.clock = clock
        self.operators: list[Operator] = []
        self.controls: dict[int, list] = {}  # window -> control messages to apply as it starts
        self.samples: list = []  # monitoring samples for this window's Done
        self.totals = [0, 0]  # records into and out of the chain since the task was built
        self.inbox = None  # the runner's queue of messages for this task
        self.collectors: list[CollectOperator] = []
        self.ctx: OperatorContext | None = None
        self.head: Operator | None = None
        self.head_takes_columns = False
        self.read_size = batch_size  # records a source task reads at a time
        self.combined_input = False  # the head takes pre-combined messages (set by the host)
        self.source_reader = None
        self.window_spec = None
        self.worker = Worker(input_ordinals, self._process_input, self._finish_window,
                             self._end_of_input)
        self.fetch = FetchService(self.worker)
        self.launches: deque[tuple[int, bool]] = deque()  # (window, snapshot it)
        self.reading: WindowRead | None = None
        self.exhausted = False
        self.lookahead: list = []
        self.lookahead_error: Exception | None = None  # bad input the look-ahead met
        self.window_started = clock()
        self.checkpoints = checkpoints
        self.source_offset: object = None
        self.exhausted_at = 0
        self.last_snapshot = 0
        self.sinks: list = []
        self._groups: dict = {}  # key -> key group, memoised for snapshots

    # Lifecycle ----------------------------------------------------------------------------

    def create(self) -> None:
        """Build the operators, open state and, for a head task, its source reader."""
        max_parallelism = self.state_backend.max_parallelism
        assignment = next((v.assignment for v in self.vertex.chain if v.assignment), None)
        groups = task_key_groups(self.spec.index, self.spec.parallelism, max_parallelism,
                                 assignment)
        state = self.state_backend.create_keyed_store(groups)
        self.ctx = OperatorContext(self.name, self.spec.index, self.spec.parallelism, state)
        chain = self.vertex.chain
        if self.vertex.is_source:
            source_spec = chain[0].spec
            self.window_spec = source_spec.window
            self.source_reader = source_spec.source.create_reader(
                self.spec.index, self.spec.parallelism)
            # A columnar reader reads larger batches: its per-batch work is per array, not per row.
            self.read_size = max(self.batch_size,
                                 getattr(self.source_reader, "rows_per_batch", 0) or 0)
            chain = chain[1:]
        self.operators = [build_operator(v.name, v.spec) for v in chain]
        self.collectors = [op for op in self.operators if isinstance(op, CollectOperator)]
        self.sinks = [op for op in self.operators if isinstance(op, SinkOperator)]
        steps = fuse(self.operators)  # consecutive stateless operators run as one comprehension
        for upstream, downstream in zip(steps, steps[1:], strict=False):
            upstream.out = downstream.process
            if getattr(upstream, "emits_columns", False) and not getattr(downstream, "takes_columns", False):
                upstream.out = rows_into(downstream.process)
        if steps:
            steps[-1].out = self.emitter.emit
            self.head = steps[0]
        # A column batch reaches an operator that works on rows as rows (converted once, here).
        self.head_takes_columns = bool(steps) and getattr(steps[0], "takes_columns", False)
        for op in self.operators:
            op.open(self.ctx)
        if self.combined_input:  # upstream tasks fold records before they cross (combine.py)
            accept_combined(self.head)
        self.source_records = 0

    def release(self) -> None:
        """DestroyTask: close the source reader and every operator but the sinks, which stay open
        until the executor's last publish (another cycle may complete the job's last window later)."""
        for op in self.operators:
            if not isinstance(op, SinkOperator):
                op.close()
        if self.source_reader is not None:
            self.source_reader.close()
            self.source_reader = None

    def destroy(self) -> None:
        """Close everything, sinks included."""
        self.release()
        for op in self.sinks:
            op.close()

    # Events -------------------------------------------------------------------------------

    def on_event(self, event: TaskEvent) -> None:
        """Carry out one command event from the scheduler."""
        kind = event.kind
        if kind is EventKind.CREATE_TASK:
            self.create()
        elif kind is EventKind.ROLLBACK:
            self.rollback(event.window)
            self._ack(event)
        elif kind is EventKind.INIT_CYCLE:
            self.ctx.window = event.window + 1
            self.last_snapshot = event.window
            self.window_started = self.clock()
            self._ack(event)
            if self.exhausted:  # restored past the end of its input: tell downstream at once
                self._end_of_input()
        elif kind is EventKind.LAUNCH_SOURCE:
            self.launches.append((event.window, event.checkpoint))
        elif kind is EventKind.CLEAN_CYCLE:
            self.launches.clear()  # windows launched past the end of the input were cancelled
            self._ack(event)
        elif kind is EventKind.DESTROY_TASK:
            self.release()
        else:
            msg = f"task {self.name!r} cannot handle {kind.value}"
            raise NotImplementedError(msg)

    def _ack(self, event: TaskEvent) -> None:
        self.report(Done(self.cycle, self.spec.id, event.window, event.kind))

    # Sources ------------------------------------------------------------------------------

    def has_source_work(self) -> bool:
        """Whether a launched window still has records to read."""
        return self.reading is not None or bool(self.launches)

    def read_step(self) -> None:
        """Read one batch of the current window (or start the next launched one)."""
        read_step(self)

    # Windows ------------------------------------------------------------------------------

    def _process_input(self, ordinal: int, batch: list) -> None:
        if self.controls:
            self._apply_controls()
        head = self.head
        if head is not None:
            if type(batch) is ColumnBatch and not self.head_takes_columns:
                batch = batch.rows()
            head.process_input(ordinal, batch)
        else:
            self.emitter.emit(batch)

    def _finish_window(self, window: int, checkpoint: bool = True) -> None:
        """Every record of ``window`` is in: finish the operators, forward the barrier, snapshot the
        window when the driver asked for it (``checkpoint``, carried by the barrier), report Done."""
        self.ctx.window = window
        if self.source_reader is None and self.worker is not None:  # every sender ended with it
            self.ctx.input_ended = self.worker.inputs_ended
        if self.controls:
            self._apply_controls()
        for op in self.operators:
            op.finish(window)
        metrics = _window_metrics(self)
        collected = tuple((op.result_name, tuple(op.take())) for op in self.collectors)
        self.emitter.barrier(window, checkpoint, self.ctx.input_ended)
        cp = self.checkpoints
        if cp is not None:
            if checkpoint:
                self._snapshot(window, self._report_checkpoint(window), sized=True)
            elif cp.every_window:  # persisted for the next round, not a checkpoint of the job
                self._snapshot(window, nothing)
        now = self.clock()
        samples, self.samples = tuple(self.samples), []
        self.report(Done(self.cycle, self.spec.id, window, EventKind.EXECUTE_COMPUTE,
                         metrics=tuple(metrics), collected=collected,
                         seconds=now - self.window_started, samples=samples,
                         loads=self.emitter.take_loads(), sent=self.emitter.take_sent()))
        self.window_started = now
        self.ctx.window = window + 1

    def _end_of_input(self) -> None:
        self.emitter.end_of_input()
        last = self.ctx.window - 1
        done = Done(self.cycle, self.spec.id, last, EventKind.EXECUTE_COMPUTE, exhausted=True)
        if self.checkpoints is None:
            self.report(done)
        elif self.last_snapshot < last:
            # A final flush: what changed since the last snapshot is written under the last window,
            # and the end is reported only once it is durable.
            self._snapshot(last, lambda: self.report(done))
        else:
            self.checkpoints.writer.write(None, lambda: self.report(done))

    # Control messages -----------------------------------------------------------------------

    def take_controls(self, controls) -> None:
        """Keep ``controls`` until the task starts their window (``runtime.control``)."""
        for control in controls:
            self.controls.setdefault(control.window, []).append(control)

    def _apply_controls(self) -> None:
        """The task is in window ``ctx.window``: apply the controls of this window and before."""
        window = self.ctx.window
        for due in sorted(w for w in self.controls if w <= window):
            for control in self.controls.pop(due):
                if control.kind == "set":
                    self.ctx.parameters.setdefault(control.operator, {})[control.name] = control.value
                elif control.kind == "sample":
                    self.samples.append(_sample(self))

    # Snapshots and recovery -----------------------------------------------------------------

    def _report_checkpoint(self, window: int) -> Callable[[int], None]:
        def report(size: int) -> None:
            self.report(Done(self.cycle, self.spec.id, window, EventKind.CHECKPOINT, size=size))
        return report

    def _snapshot(self, version: int, on_durable: Callable, sized: bool = False) -> None:
        """Hand the state changed since the last snapshot, and the source offset, to the writer
        (``task_state.write_snapshot``)."""
        write_snapshot(self, version, on_durable, sized)

    def rollback(self, window: int, recover_sinks: bool = True, verify: bool = True) -> None:
        """Restore state, source offset and (unless the driver does it) sinks to ``window``; with
        ``verify`` (a resume), first check that the stored state reached ``window``
        (``task_state.restore``)."""
        restore(self, window, recover_sinks, verify)

    def enter_window(self, window: int, checkpoints: TaskCheckpoints, restore: bool) -> None:
        """On a host whose tasks live for one round (Spark): window ``window`` starts now, in this
        task kept from window ``window - 1`` or, with ``restore``, built afresh and restored from the
        snapshot of ``window - 1``; ``checkpoints`` holds this round's store. Channels that ended in
        an earlier round end again, for downstream tasks that start afresh."""
        self.checkpoints = checkpoints
        self.ctx.window = window
        self.last_snapshot = window - 1
        if restore and window > 1:
            self.rollback(window - 1, recover_sinks=False, verify=False)
        if self.source_reader is not None and self.exhausted:
            self.emitter.end_of_input()
        elif self.source_reader is None and self.worker.ended and not restore:
            self.emitter.end_of_input()

    def finished_window(self, window: int) -> bool:
        """Whether the task is done with ``window`` (finished it, or its input ended)."""
        return self.ctx.window > window or self.worker.ended or self.exhausted

    def publish(self, window: int) -> None:
        """Window ``window`` is completed: let sinks make their staged output visible."""
        for op in self.sinks:
            op.publish(window)


def _window_metrics(task: Task) -> list:
    """Records in and out of each operator of the chain in the window just finished (counted anew
    from zero), added to the task's totals."""
    metrics = []
    if task.source_reader is not None:
        metrics.append((task.vertex.head.name, OperatorMetrics(0, task.source_records)))
        task.source_records = 0
    for op in task.operators:
        metrics.append((op.name, OperatorMetrics(op.records_in, op.records_out,
                                                 getattr(op, "watermark", None))))
        op.records_in = op.records_out = 0
    if metrics:  # into the chain (read, for a source task) and out of its last operator
        first, last = metrics[0][1], metrics[-1][1]
        task.totals[0] += first.records_out if task.source_reader is not None else first.records_in
        task.totals[1] += last.records_out
    return metrics


def _sample(task: Task) -> TaskSample:
    """A monitoring sample: the task's totals, the keys in its state, the messages waiting for it."""
    state = task.ctx.state
    keys = sum(len(table.data) for table in state.tables.values()) if state is not None else 0
    queued = (task.worker.queued() if task.worker is not None else 0) + len(task.inbox or ())
    return TaskSample(task.vertex.head.name, task.spec.index, task.totals[0], task.totals[1],
                      keys, queued)
