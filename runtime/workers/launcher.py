"""Starting a job's worker processes on this machine (forked) and watching them: how the first that
died did, and stopping them all."""

from __future__ import annotations

import gc
import multiprocessing
import time

from gyreflow.runtime.errors import PlanNotShippableError
from gyreflow.runtime.workers.wire import KeyedListener, describe_exit
from gyreflow.runtime.workers.worker import PEER_LOST_STATUS, WorkerSetup, serve


def refuse_in_process_sinks(setup: WorkerSetup) -> None:
    """Fail before any data moves when a sink writes to an object of this process (a PrintSink's
    stream): a forked worker would write to its own copy, and the output would be lost."""
    for vertex in setup.graph.pipeline.vertices:
        sink = getattr(vertex.spec, "sink", None)
        if getattr(sink, "in_process_only", False):
            msg = (f"job {setup.job!r}: operator {vertex.name!r} cannot run in a worker process: "
                   f"{sink.describe()} writes to an object of this process; run it with "
                   "environment.workers = 1, or leave its stream unset to print on standard output")
            raise PlanNotShippableError(msg)


STOP_FAILED_SECONDS = 5  # how long workers told to stop after a failure get before they are killed
FIRST_DEATH_SECONDS = 1.0  # how long a worker that lost a peer waits for the peer to be seen dead


class ForkLauncher:
    """Starts the workers as forks of this process, on Unix sockets; how they end is their exit
    status. The other launcher: ``SparkLauncher`` (runtime/spark/barrier.py)."""

    family = "AF_UNIX"
    connect_seconds = 60  # every worker connects back within this (forked, not started anew)
    max_workers = 256  # what ``control rescale N`` may ask for on one machine

    def __init__(self) -> None:
        self.processes: list = []

    def listen(self, authkey: bytes) -> KeyedListener:
        """The driver's listener: a Unix socket in a 0700 directory of this process; it serves
        once the workers are forked (``KeyedListener.serve``)."""
        return KeyedListener("AF_UNIX", authkey, serving=False)

    def start(self, setup: WorkerSetup, count: int) -> None:
        refuse_in_process_sinks(setup)
        context = multiprocessing.get_context("fork")
        # This process's objects stay its own: a forked worker's garbage collection never
        # finalizes them (a native library's object whose threads the fork did not copy hangs
        # in its destructor; a connection would be closed under this process).
        gc.freeze()
        try:
            for index in range(count):
                process = context.Process(target=serve, args=(setup, index), daemon=True,
                                          name=f"gyreflow-worker-{index}")
                process.start()
                self.processes.append(process)
        finally:
            gc.unfreeze()

    def ended(self) -> str | None:
        """How the first worker that died did, ``worker 1 (pid 42) killed by SIGKILL`` (None while
        every one runs)."""
        lost = self.lost()
        if lost is None:
            return None
        index, how = lost
        return f"worker {index} (pid {self.processes[index].pid}) {how}"

    def lost(self) -> tuple[int, str] | None:
        """The first worker that died and how (None while every one runs)."""
        for index, process in enumerate(self.processes):
            if not process.is_alive():
                return self.first_lost(index)
        return None

    def describe_loss(self, worker: int) -> str:
        """How worker ``worker``, whose connection closed, ended: ``killed by SIGKILL``."""
        process = self.processes[worker]
        process.join(1.0)
        return describe_exit(process.exitcode)

    def first_lost(self, worker: int) -> tuple[int, str]:
        """The worker whose death ended the run, given that ``worker`` ended (or closed its
        connection), and how it ended: ``worker`` itself, unless it ended because another worker
        had gone away (``PEER_LOST_STATUS``): then the one that died first. Two workers seen dead
        at once (the driver was busy, or paused) are told apart by that status, not by index."""
        how = self.describe_loss(worker)
        if self.processes[worker].exitcode != PEER_LOST_STATUS:
            return worker, how
        deadline = time.monotonic() + FIRST_DEATH_SECONDS
        while True:
            for index, process in enumerate(self.processes):
                if not process.is_alive() and process.exitcode != PEER_LOST_STATUS:
                    return index, describe_exit(process.exitcode)
            if time.monotonic() >= deadline:
                return worker, how
            time.sleep(0.01)

    def stop(self, seconds: float) -> None:
        """Wait up to ``seconds`` for the workers, told to stop, to end; then kill the rest."""
        for process in self.processes:
            process.join(seconds)
        self.kill()

    def kill(self) -> None:
        for process in self.processes:
            if process.is_alive():
                process.kill()
        for process in self.processes:
            process.join(5)
