"""Snapshots stored per key-group chunk (memory and jdbc stores): what a restore reads equals a plain
dict replay of the changes, for any retained version and any key-group range (another parallelism);
pruning folds without reading key groups the crossing versions did not change; the per-key layout of
older versions is refused in one line."""

from __future__ import annotations

import random

import pytest
import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st

from gyreflow.state.keys.keygroups import key_group_of
from gyreflow.state.shared.snapshot import (
    SnapshotCorruptedError,
    TaskSnapshot,
    chunks_by_key_group,
    dumps,
)
from gyreflow.state.stores.jdbc import STATE, JdbcSnapshotStore
from gyreflow.state.stores.memory import MemorySnapshotStore

MP = 16
ALL = range(MP)


@pytest.fixture(params=["memory", "sqlite"])
def store(request, tmp_path):
    if request.param == "memory":
        opened = MemorySnapshotStore(f"chunks-{tmp_path.name}")
    else:
        opened = JdbcSnapshotStore(f"sqlite:///{tmp_path / 'state' / 'snapshots.db'}", secret="s")
    yield opened
    opened.close()


def write(store, job: str, version: int, changed: dict, removed=()) -> None:
    chunks = tuple(chunks_by_key_group("t", changed, list(removed), MP))
    store.write(TaskSnapshot(job, version, ALL, chunks=chunks, tables=("t",)))


def read(store, job: str, version: int, groups: range = ALL) -> dict:
    data: dict = {}
    store.read_into(job, "t", groups, version, data)
    return data


