"""Killing a job's worker processes at random moments: finding them through /proc, and a killer.

The forked workers are the driver's children with its command line; the Spark workers are the
Python processes under the driver's JVM that hold a TCP connection to the driver (each worker of a
barrier stage is connected to it for the whole run). ``Killer`` is a ``JobListener`` that SIGKILLs
a random live worker, waits for the restart, and does it again. Used by benchmarks/failover.py and
tests/runtime/workers/test_failover_storm.py.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from pathlib import Path

from gyreflow.runtime.driver import JobListener

WORKERS = 2
FOUND_SECONDS = 180.0  # the longest wait for the workers of a (re)started run
RESTART_SECONDS = 180.0  # the longest wait for the restart after a kill


# Worker processes, through /proc -----------------------------------------------------------------


def children(pid: int) -> list[int]:
    """The child processes of ``pid`` (none once it ended); a thread that ends while they are
    read is passed over."""
    out = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return out
    for task in tasks:
        try:
            out.extend(int(c) for c in (task / "children").read_text().split())
        except OSError:
            continue
    return out


def forks(pid: int) -> list[int]:
    """The children of ``pid`` that are forks of it (the same command line): forked workers, not
    the processes it started (a snapshot writer, a JVM)."""
    mine = cmdline(pid)
    return sorted(child for child in children(pid) if mine and cmdline(child) == mine)


def descendants(pid: int) -> list[int]:
    found, todo = [], children(pid)
    while todo:
        child = todo.pop()
        found.append(child)
        todo.extend(children(child))
    return found


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def forked_workers() -> list[int]:
    """The driver's children that are forks of it (the workers; the RocksDB writer is started anew)."""
    return forks(os.getpid())


def socket_inodes(pid: int) -> set[str]:
    inodes = set()
    try:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        pass
    return inodes


def established_tcp() -> dict[str, tuple[str, str]]:
    """Every established TCP connection of this machine: inode -> (local, remote) address."""
    table = {}
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(name).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "01":  # ESTABLISHED
                table[fields[9]] = (fields[1], fields[2])
    return table


def spark_workers() -> list[int]:
    """The Python processes under the driver's JVM connected to the driver: the barrier stage's
    workers (idle reused Python workers of Spark, and the JVM itself, are not)."""
    table = established_tcp()
    mine = {table[i] for i in socket_inodes(os.getpid()) if i in table}
    peers = {(remote, local) for local, remote in mine}
    found = []
    for pid in descendants(os.getpid()):
        line = cmdline(pid)
        if b"python" not in line or b"java" in line.split(b"\0")[0]:
            continue
        if any(table.get(i) in peers for i in socket_inodes(pid)):
            found.append(pid)
    return sorted(found)


# The killer --------------------------------------------------------------------------------------


class Killer(JobListener):
    """Kills a random live worker ``kills`` times, each after a seeded random delay once the job
    (re)started and its workers are up, and waits for the restart before the next kill."""

    def __init__(self, kills: int, gap: float, seed: int, find) -> None:
        self.kills = kills
        self.gap = gap
        self.random = random.Random(seed)
        self.find = find
        self.killed: list[int] = []
        self.restarts: list[int] = []
        self.problem: str | None = None
        self.done = threading.Event()  # the job returned or raised
        self.restarted = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="failover-killer")

    def on_start(self, name, graph) -> None:
        if not self.thread.is_alive() and not self.killed:
            self.thread.start()

    def on_restart(self, name, graph, window) -> None:
        self.restarts.append(window)
        self.restarted.set()

    def _live_workers(self) -> list[int]:
        deadline = time.monotonic() + FOUND_SECONDS
        while not self.done.is_set() and time.monotonic() < deadline:
            pids = self.find()
            if len(pids) == WORKERS:
                return pids
            time.sleep(0.01)
        return []

    def _run(self) -> None:
        for number in range(1, self.kills + 1):
            if not self._live_workers():
                why = "the job ended" if self.done.is_set() else "timed out"
                self.problem = f"kill {number}: no live workers ({why})"
                return
            time.sleep(self.random.uniform(0.0, self.gap))
            pids = self._live_workers()
            if not pids:
                self.problem = f"kill {number}: the job ended before it"
                return
            pid = self.random.choice(pids)
            self.restarted.clear()
            os.kill(pid, signal.SIGKILL)
            self.killed.append(pid)
            deadline = time.monotonic() + RESTART_SECONDS
            while not self.restarted.wait(0.05):
                if self.done.is_set() or time.monotonic() > deadline:
                    self.problem = f"kill {number} (pid {pid}): no restart followed"
                    return
