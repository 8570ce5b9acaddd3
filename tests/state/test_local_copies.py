"""Executor-local RocksDB copies of checkpoint objects: restores read unchanged objects locally, and
never trust a copy of an object that was written again, damaged, or is held by another process."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest
from _state_contract import ALL, Committer, row
from rocksdict import Options, Rdict

from gyreflow.api import SizeTumblingWindow
from gyreflow.state.shared.snapshot import TaskSnapshot, loads
from gyreflow.state.stores.checkpoint import CheckpointSnapshotStore
from gyreflow.state.stores.local_copies import COPIES_FOLDER, KEEP, LocalCopies

TABLE = "counts"


@pytest.fixture(params=["dir", "s3"])
def location(request, tmp_path) -> tuple[str, str, dict]:
    """``(url, secret, storage options)`` of a checkpoint directory or an object-store bucket."""
    return make_location(request.param, request, tmp_path)


def make_location(kind: str, request, tmp_path) -> tuple[str, str, dict]:
    if kind == "dir":
        return str(tmp_path / "checkpoints"), "", {}
    server = request.getfixturevalue("object_store")
    config = server.new_location()
    options = {"key": "testing", "secret": "testing",
               "client_kwargs": {"endpoint_url": server.endpoint, "region_name": "us-east-1"}}
    return config["state.checkpoint_url"], config["state.secret"], options


def open_store(location, copies: str | None) -> CheckpointSnapshotStore:
    url, secret, options = location
    return CheckpointSnapshotStore(url, secret, options, copies)


class RemoteReads:
    """Counts the state objects fetched from the checkpoint location (not from a local copy)."""

    def __init__(self, store: CheckpointSnapshotStore, monkeypatch) -> None:
        self.paths: list[str] = []
        fetch = store.fs.cat_file

        def counted(path, *args, **kwargs):
            if "/state/" in path:
                self.paths.append(path)
            return fetch(path, *args, **kwargs)

        monkeypatch.setattr(store.fs, "cat_file", counted)


def write_window(store, job: str, version: int, oracle: dict, rng: random.Random,
                 width: int = 3) -> None:
    """A window's changes (some keys written, some removed), applied to the plain-dict oracle."""
    rows = []
    for key in rng.sample(range(200), 30):
        if rng.random() < 0.2:
            oracle.pop(key, None)
            rows.append(row(TABLE, key, None))
        else:
            value = f"{version}-{rng.randrange(10 ** width):0{width}d}"
            oracle[key] = value
            rows.append(row(TABLE, key, value))
    store.write(TaskSnapshot(job, version, ALL, tuple(rows)))


def restored(store, job: str, version: int) -> dict:
    return {loads(k): loads(v) for k, v in store.read_rows(job, TABLE, ALL, version)}


def copy_databases(root) -> list[str]:
    found = []
    for folder, _dirs, files in os.walk(root):
        if "CURRENT" in files:
            found.append(folder)
    return found


def test_a_restore_takes_unchanged_objects_from_its_local_copies(location, tmp_path, monkeypatch):
    copies = str(tmp_path / "executor-a")
    rng, oracle, job = random.Random(7), {}, "job"
    writer = open_store(location, copies)
    history = {}
    for version in range(1, 6):
        write_window(writer, job, version, oracle, rng)
        history[version] = dict(oracle)
    writer.close()
    databases = copy_databases(os.path.join(copies, COPIES_FOLDER))
    assert len(databases) == 1 and databases[0].endswith("kg-0-128")

    # The same machine restores: every object comes from its copies.
    reader = open_store(location, copies)
    reads = RemoteReads(reader, monkeypatch)
    assert restored(reader, job, 5) == history[5]
    assert restored(reader, job, 3) == history[3]
    assert reads.paths == []
    reader.close()

    # Another machine writes window 6: only that object is fetched here.
    other = open_store(location, str(tmp_path / "executor-b"))
    write_window(other, job, 6, oracle, rng)
    other.close()
    reader = open_store(location, copies)
    reads = RemoteReads(reader, monkeypatch)
    assert restored(reader, job, 6) == oracle
    assert [p.rsplit("/", 1)[1] for p in reads.paths] == ["000000000006.d"]
    assert restored(reader, job, 6) == oracle
    assert len(reads.paths) == 1  # now copied here too
    reader.close()

    # A machine without copies reads the same from the checkpoint location alone.
    plain = open_store(location, None)
    assert restored(plain, job, 6) == oracle
    plain.close()


