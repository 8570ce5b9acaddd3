"""The snapshot-store contract, run against every backend: memory, RocksDB, JDBC on SQLite and JDBC
on a real PostgreSQL server.

The oracle is a plain-Python model of the contract (``Model``: per key, the list of ``(version, value
or deletion)``), never a store's own earlier output. Retention is exercised the way the checkpoint
coordinator drives it (``Committer`` mirrors ``CheckpointCoordinator.commit``; a test checks that it
issues the same calls). White-box helpers reach into each store only to inspect or damage what is
stored (sizes, rows per version, corruption).
"""

from __future__ import annotations

import glob
import os
import pickle
import re
import struct
import threading
import time
import types
import urllib.parse
import uuid
import zlib
from collections.abc import Callable

import attrs
import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rocksdict import AccessType, Options, Rdict

from gyreflow.api.config import Config
from gyreflow.runtime.checkpoint import CheckpointCoordinator
from gyreflow.runtime.snapshot_writers import ProcessSnapshotWriter
from gyreflow.state.backends import (
    JdbcStateBackend,
    MemoryStateBackend,
    RocksDBStateBackend,
    StateBackend,
    backend_from_config,
)
from gyreflow.state.jdbc_store import META, RECORDS, STATE, JdbcSnapshotStore, default_sqlite_url
from gyreflow.state.keygroups import key_group_of
from gyreflow.state.memory_store import MemorySnapshotStore
from gyreflow.state.rocksdb_store import RocksDBSnapshotStore
from gyreflow.state.snapshot import (
    BackendUnavailableError,
    JobMeta,
    SnapshotCorruptedError,
    SnapshotStore,
    StateRow,
    TaskRecord,
    TaskSnapshot,
    dumps,
    encode_value,
    loads,
)

MP = 128  # key groups (the default state.max_parallelism)
ALL = range(MP)
TIMEOUT = 30.0  # seconds a child-process operation may take before the test calls it a hang


# --- the oracle ----------------------------------------------------------------------------------


class Model:
    """The contract in plain Python: every write of every key and record, nothing pruned."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, int, bytes], list[tuple[int, bytes | None]]] = {}
        self.records: dict[tuple[str, str, int], list[tuple[int, bytes]]] = {}

    def apply(self, snapshot: TaskSnapshot) -> None:
        for row in snapshot.rows:
            history = self.rows.setdefault((row.table, row.key_group, row.key), [])
            history[:] = [e for e in history if e[0] != snapshot.version]  # a rewrite replaces
            history.append((snapshot.version, row.value))
            history.sort(key=lambda e: e[0])
        for record in snapshot.records:
            history = self.records.setdefault((record.kind, record.name, record.index), [])
            history[:] = [e for e in history if e[0] != snapshot.version]
            history.append((snapshot.version, record.value))
            history.sort(key=lambda e: e[0])

    def discard_after(self, version: int) -> None:
        for history in [*self.rows.values(), *self.records.values()]:
            history[:] = [e for e in history if e[0] <= version]

    def read(self, table: str, key_groups: range, version: int) -> dict[bytes, bytes]:
        out = {}
        for (tbl, kg, key), history in self.rows.items():
            if tbl != table or kg not in key_groups:
                continue
            visible = [value for v, value in history if v <= version]
            if visible and visible[-1] is not None:
                out[key] = visible[-1]
        return out

    def read_record(self, kind: str, name: str, index: int, version: int):
        visible = [e for e in self.records.get((kind, name, index), []) if e[0] <= version]
        return visible[-1] if visible else None


def row(table: str, key: object, value: object | None) -> StateRow:
    """A state row as a task writes it: pickled key and value, key group from the key."""
    return StateRow(table, key_group_of(key, MP), dumps(key),
                    None if value is None else dumps(value))


def record(value: object, name: str = "numbers", index: int = 0) -> TaskRecord:
    return TaskRecord("source", name, index, dumps(value))


# --- one store of each backend -------------------------------------------------------------------


def backend_kind(overrides: dict) -> str:
    if overrides["state.backend"] != "jdbc":
        return overrides["state.backend"]
    return "postgresql" if overrides.get("state.url") else "sqlite"


@attrs.define
class Ctx:
    """An open store of one backend, a model, and the jobs this test created (for cleanup)."""

    kind: str
    backend: StateBackend
    store: SnapshotStore
    jobs: list[str] = attrs.field(factory=list)

    def new_job(self) -> str:
        job = f"job-{uuid.uuid4().hex}"  # PostgreSQL is shared by the whole session
        self.jobs.append(job)
        return job

    def reopen(self) -> SnapshotStore:
        """Close the store and open a fresh one on the same storage (a restarted process)."""
        self.store.close()
        self.store = self.backend.open_store()
        return self.store

    def write(self, model: Model | None, snapshot: TaskSnapshot) -> None:
        self.store.write(snapshot)
        if model is not None:
            model.apply(snapshot)

    def read(self, job: str, table: str, version: int, key_groups: range = ALL) -> dict:
        pairs = list(self.store.read_rows(job, table, key_groups, version))
        found = dict(pairs)
        assert len(found) == len(pairs), "a key was returned twice"
        return found


STATEMENT_TIMEOUT_MS = 20_000


def with_pg_options(url: str, statement_timeout_ms: int, search_path: str | None = None) -> str:
    """``url`` with server settings for every connection (libpq ``options``)."""
    options = f"-c statement_timeout={statement_timeout_ms}"
    if search_path:
        options += f" -c search_path={search_path}"
    parsed = sa.engine.make_url(url)
    return parsed.update_query_dict({"options": options}).render_as_string(hide_password=False)


@pytest.fixture
def ctx(backend_overrides):
    kind = backend_kind(backend_overrides)
    backend = backend_from_config(Config.load(None, backend_overrides, environ={}))
    if kind == "postgresql":  # a pathological query plan fails its test instead of hanging the run
        backend = attrs.evolve(backend, url=with_pg_options(backend.url, STATEMENT_TIMEOUT_MS))
    context = Ctx(kind, backend, backend.open_store())
    yield context
    for job in context.jobs:
        context.store.delete_job(job)
    context.store.close()


@attrs.define
class Committer:
    """Commits versions the way ``CheckpointCoordinator.commit`` does: keep the last ``keep``,
    then prune the versions that reached the new horizon."""

    store: SnapshotStore
    job: str
    keep: int
    retained: tuple[int, ...] = ()

    def commit(self, window: int) -> None:
        old_horizon = self.retained[0] if self.retained else 0
        self.retained = (*self.retained, window)[-self.keep:]
        self.store.commit(JobMeta(self.job, "fp", window, self.retained, {"count": 2}))
        horizon = self.retained[0]
        crossing = ([v for v in self.retained if old_horizon < v <= horizon]
                    if horizon > old_horizon else [])
        if crossing:
            self.store.prune(self.job, crossing, horizon)


class RecordingWriter:
    """A snapshot writer that records the calls it gets (and applies them to nothing)."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def commit(self, meta, on_done) -> None:
        self.calls.append(("commit", meta.last_completed, meta.retained))
        on_done()

    def prune(self, job, crossing, horizon, drop=None) -> None:
        self.calls.append(("prune", tuple(crossing), horizon))


class RecordingStore:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def commit(self, meta) -> None:
        self.calls.append(("commit", meta.last_completed, meta.retained))

    def prune(self, job, crossing, horizon) -> None:
        self.calls.append(("prune", tuple(crossing), horizon))


