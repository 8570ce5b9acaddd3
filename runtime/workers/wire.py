"""What travels between the driver and the worker processes: placement, framing, portable errors.

Every message on a connection is one pickled list (protocol 5) of items, each a tuple whose first
element names it. Driver -> worker: ``events``, ``controls``, ``ack`` (a snapshot write is durable),
``reply`` (to a store read), ``call`` (publish a window; set a draining limit), ``stop``. Worker ->
driver: ``reports``, ``write``, ``read``, ``reply``, ``idle`` (the worker has no work: how many driver
messages it took and how many messages it sent to and took from each peer, which lets the driver
count the job quiescent). Worker <-> worker: ``data`` (channel messages: batches, each ``Encoded``
on its own so that its bytes count for its edge, barriers, the end of input), ``loop`` (graph
messages of a superstep; array pieces carry their vertices' ids once, then a slot number:
loop_ids.py) and ``sealed`` (a worker's tasks of a graph vertex finished a superstep: every
message of it was sent before).

Every connection first passes ``multiprocessing.connection``'s HMAC challenge with the run's key
(``KeyedListener``); one that does not is dropped, and the listener waits on for the real ones.
"""

from __future__ import annotations

import contextlib
import hmac  # noqa: F401 - see below
import os
import pickle
import queue
import socket
import struct
import threading
from multiprocessing.connection import (
    Connection,
    answer_challenge,
    arbitrary_address,
    deliver_challenge,
)

from gyreflow.runtime.dataflow.task_runner import TaskError

# multiprocessing's key challenge imports hmac on the handshake threads: imported above, at start,
# no thread holds its import lock when a process forks workers.

PROTOCOL = 5
UNIX_BUFFER_BYTES = 4 << 20  # a Unix socket's buffers (the default, 208 KiB, blocks graph messages)


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


def tuned(conn, family: str):
    """``conn`` set up for the messages of a job. TCP: Nagle's algorithm off, so that a small
    message goes out at once instead of waiting for the acknowledgement of the one before (tens of
    milliseconds a window). A Unix socket: buffers of ``UNIX_BUFFER_BYTES`` (the kernel caps them
    at net.core.wmem_max and rmem_max), so that a superstep's graph messages to another worker
    (hundreds of kilobytes) are written at once instead of a buffer's worth at a time, each waiting
    for the other worker's receiving thread to run (TCP sizes its buffers itself)."""
    with socket.socket(fileno=os.dup(conn.fileno())) as sock:
        if family == "AF_INET":
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        elif family == "AF_UNIX":
            for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, option, UNIX_BUFFER_BYTES)
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


HANDSHAKE_SECONDS = 10.0  # the longest a connection may take per read of the key challenge
MAX_HANDSHAKES = 64  # connections in the challenge at once; more are dropped at once


class KeyedListener:
    """A listener whose connections have proven the run's key; every other connection is dropped.

    Each accepted connection passes the key challenge on a thread of its own, every read of it
    bounded by ``handshake_seconds``: a client with a wrong key, one that sends garbage, closes at
    once or connects and sends nothing is closed and counted in ``dropped``, and never delays the
    real workers (``multiprocessing``'s own ``Listener`` fails its ``accept`` on the first such
    client, or waits on it forever). ``family`` is ``"AF_UNIX"`` (a socket in a 0700 directory
    of this process) or ``"AF_INET"`` (``address`` is ``(host, port)``; port 0 takes a free one).
    """

    def __init__(self, family: str, authkey: bytes, address=None,
                 handshake_seconds: float = HANDSHAKE_SECONDS, serving: bool = True) -> None:
        self._authkey = authkey
        self._seconds = handshake_seconds
        self._path = None
        if family == "AF_INET":
            self._socket = socket.create_server(address, backlog=64)
            self.address = self._socket.getsockname()[:2]
        else:
            # In multiprocessing's 0700 directory of this process (forked workers share their
            # driver's), removed when the process that made it exits: even the socket of a
            # worker killed before it closed its listener goes then.
            self.address = self._path = arbitrary_address("AF_UNIX")
            self._socket = socket.socket(socket.AF_UNIX)
            self._socket.bind(self.address)
            self._socket.listen(64)
        self._socket.settimeout(0.2)  # the accepting thread looks at ``_closed`` this often
        self._ready: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        self._closed = False
        self._pending = 0
        self.dropped = 0
        self._serving = False
        if serving:
            self.serve()

    def serve(self) -> None:
        """Start accepting (once): connections made before wait in the socket's backlog. A
        process that forks workers serves only after the fork, so that no thread of the listener
        holds a lock a worker would inherit locked."""
        with self._lock:
            if self._serving:
                return
            self._serving = True
        threading.Thread(target=self._serve, daemon=True, name="gyreflow-listener").start()

    def accept(self, timeout: float | None = None) -> Connection:
        """The next connection that passed the challenge; ``TimeoutError`` after ``timeout``
        seconds, ``OSError`` once the listener is closed."""
        try:
            conn = self._ready.get(timeout=timeout)
        except queue.Empty:
            msg = f"no connection passed the key challenge within {timeout} s"
            raise TimeoutError(msg) from None
        if conn is None:
            self._ready.put(None)  # for any other waiter
            msg = "the listener is closed"
            raise OSError(msg)
        return conn

    def close(self) -> None:
        """Stop listening; connections not yet accepted are closed."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._socket.close()
        if self._path is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._path)
        while True:
            try:
                conn = self._ready.get_nowait()
            except queue.Empty:
                break
            if conn is not None:
                conn.close()
        self._ready.put(None)

    def _serve(self) -> None:
        while not self._closed:
            try:
                sock, _ = self._socket.accept()
            except TimeoutError:
                continue
            except OSError:  # closed
                return
            with self._lock:
                busy = self._pending >= MAX_HANDSHAKES
                if not busy:
                    self._pending += 1
            if busy:
                self.dropped += 1
                sock.close()
                continue
            threading.Thread(target=self._handshake, args=(sock,), daemon=True,
                             name="gyreflow-listener-challenge").start()

    def _handshake(self, sock: socket.socket) -> None:
        sock.setblocking(True)
        _read_timeouts(sock, self._seconds)
        conn = Connection(sock.detach())
        try:
            deliver_challenge(conn, self._authkey)
            answer_challenge(conn, self._authkey)
        except Exception:  # noqa: BLE001 - a wrong key, garbage, a close, a timeout: drop it
            conn.close()
            with self._lock:
                self._pending -= 1
                self.dropped += 1
            return
        with socket.socket(fileno=os.dup(conn.fileno())) as view:
            _read_timeouts(view, 0)
        with self._lock:
            self._pending -= 1
            if not self._closed:
                self._ready.put(conn)
                return
        conn.close()


def _read_timeouts(sock: socket.socket, seconds: float) -> None:
    """Bound every blocking read and write of ``sock`` by ``seconds`` (0: unbounded) in the kernel
    (SO_RCVTIMEO), so that a ``Connection`` over it, which reads with ``os.read``, gets an
    ``OSError`` instead of waiting for ever."""
    whole = int(seconds)
    value = struct.pack("ll", whole, int((seconds - whole) * 1_000_000))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, value)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, value)
