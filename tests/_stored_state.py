"""White-box helpers of the snapshot-store tests: they reach into each store only to inspect or
damage what it keeps (stored cells per version, sizes, corruption of a row, the meta or a record)."""

from __future__ import annotations

import glob
import hashlib
import hmac
import io
import os
import pickle
import struct
import urllib.parse
import zlib
from collections.abc import Callable

import attrs
import pytest
import sqlalchemy as sa
from _state_contract import Ctx
from rocksdict import AccessType, Options, Rdict

from gyreflow.state.shared.snapshot import (
    JobMeta,
    SnapshotCorruptedError,
    SnapshotStore,
    StateRow,
    TaskRecord,
    chunk_lists,
    dumps,
    encode_value,
)
from gyreflow.state.stores.checkpoint import CheckpointSnapshotStore
from gyreflow.state.stores.jdbc import META, RECORDS, STATE
from gyreflow.state.stores.memory import Folded, MemorySnapshotStore, folded_context
from gyreflow.state.stores.rocksdb import RocksDBSnapshotStore

# --- white-box inspection and damage -------------------------------------------------------------
#
# RocksDB, as its module documents it: ``<path>/<quoted job>/state/<quoted table>/kg-A-B`` databases
# where ``c + key group (>H) + version (>Q)`` holds a chunk: a header (16-byte HMAC-SHA256 tag of the
# rest, written key count, key count, length of the pickled keys: three >I, the 16-byte tag of the
# pickled keys), the pickled list of keys (written ones first, then removed ones) and the pickled list
# of the written keys' values (by the same pickler, so objects shared with the keys are references to
# them). Tags are keyed by the job's key, ``<path>/<quoted job>.key`` (hex), and cover
# ``chunk\0<table>\0<key group>\0<version>\0`` before the bytes. The meta and task records live in
# other databases under the job directory, found here by their stored bytes. Inspection opens
# databases read-only next to the live store; damage closes the store, edits the database and opens
# a fresh store.

HEADER = struct.Struct(">16sIII16s")


def rocksdb_key(store: RocksDBSnapshotStore, job: str) -> bytes:
    """The job's key, read from its key file as documented (not through the store)."""
    with open(os.path.join(store.path, urllib.parse.quote(job, safe="") + ".key")) as handle:
        return bytes.fromhex(handle.read().strip())


def tag(key: bytes, *parts: bytes) -> bytes:
    return hmac.new(key, b"".join(parts), hashlib.sha256).digest()[:16]


def chunk_context(table: str, kg: int, version: int) -> bytes:
    return f"chunk\0{table}\0{kg}\0{version}\0".encode()


def chunk_key(kg: int, version: int) -> bytes:
    return b"c" + struct.pack(">HQ", kg, version)


def parse_chunk(value: bytes, key: bytes | None = None,
                context: bytes = b"") -> tuple[list, list, list]:
    """The stored layout: ``(written keys, their values, removed keys)``, tags checked with ``key``."""
    whole, written, count, length, keys_tag = HEADER.unpack_from(value)
    keys_blob = value[HEADER.size:HEADER.size + length]
    if key is not None:
        assert tag(key, context, value[16:]) == whole
        assert tag(key, context, keys_blob) == keys_tag
    unpickler = pickle.Unpickler(io.BytesIO(value[HEADER.size:]))
    keys = unpickler.load()
    values = unpickler.load()  # pickled right after the keys, by the same pickler
    assert keys == pickle.loads(keys_blob)
    assert len(keys) == count and len(values) == written
    return keys[:written], values, keys[written:]


def parse_memory_chunk(blob, context: bytes, table: str = "", key_group: int = 0,
                       ) -> tuple[list, list, list]:
    """``(written keys, values, removed keys)`` of a chunk the memory store keeps: a CRC-32 of
    ``context`` and everything after it, written keys, key count and keys length (>I each), the
    pickled keys, the pickled values; or a folded chunk of ``table`` and ``key_group``: per key,
    a CRC-32 of the folded context and the pickled value, then the pickled value."""
    if isinstance(blob, Folded):
        start = folded_context(table, key_group)
        assert all(zlib.crc32(p, start) == crc for crc, p in blob.values.values())
        return list(blob.values), [pickle.loads(p) for _, p in blob.values.values()], []
    crc, written, count, length = struct.unpack_from(">IIII", blob)
    assert zlib.crc32(blob[4:], zlib.crc32(context)) == crc
    keys_blob = blob[16:16 + length]
    unpickler = pickle.Unpickler(io.BytesIO(blob[16:]))
    keys = unpickler.load()
    values = unpickler.load()  # pickled right after the keys, by the same pickler
    assert keys == pickle.loads(keys_blob)
    assert len(keys) == count and len(values) == written
    return keys[:written], values, keys[written:]