@pytest.mark.parametrize("keep", [1, 2, 3, 5])
def test_committer_issues_the_same_calls_as_the_checkpoint_coordinator(keep):
    graph = types.SimpleNamespace(fingerprint=lambda: "fp",
                                  pipeline=types.SimpleNamespace(vertices=[]))
    coordinator = CheckpointCoordinator("job", graph, None,
                                        MemoryStateBackend(retained_snapshots=keep))
    writer = RecordingWriter()
    store = RecordingStore()
    committer = Committer(store, "job", keep)
    for window in range(1, 12):
        coordinator.commit(window, writer, lambda: None)
        committer.commit(window)
    assert store.calls == writer.calls
    assert any(call[0] == "prune" for call in store.calls)


# --- white-box inspection and damage -------------------------------------------------------------
#
# RocksDB, as its module documents it: ``<path>/<quoted job>/state/<quoted table>/kg-A-B`` databases
# where ``d + key group (>H) + key length (>I) + key`` holds ``(version >Q, length >I, framed value)``
# entries; the meta and task records live in other databases under the job directory, found here by
# their stored bytes. Inspection opens databases read-only next to the live store; damage closes the
# store, edits the database and opens a fresh store.

ENTRY = struct.Struct(">QI")


def parse_entries(value: bytes) -> list[tuple[int, bytes]]:
    """The stored layout: a CRC-32 of the body, then (version, length, framed value) entries."""
    assert zlib.crc32(value[4:]) == struct.unpack_from(">I", value)[0]
    value = value[4:]
    out, pos = [], 0
    while pos < len(value):
        version, length = ENTRY.unpack_from(value, pos)
        out.append((version, value[pos + ENTRY.size:pos + ENTRY.size + length]))
        pos += ENTRY.size + length
    return out


def join_entries(entries: list[tuple[int, bytes]]) -> bytes:
    body = b"".join(ENTRY.pack(v, len(blob)) + blob for v, blob in entries)
    return struct.pack(">I", zlib.crc32(body)) + body


def data_key(kg: int, key: bytes) -> bytes:
    return b"d" + struct.pack(">HI", kg, len(key)) + key


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
        for ident, versions in (data.rows.items() if data else ()):
            if versions:
                cells[ident] = dict(versions)
    elif isinstance(store, RocksDBSnapshotStore):
        for path in rocksdb_databases(os.path.join(rocksdb_job_dir(store, job), "state")):
            table = urllib.parse.unquote(os.path.basename(os.path.dirname(path)))
            for key, value in rocksdb_items(path):
                if key.startswith(b"d"):
                    kg, length = struct.unpack_from(">HI", key, 1)
                    cells.setdefault((table, kg, key[7:7 + length]), {}).update(
                        parse_entries(value))
    else:
        query = sa.select(STATE.c.tbl, STATE.c.kg, STATE.c.k, STATE.c.version, STATE.c.v).where(
            STATE.c.job == job)
        with store.engine.connect() as conn:
            for tbl, kg, k, version, v in conn.execute(query):
                cells.setdefault((tbl, kg, bytes(k)), {})[version] = bytes(v)
    return cells


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
        versions = store._jobs[job].rows[(table, kg, key)]
        versions[version] = fn(versions[version])
    elif isinstance(store, RocksDBSnapshotStore):
        mutate_rocksdb(
            ctx, lambda k, _: k == data_key(kg, key),
            lambda _, value: join_entries([(v, fn(blob) if v == version else blob)
                                           for v, blob in parse_entries(value)]),
            under=os.path.relpath(rocksdb_table_dir(store, job, table),
                                  rocksdb_job_dir(store, job)))
    else:
        where = sa.and_(STATE.c.job == job, STATE.c.tbl == table, STATE.c.kg == kg,
                        STATE.c.k == key, STATE.c.version == version)
        with store.engine.begin() as conn:
            stored = bytes(conn.execute(sa.select(STATE.c.v).where(where)).scalar_one())
            conn.execute(sa.update(STATE).where(where).values(v=fn(stored)))


def corrupt_meta(ctx: Ctx, job: str, meta: JobMeta, fn: Callable[[bytes], bytes]) -> None:
    store = ctx.store
    assert job == ctx.jobs[-1]
    if isinstance(store, MemorySnapshotStore):
        store._jobs[job].meta = fn(store._jobs[job].meta)
    elif isinstance(store, RocksDBSnapshotStore):
        mutate_rocksdb(ctx, lambda _, value: value == meta.to_bytes(),
                       lambda _, value: fn(value))
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
        framed = encode_value(rec.value)
        mutate_rocksdb(ctx, lambda key, value: value == framed and not key.startswith(b"d"),
                       lambda _, value: fn(value))
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


# --- rows: round trip, versions, deletions, key groups, tables, jobs -----------------------------


def test_write_read_round_trip_at_every_version(ctx):
    job = ctx.new_job()
    model = Model()
    keys = list(range(400))  # spread over (nearly) every key group
    assert len({key_group_of(k, MP) for k in keys}) > 100
    ctx.write(model, TaskSnapshot(job, 1, ALL, tuple(row("counts", k, k) for k in keys)))
    # version 2: every third key updated, every fifth deleted
    ctx.write(model, TaskSnapshot(job, 2, ALL, tuple(
        [row("counts", k, k * 10) for k in keys if k % 3 == 0]
        + [row("counts", k, None) for k in keys if k % 5 == 0 and k % 3 != 0])))
    # version 3 writes nothing; version 4 brings some deleted keys back and deletes others
    ctx.write(model, TaskSnapshot(job, 3, ALL))
    ctx.write(model, TaskSnapshot(job, 4, ALL, tuple(
        [row("counts", k, -k) for k in keys if k % 10 == 5]
        + [row("counts", k, None) for k in keys if k % 7 == 1])))
    for version in range(0, 6):
        expected = model.read("counts", ALL, version)
        assert ctx.read(job, "counts", version) == expected, version
    assert ctx.read(job, "counts", 0) == {}
    assert loads(ctx.read(job, "counts", 4)[dumps(3)]) == 30
    # and the same from a freshly opened store (another process restarting)
    ctx.reopen()
    for version in range(0, 6):
        assert ctx.read(job, "counts", version) == model.read("counts", ALL, version)


def test_deletion_hides_the_key_at_and_after_its_version_but_not_before(ctx):
    job = ctx.new_job()
    ctx.write(None, TaskSnapshot(job, 1, ALL, (row("t", "a", 1), row("t", "b", 1))))
    ctx.write(None, TaskSnapshot(job, 3, ALL, (row("t", "a", None),)))
    ctx.write(None, TaskSnapshot(job, 5, ALL, (row("t", "a", 5),)))
    a, b = dumps("a"), dumps("b")
    assert ctx.read(job, "t", 1) == {a: dumps(1), b: dumps(1)}
    assert ctx.read(job, "t", 2) == {a: dumps(1), b: dumps(1)}
    assert ctx.read(job, "t", 3) == {b: dumps(1)}
    assert ctx.read(job, "t", 4) == {b: dumps(1)}
    assert ctx.read(job, "t", 5) == {a: dumps(5), b: dumps(1)}
    assert ctx.read(job, "t", 10**9) == {a: dumps(5), b: dumps(1)}


def test_deleting_a_key_that_never_existed_is_harmless(ctx):
    job = ctx.new_job()
    ctx.write(None, TaskSnapshot(job, 1, ALL, (row("t", "ghost", None), row("t", "x", 1))))
    assert ctx.read(job, "t", 1) == {dumps("x"): dumps(1)}


