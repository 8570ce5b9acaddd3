"""Connections without the run's key while a workers job starts are dropped; the job runs on.

The driver's listener (local workers host: a Unix socket; Spark workers mode: a TCP port of
127.0.0.1) and the workers' own listeners for their peers get, while the job starts, real hostile
clients: a wrong key, garbage, a connection that opens and closes, and one that connects and sends
nothing and stays open. With ``restart.attempts = 0`` any of them failing the start would end the
job; instead each is dropped, the job's output equals a ``Counter`` and no restart is counted.
"""

from __future__ import annotations

import os
import socket
import threading
from collections import Counter
from multiprocessing.connection import AuthenticationError, Client

import pytest

from gyreflow.api import Environment, SizeTumblingWindow
from gyreflow.runtime.driver import JobListener
from gyreflow.runtime.workers import worker as worker_module
from gyreflow.runtime.workers.host import ForkLauncher

WORDS = [f"w{(i * 7919) % 23}" for i in range(400)]
WINDOW = 100


def totals_per_window(words: list) -> dict[int, list]:
    """Oracle: per window, the keys it updated with their counts over every window so far."""
    got = {}
    for window in range(1, len(words) // WINDOW + 1):
        totals = Counter(words[:window * WINDOW])
        updated = set(words[(window - 1) * WINDOW:window * WINDOW])
        got[window] = sorted((word, totals[word]) for word in updated)
    return got


class Restarts(JobListener):
    def __init__(self) -> None:
        self.count = 0

    def on_restart(self, name, graph, window) -> None:
        self.count += 1


def attack(address, family: str, held: list) -> list[str]:
    """Hostile clients against ``address``, one after another: a wrong key, garbage, one that
    closes at once, and last one that sends nothing and stays open (in ``held``) while the real
    clients connect. Returns what the wrong key saw."""
    kind = socket.AF_INET if family == "AF_INET" else socket.AF_UNIX
    target = tuple(address) if family == "AF_INET" else address
    seen = []
    try:
        Client(address, family=family, authkey=b"not the run's key")
        seen.append("wrong key accepted")
    except (AuthenticationError, EOFError, OSError):
        seen.append("wrong key refused")
    try:
        with socket.socket(kind) as garbage:
            garbage.connect(target)
            garbage.sendall(b"\x00\x00\x00\x10not a challenge!" * 4)
        with socket.socket(kind) as closed:
            closed.connect(target)
        silent = socket.socket(kind)
        silent.connect(target)
        held.append(silent)
    except (FileNotFoundError, ConnectionRefusedError):
        pass  # the job already ended and closed the listener (a loaded machine's timing)
    return seen


def attack_in_background(address, family: str, held: list, seen: list) -> threading.Thread:
    """``attack`` from a thread of its own, as another user of the machine would, while the job
    goes on starting."""
    thread = threading.Thread(target=lambda: seen.extend(attack(address, family, held)),
                              daemon=True)
    thread.start()
    return thread


def count_job(environment: Environment, restarts: Restarts) -> dict[int, list]:
    pipeline = environment.pipeline("hostile")

    @pipeline.task(name="job")
    def job(ctx):
        words = ctx.source(WORDS, SizeTumblingWindow(WINDOW)).with_parallelism(1)
        words.key_by().count().collect("counts")

    result = pipeline.execute(listener=restarts)
    return {window: sorted(records)
            for window, records in result["job"].collected["counts"].items()}


def after_the_attack(start, attacks: list):
    """``start`` (a launcher's) once the attack is over, or after 5 s (a listener that waits on a
    hostile client keeps the attack from ending): the real workers come after the hostile
    clients, whatever the timing of the machine."""

    def start_after(self, setup, count):
        for thread in attacks:
            thread.join(5)
        return start(self, setup, count)

    return start_after


HELD_IN_WORKERS: list = []  # a forked worker's silent connections stay open while it runs


@pytest.mark.processes
def test_hostile_clients_on_the_local_workers_listeners_are_dropped(tmp_path, monkeypatch):
    held: list = []
    seen: list = []
    attacks: list = []
    driver: list = []
    listen = ForkLauncher.listen

    def listen_under_attack(self, authkey):
        listener = listen(self, authkey)
        driver.append(listener.address)
        attacks.append(attack_in_background(listener.address, self.family, held, seen))
        return listener

    # Worker 1 attacks worker 0's listener for its peers before it connects to it (the forked
    # workers inherit the patch).
    client = worker_module.Client

    peers_seen = tmp_path / "peers-seen.txt"

    def client_under_attack(address, family=None, authkey=None):
        if address not in driver:
            with open(peers_seen, "a", encoding="utf-8") as out:
                out.writelines(f"{line}\n" for line in attack(address, family, HELD_IN_WORKERS))
        return client(address, family=family, authkey=authkey)

    monkeypatch.setattr(ForkLauncher, "listen", listen_under_attack)
    monkeypatch.setattr(ForkLauncher, "start", after_the_attack(ForkLauncher.start, attacks))
    monkeypatch.setattr(worker_module, "Client", client_under_attack)
    restarts = Restarts()
    environment = Environment.local(2, progress=False, config={
        "environment.workers": 2, "restart.attempts": 0, "state.path": str(tmp_path / "state")})
    try:
        got = count_job(environment, restarts)
    finally:
        for thread in attacks:
            thread.join(30)
        for sock in held:
            sock.close()
    assert seen == ["wrong key refused"]
    assert peers_seen.read_text(encoding="utf-8") == "wrong key refused\n"  # worker 1 -> 0
    assert not os.path.exists(driver[0])  # the driver's socket is gone with its listener
    assert got == totals_per_window(WORDS)
    assert restarts.count == 0


@pytest.mark.spark
def test_hostile_clients_on_the_spark_driver_listener_are_dropped(tmp_path, monkeypatch):
    from _spark_master import SPARK_MASTER

    from gyreflow.runtime.spark.barrier import SparkLauncher

    if not SPARK_MASTER.startswith("local"):
        pytest.skip("the hostile clients run on the driver's machine")
    held: list = []
    seen: list = []
    attacks: list = []
    listen = SparkLauncher.listen

    def listen_under_attack(self, authkey):
        listener = listen(self, authkey)
        attacks.append(attack_in_background(listener.address, "AF_INET", held, seen))
        return listener

    monkeypatch.setattr(SparkLauncher, "listen", listen_under_attack)
    monkeypatch.setattr(SparkLauncher, "start", after_the_attack(SparkLauncher.start, attacks))
    restarts = Restarts()
    environment = Environment.spark(SPARK_MASTER, 2, progress=False, config={
        "spark.mode": "workers", "spark.workers": 2, "restart.attempts": 0,
        "state.path": str(tmp_path / "state")})
    try:
        got = count_job(environment, restarts)
    finally:
        for thread in attacks:
            thread.join(30)
        for sock in held:
            sock.close()
    assert seen == ["wrong key refused"]
    assert got == totals_per_window(WORDS)
    assert restarts.count == 0