def test_an_object_written_again_is_never_read_from_a_stale_copy(location, tmp_path):
    """A resumed run replays window 3 with other input: the copy of the first window 3 (same
    name, same size) must not be used."""
    copies = str(tmp_path / "executor-a")
    job, oracle = "job", {}
    first = open_store(location, copies)
    write_window(first, job, 1, oracle, random.Random(1))
    write_window(first, job, 2, oracle, random.Random(2))
    committed = dict(oracle)

    def window_3(store, letter: str) -> dict:
        values = {key: f"{letter}-{key:03d}" for key in range(0, 200, 7)}
        store.write(TaskSnapshot(job, 3, ALL, tuple(row(TABLE, k, v) for k, v in values.items())))
        return {**committed, **values}

    window_3(first, "a")
    first.close()
    first_size = size_of_object(location, job, 3)

    resumed = open_store(location, str(tmp_path / "executor-b"))
    resumed.discard_after(job, 2)
    replayed = window_3(resumed, "b")
    resumed.close()
    assert size_of_object(location, job, 3) == first_size

    reader = open_store(location, copies)
    assert restored(reader, job, 3) == replayed
    assert restored(reader, job, 2) == committed
    reader.close()


def size_of_object(location, job: str, version: int) -> int:
    store = open_store(location, None)
    path = f"{store.root}/{job}/state/{TABLE}/kg-0-128/{version:012d}.d"
    store.fs.invalidate_cache()
    size = store.fs.info(path)["size"]
    store.close()
    return size


def test_a_damaged_copy_is_fetched_again(location, tmp_path, monkeypatch):
    copies = str(tmp_path / "executor-a")
    job, oracle = "job", {}
    writer = open_store(location, copies)
    for version in (1, 2):
        write_window(writer, job, version, oracle, random.Random(version))
    writer.close()
    (database_path,) = copy_databases(os.path.join(copies, COPIES_FOLDER))
    database = Rdict(database_path, Options(raw_mode=True))
    for key in list(database.keys()):
        value = database[key]
        database[key] = value[:-5] + bytes(b ^ 0xFF for b in value[-5:])
    database.close()

    reader = open_store(location, copies)
    reads = RemoteReads(reader, monkeypatch)
    assert restored(reader, job, 2) == oracle
    assert len(reads.paths) == 2  # both damaged copies were fetched again ...
    assert restored(reader, job, 2) == oracle
    assert len(reads.paths) == 2  # ... and replaced by good ones
    reader.close()


def test_local_copies_stay_bounded_however_many_windows_run(tmp_path):
    location = (str(tmp_path / "checkpoints"), "", {})
    copies = str(tmp_path / "executor-a")
    job, oracle, rng = "job", {}, random.Random(11)
    store = open_store(location, copies)
    committer = Committer(store, job, keep=2)
    counts = []
    for version in range(1, 121):
        write_window(store, job, version, oracle, rng)
        committer.commit(version)
        if version % 40 == 0:
            assert restored(store, job, version) == oracle
            (database_path,) = copy_databases(os.path.join(copies, COPIES_FOLDER))
            store.close()  # the count is read with the database closed
            database = Rdict(database_path, Options(raw_mode=True))
            counts.append(len(list(database.keys())))
            database.close()
            store = open_store(location, copies)
            committer.store = store
    store.close()
    assert all(count <= KEEP for count in counts), counts


