"""The RocksDB snapshot store (rocksdict): one database per state table and key-group range, on disk.

Layout under ``state.path``::

    <job>/meta                      the job meta (written by the process that commits)
    <job>/records/<kind:name:index> one task's records, e.g. a source task's offsets by version
    <job>/state/<table>/kg-A-B      chunks of one table for key groups A..B-1 (one writing task)
    <job>/state/<table>/kg-A-B~W    the same range set aside when a later layout started it
                                    afresh (``retire_ranges``): an older layout's, up to version W

Within a range database, ``c + key group + version`` holds a chunk: what the version changed in the key
group, its keys pickled in one list and its values in another (see ``state.snapshot.StateChunk``),
framed with authentication tags under the job's key (``state.sealing``: ``<job>.key`` beside the
job's directory unless ``state.secret`` is set). ``n + key group + version`` holds the chunk's key
count, so that pruning can plan without reading chunks. A snapshot writes one chunk per changed key
group: its cost follows the change.
Restoring a key group unpickles its chunks in version order, one ``loads`` per list, not per key.

Pruning folds the chunks a retained version can no longer tell apart (those at or before the oldest
retained version) into one, once the later ones hold as many keys as the oldest (each written key is
rewritten a bounded number of times on average) or once there are 32 to 63 of them (so a key group is
restored from a bounded number of chunks).

A database is opened read-write only by the process that runs the task owning its range (or the one
that commits and prunes); readers open it read-only, so tasks in several processes can restore from
the same ranges of an old layout after a resume with another parallelism. Writes go through RocksDB's
write-ahead log (not synced: what a write acknowledges survives the death of the process, and a
snapshot is a few large values, so reopening replays little).
"""

from __future__ import annotations

import os
import shutil
import urllib.parse
from collections.abc import Iterator, Sequence

from rocksdict import Rdict, WriteBatch, WriteOptions

from gyreflow.state.keys.keygroups import short_of
from gyreflow.state.shared.private import ensure_private_dir
from gyreflow.state.shared.sealing import Seals
from gyreflow.state.shared.snapshot import (
    BackendUnavailableError,
    JobMeta,
    SnapshotCorruptedError,
    SnapshotStore,
    StateChunk,
    TaskSnapshot,
    chunks_of_rows,
    covers,
    decode_value,
    dumps,
    encode_value,
    merge_chunks,
    record_context,
    set_aside_name,
    stored_range,
    unpickle_chunk,
)
from gyreflow.state.stores.rocksdb_databases import RocksDBDatabases
from gyreflow.state.stores.rocksdb_format import (
    CHUNK,
    COUNT,
    META_KEY,
    SLOT,
    STATS,
    VERSION,
    WATERMARK,
    DamagedChunkError,
    chunk_of_stored,
    damage_reported,
    framed_chunk,
    mark_context,
    mark_version,
    note_chunk,
    quoted_name,
    scan,
    stored_chunk_context,
    unframed_chunk,
)

# Chunks at or before the horizon that get folded whatever their sizes: 32 to 63, by key group, so
# that key groups changing at the same pace are not all rewritten by the same prune.
_FOLD_LIMIT, _FOLD_SPREAD = 32, 32