def rocksdb_job_dir(store: RocksDBSnapshotStore, job: str) -> str:
    return os.path.join(store.path, urllib.parse.quote(job, safe=""))


def rocksdb_table_dir(store: RocksDBSnapshotStore, job: str, table: str) -> str:
    return os.path.join(rocksdb_job_dir(store, job), "state", urllib.parse.quote(table, safe=""))


def rocksdb_databases(root: str) -> list[str]:
    pattern = os.path.join(glob.escape(root), "**", "CURRENT")
    return sorted(os.path.dirname(p) for p in glob.glob(pattern, recursive=True))


def rocksdb_items(path: str) -> list[tuple[bytes, bytes]]:
    db = Rdict(path, options=Options(raw_mode=True), access_type=AccessType.read_only())
    try:
        return list(db.items())
    finally:
        db.close()


def stored_cells(ctx: Ctx, job: str) -> dict[tuple[str, int, bytes], dict[int, bytes]]:
    """Every stored ``(table, key group, key) -> {version: framed value}`` of ``job``."""
    store = ctx.store
    cells: dict[tuple[str, int, bytes], dict[int, bytes]] = {}
    if isinstance(store, MemorySnapshotStore):
        data = store._jobs.get(job)
        for (table, kg), versions in (data.chunks.items() if data else ()):
            for version, (_, blob, *_) in versions.items():
                written, values, removed = parse_memory_chunk(
                    blob, chunk_context(table, kg, version), table, kg)
                for k, v in [*zip(written, values, strict=True), *((k, None) for k in removed)]:
                    cells.setdefault((table, kg, dumps(k)), {})[version] = encode_value(
                        None if v is None else dumps(v))
    elif isinstance(store, RocksDBSnapshotStore):
        for path in rocksdb_databases(os.path.join(rocksdb_job_dir(store, job), "state")):
            table = urllib.parse.unquote(os.path.basename(os.path.dirname(path)))
            for key, value in rocksdb_items(path):
                if key.startswith(b"c"):
                    kg, version = struct.unpack_from(">HQ", key, 1)
                    written, values, removed = parse_chunk(value, rocksdb_key(store, job),
                                                           chunk_context(table, kg, version))
                    for k, v in [*zip(written, values, strict=True), *((k, None) for k in removed)]:
                        cells.setdefault((table, kg, dumps(k)), {})[version] = encode_value(
                            None if v is None else dumps(v))
    elif isinstance(store, CheckpointSnapshotStore):
        cells = checkpoint_cells(store, job)
    else:
        query = sa.select(STATE.c.tbl, STATE.c.kg, STATE.c.k, STATE.c.version, STATE.c.v).where(
            STATE.c.job == job)
        with store.engine.connect() as conn:
            for tbl, kg, k, version, v in conn.execute(query):
                assert bytes(k) == b""  # one row per chunk
                written, values, removed = parse_sql_chunk(bytes(v))
                for key, value in [*zip(written, values, strict=True), *((k, None) for k in removed)]:
                    cells.setdefault((tbl, kg, dumps(key)), {})[version] = encode_value(
                        None if value is None else dumps(value))
    return cells


def parse_sql_chunk(blob: bytes) -> tuple[list, list, list]:
    """``(written keys, values, removed keys)`` of a chunk the jdbc store keeps in ``gyreflow_state.v``:
    a 16-byte tag, written keys, key count and keys length (>I each), the pickled keys and values."""
    _, written, count, length = struct.unpack_from(">16sIII", blob)
    keys_blob = blob[28:28 + length]
    unpickler = pickle.Unpickler(io.BytesIO(blob[28:]))
    keys = unpickler.load()
    values = unpickler.load()
    assert keys == pickle.loads(keys_blob)
    assert len(keys) == count and len(values) == written
    return keys[:written], values, keys[written:]


def checkpoint_cells(store, job: str) -> dict[tuple[str, int, bytes], dict[int, bytes]]:
    """``stored_cells`` of a checkpoint location: every delta and base object of ``job``."""
    cells: dict[tuple[str, int, bytes], dict[int, bytes]] = {}
    for path in store.fs.find(store._job(job)):
        name = path.rsplit("/", 1)[-1]
        if "/state/" not in path or not name.endswith((".d", ".b")):
            continue
        version = int(name.split(".")[0])
        table = urllib.parse.unquote(path.split("/")[-3])
        for chunk in store._read_object(path, table, version, None, job):
            written, values, removed = chunk_lists(chunk)
            for k, v in [*zip(written, values, strict=True), *((k, None) for k in removed)]:
                cells.setdefault((chunk.table, chunk.key_group, dumps(k)), {})[version] = (
                    encode_value(None if v is None else dumps(v)))
    return cells


