"""The memory snapshot store: serialised snapshots in process memory (survives in-process restarts only)."""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterator, Sequence

from gyreflow.state.shared.snapshot import (
    JobMeta,
    SnapshotStore,
    TaskSnapshot,
    decode_value,
    encode_value,
    latest_rows,
)


class _JobData:
    def __init__(self) -> None:
        # (table, key group, key) -> sorted versions and framed values
        self.rows: dict[tuple[str, int, bytes], dict[int, bytes]] = {}
        self.by_version: dict[int, set[tuple[str, int, bytes]]] = {}
        self.records: dict[tuple[str, str, int], dict[int, bytes]] = {}
        self.meta: bytes | None = None


class MemorySnapshotStore(SnapshotStore):
    """Keeps framed (checksummed) bytes in dicts, so state that cannot be pickled fails here too."""

    backend_name = "memory"

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self._jobs: dict[str, _JobData] = {}
        self._lock = threading.Lock()

    def location(self) -> str:
        return f"memory:{self.namespace}"

    def _job(self, job: str) -> _JobData:
        data = self._jobs.get(job)
        if data is None:
            data = self._jobs[job] = _JobData()
        return data

    def write(self, snapshot: TaskSnapshot) -> None:
        rows = snapshot.all_rows()
        with self._lock:
            data = self._job(snapshot.job)
            version = snapshot.version
            touched = data.by_version.setdefault(version, set())
            for row in rows:
                ident = (row.table, row.key_group, row.key)
                data.rows.setdefault(ident, {})[version] = encode_value(row.value)
                touched.add(ident)
            for record in snapshot.records:
                ident = (record.kind, record.name, record.index)
                data.records.setdefault(ident, {})[version] = encode_value(record.value)

    def read_rows(self, job: str, table: str, key_groups: range,
                  version: int) -> Iterator[tuple[bytes, bytes]]:
        with self._lock:
            data = self._jobs.get(job)
            if data is None:
                return iter(())
            selected = sorted(
                (ident[2], v, blob)
                for ident, versions in data.rows.items()
                if ident[0] == table and ident[1] in key_groups
                for v, blob in versions.items()
            )

        def where(key: bytes, v: int) -> str:
            return f"{self.location()} job={job} table={table} key={key!r} version={v}"

        return latest_rows(iter(selected), version, where)

    def read_record(self, job, kind, name, index, version):
        with self._lock:
            data = self._jobs.get(job)
            versions = None if data is None else data.records.get((kind, name, index))
            if not versions:
                return None
            eligible = sorted(v for v in versions if v <= version)
            if not eligible:
                return None
            found = eligible[-1]
            where = f"{self.location()} job={job} record={kind}/{name}/{index} version={found}"
            return found, decode_value(versions[found], where)

    def read_meta(self, job: str) -> JobMeta | None:
        with self._lock:
            data = self._jobs.get(job)
            if data is None or data.meta is None:
                return None
            return JobMeta.from_bytes(data.meta, f"{self.location()} job={job} meta")

    def commit(self, meta: JobMeta) -> None:
        with self._lock:
            self._job(meta.job).meta = meta.to_bytes()

    def discard_after(self, job: str, version: int) -> None:
        with self._lock:
            data = self._jobs.get(job)
            if data is None:
                return
            for v in [v for v in data.by_version if v > version]:
                for ident in data.by_version.pop(v):
                    data.rows.get(ident, {}).pop(v, None)
            for versions in data.records.values():
                for v in [v for v in versions if v > version]:
                    del versions[v]

    def prune(self, job: str, crossing: Sequence[int], horizon: int) -> None:
        with self._lock:
            data = self._jobs.get(job)
            if data is None:
                return
            for v in crossing:
                for ident in data.by_version.get(v, ()):
                    versions = data.rows[ident]
                    for old in [o for o in versions if o < v]:
                        del versions[old]
                        data.by_version.get(old, set()).discard(ident)
            for v in [v for v in data.by_version if v < horizon and not data.by_version[v]]:
                del data.by_version[v]
            for versions in data.records.values():
                ordered = sorted(versions)
                keep_from = bisect.bisect_right(ordered, horizon) - 1
                for old in ordered[:max(keep_from, 0)]:
                    del versions[old]

    def delete_job(self, job: str) -> None:
        with self._lock:
            self._jobs.pop(job, None)

    def jobs(self) -> list[str]:
        with self._lock:
            return sorted(j for j, d in self._jobs.items() if d.meta is not None)

    def sizes(self, job: str) -> dict[str, int]:
        with self._lock:
            data = self._jobs.get(job)
            sizes: dict[str, int] = {}
            if data is None:
                return sizes
            for (table, _, key), versions in data.rows.items():
                sizes[table] = sizes.get(table, 0) + sum(len(key) + len(b) for b in versions.values())
            sizes["(records)"] = sum(len(b) for vs in data.records.values() for b in vs.values())
            return sizes


_REGISTRY: dict[str, MemorySnapshotStore] = {}
_REGISTRY_LOCK = threading.Lock()


def memory_store(namespace: str) -> MemorySnapshotStore:
    """The process-wide memory store of ``namespace`` (one per environment)."""
    with _REGISTRY_LOCK:
        store = _REGISTRY.get(namespace)
        if store is None:
            store = _REGISTRY[namespace] = MemorySnapshotStore(namespace)
        return store
