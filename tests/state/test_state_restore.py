"""Snapshot-store contract: restoring keyed state on every backend.

Unpicklable state, the chunks tasks write, rescaled layouts, and RocksDB ranges read by other processes.
"""

from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest
from _state_contract import (
    ALL,
    MP,
    TIMEOUT,
    Committer,
    Model,
    ctx_fixture,  # noqa: F401 - the ``ctx`` fixture
    restore,
    row,
    snapshot_of,
)
from _stored_state import rocksdb_table_dir, stored_cells

from gyreflow.api.config import Config
from gyreflow.state.backends import (
    RocksDBStateBackend,
    backend_from_config,
)
from gyreflow.state.keys.keygroups import key_group_of
from gyreflow.state.shared.snapshot import (
    SnapshotCorruptedError,
    StateRow,
    TaskSnapshot,
    chunks_by_key_group,
    dumps,
    loads,
)

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


def test_a_restore_in_an_earlier_layout_checks_the_layout_that_wrote_the_window(ctx):
    """Two tasks wrote versions 1-2 (key groups 0-63 and 64-127). A rebalance then moved key group
    100 to the first task, and four ranges wrote versions 3-4. Restoring version 4 in the first
    layout (a resume with the plan's own assignment) reads the later layout's state. The first
    layout's range 64-127 stopped at version 2 because the layout changed, not because writes
    were lost. When a range of the layout that wrote a version misses it, the restore is refused
    by the stores that can tell (the others commit state and meta in one transaction)."""
    job = ctx.new_job()
    model = Model()
    keys = range(600)

    def rows(kgs: range, version: int) -> tuple[StateRow, ...]:
        return tuple(row("t", k, (version, k)) for k in keys
                     if key_group_of(k, MP) in kgs and (version < 3 or k % version == 0))

    first = [range(0, 64), range(64, 128)]
    later = [range(0, 64), range(100, 101), range(64, 100), range(101, 128)]
    for version, layout in ((1, first), (2, first), (3, later), (4, later)):
        for kgs in layout:
            ctx.write(model, TaskSnapshot(job, version, kgs, rows(kgs, version)))
    for kgs in first:
        ctx.store.verify_reached(job, "t", kgs, 4)
        assert ctx.read(job, "t", 4, kgs) == model.read("t", kgs, 4)
    for kgs in later[:-1]:  # range 101-127 misses version 5
        ctx.write(model, TaskSnapshot(job, 5, kgs, rows(kgs, 5)))
    ctx.store.verify_reached(job, "t", range(0, 101), 5)
    if ctx.kind == "rocksdb" or ctx.kind.startswith("checkpoint"):
        with pytest.raises(SnapshotCorruptedError, match="key groups 101-127 reaches window 4"):
            ctx.store.verify_reached(job, "t", range(64, 128), 5)
        ctx.store.drop_other_ranges(job, "t", set(later))  # the first layout's 64-127 goes
        with pytest.raises(SnapshotCorruptedError, match="key groups 101-127 reaches window 4"):
            ctx.store.verify_reached(job, "t", range(64, 128), 5)