def test_reading_a_sub_range_of_key_groups_returns_only_those_keys(ctx):
    job = ctx.new_job()
    model = Model()
    rows = tuple(row("t", f"key-{i}", i) for i in range(600))
    ctx.write(model, TaskSnapshot(job, 1, ALL, rows))
    ctx.write(model, TaskSnapshot(job, 2, ALL, rows[::4]))
    for key_groups in [range(0, 1), range(0, 64), range(64, 128), range(10, 20), range(127, 128),
                       range(37, 38), range(5, 5), ALL]:
        for version in (1, 2):
            expected = model.read("t", key_groups, version)
            assert ctx.read(job, "t", version, key_groups) == expected, (key_groups, version)
            for key in expected:
                assert key_group_of(loads(key), MP) in key_groups
    assert ctx.read(job, "t", 2, range(5, 5)) == {}
    # the sub-ranges partition the whole
    halves = {**ctx.read(job, "t", 2, range(0, 64)), **ctx.read(job, "t", 2, range(64, 128))}
    assert halves == ctx.read(job, "t", 2)


def test_two_tables_do_not_mix(ctx):
    job = ctx.new_job()
    model = Model()
    ctx.write(model, TaskSnapshot(job, 1, ALL, tuple(
        [row("left", k, f"L{k}") for k in range(50)]
        + [row("right", k, f"R{k}") for k in range(25, 75)]
        + [row("left/with slash", k, "S") for k in range(3)]
        + [row("naïve tablé", k, "U") for k in range(3)])))
    ctx.write(model, TaskSnapshot(job, 2, ALL, (row("left", 30, None), row("right", 31, "R!"))))
    for table in ("left", "right", "left/with slash", "naïve tablé", "left/with", "lef"):
        for version in (1, 2):
            assert ctx.read(job, table, version) == model.read(table, ALL, version)
    assert dumps(30) in ctx.read(job, "right", 2)  # deleted in "left" only
    assert loads(ctx.read(job, "left", 2)[dumps(31)]) == "L31"  # changed in "right" only
    assert ctx.read(job, "no such table", 2) == {}


def test_two_jobs_do_not_mix(ctx):
    first, second = ctx.new_job(), ctx.new_job()
    one, two = Model(), Model()
    ctx.write(one, TaskSnapshot(first, 1, ALL, tuple(row("t", k, ("first", k)) for k in range(40)),
                                (record(100),)))
    ctx.write(two, TaskSnapshot(second, 1, ALL, tuple(row("t", k, ("second", k))
                                                      for k in range(20, 60)), (record(200),)))
    ctx.write(two, TaskSnapshot(second, 2, ALL, (row("t", 25, None),), (record(201),)))
    assert ctx.read(first, "t", 2) == one.read("t", ALL, 2)
    assert ctx.read(second, "t", 2) == two.read("t", ALL, 2)
    assert ctx.store.read_record(first, "source", "numbers", 0, 2) == (1, dumps(100))
    assert ctx.store.read_record(second, "source", "numbers", 0, 2) == (2, dumps(201))
    ctx.store.commit(JobMeta(first, "fp1", 1, (1,)))
    ctx.store.commit(JobMeta(second, "fp2", 2, (1, 2)))
    assert ctx.store.read_meta(first).fingerprint == "fp1"
    assert ctx.store.read_meta(second).fingerprint == "fp2"
    # discarding, pruning and deleting one job leaves the other alone
    ctx.store.discard_after(second, 0)
    ctx.store.prune(second, [2], 2)
    assert ctx.read(first, "t", 2) == one.read("t", ALL, 2)
    ctx.store.delete_job(second)
    assert ctx.read(first, "t", 2) == one.read("t", ALL, 2)
    assert ctx.store.read_record(first, "source", "numbers", 0, 2) == (1, dumps(100))
    assert ctx.store.read_meta(first).fingerprint == "fp1"
    assert ctx.read(second, "t", 2) == {}


def test_rewriting_a_version_replaces_its_rows(ctx):
    """Writes are upserts: the same task snapshot written twice (a retried write) is stored once."""
    job = ctx.new_job()
    model = Model()
    ctx.write(model, TaskSnapshot(job, 1, ALL, (row("t", "a", 1), row("t", "b", 1))))
    ctx.write(model, TaskSnapshot(job, 2, ALL, (row("t", "a", 2),), (record(2),)))
    ctx.write(model, TaskSnapshot(job, 2, ALL, (row("t", "a", 22), row("t", "b", None)),
                                  (record(22),)))
    assert ctx.read(job, "t", 2) == model.read("t", ALL, 2) == {dumps("a"): dumps(22)}
    assert ctx.read(job, "t", 1) == model.read("t", ALL, 1)
    assert ctx.store.read_record(job, "source", "numbers", 0, 2) == (2, dumps(22))
    assert sorted(stored_cells(ctx, job)[("t", key_group_of("a", MP), dumps("a"))]) == [1, 2]


# --- task records --------------------------------------------------------------------------------


def test_read_record_returns_the_latest_at_or_before_a_version(ctx):
    job = ctx.new_job()
    model = Model()
    ctx.write(model, TaskSnapshot(job, 2, ALL, (), (record(20, index=0), record(21, index=1))))
    ctx.write(model, TaskSnapshot(job, 4, ALL, (), (record(40, index=0),)))
    ctx.write(model, TaskSnapshot(job, 5, ALL, (), (record(50, index=10),
                                                    record(51, name="numbers2", index=0))))
    ctx.write(model, TaskSnapshot(job, 7, ALL, (), (record(70, index=1),)))
    for name in ("numbers", "numbers2", "number", "other"):
        for index in (0, 1, 10, 2):
            for version in range(0, 9):
                expected = model.read_record("source", name, index, version)
                assert ctx.store.read_record(job, "source", name, index, version) == expected
    assert ctx.store.read_record(job, "source", "numbers", 0, 1) is None
    assert ctx.store.read_record(job, "source", "numbers", 0, 3) == (2, dumps(20))
    assert ctx.store.read_record(job, "source", "numbers", 1, 6) == (2, dumps(21))
    assert ctx.store.read_record(job, "sink", "numbers", 0, 9) is None
    assert ctx.store.read_record(ctx.new_job(), "source", "numbers", 0, 9) is None


# --- meta and jobs -------------------------------------------------------------------------------


def test_meta_round_trip_replace_jobs_and_delete(ctx):
    job = ctx.new_job()
    assert ctx.store.read_meta(job) is None
    assert job not in ctx.store.jobs()
    # rows and records alone do not make a committed job
    ctx.write(None, TaskSnapshot(job, 1, ALL, (row("t", "a", 1),), (record(1),)))
    assert ctx.store.read_meta(job) is None
    assert job not in ctx.store.jobs()
    first = JobMeta(job, "fingerprint-1", 1, (1,), {"count": 4, "source:numbers": 1})
    ctx.store.commit(first)
    assert ctx.store.read_meta(job) == first
    assert job in ctx.store.jobs()
    second = JobMeta(job, "fingerprint-1", 3, (2, 3), {"count": 8, "source:numbers": 1})
    ctx.store.commit(second)
    got = ctx.store.read_meta(job)
    assert got == second
    assert got.retained == (2, 3) and isinstance(got.retained, tuple)
    assert got.parallelism == {"count": 8, "source:numbers": 1}
    ctx.reopen()
    assert ctx.store.read_meta(job) == second
    assert ctx.store.jobs().count(job) == 1
    ctx.store.delete_job(job)
    assert ctx.store.read_meta(job) is None
    assert job not in ctx.store.jobs()
    assert ctx.read(job, "t", 5) == {}
    assert ctx.store.read_record(job, "source", "numbers", 0, 5) is None
    assert total_size(ctx.store, job) == 0
    ctx.store.delete_job(job)  # deleting twice is harmless
    ctx.store.delete_job(ctx.new_job())  # so is deleting a job that never existed