def checkpoint_object(store, job: str, *parts: str) -> str:
    """The path of a checkpoint object of ``job`` (parts quoted as the store quotes them)."""
    return "/".join([store._job(job), *(urllib.parse.quote(p, safe="") for p in parts)])


def damage_checkpoint_frame(store, path: str, key_group: int, fn: Callable[[bytes], bytes]) -> None:
    """Replace the frame of ``key_group`` in a checkpoint state object with ``fn(frame)``, keeping
    the object's index (and so the other key groups) intact."""
    from gyreflow.state.shared.sealing import TAG_SIZE
    from gyreflow.state.stores.checkpoint_format import COUNT as _COUNT
    from gyreflow.state.stores.checkpoint_format import ENTRY as _ENTRY

    blob = store.fs.cat_file(path)
    count = _COUNT.unpack_from(blob, TAG_SIZE)[0]
    index_end = TAG_SIZE + _COUNT.size + count * _ENTRY.size
    entries = list(_ENTRY.iter_unpack(blob[TAG_SIZE + _COUNT.size:index_end]))
    frames, offset = [], index_end
    for group, length in entries:
        frame = blob[offset:offset + length]
        offset += length
        frames.append((group, fn(frame) if group == key_group else frame))
    assert key_group in [g for g, _ in entries]
    seal = store._seals.of(job_of(store, path))
    index = _COUNT.pack(len(frames)) + b"".join(_ENTRY.pack(g, len(f)) for g, f in frames)
    store._put(path, seal.tag(store._context(path), index) + index
               + b"".join(f for _, f in frames), None)


def job_of(store, path: str) -> str:
    return urllib.parse.unquote(path[len(store.root) + 1:].split("/")[0])


def damage_checkpoint_object(store, path: str, fn: Callable[[bytes], bytes]) -> None:
    store._put(path, fn(store.fs.cat_file(path)), None)


def total_size(store: SnapshotStore, job: str) -> int:
    return sum(store.sizes(job).values())


def mutate_rocksdb(ctx: Ctx, find: Callable[[bytes, bytes], bool],
                   fn: Callable[[bytes, bytes], bytes], under: str = "") -> None:
    """Close the store; in the one database under the job directory holding the one key for which
    ``find(key, value)``, store ``fn(key, value)`` instead; open a fresh store."""
    root = os.path.join(rocksdb_job_dir(ctx.store, ctx.jobs[-1]), under)
    ctx.store.close()
    hits = [(path, key, value) for path in rocksdb_databases(root)
            for key, value in rocksdb_items(path) if find(key, value)]
    assert len(hits) == 1, f"expected one stored value to damage, found {len(hits)}"
    path, key, value = hits[0]
    db = Rdict(path, options=Options(raw_mode=True))
    try:
        db[key] = fn(key, value)
    finally:
        db.close()
    ctx.reopen()


def corrupt_row(ctx: Ctx, job: str, victim: StateRow, version: int,
                fn: Callable[[bytes], bytes]) -> None:
    """Replace the framed value stored for ``victim``'s key at ``version`` with ``fn(value)``."""
    table, kg, key = victim.table, victim.key_group, victim.key
    store = ctx.store
    assert job == ctx.jobs[-1]
    if isinstance(store, MemorySnapshotStore):
        # the chunk holding the key at that version: its whole stored value is damaged
        versions = store._jobs[job].chunks[(table, kg)]
        count, blob, *rest = versions[version]
        written, _, removed = parse_memory_chunk(blob, chunk_context(table, kg, version), table, kg)
        assert key in [dumps(k) for k in [*written, *removed]]
        if isinstance(blob, Folded):  # a folded chunk checks each value: the victim's is damaged
            values = dict(blob.values)
            stored = next(k for k in values if dumps(k) == key)
            check, pickled = values[stored]
            values[stored] = (check, fn(pickled))
            versions[version] = (count, Folded(values), *rest)
        else:
            versions[version] = (count, fn(blob), *rest)
    elif isinstance(store, RocksDBSnapshotStore):
        def damage(_, value: bytes) -> bytes:
            written, _, removed = parse_chunk(value, rocksdb_key(store, job),
                                              chunk_context(table, kg, version))
            assert key in [dumps(k) for k in [*written, *removed]]
            return fn(value)

        # the chunk holding the key at that version: its whole stored value is damaged
        mutate_rocksdb(
            ctx, lambda k, _: k == chunk_key(kg, version), damage,
            under=os.path.relpath(rocksdb_table_dir(store, job, table),
                                  rocksdb_job_dir(store, job)))
    elif isinstance(store, CheckpointSnapshotStore):
        path = checkpoint_object(store, job, "state", table, "kg-0-128", f"{version:012d}.d")
        damage_checkpoint_frame(store, path, kg, fn)
    else:
        # the chunk holding the key at that version: its whole stored value is damaged
        where = sa.and_(STATE.c.job == job, STATE.c.tbl == table, STATE.c.kg == kg,
                        STATE.c.version == version)
        with store.engine.begin() as conn:
            stored = bytes(conn.execute(sa.select(STATE.c.v).where(where)).scalar_one())
            written, _, removed = parse_sql_chunk(stored)
            assert key in [dumps(k) for k in [*written, *removed]]
            conn.execute(sa.update(STATE).where(where).values(v=fn(stored)))


