"""Workers mode on Spark: a job's worker processes run as the tasks of one Spark barrier stage.

``SparkLauncher`` is the worker host's launcher (runtime/workers/host.py) for ``spark.mode =
workers``: a thread of the driver submits ``parallelize(range(n), n).barrier().mapPartitions(...)``
under a job group of its own, and task ``i`` of that stage runs worker ``i`` for the whole job
(runtime/workers/worker.py), listening on its executor's address. The driver listens on its own
address; every connection is TCP with the run's random authkey (multiprocessing's HMAC challenge;
a connection that fails it is dropped: runtime/workers/wire.py), so records go from worker to
worker and never through the JVM. The setup (plan, user functions, authkey) travels with the
stage's closure, pickled with cloudpickle.

A barrier stage that loses a task is not retried by Spark: the stage is a result stage, and Spark
aborts a failed barrier result stage ("Could not recover from a failed barrier ResultStage"). The
driver sees the lost worker's connection close, reports a ``WorkerLostError``, and its restart
strategy starts a new stage from the last completed window. ``kill`` cancels the job group and waits
a bounded time for the stage to end.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import re
import threading
import uuid

from gyreflow.runtime.spark.shipping import pickle_for_executors, ship_user_modules_if_needed
from gyreflow.runtime.workers.wire import KeyedListener
from gyreflow.runtime.workers.worker import WorkerSetup, serve_in_task

KILL_SECONDS = 20.0  # the longest a cancelled stage is waited for: close() never hangs
_LOCAL = re.compile(r"local(?:\[\s*(\d+|\*)\s*(?:,\s*\d+\s*)?\])?")


def is_local_master(master: str) -> bool:
    """Whether ``master`` runs Spark inside the driver's JVM (``local``, ``local[N]``, ...)."""
    return _LOCAL.fullmatch(master.strip()) is not None


