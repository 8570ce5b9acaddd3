"""Snapshot storage contract: versioned keyed-state rows, task records, job meta, and their checksums.

Every backend stores the same three things under a job name:

- state rows ``(table, key group, key) -> value`` written at a version (a window id); a row with no
  value is a deletion. Restoring version ``c`` takes, per key, the row with the largest version <= c.
- task records ``(kind, name, task index) -> bytes`` (source offsets), versioned the same way.
- the job meta (last completed window, retained versions, plan fingerprint), replaced atomically.

Tasks hand over their changes per key group (``StateChunk``: the keys and the values of one key group
pickled once each), not per key: pickling is paid per call, and a window changes many keys. Stores that
keep rows per key expand chunks (``chunk_rows``); the RocksDB store keeps the chunks as they are.

Values carry a CRC-32 so that a damaged row is reported with its location instead of being loaded;
stores that outlive the process carry an authentication tag instead (``state.sealing``), checked
before anything is unpickled.
"""

from __future__ import annotations

import io
import pickle
import re
import struct
import zlib
from collections.abc import Iterator, Sequence
from typing import NamedTuple

import attrs

from gyreflow.state.keys.keygroups import key_group_of
from gyreflow.state.records import frozen
from gyreflow.state.shared.errors import BackendUnavailableError  # noqa: F401 (re-exported)

_HEADER = struct.Struct(">BI")  # flag, crc32
_VALUE, _DELETED = 0, 1


class SnapshotCorruptedError(RuntimeError):
    """A stored snapshot failed its checksum or is truncated; the message says where."""


class StateExistsError(RuntimeError):
    """A job's state exists and neither resume nor fresh was asked for."""


class IncompatiblePlanError(RuntimeError):
    """The stored plan fingerprint differs from the plan being resumed."""


_DELETED_CRC = zlib.crc32(bytes([_DELETED]))


def encode_value(payload: bytes | None, seal=None, context: bytes = b"") -> bytes:
    """Frame ``payload`` (None for a deletion) with a flag and a CRC-32 of flag and payload, or,
    with a ``seal``, with a flag and an authentication tag of ``context``, flag and payload.

    The check covers the flag too, so a damaged deletion marker cannot pass for a value; ``context``
    names what the value belongs to (table, key, version), so a value cannot be moved elsewhere.
    """
    if seal is not None:
        flag = _DELETED if payload is None else _VALUE
        body = b"" if payload is None else payload
        return _FLAGS[flag] + seal.tag(context, _FLAGS[flag], body) + body
    if payload is None:
        return _HEADER.pack(_DELETED, _DELETED_CRC)
    return _HEADER.pack(_VALUE, zlib.crc32(payload, zlib.crc32(bytes([_VALUE])))) + payload


def decode_value(blob: bytes, where: str, seal=None, context: bytes = b"") -> bytes | None:
    """Check and unframe a value written by ``encode_value``; None means deleted."""
    if seal is not None:
        return _unseal(blob, where, seal, context)
    if blob is None or len(blob) < _HEADER.size:
        msg = f"snapshot row truncated at {where}"
        raise SnapshotCorruptedError(msg)
    flag, crc = _HEADER.unpack_from(blob)
    if flag == _DELETED and len(blob) == _HEADER.size and crc == _DELETED_CRC:
        return None
    payload = bytes(blob[_HEADER.size:])
    if flag != _VALUE or zlib.crc32(payload, zlib.crc32(bytes([_VALUE]))) != crc:
        msg = f"snapshot row failed its checksum at {where}"
        raise SnapshotCorruptedError(msg)
    return payload


_FLAGS = (bytes([_VALUE]), bytes([_DELETED]))
_TAG = 16  # state.sealing.TAG_SIZE


