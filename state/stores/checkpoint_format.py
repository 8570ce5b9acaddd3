"""How a checkpoint location's state object holds its chunks: an authenticated index of its key
groups, then one authenticated frame per key group (so that damage to one key group's bytes spares
the others), and the names of the objects of a range (``<version>.d`` a delta, ``<version>.b`` a
base)."""

from __future__ import annotations

import re
import struct

from gyreflow.state.shared.sealing import TAG_SIZE
from gyreflow.state.shared.snapshot import (
    SnapshotCorruptedError,
    StateChunk,
    merge_chunks,
)

VERSION_DIGITS = 12
COUNT = struct.Struct(">I")
ENTRY = struct.Struct(">HI")  # key group, frame length
CHUNK_HEAD = struct.Struct(">III")  # written keys, key count, length of the keys list
_OBJECT = re.compile(r"^(\d{12})\.([db])$")


def object_name(version: int, kind: str) -> str:
    """The name of a range's object: ``kind`` "d" (what the version changed) or "b" (a base)."""
    return f"{version:0{VERSION_DIGITS}d}.{kind}"


def ordered_objects(names, stamps: dict) -> list[tuple[int, str, str | None]]:
    """``(version, kind, stamp)`` of the objects among ``names``, oldest first (a delta before a
    base)."""
    found = []
    for name in names:
        match = _OBJECT.match(name)
        if match:
            found.append((int(match.group(1)), match.group(2), stamps.get(name)))
    return sorted(found, key=lambda item: (item[0], item[1] == "b"))


def chunk_context(table: str, group: int, version: int) -> bytes:
    """What a key group's frame is authenticated with, beside its bytes."""
    return f"chunk\0{table}\0{group}\0{version}\0".encode()


def framed_object(chunks: list[StateChunk], seal, context: bytes, table: str,
                  version: int) -> bytes:
    """The bytes of a state object of ``chunks``; ``context`` names its place."""
    frames = []
    for chunk in chunks:
        body = CHUNK_HEAD.pack(chunk.written, chunk.count, len(chunk.keys)) + chunk.keys \
            + chunk.values
        frames.append((chunk.key_group,
                       seal.tag(chunk_context(table, chunk.key_group, version), body) + body))
    index = COUNT.pack(len(frames)) + b"".join(ENTRY.pack(g, len(f)) for g, f in frames)
    return seal.tag(context, index) + index + b"".join(f for _, f in frames)


def chunks_of_object(blob: bytes, seal, context: bytes, table: str, version: int,
                     key_groups: range | None, where: str, relative: str) -> list[StateChunk]:
    """The chunks of a state object, of ``key_groups`` only (None: all), each checked; raises
    ``SnapshotCorruptedError`` naming ``where`` (and the object, ``relative``)."""
    try:
        count = COUNT.unpack_from(blob, TAG_SIZE)[0]
        index_end = TAG_SIZE + COUNT.size + count * ENTRY.size
        intact = index_end <= len(blob) and seal.matches(
            blob[:TAG_SIZE], context, blob[TAG_SIZE:index_end])
    except struct.error:
        intact = False
    if not intact:
        msg = (f"snapshot object failed its authentication at {where} ({relative}): it was "
               "damaged, or written without the job's key")
        raise SnapshotCorruptedError(msg)
    chunks = []
    offset = index_end
    for group, length in ENTRY.iter_unpack(blob[TAG_SIZE + COUNT.size:index_end]):
        frame = blob[offset:offset + length]
        offset += length
        if key_groups is not None and group not in key_groups:
            continue
        if len(frame) < TAG_SIZE + CHUNK_HEAD.size or not seal.matches(
                frame[:TAG_SIZE], chunk_context(table, group, version), frame[TAG_SIZE:]):
            msg = (f"snapshot chunk failed its authentication at {where} key_group={group}: "
                   "it was damaged, or written without the job's key")
            raise SnapshotCorruptedError(msg)
        written, keys_count, keys_length = CHUNK_HEAD.unpack_from(frame, TAG_SIZE)
        start = TAG_SIZE + CHUNK_HEAD.size
        chunks.append(StateChunk(table, group, written, keys_count,
                                 frame[start:start + keys_length],
                                 frame[start + keys_length:]))
    return chunks


def merged_chunks(chunks: list[StateChunk]) -> list[StateChunk]:
    """Chunks of one version written in several calls, as one chunk per table and key group (a
    later call's keys win; removals stay removals)."""
    by_group: dict[tuple[str, int], list[StateChunk]] = {}
    for chunk in chunks:
        by_group.setdefault((chunk.table, chunk.key_group), []).append(chunk)
    return [merge_chunks(table, group, grouped, keep_removed=True)
            for (table, group), grouped in sorted(by_group.items())]
