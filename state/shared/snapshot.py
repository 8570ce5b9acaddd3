"""Snapshot storage contract: versioned keyed-state rows, task records, job meta, and their checksums.

Every backend stores the same three things under a job name:

- state rows ``(table, key group, key) -> value`` written at a version (a window id); a row with no
  value is a deletion. Restoring version ``c`` takes, per key, the row with the largest version <= c.
- task records ``(kind, name, task index) -> bytes`` (source offsets), versioned the same way.
- the job meta (last completed window, retained versions, plan fingerprint), replaced atomically.

Tasks hand over their changes per key group (``StateChunk``, in ``chunks``: the keys and the values
of one key group pickled once each), not per key: pickling is paid per call, and a window changes
many keys. Stores that keep rows per key expand chunks (``chunk_rows``); the RocksDB store keeps the
chunks as they are.

Values carry a CRC-32 so that a damaged row is reported with its location instead of being loaded;
stores that outlive the process carry an authentication tag instead (``state.sealing``), checked
before anything is unpickled.
"""

from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Iterator, Sequence
from typing import NamedTuple

import attrs

from gyreflow.state.records import frozen
from gyreflow.state.shared.chunks import (  # noqa: F401 (re-exported: the chunks of the contract)
    CHUNK_FORMAT,
    StateChunk,
    StateRow,
    chunk_context,
    chunk_lists,
    chunk_rows,
    chunks_by_key_group,
    chunks_of_rows,
    covers,
    decode_chunk,
    dumps,
    encode_chunk,
    loads,
    make_chunk,
    merge_chunks,
    unpickle_chunk,
    worth_folding,
)
from gyreflow.state.shared.errors import (  # noqa: F401 (re-exported)
    BackendUnavailableError,
    SnapshotCorruptedError,
)

_HEADER = struct.Struct(">BI")  # flag, crc32
_VALUE, _DELETED = 0, 1


class StateExistsError(RuntimeError):
    """A job's state exists and neither resume nor fresh was asked for."""


class IncompatiblePlanError(RuntimeError):
    """The stored plan (its fingerprint or signature) differs from the plan being resumed."""


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
    # What gives the state its meaning (runtime.plan_signature); empty in a meta written before
    # it was recorded, whose ``fingerprint`` alone is compared.
    plan: dict = attrs.field(factory=dict)

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
