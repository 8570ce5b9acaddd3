"""A storm of kills: SIGKILLs of random worker processes at random moments of one run, one after another.

Forked workers (environment.workers = 2) and a Spark barrier stage (spark.mode = workers): a killer
thread waits a seeded random delay once the run's workers are up, kills one of them at random,
waits for the restart, and does it again. The job finishes by itself, its published files and
collected counts equal a ``Counter`` oracle, and ``gyreflow_restarts_total`` equals the kills.
benchmarks/failover.py runs the same with 20 kills and both state backends.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from pathlib import Path

import pytest
from _spark_master import SPARK_MASTER
from prometheus_client import generate_latest
from test_worker_host import published, updated_totals, worker_pids

from gyreflow.api import FileSink, SizeTumblingWindow
from gyreflow.api.service.monitor import JobMonitor
from gyreflow.runtime.driver import JobListener, Listeners

pytestmark = pytest.mark.processes

KILLS = 3
WINDOW = 100
WORDS = [f"w{(i * 7919) % 37}" for i in range(4000)]  # 40 windows
PAUSE = 0.03  # each window's first record waits: the run outlasts the kills


def connected_to_me() -> list[int]:
    """The Python processes under this one (Spark's workers under its JVM) holding a TCP connection
    to this process: the workers of the running barrier stage."""
    table = {}
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(name).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "01":  # ESTABLISHED
                table[fields[9]] = (fields[1], fields[2])
    peers = {(remote, local) for local, remote in (table[i] for i in sockets(os.getpid())
                                                   if i in table)}
    found = []
    for pid in descendants(os.getpid()):
        try:
            line = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"python" in line and b"java" not in line.split(b"\0")[0] and any(
                table.get(i) in peers for i in sockets(pid)):
            found.append(pid)
    return sorted(found)


def sockets(pid: int) -> set[str]:
    inodes = set()
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return inodes
    for fd in fds:
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = list(Path(f"/proc/{parent}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                children = [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
            found.extend(children)
            todo.extend(children)
    return found


class Storm(JobListener):
    """Kills a random one of the run's 2 workers ``kills`` times, each a seeded random delay after
    the (re)started run's workers are up, waiting for the restart before the next."""

    def __init__(self, kills: int, find, seed: int = 7) -> None:
        self.kills = kills
        self.find = find
        self.random = random.Random(seed)
        self.killed: list[int] = []
        self.restarts: list[int] = []
        self.restarted = threading.Event()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def on_start(self, name, graph) -> None:
        self.thread.start()

    def on_restart(self, name, graph, window) -> None:
        self.restarts.append(window)
        self.restarted.set()

    def _workers(self) -> list[int]:
        while not self.done.is_set():
            pids = self.find()
            if len(pids) == 2:
                return pids
            time.sleep(0.01)
        return []

    def _run(self) -> None:
        for _ in range(self.kills):
            if not self._workers():
                return
            time.sleep(self.random.uniform(0.0, 0.2))
            pids = self._workers()
            if not pids:
                return
            self.restarted.clear()
            pid = self.random.choice(pids)
            os.kill(pid, signal.SIGKILL)
            self.killed.append(pid)
            while not self.restarted.wait(0.05):
                if self.done.is_set():
                    return


@pytest.mark.parametrize("environment_type", ["workers", "spark"])
def test_a_storm_of_kills_leaves_the_output_of_the_oracle(environment_type, make_env, tmp_path):
    if environment_type == "spark" and not SPARK_MASTER.startswith("local"):
        pytest.skip("the kills find worker processes on this machine")
    out = tmp_path / "out"
    config = {"restart.attempts": 100, "restart.delay": 0.01, "restart.backoff": 1.0,
              "restart.reset_seconds": 3600.0, "state.backend": "rocksdb",
              "spark.mode": "workers", "spark.workers": 2}
    pipeline = make_env(2, **config).pipeline("storm")
    records = list(enumerate(WORDS))

    def paced(record):
        index, word = record
        if index % WINDOW == 0:
            time.sleep(PAUSE)
        return word

    @pipeline.task(name="job")
    def job(ctx):
        words = ctx.source(records, SizeTumblingWindow(WINDOW)).with_parallelism(1).map(paced)
        counts = words.key_by().count()
        counts.collect("counts")
        counts.sink(FileSink(str(out)))

    storm = Storm(KILLS, worker_pids if environment_type == "workers" else connected_to_me)
    monitor = JobMonitor()
    try:
        result = pipeline.execute(listener=Listeners([storm, monitor]))
    finally:
        storm.done.set()
    assert len(storm.killed) == KILLS
    assert len(storm.restarts) == KILLS and monitor.restarts == KILLS
    assert f"gyreflow_restarts_total {float(KILLS)}" in generate_latest(monitor.registry).decode()
    windows = range(1, len(WORDS) // WINDOW + 1)
    got = {w: sorted(r) for w, r in result["job"].collected["counts"].items()}
    assert got == {w: updated_totals(WORDS, w, WINDOW) for w in windows}
    assert published(out) == {w: updated_totals(WORDS, w, WINDOW) for w in windows}
