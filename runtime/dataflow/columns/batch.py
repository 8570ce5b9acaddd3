"""Columnar batches: a batch of records as Arrow columns, kept columnar through gyreflow's own operators.

A source that yields columns (``ArrowSource``, ``DirectorySource(format="parquet", columnar=True)``)
emits ``ColumnBatch`` objects instead of lists of records. The operators gyreflow defines on columns
(``key_by(column)`` routing, ``count()``) work on the arrays; every other operator, and every user
function, sees the batch as rows (one ``dict`` per record, as the row readers give them), converted
once, where the first such operator takes it (``rows_into``). Between processes a column batch
travels as one Arrow IPC stream, not one pickle per record.

pyarrow is imported when a column batch is first built, so that jobs without columns do not pay for
it.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from gyreflow.runtime.errors import DataError

# The columns of event time a timestamp operator adds to a batch (time/event_columns.py): the time, the
# watermark before the row, the source task and the number of source tasks.
STAMP_COLUMNS = ("__gyreflow_ts", "__gyreflow_watermark", "__gyreflow_source",
                 "__gyreflow_sources")


def _pyarrow():
    import pyarrow

    return pyarrow


def compute(function: str, *args):
    """Arrow's compute function ``function`` applied to ``args`` (default options), called
    through pyarrow._compute: pyarrow.compute, which wraps every function in Python when it is
    imported, costs six times as much to import (30 ms, a tenth of a small job's start-up)."""
    try:
        from pyarrow._compute import call_function
    except ImportError:  # a pyarrow that keeps it elsewhere
        from pyarrow.compute import call_function
    return call_function(function, list(args))


class ColumnBatch:
    """Records as one Arrow record batch; ``len`` is its number of rows.

    >>> import pyarrow as pa
    >>> batch = ColumnBatch(pa.record_batch({"word": ["a", "b"], "n": [1, 2]}))
    >>> len(batch), batch.rows()
    (2, [{'word': 'a', 'n': 1}, {'word': 'b', 'n': 2}])
    """

    __slots__ = ("data",)

    def __init__(self, data) -> None:
        self.data = data  # a pyarrow.RecordBatch

    @classmethod
    def of(cls, data) -> ColumnBatch:
        """A column batch of a ``pyarrow.RecordBatch`` or ``pyarrow.Table`` (its chunks joined)."""
        pa = _pyarrow()
        if isinstance(data, pa.Table):
            data = data.combine_chunks().to_batches()
            data = data[0] if data else None
        if data is None:
            return cls(pa.record_batch({}))
        if not isinstance(data, pa.RecordBatch):
            msg = f"a column batch holds a pyarrow RecordBatch or Table, not {type(data).__name__}"
            raise TypeError(msg)
        return cls(data)

    def __len__(self) -> int:
        return self.data.num_rows

    def __bool__(self) -> bool:
        return self.data.num_rows > 0

    def rows(self) -> list[dict]:
        """The records as dicts, column name -> value; a value Python cannot hold exactly (a
        nanosecond timestamp) raises a DataError naming the columns. A batch stamped with event
        time gives the row path's ``(ts, watermark, source, sources, record)`` items."""
        if self.data.schema.get_field_index(STAMP_COLUMNS[0]) >= 0:
            return self._stamped_items()
        try:
            return self.data.to_pylist()
        except (ValueError, TypeError, OverflowError) as exc:
            msg = (f"a column batch (columns {', '.join(self.data.schema.names)}) cannot be given "
                   f"to a user function as rows: {exc}; select the columns it needs "
                   "(DirectorySource(columns=...)) or convert them before it")
            raise DataError(msg) from None

    def _stamped_items(self) -> list:
        """A stamped batch as the row path's items ``(ts, watermark, source, sources, record)``."""
        data = self.data
        stamps = [data.column(data.schema.get_field_index(name)).to_pylist()
                  for name in STAMP_COLUMNS]
        for name in STAMP_COLUMNS:
            data = data.remove_column(data.schema.get_field_index(name))
        return list(zip(*stamps, ColumnBatch(data).rows(), strict=True))

    def __iter__(self):
        return iter(self.rows())

    def __getitem__(self, index):
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                return self.rows()[index]
            return ColumnBatch(self.data.slice(start, max(0, stop - start)))
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        return self.data.slice(index, 1).to_pylist()[0]

    def column(self, name: str):
        """The Arrow array of column ``name``; a KeyError names the columns there are."""
        return column_of(self.data, name)

    def take(self, indices) -> ColumnBatch:
        """The rows at ``indices`` (an integer array), in that order."""
        return ColumnBatch(self.data.take(indices))

    def extend(self, more) -> None:
        """Append the rows of ``more`` (a column batch, or an empty list at the end of input)."""
        if not more:
            return
        if not isinstance(more, ColumnBatch):
            msg = f"cannot append {type(more).__name__} records to a column batch"
            raise TypeError(msg)
        self.data = concat([self, more]).data

    def __eq__(self, other) -> bool:
        return isinstance(other, ColumnBatch) and self.data.equals(other.data)

    __hash__ = None

    def __repr__(self) -> str:
        return f"ColumnBatch({len(self)} rows: {', '.join(self.data.schema.names)})"

    def __reduce__(self):
        return (_from_ipc, (to_ipc(self),))


def column_of(data, name: str, what: str = ""):
    """Column ``name`` of the record batch ``data``; a KeyError names ``what`` asked for it (e.g.
    ``col('price')``) and the columns there are."""
    index = data.schema.get_field_index(name)
    if index < 0:
        asked = f"{what}: " if what else ""
        msg = f"{asked}no column {name!r} in a batch with columns {data.schema.names}"
        raise KeyError(msg)
    return data.column(index)


def value_of(row, name: str, what: str):
    """``row[name]``; a KeyError names ``what`` asked for it (e.g. ``key_by('word')``)."""
    try:
        return row[name]
    except (KeyError, IndexError, TypeError) as exc:
        msg = f"{what}: the record has no column {name!r}"
        raise KeyError(msg) from exc


def to_ipc(batch: ColumnBatch) -> bytes:
    """``batch`` as one Arrow IPC stream (what crosses a process boundary)."""
    pa = _pyarrow()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.data.schema) as writer:
        writer.write_batch(batch.data)
    return sink.getvalue().to_pybytes()