def test_a_layout_back_after_a_rebalance_does_not_bring_back_keys_deleted_in_between(ctx):
    """Layout A (two tasks) wrote versions 1-4, layout B (a rebalance moved key group 100) wrote
    version 5, in which some keys were deleted, and a resume in layout A again wrote versions 6 and
    7, as the driver does it: discard after the resumed window, set aside the ranges that did not
    reach it, write everything whole, and, once the horizon passes the first version of the new
    layout, fold and drop the other ranges. The deleted keys stay deleted at every step."""
    job = ctx.new_job()
    model = Model()
    first = [range(0, 64), range(64, 128)]
    later = [range(0, 64), range(100, 101), range(64, 100), range(101, 128)]
    keys = range(900)

    def whole(kgs: range, version: int, gone=frozenset()) -> tuple[StateRow, ...]:
        state = {loads(k): loads(v) for k, v in model.read("t", kgs, version - 1).items()}
        return (tuple(row("t", k, v) for k, v in state.items() if k not in gone)
                + tuple(row("t", k, None) for k in gone if key_group_of(k, MP) in kgs))

    for version in range(1, 5):
        for kgs in first:
            ctx.write(model, TaskSnapshot(job, version, kgs, tuple(
                row("t", k, (version, k)) for k in keys
                if key_group_of(k, MP) in kgs and k % version == 0)))
    deleted = frozenset(k for k in keys if k % 7 == 0)
    ctx.store.discard_after(job, 4)
    ctx.store.retire_ranges(job, 4, {"t": set(later)})
    for kgs in later:
        ctx.write(model, TaskSnapshot(job, 5, kgs, whole(kgs, 5, deleted)))
    ctx.store.discard_after(job, 5)  # killed after committing 5; resumed in layout A
    ctx.store.retire_ranges(job, 5, {"t": set(first)})
    for kgs in first:
        ctx.write(model, TaskSnapshot(job, 6, kgs, whole(kgs, 6)))
        ctx.write(model, TaskSnapshot(job, 7, kgs, tuple(
            row("t", k, "seven") for k in keys
            if key_group_of(k, MP) in kgs and k % 10 == 3 and k not in deleted)))
    for version in range(1, 8):
        assert ctx.read(job, "t", version) == model.read("t", ALL, version), version
    assert not any(loads(k) in deleted for k in ctx.read(job, "t", 7))
    ctx.store.prune(job, [5, 6], 6)
    if ctx.kind == "rocksdb":  # what a drop killed after moving a database out of the way leaves
        left = Path(rocksdb_table_dir(ctx.store, job, "t")) / "kg-100-101.dropped"
        left.mkdir()
        (left / "000022.log").write_bytes(b"\0" * 64)
        ctx.store.discard_after(job, 7)  # opens every range database: the leftover is none
    ctx.store.drop_other_ranges(job, "t", set(first))
    ctx.reopen()
    for version in (6, 7):
        assert ctx.read(job, "t", version) == model.read("t", ALL, version), version
        for kgs in later:
            assert ctx.read(job, "t", version, kgs) == model.read("t", kgs, version)
    if ctx.kind == "rocksdb":
        assert sorted(os.listdir(rocksdb_table_dir(ctx.store, job, "t"))) == ["kg-0-64",
                                                                             "kg-64-128"]


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


# --- chunks: what tasks write ---------------------------------------------------------------------


def chunk_snapshot(job: str, version: int, keyed) -> TaskSnapshot:
    """What ``Task._snapshot`` writes: per table, the changes as one chunk per key group."""
    chunks = []
    for table in keyed.tables.values():
        changed, removed = table.take_changes()
        chunks += chunks_by_key_group(table.name, changed, removed, MP)
    return TaskSnapshot(job, version, keyed.key_groups, chunks=tuple(chunks))


def test_task_chunks_restore_the_working_state_at_every_version(ctx):
    """Chunks written the way tasks write them restore, through ``read_into`` and ``read_rows``,
    the working state as it was at each version (the oracle: copies of the working dicts)."""
    job = ctx.new_job()
    keyed = ctx.backend.create_keyed_store()
    counts, lists = keyed.value_state("counts"), keyed.list_state("seen")
    committer = Committer(ctx.store, job, keep=3)
    expected = {}
    keys = [f"w{i}" for i in range(300)] + [("t", 1), 7, 10**30, b"raw", None]
    for version in range(1, 9):
        for i, key in enumerate(keys):
            if (i + version) % 3 == 0:
                counts.put(key, (version, i))
                lists.append(key, version)
        if version % 2 == 0:  # deletions, a None value, and a key deleted then written again
            for key in keys[version::7]:
                counts.delete(key)
                lists.clear(key)
            counts.put("none-valued", None)
            counts.put(keys[version], "back")
        snapshot = chunk_snapshot(job, version, keyed)
        assert all(c.count <= len(keys) + 1 for c in snapshot.chunks)
        ctx.write(None, snapshot)
        committer.commit(version)
        expected[version] = {name: {k: (list(v) if isinstance(v, list) else v)
                                    for k, v in keyed.tables[name].data.items()}
                             for name in ("counts", "seen")}
    ctx.reopen()
    for version in committer.retained:
        for name, data in expected[version].items():
            restored: dict = {}
            ctx.store.read_into(job, name, ALL, version, restored)
            assert restored == data, (version, name)
            assert restore(ctx, job, name, version) == data, (version, name)
            for kgs in (range(0, 50), range(50, 128)):  # another parallelism: sub-ranges
                part: dict = {}
                ctx.store.read_into(job, name, kgs, version, part)
                assert part == {k: v for k, v in data.items() if key_group_of(k, MP) in kgs}
    assert chunk_snapshot(job, 9, keyed).chunks == ()  # nothing changed: nothing to write