def _unseal(blob: bytes, where: str, seal, context: bytes) -> bytes | None:
    if blob is None or len(blob) < 1 + _TAG:
        msg = f"snapshot row truncated at {where}"
        raise SnapshotCorruptedError(msg)
    flag = blob[0]
    body = bytes(blob[1 + _TAG:])
    if flag not in (_VALUE, _DELETED) or (flag == _DELETED and body) or not seal.matches(
            bytes(blob[1:1 + _TAG]), context, _FLAGS[flag], body):
        msg = (f"snapshot row failed its authentication at {where}: it was damaged, or written "
               "without the job's key")
        raise SnapshotCorruptedError(msg)
    return None if flag == _DELETED else body


def row_context(table: str, key_group: int, key: bytes, version: int) -> bytes:
    """What a state row's tag covers besides its value: its table, key group, key and version."""
    return b"".join((b"row\0", table.encode(), b"\0", str(key_group).encode(), b"\0",
                     str(version).encode(), b"\0", key))


def record_context(kind: str, name: str, index: int, version: int) -> bytes:
    """What a task record's tag covers besides its value."""
    return f"record\0{kind}\0{name}\0{index}\0{version}".encode()


def meta_context(job: str) -> bytes:
    """What the job meta's tag covers besides the meta."""
    return b"meta\0" + job.encode()


def dumps(value: object) -> bytes:
    """Serialise a key, value or offset for storage."""
    return pickle.dumps(value, protocol=5)


def loads(data: bytes) -> object:
    """Inverse of ``dumps``."""
    return pickle.loads(data)


class StateRow(NamedTuple):
    """One changed key of one state table; ``value`` None records a deletion.

    A named tuple, not an attrs class: a snapshot builds one per changed key, on the hot path.
    """

    table: str
    key_group: int
    key: bytes
    value: bytes | None


class StateChunk(NamedTuple):
    """The changes of one key group of one state table, pickled once per list, not once per key.

    ``keys`` is the pickled list of the written keys followed by the removed keys; ``values`` is the
    pickled list of the values of the first ``written`` keys, pickled by the same pickler right after
    the keys: objects shared by both (a key inside its value) are stored once, so ``values`` loads
    only after ``keys`` (``unpickle_chunk``). ``count`` is the number of keys.
    """

    table: str
    key_group: int
    written: int
    count: int
    keys: bytes
    values: bytes


def make_chunk(table: str, key_group: int, written: dict, removed) -> StateChunk:
    """Pickle the ``written`` keys and values and the ``removed`` keys of one key group."""
    keys = [*written, *removed]
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, protocol=5)
    pickler.dump(keys)
    middle = buffer.tell()
    pickler.dump(list(written.values()))
    data = buffer.getvalue()
    return StateChunk(table, key_group, len(written), len(keys), data[:middle], data[middle:])


def unpickle_chunk(keys: bytes, values: bytes) -> tuple[list, list]:
    """The key list and the value list of a chunk's pickled ``keys`` and ``values``."""
    unpickler = pickle.Unpickler(io.BytesIO(keys + values))
    return unpickler.load(), unpickler.load()


def chunks_by_key_group(table: str, changed: dict, removed, max_parallelism: int,
                        groups: dict | None = None) -> list[StateChunk]:
    """A table's changes (``changed`` key -> value, ``removed`` keys) as one chunk per key group.

    ``groups`` memoises ``key -> key group`` across calls (the same keys change window after window;
    hashing a key costs more than looking it up); it is cleared when it holds a million keys.
    """
    by_group: dict[int, tuple[dict, list]] = {}
    if groups is None:
        groups = {}
    elif len(groups) > 1 << 20:
        groups.clear()
    for key, value in changed.items():
        group = groups.get(key)
        if group is None:
            group = groups[key] = key_group_of(key, max_parallelism)
        entry = by_group.get(group)
        if entry is None:
            entry = by_group[group] = ({}, [])
        entry[0][key] = value
    for key in removed:
        group = groups.get(key)
        if group is None:
            group = groups[key] = key_group_of(key, max_parallelism)
        entry = by_group.get(group)
        if entry is None:
            entry = by_group[group] = ({}, [])
        entry[1].append(key)
    return [make_chunk(table, group, written, gone)
            for group, (written, gone) in sorted(by_group.items())]


