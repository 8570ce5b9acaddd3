"""Shared pieces of the snapshot-store contract tests: the oracle and the stores (the white-box
helpers that inspect or damage what a store keeps are in ``_stored_state``).

The oracle is a plain-Python model of the contract (``Model``: per key, the list of ``(version, value
or deletion)``), never a store's own earlier output. Retention is exercised the way the checkpoint
coordinator drives it (``Committer`` mirrors ``CheckpointCoordinator.commit``; a test checks that it
issues the same calls).
"""

from __future__ import annotations

import types
import uuid

import attrs
import pytest
import sqlalchemy as sa

from gyreflow.api.config import Config
from gyreflow.runtime.checkpoint import CheckpointCoordinator
from gyreflow.state.backends import (
    MemoryStateBackend,
    StateBackend,
    backend_from_config,
)
from gyreflow.state.keys.keygroups import key_group_of
from gyreflow.state.shared.snapshot import (
    JobMeta,
    SnapshotStore,
    StateRow,
    TaskRecord,
    TaskSnapshot,
    dumps,
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
    url = overrides.get("state.checkpoint_url", "")
    if url:
        return "checkpoint-s3" if url.startswith("s3://") else "checkpoint-dir"
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


@pytest.fixture(name="ctx")
def ctx_fixture(backend_overrides, tmp_path):
    """An open store of each backend (the test modules import this fixture); a checkpoint location
    is read through local copies, as on a Spark executor."""
    kind = backend_kind(backend_overrides)
    backend = backend_from_config(Config.load(None, backend_overrides, environ={}))
    if kind.startswith("checkpoint"):
        backend = attrs.evolve(backend, local_copies="on", local_path=str(tmp_path / "local-copies"))
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
