"""Where a RocksDB store's databases lie under its path, and the handles this process holds open on them."""

from __future__ import annotations

import os
import threading
import urllib.parse

from rocksdict import AccessType, Rdict

from gyreflow.state.shared.private import hold_private_umask, private_umask, release_private_umask
from gyreflow.state.shared.snapshot import stored_range
from gyreflow.state.stores.rocksdb_format import (
    COUNT,
    SLOT,
    STATS,
    damage_reported,
    database_options,
    quoted_name,
    scan,
)


class RocksDBDatabases:
    """The meta, range and record databases under ``path`` (see ``rocksdb`` for the layout), opened
    once and kept open until forgotten or closed."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._dbs: dict[str, Rdict] = {}  # opened read-write
        self._readers: dict[str, Rdict] = {}  # opened read-only
        # Per database opened read-write (only this store writes it): key group -> [(version, key
        # count)] of its chunks, read once, then kept up to date, so that pruning never scans over
        # the deletions of earlier prunes; and per record database, the oldest version it may hold.
        self._stats_cache: dict[str, dict[int, list[tuple[int, int]]]] = {}
        self.record_floor: dict[str, bytes] = {}
        self._lock = threading.RLock()
        hold_private_umask()  # files RocksDB's threads create later are 0600 too
        self._holding = True

    # Paths ---------------------------------------------------------------------------------

    def job_dir(self, job: str) -> str:
        return os.path.join(self.path, quoted_name(job))

    def meta_path(self, job: str) -> str:
        return os.path.join(self.job_dir(job), "meta")

    def table_dir(self, job: str, table: str) -> str:
        return os.path.join(self.job_dir(job), "state", quoted_name(table))

    def range_paths(self, job: str, table: str | None = None,
                    overlapping: range | None = None) -> list[tuple[str, range, str]]:
        """Every (table, key-group range, database path) of ``job`` on disk, or only those
        overlapping ``overlapping``."""
        base = os.path.join(self.job_dir(job), "state")
        found = []
        if not os.path.isdir(base):
            return found
        tables = [quoted_name(table)] if table is not None else sorted(os.listdir(base))
        for quoted in tables:
            table_dir = os.path.join(base, quoted)
            if not os.path.isdir(table_dir):
                continue
            for name in sorted(os.listdir(table_dir)):
                held = stored_range(name)
                if held is not None:
                    kgs = held[0]
                    if overlapping is not None and not (
                            kgs.start < overlapping.stop and overlapping.start < kgs.stop):
                        continue
                    found.append((urllib.parse.unquote(quoted), kgs, os.path.join(table_dir, name)))
        return found

    def record_path(self, job: str, kind: str, name: str, index: int) -> str:
        return os.path.join(self.job_dir(job), "records", quoted_name(f"{kind}:{name}:{index}"))

    def record_paths(self, job: str) -> list[str]:
        base = os.path.join(self.job_dir(job), "records")
        if not os.path.isdir(base):
            return []
        # Only databases this store names (``<kind>:<name>:<index>``, quoted): a stray file or
        # folder someone left there is no record of the job.
        return [os.path.join(base, name) for name in sorted(os.listdir(base))
                if urllib.parse.unquote(name).count(":") >= 2
                and os.path.isdir(os.path.join(base, name))]

    # Handles -------------------------------------------------------------------------------

    def open(self, path: str, write: bool = True) -> Rdict | None:
        """The database at ``path``: read-write (created if missing) or, for reading, read-only
        unless this store already has it open read-write (None: there is no database to read, as
        when a writer was killed while creating it)."""
        with self._lock:
            db = self._dbs.get(path)
            if db is not None:
                return db
            if not write:
                db = self._readers.get(path)
                if db is None:
                    if not os.path.exists(os.path.join(path, "CURRENT")):
                        return None
                    with damage_reported(path):
                        db = self._readers[path] = Rdict(path, options=database_options(False),
                                                         access_type=AccessType.read_only())
                return db
            reader = self._readers.pop(path, None)
            if reader is not None:
                reader.close()
            with private_umask(), damage_reported(path):
                os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
                db = self._dbs[path] = Rdict(path, options=database_options(True))
            return db

    def stats(self, path: str, db: Rdict) -> dict[int, list[tuple[int, int]]]:
        """Key group -> ``[(version, key count), ...]`` in version order, of a database this store
        has open read-write (read from disk once, then kept up to date by this store's writes)."""
        stats = self._stats_cache.get(path)
        if stats is None:
            stats = {}
            for key, value in scan(db, STATS):
                group, version = SLOT.unpack_from(key, 1)
                stats.setdefault(group, []).append((version, COUNT.unpack(value)[0]))
            self._stats_cache[path] = stats
        return stats

    def forget(self, path: str) -> None:
        with self._lock:
            self._stats_cache.pop(path, None)
            self.record_floor.pop(path, None)
            for handles in (self._dbs, self._readers):
                db = handles.pop(path, None)
                if db is not None:
                    db.close()

    def forget_job(self, job: str) -> None:
        job_dir = self.job_dir(job)
        with self._lock:
            for path in [p for p in [*self._dbs, *self._readers] if p.startswith(job_dir + os.sep)]:
                self.forget(path)

    def close(self) -> None:
        with self._lock:
            for db in [*self._dbs.values(), *self._readers.values()]:
                db.close()
            self._dbs.clear()
            self._readers.clear()
            self._stats_cache.clear()
            self.record_floor.clear()
            if self._holding:
                self._holding = False
                release_private_umask()
