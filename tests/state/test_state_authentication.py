"""Stored state is authenticated: values written without the job's key (a forged pickle, a value moved
to another key, version or job) are refused before anything is unpickled, on RocksDB, SQLite and
PostgreSQL; keys live in 0600 files beside file-based state or derive from ``state.secret``."""

from __future__ import annotations

import hashlib
import hmac
import os
import pickle
import shutil
import sqlite3
import stat
import struct

import pytest
import sqlalchemy as sa
from _postgres import POSTGRES_SECRET
from _recovery_data import word_count_oracle
from _stored_state import chunk_key, rocksdb_databases, rocksdb_table_dir
from rocksdict import Options, Rdict
from test_state_verification import LINES, WINDOW, assert_refused, crashed, parse, published, run

from gyreflow.state.backends import JdbcStateBackend, RocksDBStateBackend
from gyreflow.state.keys.keygroups import key_group_of
from gyreflow.state.shared.snapshot import (
    BackendUnavailableError,
    JobMeta,
    SnapshotCorruptedError,
    StateRow,
    TaskRecord,
    TaskSnapshot,
    dumps,
)
from gyreflow.state.stores.jdbc import COUNTS, META, RECORDS, STATE

ALL = range(128)
JOB = "job"
# The PostgreSQL cases share one database and clear each other's "auth-" jobs: one worker runs them.
pytestmark = pytest.mark.xdist_group("state-authentication")


class Planted:
    """Unpickling this creates a directory: proof that forged bytes were loaded."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (os.mkdir, (self.path,))


def forged_tag(*parts: bytes) -> bytes:
    """A tag made with a key that is not the job's (what someone without the key can do best)."""
    return hmac.new(b"not the job key" * 2, b"".join(parts), hashlib.sha256).digest()[:16]


def make_backend(kind: str, request, tmp_path):
    if kind == "rocksdb":
        return RocksDBStateBackend(path=str(tmp_path / "rocks"))
    if kind == "sqlite":
        return JdbcStateBackend(url=f"sqlite:///{tmp_path / 'state' / 'snapshots.db'}")
    url = request.getfixturevalue("postgres_url")
    backend = JdbcStateBackend(url=url, secret=POSTGRES_SECRET)
    store = backend.open_store()
    for job in store.jobs():
        if job.startswith("auth-"):
            store.delete_job(job)
    store.close()
    return backend


@pytest.fixture(params=["rocksdb", "sqlite", "postgresql"])
def backend(request, tmp_path):
    """Every store that outlives the process."""
    return make_backend(request.param, request, tmp_path)


@pytest.fixture(params=["sqlite", "postgresql"])
def sql_backend(request, tmp_path):
    """The stores that keep one row per key (RocksDB keeps a version's keys in one tagged chunk,
    forged by the tests over ``backend``)."""
    return make_backend(request.param, request, tmp_path)


def write_job(store, job: str) -> None:
    key = dumps("k")
    group = key_group_of("k", 128)
    store.write(TaskSnapshot(job, 1, ALL, (StateRow("t", group, key, dumps("one")),),
                             (TaskRecord("source", "s", 0, dumps(10)),)))
    store.write(TaskSnapshot(job, 2, ALL, (StateRow("t", group, key, dumps("two")),),
                             (TaskRecord("source", "s", 0, dumps(20)),)))
    store.commit(JobMeta(job, "fp", 2, (1, 2)))


def sql_update(store, table, where, **values) -> None:
    with store.engine.begin() as conn:
        conn.execute(sa.update(table).where(where).values(**values))


def sql_value(store, column, where) -> bytes:
    with store.engine.connect() as conn:
        return bytes(conn.execute(sa.select(column).where(where)).scalar_one())


def rocks_put(store, path: str, key: bytes, value: bytes) -> None:
    store.close()
    db = Rdict(path, options=Options(raw_mode=True))
    try:
        db[key] = value
    finally:
        db.close()


def rocks_get(path: str, key: bytes) -> bytes:
    db = Rdict(path, options=Options(raw_mode=True))
    try:
        return db[key]
    finally:
        db.close()


def rocks_chunk_path(store, job: str) -> str:
    (path,) = rocksdb_databases(rocksdb_table_dir(store, job, "t"))
    return path


def forge_state(backend, store, job: str, planted: str) -> None:
    """Replace the state of version 2 with a pickle that runs code, framed as well as one can
    without the key."""
    group = key_group_of("k", 128)
    evil = pickle.dumps(Planted(planted), protocol=5)
    if backend.name == "rocksdb":
        keys = pickle.dumps(["k"], protocol=5)
        context = f"chunk\0t\0{group}\0{2}\0".encode()
        tail = struct.pack(">III", 1, 1, len(keys)) + forged_tag(context, keys)
        chunk = forged_tag(context, tail, keys, evil) + tail + keys + evil
        rocks_put(store, rocks_chunk_path(store, job), chunk_key(group, 2), chunk)
    else:
        where = sa.and_(STATE.c.job == job, STATE.c.version == 2)
        sql_update(store, STATE, where, v=b"\0" + forged_tag(evil) + evil)


