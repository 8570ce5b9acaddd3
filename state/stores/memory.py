"""The memory snapshot store: serialised snapshots in process memory (survives in-process restarts only)."""

from __future__ import annotations

import bisect
import pickle
import threading
import zlib
from collections.abc import Iterator, Sequence

from gyreflow.state.shared.snapshot import (
    JobMeta,
    SnapshotCorruptedError,
    SnapshotStore,
    StateChunk,
    TaskSnapshot,
    chunk_context,
    chunks_of_rows,
    covers,
    decode_chunk,
    decode_value,
    dumps,
    encode_chunk,
    encode_value,
    loads,
    make_chunk,
    merge_chunks,
    unpickle_chunk,
    worth_folding,
)


class Folded:
    """A key group's chunks at or before the horizon folded into one: each key's value pickled on
    its own with a CRC-32 (over the key group's context and the value). A later fold adds what the
    newer chunks wrote and drops what they removed without reading or writing the other values
    again: a change log's large merged slots are copied once, not at every fold."""

    __slots__ = ("values",)

    def __init__(self, values: dict) -> None:
        self.values = values  # key -> (CRC-32, pickled value); never changed once stored

    def size(self) -> int:
        return sum(len(pickled) for _, pickled in self.values.values())


def folded_context(table: str, key_group: int) -> int:
    """The CRC-32 a folded value's check starts from: its table and key group."""
    return zlib.crc32(f"folded\0{table}\0{key_group}\0".encode())


class _JobData:
    def __init__(self) -> None:
        # (table, key group) -> version -> (key count, framed chunk, pickled keys): what the
        # version changed in the key group, one checksummed blob (``state.snapshot.encode_chunk``),
        # and the keys as this process pickled them (never read back as state: they let a prune
        # see that a later chunk rewrote the same keys without checking and copying both blobs)
        self.chunks: dict[tuple[str, int], dict[int, tuple[int, bytes, bytes]]] = {}
        self.by_version: dict[int, set[tuple[str, int]]] = {}
        self.records: dict[tuple[str, str, int], dict[int, bytes]] = {}
        self.meta: bytes | None = None


