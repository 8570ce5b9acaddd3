"""The worker host: a job's tasks run in N long-lived worker processes that this host starts.

``open`` has its launcher start the workers: ``ForkLauncher`` forks them on this machine (they
inherit the plan and a random per-run authkey; Unix sockets in private directories), the Spark
launcher (runtime/spark/barrier.py) runs them as the tasks of one Spark barrier stage (TCP, the same
authkey). The host accepts their connections and tells each where the others listen; the
workers then connect to each other and exchange batches directly (runtime/workers/worker.py). The
host, in the driver's thread, sends the scheduler's events to the worker of each task, hands their
reports to the driver, stores their snapshots through the job's one writer (answering each worker
when its write is durable) and answers their store reads while they restore.

The driver blocks on its report queue whenever ``step`` says False; so ``step`` says False only when
the job is quiescent: every worker said it is idle after taking every message this host sent it,
each worker took every message the others sent it (counted per pair), and no snapshot write of a
worker waits for its acknowledgement. A worker that dies closes its connection: the host reports a
``WorkerLostError`` for one of its tasks, and the driver fails the run (a restart strategy may start
it again from the last completed window).
"""

from __future__ import annotations

import itertools
import os
import queue
import threading
import time
from multiprocessing.connection import wait

import attrs

from gyreflow.plan.execution import ExecutionGraph
from gyreflow.runtime.errors import SnapshotWriteError
from gyreflow.runtime.host import HostLink
from gyreflow.runtime.local.host import _WatchedWriter as WatchedWriter
from gyreflow.runtime.snapshot_writers import InlineSnapshotWriter, ProcessSnapshotWriter
from gyreflow.runtime.workers.launcher import STOP_FAILED_SECONDS, ForkLauncher
from gyreflow.runtime.workers.wire import (
    WorkerLostError,
    decode,
    encode,
    tuned,
    worker_of,
)
from gyreflow.runtime.workers.worker import WorkerSetup
from gyreflow.scheduler.events import TaskFailed

WAIT_SECONDS = 0.05  # one wait for worker messages while only the driver's writer has work
LOSS_CHECK_SECONDS = 0.1  # how often a step asks the launcher whether a worker ended


