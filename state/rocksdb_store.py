"""The RocksDB snapshot store (rocksdict): one database per state table and key-group range, on disk.

Layout under ``state.path``::

    <job>/meta                      the job meta (written by the process that commits)
    <job>/records/<kind:name:index> one task's records, e.g. a source task's offsets by version
    <job>/state/<table>/kg-A-B      rows of one table for key groups A..B-1 (one writing task)

Within a range database, ``d + key group + key`` holds the key's recent versions in one value (each
``version, length, framed value``), trimmed at every write to what a retained snapshot can still need;
``v + version + key group + key`` indexes what each version wrote, so the work of an uncompleted window
can be found and undone. Pruning is a range delete over that index: no per-key iteration, so old
versions never pile up as tombstones a reader has to skip.

A database is opened by the process that runs the task owning its range, so any process can serve
any range; after a resume with another parallelism, readers merge the ranges of the old layout.
"""

from __future__ import annotations

import heapq
import os
import shutil
import struct
import threading
import urllib.parse
import zlib
from collections.abc import Iterator, Sequence

from rocksdict import Options, Rdict, WriteBatch, WriteOptions

from gyreflow.state.snapshot import (
    BackendUnavailableError,
    JobMeta,
    SnapshotCorruptedError,
    SnapshotStore,
    TaskSnapshot,
    decode_value,
    encode_value,
)

_VERSION = struct.Struct(">Q")
_IDENT = struct.Struct(">HI")  # key group, key length
_ENTRY = struct.Struct(">QI")  # version, length of the framed value
_DATA, _INDEX = b"d", b"v"
_META_KEY = b"m"


