"""What a worker's tasks use in place of the driver's services: the iteration task that says when
a superstep ended, the exchange of graph messages with the other workers, and the snapshot writer
and store whose calls the driver answers."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from gyreflow.runtime.dataflow.graph.supersteps import LocalLoopExchange
from gyreflow.runtime.dataflow.iteration import IterationTask
from gyreflow.runtime.workers.wire import worker_of
from gyreflow.scheduler.events import EventKind

if TYPE_CHECKING:
    from gyreflow.runtime.workers.worker import Worker

DRIVER = -1  # the source index of the driver's connection
_SUPERSTEPS = (EventKind.EXECUTE_FIRST_ITERATION, EventKind.EXECUTE_COMPUTE,
               EventKind.RESTORE_ITERATION)


class WorkerIterationTask(IterationTask):
    """An iteration task that tells its worker when it finished a superstep (or restored one), so
    that the worker can seal the superstep's graph messages towards the other workers."""

    superstep_done = None  # (vertex id, window, next superstep) -> None

    def on_event(self, event) -> None:
        super().on_event(event)
        if event.kind in _SUPERSTEPS and (event.iteration > 0
                                          or event.kind is EventKind.EXECUTE_FIRST_ITERATION):
            self.superstep_done(self.vertex.id, event.window, max(event.iteration, 1) + 1)


class LoopExchange(LocalLoopExchange):
    """The graph messages of one iteration vertex: kept here for this worker's tasks (as
    ``LocalLoopExchange`` keeps them), sent to the worker of every other target task."""

    def __init__(self, worker: Worker, vertex_id: int) -> None:
        super().__init__()
        self.worker = worker
        self.vertex_id = vertex_id

    def put(self, index: int, iteration: int, messages: dict, merge) -> None:
        worker = self.worker
        target = worker_of(index, worker.count)
        if target != worker.index:
            if type(messages) is list:  # array pieces: ids that went there before go as a slot
                messages = worker.sent_ids.pack((target, self.vertex_id, index), messages,
                                                worker.local_tasks[self.vertex_id])
            worker.send(target, ("loop", self.vertex_id, index, iteration, messages))
            return
        super().put(index, iteration, messages, merge)


class DriverWriter:
    """The tasks' snapshot writer: each write goes to the driver's writer, in order; ``on_done``
    runs here when the driver reports it durable."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.callbacks: dict[int, object] = {}
        self.tokens = itertools.count(1)

    def write(self, snapshot, on_done) -> None:
        token = next(self.tokens)
        self.callbacks[token] = on_done
        self.worker.send(DRIVER, ("write", token, snapshot))

    def durable(self, token: int) -> None:
        self.callbacks.pop(token)()


class DriverStore:
    """The snapshot store as tasks read it while they restore: each read is answered by the driver,
    which holds the store (one process opens it)."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    def read_into(self, job, table, key_groups, version, data) -> None:
        data.update(self.worker.ask("read_into", (job, table, key_groups, version)))

    def read_record(self, *args):
        return self.worker.ask("read_record", args)

    def verify_reached(self, *args) -> None:
        self.worker.ask("verify_reached", args)

    def location(self) -> str:
        return self.worker.ask("location", ())
