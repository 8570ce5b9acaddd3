"""The snapshot writer process on every out-of-process backend, and backends that cannot be opened."""

from __future__ import annotations

import pickle
import threading
import time
import uuid
from collections.abc import Callable

import pytest
from _postgres import POSTGRES_SECRET
from _state_contract import (
    ALL,
    TIMEOUT,
    Model,
    backend_kind,
    record,
    row,
)

from gyreflow.api.config import Config
from gyreflow.runtime.snapshot_writers import ProcessSnapshotWriter
from gyreflow.state.backends import (
    JdbcStateBackend,
    RocksDBStateBackend,
    StateBackend,
    backend_from_config,
)
from gyreflow.state.shared.snapshot import (
    BackendUnavailableError,
    JobMeta,
    StateRow,
    TaskSnapshot,
    dumps,
)
from gyreflow.state.stores.checkpoint import CheckpointSnapshotStore
from gyreflow.state.stores.jdbc import JdbcSnapshotStore, default_sqlite_url
from gyreflow.state.stores.memory import MemorySnapshotStore
from gyreflow.state.stores.rocksdb import RocksDBSnapshotStore

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
    return JdbcStateBackend(url=request.getfixturevalue("postgres_url"), secret=POSTGRES_SECRET)


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
def test_backend_configs_are_picklable_and_open_stores_of_their_kind(backend_overrides):
    backend = backend_from_config(Config.load(None, backend_overrides, environ={}))
    clone = pickle.loads(pickle.dumps(backend))
    assert clone == backend
    store = clone.open_store()
    try:
        expected = {"memory": MemorySnapshotStore, "rocksdb": RocksDBSnapshotStore,
                    "sqlite": JdbcSnapshotStore, "postgresql": JdbcSnapshotStore,
                        "checkpoint-dir": CheckpointSnapshotStore,
                        "checkpoint-s3": CheckpointSnapshotStore}
        assert isinstance(store, expected[backend_kind(backend_overrides)])
        assert store.location()
    finally:
        store.close()