class MemorySnapshotStore(SnapshotStore):
    """Keeps framed (checksummed) bytes in dicts, so state that cannot be pickled fails here too.

    A snapshot stores one chunk per changed key group and table, as the task pickled it; pruning
    folds the chunks at or before the oldest retained version of the key groups a crossing version
    changed (``state.snapshot.worth_folding``) into a ``Folded`` chunk, each value pickled on its
    own, so that its work follows the change, not the state: a later fold reads the newer chunks
    only, and the values they left alone are kept as they are.
    """

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

    def _where(self, job: str, table: str, group: int, version: int) -> str:
        return f"{self.location()} job={job} table={table} key group={group} version={version}"

    def write(self, snapshot: TaskSnapshot) -> None:
        chunks = list(snapshot.chunks)
        if snapshot.rows:
            chunks.extend(chunks_of_rows(snapshot.rows))
        job, version = snapshot.job, snapshot.version
        with self._lock:
            data = self._job(job)
            touched = data.by_version.setdefault(version, set())
            for chunk in chunks:
                slot = (chunk.table, chunk.key_group)
                versions = data.chunks.get(slot)
                if versions is None:
                    versions = data.chunks[slot] = {}
                earlier = versions.get(version)
                if earlier is not None:  # a version written again: merged into what it wrote
                    stored = self._decoded(job, slot, version, earlier[1])
                    chunk = merge_chunks(*slot, [stored, chunk], keep_removed=True)
                versions[version] = (chunk.count,
                                     encode_chunk(chunk, None, chunk_context(*slot, version)),
                                     chunk.keys)
                touched.add(slot)
            for record in snapshot.records:
                ident = (record.kind, record.name, record.index)
                data.records.setdefault(ident, {})[version] = encode_value(record.value)

    def _chunks(self, job: str, table: str, key_groups: range,
                version: int) -> list[tuple[int, int, bytes]]:
        with self._lock:
            data = self._jobs.get(job)
            if data is None:
                return []
            found = []
            for group in key_groups:
                versions = data.chunks.get((table, group))
                if versions:
                    found.extend((group, v, versions[v][1]) for v in sorted(versions) if v <= version)
            return found

    def read_into(self, job: str, table: str, key_groups: range, version: int, data: dict) -> None:
        # Key groups hold disjoint keys, so chunks are applied straight into ``data``.
        for group, v, blob in self._chunks(job, table, key_groups, version):
            if type(blob) is Folded:
                data.update(_unfolded(blob, self._where(job, table, group, v), table, group))
                continue
            chunk = decode_chunk(blob, self._where(job, table, group, v), table, group,
                                 context=chunk_context(table, group, v))
            keys, values = unpickle_chunk(chunk.keys, chunk.values)
            written = chunk.written
            data.update(zip(keys[:written] if len(keys) > written else keys, values, strict=True))
            for key in keys[written:]:
                data.pop(key, None)

    def read_rows(self, job: str, table: str, key_groups: range,
                  version: int) -> Iterator[tuple[bytes, bytes]]:
        data: dict = {}
        self.read_into(job, table, key_groups, version, data)
        return iter([(dumps(key), dumps(value)) for key, value in data.items()])

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
                for slot in data.by_version.pop(v):
                    data.chunks.get(slot, {}).pop(v, None)
            for versions in data.records.values():
                for v in [v for v in versions if v > version]:
                    del versions[v]

    def prune(self, job: str, crossing: Sequence[int], horizon: int) -> None:
        # Every resume is to a retained version, all at or after the horizon: the chunks at or before
        # it are only ever read together, so they can become one. Only the key groups a crossing
        # version changed have new chunks at or before the horizon.
        with self._lock:
            data = self._jobs.get(job)
            if data is None:
                return
            slots = set()
            for v in crossing:
                slots.update(data.by_version.get(v, ()))
            for slot in slots:
                self._fold(job, data, slot, horizon)
            for v in [v for v in data.by_version if v < horizon and not data.by_version[v]]:
                del data.by_version[v]
            for versions in data.records.values():
                ordered = sorted(versions)
                keep_from = bisect.bisect_right(ordered, horizon) - 1
                for old in ordered[:max(keep_from, 0)]:
                    del versions[old]

    def _fold(self, job: str, data: _JobData, slot: tuple[str, int], horizon: int) -> None:
        versions = data.chunks[slot]
        old = sorted(v for v in versions if v <= horizon)
        if not worth_folding(slot[1], [versions[v][0] for v in old]):
            return
        last = old[-1]
        keys = versions[last][2]
        if keys is not None and all(versions[v][2] == keys for v in old[:-1]):
            # The same keys rewritten (a key group whose every key changes each window): the last
            # chunk supersedes the others as it is, and what it holds is checked when it is read.
            self._drop(data, slot, versions, old[:-1])
            return
        first = versions[old[0]][1]
        if type(first) is Folded:
            values = dict(first.values)
            chunks = [self._decoded(job, slot, v, versions[v][1]) for v in old[1:]]
        else:
            values = {}
            chunks = [self._decoded(job, slot, v, versions[v][1]) for v in old]
            if covers(chunks[-1], chunks[:-1]):
                self._drop(data, slot, versions, old[:-1])
                return
        # The oldest chunk of the key group is among them: a removal has nothing left to hide. The
        # chunks are merged first, so a key written by several of them is pickled once.
        merged: dict = {}
        for chunk in chunks:
            keys, written = unpickle_chunk(chunk.keys, chunk.values)
            merged.update(zip(keys, written, strict=False))  # stops at the written keys
            merged.update(dict.fromkeys(keys[chunk.written:], _REMOVED))
        start, crc32, pickle_dumps = folded_context(*slot), zlib.crc32, pickle.dumps
        for key, value in merged.items():
            if value is _REMOVED:
                values.pop(key, None)
            else:
                pickled = pickle_dumps(value, 5)
                values[key] = (crc32(pickled, start), pickled)
        versions[last] = (len(values), Folded(values), None)
        self._drop(data, slot, versions, old[:-1])

    @staticmethod
    def _drop(data: _JobData, slot: tuple[str, int], versions: dict, dropped: list) -> None:
        for v in dropped:
            del versions[v]
            data.by_version.get(v, set()).discard(slot)

    def _decoded(self, job: str, slot: tuple[str, int], version: int, blob) -> StateChunk:
        """The chunk stored at ``version`` (a folded one as a plain chunk)."""
        where = self._where(job, *slot, version)
        if type(blob) is Folded:
            return make_chunk(*slot, dict(_unfolded(blob, where, *slot)), [])
        return decode_chunk(blob, where, *slot, context=chunk_context(*slot, version))

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
            for (table, _), versions in data.chunks.items():
                sizes[table] = sizes.get(table, 0) + sum(
                    b.size() if type(b) is Folded else len(b) for _, b, _ in versions.values())
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


_REMOVED = object()  # a fold's mark of a key the merged chunks removed


def _unfolded(folded: Folded, where: str, table: str, key_group: int) -> Iterator[tuple]:
    """The ``(key, value)`` pairs of a folded chunk, each value checked first."""
    start = folded_context(table, key_group)
    for key, (check, pickled) in folded.values.items():
        if zlib.crc32(pickled, start) != check:
            msg = f"snapshot chunk failed its checksum at {where}"
            raise SnapshotCorruptedError(msg)
        yield key, loads(pickled)