class WorkerHost:
    """Runs the tasks of a job in ``environment.workers`` worker processes on this machine, or in
    the worker processes another launcher starts (a Spark barrier stage)."""

    name = "workers"

    def __init__(self, config, backend, workers: int | None = None, launcher=None) -> None:
        self.config = config
        self.backend = backend
        self.count = workers or config["environment.workers"]
        self.launcher = launcher if launcher is not None else ForkLauncher()
        self._writer: WatchedWriter | None = None
        self._store = None
        self._pids: list[int] = []
        self._conns: list = []
        self._lost: str | None = None
        self._closing = False
        self._next_loss_check = 0.0
        self._wake_fds: tuple[int, ...] = ()

    @property
    def writer(self) -> WatchedWriter:
        """The job's snapshot writer (the workers' snapshots go through it too)."""
        return self._writer

    @property
    def max_workers(self) -> int:
        """The most worker processes this host's launcher can start (a rescale's bound)."""
        return self.launcher.max_workers

    @property
    def pids(self) -> tuple[int, ...]:
        """The worker processes' ids, by worker index (as each said in its hello)."""
        return tuple(self._pids)

    def open(self, job: str, graph: ExecutionGraph, store, link: HostLink, resume_from: int,
             rescaled: frozenset[str], horizon: int, cycle_ends=None) -> None:
        """Fork the workers, connect them, and open the job's snapshot writer."""
        self._store = store
        self._link = link
        self._job = job
        tasks = graph.tasks()
        self._worker_of = {t.id: worker_of(t.index, self.count) for t in tasks}
        self._cycle_of = {t.id: c.id for c in graph.cycles() for t in c.tasks}
        self._sinks = [t.id for t in tasks
                       if any(v.spec.kind.value == "sink" for v in graph.vertex(t.vertex_id).chain)]
        self._a_task = {}
        for t in tasks:
            self._a_task.setdefault(self._worker_of[t.id], t.id)
        self._sent = [0] * self.count  # messages sent to each worker
        self._idle: list[tuple | None] = [None] * self.count  # each worker's last idle status
        self._acks: queue.SimpleQueue = queue.SimpleQueue()  # (worker, token) of durable writes
        self._writes = 0  # worker writes not yet acknowledged to their worker
        self._replies: dict[int, tuple] = {}
        self._tokens = itertools.count(1)
        self._drain_sent = False
        # Durable writes and commits wake a wait for worker messages (the driver and the workers
        # wait for them).
        self._wake_read, self._wake_write = self._wake_fds = os.pipe()
        os.set_blocking(self._wake_write, False)
        self._start(WorkerSetup(job, graph, self.config, self.backend, self.count, None,
                                os.urandom(32), rescaled, dict(cycle_ends or {}), os.getpid(),
                                self.launcher.family))
        # Forked before the writer process starts, so that no worker holds the writer's pipes.
        if self.backend.name == "memory":
            writer = InlineSnapshotWriter(store, link.writer_failed)
        else:
            writer = ProcessSnapshotWriter(self.backend, link.writer_failed, before_start=store.close)
        self._writer = _WakingWriter(writer, self._wake)

    def _wake(self) -> None:
        try:
            os.write(self._wake_write, b"w")
        except (BlockingIOError, OSError):  # full: a wake is pending anyway; closed: done
            pass

    def _start(self, setup: WorkerSetup) -> None:
        # The launcher's listener and the per-run authkey: only this run's workers can connect
        # (multiprocessing's HMAC challenge).
        listener = self.launcher.listen(setup.authkey)
        try:
            setup = attrs.evolve(setup, address=listener.address)
            self.launcher.start(setup, self.count)
            listener.serve()
            hellos = self._accept(listener)
        finally:
            listener.close()
        addresses = [address for _, address, _ in sorted(hellos.values())]
        self._pids = [pid for _, _, pid in sorted(hellos.values())]
        self._conns = [conn for conn, _ in sorted(hellos.items(), key=lambda kv: kv[1][0])]
        for conn in self._conns:
            conn.send_bytes(encode([("peers", addresses)]))

    def _accept(self, listener) -> dict:
        """Accept every worker's connection (a worker that dies first is reported, not waited for)."""
        hellos: dict = {}
        failure: list = []

        def accept() -> None:
            try:
                for _ in range(self.count):
                    conn = tuned(listener.accept(), self.launcher.family)
                    (_, index, address, pid), = decode(conn.recv_bytes())
                    hellos[conn] = (index, address, pid)
            except Exception as exc:  # noqa: BLE001 - reported below
                failure.append(exc)

        thread = threading.Thread(target=accept, daemon=True, name="gyreflow-worker-accept")
        thread.start()
        seconds = self.launcher.connect_seconds
        deadline = time.monotonic() + seconds
        while thread.is_alive():
            thread.join(0.05)
            ended = self.launcher.ended()
            if ended or time.monotonic() > deadline:
                self.launcher.kill()
                what = ended or f"the workers did not connect within {seconds} s"
                if not ended and getattr(listener, "dropped", 0):
                    # (a worker killed during its challenge counts as dropped: its death says more)
                    what += (f" ({listener.dropped} connection(s) without the run's key were "
                             "dropped)")
                msg = f"job {self._job!r} could not start its workers: {what}"
                raise WorkerLostError(msg)
        if failure:
            self.launcher.kill()
            msg = f"job {self._job!r} could not start its workers: {failure[0]}"
            raise WorkerLostError(msg)
        return hellos

    # Sending ----------------------------------------------------------------------------------

    def _send(self, worker: int, items: list) -> None:
        if self._lost is not None:
            return
        try:
            self._conns[worker].send_bytes(encode(items))
        except OSError:
            self._worker_lost(worker)
            return
        self._sent[worker] += 1

    def send(self, events) -> None:
        """Send each event to its task's worker (one message per worker, in order)."""
        by_worker: dict[int, list] = {}
        worker_of_task = self._worker_of
        for event in events:
            by_worker.setdefault(worker_of_task[event.task], []).append(event)
        for worker, batch in by_worker.items():
            self._send(worker, [("events", batch)])

    def _call(self, worker: int, what: str, args: tuple):
        """Ask one worker to do something now and wait for its answer."""
        token = next(self._tokens)
        self._send(worker, [("call", token, what, args)])
        while token not in self._replies:
            if self._lost is not None:
                raise WorkerLostError(self._lost)
            self._pump(WAIT_SECONDS)
        ok, value = self._replies.pop(token)
        if not ok:
            raise value
        return value

    def control(self, window: int, controls) -> None:
        """Every task keeps the controls until it starts ``window``; each worker has them before
        this returns (so before any batch of ``window`` reaches it from another worker)."""
        for worker in range(self.count):
            self._call(worker, "controls", (tuple(controls),))

    # Receiving --------------------------------------------------------------------------------

    def _pump(self, timeout: float) -> bool:
        """Handle what the workers sent (waiting up to ``timeout`` for something); True if any."""
        self._forward_acks()
        live = [conn for conn in self._conns if not conn.closed]
        ready = wait([*live, self._wake_read], timeout)
        for conn in ready:
            if conn == self._wake_read:
                os.read(self._wake_read, 4096)
                continue
            worker = self._conns.index(conn)
            try:
                data = conn.recv_bytes()
            except (EOFError, OSError):
                self._worker_lost(worker)
                continue
            for item in decode(data):
                self._handle(worker, item)
        self._forward_acks()
        return bool(ready)

    def _handle(self, worker: int, item: tuple) -> None:
        kind = item[0]
        if kind == "report":
            self._link.report(item[1])
        elif kind == "write":
            _, token, snapshot = item
            self._writes += 1
            acks = self._acks
            self._writer.write(snapshot, lambda: acks.put((worker, token)))
        elif kind == "idle":
            self._idle[worker] = item[1:]
        elif kind == "read":
            _, token, what, args = item
            self._send(worker, [("reply", token, *self._read(what, args))])
        elif kind == "reply":
            _, token, ok, value = item
            if token:  # 0: a call nobody waits for
                self._replies[token] = (ok, value)
        else:
            msg = f"worker {worker} sent {kind!r}"
            raise RuntimeError(msg)

    def _read(self, what: str, args: tuple) -> tuple[bool, object]:
        store = self._store
        try:
            if what == "read_into":
                data: dict = {}
                store.read_into(*args, data)
                return True, data
            return True, getattr(store, what)(*args)
        except Exception as exc:  # noqa: BLE001 - raised again in the worker's task
            return False, exc

    def _forward_acks(self) -> None:
        while True:
            try:
                worker, token = self._acks.get_nowait()
            except queue.Empty:
                return
            self._writes -= 1
            self._send(worker, [("ack", token)])

    def _worker_lost(self, worker: int, how: str | None = None) -> None:
        if self._lost is not None or self._closing:
            return
        if how is None:
            first_lost = getattr(self.launcher, "first_lost", None)  # a Spark stage cannot say
            if first_lost is not None:
                worker, how = first_lost(worker)
            else:
                how = self.launcher.describe_loss(worker)
        self._lost = f"worker {worker} (pid {self._pids[worker]}) of job {self._job!r} {how}"
        task = self._a_task.get(worker, next(iter(self._worker_of)))
        self._link.report(TaskFailed(self._cycle_of[task], task, 0, WorkerLostError(self._lost)))

    def _quiescent(self) -> bool:
        """Whether no worker has work and nothing is on its way to one (see the module's text)."""
        if self._writes:
            return False
        idle = self._idle
        for worker in range(self.count):
            status = idle[worker]
            if status is None or status[0] != self._sent[worker]:
                return False
        for a in range(self.count):
            for b in range(self.count):
                if a != b and idle[a][1][b] != idle[b][2][a]:
                    return False
        return True

    # The host protocol ------------------------------------------------------------------------

    def step(self) -> bool:
        """Handle what the workers sent; False once nothing came and the job is quiescent (or a
        worker is lost)."""
        if self._lost is not None:
            return False
        now = time.monotonic()
        if now >= self._next_loss_check:
            # A worker gone without its connection closing (yet): a Spark stage that ended may
            # leave its workers running a while, so this is asked even while messages keep coming.
            self._next_loss_check = now + LOSS_CHECK_SECONDS
            lost = self.launcher.lost()
            if lost is not None:
                self._worker_lost(*lost)
                if self._lost is not None:
                    return False
        if self._pump(0):
            return True  # the driver handles what came before it waits
        if self._quiescent():
            return False
        self._pump(WAIT_SECONDS)  # something is under way: wait for its next message
        return True

    def drain_step(self, before: int | None) -> bool:
        """Like ``step`` while the job fails: workers read no window from ``before`` on; nothing
        goes on once a worker is lost (its windows cannot complete)."""
        if self._lost is not None:
            return False
        if not self._drain_sent:
            self._drain_sent = True
            for worker in range(self.count):
                self._send(worker, [("call", 0, "drain", (before,))])
        return self.step()

    def has_work(self) -> bool:
        """Whether a worker may still have work (the job is not quiescent)."""
        if self._lost is not None:
            return False
        self._pump(0)
        return not self._quiescent()

    def publishers(self):
        """One function per sink task: its worker publishes the window before it returns."""
        return [self._publisher(task) for task in self._sinks]

    def _publisher(self, task: int):
        worker = self._worker_of[task]

        def publish(window: int) -> None:
            self._call(worker, "publish", (task, window))

        return publish

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
        """Stop the workers (at once after a failure: the next run restores from the last completed
        window), then close the writer and the store."""
        self._closing = True
        try:
            if self._lost is not None:
                for conn in self._conns:  # a worker that reads it closed stops by itself
                    conn.close()
                self.launcher.kill()
            else:
                # Every worker lives (after a failure too, e.g. a user function raised): each
                # destroys its tasks first, as the in-process host does, so that a sink drops the
                # window it was staging; then it ends (or is killed when it does not, in time).
                for worker in range(len(self._conns)):  # none when the workers did not start
                    self._send(worker, [("stop",)])
                self.launcher.stop(STOP_FAILED_SECONDS if failed else 10)
        finally:
            for conn in self._conns:
                conn.close()
            if self._writer is not None:
                self._writer.close()
            for fd in self._wake_fds:
                os.close(fd)
            self._wake_fds = ()
            if self._store is not None and self.backend.name != "memory":
                self._store.close()



class _WakingWriter(WatchedWriter):
    """The job's writer; every durable operation also wakes the host's wait for worker messages."""

    def __init__(self, writer, wake) -> None:
        super().__init__(writer)
        self.wake = wake

    def write(self, snapshot, on_done) -> None:
        wake = self.wake
        super().write(snapshot, lambda: (on_done(), wake()))

    def commit(self, meta, on_done) -> None:
        wake = self.wake
        super().commit(meta, lambda: (on_done(), wake()))
