"""Snapshots in a shared checkpoint location: a directory every node mounts, or an object store (fsspec).

What a cluster needs: the driver and every executor reach the same location, and a task restores its key
groups from there on whichever executor takes them. Every stored object is written whole in one step
(an object PUT, or a private temporary file renamed into place), so a reader sees all of it or nothing.
Layout under ``state.checkpoint_url``::

    <job>/meta                                    the job meta
    <job>/state/<table>/kg-A-B/<version>.d        what one version changed in table, key groups A..B-1
    <job>/state/<table>/kg-A-B/<version>.b        a base: the whole range as of that version
    <job>/state/<table>/kg-A-B~W/...              the range set aside when a later layout started it
                                                  afresh (``retire_ranges``), up to version W
    <job>/records/<kind:name:index>/<version>     one task record (a source offset) by version

A snapshot writes one delta per state table of its task, even an empty one: the newest object of a
range says which version the range reached (``verify_reached``). Restoring version ``c`` reads the
newest base at or before ``c`` and the deltas after it up to ``c``. Pruning folds a range's objects at or
before the oldest retained version into one base once there are ``FOLD_AFTER`` of them, then deletes
them: a range is read from a bounded number of objects, and each window's share of the folding is
its range's size divided by ``FOLD_AFTER``, whatever the number of windows. Writing a version again (a
task that Spark ran again) replaces the object with the same content: task re-execution is idempotent.

Every object carries an authentication tag (``state.sealing``) over its place and bytes, checked before
anything is unpickled. The key comes from ``state.secret`` (required for an object store: every
machine must hold it) or, for a directory, from ``<job>.key`` beside the job's folder.

On a Spark executor, the state objects a task writes or reads are also kept in RocksDB on the
executor's own disk (``state.local_copies``), and a restore takes from there each object whose copy
was made from the stored object it lists (see ``state.local_copies``).
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import secrets
import urllib.parse
from collections.abc import Iterator, Sequence

from gyreflow.state.keys.keygroups import short_of
from gyreflow.state.shared.sealing import TAG_SIZE, Seals
from gyreflow.state.shared.snapshot import (
    BackendUnavailableError,
    JobMeta,
    SnapshotCorruptedError,
    SnapshotStore,
    StateChunk,
    TaskSnapshot,
    chunks_of_rows,
    decode_value,
    dumps,
    encode_value,
    make_chunk,
    set_aside_name,
    stored_range,
    unpickle_chunk,
)
from gyreflow.state.stores.checkpoint_format import (
    VERSION_DIGITS,
    chunks_of_object,
    framed_object,
    merged_chunks,
    object_name,
    ordered_objects,
)
from gyreflow.state.stores.checkpoint_location import (
    check_endpoint,
    is_local_url,
    location_failure,
    shown_location,
)
from gyreflow.state.stores.local_copies import LocalCopies, stamp_of

FOLD_AFTER = 8  # objects of a range at or before the horizon folded into one base
def _quote(name: str) -> str:
    return urllib.parse.quote(name, safe="")


class CheckpointSnapshotStore(SnapshotStore):
    """Snapshot storage as whole objects under ``url``, through fsspec."""

    backend_name = "checkpoint"
    by_range = True

    def __init__(self, url: str, secret: str = "", storage_options: dict | None = None,
                 copies_root: str | None = None) -> None:
        import fsspec

        self.url = url.rstrip("/") or url
        options = storage_options or {}
        try:
            self.fs, root = fsspec.core.url_to_fs(self.url, **options)
        except (ImportError, ValueError) as exc:
            msg = f"state.checkpoint_url {shown_location(url)!r} cannot be opened: {shown_location(str(exc))}"
            raise BackendUnavailableError(msg) from exc
        self.root = root.rstrip("/")
        self.local = is_local_url(url)
        key_path = (lambda job: os.path.join(self.root, _quote(job) + ".key")) if self.local else None
        self._seals = Seals(secret, key_path, self.location())
        check_endpoint(self.url, options)
        self._probe(options)
        self.copies = LocalCopies(copies_root, self.url) if copies_root else None

    def _probe(self, options: dict) -> None:
        probe = f"{self.root}/.gyreflow-probe-{secrets.token_hex(6)}"
        try:
            if self.local:
                from gyreflow.state.shared.private import ensure_private_dir

                ensure_private_dir(self.root)
            self.fs.pipe_file(probe, b"ok")
            self.fs.rm_file(probe)
        except Exception as exc:
            raise BackendUnavailableError(location_failure(self.url, exc, options)) from exc

    def location(self) -> str:
        return f"checkpoint:{shown_location(self.url)}"

    # Objects ---------------------------------------------------------------------------------

    def _job(self, job: str) -> str:
        return f"{self.root}/{_quote(job)}"

    def _put_chunks(self, path: str, chunks: list[StateChunk], seal, table: str,
                    version: int) -> None:
        """A state object (``checkpoint_format.framed_object``), and this machine's copy of it."""
        blob = framed_object(chunks, seal, self._context(path), table, version)
        reported = self._put(path, blob, None)
        if self.copies is not None:  # shipped first: a copy is made from what is stored
            with contextlib.suppress(Exception):
                stamp = stamp_of(reported)
                if stamp is None:
                    self.fs.invalidate_cache(path)
                    stamp = stamp_of(self.fs.info(path))
                if stamp is not None:
                    self.copies.put(*self._copy_key(path), stamp, blob)

    def _read_object(self, path: str, table: str, version: int, key_groups: range | None,
                     job: str, stamp: str | None = None) -> list[StateChunk]:
        """The chunks of a state object, of ``key_groups`` only (None: all), each checked; from
        this machine's copy when there is one of the stored object with ``stamp``."""
        copy = self._copy_of(path, stamp)
        if copy is not None:
            try:
                return self._chunks_of(copy, path, table, version, key_groups, job)
            except SnapshotCorruptedError:  # a damaged copy: forgotten, fetched again
                self.copies.forget(*self._copy_key(path))
        try:
            blob = self.fs.cat_file(path)
        except FileNotFoundError:
            msg = f"{self._where(path)} is missing (deleted while it was needed?)"
            raise SnapshotCorruptedError(msg) from None
        chunks = self._chunks_of(blob, path, table, version, key_groups, job)
        if self.copies is not None and stamp is not None:
            self.copies.put(*self._copy_key(path), stamp, blob)
        return chunks

    def _copy_of(self, path: str, stamp: str | None) -> bytes | None:
        if self.copies is None or stamp is None:
            return None
        return self.copies.get(*self._copy_key(path), stamp)

    def _copy_key(self, path: str) -> tuple[str, str]:
        """``(range folder, object name)`` of ``path`` for the local copies."""
        return posixpath.split(posixpath.relpath(path, self.root))

    def _chunks_of(self, blob: bytes, path: str, table: str, version: int,
                   key_groups: range | None, job: str) -> list[StateChunk]:
        return chunks_of_object(blob, self._seals.of(job), self._context(path), table, version,
                                key_groups, f"{self.location()} table={table} version={version}",
                                posixpath.relpath(path, self.root))

    def _put(self, path: str, body: bytes, seal) -> dict:
        """Store ``body`` at ``path`` whole, behind ``seal``'s tag of its place and bytes (None:
        ``body`` carries its own tags); returns what the location reported about the stored
        object, as far as the write told (its stamp fields, see ``state.local_copies``)."""
        blob = body if seal is None else seal.tag(self._context(path), body) + body
        if self.local:  # a private temporary file renamed into place: whole or absent
            directory = os.path.dirname(path)
            os.makedirs(directory, mode=0o700, exist_ok=True)
            temporary = f"{path}.{os.getpid()}-{secrets.token_hex(4)}.tmp"
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(blob)
                    handle.flush()
                    os.fsync(handle.fileno())
                os.replace(temporary, path)
                stored = os.stat(path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temporary)
                raise
            return {"size": stored.st_size, "mtime": stored.st_mtime, "ino": stored.st_ino}
        response = self.fs.pipe_file(path, blob)  # s3fs: the PUT's response, with its ETag
        return {**response, "size": len(blob)} if isinstance(response, dict) else {}

    def _get(self, path: str, seal) -> bytes:
        try:
            blob = self.fs.cat_file(path)
        except FileNotFoundError:
            msg = f"{self._where(path)} is missing (deleted while it was needed?)"
            raise SnapshotCorruptedError(msg) from None
        if len(blob) < TAG_SIZE or not seal.matches(blob[:TAG_SIZE], self._context(path),
                                                    blob[TAG_SIZE:]):
            msg = (f"{self._where(path)} failed its authentication: it was damaged, or written "
                   "without the job's key")
            raise SnapshotCorruptedError(msg)
        return blob[TAG_SIZE:]

    def _context(self, path: str) -> bytes:
        return b"checkpoint\0" + posixpath.relpath(path, self.root).encode()

    def _where(self, path: str) -> str:
        relative = posixpath.relpath(path, self.root)
        parts = relative.split("/")
        if len(parts) == 2 and parts[1] == "meta":
            return f"{self.location()} meta of job {urllib.parse.unquote(parts[0])!r}"
        if len(parts) == 4 and parts[1] == "records":
            return (f"{self.location()} record {urllib.parse.unquote(parts[2])} "
                    f"version={int(parts[3])}")
        return f"{self.location()} object {relative}"

    def _list(self, path: str) -> list[str]:
        """Base names under ``path`` (none when it does not exist), as they are now: fsspec file
        systems cache listings per instance, and instances live as long as the (reused) process,
        so a cached listing would miss what other processes wrote since."""
        self.fs.invalidate_cache(path)
        try:
            return sorted(posixpath.basename(p.rstrip("/")) for p in self.fs.ls(path, detail=False))
        except FileNotFoundError:
            return []

    def _stamped(self, path: str) -> dict[str, str | None]:
        """Base names under ``path`` with the stamp of each stored object (see ``_list``)."""
        self.fs.invalidate_cache(path)
        try:
            entries = self.fs.ls(path, detail=True)
        except FileNotFoundError:
            return {}
        return {posixpath.basename(entry["name"].rstrip("/")): stamp_of(entry) for entry in entries}

    def _paths(self, path: str) -> set[str]:
        return {f"{path}/{name}" for name in self._list(path)}

    def _objects(self, path: str) -> list[tuple[int, str]]:
        """``(version, kind)`` of a range's objects, oldest first (a delta before a base)."""
        return [(version, kind) for version, kind, _ in ordered_objects(self._list(path), {})]

    def _ranges(self, job: str, table: str) -> list[tuple[range, str]]:
        base = f"{self._job(job)}/state/{_quote(table)}"
        out = []
        for name in self._list(base):
            held = stored_range(name)
            if held is not None:
                out.append((held[0], f"{base}/{name}"))
        return out

    # Writing ---------------------------------------------------------------------------------

    def write(self, snapshot: TaskSnapshot) -> None:
        job, version, kgs = snapshot.job, snapshot.version, snapshot.key_groups
        seal = self._seals.of(job, create=True)
        by_table: dict[str, list[StateChunk]] = {table: [] for table in snapshot.tables}
        for chunk in [*snapshot.chunks, *chunks_of_rows(snapshot.rows)]:
            by_table.setdefault(chunk.table, []).append(chunk)
        for table, chunks in by_table.items():
            path = (f"{self._job(job)}/state/{_quote(table)}/kg-{kgs.start}-{kgs.stop}/"
                    f"{object_name(version, 'd')}")
            self.fs.invalidate_cache(path)
            if self.fs.exists(path):  # a version written again: merged into what it wrote
                chunks = merged_chunks([*self._read_object(path, table, version, None, job), *chunks])
            self._put_chunks(path, chunks, seal, table, version)
        for record in snapshot.records:
            self._put(f"{self._record_dir(job, record.kind, record.name, record.index)}/"
                      f"{version:0{VERSION_DIGITS}d}", encode_value(record.value), seal)

    def _record_dir(self, job: str, kind: str, name: str, index: int) -> str:
        return f"{self._job(job)}/records/{_quote(f'{kind}:{name}:{index}')}"

    def commit(self, meta: JobMeta) -> None:
        seal = self._seals.of(meta.job, create=True)
        self._put(f"{self._job(meta.job)}/meta", meta.to_bytes(), seal)

    # Reading ---------------------------------------------------------------------------------

    def _range_chunks(self, path: str, version: int, job: str, table: str,
                      key_groups: range | None = None) -> Iterator[tuple[int, StateChunk]]:
        """``(version, chunk)`` of a range as of ``version``: its newest base, then later deltas."""
        if self.copies is not None:
            stamps = self._stamped(path)
            self.copies.keep_only(posixpath.relpath(path, self.root), set(stamps))
        else:
            stamps = dict.fromkeys(self._list(path))
        objects = [item for item in ordered_objects(stamps, stamps) if item[0] <= version]
        start = max((i for i, (_, kind, _) in enumerate(objects) if kind == "b"), default=0)
        for v, kind, stamp in objects[start:]:
            for chunk in self._read_object(f"{path}/{object_name(v, kind)}", table, v, key_groups, job,
                                           stamp):
                yield v, chunk

    def read_into(self, job: str, table: str, key_groups: range, version: int, data: dict) -> None:
        found = []
        for kgs, path in self._ranges(job, table):
            if kgs.start < key_groups.stop and key_groups.start < kgs.stop:
                found.extend(self._range_chunks(path, version, job, table, key_groups))
        found.sort(key=lambda item: item[0])  # layouts of several parallelisms: oldest first
        for _, chunk in found:
            if chunk.key_group not in key_groups:
                continue
            keys, values = unpickle_chunk(chunk.keys, chunk.values)
            data.update(zip(keys[:chunk.written], values, strict=True))
            for key in keys[chunk.written:]:
                data.pop(key, None)

    def read_rows(self, job: str, table: str, key_groups: range,
                  version: int) -> Iterator[tuple[bytes, bytes]]:
        data: dict = {}
        self.read_into(job, table, key_groups, version, data)
        for key in sorted(data, key=dumps):
            yield dumps(key), dumps(data[key])

    def verify_reached(self, job: str, table: str, key_groups: range, version: int) -> None:
        if version <= 0:
            return
        ranges = self._ranges(job, table)
        if not ranges:
            msg = (f"the state of {self.location()} job={job} table={table} key groups "
                   f"{key_groups.start}-{key_groups.stop - 1} is missing (window {version} was "
                   "completed)")
            raise SnapshotCorruptedError(msg)
        # Every key group needs a range that reached ``version``: the ranges of an older layout
        # stopped at the window before a rescale or rebalance (see ``short_of``).
        reached = [(kgs, max((v for v, _ in self._objects(path)), default=0))
                   for kgs, path in ranges
                   if kgs.start < key_groups.stop and key_groups.start < kgs.stop]
        short = short_of(key_groups, reached, version)
        if short is not None:
            groups, at = short
            msg = (f"the state of {self.location()} job={job} table={table} key groups "
                   f"{groups.start}-{groups.stop - 1} reaches window {at or 'none'} but window "
                   f"{version} was completed: objects are missing from the checkpoint location")
            raise SnapshotCorruptedError(msg)

    def read_record(self, job, kind, name, index, version):
        directory = self._record_dir(job, kind, name, index)
        versions = [int(n) for n in self._list(directory) if n.isdigit()]
        older = [v for v in versions if v <= version]
        if not older:
            return None
        latest = max(older)
        seal = self._seals.of(job)  # only once there is something to check
        path = f"{directory}/{latest:0{VERSION_DIGITS}d}"
        value = decode_value(self._get(path, seal), self._where(path))
        return (latest, value) if value is not None else None

    def read_meta(self, job: str) -> JobMeta | None:
        path = f"{self._job(job)}/meta"
        self.fs.invalidate_cache(path)
        if not self.fs.exists(path):
            return None
        seal = self._seals.of(job)
        return JobMeta.from_bytes(self._get(path, seal), self._where(path))

    # Discarding and pruning ------------------------------------------------------------------

    def _units(self, job: str) -> Iterator[str]:
        """Every range folder and record folder of ``job``."""
        state = f"{self._job(job)}/state"
        for table in self._list(state):
            for name in self._list(f"{state}/{table}"):
                if stored_range(name) is not None:
                    yield f"{state}/{table}/{name}"
        records = f"{self._job(job)}/records"
        for name in self._list(records):
            yield f"{records}/{name}"

    def discard_after(self, job: str, version: int) -> None:
        doomed = []
        for unit in self._units(job):
            for name in self._list(unit):
                digits = name.split(".", 1)[0]
                if digits.isdigit() and int(digits) > version:
                    doomed.append(f"{unit}/{name}")
        if doomed:
            self.fs.rm(doomed)

    def prune(self, job: str, crossing: Sequence[int], horizon: int) -> None:
        for unit in self._units(job):
            if "/records/" in unit:
                versions = [int(n) for n in self._list(unit) if n.isdigit()]
                keep = max((v for v in versions if v <= horizon), default=None)
                old = [f"{unit}/{v:0{VERSION_DIGITS}d}" for v in versions
                       if keep is not None and v < keep]
            else:
                old = self._fold(unit, horizon, job)
            if old:
                self.fs.rm(old)

    def _fold(self, path: str, horizon: int, job: str) -> list[str]:
        """Fold a range's objects at or before ``horizon`` into one base once there are
        ``FOLD_AFTER`` of them; returns the objects the base replaced (to delete)."""
        objects = [(v, kind) for v, kind in self._objects(path) if v <= horizon]
        start = max((i for i, (_, kind) in enumerate(objects) if kind == "b"), default=0)
        superseded = [f"{path}/{object_name(v, kind)}" for v, kind in objects[:start]]
        if len(objects) - start < FOLD_AFTER:
            return superseded
        newest = objects[-1][0]
        table = urllib.parse.unquote(posixpath.basename(posixpath.dirname(path)))
        groups: dict[int, dict] = {}
        for _, chunk in self._range_chunks(path, newest, job, table):
            data = groups.setdefault(chunk.key_group, {})
            keys, values = unpickle_chunk(chunk.keys, chunk.values)
            data.update(zip(keys[:chunk.written], values, strict=True))
            for key in keys[chunk.written:]:
                data.pop(key, None)
        chunks = [make_chunk(table, group, data, []) for group, data in sorted(groups.items())
                  if data]
        self._put_chunks(f"{path}/{object_name(newest, 'b')}", chunks, self._seals.of(job), table, newest)
        return [f"{path}/{object_name(v, kind)}" for v, kind in objects if (v, kind) != (newest, "b")]

    def retire_ranges(self, job: str, version: int, tables: dict[str, set[range]]) -> None:
        # An object's tag covers its place: what is set aside is stored again under its new
        # place, then the range's folder goes (a crash in between leaves the same objects twice,
        # which reads apply twice to the same effect).
        for table, ranges in tables.items():
            for kgs, path in self._ranges(job, table):
                if kgs not in ranges or stored_range(posixpath.basename(path))[1]:
                    continue
                objects = self._objects(path)
                reached = max((v for v, _ in objects), default=0)
                if reached >= version:
                    continue
                aside = posixpath.join(posixpath.dirname(path), set_aside_name(
                    posixpath.basename(path), reached, self._list(posixpath.dirname(path))))
                seal = self._seals.of(job)
                for v, kind in objects:
                    chunks = self._read_object(f"{path}/{object_name(v, kind)}", table, v, None, job)
                    self._put_chunks(f"{aside}/{object_name(v, kind)}", chunks, seal, table, v)
                self.fs.rm(path, recursive=True)

    def drop_other_ranges(self, job: str, table: str, keep: set[range]) -> None:
        # Oldest object first: a kill in the middle leaves the newest part of the range's history,
        # whose every key the new layout's full copy (written later) either holds or overrides;
        # the oldest part alone would bring back keys its newer objects deleted.
        for kgs, path in self._ranges(job, table):
            if kgs not in keep or stored_range(posixpath.basename(path))[1]:
                for version, kind in self._objects(path):
                    self.fs.rm(f"{path}/{object_name(version, kind)}")
                with contextlib.suppress(FileNotFoundError):
                    self.fs.rm(path, recursive=True)

    def delete_job(self, job: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm(self._job(job), recursive=True)
        self._seals.drop(job)

    def jobs(self) -> list[str]:
        return sorted(urllib.parse.unquote(name) for name in self._list(self.root)
                      if f"{self.root}/{name}/meta" in self._paths(f"{self.root}/{name}"))

    def tables(self, job: str) -> list[str]:
        return sorted(urllib.parse.unquote(name) for name in self._list(f"{self._job(job)}/state"))

    def sizes(self, job: str) -> dict[str, int]:
        out: dict[str, int] = {}
        for unit in self._units(job):
            self.fs.invalidate_cache(unit)
            total = sum(self.fs.du(unit, total=False).values()) if self.fs.exists(unit) else 0
            if "/records/" in unit:
                out["records"] = out.get("records", 0) + total
            else:
                table = urllib.parse.unquote(posixpath.basename(posixpath.dirname(unit)))
                out[table] = out.get(table, 0) + total
        return out

    def close(self) -> None:
        if self.copies is not None:
            self.copies.close()

    def lock_job(self, job: str):
        from gyreflow.state.shared.job_lock import FileJobLock, JobLock

        if not self.local:  # an object store has no lock: the job's driver is its one writer
            return JobLock()
        return FileJobLock(os.path.join(self.root, _quote(job) + ".lock"), job, self.location())
