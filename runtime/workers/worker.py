"""One worker process: runs its share of a job's tasks for the whole job, with the in-process code.

A worker is forked by the driver (so it holds the plan, user functions included, without pickling
it), or runs in a task of a Spark barrier stage (runtime/spark/barrier.py: the plan is shipped with
cloudpickle); it connects back to the driver over an authenticated connection (a Unix socket, or TCP
on Spark), then to every other worker.
Its tasks run in the Dispatcher/TaskRunner/Task code of runtime/dataflow, stepped in turn as in the
in-process host; a channel to a task of another worker sends its batches there (one pickled message
per batch, several coalesced per turn), and graph messages of a superstep travel the same way
(array pieces as numpy arrays, their ids once per peer and target task: see loop_ids).
Keyed state stays in this process between windows; snapshots go to the driver, whose writer stores
them in order; a restore reads the store through the driver.

One receiving thread per connection moves whole messages into one queue, so that a peer's send never
waits for this worker's computing thread (two workers sending to each other cannot block each other).
"""

from __future__ import annotations

import itertools
import os
import queue
import signal
import sys
import threading
import traceback
from collections import deque
from multiprocessing.connection import Client

import attrs

from gyreflow.plan.execution import ExecutionGraph
from gyreflow.runtime.dataflow.channels import link_channels
from gyreflow.runtime.dataflow.columns.batch import ColumnBatch
from gyreflow.runtime.dataflow.combine import build_emitter, combine_kinds, takes_combined
from gyreflow.runtime.dataflow.iteration import IterationTask, task_class_for
from gyreflow.runtime.dataflow.task import TaskCheckpoints
from gyreflow.runtime.dataflow.task_runner import TaskRunner
from gyreflow.runtime.workers.loop_ids import SentIds, TakenIds
from gyreflow.runtime.workers.pickling import collected_or_failed, not_picklable
from gyreflow.runtime.workers.wire import (
    Encoded,
    KeyedListener,
    decode,
    edge_label,
    encode,
    portable,
    tuned,
    worker_of,
)
from gyreflow.runtime.workers.worker_stand_ins import (
    DRIVER,
    DriverStore,
    DriverWriter,
    LoopExchange,
    WorkerIterationTask,
)
from gyreflow.scheduler.events import EventKind, TaskFailed

PEER_LOST_STATUS = 75  # a forked worker's exit status after another worker or the driver went away
SWITCH_SECONDS = 0.0005


@attrs.frozen(eq=False)
class WorkerSetup:
    """What every worker of a job gets from the driver: inherited when it is forked, pickled with
    cloudpickle when it runs in a Spark task."""

    job: str
    graph: ExecutionGraph
    config: object
    backend: object
    workers: int
    address: object  # the driver's listener
    authkey: bytes = attrs.field(repr=False)
    rescaled: frozenset = frozenset()
    cycle_ends: dict = attrs.field(factory=dict)
    parent: int = 0  # the driver's pid (forked workers die with it)
    family: str = "AF_UNIX"  # of every connection: AF_UNIX (forked workers) or AF_INET (Spark)


def serve(setup: WorkerSetup, index: int) -> None:
    """The body of worker ``index``: never returns (the process ends here)."""
    _die_with_parent(setup.parent)
    # A Ctrl-C reaches every process of the terminal's group: the driver decides how the job stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    # The receiving threads take the interpreter lock from the computing thread to drain their
    # sockets: at the default 5 ms they kept senders waiting on full socket buffers.
    sys.setswitchinterval(SWITCH_SECONDS)
    code = 0
    try:
        Worker(setup, index).run()
    except (ConnectionError, EOFError):
        # Another worker or the driver went away (killed, or stopping the job): the driver reports
        # the lost worker in its one error line, or restarts every worker; anything printed here
        # would come before that line. The status tells the driver this worker did not die first.
        code = PEER_LOST_STATUS
    except BaseException:  # noqa: BLE001 - the driver reports a lost worker; the trace helps
        traceback.print_exc()
        code = 1
    finally:
        sys.stderr.flush()
        # The parent's objects (stores, sockets, atexit handlers) were copied by the fork: they are
        # the parent's to close.
        os._exit(code)


def serve_in_task(setup: WorkerSetup, index: int, host: str) -> None:
    """The body of worker ``index`` in a process it does not own (a Spark task), listening on
    ``host``: returns once the driver stops the job or closes its connection, raises what failed,
    and leaves the process as it found it (the process serves other tasks afterwards)."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_SECONDS)
    worker = Worker(setup, index, host)
    try:
        worker.run()
    finally:
        sys.setswitchinterval(previous)
        worker.shut()


def _die_with_parent(parent: int) -> None:
    """Ask Linux to kill this process when the driver dies (and leave if it already has): a killed
    driver leaves no worker behind holding the job's files."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if parent and os.getppid() != parent:
        os._exit(0)


