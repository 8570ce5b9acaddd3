"""Snapshot-store contract: damaged snapshots are reported with their location on every backend.

Damaged rows, deletion markers, meta and records, and RocksDB chunks damaged byte by byte.
"""

from __future__ import annotations

import attrs
import pytest
from _state_contract import (
    ALL,
    MP,
    ctx_fixture,  # noqa: F401 - the ``ctx`` fixture
    record,
    row,
)
from _stored_state import (
    DAMAGE,
    HEADER,
    check_corrupted,
    chunk_context,
    chunk_key,
    corrupt_meta,
    corrupt_record,
    corrupt_row,
    flip_last,
    outcome,
    parse_chunk,
    rocksdb_databases,
    rocksdb_items,
    rocksdb_key,
    rocksdb_table_dir,
)
from rocksdict import Options, Rdict

from gyreflow.state.backends import (
    RocksDBStateBackend,
)
from gyreflow.state.shared.snapshot import (
    JobMeta,
    SnapshotCorruptedError,
    TaskSnapshot,
    dumps,
)


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


# RocksDB keeps what a version changed in a key group as one chunk (header with authentication tags,
# pickled keys, pickled values). Damage anywhere in a chunk's stored bytes must be reported, never read as a
# different (older, or missing) state; a damaged chunk names its keys when they are intact.


@attrs.frozen
class RocksVictim:
    backend: RocksDBStateBackend
    job: str
    path: str  # the range database holding the victim
    key_group: int
    intact: dict[int, bytes]  # version -> its stored chunk


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
    stored = dict(rocksdb_items(path))
    intact = {v: stored[chunk_key(victim.key_group, v)] for v in (1, 2)}
    return RocksVictim(backend, job, path, victim.key_group, intact)


def damaged_rocksdb_reads(rocks: RocksVictim, version: int,
                          damaged: bytes) -> list[tuple[str, object]]:
    """Store ``damaged`` as the chunk of ``version``; the outcomes of reading versions 1 and 2."""
    db = Rdict(rocks.path, options=Options(raw_mode=True))
    try:
        db[chunk_key(rocks.key_group, version)] = damaged
    finally:
        db.close()
    store = rocks.backend.open_store()
    try:
        return [outcome(lambda v=v: dict(store.read_rows(rocks.job, "t", ALL, v)))
                for v in (1, 2)]
    finally:
        store.close()
        db = Rdict(rocks.path, options=Options(raw_mode=True))
        try:
            db[chunk_key(rocks.key_group, version)] = rocks.intact[version]
        finally:
            db.close()


def rocksdb_findings(outcomes: list) -> list:
    """The reads that neither raised SnapshotCorruptedError nor returned the intact state."""
    expected = [("read", {dumps("victim"): dumps(word)}) for word in ("one", "two")]
    return [(version, got) for version, got, want in zip((1, 2), outcomes, expected, strict=True)
            if got[0] != "corrupted" and got != want]


def test_rocksdb_damage_fixture_reads_intact(rocks):
    key = rocksdb_key(rocks.backend.open_store(), rocks.job)
    assert [parse_chunk(rocks.intact[v], key, chunk_context("t", rocks.key_group, v))
            for v in (1, 2)] == [(["victim"], ["one"], []), (["victim"], ["two"], [])]
    for version in (1, 2):
        assert rocksdb_findings(damaged_rocksdb_reads(rocks, version,
                                                      rocks.intact[version])) == []


KEYS_END = HEADER.size + len(dumps(["victim"]))  # where the pickled keys end in a victim chunk


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("keep", [0, 3, HEADER.size - 1, HEADER.size, KEYS_END - 1, KEYS_END,
                                  KEYS_END + 3, -1],
                         ids=["to-0", "to-3", "in-header", "at-header-end", "in-keys", "at-keys-end",
                              "in-values", "by-1"])
def test_rocksdb_truncated_chunk_is_reported(rocks, keep, version):
    damaged = rocks.intact[version][:keep]
    findings = rocksdb_findings(damaged_rocksdb_reads(rocks, version, damaged))
    assert not findings, (f"chunk of version {version} truncated to {len(damaged)} bytes; "
                          f"(version, outcome) of reads not reported as corrupted: {findings}")


@pytest.mark.parametrize("version", [1, 2])
def test_rocksdb_flipped_bit_anywhere_in_a_chunk_is_reported(rocks, version):
    """Every byte of the chunk: header, keys and values."""
    intact = rocks.intact[version]
    silent = []
    for position in range(len(intact)):
        damaged = intact[:position] + bytes([intact[position] ^ 0x01]) + intact[position + 1:]
        silent += [(position, *finding)
                   for finding in rocksdb_findings(damaged_rocksdb_reads(rocks, version, damaged))]
    assert not silent, (f"single-bit flips in a stored chunk of {len(intact)} bytes went "
                        f"undetected, (position, version, outcome): {silent}")


def test_rocksdb_damaged_values_name_the_keys_of_their_chunk(rocks):
    """Damage after the keys leaves them readable: the report names them, with the key group."""
    damaged = flip_last(rocks.intact[2])
    outcomes = damaged_rocksdb_reads(rocks, 2, damaged)
    assert outcomes[0] == ("read", {dumps("victim"): dumps("one")})  # version 1 never reads it
    kind, message = outcomes[1]
    assert kind == "corrupted", outcomes
    for part in ("rocksdb:", "job=job", "table=t", f"key group={rocks.key_group}", "'victim'",
                 "version=2"):
        assert part in message, (part, message)


@pytest.mark.parametrize("lost", ["c", "n"], ids=["chunk", "count-entry"])
def test_rocksdb_a_chunk_or_its_count_entry_deleted_alone_is_reported(rocks, lost):
    """A chunk and its count entry are written and removed together: the newest chunk of a key
    group deleted alone would restore the older one silently (the count entry alone: the same
    check, the other way round)."""
    slot = chunk_key(rocks.key_group, 2)[1:]
    db = Rdict(rocks.path, options=Options(raw_mode=True))
    try:
        assert lost.encode() + slot in db
        del db[lost.encode() + slot]
    finally:
        db.close()
    store = rocks.backend.open_store()
    try:
        kind, message = outcome(lambda: dict(store.read_rows(rocks.job, "t", ALL, 2)))
    finally:
        store.close()
    assert kind == "corrupted", (kind, message)
    assert f"key group {rocks.key_group} version=2 has lost its" in message, message