READER = """
import sys
from gyreflow.state.stores.rocksdb import RocksDBSnapshotStore
store = RocksDBSnapshotStore(sys.argv[1])
data = {}
store.read_into("job", "t", range(int(sys.argv[2]), int(sys.argv[3])), 2, data)
print(len(data), sum(v for v in data.values()))
store.close()
"""


def test_rocksdb_readers_in_other_processes_restore_ranges_a_writer_holds_open(tmp_path):
    """After a resume with another parallelism, tasks in several processes read the old layout's
    ranges while a process holds them open for writing: readers open them read-only."""
    path = str(tmp_path / "rocks")
    store = RocksDBStateBackend(path=path).open_store()
    try:
        store.write(TaskSnapshot("job", 1, ALL, tuple(row("t", k, k) for k in range(1000))))
        store.write(TaskSnapshot("job", 2, ALL, tuple(row("t", k, 2 * k) for k in range(0, 1000, 2))))
        expected = {k: (2 * k if k % 2 == 0 else k) for k in range(1000)}
        halves = [(0, 64), (64, 128)]
        readers = [subprocess.Popen([sys.executable, "-c", READER, path, str(a), str(b)],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                   for a, b in halves for _ in range(2)]  # two readers of each half at once
        outputs = [reader.communicate(timeout=TIMEOUT) for reader in readers]
        for reader, (_, err) in zip(readers, outputs, strict=True):
            assert reader.returncode == 0, err
        for (a, b), (out, _) in zip([h for h in halves for _ in range(2)], outputs, strict=True):
            part = {k: v for k, v in expected.items() if a <= key_group_of(k, MP) < b}
            assert out.split() == [str(len(part)), str(sum(part.values()))]
        store.write(TaskSnapshot("job", 3, ALL, (row("t", 1, -1),)))  # the writer goes on
        assert dict(store.read_rows("job", "t", ALL, 3))[dumps(1)] == dumps(-1)
    finally:
        store.close()


def test_rocksdb_reads_a_range_left_half_created_by_a_killed_writer_as_empty(tmp_path):
    """A writer killed while creating a database leaves a directory without one: readers see no
    rows there (and no meta), and a writer creates the database in it."""
    store = RocksDBStateBackend(path=str(tmp_path / "rocks")).open_store()
    try:
        store.write(TaskSnapshot("job", 1, range(64, 128), tuple(
            row("t", k, k) for k in range(200) if key_group_of(k, MP) >= 64)))
        os.makedirs(os.path.join(rocksdb_table_dir(store, "job", "t"), "kg-0-64"))
        os.makedirs(os.path.join(store.path, "job", "meta"))
        expected = {dumps(k): dumps(k) for k in range(200) if key_group_of(k, MP) >= 64}
        assert dict(store.read_rows("job", "t", ALL, 1)) == expected
        assert store.read_meta("job") is None
        assert store.read_record("job", "source", "numbers", 0, 1) is None
        new = next(k for k in range(1000, 2000) if key_group_of(k, MP) < 64)
        store.write(TaskSnapshot("job", 2, range(0, 64), (row("t", new, "new"),)))
        expected[dumps(new)] = dumps("new")
        assert dict(store.read_rows("job", "t", ALL, 2)) == expected
    finally:
        store.close()