def _quote(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def _ident(key_group: int, key: bytes) -> bytes:
    return _IDENT.pack(key_group, len(key)) + key


def _key_of(ident: bytes) -> bytes:
    return ident[_IDENT.size:]


_CRC = struct.Struct(">I")


class _DamagedValue(ValueError):
    """A stored multi-version value failed its checksum or framing."""


def _entries(value: bytes | None) -> list[tuple[int, bytes]]:
    """Parse a key's stored versions: ``[(version, framed value), ...]`` in version order.

    The whole value carries a CRC-32 over its entry headers and values, so a damaged length or
    version is detected, not read as a different history.
    """
    if value is None:
        return []
    if len(value) < _CRC.size or zlib.crc32(value[_CRC.size:]) != _CRC.unpack_from(value)[0]:
        raise _DamagedValue
    view = memoryview(value)[_CRC.size:]
    out = []
    pos = 0
    while pos < len(view):
        if pos + _ENTRY.size > len(view):
            raise _DamagedValue
        version, length = _ENTRY.unpack_from(view, pos)
        pos += _ENTRY.size
        if pos + length > len(view):
            raise _DamagedValue
        out.append((version, bytes(view[pos:pos + length])))
        pos += length
    return out


def _join(entries: list[tuple[int, bytes]]) -> bytes:
    body = b"".join(_ENTRY.pack(v, len(blob)) + blob for v, blob in entries)
    return _CRC.pack(zlib.crc32(body)) + body


def _trim(entries: list[tuple[int, bytes]], horizon: int) -> list[tuple[int, bytes]]:
    """Keep the versions a retained snapshot can need: all after ``horizon`` and the latest at or
    before it."""
    keep_from = 0
    for index, (version, _) in enumerate(entries):
        if version <= horizon:
            keep_from = index
    return entries[keep_from:]


def _scan(db: Rdict, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
    for key, value in db.items(from_key=prefix):
        if not key.startswith(prefix):
            return
        yield key, value


class RocksDBSnapshotStore(SnapshotStore):
    """Snapshot storage in rocksdict databases under ``path``."""

    backend_name = "rocksdb"

    def __init__(self, path: str, sync: bool = False) -> None:
        self.path = os.path.abspath(path)
        try:
            os.makedirs(self.path, exist_ok=True)
            probe = os.path.join(self.path, f".gyreflow-write-probe-{os.getpid()}-{id(self)}")
            with open(probe, "w") as handle:
                handle.write("ok")
            os.unlink(probe)
        except OSError as exc:
            msg = f"rocksdb backend: state.path {self.path!r} is not a writable directory ({exc})"
            raise BackendUnavailableError(msg) from exc
        self._dbs: dict[str, Rdict] = {}
        self._horizons: dict[str, int] = {}
        self._lock = threading.RLock()
        self._sync = WriteOptions()
        self._sync.sync = True
        self._write_options = self._sync if sync else WriteOptions()

    def location(self) -> str:
        return f"rocksdb:{self.path}"

    # Databases -----------------------------------------------------------------------------

    def _job_dir(self, job: str) -> str:
        return os.path.join(self.path, _quote(job))

    def _open(self, path: str) -> Rdict:
        with self._lock:
            db = self._dbs.get(path)
            if db is None:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                options = Options(raw_mode=True)
                options.create_if_missing(True)
                db = self._dbs[path] = Rdict(path, options=options)
            return db

    def _meta_db(self, job: str) -> Rdict:
        return self._open(os.path.join(self._job_dir(job), "meta"))

    def _table_dir(self, job: str, table: str) -> str:
        return os.path.join(self._job_dir(job), "state", _quote(table))

    def _range_dbs(self, job: str, table: str | None = None,
                   overlapping: range | None = None) -> list[tuple[str, range, Rdict]]:
        """Every (table, key-group range, database) of ``job`` on disk, or only those overlapping
        ``overlapping`` (a database is opened only when needed: another process may hold it)."""
        base = os.path.join(self._job_dir(job), "state")
        found = []
        if not os.path.isdir(base):
            return found
        tables = [_quote(table)] if table is not None else sorted(os.listdir(base))
        for quoted in tables:
            table_dir = os.path.join(base, quoted)
            if not os.path.isdir(table_dir):
                continue
            for name in sorted(os.listdir(table_dir)):
                if name.startswith("kg-"):
                    start, stop = (int(x) for x in name[3:].split("-"))
                    if overlapping is not None and not (
                            start < overlapping.stop and overlapping.start < stop):
                        continue
                    db = self._open(os.path.join(table_dir, name))
                    found.append((urllib.parse.unquote(quoted), range(start, stop), db))
        return found

    # Writing -------------------------------------------------------------------------------

    def write(self, snapshot: TaskSnapshot) -> None:
        version = snapshot.version
        packed = _VERSION.pack(version)
        horizon = snapshot.horizon if snapshot.horizon is not None else self._horizon(snapshot.job)
        by_table: dict[str, list] = {}
        for row in snapshot.rows:
            by_table.setdefault(row.table, []).append(row)
        kgs = snapshot.key_groups
        for table, rows in by_table.items():
            path = os.path.join(self._table_dir(snapshot.job, table), f"kg-{kgs.start}-{kgs.stop}")
            db = self._open(path)
            idents = [_ident(row.key_group, row.key) for row in rows]
            current = db.get([_DATA + ident for ident in idents])
            batch = WriteBatch(raw_mode=True)
            for row, ident, stored in zip(rows, idents, current, strict=True):
                try:
                    entries = [e for e in _entries(stored) if e[0] < version]
                except _DamagedValue:
                    msg = (f"snapshot value damaged (checksum or framing) at {self.location()} "
                           f"job={snapshot.job} table={table} key group={row.key_group} "
                           f"key={row.key!r}")
                    raise SnapshotCorruptedError(msg) from None
                entries.append((version, encode_value(row.value)))
                batch.put(_DATA + ident, _join(_trim(entries, horizon)))
                batch.put(_INDEX + packed + ident, b"")
            db.write(batch, self._write_options)
        for record in snapshot.records:
            db = self._open(self._record_path(snapshot.job, record.kind, record.name, record.index))
            db.put(packed, encode_value(record.value), self._write_options)

    def _horizon(self, job: str) -> int:
        """The oldest retained version of ``job``: older versions are never restored."""
        horizon = self._horizons.get(job)
        if horizon is None:
            meta = self.read_meta(job)
            horizon = self._horizons[job] = meta.retained[0] if meta and meta.retained else 0
        return horizon

    def _record_path(self, job: str, kind: str, name: str, index: int) -> str:
        return os.path.join(self._job_dir(job), "records", _quote(f"{kind}:{name}:{index}"))

    def _record_dbs(self, job: str) -> list[Rdict]:
        base = os.path.join(self._job_dir(job), "records")
        if not os.path.isdir(base):
            return []
        return [self._open(os.path.join(base, name)) for name in sorted(os.listdir(base))]

    def commit(self, meta: JobMeta) -> None:
        self._meta_db(meta.job).put(_META_KEY, meta.to_bytes(), self._sync)
        self._horizons[meta.job] = meta.retained[0] if meta.retained else 0

    # Reading -------------------------------------------------------------------------------

    def read_rows(self, job: str, table: str, key_groups: range,
                  version: int) -> Iterator[tuple[bytes, bytes]]:
        sources = [db for _, _, db in self._range_dbs(job, table, key_groups)]
        low = _DATA + _IDENT.pack(key_groups.start, 0)
        high = _DATA + _IDENT.pack(key_groups.stop, 0)

        def rows(db: Rdict) -> Iterator[tuple[bytes, bytes]]:
            for key, value in db.items(from_key=low):
                if key >= high:
                    return
                yield key[1:], value

        merged = heapq.merge(*(rows(db) for db in sources), key=lambda row: row[0])
        previous_ident, entries = None, []
        for ident, value in merged:
            if ident != previous_ident:
                if previous_ident is not None:
                    found = self._latest(job, table, previous_ident, entries, version)
                    if found is not None:
                        yield found
                previous_ident, entries = ident, []
            try:
                entries.extend(_entries(value))
            except _DamagedValue:
                kg = _IDENT.unpack_from(ident)[0]
                msg = (f"snapshot value damaged (checksum or framing) at {self.location()} "
                       f"job={job} table={table} key group={kg} key={_key_of(ident)!r}")
                raise SnapshotCorruptedError(msg) from None
        if previous_ident is not None:
            found = self._latest(job, table, previous_ident, entries, version)
            if found is not None:
                yield found

    def _latest(self, job, table, ident, entries, version) -> tuple[bytes, bytes] | None:
        best = None
        for v, blob in entries:
            if v <= version and (best is None or v > best[0]):
                best = (v, blob)
        if best is None:
            return None
        kg = _IDENT.unpack_from(ident)[0]
        where = (f"{self.location()} job={job} table={table} key group={kg} "
                 f"key={_key_of(ident)!r} version={best[0]}")
        payload = decode_value(best[1], where)
        return None if payload is None else (_key_of(ident), payload)

    def read_record(self, job, kind, name, index, version):
        path = self._record_path(job, kind, name, index)
        if not os.path.isdir(path):
            return None
        found = None
        for key, value in self._open(path).items():
            v = _VERSION.unpack(key)[0]
            if v <= version:
                found = (v, value)
        if found is None:
            return None
        where = f"{self.location()} job={job} record={kind}/{name}/{index} version={found[0]}"
        return found[0], decode_value(found[1], where)

    def read_meta(self, job: str) -> JobMeta | None:
        if not os.path.isdir(os.path.join(self._job_dir(job), "meta")):
            return None
        blob = self._meta_db(job).get(_META_KEY)
        if blob is None:
            return None
        return JobMeta.from_bytes(blob, f"{self.location()} job={job} meta")

    # Maintenance ---------------------------------------------------------------------------

    def discard_after(self, job: str, version: int) -> None:
        start = _INDEX + _VERSION.pack(version + 1)
        for _, _, db in self._range_dbs(job):
            idents = set()
            index_keys = []
            for key, _ in db.items(from_key=start):
                if not key.startswith(_INDEX):
                    break
                index_keys.append(key)
                idents.add(key[1 + _VERSION.size:])
            if not index_keys:
                continue
            batch = WriteBatch(raw_mode=True)
            for ident in idents:
                try:
                    kept = [e for e in _entries(db.get(_DATA + ident)) if e[0] <= version]
                except _DamagedValue:
                    msg = (f"snapshot value damaged (checksum or framing) at {self.location()} "
                           f"job={job} key={_key_of(ident)!r}")
                    raise SnapshotCorruptedError(msg) from None
                if kept:
                    batch.put(_DATA + ident, _join(kept))
                else:
                    batch.delete(_DATA + ident)
            for key in index_keys:
                batch.delete(key)
            db.write(batch, self._sync)
        for db in self._record_dbs(job):
            db.delete_range(_VERSION.pack(version + 1), b"\xff" * (_VERSION.size + 1))

    def prune(self, job: str, crossing: Sequence[int], horizon: int) -> None:
        # Values are trimmed to the horizon whenever a key is written; what is left to drop is the
        # index of versions no resume can return to (every resume is to a retained version).
        self._horizons[job] = max(horizon, self._horizons.get(job, 0))
        low, high = _INDEX + _VERSION.pack(0), _INDEX + _VERSION.pack(horizon)
        for _, _, db in self._range_dbs(job):
            db.delete_range(low, high)
        self._prune_records(job, horizon)

    def _prune_records(self, job: str, horizon: int) -> None:
        for db in self._record_dbs(job):
            keep = None
            for key, _ in db.items():
                if _VERSION.unpack(key)[0] <= horizon:
                    keep = key
                else:
                    break
            if keep is not None:
                db.delete_range(_VERSION.pack(0), keep)

    def drop_other_ranges(self, job: str, table: str, keep: set[range]) -> None:
        """Delete the databases of ``table`` whose range is not in ``keep`` (the old layout after a
        resume with another parallelism, once the new layout holds a full copy)."""
        for _, kgs, _ in self._range_dbs(job, table):
            if kgs in keep:
                continue
            path = os.path.join(self._table_dir(job, table), f"kg-{kgs.start}-{kgs.stop}")
            with self._lock:
                db = self._dbs.pop(path, None)
                if db is not None:
                    db.close()
            shutil.rmtree(path, ignore_errors=True)

    def delete_job(self, job: str) -> None:
        self._horizons.pop(job, None)
        job_dir = self._job_dir(job)
        with self._lock:
            for path in [p for p in self._dbs if p.startswith(job_dir + os.sep)]:
                self._dbs.pop(path).close()
        shutil.rmtree(job_dir, ignore_errors=True)

    def jobs(self) -> list[str]:
        if not os.path.isdir(self.path):
            return []
        names = []
        for quoted in sorted(os.listdir(self.path)):
            job = urllib.parse.unquote(quoted)
            if os.path.isdir(os.path.join(self.path, quoted, "meta")) and self.read_meta(job):
                names.append(job)
        return names

    def sizes(self, job: str) -> dict[str, int]:
        sizes: dict[str, int] = {}
        for table, kgs, db in self._range_dbs(job):
            total = sum(len(k) + len(v) for k, v in _scan(db, _DATA))
            sizes[f"{table} [{kgs.start}-{kgs.stop - 1}]"] = total
        sizes["(records)"] = sum(len(k) + len(v) for db in self._record_dbs(job) for k, v in db.items())
        return sizes

    def close(self) -> None:
        with self._lock:
            for db in self._dbs.values():
                db.close()
            self._dbs.clear()