def test_restores_equal_a_dict_replay_at_every_retained_version_and_range(store):
    rng = random.Random(5)
    job = "replay"
    model: dict = {}
    states = {}
    for version in range(1, 41):
        changed = {f"k{rng.randrange(60)}": (version, rng.random()) for _ in range(rng.randrange(1, 25))}
        removed = {f"k{rng.randrange(60)}" for _ in range(rng.randrange(4))} - set(changed)
        removed &= set(model)
        write(store, job, version, changed, removed)
        model.update(changed)
        for key in removed:
            del model[key]
        states[version] = dict(model)
        if version > 2:  # two retained versions, pruned as the driver does after every window
            store.prune(job, [version - 1], version - 1)
        for v in (version - 1, version):
            if v >= max(1, version - 1):
                assert read(store, job, v) == states[v]
        low = range(0, MP // 3)
        assert read(store, job, version, low) == {
            k: v for k, v in states[version].items() if key_group_of(k, MP) in low}


def test_a_version_written_again_merges_into_what_it_wrote(store):
    write(store, "again", 1, {"a": 1, "b": 2})
    write(store, "again", 2, {"a": 10})
    write(store, "again", 2, {"b": 20}, ["a"])
    assert read(store, "again", 2) == {"b": 20}
    assert read(store, "again", 1) == {"a": 1, "b": 2}


def test_prune_reads_only_the_key_groups_a_crossing_version_changed(store, monkeypatch):
    job = "changed-only"
    keys = [f"k{i}" for i in range(200)]
    write(store, job, 1, dict.fromkeys(keys, 0))
    group_of = {k: key_group_of(k, MP) for k in keys}
    hot = [k for k in keys if group_of[k] == 3]
    for version in range(2, 6):
        write(store, job, version, dict.fromkeys(hot, version))
    decoded = []
    module = __import__(type(store).__module__, fromlist=["decode_chunk"])
    real = module.decode_chunk

    def spy(blob, where, table, group, *args, **kwargs):
        decoded.append(group)
        return real(blob, where, table, group, *args, **kwargs)

    monkeypatch.setattr(module, "decode_chunk", spy)
    store.prune(job, [4], 4)
    # Folded, and nothing else read; the memory store keeps the keys it pickled beside each chunk
    # and sees that version 4 rewrote version 1's keys of group 3 without reading either.
    folded = set() if isinstance(store, MemorySnapshotStore) else {3}
    assert set(decoded) == folded, decoded
    expected = {k: (5 if group_of[k] == 3 else 0) for k in keys}
    assert read(store, job, 5) == expected


def test_a_damaged_chunk_is_reported_with_its_place(store):
    write(store, "damaged", 1, {"a": 1})
    group = key_group_of("a", MP)
    if isinstance(store, MemorySnapshotStore):
        versions = store._jobs["damaged"].chunks[("t", group)]
        count, blob, *rest = versions[1]
        versions[1] = (count, blob[:-1] + bytes([blob[-1] ^ 1]), *rest)
    else:
        with store.engine.begin() as conn:
            blob = bytes(conn.execute(sa.select(STATE.c.v)).scalar_one())
            conn.execute(sa.update(STATE).values(v=blob[:-1] + bytes([blob[-1] ^ 1])))
    with pytest.raises(SnapshotCorruptedError, match="version=1") as error:
        read(store, "damaged", 1)
    assert "failed its" in str(error.value) and "\n" not in str(error.value)


def test_the_per_key_layout_of_older_versions_is_refused_in_one_line(tmp_path):
    store = JdbcSnapshotStore(f"sqlite:///{tmp_path / 'old.db'}", secret="s")
    try:
        with store.engine.begin() as conn:
            conn.execute(sa.insert(STATE).values(job="old", tbl="t", kg=1, k=dumps("a"), version=1,
                                                 v=b"\0" * 20))
        with pytest.raises(SnapshotCorruptedError) as error:
            read(store, "old", 1)
        message = str(error.value)
        assert "older layout" in message and "--fresh" in message and "\n" not in message
    finally:
        store.close()


def test_a_fold_keeps_large_values_it_did_not_change_and_checks_them_when_read():
    """The memory store folds a key group's old chunks into one whose values are pickled one by
    one (``memory.Folded``): a later fold adds the newer chunks' keys without copying the others'
    bytes, every version still reads as a plain replay, and a damaged value is named."""
    from gyreflow.state.stores.memory import Folded

    store = MemorySnapshotStore("fold-large")
    job = "large"
    big = "b" * 100_000
    keys = [k for k in (f"k{i}" for i in range(400)) if key_group_of(k, MP) == 5][:6]
    model = {keys[0]: big}
    write(store, job, 1, dict(model))
    versions = store._jobs[job].chunks[("t", 5)]
    kept = set()  # the stored bytes of the large value, by identity, at the end of each version
    for version in range(2, 40):
        changed = {keys[1 + version % 5]: version}
        removed = [keys[1 + (version + 2) % 5]] if version % 3 == 0 else []
        for key in removed:
            model.pop(key, None)
        model.update(changed)
        write(store, job, version, changed, removed)
        store.prune(job, [version - 1], version - 1)
        assert read(store, job, version) == model
        oldest = versions[min(versions)][1]
        if type(oldest) is Folded:
            kept.add(id(oldest.values[keys[0]][1]))
    assert len(kept) == 1  # folded again and again, never copied
    oldest = versions[min(versions)][1]
    check, pickled = oldest.values[keys[0]]
    oldest.values[keys[0]] = (check, pickled[:-2] + b"x.")
    with pytest.raises(SnapshotCorruptedError, match=f"key group=5 version={min(versions)}"):
        read(store, job, 39)


KEYS = [f"k{i}" for i in range(40)]  # about 2.5 a key group: chunks that cover and that do not
_OPS = st.lists(st.tuples(
    st.dictionaries(st.sampled_from(KEYS),
                    st.one_of(st.integers(), st.binary(max_size=64), st.text(max_size=8),
                              st.tuples(st.integers(), st.none())), max_size=6),
    st.sets(st.sampled_from(KEYS), max_size=3),
    st.integers(1, 3)), min_size=1, max_size=40)


@settings(max_examples=60, deadline=None)
@given(ops=_OPS)
def test_memory_folds_read_back_as_a_replay_whatever_the_changes(ops):
    """Any sequence of writes, removals (of keys there or not) and prunes keeping one to three
    versions (the oldest retained never moves back, as the driver's): every retained version
    reads as a plain dict replay, folded or not."""
    store = MemorySnapshotStore("fold-property")
    job = "property"
    model: dict = {}
    states: dict = {}
    horizon = 0  # the oldest retained version; those above it up to the new one cross it
    for version, (changed, removed, kept) in enumerate(ops, start=1):
        removed = removed - set(changed)
        write(store, job, version, changed, removed)
        model.update(changed)
        for key in removed:
            model.pop(key, None)
        states[version] = dict(model)
        crossing = range(horizon + 1, max(horizon, version - kept + 1) + 1)
        horizon = max(horizon, version - kept + 1)
        if horizon:
            store.prune(job, list(crossing), horizon)
        for v in range(max(horizon, 1), version + 1):
            assert read(store, job, v) == states[v]
