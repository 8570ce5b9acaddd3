"""One writer per job: a run holds its job's state exclusively until it ends or its process dies.

Stores on this machine's disk (RocksDB directories, SQLite files) are locked with ``flock`` on a lock
file beside the state; the kernel releases it when the process dies, however it dies. PostgreSQL is
locked with a session advisory lock on a connection the run keeps open; the server releases it when
the connection ends (the process died or the run closed it). The holder (pid, host, start time) is
written next to the lock so that a refused run can name it.

Whatever the backend (the memory backend too, whose state no other process shares), a run also
holds each folder its file sinks write (``Sink.output_folder``): two runs staging and publishing into
one folder would take each other's files away.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import hashlib
import json
import os
import socket
import tempfile
import zlib


class JobLockedError(RuntimeError):
    """Another run holds the job's state; the message names the holder."""


def holder_info() -> dict:
    """Who this run is: pid, host and start time (UTC)."""
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    return {"pid": os.getpid(), "host": socket.gethostname(),
            "started": now.isoformat().replace("+00:00", "Z")}


def describe_holder(holder: dict | None) -> str:
    if not holder:
        return "another run (its pid is not known yet)"
    return f"pid {holder.get('pid')} on host {holder.get('host')} since {holder.get('started')}"


def locked_message(job: str, location: str, holder: dict | None, what: str = "state") -> str:
    if holder and holder.get("job") not in (None, job):
        return (f"{what} {location} is in use by job {holder['job']!r}, run by "
                f"{describe_holder(holder)}; wait for it to end or stop it, then run again")
    return (f"job {job!r} is being run by {describe_holder(holder)} ({what} {location}); wait for "
            "it to end or stop it, then run again")


class JobLock:
    """A held lock; ``release`` is idempotent."""

    def release(self) -> None:
        """Let another run take the job."""


class FileJobLock(JobLock):
    """``flock`` on ``path``; the file keeps the holder's description."""

    def __init__(self, path: str, job: str, location: str, what: str = "state") -> None:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise JobLockedError(locked_message(job, location, holder, what)) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({**holder_info(), "job": job}).encode(), 0)
        self.fd: int | None = fd

    def release(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, 0)
            os.close(self.fd)  # closing the descriptor releases the flock
            self.fd = None


def _read_holder(fd: int) -> dict | None:
    try:
        data = os.pread(fd, 4096, 0)
        return json.loads(data) if data else None
    except (OSError, ValueError):
        return None


def advisory_key(job: str) -> int:
    """A stable 63-bit key for ``pg_try_advisory_lock`` of ``job``."""
    return (zlib.crc32(b"gyreflow-job:" + job.encode()) << 31) ^ zlib.crc32(job.encode()[::-1])


def output_lock_path(directory: str) -> str:
    """Where the lock of output folder ``directory`` lives: in this user's private folder under the
    temporary directory, named by the folder's real path (the output folder holds only output)."""
    from gyreflow.state.shared.private import ensure_private_dir

    real = os.path.realpath(directory)
    locks = ensure_private_dir(os.path.join(tempfile.gettempdir(), f"gyreflow-{os.geteuid()}",
                                            "output-locks"), "output lock directory")
    return os.path.join(locks, hashlib.sha256(real.encode()).hexdigest()[:32] + ".lock")


def lock_outputs(job: str, graph) -> list[JobLock]:
    """Locks on every folder ``graph``'s sinks write (``Sink.output_folder``), each taken once; a
    folder another run writes raises ``JobLockedError`` naming it and that run."""
    held: list[JobLock] = []
    taken: set[str] = set()
    try:
        for vertex in graph.vertices:
            sink = getattr(vertex.spec, "sink", None)
            folder = getattr(sink, "output_folder", lambda: None)()
            if folder is None or os.path.realpath(folder) in taken:
                continue
            taken.add(os.path.realpath(folder))
            held.append(FileJobLock(output_lock_path(folder), job, folder, "output"))
    except BaseException:
        for lock in held:
            lock.release()
        raise
    return held
