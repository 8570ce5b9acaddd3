"""The JDBC store's SQL: its tables, the upsert of SQLite and PostgreSQL, PostgreSQL's advisory job
lock, SQLite's pragmas, the contexts its counts are sealed with, and which database failures are
transient (a database away for a while) rather than a refusal or damage."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import sqlalchemy as sa

from gyreflow.state.shared.snapshot import BackendUnavailableError

if TYPE_CHECKING:
    from gyreflow.state.stores.jdbc import JdbcSnapshotStore

METADATA = sa.MetaData()
META = sa.Table(
    "gyreflow_meta", METADATA,
    sa.Column("job", sa.String(512), primary_key=True),
    sa.Column("body", sa.LargeBinary, nullable=False),
)
STATE = sa.Table(
    "gyreflow_state", METADATA,
    sa.Column("job", sa.String(512), primary_key=True),
    sa.Column("tbl", sa.String(512), primary_key=True),
    sa.Column("kg", sa.Integer, primary_key=True),
    sa.Column("k", sa.LargeBinary, primary_key=True),
    sa.Column("version", sa.BigInteger, primary_key=True),
    sa.Column("v", sa.LargeBinary, nullable=False),
    sa.Index("gyreflow_state_by_version", "job", "version"),
)
LOCKS = sa.Table(
    "gyreflow_locks", METADATA,
    sa.Column("job", sa.String(512), primary_key=True),
    sa.Column("holder", sa.String(1024), nullable=False),
)
COUNTS = sa.Table(
    "gyreflow_counts", METADATA,
    sa.Column("job", sa.String(512), primary_key=True),
    sa.Column("tbl", sa.String(512), primary_key=True),
    sa.Column("kg", sa.Integer, primary_key=True),
    sa.Column("version", sa.BigInteger, primary_key=True),
    sa.Column("v", sa.LargeBinary, nullable=False),
    sa.Index("gyreflow_counts_by_version", "job", "version"),
)
RECORDS = sa.Table(
    "gyreflow_records", METADATA,
    sa.Column("job", sa.String(512), primary_key=True),
    sa.Column("kind", sa.String(64), primary_key=True),
    sa.Column("name", sa.String(512), primary_key=True),
    sa.Column("idx", sa.Integer, primary_key=True),
    sa.Column("version", sa.BigInteger, primary_key=True),
    sa.Column("v", sa.LargeBinary, nullable=False),
)


def upsert_statement(engine: sa.Engine, table: sa.Table, keys: list[str]):
    """An INSERT that replaces the row with the same primary key (SQLite and PostgreSQL)."""
    if engine.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    elif engine.dialect.name == "sqlite":
        from sqlalchemy.dialects.sqlite import insert
    else:
        msg = f"jdbc backend supports sqlite and postgresql URLs, not {engine.dialect.name}"
        raise BackendUnavailableError(msg)
    statement = insert(table)
    values = {c.name: statement.excluded[c.name] for c in table.columns if c.name not in keys}
    return statement.on_conflict_do_update(index_elements=keys, set_=values)


class PostgresJobLock:
    """A session advisory lock on a connection kept open for the run (released by the server if
    the process dies), with the holder's description in ``gyreflow_locks``."""

    def __init__(self, store: JdbcSnapshotStore, job: str) -> None:
        from gyreflow.state.shared.job_lock import JobLockedError, advisory_key, holder_info, locked_message

        self.key = advisory_key(job)
        self.conn = store.engine.connect()
        try:
            taken = self.conn.execute(sa.text("select pg_try_advisory_lock(:k)"), {"k": self.key})
            if not taken.scalar():
                body = self.conn.execute(sa.select(LOCKS.c.holder).where(LOCKS.c.job == job)).scalar()
                self.conn.rollback()
                holder = json.loads(body) if body else None
                raise JobLockedError(locked_message(job, store.location(), holder))
            upsert = upsert_statement(store.engine, LOCKS, ["job"])
            self.conn.execute(upsert, [{"job": job, "holder": json.dumps(holder_info())}])
            self.conn.commit()
        except BaseException:
            self.conn.close()
            raise

    def release(self) -> None:
        if self.conn is None:
            return
        try:
            self.conn.execute(sa.text("select pg_advisory_unlock(:k)"), {"k": self.key})
            self.conn.commit()
        except sa.exc.SQLAlchemyError:
            pass  # the connection is gone: so is the lock
        finally:
            self.conn.close()
            self.conn = None


def quoted_name(name: str) -> str:
    import urllib.parse

    return urllib.parse.quote(name, safe="")


def sqlite_pragmas(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def in_parts(items: list, size: int = 500) -> list[list]:
    """``items`` in lists of at most ``size``: an IN list of tuples binds three values per item, and
    SQLite binds at most 32,766 in one statement."""
    return [items[i:i + size] for i in range(0, len(items), size)]


def count_context(table: str, key_group: int, version: int) -> bytes:
    return f"count\0{table}\0{key_group}\0{version}".encode()


# A database that is away for a while (restarting, its network down, busy) says so in these words;
# one that refuses the job or holds damaged state in the second list, which wins.
_AWAY = ("connection refused", "could not connect", "server closed the connection",
         "terminating connection", "connection reset", "timed out", "timeout expired",
         "the database system is starting up", "the database system is shutting down",
         "the database system is in recovery mode", "database is locked", "connection is closed",
         "connection was closed", "connection is lost", "broken pipe", "no route to host",
         "network is unreachable", "consuming input failed", "adminshutdown",
         "too many clients", "cannot connect now", "the connection to the server was lost",
         # the driver's class for errors of the database's operation rather than of the request
         "operationalerror")
_REFUSED = ("authentication", "password", "pg_hba.conf", "does not exist", "permission denied",
            "must be owner", "malformed", "not a database", "corrupt", "damaged", "checksum",
            "tampered", "no such table", "no such column", "readonly database", "read-only")


def transient_failure(error: BaseException) -> bool:
    """Whether ``error`` (or what caused it) says the database is away for a while: connection
    refused or dropped, a timeout, a server starting up or shutting down, SQLite's busy lock, any
    other operational error of the driver; not a refusal (authentication, permissions, a missing
    database or table, a read-only database) nor damage. Words, not types: a snapshot writer in
    another process reports its store's error as text. A failure taken for transient that is not
    costs the restart attempts, then stops the job as before.

    >>> transient_failure(RuntimeError("write failed: OperationalError: (psycopg.errors."
    ...                                "AdminShutdown) terminating connection due to administrator command"))
    True
    >>> transient_failure(RuntimeError('connection to server at "db" failed: FATAL: password '
    ...                                'authentication failed for user "app"'))
    False
    """
    texts = []
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        texts.append(f"{type(error).__name__}: {error}".lower())
        error = getattr(error, "cause", None) or error.__cause__ or error.__context__
    text = " ".join(texts)
    return any(word in text for word in _AWAY) and not any(word in text for word in _REFUSED)