def _from_ipc(data: bytes) -> ColumnBatch:
    pa = _pyarrow()
    with pa.ipc.open_stream(data) as reader:
        batches = list(reader)
        schema = reader.schema
    if not batches:
        return ColumnBatch(pa.RecordBatch.from_pylist([], schema=schema))
    return ColumnBatch(batches[0] if len(batches) == 1 else
                       pa.Table.from_batches(batches).combine_chunks().to_batches()[0])


def concat(batches: list[ColumnBatch]) -> ColumnBatch:
    """One batch of the rows of ``batches`` in order; columns that differ in type are promoted
    (an integer column and a float one become float), a column missing from a batch is null there."""
    pa = _pyarrow()
    tables = [pa.Table.from_batches([b.data]) for b in batches if len(b)]
    if not tables:
        return batches[0] if batches else ColumnBatch(pa.record_batch({}))
    if len(tables) == 1:
        return ColumnBatch(tables[0].to_batches()[0])
    table = pa.concat_tables(tables, promote_options="permissive").combine_chunks()
    return ColumnBatch(table.to_batches()[0])


def join_batches(first, more):
    """``first`` followed by ``more``: two lists, or two column batches (or one of them empty)."""
    if not more:
        return first
    if not first:
        return more
    if type(first) is ColumnBatch or type(more) is ColumnBatch:
        if type(first) is not ColumnBatch or type(more) is not ColumnBatch:
            msg = "a source gave column batches and lists of records in one window"
            raise TypeError(msg)
        return concat([first, more])
    return first + more