class RocksDBSnapshotStore(SnapshotStore):
    """Snapshot storage in rocksdict databases under ``path``."""

    backend_name = "rocksdb"
    by_range = True

    def __init__(self, path: str, sync: bool = False, secret: str = "") -> None:
        self.path = os.path.abspath(path)
        try:
            ensure_private_dir(self.path)
            probe = os.path.join(self.path, f".gyreflow-write-probe-{os.getpid()}-{id(self)}")
            with open(probe, "w") as handle:
                handle.write("ok")
            os.unlink(probe)
        except OSError as exc:
            msg = f"rocksdb backend: state.path {self.path!r} is not a writable directory ({exc})"
            raise BackendUnavailableError(msg) from exc
        self._sync = WriteOptions()
        self._sync.sync = True
        self._write_options = self._sync if sync else WriteOptions()
        self._seals = Seals(secret, lambda job: os.path.join(self.path, quoted_name(job) + ".key"),
                            self.location())
        self._databases = RocksDBDatabases(self.path)

    def location(self) -> str:
        return f"rocksdb:{self.path}"

    # Databases -----------------------------------------------------------------------------

    def _open(self, path: str, write: bool = True) -> Rdict | None:
        return self._databases.open(path, write)

    def _table_dir(self, job: str, table: str) -> str:
        return self._databases.table_dir(job, table)

    def _damaged(self, job: str, table: str, key_group: int, version: int,
                 damage: DamagedChunkError) -> SnapshotCorruptedError:
        keys = ""
        if damage.keys is not None:
            shown = ", ".join(repr(k) for k in damage.keys[:5])
            more = f" and {len(damage.keys) - 5} more" if len(damage.keys) > 5 else ""
            keys = f" key={shown}{more}" if len(damage.keys) == 1 else f" keys={shown}{more}"
        msg = (f"snapshot chunk damaged (authentication tag or framing) at {self.location()} job={job} "
               f"table={table} key group={key_group}{keys} version={version}")
        return SnapshotCorruptedError(msg)

    # Writing -------------------------------------------------------------------------------

    def write(self, snapshot: TaskSnapshot) -> None:
        version = snapshot.version
        job = snapshot.job
        by_table: dict[str, dict[int, list[StateChunk]]] = {}
        for chunk in snapshot.chunks:
            by_table.setdefault(chunk.table, {}).setdefault(chunk.key_group, []).append(chunk)
        if snapshot.rows:
            for chunk in chunks_of_rows(snapshot.rows):
                by_table.setdefault(chunk.table, {}).setdefault(chunk.key_group, []).append(chunk)
        for table in snapshot.tables:
            by_table.setdefault(table, {})
        kgs = snapshot.key_groups
        seal = self._seals.of(job, create=True)
        for table, groups in by_table.items():
            db = self._open(os.path.join(self._table_dir(job, table), f"kg-{kgs.start}-{kgs.stop}"))
            slots = [SLOT.pack(group, version) for group in groups]
            # The watermark only moves forward: a late write of an older version (a task that was
            # built again elsewhere, on Spark) must not pull it back.
            context = mark_context(table, kgs)
            mark = db.get(WATERMARK)
            if (mark_version(mark, seal, context) or 0) < version:
                mark = VERSION.pack(version) + seal.tag(context, VERSION.pack(version))
            if not slots:
                # Nothing changed: the watermark alone says the version reached this database.
                db.put(WATERMARK, mark, self._write_options)
                continue
            # A version written again (a retried write) is merged into what it wrote before. Its
            # small count entries say whether there is one: looking up the chunks themselves would
            # read the blocks of the key groups' large older chunks next to them.
            earlier = [None] * len(slots)
            again = [i for i, count in enumerate(db.get([STATS + slot for slot in slots]))
                     if count is not None]
            if again:
                for i, stored in zip(again, db.get([CHUNK + slots[i] for i in again]), strict=True):
                    earlier[i] = stored if stored is not None else b""
            batch = WriteBatch(raw_mode=True)
            path = os.path.join(self._table_dir(job, table), f"kg-{kgs.start}-{kgs.stop}")
            stats = self._databases.stats(path, db)
            for (group, chunks), slot, stored in zip(groups.items(), slots, earlier, strict=True):
                if stored is not None:
                    try:
                        chunks = [chunk_of_stored(table, group, stored, seal, version), *chunks]
                    except DamagedChunkError as damage:
                        raise self._damaged(job, table, group, version, damage) from None
                chunk = chunks[0] if len(chunks) == 1 else merge_chunks(table, group, chunks, True)
                batch.put(CHUNK + slot, framed_chunk(chunk, seal, version))
                batch.put(STATS + slot, COUNT.pack(chunk.count))
                note_chunk(stats, group, version, chunk.count)
            batch.put(WATERMARK, mark)
            db.write(batch, self._write_options)
        for record in snapshot.records:
            db = self._open(self._databases.record_path(job, record.kind, record.name, record.index))
            context = record_context(record.kind, record.name, record.index, version)
            db.put(VERSION.pack(version), encode_value(record.value, seal, context),
                   self._write_options)

    def lock_job(self, job: str):
        from gyreflow.state.shared.job_lock import FileJobLock

        return FileJobLock(os.path.join(self.path, quoted_name(job) + ".lock"), job, self.location())

    def commit(self, meta: JobMeta) -> None:
        blob = meta.to_bytes(self._seals.of(meta.job, create=True))
        self._open(self._databases.meta_path(meta.job)).put(META_KEY, blob, self._sync)

    # Reading -------------------------------------------------------------------------------

    def _chunks(self, job: str, table: str, key_groups: range,
                version: int) -> Iterator[tuple[int, int, bytes]]:
        """``(key group, version, stored chunk)`` of ``table`` in ``key_groups`` up to ``version``,
        by key group then version, merged over the ranges of every layout."""
        start, stop = SLOT.pack(key_groups.start, 0), SLOT.pack(key_groups.stop, 0)
        found = []
        paths = self._databases.range_paths(job, table, key_groups)
        for _, _, path in paths:
            db = self._open(path, write=False)
            if db is None:
                continue
            chunks = set()
            for key, value in scan(db, CHUNK, start, stop):
                group, v = SLOT.unpack_from(key, 1)
                if v <= version:
                    found.append((group, v, value))
                    chunks.add(key[1:])
            # Each chunk is written and removed with its count entry, in one batch: one without
            # the other was deleted behind the store's back.
            counted = {key[1:] for key, _ in scan(db, STATS, start, stop)
                       if SLOT.unpack_from(key, 1)[1] <= version}
            if chunks != counted:
                slot = min(chunks ^ counted)
                group, v = SLOT.unpack(slot)
                lost = "count entry" if slot in chunks else "chunk"
                msg = (f"the state of {self.location()} job={job} table={table} key group {group} "
                       f"version={v} has lost its {lost} (window {version} was completed)")
                raise SnapshotCorruptedError(msg)
        if len(paths) > 1:
            found.sort(key=lambda item: (item[0], item[1]))
        return found

    def read_into(self, job: str, table: str, key_groups: range, version: int, data: dict) -> None:
        # Key groups hold disjoint keys, so chunks are applied straight into ``data``.
        with damage_reported(self._table_dir(job, table)):
            chunks = self._chunks(job, table, key_groups, version)
        seal = self._seals.of(job) if chunks else None
        for group, v, blob in chunks:
            try:
                written, _, keys, values = unframed_chunk(blob, seal, stored_chunk_context(table, group, v))
            except DamagedChunkError as damage:
                raise self._damaged(job, table, group, v, damage) from None
            keys, values = unpickle_chunk(keys, values)
            data.update(zip(keys[:written] if len(keys) > written else keys, values, strict=True))
            for key in keys[written:]:
                data.pop(key, None)

    def verify_reached(self, job: str, table: str, key_groups: range, version: int) -> None:
        """Every snapshot writes a watermark into each of its task's table databases, in the same
        atomic batch as its chunks: restoring ``version`` needs, for every key group, a database of
        ``table`` holding it that reached ``version`` (the layout that wrote the window; the
        databases of an older layout stopped at the window before a rescale or rebalance). A
        database whose log was lost, or that was deleted, is refused here instead of restoring
        silently less state."""
        if version <= 0:
            return
        with damage_reported(self._table_dir(job, table)):
            self._verify_reached(job, table, key_groups, version)

    def _verify_reached(self, job: str, table: str, key_groups: range, version: int) -> None:
        paths = self._databases.range_paths(job, table, key_groups)
        if not paths:
            msg = (f"the state of {self.location()} job={job} table={table} key groups "
                   f"{key_groups.start}-{key_groups.stop - 1} is missing (window {version} was "
                   "completed)")
            raise SnapshotCorruptedError(msg)
        reached = []
        for _, kgs, path in paths:
            db = self._open(path, write=False)
            mark = db.get(WATERMARK) if db is not None else None
            reached.append((kgs, mark_version(mark, self._seals.of(job),
                                               mark_context(table, kgs)) or 0))
        short = short_of(key_groups, reached, version)
        if short is not None:
            groups, at = short
            msg = (f"the state of {self.location()} job={job} table={table} key groups "
                   f"{groups.start}-{groups.stop - 1} reaches window {at or 'none'} but window "
                   f"{version} was completed: its database lost writes (a deleted or damaged "
                   "log?) and is missing from the snapshot")
            raise SnapshotCorruptedError(msg)

    def read_rows(self, job: str, table: str, key_groups: range,
                  version: int) -> Iterator[tuple[bytes, bytes]]:
        data: dict = {}
        self.read_into(job, table, key_groups, version, data)
        for key, value in data.items():
            yield dumps(key), dumps(value)

    def read_record(self, job, kind, name, index, version):
        db = self._open(self._databases.record_path(job, kind, name, index), write=False)
        if db is None:
            return None
        found = None
        with damage_reported(self._databases.record_path(job, kind, name, index)):
            for key, value in db.items(from_key=VERSION.pack(version), backwards=True):
                found = (VERSION.unpack(key)[0], value)  # the latest version at or before it
                break
        if found is None:
            return None
        where = f"{self.location()} job={job} record={kind}/{name}/{index} version={found[0]}"
        return found[0], decode_value(found[1], where, self._seals.of(job),
                                      record_context(kind, name, index, found[0]))

    def read_meta(self, job: str) -> JobMeta | None:
        db = self._open(self._databases.meta_path(job), write=False)
        if db is None:
            return None
        with damage_reported(self._databases.meta_path(job)):
            blob = db.get(META_KEY)
        if blob is None:
            return None
        return JobMeta.from_bytes(blob, f"{self.location()} job={job} meta", self._seals.of(job), job)

    # Maintenance ---------------------------------------------------------------------------

    def discard_after(self, job: str, version: int) -> None:
        for table, kgs, path in self._databases.range_paths(job):
            db = self._open(path)
            batch = WriteBatch(raw_mode=True)
            dropped = False
            # The watermark comes back to ``version`` too: it says which windows the database
            # holds, and a layout that stops writing it must not seem to have gone further.
            context = mark_context(table, kgs)
            if (mark_version(db.get(WATERMARK), self._seals.of(job), context) or 0) > version:
                mark = VERSION.pack(version)
                batch.put(WATERMARK, mark + self._seals.of(job).tag(context, mark))
                dropped = True
            for group, versions in self._databases.stats(path, db).items():
                for v, _ in versions:
                    if v > version:
                        slot = SLOT.pack(group, v)
                        batch.delete(CHUNK + slot)
                        batch.delete(STATS + slot)
                        dropped = True
                versions[:] = [(v, count) for v, count in versions if v <= version]
            if dropped:
                db.write(batch, self._sync)
        for path in self._databases.record_paths(job):
            self._open(path).delete_range(VERSION.pack(version + 1), b"\xff" * (VERSION.size + 1))

    def prune(self, job: str, crossing: Sequence[int], horizon: int) -> None:
        # Every resume is to a retained version, all at or after the horizon: the chunks at or before
        # it are only ever read together, so they can become one.
        ranges = self._databases.range_paths(job)
        layouts: dict[str, list[range]] = {}
        for table, kgs, _ in ranges:
            layouts.setdefault(table, []).append(kgs)
        for table, kgs, path in ranges:
            db = self._open(path)
            batch = WriteBatch(raw_mode=True)
            folded = False
            for group, versions in self._databases.stats(path, db).items():
                old = [(v, count) for v, count in versions if v <= horizon]
                if len(old) < 2:
                    continue
                later = sum(count for _, count in old[1:])
                if later < old[0][1] and len(old) < _FOLD_LIMIT + group * 7 % _FOLD_SPREAD:
                    continue  # folding would rewrite more than what was written since
                # A deletion must stay while another layout may hold an older value of the key.
                shadows = any(group in other for other in layouts[table] if other != kgs)
                slots = [SLOT.pack(group, v) for v, _ in old]
                chunks = []
                seal = self._seals.of(job)
                for (v, _), blob in zip(old, db.get([CHUNK + s for s in slots]), strict=True):
                    try:
                        chunks.append(chunk_of_stored(table, group, blob, seal, v))
                    except DamagedChunkError as damage:
                        raise self._damaged(job, table, group, v, damage) from None
                for slot in slots[:-1]:
                    batch.delete(CHUNK + slot)
                    batch.delete(STATS + slot)
                folded = True
                count = chunks[-1].count
                if not covers(chunks[-1], chunks[:-1]):
                    chunk = merge_chunks(table, group, chunks, shadows)
                    batch.put(CHUNK + slots[-1], framed_chunk(chunk, seal, old[-1][0]))
                    batch.put(STATS + slots[-1], COUNT.pack(chunk.count))
                    count = chunk.count
                versions[:] = [(old[-1][0], count), *versions[len(old):]]
            if folded:
                db.write(batch, self._write_options)
        self._prune_records(job, horizon)

    def _prune_records(self, job: str, horizon: int) -> None:
        for path in self._databases.record_paths(job):
            db = self._open(path)
            keep = next(iter(db.keys(from_key=VERSION.pack(horizon), backwards=True)), None)
            if keep is None:
                continue
            # Point deletes from the oldest version still held: a scan from the start would walk
            # over the deletions of every earlier prune.
            batch = WriteBatch(raw_mode=True)
            for key in db.keys(from_key=self._databases.record_floor.get(path, VERSION.pack(0))):
                if key >= keep:
                    break
                batch.delete(key)
            db.write(batch, self._write_options)
            self._databases.record_floor[path] = keep

    def retire_ranges(self, job: str, version: int, tables: dict[str, set[range]]) -> None:
        for table, ranges in tables.items():
            seal = None
            for _, kgs, path in self._databases.range_paths(job, table):
                if kgs not in ranges or stored_range(os.path.basename(path))[1]:
                    continue
                seal = seal or self._seals.of(job)
                db = self._open(path, write=False)
                reached = (mark_version(db.get(WATERMARK), seal, mark_context(table, kgs)) or 0
                           if db is not None else 0)
                if reached >= version:
                    continue
                aside = os.path.join(os.path.dirname(path), set_aside_name(
                    os.path.basename(path), reached, os.listdir(os.path.dirname(path))))
                self._databases.forget(path)
                os.rename(path, aside)  # one step: the database is in one place or the other

    def drop_other_ranges(self, job: str, table: str, keep: set[range]) -> None:
        """Delete the databases of ``table`` whose range is not in ``keep`` (the old layout after a
        resume with another parallelism, once the new layout holds a full copy), and the ones
        ``retire_ranges`` set aside."""
        table_dir = self._table_dir(job, table)
        for _, kgs, path in self._databases.range_paths(job, table):
            if kgs in keep and not stored_range(os.path.basename(path))[1]:
                continue
            self._databases.forget(path)
            # Out of the way in one step first: a kill in the middle of deleting files must not
            # leave a range database that is half there (read as state, or refused as damaged).
            doomed = f"{path}.dropped"
            shutil.rmtree(doomed, ignore_errors=True)
            os.rename(path, doomed)
        if os.path.isdir(table_dir):  # this drop's, and any an earlier run was killed in
            for name in os.listdir(table_dir):
                if name.endswith(".dropped"):
                    shutil.rmtree(os.path.join(table_dir, name), ignore_errors=True)

    def delete_job(self, job: str) -> None:
        self._databases.forget_job(job)
        # The meta goes first: a deletion cut short leaves a job without meta (a fresh start, which
        # clears the rest), never a meta whose state is half gone.
        shutil.rmtree(self._databases.meta_path(job), ignore_errors=True)
        self._seals.drop(job)
        shutil.rmtree(self._databases.job_dir(job), ignore_errors=True)

    def jobs(self) -> list[str]:
        if not os.path.isdir(self.path):
            return []
        names = []
        for quoted in sorted(os.listdir(self.path)):
            job = urllib.parse.unquote(quoted)
            if not os.path.isdir(os.path.join(self.path, quoted, "meta")):
                continue
            try:
                if self.read_meta(job):
                    names.append(job)
            except SnapshotCorruptedError:  # a job all the same: reading its meta tells what broke
                names.append(job)
        return names

    def tables(self, job: str) -> list[str]:
        return sorted({table for table, _, _ in self._databases.range_paths(job)})

    def sizes(self, job: str) -> dict[str, int]:
        sizes: dict[str, int] = {}
        for table, kgs, path in self._databases.range_paths(job):
            db = self._open(path, write=False)
            total = sum(len(k) + len(v) for k, v in scan(db, CHUNK)) if db is not None else 0
            sizes[f"{table} [{kgs.start}-{kgs.stop - 1}]"] = total
        readers = [self._open(path, write=False) for path in self._databases.record_paths(job)]
        sizes["(records)"] = sum(len(k) + len(v) for db in readers if db is not None
                                 for k, v in db.items())
        return sizes

    def close(self) -> None:
        self._databases.close()
