"""PostgreSQL connectors: a table read incrementally by a rising column, and an exactly-once table sink."""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import pickle
import time
from collections import Counter
from collections.abc import Iterable

import attrs

from gyreflow.api.config.loading import ConfigError
from gyreflow.api.connectors.directory_source import until_idle_default
from gyreflow.api.connectors.postgres_checks import key_problem, missing_columns, record_problem
from gyreflow.api.connectors.sinks import Sink, SinkWriter
from gyreflow.api.connectors.sources import GrowingInputReader, Source, SourceReader
from gyreflow.runtime.errors import DataError
from gyreflow.state.stores.sql_urls import (
    connect_args,
    connection_failure,
    driver_message,
    engine_url,
    missing_driver,
    shown_url,
    what_to_check,
)


def _tuple(value) -> tuple[str, ...] | None:
    if value is None:
        return None
    return (value,) if isinstance(value, str) else tuple(value)


def check_database(url: str, what: str) -> None:
    """Refuse before any data moves (``ConfigError``, one line naming ``what``): a URL that is not
    one, a driver that is not installed, a database server that cannot be reached or refuses the
    connection (a wrong password, a database that does not exist), with the password masked. An
    SQLite file has no server to ask."""
    problem = missing_driver(url, what)
    if problem is not None:
        raise ConfigError(problem)
    if engine_url(url).get_backend_name() == "sqlite":
        return
    engine = _engine(url)
    try:
        engine.connect().close()
    except Exception as exc:  # whatever the driver raises, the user fixes the URL
        msg = f"{what}: {connection_failure(url, exc)}"
        raise ConfigError(msg) from exc
    finally:
        engine.dispose()


def _check_table(url: str, name: str, what: str, check) -> None:
    """Refuse before any data moves (``ConfigError``) what ``check(engine, table)`` finds wrong
    with the table ``name`` as it is now (a message, or None); a table that does not exist yet is
    told once the job runs."""
    import sqlalchemy as sa

    engine = _engine(url)
    try:
        try:
            table = _table(engine, name)
        except _MissingTableError:
            return
        problem = check(engine, table)
    except sa.exc.SQLAlchemyError as exc:
        msg = f"{what}: {shown_url(url)}: {driver_message(url, exc)}"
        raise ConfigError(msg) from exc
    finally:
        engine.dispose()
    if problem is not None:
        msg = f"{what}: {problem}"
        raise ConfigError(msg)


class _MissingTableError(DataError):
    """The table a source or sink names does not exist (the message names the table and URL)."""


@contextlib.contextmanager
def _database_errors(what: str, url: str, window: int | None = None):
    """The database's errors while the job runs (a server that went away, a value the table
    refuses, a missing table) as one-line ``DataError``s naming ``what``, the window (when there
    is one) and the URL (password masked); completed windows stay completed."""
    import sqlalchemy as sa

    where = f"{what}: window {window}" if window is not None else what
    try:
        yield
    except _MissingTableError as exc:
        msg = f"{where}: {exc}"
        raise DataError(msg, window) from exc
    except sa.exc.OperationalError as exc:
        msg = f"{where}: {shown_url(url)}: {driver_message(url, exc)}; {what_to_check(url, exc)}"
        raise DataError(msg, window) from exc
    except sa.exc.SQLAlchemyError as exc:
        msg = f"{where}: {shown_url(url)}: {driver_message(url, exc)}"
        raise DataError(msg, window) from exc


def _engine(url: str):
    import sqlalchemy as sa

    return sa.create_engine(engine_url(url), future=True, connect_args=connect_args(url))


def _table(engine, name: str):
    """The table ``name`` (``schema.table`` allowed) as the database describes it."""
    import sqlalchemy as sa

    schema, _, table = name.rpartition(".")
    try:
        return sa.Table(table, sa.MetaData(), autoload_with=engine, schema=schema or None)
    except sa.exc.NoSuchTableError:
        msg = f"table {name!r} does not exist in {engine.url.render_as_string(hide_password=True)}"
        raise _MissingTableError(msg) from None


# Source ---------------------------------------------------------------------------------------------