def as_record_batch(value):
    """``value`` as one ``pyarrow.RecordBatch``: a RecordBatch, a Table, or a mapping of column
    name -> sequence or numpy array."""
    pa = _pyarrow()
    if isinstance(value, pa.RecordBatch):
        return value
    if isinstance(value, pa.Table):
        return ColumnBatch.of(value).data
    if isinstance(value, dict):
        return pa.record_batch(value)
    msg = ("a columnar source yields pyarrow RecordBatches, Tables or dicts of column name -> "
           f"array, not {type(value).__name__}")
    raise TypeError(msg)


def rows_of(batch):
    """``batch`` as a list of records: a column batch as dicts, a list as it is."""
    return batch.rows() if type(batch) is ColumnBatch else batch


@attrs.frozen
class Column:
    """The key function of ``key_by("name")``: a record's value in column ``name``.

    On a column batch the routing and ``count()`` read the column as an array; on a row (a dict,
    as column batches and the CSV, JSON-lines and Parquet readers give them) it is ``row[name]``.

    >>> Column("word")({"word": "a", "n": 1})
    'a'
    """

    name: str

    def __call__(self, record):
        return value_of(record, self.name, f"key_by({self.name!r})")


def encode_keys(batch: ColumnBatch, key: Column) -> tuple[list, object]:
    """The distinct values of column ``key`` in ``batch`` (Python values, as the row path sees them;
    a null is None) and, per row, the index of its value among them (a numpy array): what keyed
    routing and counting work from."""
    import numpy as np

    array = batch.column(key.name)
    pa = _pyarrow()
    if pa.types.is_dictionary(array.type):  # only the codes this batch uses, once each
        import pyarrow.compute as pc

        codes = array.indices
        codes = np.asarray(pc.fill_null(codes, -1) if codes.null_count else codes)
        used, inverse = np.unique(codes, return_inverse=True)
        keys = array.dictionary.take(pa.array(used[used >= 0])).to_pylist()
        if len(used) and used[0] < 0:  # nulls: the code -1 sorts first
            keys.insert(0, None)
        return keys, inverse
    encoded = compute("dictionary_encode", array)  # Array.dictionary_encode: pyarrow.compute
    keys = encoded.dictionary.to_pylist()
    indices = encoded.indices
    if indices.null_count:  # a null key is a key like any other (None), as in the row path
        import pyarrow.compute as pc

        keys.append(None)
        indices = pc.fill_null(indices, len(keys) - 1)
    return keys, np.asarray(indices)


class PendingCounts:
    """Key columns of column batches waiting to be counted: counted together, in C, when the window
    ends (or every ``FOLD_ROWS`` rows), so the Python work per window is per distinct key, not per
    batch and key."""

    FOLD_ROWS = 1 << 22

    __slots__ = ("arrays", "rows")

    def __init__(self) -> None:
        self.arrays: list = []
        self.rows = 0

    def add(self, batch: ColumnBatch, key: Column, into: dict) -> None:
        """Take the key column of ``batch`` (a KeyError names the columns there are)."""
        array = batch.column(key.name)
        if self.arrays and array.type != self.arrays[0].type:
            self.fold(into)  # a later batch of another type (int, then float): counted apart
        self.arrays.append(array)
        self.rows += len(array)
        if self.rows >= self.FOLD_ROWS:
            self.fold(into)

    def fold(self, into: dict) -> None:
        """Add the counts of the columns taken so far into ``into`` (key -> count)."""
        if not self.arrays:
            return
        pa = _pyarrow()
        counted = pa.chunked_array(self.arrays).value_counts()
        self.arrays, self.rows = [], 0
        values = counted.field("values").to_pylist()
        counts = counted.field("counts").to_pylist()
        get = into.get
        for value, n in zip(values, counts, strict=True):
            into[value] = get(value, 0) + n


def rows_into(process: Callable) -> Callable:
    """``process`` behind a conversion: a column batch reaches it as a list of dicts, once."""

    def take(batch) -> None:
        process(batch.rows() if type(batch) is ColumnBatch else batch)

    return take