def test_a_copy_held_by_another_process_leaves_the_restore_to_the_checkpoint_location(tmp_path):
    location = (str(tmp_path / "checkpoints"), "", {})
    copies = str(tmp_path / "executor-a")
    job, oracle = "job", {}
    store = open_store(location, copies)
    write_window(store, job, 1, oracle, random.Random(5))
    store.close()
    (database_path,) = copy_databases(os.path.join(copies, COPIES_FOLDER))
    holder = subprocess.Popen(  # another Python worker of the executor holds the database
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, time
            from rocksdict import Options, Rdict
            db = Rdict({database_path!r}, Options(raw_mode=True))
            print("held", flush=True)
            sys.stdin.read()
            db.close()
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        store = open_store(location, copies)
        assert restored(store, job, 1) == oracle
        write_window(store, job, 2, oracle, random.Random(6))
        assert restored(store, job, 2) == oracle
        store.close()
    finally:
        holder.communicate("")


@pytest.mark.parametrize(("setting", "kind", "kept"), [
    ("auto", "s3", True), ("auto", "dir", False), ("on", "dir", True), ("off", "s3", False)])
def test_which_locations_get_local_copies(setting, kind, kept, tmp_path, monkeypatch, request):
    """auto: copies of an object store's objects (a network away), not of a mounted directory's.
    Outside a Spark task (a driver) there are none unless state.local_path names a place, even
    with SPARK_LOCAL_DIRS set (the stream test above and the cluster tests see executors keep
    them in their Spark local directories)."""
    from gyreflow.state.backends import RocksDBStateBackend

    url, secret, options = make_location(kind, request, tmp_path)
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(tmp_path / "spark-local"))
    pairs = tuple((f"client_kwargs.{k}", v) for k, v in options.get("client_kwargs", {}).items())
    pairs += tuple((k, v) for k, v in options.items() if k != "client_kwargs")
    for local_path, where in (("", tmp_path / "spark-local"), (str(tmp_path / "given"),
                                                               tmp_path / "given")):
        backend = RocksDBStateBackend(checkpoint_url=url, secret=secret, storage_options=pairs,
                                      local_copies=setting, local_path=local_path)
        store = backend.open_store()
        write_window(store, f"job{bool(local_path)}", 1, {}, random.Random(1))
        store.close()
        found = copy_databases(where / COPIES_FOLDER)
        assert bool(found) is (kept and bool(local_path)), (local_path, found)


def test_a_stream_keeps_copies_where_its_tasks_run_and_counts_exactly(make_env, environment_type,
                                                                      object_store, tmp_path):
    """Snapshots go to an object store with copies on the tasks' side; the per-window counts are a
    Counter's over the words so far, and each task range has its local database."""
    words = [f"w{(i * 7) % 13}" for i in range(120)]
    config = {**object_store.new_location(), "state.local_copies": "on"}
    if environment_type != "spark":  # no executor: a place must be given
        copies = tmp_path / "executor-local"
        config["state.local_path"] = str(copies)
    else:  # tasks that open the store on executors (workers mode stores through the driver)
        config["spark.mode"] = "rounds"
    env = make_env(2, **config)
    if environment_type == "spark":  # by default, the executor's Spark local directory
        local_dirs = env.session().sparkContext.parallelize([0], 1).map(
            lambda _: os.environ["SPARK_LOCAL_DIRS"]).collect()[0]
        copies = Path(local_dirs.split(",")[0])
    pipeline = env.pipeline("copied")

    @pipeline.task
    def count(ctx):
        (ctx.source(words, SizeTumblingWindow(20)).with_parallelism(1).key_by().count()
         .collect("counts"))

    result = pipeline.execute()
    by_window = result["count"].by_window("counts")
    assert sorted(by_window) == list(range(1, 7))
    for window, rows in by_window.items():
        seen = Counter(words[:window * 20])
        updated = set(words[(window - 1) * 20:window * 20])
        assert dict(rows) == {w: seen[w] for w in updated}, (environment_type, window)
    # the copies of this job's checkpoint location (the session's other tests keep theirs too)
    job_copies = copy_databases(LocalCopies(str(copies), config["state.checkpoint_url"]).root)
    assert sorted(os.path.basename(p) for p in job_copies) == ["kg-0-64", "kg-64-128"], job_copies
