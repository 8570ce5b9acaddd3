"""The JDBC snapshot store: SQLAlchemy over an SQLite file (embedded default) or PostgreSQL.

A snapshot writes one ``gyreflow_state`` row per changed key group and state table: the chunk of
what the version changed there (``state.snapshot.StateChunk``: its keys pickled in one list, its
values in another), in the row's ``v``; its ``k`` is empty (state written by older versions, one row
per key, is refused with a message, not read). Pruning folds the chunks at or before the oldest
retained version of the key groups a crossing version changed into one
(``state.snapshot.worth_folding``): the work follows the change, not the state.

Every value is tagged with the job's key over what identifies it (``state.sealing``). A lost row is
found by counting: ``gyreflow_counts`` holds, per table, key group and version, how many keys the
stored chunk holds (written in the transaction that writes it, replaced by the prune that folds it),
and a restore compares what it read with it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence

import sqlalchemy as sa

from gyreflow.state.shared.private import UnsafeLocationError, ensure_private_dir
from gyreflow.state.shared.sealing import Seals
from gyreflow.state.shared.snapshot import (
    BackendUnavailableError,
    JobMeta,
    SnapshotCorruptedError,
    SnapshotStore,
    StateChunk,
    TaskSnapshot,
    chunk_context,
    chunks_of_rows,
    covers,
    decode_chunk,
    decode_value,
    dumps,
    encode_chunk,
    encode_value,
    merge_chunks,
    record_context,
    unpickle_chunk,
    worth_folding,
)
from gyreflow.state.stores.jdbc_sql import (
    COUNTS,
    META,
    METADATA,
    RECORDS,
    STATE,
    PostgresJobLock,
    count_context,
    in_parts,
    quoted_name,
    sqlite_pragmas,
    upsert_statement,
)
from gyreflow.state.stores.sql_urls import (
    connect_args,
    connection_failure,
    driver_message,
    engine_url,
    shown_url,
    what_to_check,
)

_VACUUM_EVERY = 256  # prunes between two explicit VACUUMs of the PostgreSQL tables


def default_sqlite_url(state_path: str) -> str:
    """The embedded default: an SQLite file under ``state.path``."""
    return f"sqlite:///{os.path.abspath(os.path.join(state_path, 'snapshots.db'))}"


class JdbcSnapshotStore(SnapshotStore):
    """Snapshot storage in three SQL tables; every write is one transaction."""

    backend_name = "jdbc"

    def __init__(self, url: str, secret: str = "") -> None:
        self.url = url
        self._shown = shown_url(url)
        try:
            parsed = engine_url(url)
        except Exception:  # noqa: BLE001 - ArgumentError, or ValueError for a port that is no number
            msg = (f"jdbc backend: state.url {self._shown!r} is not a database URL (expected e.g. "
                   "postgresql://user:password@host:5432/database)")
            raise BackendUnavailableError(msg) from None
        kwargs: dict = {"future": True, "connect_args": connect_args(parsed)}
        try:
            if parsed.get_backend_name() == "sqlite":
                database = parsed.database
                if database and database != ":memory:":
                    ensure_private_dir(os.path.dirname(os.path.abspath(database)))
                kwargs["connect_args"] = {"check_same_thread": False, "timeout": 30}
            self.engine = sa.create_engine(parsed, **kwargs)
            if parsed.get_backend_name() == "sqlite":
                sa.event.listen(self.engine, "connect", sqlite_pragmas)
            conn = self.engine.connect()
        except UnsafeLocationError:
            raise
        except Exception as exc:
            msg = f"jdbc backend (state.url): {connection_failure(url, exc)}"
            raise BackendUnavailableError(msg) from exc
        try:
            with conn, conn.begin():
                if parsed.get_backend_name() == "postgresql":
                    # Two processes creating the tables at once collide in PostgreSQL's catalog:
                    # one creates them, the other then finds them.
                    conn.execute(sa.text("select pg_advisory_xact_lock(7370616)"))
                METADATA.create_all(conn)
            if parsed.get_backend_name() == "sqlite" and database and database != ":memory:":
                os.chmod(database, 0o600)  # SQLite gives its -wal and -shm files the same mode
        except Exception as exc:
            self.engine.dispose()
            check = ("check that the user may create tables there"
                     if parsed.get_backend_name() == "postgresql" else what_to_check(url, exc))
            msg = (f"jdbc backend (state.url): cannot create gyreflow's tables in {self._shown}: "
                   f"{driver_message(url, exc)}; {check}")
            raise BackendUnavailableError(msg) from exc
        self._prunes = 0
        self._vacuum = self.engine.dialect.name == "postgresql"
        self._seals = self._make_seals(parsed, secret)
        self._state_upsert = upsert_statement(self.engine, STATE, ["job", "tbl", "kg", "k", "version"])
        self._record_upsert = upsert_statement(self.engine, RECORDS,
                                               ["job", "kind", "name", "idx", "version"])
        self._meta_upsert = upsert_statement(self.engine, META, ["job"])
        self._count_upsert = upsert_statement(self.engine, COUNTS, ["job", "tbl", "kg", "version"])

    def location(self) -> str:
        return f"jdbc:{self._shown}"

    def _make_seals(self, parsed, secret: str) -> Seals:
        """Keys from ``secret``; without one, an SQLite file keeps each job's key in a file beside
        it (``<database>-keys/<job>.key``) and PostgreSQL refuses (its machines share the state)."""
        database = parsed.database if parsed.get_backend_name() == "sqlite" else None
        if parsed.get_backend_name() == "sqlite" and (not database or database == ":memory:"):
            import secrets

            return Seals(secret or secrets.token_hex(32))  # lives as long as this store
        if database:
            keys = os.path.abspath(database) + "-keys"

            def key_path(job: str) -> str:
                ensure_private_dir(keys)
                return os.path.join(keys, quoted_name(job) + ".key")

            return Seals(secret, key_path, self.location())
        if not secret:
            msg = (f"jdbc backend: {self._shown} is shared by every machine of a job, so its state "
                   "is authenticated with a key derived from state.secret: set state.secret in the "
                   "config file or GYREFLOW_STATE__SECRET in the environment (the same on every "
                   "machine, kept private)")
            raise BackendUnavailableError(msg)
        return Seals(secret, None, self.location())

    def _where(self, job: str, table: str, group: int, version: int) -> str:
        return (f"{self.location()} table gyreflow_state job={job} tbl={table} kg={group} "
                f"version={version}")

    def _decode(self, job: str, table: str, group: int, version: int, k, blob) -> StateChunk:
        if k:
            msg = (f"{self.location()} job={job} holds state in an older layout (one row per key, "
                   "before this version stored a chunk per key group): this version cannot read it; "
                   "run the job with --fresh to start again")
            raise SnapshotCorruptedError(msg)
        return decode_chunk(None if blob is None else bytes(blob), self._where(job, table, group, version),
                            table, group, self._seals.of(job), chunk_context(table, group, version))

    def write(self, snapshot: TaskSnapshot) -> None:
        job, version = snapshot.job, snapshot.version
        seal = self._seals.of(job, create=True)
        chunks = list(snapshot.chunks)
        if snapshot.rows:
            chunks.extend(chunks_of_rows(snapshot.rows))
        records = [{"job": job, "kind": r.kind, "name": r.name, "idx": r.index, "version": version,
                    "v": encode_value(r.value, seal, record_context(r.kind, r.name, r.index, version))}
                   for r in snapshot.records]
        with self.engine.begin() as conn:
            if chunks:
                # A version written again (a retried write) is merged into what it wrote before.
                kgs = snapshot.key_groups
                earlier = {(t, g): self._decode(job, t, g, version, k, v) for t, g, k, v in conn.execute(
                    sa.select(STATE.c.tbl, STATE.c.kg, STATE.c.k, STATE.c.v)
                    .where(STATE.c.job == job, STATE.c.version == version,
                           STATE.c.kg >= kgs.start, STATE.c.kg < kgs.stop))}
                rows, counts = [], []
                for chunk in chunks:
                    slot = (chunk.table, chunk.key_group)
                    if slot in earlier:
                        chunk = merge_chunks(*slot, [earlier[slot], chunk], keep_removed=True)
                    rows.append({"job": job, "tbl": slot[0], "kg": slot[1], "k": b"", "version": version,
                                 "v": encode_chunk(chunk, seal, chunk_context(*slot, version))})
                    counts.append((*slot, version, chunk.count))
                conn.execute(self._state_upsert, rows)
                self._store_counts(conn, job, counts, seal, keep_empty=True)
            if records:
                conn.execute(self._record_upsert, records)

    def _store_counts(self, conn, job: str, counts, seal, keep_empty: bool = False) -> None:
        """Upsert ``(table, key group, version, keys)`` counts; a count of 0 removes its row
        unless ``keep_empty`` (a stored chunk that holds no key)."""
        kept = [{"job": job, "tbl": t, "kg": g, "version": v,
                 "v": encode_value(str(n).encode(), seal, count_context(t, g, v))}
                for t, g, v, n in counts if n or keep_empty]
        if kept:
            conn.execute(self._count_upsert, kept)
        gone = [(t, g, v) for t, g, v, n in counts if not n and not keep_empty]
        for part in in_parts(gone):
            conn.execute(sa.delete(COUNTS).where(
                COUNTS.c.job == job,
                sa.tuple_(COUNTS.c.tbl, COUNTS.c.kg, COUNTS.c.version).in_(part)))

    def read_into(self, job: str, table: str, key_groups: range, version: int, data: dict) -> None:
        query = (
            sa.select(STATE.c.kg, STATE.c.version, STATE.c.k, STATE.c.v)
            .where(STATE.c.job == job, STATE.c.tbl == table, STATE.c.kg >= key_groups.start,
                   STATE.c.kg < key_groups.stop, STATE.c.version <= version)
            .order_by(STATE.c.kg, STATE.c.version)
        )
        seen: dict[tuple[int, int], int] = {}
        with self._damage_reported(), self.engine.connect() as conn:
            result = conn.execution_options(yield_per=256).execute(query)
            # Key groups hold disjoint keys, so chunks are applied straight into ``data``.
            for kg, v, k, blob in result:
                chunk = self._decode(job, table, kg, v, k, blob)
                seen[(kg, v)] = chunk.count
                keys, values = unpickle_chunk(chunk.keys, chunk.values)
                written = chunk.written
                data.update(zip(keys[:written] if len(keys) > written else keys, values, strict=True))
                for key in keys[written:]:
                    data.pop(key, None)
            self._check_counts(conn, job, table, key_groups, version, seen)

    def read_rows(self, job: str, table: str, key_groups: range,
                  version: int) -> Iterator[tuple[bytes, bytes]]:
        data: dict = {}
        self.read_into(job, table, key_groups, version, data)
        for key, value in data.items():
            yield dumps(key), dumps(value)

    def _check_counts(self, conn, job: str, table: str, key_groups: range, version: int,
                      seen: dict[tuple[int, int], int]) -> None:
        """Raise ``SnapshotCorruptedError`` unless the chunks read hold as many keys as were stored."""
        stored = {}
        query = sa.select(COUNTS.c.kg, COUNTS.c.version, COUNTS.c.v).where(
            COUNTS.c.job == job, COUNTS.c.tbl == table, COUNTS.c.kg >= key_groups.start,
            COUNTS.c.kg < key_groups.stop, COUNTS.c.version <= version)
        for kg, v, blob in conn.execute(query):
            where = (f"{self.location()} table gyreflow_counts job={job} tbl={table} kg={kg} "
                     f"version={v}")
            payload = decode_value(bytes(blob), where, self._seals.of(job), count_context(table, kg, v))
            stored[(kg, v)] = int(payload or b"0")
        if stored != seen:
            kg, v = min(slot for slot in stored.keys() | seen.keys()
                        if stored.get(slot) != seen.get(slot))
            written, found = stored.get((kg, v), 0), seen.get((kg, v), 0)
            msg = (f"the state of {self.location()} job={job} table={table} key group {kg} lost rows: "
                   f"{written} key{' was' if written == 1 else 's were'} written at version {v}, "
                   f"{found} {'is' if found == 1 else 'are'} stored (rows deleted or added outside "
                   "gyreflow)")
            raise SnapshotCorruptedError(msg)

    def read_record(self, job, kind, name, index, version):
        query = (
            sa.select(RECORDS.c.version, RECORDS.c.v)
            .where(RECORDS.c.job == job, RECORDS.c.kind == kind, RECORDS.c.name == name,
                   RECORDS.c.idx == index, RECORDS.c.version <= version)
            .order_by(RECORDS.c.version.desc()).limit(1)
        )
        with self._damage_reported(), self.engine.connect() as conn:
            row = conn.execute(query).first()
        if row is None:
            return None
        where = f"{self.location()} table gyreflow_records job={job} {kind}/{name}/{index} version={row[0]}"
        return row[0], decode_value(bytes(row[1]), where, self._seals.of(job),
                                    record_context(kind, name, index, row[0]))

    def read_meta(self, job: str) -> JobMeta | None:
        with self._damage_reported(), self.engine.connect() as conn:
            body = conn.execute(sa.select(META.c.body).where(META.c.job == job)).scalar()
        if body is None:
            return None
        return JobMeta.from_bytes(bytes(body), f"{self.location()} table gyreflow_meta job={job}",
                                  self._seals.of(job), job)

    @contextlib.contextmanager
    def _damage_reported(self):
        """The database's own errors while resuming: a damaged file (SQLite's "database disk image
        is malformed", "file is not a database") as ``SnapshotCorruptedError``, a database that
        cannot be reached or written as ``BackendUnavailableError``; both name the database."""
        try:
            yield
        except sa.exc.OperationalError as exc:
            text = " ".join(str(exc.orig).split())
            if text.startswith("Could not decode to UTF-8"):  # SQLite: a value not as written
                msg = f"database {self.location()} holds a damaged value ({text})"
                raise SnapshotCorruptedError(msg) from None
            msg = f"{self.location()}: {text}"
            raise BackendUnavailableError(msg) from None
        except sa.exc.DatabaseError as exc:
            text = " ".join(str(exc.orig).split())
            msg = f"database {self.location()} is damaged and cannot be read ({text})"
            raise SnapshotCorruptedError(msg) from None

    def lock_job(self, job: str):
        from gyreflow.state.shared.job_lock import FileJobLock

        if self.engine.dialect.name == "postgresql":
            return PostgresJobLock(self, job)
        database = self.engine.url.database
        if not database or database == ":memory:":
            return super().lock_job(job)
        path = os.path.join(os.path.abspath(database) + "-locks", quoted_name(job) + ".lock")
        return FileJobLock(path, job, self.location())

    def commit(self, meta: JobMeta) -> None:
        with self.engine.begin() as conn:
            conn.execute(self._meta_upsert, [{"job": meta.job,
                                              "body": meta.to_bytes(self._seals.of(meta.job, True))}])

    def discard_after(self, job: str, version: int) -> None:
        with self._damage_reported(), self.engine.begin() as conn:
            conn.execute(sa.delete(STATE).where(STATE.c.job == job, STATE.c.version > version))
            conn.execute(sa.delete(COUNTS).where(COUNTS.c.job == job, COUNTS.c.version > version))
            conn.execute(sa.delete(RECORDS).where(RECORDS.c.job == job, RECORDS.c.version > version))

    def prune(self, job: str, crossing: Sequence[int], horizon: int) -> None:
        with self.engine.begin() as conn:
            if crossing:
                self._fold(conn, job, crossing, horizon)
            latest = (
                sa.select(RECORDS.c.kind, RECORDS.c.name, RECORDS.c.idx,
                          sa.func.max(RECORDS.c.version).label("keep"))
                .where(RECORDS.c.job == job, RECORDS.c.version <= horizon)
                .group_by(RECORDS.c.kind, RECORDS.c.name, RECORDS.c.idx)
            )
            for kind, name, idx, keep in conn.execute(latest).all():
                conn.execute(sa.delete(RECORDS).where(
                    RECORDS.c.job == job, RECORDS.c.kind == kind, RECORDS.c.name == name,
                    RECORDS.c.idx == idx, RECORDS.c.version < keep))
        self._vacuum_now_and_then()

    def _fold(self, conn, job: str, crossing: Sequence[int], horizon: int) -> None:
        """Fold the chunks at or before ``horizon`` of the key groups written at a ``crossing``
        version (found through the counts of those versions: O(changed)) where it is worth it."""
        older = COUNTS.alias("older")
        newer = COUNTS.alias("newer")
        join = older.join(newer, sa.and_(older.c.job == newer.c.job, older.c.tbl == newer.c.tbl,
                                         older.c.kg == newer.c.kg))
        seal = self._seals.of(job)
        found: dict[tuple[str, int], dict[int, int]] = {}
        for tbl, kg, v, blob in conn.execute(
                sa.select(older.c.tbl, older.c.kg, older.c.version, older.c.v).distinct()
                .select_from(join)
                .where(newer.c.job == job, newer.c.version.in_(list(crossing)),
                       older.c.version <= horizon)):
            where = f"{self.location()} table gyreflow_counts job={job} tbl={tbl} kg={kg} version={v}"
            found.setdefault((tbl, kg), {})[v] = int(
                decode_value(bytes(blob), where, seal, count_context(tbl, kg, v)) or b"0")
        folds = {slot: sorted(versions) for slot, versions in found.items()
                 if worth_folding(slot[1], [versions[v] for v in sorted(versions)])}
        if not folds:
            return
        wanted = [(t, g, v) for (t, g), versions in folds.items() for v in versions]
        stored = {}
        for part in in_parts(wanted):
            stored.update(((t, g, v), (k, blob)) for t, g, v, k, blob in conn.execute(
                sa.select(STATE.c.tbl, STATE.c.kg, STATE.c.version, STATE.c.k, STATE.c.v)
                .where(STATE.c.job == job,
                       sa.tuple_(STATE.c.tbl, STATE.c.kg, STATE.c.version).in_(part))))
        rows, counts, doomed = [], [], []
        for (table, group), versions in folds.items():
            chunks = [self._decode(job, table, group, v, *stored.get((table, group, v), (b"", None)))
                      for v in versions]
            last = versions[-1]
            if not covers(chunks[-1], chunks[:-1]):
                # The oldest chunk of the key group is among them: a removal has nothing to hide.
                chunk = merge_chunks(table, group, chunks, keep_removed=False)
                rows.append({"job": job, "tbl": table, "kg": group, "k": b"", "version": last,
                             "v": encode_chunk(chunk, seal, chunk_context(table, group, last))})
                counts.append((table, group, last, chunk.count))
            doomed.extend((table, group, v) for v in versions[:-1])
        if rows:
            conn.execute(self._state_upsert, rows)
            self._store_counts(conn, job, counts, seal, keep_empty=True)
        for table in (STATE, COUNTS):
            for part in in_parts(doomed):
                conn.execute(sa.delete(table).where(
                    table.c.job == job, sa.tuple_(table.c.tbl, table.c.kg, table.c.version).in_(part)))

    def _vacuum_now_and_then(self) -> None:
        """PostgreSQL keeps deleted rows until a VACUUM; autovacuum visits a database about once a
        minute, in which a stream of small windows leaves tens of thousands of them. Vacuuming the
        two tables pruning deletes from every ``_VACUUM_EVERY`` prunes keeps their size flat, at a
        cost that follows the (small) live state."""
        self._prunes += 1
        if self._prunes % _VACUUM_EVERY or not self._vacuum:
            return
        try:
            with self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.execute(sa.text("VACUUM gyreflow_state, gyreflow_records, gyreflow_counts"))
        except sa.exc.DBAPIError:
            self._vacuum = False  # not the tables' owner: autovacuum alone keeps them in check

    def delete_job(self, job: str) -> None:
        with self.engine.begin() as conn:
            for table in (META, STATE, RECORDS, COUNTS):
                conn.execute(sa.delete(table).where(table.c.job == job))
        self._seals.drop(job)

    def jobs(self) -> list[str]:
        with self.engine.connect() as conn:
            return sorted(conn.execute(sa.select(META.c.job)).scalars())

    def sizes(self, job: str) -> dict[str, int]:
        size = sa.func.sum(sa.func.length(STATE.c.k) + sa.func.length(STATE.c.v))
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(STATE.c.tbl, size).where(STATE.c.job == job)
                                .group_by(STATE.c.tbl)).all()
            records = conn.execute(sa.select(sa.func.sum(sa.func.length(RECORDS.c.v)))
                                   .where(RECORDS.c.job == job)).scalar()
        sizes = {tbl: int(total or 0) for tbl, total in rows}
        sizes["(records)"] = int(records or 0)
        return sizes

    def close(self) -> None:
        self.engine.dispose()
