"""Keyed-state changes as chunks: one key group's written and removed keys of one table, pickled once
per list (``StateChunk``), framed with a check for storage (``encode_chunk``, ``decode_chunk``),
merged, folded and expanded to rows. ``snapshot`` re-exports every name here."""

from __future__ import annotations

import io
import pickle
import struct
import zlib
from collections.abc import Sequence
from typing import NamedTuple

from gyreflow.state.keys.keygroups import key_group_of
from gyreflow.state.shared.errors import SnapshotCorruptedError

_TAG = 16  # state.sealing.TAG_SIZE


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