def reopened(backend, store):
    store.close()
    return backend.open_store()


def test_a_forged_state_value_is_refused_before_it_is_unpickled(backend, tmp_path):
    job = f"auth-state-{backend.name}"
    planted = str(tmp_path / "planted")
    store = backend.open_store()
    try:
        write_job(store, job)
        forge_state(backend, store, job, planted)
        store = reopened(backend, store)
        assert dict(store.read_rows(job, "t", ALL, 1)) == {dumps("k"): dumps("one")}
        with pytest.raises(SnapshotCorruptedError) as error:
            dict(store.read_rows(job, "t", ALL, 2))
        assert "version=2" in str(error.value)
        assert not os.path.exists(planted), "forged bytes were unpickled"
    finally:
        store.close()


def test_a_forged_key_column_is_refused(sql_backend, tmp_path):
    """SQL stores keep each key pickled in its own column: the tag covers it too."""
    backend = sql_backend
    job = f"auth-key-{backend.name}"
    planted = str(tmp_path / "planted")
    store = backend.open_store()
    try:
        write_job(store, job)
        sql_update(store, STATE, sa.and_(STATE.c.job == job, STATE.c.version == 2),
                   k=pickle.dumps(Planted(planted), protocol=5))
        store = reopened(backend, store)
        with pytest.raises(SnapshotCorruptedError):
            dict(store.read_rows(job, "t", ALL, 2))
        assert not os.path.exists(planted), "a forged key was unpickled"
    finally:
        store.close()


def test_a_genuine_value_moved_to_another_version_is_refused(backend):
    """Replaying an older genuine value as a newer one (or an older meta) gives wrong state without
    any forged byte: the tag covers the version and what the value belongs to."""
    job = f"auth-move-{backend.name}"
    store = backend.open_store()
    try:
        write_job(store, job)
        if backend.name == "rocksdb":
            group = key_group_of("k", 128)
            path = rocks_chunk_path(store, job)
            store.close()
            rocks_put(store, path, chunk_key(group, 2), rocks_get(path, chunk_key(group, 1)))
        else:
            old = sql_value(store, STATE.c.v, sa.and_(STATE.c.job == job, STATE.c.version == 1))
            sql_update(store, STATE, sa.and_(STATE.c.job == job, STATE.c.version == 2), v=old)
            record = sql_value(store, RECORDS.c.v, sa.and_(RECORDS.c.job == job,
                                                            RECORDS.c.version == 1))
            sql_update(store, RECORDS, sa.and_(RECORDS.c.job == job, RECORDS.c.version == 2),
                       v=record)
        store = reopened(backend, store)
        with pytest.raises(SnapshotCorruptedError):
            dict(store.read_rows(job, "t", ALL, 2))
        if backend.name != "rocksdb":
            with pytest.raises(SnapshotCorruptedError):
                store.read_record(job, "source", "s", 0, 2)
    finally:
        store.close()


def test_a_meta_of_another_job_is_refused(backend):
    """Copying one job's (genuine) meta over another's is refused: each job has its own key."""
    first, second = f"auth-a-{backend.name}", f"auth-b-{backend.name}"
    store = backend.open_store()
    try:
        write_job(store, first)
        write_job(store, second)
        store.commit(JobMeta(second, "fp", 1, (1,)))
        if backend.name == "rocksdb":
            base = os.path.join(store.path)
            store.close()
            shutil.rmtree(os.path.join(base, second, "meta"))
            shutil.copytree(os.path.join(base, first, "meta"), os.path.join(base, second, "meta"))
        else:
            body = sql_value(store, META.c.body, META.c.job == first)
            sql_update(store, META, META.c.job == second, body=body)
        store = reopened(backend, store)
        assert store.read_meta(first) == JobMeta(first, "fp", 2, (1, 2))
        with pytest.raises(SnapshotCorruptedError):
            store.read_meta(second)
    finally:
        store.close()


def test_a_forged_record_and_meta_are_refused(backend, tmp_path):
    job = f"auth-rec-{backend.name}"
    planted = str(tmp_path / "planted")
    evil = pickle.dumps(Planted(planted), protocol=5)
    forged = b"\0" + forged_tag(evil) + evil
    store = backend.open_store()
    try:
        write_job(store, job)
        if backend.name == "rocksdb":
            base = os.path.join(store.path, job)
            records = os.path.join(base, "records", "source%3As%3A0")
            store.close()
            rocks_put(store, records, struct.pack(">Q", 2), forged)
            rocks_put(store, os.path.join(base, "meta"), b"m", forged)
        else:
            sql_update(store, RECORDS, sa.and_(RECORDS.c.job == job, RECORDS.c.version == 2),
                       v=forged)
            sql_update(store, META, META.c.job == job, body=forged)
        store = reopened(backend, store)
        with pytest.raises(SnapshotCorruptedError):
            store.read_record(job, "source", "s", 0, 2)
        with pytest.raises(SnapshotCorruptedError):
            store.read_meta(job)
        assert not os.path.exists(planted), "forged bytes were unpickled"
    finally:
        store.close()