AGGREGATIONS = ("sum", "min", "max", "mean")


class ColumnAggregate:
    """The aggregate function of ``sum``/``min``/``max``/``mean`` of one column per key.

    On rows (dicts) it runs as any ``AggregateFunction``; on a column batch keyed by a column,
    ``add_columns`` aggregates the whole batch per key in Arrow (``Table.group_by``). A null value
    is skipped, as SQL's aggregates skip it: the sum of none is 0, the minimum, maximum and mean of
    none are None. Integer sums are exact (Python's integers): a batch whose sum could leave 64 bits
    is summed as 38-digit decimals.

    >>> mean = ColumnAggregate("mean", "x")
    >>> acc = mean.add(mean.add(mean.init(), {"x": 2}), {"x": None})
    >>> mean.result(mean.merge(acc, mean.add(mean.init(), {"x": 4})))
    3.0
    """

    __slots__ = ("column", "kind")

    def __init__(self, kind: str, column: str) -> None:
        if kind not in AGGREGATIONS:
            msg = f"an aggregation of a column is one of {', '.join(AGGREGATIONS)}, not {kind!r}"
            raise ValueError(msg)
        if not isinstance(column, str):
            msg = f"{kind}(column) takes a column name, got {type(column).__name__}"
            raise TypeError(msg)
        self.kind = kind
        self.column = column

    def __repr__(self) -> str:
        return f"{self.kind}({self.column!r})"

    def init(self):
        return (0, 0) if self.kind == "mean" else (0 if self.kind == "sum" else None)

    def add(self, accumulator, record):
        value = value_of(record, self.column, f"{self.kind}({self.column!r})")
        if value is None:
            return accumulator
        return self.merge(accumulator, (value, 1) if self.kind == "mean" else value)

    def merge(self, left, right):
        kind = self.kind
        if kind == "sum":
            return left + right
        if kind == "mean":
            return (left[0] + right[0], left[1] + right[1])
        if left is None or right is None:
            return right if left is None else left
        if kind == "min":
            return right if right < left else left
        return right if right > left else left

    def result(self, accumulator):
        if self.kind == "mean":
            total, count = accumulator
            return total / count if count else None
        return accumulator

    def add_columns(self, batch: ColumnBatch, key: Column) -> dict:
        """``{key: accumulator}`` of the rows of ``batch``, aggregated in Arrow."""
        import pyarrow.compute as pc

        pa = _pyarrow()
        values = self.exact_values(batch.column(self.column))
        table = pa.table({"key": batch.column(key.name), "value": values})
        every = pc.ScalarAggregateOptions(min_count=0)
        if self.kind == "mean":
            grouped = table.group_by("key").aggregate([("value", "sum", every), ("value", "count")])
            sums, counts = grouped["value_sum"].to_pylist(), grouped["value_count"].to_pylist()
            accumulators = [(exact(s), c) for s, c in zip(sums, counts, strict=True)]
        else:
            spec = ("value", "sum", every) if self.kind == "sum" else ("value", self.kind)
            grouped = table.group_by("key").aggregate([spec])
            accumulators = [exact(v) for v in grouped[f"value_{self.kind}"].to_pylist()]
        return dict(zip(grouped["key"].to_pylist(), accumulators, strict=True))

    def exact_values(self, values):
        """``values`` (an Arrow array) ready to be summed exactly: integers whose sum could leave
        64 bits as 38-digit decimals."""
        import pyarrow.compute as pc

        pa = _pyarrow()
        if self.kind in ("sum", "mean") and pa.types.is_integer(values.type) and len(values):
            bounds = pc.min_max(values)
            largest = max(abs(bounds["min"].as_py() or 0), abs(bounds["max"].as_py() or 0))
            if largest * len(values) >= 1 << 63:
                values = values.cast(pa.decimal128(38, 0))
        return values


def exact(value):
    """A decimal sum of integers back as an int."""
    from decimal import Decimal

    return int(value) if type(value) is Decimal else value