@attrs.frozen(eq=False)
class PostgresSource(Source):
    """Rows of ``table`` in the order of ``column``, a column whose values only rise (an identity
    or serial key, an insertion timestamp), as dicts of ``columns`` (default: all).

    The offset is the last value of ``column`` read, stored with every snapshot: a resumed job
    goes on after it, so each row is read once. Rows with equal values of ``column`` (a timestamp
    shared by several rows) are read as a group, in a fixed order, so that no window boundary
    splits them apart and loses some; inside a group the offset notes which rows were read, so a
    resume reads the others (and rows added to the group since), never one twice. Rows whose
    ``column`` is NULL are not read. With ``follow=True`` the table is polled every
    ``poll_interval`` seconds for rows added since, until the job is stopped or no row came for
    ``until_idle`` seconds (``gyreflow run --until-idle``). Rows must become visible in ``column``
    order: a transaction that commits a value smaller than one already read is missed. One source
    task reads the table: with a parallelism above 1, task 0 reads it and the others read nothing.
    Any SQLAlchemy URL works; ``postgresql://`` uses psycopg (``pip install 'gyreflow[postgres]'``).
    The database is connected to when the source is made: an unreachable server, a wrong password,
    a missing database, or a ``column`` or ``columns`` the table lacks stops the run there, before
    any data moves.
    """

    url: str
    table: str
    column: str
    columns: tuple[str, ...] | None = attrs.field(default=None, converter=_tuple)
    follow: bool = False
    poll_interval: float = 1.0
    until_idle: float | None = attrs.field(factory=until_idle_default)
    default_parallelism = 1

    def __attrs_post_init__(self) -> None:
        what = f"PostgresSource({self.table})"
        check_database(self.url, what)
        _check_table(self.url, self.table, what, lambda engine, table: missing_columns(
            table, [self.column, *(self.columns or ())]))

    def create_reader(self, task_index: int, parallelism: int) -> SourceReader:
        return _TableReader(self) if task_index == 0 else _NoRows()

    def describe(self) -> str:
        return f"PostgresSource({self.table} by {self.column})"


_ORDER = "__gyreflow_order"  # the order column, selected under this name when not among columns


class _NoRows(SourceReader):
    """The reader of a source task other than the first: the first reads the whole table."""

    def read(self, max_records: int) -> list:
        return []

    @property
    def exhausted(self) -> bool:
        return True

    def offset(self) -> None:
        return None

    def seek(self, offset: object) -> None:
        pass


def _fingerprint(row: dict) -> str:
    """A short digest of a row's values: rows with equal values are interchangeable."""
    return hashlib.blake2b(repr(tuple(row.values())).encode(), digest_size=12).hexdigest()