def task_slots(context, master: str, task_cpus: int = 1) -> int:
    """How many tasks the master runs at once: N for ``local[N]`` (every core for ``local[*]``),
    else Spark's default parallelism (its executors' cores; ``context`` is only asked then),
    divided by ``spark.task.cpus``.

    >>> task_slots(None, "local[3]"), task_slots(None, "local[2, 4]"), task_slots(None, "local")
    (3, 2, 1)
    """
    cpus = max(1, task_cpus)
    match = _LOCAL.fullmatch(master.strip())
    if match is not None:
        cores = match.group(1)
        slots = 1 if cores is None else (os.cpu_count() or 1) if cores == "*" else int(cores)
    else:
        slots = context.defaultParallelism
    return max(slots // cpus, 0)


def too_few_slots(workers: int, slots: int, master: str) -> str | None:
    """The one-line refusal of a stage of ``workers`` tasks on a master of ``slots``, or None.

    >>> too_few_slots(4, 2, "local[2]")[:60]
    'spark.mode = "workers" needs 4 task slots (spark.workers = 4'
    """
    if workers <= slots:
        return None
    return (f'spark.mode = "workers" needs {workers} task slots (spark.workers = {workers}) but '
            f"the master {master} has {slots}: set spark.workers to {slots} or fewer (0: one "
            "worker per slot), give the master more slots (spark.master = local[N], more "
            'executor cores), or use spark.mode = "rounds"')


def dynamic_allocation_refusal(context) -> str | None:
    """The one-line refusal of workers mode under dynamic allocation (Spark runs no barrier stage
    then), or None."""
    if context is None or context.getConf().get("spark.dynamicAllocation.enabled",
                                                 "false").strip().lower() != "true":
        return None
    return ('spark.mode = "workers" runs its workers as one Spark barrier stage, which Spark does not '
            "run with dynamic allocation: set spark.dynamicAllocation.enabled = false in spark.conf, "
            'or use spark.mode = "rounds"')


def driver_address(context, master: str) -> str:
    """Where the driver listens for its workers: 127.0.0.1 with a local master, else the address
    Spark gives the driver (``spark.driver.host``), else this machine's name."""
    if is_local_master(master):
        return "127.0.0.1"
    import socket

    return context.getConf().get("spark.driver.host", None) or socket.gethostname()


class SparkLauncher:
    """Starts a job's workers as the tasks of one Spark barrier stage (see the module's text)."""

    family = "AF_INET"
    connect_seconds = 120  # a stage waits for free slots (a cancelled one's tasks end first)

    def __init__(self, session_factory, master: str, slots: int = 1) -> None:
        self.session_factory = session_factory
        self.master = master
        self.max_workers = slots  # a barrier stage gets at most the master's task slots
        self.group = f"gyreflow-workers-{uuid.uuid4().hex}"
        self.context = None
        self.thread: threading.Thread | None = None
        self.finished = threading.Event()
        self.failure: str | None = None

    def listen(self, authkey: bytes) -> KeyedListener:
        """The driver's listener: a TCP port of the driver's address (port 0: any free one); a
        connection without the run's key is dropped and the listener waits on."""
        self.context = self.session_factory().sparkContext
        address = (driver_address(self.context, self.master), 0)
        return KeyedListener("AF_INET", authkey, address)

    def start(self, setup: WorkerSetup, count: int) -> None:
        """Submit the barrier stage from a thread of its own (it runs as long as the job)."""
        ship_user_modules_if_needed(is_local_master(self.master))
        blob = shippable_setup(setup)  # fails before any data moves
        self.thread = threading.Thread(target=self._run, args=(blob, count, setup.job),
                                       daemon=True, name="gyreflow-barrier-stage")
        self.thread.start()

    def _run(self, blob: bytes, count: int, job: str) -> None:
        context = self.context
        try:
            # Pinned-thread mode: the job group belongs to the thread that submits the job.
            context.setJobGroup(self.group, f"gyreflow workers of job {job}", interruptOnCancel=True)
            context.parallelize(range(count), count).barrier().mapPartitions(
                _worker_partition(blob)).collect()
        except BaseException as exc:  # noqa: BLE001 - how the stage ended, for messages
            self.failure = spark_reason(exc)
        finally:
            self.finished.set()

    def ended(self) -> str | None:
        """How the stage ended before every worker connected (None while it runs)."""
        if not self.finished.is_set():
            return None
        return f"the Spark stage of the workers {'failed: ' + self.failure if self.failure else 'ended'}"

    def lost(self) -> tuple[int, str] | None:
        """A worker lost without its connection closing: the stage ended (an executor was lost,
        Spark cancelled it); Spark does not say which worker, so worker 0 stands for them."""
        if not self.finished.is_set():
            return None
        return 0, f"ended with the Spark stage of the workers ({self.failure or 'it ended'})"

    def describe_loss(self, worker: int) -> str:
        """How worker ``worker``, whose connection closed, ended, as far as Spark says within 1 s."""
        self.finished.wait(1.0)
        return f"closed its connection (Spark: {self.failure})" if self.failure else (
            "closed its connection")

    def stop(self, seconds: float) -> None:
        """Wait up to ``seconds`` for the workers, told to stop, to end their tasks; then cancel."""
        if self.thread is not None and not self.finished.wait(seconds):
            self.kill()

    def kill(self) -> None:
        """Cancel the stage's job group and wait (a bounded time) for it to end."""
        if self.thread is None:
            return
        if not self.finished.is_set():
            with contextlib.suppress(Exception):  # a stopped context has nothing to cancel
                self.context.cancelJobGroup(self.group)
        self.finished.wait(KILL_SECONDS)


def shippable_setup(setup: WorkerSetup) -> bytes:
    """The workers' setup pickled for the executors; fails before any data moves if it cannot be,
    naming the operator and what it holds (runtime/spark/shipping.py)."""
    return pickle_for_executors(setup.job, setup.graph, setup)


def _worker_partition(blob: bytes):
    """The barrier stage's function: partition ``i`` runs worker ``i`` until the job ends."""

    def run(_partition):
        from pyspark import BarrierTaskContext

        context = BarrierTaskContext.get()
        index = context.partitionId()
        host = context.getTaskInfos()[index].address.rsplit(":", 1)[0]
        serve_in_task(pickle.loads(blob), index, host)  # the driver's own setup
        yield index

    return run


def spark_reason(error: BaseException) -> str:
    """Spark's reason for a failed job in one short line (the Py4J text runs to many lines)."""
    text = str(getattr(error, "java_exception", None) or error)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        if "SparkException:" in line:
            return line.split("SparkException:", 1)[1].strip()[:300]
    return (lines[0] if lines else type(error).__name__)[:300]