def test_jobs_lists_every_committed_job(ctx):
    names = [ctx.new_job() for _ in range(3)]
    for i, job in enumerate(names):
        ctx.store.commit(JobMeta(job, "fp", i, (i,)))
    uncommitted = ctx.new_job()
    ctx.write(None, TaskSnapshot(uncommitted, 1, ALL, (row("t", 1, 1),)))
    listed = ctx.store.jobs()
    assert set(names) <= set(listed)
    assert uncommitted not in listed
    ctx.store.delete_job(names[1])
    assert names[1] not in ctx.store.jobs()
    assert {names[0], names[2]} <= set(ctx.store.jobs())


def test_commit_replaces_the_meta_as_a_whole_under_concurrent_reads(ctx):
    job = ctx.new_job()
    seen: list[JobMeta | None] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def reader() -> None:
        try:
            while not done.is_set():
                seen.append(ctx.store.read_meta(job))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for window in range(1, 41):
            retained = tuple(range(max(1, window - 2), window + 1))
            ctx.store.commit(JobMeta(job, f"fp-{window}", window, retained, {"op": window}))
    finally:
        done.set()
        thread.join(TIMEOUT)
    assert not errors, errors
    for meta in seen:
        if meta is not None:
            window = meta.last_completed
            assert meta.fingerprint == f"fp-{window}"
            assert meta.retained[-1] == window
            assert meta.parallelism == {"op": window}
    assert ctx.store.read_meta(job).last_completed == 40


# --- discard_after -------------------------------------------------------------------------------


def test_discard_after_drops_later_rows_and_records_and_allows_rewriting(ctx):
    job = ctx.new_job()
    model = Model()
    for version in range(1, 6):
        ctx.write(model, TaskSnapshot(job, version, ALL, tuple(
            [row("t", k, (version, k)) for k in range(version * 5)]
            + [row("t", k, None) for k in range(100, 103) if version == 4]
            + [row("other", k, version) for k in range(3)]),
            (record(version * 10), record(version, index=1))))
        if version == 2:
            ctx.write(model, TaskSnapshot(job, 2, ALL, tuple(row("t", k, "x") for k in
                                                             range(100, 103))))
    ctx.store.discard_after(job, 3)
    model.discard_after(3)
    for table in ("t", "other"):
        for version in range(0, 7):
            assert ctx.read(job, table, version) == model.read(table, ALL, version)
    assert ctx.read(job, "t", 5) == ctx.read(job, "t", 3)
    assert all(max(versions) <= 3 for versions in stored_cells(ctx, job).values())
    assert ctx.store.read_record(job, "source", "numbers", 0, 5) == (3, dumps(30))
    assert ctx.store.read_record(job, "source", "numbers", 1, 9) == (3, dumps(3))
    # writing version 4 again works, and discarding is repeatable
    ctx.write(model, TaskSnapshot(job, 4, ALL, (row("t", 0, "again"), row("t", 1, None)),
                                  (record("again"),)))
    assert ctx.read(job, "t", 4) == model.read("t", ALL, 4)
    assert ctx.store.read_record(job, "source", "numbers", 0, 9) == (4, dumps("again"))
    ctx.store.discard_after(job, 3)
    model.discard_after(3)
    assert ctx.read(job, "t", 4) == model.read("t", ALL, 4) == model.read("t", ALL, 3)
    ctx.store.discard_after(job, 0)
    model.discard_after(0)
    assert ctx.read(job, "t", 9) == {}
    assert ctx.store.read_record(job, "source", "numbers", 0, 9) is None
    ctx.store.discard_after(ctx.new_job(), 0)  # a job without state


def test_discard_after_a_crash_following_retention_and_prune(ctx):
    job = ctx.new_job()
    model = Model()
    committer = Committer(ctx.store, job, keep=2)
    for version in range(1, 8):
        ctx.write(model, TaskSnapshot(job, version, ALL, tuple(
            row("t", k, (version, k)) for k in range(20) if (k + version) % 3),
            (record(version),)))
        if version <= 5:
            committer.commit(version)
    ctx.reopen()  # the restart after the crash
    meta = ctx.store.read_meta(job)
    assert meta.last_completed == 5 and meta.retained == (4, 5)
    ctx.store.discard_after(job, 5)
    model.discard_after(5)
    for version in (4, 5, 6, 7):
        assert ctx.read(job, "t", version) == model.read("t", ALL, version)
    assert ctx.store.read_record(job, "source", "numbers", 0, 7) == (5, dumps(5))
    # the resumed run rewrites 6 and 7 and commits them
    committer = Committer(ctx.store, job, keep=2, retained=meta.retained)
    for version in (6, 7):
        ctx.write(model, TaskSnapshot(job, version, ALL, (row("t", version, "resumed"),)))
        committer.commit(version)
    for version in committer.retained:
        assert ctx.read(job, "t", version) == model.read("t", ALL, version)


# --- retention and prune -------------------------------------------------------------------------


@pytest.mark.parametrize("keep", [1, 2, 3])
def test_every_retained_version_restores_exactly_after_prune(ctx, keep):
    job = ctx.new_job()
    model = Model()
    committer = Committer(ctx.store, job, keep)
    for version in range(1, 13):
        rows = [row("t", k, (version, k)) for k in range(40) if k % (version % 4 + 1) == 0]
        rows += [row("t", k, None) for k in range(40) if k % 7 == version % 7]
        rows += [row("u", version % 5, version)]
        ctx.write(model, TaskSnapshot(job, version, ALL, tuple(rows),
                                      (record(version),) if version % 3 else ()))
        committer.commit(version)
        for retained in committer.retained:
            for table in ("t", "u"):
                assert ctx.read(job, table, retained) == model.read(table, ALL, retained), (
                    version, retained, table)
            assert (ctx.store.read_record(job, "source", "numbers", 0, retained)
                    == model.read_record("source", "numbers", 0, retained))
    ctx.reopen()
    for retained in committer.retained:
        assert ctx.read(job, "t", retained) == model.read("t", ALL, retained)


@pytest.mark.parametrize("keep", [1, 2])
def test_storage_stays_bounded_when_the_same_keys_are_rewritten(ctx, keep):
    job = ctx.new_job()
    keys = range(50)
    committer = Committer(ctx.store, job, keep)
    totals = {}
    for version in range(1, 31):
        ctx.write(None, TaskSnapshot(job, version, ALL,
                                     tuple(row("t", k, f"{version:04d}-{k:04d}") for k in keys),
                                     (record(f"{version:04d}"),)))
        committer.commit(version)
        totals[version] = total_size(ctx.store, job)
    cells = stored_cells(ctx, job)
    assert len(cells) == len(keys)
    assert max(len(versions) for versions in cells.values()) <= keep + 1
    # equal-sized rewrites: once retention is full, the stored size no longer grows
    assert totals[30] <= totals[keep + 2], totals
    assert totals[30] < 3 * totals[1] * (keep + 1)
    for retained in committer.retained:
        got = ctx.read(job, "t", retained)
        assert got == {dumps(k): dumps(f"{retained:04d}-{k:04d}") for k in keys}