class _TableReader(GrowingInputReader):
    """Reads rows in ``column`` order after the offset, ``limit`` rows a batch (fewer only at the
    end of the table, which is what ends a bounded read).

    ``last`` is the value up to which every row was read. When a batch would end among rows that
    share one value, that value's rows are fetched as a group, in an order fixed by their contents
    (rows that are equal are interchangeable), and handed out from memory: the offset notes the
    value (``tied``) and the fingerprints of its rows that went out (``taken``), so that a resume
    fetches the group again, leaves out exactly those rows (a row added to the group since is
    read, none twice) and each row is read once.
    """

    def __init__(self, source: PostgresSource) -> None:
        self.source = source
        self.last = None
        self.tied = None
        self.taken: list[str] | int = []  # int: an offset of an earlier version (a position)
        self.group: list | None = None  # rows of ``tied`` not yet handed out (None: to fetch)
        self.engine = None
        self.query = None
        self.ended = False
        self.last_data = time.time()

    def _take(self, limit: int) -> list:
        source = self.source
        with _database_errors(source.describe(), source.url):
            rows = self._rows(limit)
        if source.columns and source.column not in source.columns:
            for row in rows:
                del row[_ORDER]
        return rows

    def _rows(self, limit: int) -> list[dict]:
        out: list[dict] = []
        while len(out) < limit:
            if self.tied is not None:
                if self.group is None:  # resumed inside the group: fetch it again
                    self.group = self._unread(self._group(self.tied))
                handed, self.group = self.group[:limit - len(out)], self.group[limit - len(out):]
                out.extend(handed)
                self.taken.extend(_fingerprint(row) for row in handed)
                if not self.group:
                    self.last, self.tied, self.taken, self.group = self.tied, None, [], None
                continue
            wanted = limit - len(out)
            rows = self._after(self.last, wanted + 1)  # one more: does the batch split a group?
            if len(rows) <= wanted:  # the end of the table (for now)
                out.extend(rows)
                if rows:
                    self.last = self._value(rows[-1])
                break
            boundary = self._value(rows[wanted - 1])
            if self._value(rows[wanted]) != boundary:
                out.extend(rows[:wanted])
                self.last = boundary
                break
            before = [row for row in rows[:wanted] if self._value(row) != boundary]
            out.extend(before)
            if before:
                self.last = self._value(before[-1])
            self.tied, self.taken, self.group = boundary, [], self._group(boundary)
        return out

    def _unread(self, group: list[dict]) -> list[dict]:
        """The rows of ``group`` the offset's ``taken`` does not account for."""
        if isinstance(self.taken, int):  # an offset of an earlier version: a position
            taken, self.taken = self.taken, [_fingerprint(row) for row in group[:self.taken]]
            return group[taken:]
        left = Counter(self.taken)
        unread = []
        for row in group:
            fingerprint = _fingerprint(row)
            if left[fingerprint]:
                left[fingerprint] -= 1
            else:
                unread.append(row)
        return unread

    def _value(self, row: dict):
        source = self.source
        return row[_ORDER if source.columns and source.column not in source.columns else source.column]

    def _select(self):
        """The query of every row with a value of ``column`` (NULL has no place in the order)."""
        import sqlalchemy as sa

        if self.engine is None:
            self.engine = _engine(self.source.url)
            table = _table(self.engine, self.source.table)
            problem = missing_columns(table, [self.source.column, *(self.source.columns or ())])
            if problem is not None:
                msg = f"{self.source.describe()}: {problem}"
                raise DataError(msg)
            order = table.c[self.source.column]
            chosen = [table.c[c] for c in self.source.columns] if self.source.columns else [table]
            query = sa.select(*chosen)
            if self.source.columns and self.source.column not in self.source.columns:
                query = query.add_columns(order.label(_ORDER))
            self.query = (query.where(order.is_not(None)), order)
        return self.query

    def _after(self, last, limit: int) -> list[dict]:
        query, order = self._select()
        if last is not None:
            query = query.where(order > last)
        with self.engine.connect() as conn:
            return [dict(row._mapping) for row in conn.execute(query.order_by(order).limit(limit))]

    def _group(self, value) -> list[dict]:
        query, order = self._select()
        with self.engine.connect() as conn:
            rows = [dict(row._mapping) for row in conn.execute(query.where(order == value))]
        return sorted(rows, key=lambda row: repr(tuple(row.values())))

    def offset(self) -> dict:
        taken = self.taken if isinstance(self.taken, int) else list(self.taken)
        return {"last": self.last, "tied": self.tied, "taken": taken, "idle_since": self.last_data}

    def seek(self, offset: object) -> None:
        offset = dict(offset) if offset else {}
        self.last = offset.get("last")
        self.tied = offset.get("tied")
        self.taken = offset.get("taken", [])
        self.group = None
        self.last_data = offset.get("idle_since", time.time())
        self.ended = False

    def close(self) -> None:
        if self.engine is not None:
            self.engine.dispose()
            self.engine = None


# Sink -----------------------------------------------------------------------------------------------


