"""Windows in flight on Spark: each task of a round starts only after the same task of the round
before it has finished, so two rounds (two Spark jobs) can run at once without reading stale state.

The driver runs a small TCP service; a task asks it to wait until task ``(vertex, index)`` finished
window ``w - 1`` (its state and source offset are then in the backend) and tells it when it has
finished window ``w``. Requests carry a random token that only the run's tasks know.

Why the waits cannot deadlock: the oldest round in flight never waits (its predecessor is done), and
a waiting task holds a task slot. Rounds run at once only when the cluster has more slots than the
later rounds can hold together: ``slots > (rounds - 1) * widest``, where ``widest`` is the most
tasks of one round that can run at the same time (the heaviest set of vertices no one of which feeds
another). Then at least one slot is always free for the oldest round, whose pending tasks Spark's
FIFO scheduler serves first (rounds are submitted in window order, with no locality wait), so it
always completes. ``windows_in_flight`` applies that rule.
"""

from __future__ import annotations

import secrets
import socket
import socketserver
import threading

WAIT_SECONDS = 600.0  # a task waits this long for its predecessor before it gives up


class RoundOrderError(RuntimeError):
    """A task could not learn that the previous round's task finished (it failed, or the driver
    is gone)."""


class RoundOrder:
    """The driver's side: which window each task has finished, and the waits on it."""

    def __init__(self, host: str = "127.0.0.1", base: int = 0) -> None:
        self.token = secrets.token_hex(16)
        self.base = base  # every task's state is valid up to this window (the resume point)
        self._done: dict[tuple[int, int], int] = {}
        self._failed_from: float = float("inf")  # rounds from this window on will not finish
        self._changed = threading.Condition()
        order = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                self.wfile.write(order._answer(self.rfile.readline(256).decode("ascii", "replace")))

        self.server = socketserver.ThreadingTCPServer((host, 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="gyreflow-round-order",
                                       kwargs={"poll_interval": 0.2}, daemon=True)
        self.thread.start()

    @property
    def address(self) -> tuple[str, int, str]:
        """What a task needs to reach the service: host, port, token."""
        host, port = self.server.server_address[:2]
        return host, port, self.token

    def finished(self, vertex: int, index: int, window: int) -> None:
        """Task ``(vertex, index)`` finished ``window`` (also told by the task itself)."""
        with self._changed:
            key = (vertex, index)
            if window > self._done.get(key, self.base):
                self._done[key] = window
            self._changed.notify_all()

    def fail_from(self, window: int) -> None:
        """Rounds from ``window`` on will not finish: release every task waiting on them."""
        with self._changed:
            self._failed_from = min(self._failed_from, window)
            self._changed.notify_all()

    def _answer(self, line: str) -> bytes:
        parts = line.split()
        if len(parts) != 5 or not secrets.compare_digest(parts[1], self.token):
            return b"DENIED\n"
        verb, vertex, index, window = parts[0], int(parts[2]), int(parts[3]), int(parts[4])
        if verb == "DONE":
            self.finished(vertex, index, window)
            return b"OK\n"
        if verb != "WAIT":
            return b"DENIED\n"
        key = (vertex, index)
        with self._changed:
            ready = self._changed.wait_for(
                lambda: self._done.get(key, self.base) >= window - 1 or window - 1 >= self._failed_from,
                timeout=WAIT_SECONDS)
            if ready and self._done.get(key, self.base) >= window - 1:
                return b"OK\n"
        return b"FAILED\n"

    def close(self) -> None:
        """Release every waiting task and stop the service."""
        self.fail_from(0)
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def _ask(address: tuple[str, int, str], verb: str, vertex: int, index: int, window: int) -> str:
    host, port, token = address
    with socket.create_connection((host, port), timeout=WAIT_SECONDS + 30) as conn:
        conn.sendall(f"{verb} {token} {vertex} {index} {window}\n".encode("ascii"))
        reply = conn.makefile("rb").readline().decode("ascii").strip()
    return reply


def wait_for_previous(address, vertex: int, index: int, window: int) -> None:
    """Block until the same task has finished ``window - 1``; raise RoundOrderError if it will not."""
    try:
        reply = _ask(address, "WAIT", vertex, index, window)
    except OSError as exc:
        msg = f"the driver's round order service is unreachable ({exc})"
        raise RoundOrderError(msg) from exc
    if reply != "OK":
        msg = f"window {window - 1} did not finish on this task ({reply or 'no answer'})"
        raise RoundOrderError(msg)


def tell_finished(address, vertex: int, index: int, window: int) -> None:
    """Tell the driver this task finished ``window`` (best effort: the round's end tells it too)."""
    try:
        _ask(address, "DONE", vertex, index, window)
    except OSError:
        return


def widest(parallelism: dict[int, int], edges: list[tuple[int, int]], exact_up_to: int = 16) -> int:
    """The most tasks of one round that can run at once: the heaviest set of vertices none of which
    reaches another (an antichain), weighted by parallelism; every task, for large graphs."""
    vertices = sorted(parallelism)
    if len(vertices) > exact_up_to:
        return sum(parallelism.values())
    after: dict[int, set[int]] = {v: set() for v in vertices}
    for source, target in edges:
        after[source].add(target)
    reach: dict[int, set[int]] = {}

    def reachable(vertex: int) -> set[int]:
        if vertex not in reach:
            found: set[int] = set()
            for nxt in after[vertex]:
                found.add(nxt)
                found |= reachable(nxt)
            reach[vertex] = found
        return reach[vertex]

    best = 0
    for mask in range(1, 1 << len(vertices)):
        chosen = [v for bit, v in enumerate(vertices) if mask >> bit & 1]
        if all(b not in reachable(a) for a in chosen for b in chosen if a != b):
            best = max(best, sum(parallelism[v] for v in chosen))
    return best


def windows_in_flight(asked: int, slots: int, round_width: int) -> int:
    """How many rounds may run at once: at most ``asked``, and few enough that the later ones cannot
    hold every one of ``slots`` task slots (``slots > (rounds - 1) * round_width``)."""
    if round_width < 1:
        return max(1, asked)
    return max(1, min(asked, 1 + (slots - 1) // round_width))
