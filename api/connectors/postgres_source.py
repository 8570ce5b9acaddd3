"""PostgresSource: a table read incrementally by a rising column, each row once."""

from __future__ import annotations

import hashlib
import time
from collections import Counter

import attrs

from gyreflow.api.connectors.directory_source import until_idle_default
from gyreflow.api.connectors.postgres_checks import missing_columns
from gyreflow.api.connectors.postgres_tables import (
    check_database,
    check_table,
    database_errors,
    engine_for,
    reflected_table,
    tuple_of,
)
from gyreflow.api.connectors.sources import GrowingInputReader, Source, SourceReader
from gyreflow.runtime.errors import DataError


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
    columns: tuple[str, ...] | None = attrs.field(default=None, converter=tuple_of)
    follow: bool = False
    poll_interval: float = 1.0
    until_idle: float | None = attrs.field(factory=until_idle_default)
    default_parallelism = 1

    def __attrs_post_init__(self) -> None:
        what = f"PostgresSource({self.table})"
        check_database(self.url, what)
        check_table(self.url, self.table, what, lambda engine, table: missing_columns(
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
        with database_errors(source.describe(), source.url):
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
            self.engine = engine_for(self.source.url)
            table = reflected_table(self.engine, self.source.table)
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