@attrs.frozen(eq=False)
class PostgresSink(Sink):
    """Writes dict records into ``table`` exactly once: each window is staged in the database when
    it ends and written into ``table`` in one transaction together with the window id, once the
    window is completed, so a resumed job neither loses nor repeats rows.

    With ``key`` (a column or columns with a unique constraint) rows are upserted; without it they
    are appended, and ``window_column`` (when not None) receives the window id. A column a record
    leaves out is not written: an appended row gets the column's default (NULL without one), an
    upserted row that exists keeps its value. Records are checked against the table when their
    window ends, before it is completed, so a record the table refuses can be fixed and its window
    computed again with ``--resume``. A start from nothing (``--fresh``) deletes the rows the sink
    appended (every row with a window id) and a resume ``--from-window N`` those of windows after
    N; ``sink_column`` (a column that receives ``name``) keeps those deletes to the sink's own rows
    when several sinks append to one table (without it such a delete is refused). Bookkeeping
    lives in the tables ``gyreflow_sink_staged``, ``gyreflow_sink_windows`` and
    ``gyreflow_sink_targets``, under ``name`` (default: the table).
    """

    url: str
    table: str
    key: tuple[str, ...] | None = attrs.field(default=None, converter=_tuple)
    window_column: str | None = "window_id"
    name: str | None = None
    sink_column: str | None = None
    default_parallelism = 1

    def __attrs_post_init__(self) -> None:
        check_database(self.url, f"PostgresSink({self.table})")
        if self.key and self.sink_column:
            msg = (f"{self.describe()}: sink_column marks the rows a sink appends; an upsert by "
                   "key deletes none: leave it out")
            raise ConfigError(msg)
        _check_table(self.url, self.table, self.describe(), self._table_problem)

    def _table_problem(self, engine, table) -> str | None:
        """What keeps the sink from writing into ``table`` whatever the records."""
        if self.key:
            return key_problem(engine, table, self.key)
        return missing_columns(table, [c for c in (self.window_column, self.sink_column) if c])

    @property
    def sink_id(self) -> str:
        return self.name or self.table

    def create_writer(self, task_index: int, parallelism: int) -> SinkWriter:
        return _TableWriter(self, task_index, parallelism)

    def published_after(self, window: int, parallelism: int) -> list[str]:
        with _database_errors(self.describe(), self.url), _Bookkeeping(self) as books:
            return [f"{self.table} (window {last}, sink task {task})"
                    for task, last in books.published() if last > window]

    def reset(self) -> None:
        with _database_errors(self.describe(), self.url), _Bookkeeping(self) as books:
            books.take_back(0, refused=ConfigError)

    def describe(self) -> str:
        mode = f"upsert by {', '.join(self.key)}" if self.key else "append"
        return f"PostgresSink({self.table}, {mode})"


def _bookkeeping_tables():
    import sqlalchemy as sa

    metadata = sa.MetaData()
    staged = sa.Table(
        "gyreflow_sink_staged", metadata,
        sa.Column("sink", sa.String(512), primary_key=True),
        sa.Column("task", sa.Integer, primary_key=True),
        sa.Column("window", sa.BigInteger, primary_key=True),
        sa.Column("records", sa.LargeBinary, nullable=False),
    )
    windows = sa.Table(
        "gyreflow_sink_windows", metadata,
        sa.Column("sink", sa.String(512), primary_key=True),
        sa.Column("task", sa.Integer, primary_key=True),
        sa.Column("published", sa.BigInteger, nullable=False),
    )
    targets = sa.Table(  # the table each sink writes: who else a delete of appended rows hits
        "gyreflow_sink_targets", metadata,
        sa.Column("sink", sa.String(512), primary_key=True),
        sa.Column("target", sa.String(512), nullable=False),
    )
    return metadata, staged, windows, targets


