"""The snapshot-store contract on every backend: rows, records, meta and jobs.

Every test runs against memory, RocksDB, JDBC on SQLite and JDBC on a real PostgreSQL server.
Discard, retention, pruning and what they cost are in ``test_state_retention``; corruption, restores
and the writer process have their own modules (``test_state_corruption``, ``test_state_restore``,
``test_snapshot_writer_process``).
"""

from __future__ import annotations

import threading

import pytest
from _state_contract import (
    ALL,
    MP,
    TIMEOUT,
    Model,
    ctx_fixture,  # noqa: F401 - the ``ctx`` fixture
    record,
    row,
)
from _stored_state import stored_cells, total_size

from gyreflow.state.keys.keygroups import key_group_of
from gyreflow.state.shared.snapshot import (
    JobMeta,
    TaskSnapshot,
    dumps,
    loads,
)

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


def test_a_store_sees_what_another_store_wrote_after_it_last_looked(ctx):
    """Two stores of one backend, as two processes (or one reused Spark worker) hold them: what one
    writes after the other listed the job must be what the other reads next, not a cached view."""
    if ctx.kind == "rocksdb":
        pytest.skip("a RocksDB database has one writing process at a time, by design")
    job = ctx.new_job()
    other = ctx.backend.open_store()
    if hasattr(other, "fs"):  # another process has a file-system object of its own
        other.fs = type(other.fs)(**other.fs.storage_options, skip_instance_cache=True)
    try:
        ctx.write(None, TaskSnapshot(job, 1, ALL, (row("t", "a", 1),), (record(1),)))
        assert ctx.read(job, "t", 9) == {dumps("a"): dumps(1)}
        assert ctx.store.read_record(job, "source", "numbers", 0, 9) == (1, dumps(1))
        other.write(TaskSnapshot(job, 2, ALL, (row("t", "a", 2), row("t", "b", 2)), (record(2),)))
        assert ctx.read(job, "t", 9) == {dumps("a"): dumps(2), dumps("b"): dumps(2)}
        assert ctx.store.read_record(job, "source", "numbers", 0, 9) == (2, dumps(2))
        ctx.store.verify_reached(job, "t", ALL, 2)
    finally:
        other.close()


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
