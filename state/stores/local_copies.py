"""Executor-local RocksDB copies of checkpoint objects, so that a restore reads what its machine holds.

With ``state.checkpoint_url``, every snapshot object is shipped to the checkpoint location, which is
the only copy that counts: the driver commits a window once its objects are there. Each executor also
keeps the objects its tasks wrote or read in RocksDB on its own disk (like Flink's task-local
recovery), one database per range folder (``<job>/state/<table>/kg-A-B``). A task that restores its
key groups lists the range in the checkpoint location as before, then takes each object from the
local database when the copy there was made from the same stored object, and fetches only the others.

A copy is trusted only under the object's *stamp*: what the checkpoint location reports about the
stored object (its ETag and size on an object store; size, modification time and inode in a
directory). An object written again (a resumed run replaying a window) gets a new stamp, so a copy of
the old one is never used; a file system that reports no such field gets no copies. Bytes read from a
copy still pass the object's authentication before anything is unpickled, and a damaged copy is
dropped and fetched again. Copies are a cache: a database another process holds, a full disk or any
other local failure leaves the task reading from the checkpoint location. A database keeps at most
``KEEP`` objects, and forgets those the location no longer lists, so it stays small however long a
job runs. Copies live as long as their directory: by default the executor's Spark local directories
(``SPARK_LOCAL_DIRS``), which Spark removes with the application.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import struct
import sys
import threading

KEEP = 24  # objects of one range kept in its local database, newest first
COPIES_FOLDER = "gyreflow-copies"
_STAMP_LENGTH = struct.Struct(">H")
_OBJECT_STAMP_FIELDS = ("etag", "md5hash", "generation")  # change whenever the content does


def default_root() -> str | None:
    """The first of the executor's Spark local directories when this process runs a Spark task
    (Spark sets ``SPARK_LOCAL_DIRS`` for its Python workers), else None: a driver keeps no copies."""
    if "pyspark" not in sys.modules:  # a Spark Python worker has imported it
        return None
    from pyspark import TaskContext

    if TaskContext.get() is None:
        return None
    first = os.environ.get("SPARK_LOCAL_DIRS", "").split(",")[0].strip()
    return first or None


def stamp_of(info: dict) -> str | None:
    """What identifies one stored version of an object, from an fsspec ``info``/``ls`` entry, or
    None when the file system reports nothing that changes with every write."""
    fields = {str(key).lower(): value for key, value in info.items()}
    size = fields.get("size")
    for field in _OBJECT_STAMP_FIELDS:
        if fields.get(field):
            return f"{size}:{str(fields[field]).strip(chr(34))}"
    if fields.get("mtime") is not None and fields.get("ino") is not None:
        return f"{size}:{fields['mtime']!r}:{fields['ino']}"
    return None


class _Registry:
    """The databases open in this process, shared by its stores (RocksDB lets one process open a
    database once)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.open: dict[str, list] = {}  # path -> [database, users]

    def acquire(self, path: str):
        with self.lock:
            entry = self.open.get(path)
            if entry is None:
                from rocksdict import Options, Rdict, WriteOptions

                from gyreflow.state.shared.private import ensure_private_dir

                options = Options(raw_mode=True)
                options.create_if_missing(True)
                options.set_write_buffer_size(1 << 20)
                ensure_private_dir(os.path.dirname(path))
                database = Rdict(path, options)
                unlogged = WriteOptions()
                unlogged.disable_wal = True  # a cache: what a crash loses is fetched again
                database.set_write_options(unlogged)
                entry = self.open[path] = [database, 0]
            entry[1] += 1
            return entry[0]

    def release(self, path: str) -> None:
        with self.lock:
            entry = self.open.get(path)
            if entry is None:
                return
            entry[1] -= 1
            if entry[1] == 0:
                del self.open[path]
                with contextlib.suppress(Exception):
                    entry[0].close()


_REGISTRY = _Registry()


class LocalCopies:
    """Copies of one checkpoint location's objects under ``root``: ``get``, ``put``, ``forget`` and
    ``keep_only`` by range folder (its path relative to the location) and object name."""

    def __init__(self, root: str, url: str) -> None:
        digest = hashlib.sha256(url.encode()).hexdigest()[:16]
        self.root = os.path.join(os.path.abspath(root), COPIES_FOLDER, digest)
        self.databases: dict[str, object] = {}  # folder -> database, or None when unavailable

    def _database(self, folder: str):
        if folder not in self.databases:
            try:
                self.databases[folder] = _REGISTRY.acquire(self._path(folder))
            except Exception:  # noqa: BLE001 - held by another process, disk full: no copies
                self.databases[folder] = None
        return self.databases[folder]

    def get(self, folder: str, name: str, stamp: str) -> bytes | None:
        """The copy of ``folder/name`` made from the stored object with ``stamp``, or None."""
        database = self._database(folder)
        value = None
        if database is not None:
            with contextlib.suppress(Exception):
                value = database.get(name.encode())
        if value is not None and len(value) >= _STAMP_LENGTH.size:
            length = _STAMP_LENGTH.unpack_from(value)[0]
            start = _STAMP_LENGTH.size + length
            if value[_STAMP_LENGTH.size:start] == stamp.encode():
                return value[start:]
        return None

    def put(self, folder: str, name: str, stamp: str, blob: bytes) -> None:
        """Keep ``blob`` as the copy of ``folder/name`` stored with ``stamp``; the oldest objects
        beyond ``KEEP`` go."""
        database = self._database(folder)
        if database is None:
            return
        encoded = stamp.encode()
        try:
            database[name.encode()] = _STAMP_LENGTH.pack(len(encoded)) + encoded + blob
            names = list(database.keys())
            for old in sorted(names)[:max(0, len(names) - KEEP)]:
                del database[old]
        except Exception:  # noqa: BLE001 - a cache: the checkpoint location still has it
            self.forget(folder, name)

    def forget(self, folder: str, name: str) -> None:
        database = self._database(folder)
        if database is not None:
            with contextlib.suppress(Exception):
                del database[name.encode()]

    def keep_only(self, folder: str, names: set[str]) -> None:
        """Drop the copies of objects the checkpoint location no longer lists (pruned, folded or
        discarded there)."""
        database = self._database(folder)
        if database is None:
            return
        with contextlib.suppress(Exception):
            for key in list(database.keys()):
                if key.decode() not in names:
                    del database[key]

    def close(self) -> None:
        for folder, database in self.databases.items():
            if database is not None:
                _REGISTRY.release(self._path(folder))
        self.databases = {}

    def _path(self, folder: str) -> str:
        return os.path.join(self.root, *folder.split("/"))