class _Bookkeeping:
    """The sink's staged windows and published window ids, in the target database."""

    def __init__(self, sink: PostgresSink) -> None:
        self.sink = sink

    def __enter__(self) -> _Bookkeeping:
        import sqlalchemy as sa

        self.engine = _engine(self.sink.url)
        self.metadata, self.staged, self.windows, self.targets = _bookkeeping_tables()
        t, sink_id = self.targets, self.sink.sink_id
        with self.engine.begin() as conn:
            if self.engine.dialect.name == "postgresql":
                conn.execute(sa.text("select pg_advisory_xact_lock(7370617)"))
            self.metadata.create_all(conn)
            conn.execute(sa.delete(t).where(t.c.sink == sink_id))
            conn.execute(sa.insert(t).values(sink=sink_id, target=self.sink.table))
        try:
            self.target = _table(self.engine, self.sink.table)
        except BaseException:
            self.engine.dispose()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.engine.dispose()

    def published(self) -> list[tuple[int, int]]:
        import sqlalchemy as sa

        w = self.windows
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(w.c.task, w.c.published).where(w.c.sink == self.sink.sink_id))
            return [(task, last) for task, last in rows]

    def stage(self, task: int, window: int, records: list) -> None:
        import sqlalchemy as sa

        s = self.staged
        blob = pickle.dumps(records, protocol=5)
        with self.engine.begin() as conn:
            mine = (s.c.sink == self.sink.sink_id) & (s.c.task == task) & (s.c.window == window)
            conn.execute(sa.delete(s).where(mine))  # a task that ran again stages anew
            conn.execute(sa.insert(s).values(sink=self.sink.sink_id, task=task, window=window,
                                             records=blob))

    def publish(self, tasks: Iterable[int], window: int) -> None:
        """In one transaction per task: write the staged windows after the task's last published
        one, up to ``window``, into the table, drop them from staging, note ``window``."""
        import sqlalchemy as sa

        s, w = self.staged, self.windows
        for task in tasks:
            with self.engine.begin() as conn:
                mine = (w.c.sink == self.sink.sink_id) & (w.c.task == task)
                last = conn.execute(sa.select(w.c.published).where(mine)
                                    .with_for_update()).scalar()
                if last is not None and last >= window:
                    continue
                staged = (s.c.sink == self.sink.sink_id) & (s.c.task == task)
                due = staged & (s.c.window > (last or 0)) & (s.c.window <= window)
                for number, blob in conn.execute(sa.select(s.c.window, s.c.records).where(due)
                                                 .order_by(s.c.window)).all():
                    with _database_errors(self.sink.describe(), self.sink.url, number):
                        self._write(conn, number, pickle.loads(blob))
                conn.execute(sa.delete(s).where(staged & (s.c.window <= window)))
                if last is None:
                    conn.execute(sa.insert(w).values(sink=self.sink.sink_id, task=task,
                                                     published=window))
                else:
                    conn.execute(sa.update(w).where(mine).values(published=window))

    def rows(self, window: int, records: list) -> list[dict]:
        """The rows ``records`` of ``window`` make (the window and sink columns added); a record
        the table would refuse stops the job (``DataError`` naming the sink, window and record)."""
        sink, dialect = self.sink, self.engine.dialect.name
        rows = []
        for record in records:
            row = dict(record) if isinstance(record, dict) else record
            if isinstance(row, dict) and sink.key is None:
                if sink.window_column is not None:
                    row[sink.window_column] = window
                if sink.sink_column is not None:
                    row[sink.sink_column] = sink.sink_id
            problem = record_problem(self.target, dialect, sink.key, row)
            if problem is not None:
                msg = f"{sink.describe()}: window {window}: {problem} (record {record!r:.200})"
                raise DataError(msg, window)
            rows.append(row)
        return rows

    def _write(self, conn, window: int, records: list) -> None:
        """Write the rows of ``records``: a column a record leaves out is not written (its
        default, or the value an upserted row has)."""
        if not records:
            return
        target, sink = self.target, self.sink
        rows = self.rows(window, records)
        if sink.key is None:  # one statement per run of rows with the same columns, in order
            for _, run in itertools.groupby(rows, key=frozenset):
                conn.execute(target.insert(), list(run))
            return
        dialect = conn.dialect.name
        if dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import insert
        elif dialect == "sqlite":
            from sqlalchemy.dialects.sqlite import insert
        else:
            msg = f"{sink.describe()}: upsert is supported on PostgreSQL and SQLite, not {dialect}"
            raise DataError(msg, window)
        latest: dict[tuple, dict] = {}  # records of one key in order: a later value wins
        for row in rows:
            key = tuple(row[k] for k in sink.key)
            latest[key] = {**latest.get(key, {}), **row}
        by_columns: dict[frozenset, list[dict]] = {}
        for row in latest.values():
            by_columns.setdefault(frozenset(row), []).append(row)
        for columns, group in by_columns.items():
            statement = insert(target)
            updates = {c: statement.excluded[c] for c in columns if c not in sink.key}
            statement = (statement.on_conflict_do_update(index_elements=list(sink.key),
                                                         set_=updates)
                         if updates else
                         statement.on_conflict_do_nothing(index_elements=list(sink.key)))
            conn.execute(statement, group)

    def take_back(self, window: int, tasks: Iterable[int] | None = None,
                  refused: type[Exception] = DataError) -> None:
        """Forget what was staged after ``window``; the rows the sink appended in later windows are
        deleted and the published window ids set back to ``window``. A delete that could not tell
        the sink's rows from those of another sink on the table raises ``refused``."""
        import sqlalchemy as sa

        s, w, sink = self.staged, self.windows, self.sink
        with self.engine.begin() as conn:
            staged = (s.c.sink == sink.sink_id) & (s.c.window > window)
            noted = (w.c.sink == sink.sink_id) & (w.c.published > window)
            if tasks is not None:
                staged &= s.c.task.in_(list(tasks))
                noted &= w.c.task.in_(list(tasks))
            conn.execute(sa.delete(s).where(staged))
            later = conn.execute(sa.select(w.c.task).where(noted)).scalars().all()
            if later and sink.key is None and sink.window_column is not None:
                mine = self.target.c[sink.window_column] > window
                if sink.sink_column is not None:
                    mine &= self.target.c[sink.sink_column] == sink.sink_id
                else:
                    self._refuse_shared(conn, window, refused)
                conn.execute(sa.delete(self.target).where(mine))
            if later:
                conn.execute(sa.update(w).where(noted).values(published=window))


    def _refuse_shared(self, conn, window: int, refused: type[Exception]) -> None:
        """Raise ``refused`` when other sinks write the table too: their rows have window ids."""
        import sqlalchemy as sa

        t, sink = self.targets, self.sink
        others = conn.execute(sa.select(t.c.sink).where((t.c.target == sink.table)
                                                        & (t.c.sink != sink.sink_id))
                              .order_by(t.c.sink)).scalars().all()
        if others:
            msg = (f"{sink.describe()}: cannot delete the rows it appended after window {window}: "
                   f"the sinks {', '.join(map(repr, others))} write table {sink.table!r} too, and "
                   "nothing tells their rows from this one's; give each sink on the table a "
                   "sink_column (a column that receives its name), or a table of its own; nothing "
                   "was deleted")
            raise refused(msg)


