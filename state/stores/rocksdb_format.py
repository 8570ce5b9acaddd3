"""How a RocksDB range database holds a table's chunks: the keys (chunk, key count, watermark,
meta), the database options, the framing of a chunk under its authentication tags, and the folding
of chunks into one (see ``rocksdb`` for the layout)."""

from __future__ import annotations

import contextlib
import pickle
import struct
import urllib.parse
from collections.abc import Iterator

from rocksdict import DBRecoveryMode, Options, Rdict

from gyreflow.state.shared.sealing import TAG_SIZE, Seal
from gyreflow.state.shared.snapshot import (
    BackendUnavailableError,
    SnapshotCorruptedError,
    StateChunk,
)

VERSION = struct.Struct(">Q")
SLOT = struct.Struct(">HQ")  # key group, version
COUNT = struct.Struct(">I")
# tag of everything after it, written keys, key count, length of the keys list, tag of the keys
FRAME = struct.Struct(f">{TAG_SIZE}sIII{TAG_SIZE}s")
FRAME_TAIL = struct.Struct(f">III{TAG_SIZE}s")
CHUNK, STATS = b"c", b"n"
WATERMARK = b"w"  # the newest version written to a range database (sorts after every c and n key)
META_KEY = b"m"


WRITE_BUFFER = 4 << 20  # per database: a long run flushes (dropping tombstones) instead of growing


def database_options(create: bool) -> Options:
    """Options of every database: small memtables, few info logs, a bounded manifest, and
    compaction of files that are mostly deletions (pruning deletes what each window supersedes)."""
    options = Options(raw_mode=True)
    options.create_if_missing(create)
    options.set_write_buffer_size(WRITE_BUFFER)
    options.set_max_write_buffer_number(2)
    options.set_keep_log_file_num(2)
    options.set_max_log_file_size(1 << 20)
    options.set_max_manifest_file_size(1 << 20)
    options.add_compact_on_deletion_collector_factory(128, 64, 0.5)
    # A damaged write-ahead log fails the open instead of silently dropping what followed the
    # damage. Only an incomplete last record is passed over: a process killed while writing it
    # (RocksDB may write one record in several system calls) had not been told it was written.
    options.set_wal_recovery_mode(DBRecoveryMode.tolerate_corrupted_tail_records())
    return options


def quoted_name(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def stored_chunk_context(table: str, group: int, version: int) -> bytes:
    return f"chunk\0{table}\0{group}\0{version}\0".encode()


def framed_chunk(chunk: StateChunk, seal: Seal, version: int) -> bytes:
    keys, values = chunk.keys, chunk.values
    context = stored_chunk_context(chunk.table, chunk.key_group, version)
    tail = FRAME_TAIL.pack(chunk.written, chunk.count, len(keys), seal.tag(context, keys))
    return seal.tag(context, tail, keys, values) + tail + keys + values


class DamagedChunkError(ValueError):
    """A stored chunk failed its tag or framing; ``keys`` are its keys when they are intact."""

    def __init__(self, keys: list | None = None) -> None:
        super().__init__()
        self.keys = keys


def unframed_chunk(blob: bytes | None, seal: Seal, context: bytes) -> tuple[int, int, bytes, bytes]:
    """``(written, count, keys, values)`` of a stored chunk; raises ``DamagedChunkError``.

    Nothing is unpickled before its tag matched: the keys of a damaged chunk are named only when
    their own tag does."""
    if blob is None or len(blob) < FRAME.size:
        raise DamagedChunkError
    tag, written, count, length, keys_tag = FRAME.unpack_from(blob)
    view = memoryview(blob)
    if not seal.matches(tag, context, view[TAG_SIZE:]):
        keys = None
        if FRAME.size + length <= len(blob):
            keys_blob = view[FRAME.size:FRAME.size + length]
            if seal.matches(keys_tag, context, keys_blob):
                try:
                    keys = pickle.loads(keys_blob)
                except Exception:  # noqa: BLE001 - damaged beyond naming its keys
                    keys = None
        raise DamagedChunkError(keys)
    if written > count or FRAME.size + length > len(blob):
        raise DamagedChunkError
    return written, count, blob[FRAME.size:FRAME.size + length], blob[FRAME.size + length:]


def scan(db: Rdict, prefix: bytes, start: bytes = b"",
          stop: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
    for key, value in db.items(from_key=prefix + start):
        if not key.startswith(prefix) or (stop is not None and key[len(prefix):] >= stop):
            return
        yield key, value


@contextlib.contextmanager
def damage_reported(path: str):
    """RocksDB's own errors (a damaged SST, MANIFEST or CURRENT file, a broken log) as
    ``SnapshotCorruptedError`` naming the database."""
    try:
        yield
    except (SnapshotCorruptedError, BackendUnavailableError):
        raise
    except Exception as exc:  # noqa: BLE001 - rocksdict raises plain Exception for RocksDB status
        text = " ".join(str(exc).split())
        msg = f"RocksDB database {path} cannot be read ({text[:300]})"
        raise SnapshotCorruptedError(msg) from None


def note_chunk(stats: dict[int, list[tuple[int, int]]], group: int, version: int, count: int) -> None:
    """Record in ``stats`` that ``group`` holds a chunk of ``count`` keys at ``version``."""
    versions = stats.setdefault(group, [])
    if versions and versions[-1][0] == version:
        versions[-1] = (version, count)
    elif not versions or versions[-1][0] < version:
        versions.append((version, count))
    else:  # a version older than the newest (rare): keep the list in order
        versions[:] = sorted({**dict(versions), version: count}.items())


def mark_context(table: str, kgs: range) -> bytes:
    return f"mark\0{table}\0{kgs.start}\0{kgs.stop}".encode()


def mark_version(mark: bytes | None, seal: Seal, context: bytes) -> int | None:
    """The version a database's watermark says it reached (None: no watermark, or a damaged one)."""
    if mark is None or len(mark) != VERSION.size + TAG_SIZE:
        return None
    version = mark[:VERSION.size]
    return VERSION.unpack(version)[0] if seal.matches(mark[VERSION.size:], context, version) else None


def chunk_of_stored(table: str, group: int, blob: bytes, seal: Seal, version: int) -> StateChunk:
    written, count, keys, values = unframed_chunk(blob, seal, stored_chunk_context(table, group, version))
    return StateChunk(table, group, written, count, keys, values)