# --- keys -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["rocksdb", "sqlite"])
def test_file_based_state_keeps_a_private_key_per_job(kind, tmp_path):
    previous = os.umask(0o022)
    try:
        if kind == "rocksdb":
            backend = RocksDBStateBackend(path=str(tmp_path / "rocks"))
            key_of = lambda job: tmp_path / "rocks" / f"{job}.key"  # noqa: E731
        else:
            backend = JdbcStateBackend(url=f"sqlite:///{tmp_path / 'db' / 'snapshots.db'}")
            key_of = lambda job: tmp_path / "db" / "snapshots.db-keys" / f"{job}.key"  # noqa: E731
        store = backend.open_store()
        write_job(store, "one")
        write_job(store, "two")
        store.close()
    finally:
        os.umask(previous)
    keys = [key_of(job) for job in ("one", "two")]
    for path in keys:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert len(bytes.fromhex(path.read_text().strip())) == 32
    assert keys[0].read_text() != keys[1].read_text()


@pytest.mark.parametrize("kind", ["rocksdb", "sqlite"])
def test_a_secret_replaces_key_files_and_must_match(kind, tmp_path):
    def make(secret):
        if kind == "rocksdb":
            return RocksDBStateBackend(path=str(tmp_path / "rocks"), secret=secret)
        return JdbcStateBackend(url=f"sqlite:///{tmp_path / 'db' / 'snapshots.db'}", secret=secret)

    store = make("first secret").open_store()
    write_job(store, JOB)
    store.close()
    assert not list(tmp_path.rglob("*.key"))
    store = make("first secret").open_store()
    assert store.read_meta(JOB) == JobMeta(JOB, "fp", 2, (1, 2))
    store.close()
    store = make("another secret").open_store()
    try:
        with pytest.raises(SnapshotCorruptedError, match="authentication"):
            store.read_meta(JOB)
    finally:
        store.close()


def test_postgresql_needs_a_secret(postgres_url):
    with pytest.raises(BackendUnavailableError, match="state.secret"):
        JdbcStateBackend(url=postgres_url).open_store()


# --- a job, end to end ---------------------------------------------------------------------------


def key_file(tmp_path, backend: str):
    if backend == "rocksdb":
        return tmp_path / "state" / "word-count%2Fword_count.key"
    return tmp_path / "state" / "snapshots.db-keys" / "word-count%2Fword_count.key"


@pytest.mark.parametrize("backend", ["rocksdb", "jdbc"])
@pytest.mark.parametrize("damage", ["missing", "damaged", "replaced"])
def test_a_lost_or_changed_key_stops_resume_with_exit_3(backend, damage, tmp_path):
    before = crashed(tmp_path, backend)
    path = key_file(tmp_path, backend)
    if damage == "missing":
        path.unlink()
    elif damage == "damaged":
        path.write_text(path.read_text()[:20])
    else:
        path.write_text(os.urandom(32).hex() + "\n")
    done = run(tmp_path, backend, LINES, "--resume")
    fragment = {"missing": "is missing", "damaged": "is damaged", "replaced": "authentication"}
    assert_refused(done, fragment[damage])
    assert published(tmp_path) == before
    done = run(tmp_path, backend, LINES, "--fresh")
    assert done.returncode == 0, done.stderr
    assert parse(tmp_path) == word_count_oracle(LINES, WINDOW)


def test_a_tampered_sqlite_row_stops_resume_with_exit_3(tmp_path):
    before = crashed(tmp_path, "jdbc")
    planted = tmp_path / "planted"
    evil = pickle.dumps(Planted(str(planted)), protocol=5)
    with sqlite3.connect(tmp_path / "state" / "snapshots.db") as db:
        db.execute("update gyreflow_state set v = ?", (b"\0" + forged_tag(evil) + evil,))
    done = run(tmp_path, "jdbc", LINES, "--resume")
    assert_refused(done, "authentication")
    assert not planted.exists()
    assert published(tmp_path) == before


@pytest.mark.parametrize("what", ["state row", "count row"])
def test_a_deleted_sql_row_is_found_by_its_count(sql_backend, what):
    """A row deleted outside gyreflow leaves no value to check: the stored counts find it."""
    backend = sql_backend
    job = f"auth-del-{backend.name}"
    store = backend.open_store()
    try:
        write_job(store, job)
        store.write(TaskSnapshot(job, 2, ALL, (StateRow("t", key_group_of("x", 128), dumps("x"),
                                                        dumps("ex")),)))
        table = STATE if what == "state row" else COUNTS
        with store.engine.begin() as conn:
            conn.execute(sa.delete(table).where(table.c.job == job, table.c.version == 2,
                                                table.c.kg == key_group_of("x", 128)))
        store = reopened(backend, store)
        assert dict(store.read_rows(job, "t", ALL, 1)) == {dumps("k"): dumps("one")}
        with pytest.raises(SnapshotCorruptedError, match="lost rows"):
            dict(store.read_rows(job, "t", ALL, 2))
    finally:
        store.close()