class _TableWriter(SinkWriter):
    def __init__(self, sink: PostgresSink, task_index: int, parallelism: int) -> None:
        self.sink = sink
        self.task = task_index
        self.parallelism = parallelism
        self.pending: dict[int, list] = {}
        self.books: _Bookkeeping | None = None

    def _books(self) -> _Bookkeeping:
        if self.books is None:
            self.books = _Bookkeeping(self.sink).__enter__()
        return self.books

    def _tasks(self) -> list[int]:
        """This task, and for task 0 those of an earlier run with more sink tasks."""
        if self.task != 0:
            return [self.task]
        books = self._books()
        earlier = {task for task, _ in books.published()} | {
            task for (task,) in _staged_tasks(books)}
        return [0, *sorted(t for t in earlier if t >= self.parallelism)]

    def write(self, window: int, records: list) -> None:
        self.pending.setdefault(window, []).extend(records)

    def finish_window(self, window: int) -> None:
        """Check the window's records against the table, then stage them: a record the table
        refuses stops the job before the window is completed, so ``--resume`` computes it again."""
        records = self.pending.pop(window, [])
        with self._database_errors(window):
            books = self._books()
            books.rows(window, records)
            books.stage(self.task, window, records)

    def publish(self, window: int) -> None:
        with self._database_errors(window):
            self._books().publish(self._tasks(), window)

    def recover(self, window: int) -> None:
        with self._database_errors(window):
            books = self._books()
            tasks = self._tasks()
            books.take_back(window, tasks)
            books.publish(tasks, window)

    def _database_errors(self, window: int):
        return _database_errors(self.sink.describe(), self.sink.url, window)

    def close(self) -> None:
        self.pending.clear()
        if self.books is not None:
            self.books.__exit__(None, None, None)
            self.books = None


def _staged_tasks(books: _Bookkeeping) -> list[tuple[int]]:
    import sqlalchemy as sa

    s = books.staged
    with books.engine.connect() as conn:
        return list(conn.execute(sa.select(s.c.task).where(s.c.sink == books.sink.sink_id)
                                 .distinct()))