# A stored chunk: a check (CRC-32, or an authentication tag), written keys, key count, length of
# the keys list, then the pickled keys and values. The check covers the context, the header after
# it and both lists.
CHUNK_FORMAT = 2  # the layout of stored chunks; stores refuse state written in another
_CHUNK_CRC = struct.Struct(">IIII")
_CHUNK_SEALED = struct.Struct(f">{_TAG}sIII")


def encode_chunk(chunk: StateChunk, seal=None, context: bytes = b"") -> bytes:
    """Frame ``chunk`` for storage: one check over ``context``, the header and both lists."""
    keys, values = chunk.keys, chunk.values
    header = _CHUNK_CRC.pack(0, chunk.written, chunk.count, len(keys))[4:]
    if seal is not None:
        return seal.tag(context, header, keys, values) + header + keys + values
    crc = zlib.crc32(values, zlib.crc32(keys, zlib.crc32(header, zlib.crc32(context))))
    return b"".join((struct.pack(">I", crc), header, keys, values))


def decode_chunk(blob: bytes | None, where: str, table: str, key_group: int, seal=None,
                 context: bytes = b"") -> StateChunk:
    """Check and unframe a chunk written by ``encode_chunk``; nothing is unpickled before its check
    matched. Raises ``SnapshotCorruptedError`` naming ``where``."""
    frame = _CHUNK_CRC if seal is None else _CHUNK_SEALED
    if blob is None or len(blob) < frame.size:
        msg = f"snapshot chunk truncated at {where}"
        raise SnapshotCorruptedError(msg)
    check, written, count, length = frame.unpack_from(blob)
    view = memoryview(blob)
    start = frame.size - 12
    if seal is not None:
        good = seal.matches(check, context, view[start:])
    else:
        good = zlib.crc32(view[start:], zlib.crc32(context)) == check
    if not good or written > count or frame.size + length > len(blob):
        kind = "checksum" if seal is None else "authentication"
        msg = (f"snapshot chunk failed its {kind} at {where}"
               + ("" if seal is None else ": it was damaged, or written without the job's key"))
        raise SnapshotCorruptedError(msg)
    return StateChunk(table, key_group, written, count, bytes(view[frame.size:frame.size + length]),
                      bytes(view[frame.size + length:]))


def chunk_context(table: str, key_group: int, version: int) -> bytes:
    """What a stored chunk's check covers besides its bytes: its table, key group and version."""
    return f"chunk\0{table}\0{key_group}\0{version}\0".encode()


_GONE = object()


def merge_chunks(table: str, key_group: int, chunks: Sequence[StateChunk],
                 keep_removed: bool) -> StateChunk:
    """One chunk with the effect of ``chunks`` applied in order; ``keep_removed``: removed keys
    stay as removals (an older chunk not merged here may still hold them)."""
    state: dict = {}
    for chunk in chunks:
        keys, values = unpickle_chunk(chunk.keys, chunk.values)
        state.update(zip(keys, values, strict=False))
        for key in keys[chunk.written:]:
            state[key] = _GONE
    written = {k: v for k, v in state.items() if v is not _GONE}
    removed = [k for k, v in state.items() if v is _GONE] if keep_removed else []
    return make_chunk(table, key_group, written, removed)


def covers(last: StateChunk, earlier: Sequence[StateChunk]) -> bool:
    """Whether ``last`` holds every key of ``earlier`` (which it then supersedes as it is: a key
    group rewritten whole is folded without unpickling its values)."""
    if last.count < max(chunk.count for chunk in earlier):
        return False
    if all(chunk.keys == last.keys for chunk in earlier):  # the same keys rewritten: no unpickling
        return True
    keys = set(loads(last.keys))
    return all(keys.issuperset(loads(chunk.keys)) for chunk in earlier)


# Chunks at or before the oldest retained version that get folded whatever their sizes: 32 to 63,
# by key group, so that key groups changing at the same pace are not all rewritten by one prune.
FOLD_LIMIT, FOLD_SPREAD = 32, 32


