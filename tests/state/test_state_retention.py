"""The snapshot-store contract on every backend: discard_after, retention, pruning and their cost.

Every test runs against memory, RocksDB, JDBC on SQLite and JDBC on a real PostgreSQL server; random
histories check every retained version after commits, prunes and a crash. Rows, records and meta are
in ``test_state_backends``.
"""

from __future__ import annotations

import time
import uuid

import pytest
import sqlalchemy as sa
from _postgres import POSTGRES_SECRET
from _state_contract import (
    ALL,
    MP,
    Committer,
    Model,
    ctx_fixture,  # noqa: F401 - the ``ctx`` fixture
    record,
    row,
    with_pg_options,
)
from _stored_state import stored_cells, total_size
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gyreflow.state.backends import (
    JdbcStateBackend,
)
from gyreflow.state.keys.keygroups import key_group_of
from gyreflow.state.shared.snapshot import (
    JobMeta,
    TaskSnapshot,
    dumps,
    loads,
)

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
    # (at least their 40-character texts; at most their pickled bytes and their framing each: a flag
    # and a 16-byte tag per row, or a chunk header with two 16-byte tags per key group)
    new_bytes = sum(len(r.key) + len(r.value) for r in changed_rows)
    assert 40 * len(changed_rows) <= size_after - size_before <= new_bytes + 64 * len(changed_rows)
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
        backend = JdbcStateBackend(url=with_pg_options(postgres_url, 5_000, schema),
                                   secret=POSTGRES_SECRET)
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