# --- hypothesis: random histories ----------------------------------------------------------------

CHANGES = st.dictionaries(st.integers(0, 11), st.one_of(st.none(), st.integers(0, 3)), max_size=8)


@settings(max_examples=20, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(history=st.lists(st.tuples(CHANGES, st.booleans(), st.booleans()), min_size=1,
                        max_size=9),
       keep=st.integers(1, 3), crash=st.one_of(st.none(), CHANGES))
def test_random_histories_restore_every_retained_version(ctx, history, keep, crash):
    """Each step writes one version (changes: key -> value, None deletes; with or without a source
    record) and maybe commits it; the last step always commits. A crash then writes an uncommitted
    version that the restart discards."""
    job = ctx.new_job()
    model = Model()
    committer = Committer(ctx.store, job, keep)
    last = len(history)
    for version, (changes, with_record, commit) in enumerate(history, 1):
        ctx.write(model, TaskSnapshot(
            job, version, ALL, tuple(row("t", k, v) for k, v in sorted(changes.items())),
            (record(version),) if with_record else ()))
        if commit or version == last:
            committer.commit(version)
    if crash is not None:
        ctx.write(model, TaskSnapshot(job, last + 1, ALL,
                                      tuple(row("t", k, v) for k, v in sorted(crash.items())),
                                      (record(last + 1),)))
        ctx.store.discard_after(job, last)
        model.discard_after(last)
    for version in committer.retained:
        assert ctx.read(job, "t", version) == model.read("t", ALL, version), version
        assert (ctx.store.read_record(job, "source", "numbers", 0, version)
                == model.read_record("source", "numbers", 0, version))
    assert ctx.read(job, "t", last + 1) == model.read("t", ALL, last)
    assert ctx.store.read_meta(job).retained == committer.retained
    ctx.store.delete_job(job)


# --- incremental cost ----------------------------------------------------------------------------


def test_writing_one_percent_changed_keys_touches_only_those_rows(ctx):
    job = ctx.new_job()
    keys = range(10_000)
    value = "v" * 40
    ctx.write(None, TaskSnapshot(job, 1, ALL, tuple(row("t", k, (k, value)) for k in keys)))
    ctx.store.commit(JobMeta(job, "fp", 1, (1,)))
    before = stored_cells(ctx, job)
    size_before = total_size(ctx.store, job)
    changed = set(range(0, 10_000, 100))
    changed_rows = tuple(row("t", k, (k, value.upper())) for k in sorted(changed))
    ctx.write(None, TaskSnapshot(job, 2, ALL, changed_rows))
    after = stored_cells(ctx, job)
    size_after = total_size(ctx.store, job)
    assert len(before) == len(after) == len(keys)
    for k in keys:
        ident = ("t", key_group_of(k, MP), dumps(k))
        if k in changed:
            assert sorted(after[ident]) == [1, 2]
            assert after[ident][1] == before[ident][1]
        else:
            assert after[ident] == before[ident], k  # untouched, byte for byte
    # the stored size grew by about the 100 new rows, not by anything proportional to 10k keys
    new_bytes = sum(len(r.key) + len(r.value) for r in changed_rows)
    assert new_bytes <= size_after - size_before <= new_bytes + 32 * len(changed_rows)
    got = ctx.read(job, "t", 2)
    assert len(got) == len(keys)
    assert loads(got[dumps(100)]) == (100, value.upper())
    assert loads(got[dumps(101)]) == (101, value)


def test_postgresql_prune_of_a_first_snapshot_on_a_new_database_is_fast(postgres_url):
    """The first commit of a job on a new database prunes right away (retention 2: horizon 1).
    Its cost must follow the change, whatever the planner's statistics: on tables PostgreSQL has
    not analyzed yet, pruning 500 keys must not take longer than writing them many times over."""
    schema = f"fresh_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(postgres_url)
    try:
        with admin.begin() as conn:
            conn.exec_driver_sql(f"CREATE SCHEMA {schema}")
        backend = JdbcStateBackend(url=with_pg_options(postgres_url, 5_000, schema))
        store = backend.open_store()
        try:
            rows = tuple(row("t", k, ("v" * 40, k)) for k in range(500))
            started = time.monotonic()
            store.write(TaskSnapshot("job", 1, ALL, rows))
            written = time.monotonic() - started
            started = time.monotonic()
            Committer(store, "job", keep=2).commit(1)  # prune([1], 1), as the coordinator does
            pruned = time.monotonic() - started
            assert pruned < max(2.0, 20 * written), (pruned, written)
            assert len(dict(store.read_rows("job", "t", ALL, 1))) == 500
        finally:
            store.close()
    finally:
        with admin.begin() as conn:
            conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        admin.dispose()


# --- corruption ----------------------------------------------------------------------------------


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


@pytest.mark.parametrize("damage", DAMAGE, ids=list(DAMAGE))
def test_a_damaged_row_is_reported_with_backend_table_and_version(ctx, damage):
    job = ctx.new_job()
    victim = row("precious_table", "victim", {"big": "x" * 50})
    ctx.write(None, TaskSnapshot(job, 1, ALL, (victim, row("precious_table", "fine", 1))))
    ctx.write(None, TaskSnapshot(job, 2, ALL, (row("precious_table", "fine", 2),)))
    corrupt_row(ctx, job, victim, 1, DAMAGE[damage])
    for version in (1, 2):
        with pytest.raises(SnapshotCorruptedError) as error:
            ctx.read(job, "precious_table", version)
        check_corrupted(error, ctx.store, "precious_table", "version=1")
    # reads that leave out the damaged row's key group still work
    ctx.read(job, "precious_table", 2, range(0, victim.key_group))
    ctx.read(job, "precious_table", 2, range(victim.key_group + 1, MP))


@pytest.mark.parametrize("damage", ["flip-flag-bit", "flip-last-byte", "truncated-to-3",
                                    "emptied"])
def test_a_damaged_deletion_marker_is_reported_or_still_a_deletion(ctx, damage):
    """A deletion is stored as a bare header. Damage to it must be reported like any other; at the
    least it must never turn the deletion into a value."""
    job = ctx.new_job()
    victim = row("t", "gone", None)
    ctx.write(None, TaskSnapshot(job, 1, ALL, (row("t", "gone", 1), row("t", "kept", 1))))
    ctx.write(None, TaskSnapshot(job, 2, ALL, (victim,)))
    corrupt_row(ctx, job, victim, 2, DAMAGE[damage])
    kind, result = outcome(lambda: ctx.read(job, "t", 2))
    if kind == "corrupted":
        assert ctx.store.location() in result and "version=2" in result, result
    else:
        assert (kind, result) == ("read", {dumps("kept"): dumps(1)}), (
            f"the deletion of key 'gone' at version 2, damaged ({damage}), was read as "
            f"{kind}: {result!r}")
    assert ctx.read(job, "t", 1) == {dumps("gone"): dumps(1), dumps("kept"): dumps(1)}


@pytest.mark.parametrize("damage", ["flip-last-byte", "flip-flag-byte", "truncated-to-3",
                                    "emptied"])
def test_damaged_meta_is_reported_naming_the_meta(ctx, damage):
    job = ctx.new_job()
    meta = JobMeta(job, "fp", 3, (2, 3), {"count": 2})
    ctx.store.commit(meta)
    corrupt_meta(ctx, job, meta, DAMAGE[damage])
    with pytest.raises(SnapshotCorruptedError) as error:
        ctx.store.read_meta(job)
    check_corrupted(error, ctx.store, "meta", job)


@pytest.mark.parametrize("damage", ["flip-last-byte", "truncated-by-1", "truncated-to-3"])
def test_a_damaged_record_is_reported(ctx, damage):
    job = ctx.new_job()
    rec = record({"offset": 1234})
    ctx.write(None, TaskSnapshot(job, 1, ALL, (), (record(0),)))
    ctx.write(None, TaskSnapshot(job, 2, ALL, (), (rec,)))
    corrupt_record(ctx, job, rec, 2, DAMAGE[damage])
    with pytest.raises(SnapshotCorruptedError) as error:
        ctx.store.read_record(job, "source", "numbers", 0, 5)
    check_corrupted(error, ctx.store, "version=2", "numbers")
    assert ctx.store.read_record(job, "source", "numbers", 0, 1) == (1, dumps(0))


# RocksDB keeps a key's versions in one stored value (``version, length, framed value`` each);
# only the framed values carry a CRC-32. Damage anywhere in the stored bytes must still be reported,
# never read as a different (older, or missing) state.


@attrs.frozen
class RocksVictim:
    backend: RocksDBStateBackend
    job: str
    path: str  # the range database holding the victim
    key: bytes  # the victim's data key
    intact: bytes  # its stored value: the entries of versions 1 and 2


@pytest.fixture
def rocks(tmp_path) -> RocksVictim:
    """A RocksDB store holding one key at versions 1 ("one") and 2 ("two"), closed."""
    backend = RocksDBStateBackend(path=str(tmp_path / "rocks"))
    store = backend.open_store()
    job = "job"
    victim = row("t", "victim", "one")
    store.write(TaskSnapshot(job, 1, ALL, (victim,)))
    store.write(TaskSnapshot(job, 2, ALL, (row("t", "victim", "two"),)))
    (path,) = rocksdb_databases(rocksdb_table_dir(store, job, "t"))
    store.close()
    key = data_key(victim.key_group, victim.key)
    return RocksVictim(backend, job, path, key, dict(rocksdb_items(path))[key])


def damaged_rocksdb_reads(rocks: RocksVictim, damaged: bytes) -> list[tuple[str, object]]:
    """Store ``damaged`` as the victim's value; the outcomes of reading versions 1 and 2."""
    db = Rdict(rocks.path, options=Options(raw_mode=True))
    try:
        db[rocks.key] = damaged
    finally:
        db.close()
    store = rocks.backend.open_store()
    try:
        return [outcome(lambda v=v: dict(store.read_rows(rocks.job, "t", ALL, v)))
                for v in (1, 2)]
    finally:
        store.close()


def rocksdb_findings(outcomes: list) -> list:
    """The reads that neither raised SnapshotCorruptedError nor returned the intact state."""
    expected = [("read", {dumps("victim"): dumps(word)}) for word in ("one", "two")]
    return [(version, got) for version, got, want in zip((1, 2), outcomes, expected, strict=True)
            if got[0] != "corrupted" and got != want]


ENTRY_ONE = ENTRY.size + len(encode_value(dumps("one")))  # stored size of the version-1 entry


def test_rocksdb_damage_fixture_reads_intact(rocks):
    assert len(parse_entries(rocks.intact)) == 2
    assert rocksdb_findings(damaged_rocksdb_reads(rocks, rocks.intact)) == []


@pytest.mark.parametrize("keep", [0, 5, 11, ENTRY_ONE, ENTRY_ONE + 5, ENTRY_ONE + 14, -1],
                         ids=["to-0", "to-5", "to-11", "at-entry-boundary", "in-2nd-header",
                              "in-2nd-frame", "by-1"])
def test_rocksdb_truncated_stored_value_is_reported(rocks, keep):
    damaged = rocks.intact[:keep]
    findings = rocksdb_findings(damaged_rocksdb_reads(rocks, damaged))
    assert not findings, (f"stored value truncated to {len(damaged)} of {len(rocks.intact)} "
                          f"bytes; (version, outcome) of reads not reported as corrupted: "
                          f"{findings}")


def test_rocksdb_flipped_bit_anywhere_in_the_stored_value_is_reported(rocks):
    """Every byte of both entry headers, and the first and last byte of both frames."""
    intact = rocks.intact
    silent = []
    positions = sorted({*range(ENTRY.size), ENTRY.size, ENTRY_ONE - 1,
                        *range(ENTRY_ONE, ENTRY_ONE + ENTRY.size + 1), len(intact) - 1})
    for position in positions:
        damaged = intact[:position] + bytes([intact[position] ^ 0x01]) + intact[position + 1:]
        silent += [(position, *finding)
                   for finding in rocksdb_findings(damaged_rocksdb_reads(rocks, damaged))]
    assert not silent, (f"single-bit flips in a stored RocksDB value of {len(intact)} bytes went "
                        f"undetected, (position, version, outcome): {silent}")


# --- unpicklable state ---------------------------------------------------------------------------


def test_unpicklable_values_cannot_be_serialised():
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        dumps(lambda: 1)
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        dumps(threading.Lock())


def test_unpicklable_state_fails_the_same_way_on_every_backend(backend_overrides, tmp_path):
    from gyreflow.api import Environment, SizeTumblingWindow, UserFunctionError

    overrides = {**backend_overrides, "environment.type": "local", "environment.parallelism": 1,
                 "progress.enabled": False}
    env = Environment.from_config(None, overrides)
    job = f"unpicklable-{uuid.uuid4().hex}"
    pipeline = env.pipeline("unpicklable")
    pipeline.task(lambda ctx: ctx.source(list(range(8)), SizeTumblingWindow(4), parallelism=1)
                  .map(lambda x: (x % 2, lambda: x)).key_by(lambda r: r[0])
                  .reduce(lambda a, b: b).with_name("keep").collect(), name=job)
    with pytest.raises(UserFunctionError) as error:
        pipeline.execute()
    assert error.value.operator == "keep"
    assert error.value.window == 1
    message = re.sub(r"0x[0-9a-f]+", "0x?", str(error.value))
    assert "operator 'keep' failed in window 1" in message
    assert "Can't pickle" in message
    assert "lambda" in message
    store = backend_from_config(Config.load(None, backend_overrides, environ={})).open_store()
    try:
        assert store.read_meta(job) is None  # nothing was committed
        store.delete_job(job)
    finally:
        store.close()


# --- keyed state through a store -----------------------------------------------------------------


def snapshot_of(job: str, version: int, keyed) -> TaskSnapshot:
    """What a task writes: per table, the changed keys' values and the removed keys."""
    rows = []
    for table in keyed.tables.values():
        changed, removed = table.take_changes()
        rows += [row(table.name, k, v) for k, v in changed.items()]
        rows += [row(table.name, k, None) for k in removed]
    return TaskSnapshot(job, version, keyed.key_groups, tuple(rows))


def restore(ctx: Ctx, job: str, table: str, version: int) -> dict:
    return {loads(k): loads(v) for k, v in ctx.store.read_rows(job, table, ALL, version)}


def test_keyed_state_snapshots_restore_the_working_state(ctx):
    job = ctx.new_job()
    keyed = ctx.backend.create_keyed_store()
    counts, lists, maps = keyed.value_state("counts"), keyed.list_state("seen"), keyed.map_state("m")
    expected = {}
    for version in range(1, 5):
        for word in ["a", "b", "c", ("t", version), "naïve", 10**30][: version + 2]:
            counts.put(word, counts.get(word, 0) + 1)
            lists.append(word, version)
            maps.put(word, version, str(version))
        if version == 3:
            counts.delete("a")
            lists.clear("b")
            maps.remove("c", 1)
        ctx.write(None, snapshot_of(job, version, keyed))
        expected[version] = {name: {k: (list(v) if isinstance(v, list) else
                                        dict(v) if isinstance(v, dict) else v)
                                    for k, v in keyed.tables[name].data.items()}
                             for name in ("counts", "seen", "m")}
    for version, tables in expected.items():
        for name, data in tables.items():
            assert restore(ctx, job, name, version) == data, (version, name)
    # nothing changed: the next snapshot writes no rows
    assert snapshot_of(job, 5, keyed).rows == ()


# --- rescaled layouts ----------------------------------------------------------------------------


def test_rescaled_layouts_merge_by_latest_version_and_old_ranges_can_be_dropped(ctx):
    job = ctx.new_job()
    model = Model()
    old_layout = [range(0, 64), range(64, 128)]
    keys = [f"k{i}" for i in range(300)]

    def in_range(kgs: range, version: int, suffix: str) -> tuple[StateRow, ...]:
        return tuple(row("t", k, (version, k)) for k in keys
                     if key_group_of(k, MP) in kgs and k.endswith(suffix))

    for version, suffix in ((1, ""), (2, "7")):
        for kgs in old_layout:
            ctx.write(model, TaskSnapshot(job, version, kgs, in_range(kgs, version, suffix)))
    for kgs in old_layout:  # and each old task deletes a key of its own at version 2
        gone = next(k for k in keys if key_group_of(k, MP) in kgs and not k.endswith("7"))
        ctx.write(model, TaskSnapshot(job, 2, kgs, (row("t", gone, None),)))
    # the rescaled run (one task owning every key group) changes some keys at version 3 ...
    ctx.write(model, TaskSnapshot(job, 3, ALL, in_range(ALL, 3, "1")
                                  + (row("t", "k5", None),)))
    for version in (1, 2, 3):
        assert ctx.read(job, "t", version) == model.read("t", ALL, version)
        for kgs in (range(0, 64), range(64, 128), range(50, 80)):
            assert ctx.read(job, "t", version, kgs) == model.read("t", kgs, version)
    # ... and at version 4 writes a full copy in the new layout; then the old ranges go
    state = model.read("t", ALL, 3)
    ctx.write(model, TaskSnapshot(job, 4, ALL, tuple(
        StateRow("t", key_group_of(loads(k), MP), k, v) for k, v in state.items())))
    ctx.store.drop_other_ranges(job, "t", {ALL})
    assert ctx.read(job, "t", 4) == model.read("t", ALL, 4) == state
    ctx.write(model, TaskSnapshot(job, 5, ALL, (row("t", "k8", "new"), row("t", "k9", None))))
    assert ctx.read(job, "t", 5) == model.read("t", ALL, 5)
    ctx.reopen()
    assert ctx.read(job, "t", 5) == model.read("t", ALL, 5)
    if ctx.kind == "rocksdb":
        table_dir = rocksdb_table_dir(ctx.store, job, "t")
        assert sorted(os.listdir(table_dir)) == ["kg-0-128"]
        assert [name for name in ctx.store.sizes(job) if name != "(records)"] == ["t [0-127]"]


def test_discard_after_undoes_a_rescaled_run_across_layouts(ctx):
    job = ctx.new_job()
    model = Model()
    keys = range(200)
    for kgs in (range(0, 64), range(64, 128)):
        ctx.write(model, TaskSnapshot(job, 1, kgs, tuple(
            row("t", k, ("old", k)) for k in keys if key_group_of(k, MP) in kgs)))
    # the rescaled run writes a full copy at version 2 and changes at 3, then crashes uncommitted
    ctx.write(model, TaskSnapshot(job, 2, ALL, tuple(row("t", k, ("new", k)) for k in keys)))
    ctx.write(model, TaskSnapshot(job, 3, ALL, (row("t", 1, None), row("t", 2, "x"))))
    ctx.reopen()
    ctx.store.discard_after(job, 1)
    model.discard_after(1)
    for version in (1, 2, 3):
        assert ctx.read(job, "t", version) == model.read("t", ALL, version)
    assert all(sorted(v) == [1] for v in stored_cells(ctx, job).values())


def test_rocksdb_stores_each_writing_range_separately(tmp_path):
    store = RocksDBStateBackend(path=str(tmp_path / "rocks")).open_store()
    try:
        rows_low = tuple(row("t", k, 1) for k in range(100) if key_group_of(k, MP) < 64)
        rows_high = tuple(row("t", k, 1) for k in range(100) if key_group_of(k, MP) >= 64)
        store.write(TaskSnapshot("job", 1, range(0, 64), rows_low))
        store.write(TaskSnapshot("job", 1, range(64, 128), rows_high))
        store.write(TaskSnapshot("job", 2, ALL, rows_low[:3]))
        assert sorted(os.listdir(rocksdb_table_dir(store, "job", "t"))) == [
            "kg-0-128", "kg-0-64", "kg-64-128"]
        assert len(dict(store.read_rows("job", "t", ALL, 2))) == len(rows_low) + len(rows_high)
        store.drop_other_ranges("job", "t", {range(0, 64), range(64, 128)})
        assert sorted(os.listdir(rocksdb_table_dir(store, "job", "t"))) == ["kg-0-64", "kg-64-128"]
        store.drop_other_ranges("job", "t", {ALL})
        assert not os.listdir(rocksdb_table_dir(store, "job", "t"))
        assert dict(store.read_rows("job", "t", ALL, 2)) == {}
    finally:
        store.close()


# --- the snapshot writer process -----------------------------------------------------------------


def within(seconds: float, fn: Callable[[], object], what: str):
    """Run ``fn`` in a thread; fail (instead of hanging the suite) if it takes longer."""
    result: list = []
    thread = threading.Thread(target=lambda: result.append(fn()), daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"{what} did not finish within {seconds} s")
    return result[0] if result else None


def close_writer(writer: ProcessSnapshotWriter) -> None:
    try:
        within(TIMEOUT, writer.close, "closing the snapshot writer")
    finally:
        if writer._process is not None and writer._process.poll() is None:
            writer._process.kill()


@pytest.fixture(params=["rocksdb", "sqlite", "postgresql"])
def child_backend(request, tmp_path) -> StateBackend:
    if request.param == "rocksdb":
        return RocksDBStateBackend(path=str(tmp_path / "rocks"))
    if request.param == "sqlite":
        return JdbcStateBackend(url=default_sqlite_url(str(tmp_path / "sqlite")))
    return JdbcStateBackend(url=request.getfixturevalue("postgres_url"))


def test_process_writer_writes_and_commits_in_order(child_backend):
    job = f"child-{uuid.uuid4().hex}"
    model = Model()
    events: list[str] = []
    errors: list[BaseException] = []
    finished = threading.Event()
    closed_parent: list[bool] = []

    def on_error(exc: BaseException) -> None:
        errors.append(exc)
        finished.set()

    writer = ProcessSnapshotWriter(child_backend, on_error,
                                   before_start=lambda: closed_parent.append(True))
    try:
        retained: tuple[int, ...] = ()
        for version in range(1, 6):
            snapshot = TaskSnapshot(job, version, ALL, tuple(
                row("t", k, (version, k)) for k in range(50) if k % version == 0)
                + ((row("t", 1, None),) if version == 3 else ()), (record(version),))
            model.apply(snapshot)
            writer.write(snapshot, lambda v=version: events.append(f"write {v}"))
            writer.write(None, lambda v=version: events.append(f"barrier {v}"))
            old_horizon = retained[0] if retained else 0
            retained = (*retained, version)[-2:]
            writer.commit(JobMeta(job, "fp", version, retained, {"t": 1}),
                          lambda v=version: events.append(f"commit {v}"))
            if retained[0] > old_horizon:
                writer.prune(job, [retained[0]], retained[0])
        writer.commit(JobMeta(job, "fp", 5, retained, {"t": 1}), finished.set)
        assert finished.wait(TIMEOUT), f"the writer process did not answer; events: {events}"
        assert not errors, errors
    finally:
        close_writer(writer)
    assert closed_parent == [True]
    assert events == [f"{op} {v}" for v in range(1, 6) for op in ("write", "barrier", "commit")]
    store = child_backend.open_store()  # a fresh store in the parent reads what the child wrote
    try:
        assert store.read_meta(job) == JobMeta(job, "fp", 5, (4, 5), {"t": 1})
        for version in retained:
            assert dict(store.read_rows(job, "t", ALL, version)) == model.read("t", ALL, version)
            assert store.read_record(job, "source", "numbers", 0, version) == (version,
                                                                               dumps(version))
        store.delete_job(job)
    finally:
        store.close()


def expect_child_error(backend: StateBackend, *parts: str) -> str:
    errors: list[BaseException] = []
    reported = threading.Event()
    done: list[str] = []

    def on_error(exc: BaseException) -> None:
        errors.append(exc)
        reported.set()

    writer = ProcessSnapshotWriter(backend, on_error)
    started = time.monotonic()
    try:
        writer.write(TaskSnapshot("job", 1, ALL, (row("t", 1, 1),)), lambda: done.append("write"))
        writer.commit(JobMeta("job", "fp", 1, (1,)), lambda: done.append("commit"))
        assert reported.wait(TIMEOUT), "the child's error never reached on_error"
    finally:
        close_writer(writer)
    assert time.monotonic() - started < TIMEOUT
    assert done == []
    assert len(errors) == 1
    message = str(errors[0])
    for part in parts:
        assert part in message, (part, message)
    # a failed writer ignores later requests instead of hanging them
    writer.write(None, lambda: done.append("late"))
    assert done == []
    return message


def test_process_writer_reports_an_unwritable_rocksdb_path(tmp_path):
    blocker = tmp_path / "a-regular-file"
    blocker.write_text("not a directory")
    path = str(blocker / "state")
    expect_child_error(RocksDBStateBackend(path=path), "BackendUnavailableError", path)


def test_process_writer_reports_an_unreachable_postgresql():
    url = "postgresql+psycopg://someone:hunter2secret@127.0.0.1:1/nowhere"
    message = expect_child_error(JdbcStateBackend(url=url), "BackendUnavailableError",
                                 "127.0.0.1:1")
    assert "hunter2secret" not in message


def test_process_writer_reports_a_failing_write_and_stops(tmp_path):
    backend = RocksDBStateBackend(path=str(tmp_path / "rocks"))
    events: list[str] = []
    errors: list[BaseException] = []
    reported = threading.Event()
    writer = ProcessSnapshotWriter(backend, lambda exc: (errors.append(exc), reported.set()))
    try:
        writer.write(TaskSnapshot("job", 1, ALL, (row("t", 1, 1),)), lambda: events.append("w1"))
        # a key group beyond what the layout can encode makes the child's write fail
        bad = TaskSnapshot("job", 2, range(0, 1 << 20), (StateRow("t", 1 << 17, b"k", b"v"),))
        writer.write(bad, lambda: events.append("w2"))
        writer.commit(JobMeta("job", "fp", 2, (2,)), lambda: events.append("c2"))
        assert reported.wait(TIMEOUT)
    finally:
        close_writer(writer)
    assert "write failed in rocksdb:" in str(errors[0]), errors
    assert events == ["w1"]


# --- unavailable backends ------------------------------------------------------------------------


def test_unreachable_postgresql_fails_fast_with_the_password_hidden():
    backend = JdbcStateBackend(url="postgresql+psycopg://u:hunter2secret@127.0.0.1:1/x")
    started = time.monotonic()
    with pytest.raises(BackendUnavailableError) as error:
        backend.open_store()
    assert time.monotonic() - started < 10
    message = str(error.value)
    assert "hunter2secret" not in message
    assert "127.0.0.1:1" in message and "***" in message
    assert "hunter2secret" not in backend.describe()


def test_unreachable_postgresql_with_the_short_password():
    with pytest.raises(BackendUnavailableError) as error:
        JdbcStateBackend(url="postgresql+psycopg://u:pw@127.0.0.1:1/x").open_store()
    assert "u:pw@" not in str(error.value)


def test_rocksdb_on_an_unwritable_path_is_unavailable(tmp_path):
    blocker = tmp_path / "a-regular-file"
    blocker.write_text("not a directory")
    path = str(blocker / "state")
    with pytest.raises(BackendUnavailableError) as error:
        RocksDBStateBackend(path=path).open_store()
    assert path in str(error.value)
    with pytest.raises(BackendUnavailableError):
        RocksDBStateBackend(path=str(blocker)).open_store()


def test_sqlite_on_an_unwritable_path_is_unavailable(tmp_path):
    blocker = tmp_path / "a-regular-file"
    blocker.write_text("not a directory")
    url = default_sqlite_url(str(blocker / "state"))
    with pytest.raises(BackendUnavailableError) as error:
        JdbcStateBackend(url=url).open_store()
    assert "a-regular-file" in str(error.value)


def test_a_fresh_job_under_a_deleted_name_keeps_every_version(ctx):
    """``delete_job`` forgets everything: a job started over under the same name (``--fresh``)
    behaves like a new one, even on the store instance that deleted it."""
    job = ctx.new_job()
    committer = Committer(ctx.store, job, keep=2)
    for version in range(1, 8):
        ctx.write(None, TaskSnapshot(job, version, ALL, (row("t", "k", version),)))
        committer.commit(version)
    ctx.store.delete_job(job)
    model = Model()
    ctx.write(model, TaskSnapshot(job, 1, ALL, (row("t", "k", "fresh-1"),)))
    ctx.write(model, TaskSnapshot(job, 2, ALL, (row("t", "k", "fresh-2"),)))
    for version in (1, 2):
        assert ctx.read(job, "t", version) == model.read("t", ALL, version), version


def test_backend_configs_are_picklable_and_open_stores_of_their_kind(backend_overrides):
    backend = backend_from_config(Config.load(None, backend_overrides, environ={}))
    clone = pickle.loads(pickle.dumps(backend))
    assert clone == backend
    store = clone.open_store()
    try:
        expected = {"memory": MemorySnapshotStore, "rocksdb": RocksDBSnapshotStore,
                    "sqlite": JdbcSnapshotStore, "postgresql": JdbcSnapshotStore}
        assert isinstance(store, expected[backend_kind(backend_overrides)])
        assert store.location()
    finally:
        store.close()
