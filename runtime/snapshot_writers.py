"""Snapshot writers: where a job's snapshot writes, commits and prunes run.

``InlineSnapshotWriter`` applies them at once in the calling thread (the memory backend, whose write is
a dict insert). ``ProcessSnapshotWriter`` sends them, in order, to a child process that owns the store:
CPython threads share one interpreter lock, so a writer thread slows the computing thread it is meant
to overlap (measured: SQLite snapshots in a thread made a word count 1.8x slower than writing inline),
while a process writes in parallel on another core and reports each operation durable.
"""

from __future__ import annotations

import importlib
import itertools
import os
import pickle
import signal
import struct
import sys
import threading
from collections.abc import Callable, Sequence

from gyreflow.runtime.faults import crash_point
from gyreflow.state.shared.snapshot import JobMeta, SnapshotStore, TaskSnapshot

_FRAME = struct.Struct(">I")


class SnapshotWriter:
    """Ordered, possibly asynchronous access to a snapshot store.

    Every operation takes ``on_done``, called (from any thread) once it is durable; operations are
    applied in submission order. A failure calls the writer's ``on_error`` and stops the writer.
    """

    def write(self, snapshot: TaskSnapshot | None, on_done: Callable[[], None]) -> None:
        """Store a task snapshot (``None``: only wait for the operations before it)."""
        raise NotImplementedError

    def commit(self, meta: JobMeta, on_done: Callable[[], None]) -> None:
        """Replace the job meta atomically."""
        raise NotImplementedError

    def prune(self, job: str, crossing: Sequence[int], horizon: int,
              drop: dict[str, set[range]] | None = None) -> None:
        """Drop versions no retained snapshot needs, and storage of old key-group layouts."""
        raise NotImplementedError

    def close(self) -> None:
        """Finish outstanding operations and release the store."""


def _prune(store: SnapshotStore, job, crossing, horizon, drop) -> None:
    if crossing:
        store.prune(job, crossing, horizon)
    for table, ranges in (drop or {}).items():
        store.drop_other_ranges(job, table, ranges)


class InlineSnapshotWriter(SnapshotWriter):
    """Applies every operation immediately on ``store``."""

    def __init__(self, store: SnapshotStore, on_error: Callable[[BaseException], None]) -> None:
        self.store = store
        self.on_error = on_error

    def write(self, snapshot, on_done) -> None:
        if snapshot is not None:
            self.store.write(snapshot)
        on_done()

    def commit(self, meta, on_done) -> None:
        self.store.commit(meta)
        on_done()

    def prune(self, job, crossing, horizon, drop=None) -> None:
        _prune(self.store, job, crossing, horizon, drop)