def worth_folding(key_group: int, counts: Sequence[int]) -> bool:
    """Whether the chunks of ``key_group`` at or before the horizon (their key ``counts``, oldest
    first) should become one: once the later ones hold as many keys as the oldest (each key is
    rewritten a bounded number of times on average), or once there are too many to read."""
    if len(counts) < 2:
        return False
    return (sum(counts[1:]) >= counts[0]
            or len(counts) >= FOLD_LIMIT + key_group * 7 % FOLD_SPREAD)


def chunks_of_rows(rows) -> list[StateChunk]:
    """Per-key rows (pickled keys and values) as one chunk per table and key group."""
    groups: dict[tuple[str, int], tuple[dict, dict]] = {}
    for row in rows:
        written, removed = groups.setdefault((row.table, row.key_group), ({}, {}))
        key = loads(row.key)
        if row.value is None:
            written.pop(key, None)
            removed[key] = None
        else:
            removed.pop(key, None)
            written[key] = loads(row.value)
    return [make_chunk(table, group, written, list(removed))
            for (table, group), (written, removed) in groups.items()]


def chunk_lists(chunk: StateChunk) -> tuple[list, list, list]:
    """``(written keys, their values, removed keys)`` of a chunk."""
    keys, values = unpickle_chunk(chunk.keys, chunk.values)
    return keys[:chunk.written], values, keys[chunk.written:]


def chunk_rows(chunk: StateChunk) -> list[StateRow]:
    """The per-key rows of a chunk, for stores that keep one row per key."""
    keys, values, removed = chunk_lists(chunk)
    table, group = chunk.table, chunk.key_group
    rows = [StateRow(table, group, dumps(k), dumps(v)) for k, v in zip(keys, values, strict=True)]
    rows.extend(StateRow(table, group, dumps(k), None) for k in removed)
    return rows


class TaskRecord(NamedTuple):
    """A small per-task value such as a source offset."""

    kind: str
    name: str
    index: int
    value: bytes


@frozen
class TaskSnapshot:
    """What one task writes for one version: changed rows and its records.

    ``key_groups`` is the writing task's key-group range (backends that split storage by range use it);
    a task owning several runs of key groups writes one snapshot per run (``by_runs``).
    Changes come as per-key ``rows`` or as per-key-group ``chunks`` (what tasks write); a snapshot
    never holds the same key in both.
    """

    job: str
    version: int
    key_groups: range | tuple[int, ...]
    rows: tuple[StateRow, ...] = ()
    records: tuple[TaskRecord, ...] = ()
    horizon: int | None = None  # the oldest retained version, when the writer knows it
    chunks: tuple[StateChunk, ...] = ()
    tables: tuple[str, ...] = ()  # every state table of the writing task, changed or not

    @property
    def size(self) -> int:
        """Bytes of the changes and records (as pickled, before any framing a store adds)."""
        return (sum(len(c.keys) + len(c.values) for c in self.chunks)
                + sum(len(r.key) + len(r.value or b"") for r in self.rows)
                + sum(len(r.value) for r in self.records))

    def by_runs(self) -> list[TaskSnapshot]:
        """This snapshot as one per run of consecutive key groups (a task a rebalance gave key
        groups from several places owns several runs; storage is split by run), the records in
        the first."""
        if isinstance(self.key_groups, range):
            return [self]
        from gyreflow.state.keys.keygroups import contiguous_runs

        parts = []
        for i, run in enumerate(contiguous_runs(self.key_groups)):
            parts.append(attrs.evolve(
                self, key_groups=run, records=self.records if i == 0 else (),
                rows=tuple(r for r in self.rows if r.key_group in run),
                chunks=tuple(c for c in self.chunks if c.key_group in run)))
        return parts

    def all_rows(self) -> list[StateRow]:
        """``rows`` and the expanded ``chunks``: the changes one row per key."""
        rows = list(self.rows)
        for chunk in self.chunks:
            rows.extend(chunk_rows(chunk))
        return rows


