"""PostgreSQL connectors: a table read incrementally by a rising column (PostgresSource), and an
exactly-once table sink (PostgresSink)."""

from __future__ import annotations

import itertools
import pickle
from collections.abc import Iterable

import attrs

from gyreflow.api.config.loading import ConfigError
from gyreflow.api.connectors.postgres_checks import key_problem, missing_columns, record_problem
from gyreflow.api.connectors.postgres_source import PostgresSource
from gyreflow.api.connectors.postgres_tables import (
    check_database,
    check_table,
    database_errors,
    engine_for,
    reflected_table,
    tuple_of,
)
from gyreflow.api.connectors.sinks import Sink, SinkWriter
from gyreflow.runtime.errors import DataError

__all__ = ["PostgresSink", "PostgresSource", "check_database"]


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
    key: tuple[str, ...] | None = attrs.field(default=None, converter=tuple_of)
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
        check_table(self.url, self.table, self.describe(), self._table_problem)

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
        with database_errors(self.describe(), self.url), _Bookkeeping(self) as books:
            return [f"{self.table} (window {last}, sink task {task})"
                    for task, last in books.published() if last > window]

    def reset(self) -> None:
        with database_errors(self.describe(), self.url), _Bookkeeping(self) as books:
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

        self.engine = engine_for(self.sink.url)
        self.metadata, self.staged, self.windows, self.targets = _bookkeeping_tables()
        t, sink_id = self.targets, self.sink.sink_id
        with self.engine.begin() as conn:
            if self.engine.dialect.name == "postgresql":
                conn.execute(sa.text("select pg_advisory_xact_lock(7370617)"))
            self.metadata.create_all(conn)
            conn.execute(sa.delete(t).where(t.c.sink == sink_id))
            conn.execute(sa.insert(t).values(sink=sink_id, target=self.sink.table))
        try:
            self.target = reflected_table(self.engine, self.sink.table)
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
                    with database_errors(self.sink.describe(), self.sink.url, number):
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
        return database_errors(self.sink.describe(), self.sink.url, window)

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
