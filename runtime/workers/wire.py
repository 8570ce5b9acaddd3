"""What travels between the driver and the worker processes: placement, framing, portable errors.

Every message on a connection is one pickled list (protocol 5) of items, each a tuple whose first
element names it. Driver -> worker: ``events``, ``controls``, ``ack`` (a snapshot write is durable),
``reply`` (to a store read), ``call`` (publish a window; set a draining limit), ``stop``. Worker ->
driver: ``reports``, ``write``, ``read``, ``reply``, ``idle`` (the worker has no work: how many driver
messages it took and how many messages it sent to and took from each peer, which lets the driver
count the job quiescent). Worker <-> worker: ``data`` (channel messages: batches, each ``Encoded``
on its own so that its bytes count for its edge, barriers, the end of input), ``loop`` (graph
messages of a superstep) and ``sealed`` (a worker's tasks of a graph vertex finished a superstep:
every message of it was sent before).
"""

from __future__ import annotations

import os
import pickle

from gyreflow.runtime.dataflow.task_runner import TaskError

PROTOCOL = 5


def worker_of(task_index: int, workers: int) -> int:
    """The worker that runs task ``task_index`` of every vertex: task ``i`` of a forward chain and
    the task it feeds share a worker, so a forward edge never leaves its process."""
    return task_index % workers


def encode(items: list) -> bytes:
    """One message: a list of items, pickled once."""
    return pickle.dumps(items, protocol=PROTOCOL)


def decode(data: bytes) -> list:
    return pickle.loads(data)


class Encoded:
    """A batch encoded on its own (see ``encode``), inside a message: its bytes are counted per
    edge, and decoded where it arrives."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __reduce__(self):
        return Encoded, (self.data,)


def edge_label(graph, edge) -> str:
    """An execution edge as the metrics name it: ``"last operator of its source->first of its
    target"``."""
    return f"{graph.vertex(edge.source).chain[-1].name}->{graph.vertex(edge.target).head.name}"


def no_delay(conn, family: str):
    """``conn`` with Nagle's algorithm off when it is TCP: a small message goes out at once instead
    of waiting for the acknowledgement of the one before (tens of milliseconds a window)."""
    if family == "AF_INET":
        import socket

        with socket.socket(fileno=os.dup(conn.fileno())) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return conn


class WorkerLostError(TaskError):
    """A worker process of the job died (a signal, the kernel's OOM killer, a crash of Python).

    Nothing it computed after the last completed window is kept: every worker starts again from
    there (``restart.*``), or the job stops and resumes from there with ``--resume``.
    """


def portable(error: BaseException) -> BaseException:
    """``error`` if it crosses a process boundary intact, else a ``TaskError`` with its text (and
    its window, when it names one)."""
    try:
        pickle.loads(pickle.dumps(error, protocol=PROTOCOL))
    except Exception:  # noqa: BLE001 - any pickling failure: keep the text
        return TaskError(f"{type(error).__name__}: {error}", getattr(error, "window", 0) or 0)
    return error


def describe_exit(code: int | None) -> str:
    """How a worker process ended, for messages: ``killed by SIGKILL``, ``exited with status 3``."""
    import signal

    if code is None:
        return "closed its connection"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"