@frozen
class JobMeta:
    """The committed progress of a job."""

    job: str
    fingerprint: str
    last_completed: int
    retained: tuple[int, ...]
    parallelism: dict[str, int] = attrs.field(factory=dict)
    # Stateful operators whose key groups a rebalance assigned: the task of each key group.
    assignments: dict[str, tuple[int, ...]] = attrs.field(factory=dict)

    def to_bytes(self, seal=None) -> bytes:
        """Serialise with a checksum, or with ``seal``'s tag."""
        return encode_value(dumps(attrs.asdict(self, recurse=False)), seal, meta_context(self.job))

    @classmethod
    def from_bytes(cls, blob: bytes, where: str, seal=None, job: str = "") -> JobMeta:
        """Parse bytes written by ``to_bytes`` (``job``: whose meta it should be, for the tag)."""
        payload = decode_value(blob, where, seal, meta_context(job))
        if payload is None:
            msg = f"job meta deleted at {where}"
            raise SnapshotCorruptedError(msg)
        fields = loads(payload)
        fields["retained"] = tuple(fields["retained"])
        return cls(**fields)


# The folder (or database) of one table's key-group range in stores that split storage by range:
# ``kg-A-B``, or ``kg-A-B~W`` for one ``retire_ranges`` set aside (an older layout's, which reached
# version W; ``~W-N`` when several reached the same).
_RANGE_NAME = re.compile(r"^kg-(\d+)-(\d+)(~\d+(?:-\d+)?)?$")


def stored_range(name: str) -> tuple[range, bool] | None:
    """The key-group range a range folder named ``name`` holds and whether it was set aside, or
    None if ``name`` names no range folder.

    >>> stored_range("kg-64-128"), stored_range("kg-64-128~4-1"), stored_range("kg-0-64.dropped")
    ((range(64, 128), False), (range(64, 128), True), None)
    """
    match = _RANGE_NAME.match(name)
    if match is None:
        return None
    return range(int(match.group(1)), int(match.group(2))), match.group(3) is not None


def set_aside_name(name: str, reached: int, taken) -> str:
    """The name under which range folder ``name``, which reached version ``reached``, is set
    aside: not one of ``taken``."""
    aside, n = f"{name}~{reached}", 0
    while aside in taken:
        n += 1
        aside = f"{name}~{reached}-{n}"
    return aside