class Worker:
    """The tasks of one worker process, their connections and their turn loop."""

    def __init__(self, setup: WorkerSetup, index: int, host: str | None = None) -> None:
        self.setup = setup
        self.index = index
        self.host = host  # the address to listen on for the other workers (AF_INET)
        self.count = setup.workers
        self.inbound: queue.SimpleQueue = queue.SimpleQueue()
        self.deferred: deque = deque()  # messages taken while waiting for a reply, in order
        self.out: dict[int, list] = {}
        self.conns: dict[int, object] = {}
        self.sent = [0] * self.count  # messages sent to each peer
        self.taken = [0] * self.count  # messages taken from each peer
        self.from_driver = 0  # messages taken from the driver
        self.last_idle = None
        self.stopping = False
        self.drain: tuple | None = None  # (before,) once the job fails
        self.tokens = itertools.count(1)
        self.held: dict[int, deque] = {}  # task -> events held until a superstep is sealed
        self.seals: dict[tuple[int, int, int], int] = {}  # (vertex, window, superstep) -> peers
        self.finished_steps: dict[tuple[int, int, int], int] = {}  # ... -> local tasks done
        self.hosts: dict[int, set[int]] = {}  # iteration vertex -> workers running its tasks
        self.local_tasks: dict[int, int] = {}  # iteration vertex -> tasks of it here
        self.loops: dict[int, LoopExchange] = {}
        self.sent_ids = SentIds()  # the ids of array graph messages, sent once per peer
        self.taken_ids = TakenIds()

    # Connections ------------------------------------------------------------------------------

    def _connect(self) -> None:
        """Connect to the driver, learn the other workers' addresses, connect to each of them:
        to every lower index, then accept every higher one (no two workers wait on each other)."""
        setup = self.setup
        family = setup.family
        driver = tuned(Client(setup.address, family=family, authkey=setup.authkey), family)
        listener = None
        if self.count > 1:
            address = (self.host or "127.0.0.1", 0) if family == "AF_INET" else None
            listener = KeyedListener(family, setup.authkey, address)
        driver.send_bytes(encode([("hello", self.index, listener.address if listener else None,
                                   os.getpid())]))
        (_, addresses), = decode(driver.recv_bytes())
        self._attach(DRIVER, driver)
        for peer in range(self.index):
            conn = tuned(Client(addresses[peer], family=family, authkey=setup.authkey), family)
            conn.send_bytes(encode([("peer", self.index)]))
            self._attach(peer, conn)
        for _ in range(self.index + 1, self.count):
            conn = tuned(listener.accept(), family)
            (_, peer), = decode(conn.recv_bytes())
            self._attach(peer, conn)
        if listener is not None:
            listener.close()

    def _attach(self, source: int, conn) -> None:
        self.conns[source] = conn
        self.out[source] = []
        threading.Thread(target=self._receive, args=(source, conn), daemon=True,
                         name=f"gyreflow-worker-receive-{source}").start()

    def _receive(self, source: int, conn) -> None:
        put = self.inbound.put
        try:
            while True:
                put((source, conn.recv_bytes()))
        except (EOFError, OSError):
            put((source, None))

    def send(self, target: int, item: tuple) -> None:
        """Queue ``item`` for ``target`` (the driver or a peer); sent at the end of the turn."""
        self.out[target].append(item)

    def _flush(self) -> None:
        for target, items in self.out.items():
            if items:
                try:
                    data = encode(items)
                except Exception:
                    if target != DRIVER:
                        raise
                    # a task's collected records go to the driver: one that does not pickle fails
                    # its task, named, as a record for another worker does (``not_picklable``)
                    data = encode([collected_or_failed(item, self.runners) for item in items])
                items.clear()
                self.conns[target].send_bytes(data)
                if target != DRIVER:
                    self.sent[target] += 1

    def ask(self, what: str, args: tuple):
        """Ask the driver to read the store and wait for its answer (a restore)."""
        token = next(self.tokens)
        self.send(DRIVER, ("read", token, what, args))
        self._flush()
        while True:
            source, data = self.inbound.get()
            if source == DRIVER and data is None:
                msg = "the driver closed its connection: the job is over"
                raise ConnectionError(msg)
            if source == DRIVER and data is not None:
                items = decode(data)
                if items[0][0] == "reply" and items[0][1] == token:
                    self.from_driver += 1
                    _, _, ok, value = items[0]
                    if not ok:
                        raise value
                    return value
                self.deferred.append((source, items))
            else:
                self.deferred.append((source, data if data is None else decode(data)))

    # The loop ---------------------------------------------------------------------------------

    def run(self) -> None:
        self._connect()
        self._build()
        while not self.stopping:
            self._take(block=False)
            if self.stopping:
                break
            if self.drain is None:
                worked = any([runner.step() for runner in self.runner_list])
            else:
                worked = any([runner.drain_step(self.drain[0]) for runner in self.runner_list])
            self._flush()
            if not worked and not self.deferred and self.inbound.empty():
                self._idle()
                self._take(block=True)
        self._flush()

    def _idle(self) -> None:
        """Tell the driver that nothing here has work (once per change of what was counted)."""
        status = (self.from_driver, tuple(self.sent), tuple(self.taken))
        if status != self.last_idle:
            self.last_idle = status
            self.send(DRIVER, ("idle", *status))
            self._flush()

    def _take(self, block: bool) -> None:
        """Handle every message that arrived (with ``block``, wait for one first)."""
        while True:
            if self.deferred:
                source, items = self.deferred.popleft()
            else:
                try:
                    source, data = self.inbound.get(block=block)
                except queue.Empty:
                    return
                items = None if data is None else decode(data)
            block = False
            if items is None:
                if source == DRIVER:  # the driver is gone: so is the job
                    self.stopping = True
                    return
                continue  # a peer is gone: the driver sees it too and restarts the job
            if source == DRIVER:
                self.from_driver += 1
            else:
                self.taken[source] += 1
            for item in items:
                self._handle(item, source)
            if self.stopping:
                return

    def _handle(self, item: tuple, source: int) -> None:
        kind = item[0]
        if kind == "data":
            _, task, channel, message = item
            if type(message) is Encoded:
                message = decode(message.data)
            self.runners[task].inbox.append((channel, message))
        elif kind == "events":
            for event in item[1]:
                self._dispatch(event)
        elif kind == "ack":
            self.writer.durable(item[1])
        elif kind == "loop":
            _, vertex, index, iteration, messages = item
            if type(messages) is list:
                messages = self.taken_ids.unpack((source, vertex, index), messages)
            task = self.by_vertex_index[(vertex, index)]
            self.loops[vertex].put(index, iteration, messages, task.graph.merge)
        elif kind == "sealed":
            _, vertex, window, step = item
            key = (vertex, window, step)
            self.seals[key] = self.seals.get(key, 0) + 1
            self._release_held()
        elif kind == "call":
            self._call(*item[1:])
        elif kind == "stop":
            self._stop()
        else:
            msg = f"worker {self.index} cannot handle {kind!r}"
            raise RuntimeError(msg)

    def _call(self, token: int, what: str, args: tuple) -> None:
        """A request of the driver that it waits for: answered at once."""
        try:
            if what == "publish":
                task, window = args
                self.runners[task].task.publish(window)
            elif what == "controls":
                for runner in self.runner_list:
                    runner.task.take_controls(args[0])
            elif what == "drain":
                self.drain = args
            value, ok = None, True
        except Exception as exc:  # noqa: BLE001 - raised again in the driver
            value, ok = portable(exc), False
        self.send(DRIVER, ("reply", token, ok, value))
        self._flush()

    def _stop(self) -> None:
        self._destroy_tasks()
        self.stopping = True

    def _destroy_tasks(self) -> None:
        runners, self.runner_list = getattr(self, "runner_list", []), []
        for runner in runners:
            if runner.task.ctx is not None:
                try:
                    runner.task.destroy()
                except Exception:  # noqa: BLE001, S110 - best effort on the way out
                    pass

    def shut(self) -> None:
        """Close the tasks still open and every connection (a worker in a process it does not
        own: the process goes on)."""
        self._destroy_tasks()
        for conn in self.conns.values():
            conn.close()

    # Supersteps across workers ------------------------------------------------------------------

    def _dispatch(self, event) -> None:
        task = event.task
        held = self.held.get(task)
        if held or not self._sealed(event):
            self.held.setdefault(task, deque()).append(event)
            return
        if event.kind is EventKind.FINISH_ITERATION:
            vertex = self.runners[task].task.vertex.id
            for key in [k for k in self.seals if k[0] == vertex and k[1] <= event.window]:
                del self.seals[key]
        self.runners[task].inbox.append(event)

    def _sealed(self, event) -> bool:
        """Whether every other worker sent all its graph messages for this superstep."""
        if event.kind is not EventKind.EXECUTE_COMPUTE or event.iteration < 2:
            return True
        vertex = self.runners[event.task].task.vertex.id
        peers = len(self.hosts.get(vertex, ())) - 1
        return peers <= 0 or self.seals.get((vertex, event.window, event.iteration), 0) >= peers

    def _release_held(self) -> None:
        for task, held in list(self.held.items()):
            while held and self._sealed(held[0]):
                self.runners[task].inbox.append(held.popleft())
            if not held:
                del self.held[task]

    def _superstep_done(self, vertex: int, window: int, step: int) -> None:
        key = (vertex, window, step)
        done = self.finished_steps.get(key, 0) + 1
        if done < self.local_tasks[vertex]:
            self.finished_steps[key] = done
            return
        self.finished_steps.pop(key, None)
        for peer in self.hosts[vertex]:
            if peer != self.index:
                self.send(peer, ("sealed", vertex, window, step))

    # Tasks ------------------------------------------------------------------------------------

    def _build(self) -> None:
        """Build the runners of this worker's tasks; channels to other workers' tasks send there."""
        setup = self.setup
        graph = setup.graph
        self.writer = DriverWriter(self)
        checkpoints = TaskCheckpoints(setup.job, DriverStore(self), self.writer, False, setup.rescaled,
                                      cycle_ends=dict(setup.cycle_ends))
        tasks = graph.tasks()
        mine = [t for t in tasks if worker_of(t.index, self.count) == self.index]
        cycle_of = {t.id: c.id for c in graph.cycles() for t in c.tasks}
        inputs, links = link_channels(graph)
        batch_size = setup.config["runtime.batch_size"]
        report = self._report
        self.runners: dict[int, TaskRunner] = {}
        self.by_vertex_index: dict[tuple[int, int], IterationTask] = {}
        for t in mine:
            vertex = graph.vertex(t.vertex_id)
            cls = task_class_for(vertex)
            if cls is IterationTask:
                cls = WorkerIterationTask
            task = cls(t, vertex, cycle_of[t.id], inputs[t.id], None, setup.backend, batch_size,
                       report, checkpoints=checkpoints)
            if isinstance(task, WorkerIterationTask):
                task.superstep_done = self._superstep_done
                task.loop = self.loops.setdefault(t.vertex_id, LoopExchange(self, t.vertex_id))
                self.by_vertex_index[(t.vertex_id, t.index)] = task
                self.local_tasks[t.vertex_id] = self.local_tasks.get(t.vertex_id, 0) + 1
                self.hosts[t.vertex_id] = {worker_of(i, self.count)
                                           for i in range(t.parallelism)}
            self.runners[t.id] = TaskRunner(task, report)
        delivers: dict[tuple[int, int], list] = {}
        sent: dict[int, dict[str, list[int]]] = {}  # source task -> edge -> bytes sent (a cell)
        for edge, s, t, channel in links:
            if worker_of(s.index, self.count) != self.index:
                continue
            target = worker_of(t.index, self.count)
            if target == self.index:
                deliver = self.runners[t.id].deliverer(channel)
            else:
                label = edge_label(graph, edge)
                counter = sent.setdefault(s.id, {}).setdefault(label, [0])
                deliver = self._remote(target, t.id, channel, counter, label)
            delivers.setdefault((s.id, id(edge)), []).append(deliver)
        kinds = combine_kinds(graph)  # keyed counts, aggregates, associative reduces
        for t in mine:
            by_edge = {i: delivers.get((t.id, id(edge)), [])
                       for i, edge in enumerate(graph.outputs(t.vertex_id))}
            task = self.runners[t.id].task
            task.emitter = build_emitter(graph, t.vertex_id, t.index, by_edge, kinds,
                                         setup.backend.max_parallelism)
            task.emitter.sent = sent.get(t.id, {})
            task.combined_input = takes_combined(graph, t.vertex_id, kinds)
        self.runner_list = list(self.runners.values())

    def _remote(self, target: int, task: int, channel: int, counter: list[int], label: str):
        """A deliver to a task of another worker: a batch is encoded here, alone (a list of
        records as one pickle, a column batch as one Arrow IPC stream), so that its bytes count
        for its edge; barriers and the end of input travel as they are."""
        append = self.out[target].append  # ``_flush`` empties the list in place

        def deliver(message) -> None:
            if type(message) is list or type(message) is ColumnBatch:
                try:
                    message = Encoded(encode(message))
                except Exception as exc:
                    raise not_picklable(label, message, exc) from exc
                counter[0] += len(message.data)
            append(("data", task, channel, message))

        return deliver

    def _report(self, report) -> None:
        if isinstance(report, TaskFailed):
            report = attrs.evolve(report, error=portable(report.error))
        self.send(DRIVER, ("report", report))