def corrupt_meta(ctx: Ctx, job: str, meta: JobMeta, fn: Callable[[bytes], bytes]) -> None:
    store = ctx.store
    assert job == ctx.jobs[-1]
    if isinstance(store, MemorySnapshotStore):
        store._jobs[job].meta = fn(store._jobs[job].meta)
    elif isinstance(store, RocksDBSnapshotStore):
        body = dumps(attrs.asdict(meta, recurse=False))
        mutate_rocksdb(ctx, lambda key, value: key == b"m" and value.endswith(body),
                       lambda _, value: fn(value))
    elif isinstance(store, CheckpointSnapshotStore):
        damage_checkpoint_object(store, checkpoint_object(store, job, "meta"), fn)
    else:
        where = META.c.job == job
        with store.engine.begin() as conn:
            stored = bytes(conn.execute(sa.select(META.c.body).where(where)).scalar_one())
            conn.execute(sa.update(META).where(where).values(body=fn(stored)))


def corrupt_record(ctx: Ctx, job: str, rec: TaskRecord, version: int,
                   fn: Callable[[bytes], bytes]) -> None:
    """Damage ``rec`` as stored at ``version`` (its value must be unique in the job)."""
    store = ctx.store
    assert job == ctx.jobs[-1]
    if isinstance(store, MemorySnapshotStore):
        versions = store._jobs[job].records[(rec.kind, rec.name, rec.index)]
        versions[version] = fn(versions[version])
    elif isinstance(store, RocksDBSnapshotStore):
        mutate_rocksdb(ctx, lambda key, value: value.endswith(rec.value) and len(key) == 8
                       and struct.unpack(">Q", key)[0] == version,
                       lambda _, value: fn(value))
    elif isinstance(store, CheckpointSnapshotStore):
        damage_checkpoint_object(store, checkpoint_object(
            store, job, "records", f"{rec.kind}:{rec.name}:{rec.index}", f"{version:012d}"), fn)
    else:
        where = sa.and_(RECORDS.c.job == job, RECORDS.c.kind == rec.kind,
                        RECORDS.c.name == rec.name, RECORDS.c.idx == rec.index,
                        RECORDS.c.version == version)
        with store.engine.begin() as conn:
            stored = bytes(conn.execute(sa.select(RECORDS.c.v).where(where)).scalar_one())
            conn.execute(sa.update(RECORDS).where(where).values(v=fn(stored)))


def flip_last(blob: bytes) -> bytes:
    return blob[:-1] + bytes([blob[-1] ^ 0x5A])


def flip_middle(blob: bytes) -> bytes:
    middle = len(blob) // 2
    return blob[:middle] + bytes([blob[middle] ^ 0x01]) + blob[middle + 1:]


def flip_first(blob: bytes) -> bytes:
    return bytes([blob[0] ^ 0x80]) + blob[1:]



def check_corrupted(error: pytest.ExceptionInfo, store: SnapshotStore, *parts: str) -> None:
    message = str(error.value)
    assert store.location() in message, message
    for part in parts:
        assert part in message, (part, message)


DAMAGE = {
    "flip-last-byte": flip_last,
    "flip-middle-byte": flip_middle,
    "flip-flag-byte": flip_first,
    "flip-flag-bit": lambda blob: bytes([blob[0] ^ 0x01]) + blob[1:],
    "truncated-to-3": lambda blob: blob[:3],
    "truncated-by-1": lambda blob: blob[:-1],
    "emptied": lambda blob: b"",
}


def outcome(read: Callable[[], object]) -> tuple[str, object]:
    """``("corrupted", message)``, ``("read", result)`` or ``("error", what)`` of ``read()``."""
    try:
        return "read", read()
    except SnapshotCorruptedError as exc:
        return "corrupted", str(exc)
    except Exception as exc:  # noqa: BLE001 - any other exception is an outcome to report
        return "error", f"{type(exc).__name__}: {exc}"
