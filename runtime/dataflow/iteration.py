"""Iteration tasks: graph operators that run supersteps inside a window, driven by the scheduler."""

from __future__ import annotations

import pickle

from gyreflow.plan.operators import OperatorKind
from gyreflow.runtime.dataflow.graph.operator import GraphOperator
from gyreflow.runtime.dataflow.graph.supersteps import VERTEX_COUNT, LocalLoopExchange
from gyreflow.runtime.dataflow.task import Task
from gyreflow.scheduler.events import Done, EventKind, TaskEvent
from gyreflow.scheduler.iteration import SAVED
from gyreflow.state.shared.snapshot import TaskRecord, TaskSnapshot

_SUPERSTEP = (EventKind.EXECUTE_FIRST_ITERATION, EventKind.EXECUTE_COMPUTE)


class IterationTask(Task):
    """A task whose chain is a graph operator: the window's input is held when its barriers align
    (INPUT_READY), and the scheduler's iteration events run the supersteps; FinishIteration emits the
    results and finishes the window the way every task does (barrier, snapshot, Done)."""

    loop = None
    _end_deferred = False
    _iterating: frozenset = frozenset()  # windows between InitIteration and FinishIteration
    _checkpoint: dict | None = None  # window -> whether its barriers asked for a snapshot
    _saved: dict | None = None  # superstep -> iteration snapshot of the window after a resume
    _saves = 0

    def on_event(self, event: TaskEvent) -> None:
        kind = event.kind
        if kind is EventKind.INIT_ITERATION:
            self._iterating = self._iterating | {event.window}
            count = self.graph.init_iteration(event.window)
            partials = ((VERTEX_COUNT, count),)
            partials += self.graph.removal_partials()
            if self._saved and event.window == next(iter(self._saved.values()))[0]:
                partials += ((SAVED, tuple(sorted(self._saved))),)
            self._report_step(event, 0, partials)
        elif kind is EventKind.RESTORE_ITERATION:
            saved, self._saved = self._saved, None
            payload = self.graph.restore_progress(saved[event.iteration])
            self._report_step(event, 0, payload)
        elif kind in _SUPERSTEP and event.iteration > 0:
            saved = []
            save = saved.append if kind is EventKind.EXECUTE_COMPUTE and event.checkpoint else None
            work, partials = self.graph.superstep(event.iteration, event.payload, save)
            if saved:  # the superstep is reported once its iteration snapshot is durable
                self._save(saved[0], lambda: self._report_step(event, work, partials))
            else:
                self._report_step(event, work, partials)
        elif kind is EventKind.FINISH_ITERATION:
            self.graph.finish_iteration(event.window)
            self._iterating = self._iterating - {event.window}
            checkpoint = (self._checkpoint or {}).pop(event.window, True)
            Task._finish_window(self, event.window, checkpoint)
            if self._end_deferred and not self.graph.pending and not self._iterating:
                self._end_deferred = False
                Task._end_of_input(self)
        else:
            super().on_event(event)

    def create(self) -> None:
        super().create()
        self.graph: GraphOperator = self.head
        self.graph.loop = self.loop
        self._saved = self._read_saved(0)  # a resumed first window (none on a fresh start)

    def enter_window(self, window: int, checkpoints, restore: bool) -> None:
        super().enter_window(window, checkpoints, restore)
        if restore and window == 1:  # a task built afresh for the first window (Spark)
            self._saved = self._read_saved(0)

    def rollback(self, window: int, recover_sinks: bool = True, verify: bool = True) -> None:
        super().rollback(window, recover_sinks, verify)
        self._iterating = frozenset()
        self.graph.slots.clear()  # cached neighbour slots describe the graph before the restore
        self._saved = self._read_saved(window)

    # Iteration snapshots ----------------------------------------------------------------------

    def _record_name(self, slot: int) -> str:
        return f"{self.vertex.head.name}#{slot}"

    def _save(self, progress: bytes, on_durable) -> None:
        """Write an iteration snapshot: a record beside the last completed window's snapshot (the
        window being iterated is not completed; a resume from the window before discards nothing
        of it). Two slots alternate, so a snapshot is never overwritten while it is the latest."""
        cp = self.checkpoints
        slot = self._saves % 2
        self._saves += 1
        record = TaskRecord("iteration", self._record_name(slot), self.spec.index, progress)
        snapshot = TaskSnapshot(cp.job, self.graph.window - 1, self.ctx.state.key_groups, (),
                                (record,), cp.horizon, (), ())
        cp.writer.write(snapshot, on_durable)

    def _read_saved(self, window: int) -> dict | None:
        """The iteration snapshots of window ``window + 1`` this task holds, by superstep."""
        cp = self.checkpoints
        if cp is None or cp.store is None:
            return None
        found = {}
        for slot in (0, 1):
            stored = cp.store.read_record(cp.job, "iteration", self._record_name(slot),
                                          self.spec.index, window)
            if stored is None:
                continue
            record = pickle.loads(stored[1])
            of_window, done, parallelism = record[:3]
            if of_window == window + 1 and parallelism == self.spec.parallelism:
                found[done] = record
        return found or None

    def _report_step(self, event: TaskEvent, work: int, partials: tuple) -> None:
        self.report(Done(self.cycle, self.spec.id, event.window, event.kind, event.iteration,
                         active=work, partials=partials))

    def _finish_window(self, window: int, checkpoint: bool = True) -> None:
        """Every input's barrier for ``window`` arrived: hold the input until the scheduler says."""
        if self._checkpoint is None:
            self._checkpoint = {}
        self._checkpoint[window] = checkpoint
        self.graph.input_complete(window)
        self.report(Done(self.cycle, self.spec.id, window, EventKind.INPUT_READY))

    def export_progress(self) -> tuple:
        """What a host that moves the task between processes (Spark) must carry with its graph."""
        return (self.graph.export_state(), self.ctx.window, self.last_snapshot, self._end_deferred,
                self._checkpoint, self._saved, self._saves)

    def import_progress(self, progress: tuple, checkpoints) -> None:
        """Continue from ``export_progress``'s result, with this step's ``checkpoints``."""
        (graph_state, self.ctx.window, self.last_snapshot, self._end_deferred, self._checkpoint,
         self._saved, self._saves) = progress
        self.checkpoints = checkpoints
        self.graph.import_state(graph_state)

    def _end_of_input(self) -> None:
        if self.graph.pending or self._iterating:
            # Windows still to iterate, or one whose results are not out yet: end after the last.
            self._end_deferred = True
        else:
            super()._end_of_input()


def task_class_for(vertex) -> type[Task]:
    """The task class that runs ``vertex``: iteration vertices get an ``IterationTask``."""
    if any(v.kind is OperatorKind.ITERATION for v in vertex.chain):
        return IterationTask
    return Task


def wire_iterations(tasks: list[Task]) -> None:
    """Connect the tasks of every iteration vertex through an in-process loop exchange."""
    exchanges: dict[int, LocalLoopExchange] = {}
    for task in tasks:
        if isinstance(task, IterationTask):
            task.loop = exchanges.setdefault(task.vertex.id, LocalLoopExchange())