class SnapshotStore:
    """A live connection to a backend's snapshot storage, opened where it is used; never pickled."""

    backend_name = "abstract"
    # Whether storage is kept per key-group range of the writing layout (``retire_ranges`` and
    # ``drop_other_ranges`` have work), rather than by key.
    by_range = False

    def location(self) -> str:
        """Where the data lives, for messages."""
        raise NotImplementedError

    def write(self, snapshot: TaskSnapshot) -> None:
        """Durably store one task's snapshot (rows and records) under its version."""
        raise NotImplementedError

    def read_rows(self, job: str, table: str, key_groups: range,
                  version: int) -> Iterator[tuple[bytes, bytes]]:
        """Yield ``(key, value)`` of ``table`` in ``key_groups`` as of ``version`` (deletions applied)."""
        raise NotImplementedError

    def read_into(self, job: str, table: str, key_groups: range, version: int, data: dict) -> None:
        """Add ``table``'s keys in ``key_groups`` as of ``version`` to ``data``, unpickled.

        What a task's restore uses; stores that keep whole key groups together override it to
        unpickle a key group at a time.
        """
        data.update((loads(k), loads(v)) for k, v in self.read_rows(job, table, key_groups, version))

    def read_record(self, job: str, kind: str, name: str, index: int,
                    version: int) -> tuple[int, bytes] | None:
        """The latest ``(version, value)`` of a task record at or before ``version``."""
        raise NotImplementedError

    def verify_reached(self, job: str, table: str, key_groups: range, version: int) -> None:
        """Before a task restores the completed window ``version``: raise
        ``SnapshotCorruptedError`` if the store can tell that ``table``'s state for ``key_groups``
        lost writes up to that window. Stores whose writes are one transaction with the job meta
        lose nothing without losing the meta too, and have nothing to check."""

    def read_meta(self, job: str) -> JobMeta | None:
        """The job's committed meta, or None if the job has no state."""
        raise NotImplementedError

    def commit(self, meta: JobMeta) -> None:
        """Replace the job's meta in one atomic step."""
        raise NotImplementedError

    def discard_after(self, job: str, version: int) -> None:
        """Delete every row and record written after ``version`` (work of uncompleted windows)."""
        raise NotImplementedError

    def prune(self, job: str, crossing: Sequence[int], horizon: int) -> None:
        """Drop what no retained version needs.

        ``horizon`` is the oldest retained version; ``crossing`` are the versions that reached it
        since the last prune. A row older than a row of the same key in ``crossing`` is superseded for
        every retained version, so only keys written at ``crossing`` versions are visited: the cost
        follows the change, not the state size. Records older than the horizon's latest are dropped.
        """
        raise NotImplementedError

    def retire_ranges(self, job: str, version: int, tables: dict[str, set[range]]) -> None:
        """Before a layout that moved key groups writes its first window, ``version + 1``: set
        aside the storage of each table's ranges in ``tables[table]`` (the ones the new layout
        writes) that did not reach ``version``. Such storage holds an older layout's windows, and
        other ranges hold the windows after them: the new layout must start the range afresh, not
        add its windows to the older ones (folding them together would skip what happened in
        between). Reads still merge what was set aside; ``drop_other_ranges`` removes it with the
        other ranges.

        Only stores that split storage by range have anything to set aside.
        """

    def drop_other_ranges(self, job: str, table: str, keep: set[range]) -> None:
        """Drop storage of ``table`` kept for key-group ranges other than ``keep``, and what
        ``retire_ranges`` set aside.

        Only stores that split storage by range have anything to drop; the others store rows by key
        group and keep nothing per range.
        """

    def delete_job(self, job: str) -> None:
        """Forget everything stored for ``job``."""
        raise NotImplementedError

    def jobs(self) -> list[str]:
        """Names of the jobs with a committed meta."""
        raise NotImplementedError

    def sizes(self, job: str) -> dict[str, int]:
        """Stored bytes per state table and for records (for ``gyreflow snapshots``)."""
        raise NotImplementedError

    def tables(self, job: str) -> list[str]:
        """The names of ``job``'s state tables."""
        return sorted(label for label in self.sizes(job) if label not in ("(records)", "records"))

    def lock_job(self, job: str):
        """Hold ``job``'s state for this run (``JobLock``); raises ``JobLockedError`` naming the
        holder when another live run holds it. Stores that live in one process need no lock."""
        from gyreflow.state.shared.job_lock import JobLock

        return JobLock()

    def close(self) -> None:
        """Release connections and files."""


def latest_rows(rows: Iterator[tuple[bytes, int, bytes]], version: int,
                where, decode=None) -> Iterator[tuple[bytes, bytes]]:
    """From ``(key, version, framed value)`` sorted by key then version, yield each key's latest
    value at or before ``version``; ``where(key, version)`` names a row for error messages, and
    ``decode(blob, where, key, version)`` unframes one (``decode_value`` by default)."""
    if decode is None:
        def decode(blob, place, _key, _version):
            return decode_value(blob, place)
    current_key = None
    current_blob = None
    current_version = -1
    for key, row_version, blob in rows:
        if row_version > version:
            continue
        if key != current_key:
            if current_key is not None:
                payload = decode(current_blob, where(current_key, current_version), current_key,
                                 current_version)
                if payload is not None:
                    yield current_key, payload
            current_key = key
        current_blob = blob
        current_version = row_version
    if current_key is not None:
        payload = decode(current_blob, where(current_key, current_version), current_key,
                         current_version)
        if payload is not None:
            yield current_key, payload