class ProcessSnapshotWriter(SnapshotWriter):
    """Runs the store in a child process (``python -m gyreflow.runtime.snapshot_writers``).

    The child is started at once and imports the store's modules while the job starts, but opens the
    store only on first use, so the parent can first read and repair the store itself (resume); from
    then on only the child opens it. The child dies with its parent: a crash of the job leaves
    exactly what a crash of an in-process writer would.
    """

    def __init__(self, backend, on_error: Callable[[BaseException], None],
                 before_start: Callable[[], None] | None = None) -> None:
        self.backend = backend
        self.on_error = on_error
        self.before_start = before_start
        self._callbacks: dict[int, Callable[[], None]] = {}
        self._tokens = itertools.count(1)
        self._lock = threading.Lock()
        self._failed = False
        self._opened = False
        import subprocess  # a writer process: not imported by a job that snapshots inline

        self._process: subprocess.Popen | None = subprocess.Popen(
            [sys.executable, "-m", "gyreflow.runtime.snapshot_writers", str(os.getpid()),
             getattr(backend, "name", "")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )
        self._reader: threading.Thread | None = threading.Thread(
            target=self._read_replies, name="gyreflow-snapshot-replies", daemon=True)
        self._reader.start()

    def _start(self) -> None:
        self._opened = True
        if self.before_start is not None:
            self.before_start()
        self._send(("open", 0, self.backend))

    def _send(self, message: tuple) -> None:
        if not self._opened:
            self._start()
        data = pickle.dumps(message, protocol=5)
        try:
            self._process.stdin.write(_FRAME.pack(len(data)) + data)
            self._process.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            self._fail(RuntimeError(f"the snapshot writer process stopped: {exc}"))

    def _request(self, op: str, payload: tuple, on_done: Callable[[], None]) -> None:
        if self._failed:
            return
        token = next(self._tokens)
        with self._lock:
            self._callbacks[token] = on_done
        self._send((op, token, *payload))

    def write(self, snapshot, on_done) -> None:
        self._request("write", (snapshot,), on_done)

    def commit(self, meta, on_done) -> None:
        self._request("commit", (meta,), on_done)

    def prune(self, job, crossing, horizon, drop=None) -> None:
        # No reply (token 0) unless it fails: every reply wakes this process's reply thread, which
        # takes the interpreter lock from the computing thread.
        if not self._failed:
            self._send(("prune", 0, job, tuple(crossing), horizon, drop))

    def _read_replies(self) -> None:
        stream = self._process.stdout
        while True:
            reply = _read_frame(stream)
            if reply is None:
                if not self._failed and self._callbacks:
                    self._fail(RuntimeError("the snapshot writer process exited unexpectedly"))
                return
            kind, token, *rest = reply
            if kind == "ok":
                with self._lock:
                    callback = self._callbacks.pop(token, None)
                if callback is not None:
                    callback()
            else:
                self._fail(RuntimeError(rest[0]))
                return

    def _fail(self, error: BaseException) -> None:
        if not self._failed:
            self._failed = True
            self.on_error(error)

    def close(self) -> None:
        if self._process is None:
            return
        self._opened = True  # closing never opens the store
        try:
            self._send(("close", 0))
            self._process.stdin.close()
        except (BrokenPipeError, OSError):
            pass
        self._process.wait()
        if self._reader is not None:
            self._reader.join()


def _read_frame(stream) -> tuple | None:
    header = stream.read(_FRAME.size)
    if len(header) < _FRAME.size:
        return None
    (length,) = _FRAME.unpack(header)
    data = stream.read(length)
    if len(data) < length:
        return None
    return pickle.loads(data)


def _die_with_parent(parent: int) -> None:
    """Ask Linux to kill this process when its parent dies (and exit if it already has)."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(0)


_STORE_MODULES = {"rocksdb": "gyreflow.state.stores.rocksdb", "jdbc": "gyreflow.state.stores.jdbc"}


def _serve(parent: int, backend: str = "") -> None:
    _die_with_parent(parent)
    if backend in _STORE_MODULES:  # imported while the job starts, not on its first snapshot
        importlib.import_module(_STORE_MODULES[backend])
    requests = sys.stdin.buffer
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    sys.stdout = sys.stderr  # the protocol owns stdout
    store = None

    def reply(message: tuple) -> None:
        data = pickle.dumps(message, protocol=5)
        replies.write(_FRAME.pack(len(data)) + data)
        replies.flush()

    try:
        while True:
            message = _read_frame(requests)
            if message is None or message[0] == "close":
                return
            op, token, *args = message
            try:
                if op == "open":
                    store = args[0].open_store()
                    continue
                if op == "write":
                    if args[0] is not None:
                        store.write(args[0])
                        crash_point("snapshot-written", args[0].version, parent)
                elif op == "commit":
                    store.commit(args[0])
                elif op == "prune":
                    _prune(store, *args)
                if token:
                    reply(("ok", token))
            except Exception as exc:  # noqa: BLE001 - reported to the job, which stops
                reply(("error", token, f"{op} failed in {store.location() if store else 'store'}: "
                                       f"{type(exc).__name__}: {exc}"))
                return
    finally:
        if store is not None:
            store.close()


if __name__ == "__main__":
    # A Ctrl-C reaches every process of the terminal's group: the job decides how to stop, and
    # closes this writer when it is done with it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _serve(int(sys.argv[1]), *sys.argv[2:3])
    # The store is closed and every reply flushed: skip the interpreter's teardown, which the
    # job would wait for.
    sys.stderr.flush()
    os._exit(0)
