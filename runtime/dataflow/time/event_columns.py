"""Event time on column batches: timestamps and the watermark before each row as arrays, and the
tumbling and sliding window assignment and per-window aggregation of a whole batch in Arrow.

The rules are the row path's (``event_time.py``), row for row: a row's watermark is the largest
time its source task saw before it minus the allowed delay; a row joins each of its windows that
the watermark before it has not passed, and is late when it joins none. A stamped batch carries
the record's own columns plus four of gyreflow's (``STAMP_COLUMNS``), so that it can be routed
by a key column and cross processes as one Arrow batch.
"""

from __future__ import annotations

from gyreflow.runtime.dataflow.columns.batch import (
    STAMP_COLUMNS,
    Column,
    ColumnBatch,
    encode_keys,
    value_of,
)
from gyreflow.runtime.dataflow.time.window_grid import LIMIT, end_of

TS, WATERMARK, SOURCE, SOURCES = STAMP_COLUMNS
_NOTHING = object()


class EventColumn(Column):
    """The key of a stamped record: column ``name`` of the record, whether it travels as a row
    ``(ts, watermark, source, sources, record)`` or in a stamped column batch (routed by the
    column itself)."""

    def __call__(self, item):
        return value_of(item[4], self.name, f"key_by({self.name!r})")


def timestamp_seconds(batch: ColumnBatch, name: str):
    """Column ``name`` as seconds in a float64 numpy array, or None when its type is read row by
    row (naive timestamps are local time there, text is an error there); a null is NaN."""
    import numpy as np
    import pyarrow as pa

    array = batch.column(name)
    kind = array.type
    if pa.types.is_integer(kind) or pa.types.is_floating(kind):
        # In numpy (an integer as float() rounds it, as the row path does): pyarrow.compute's
        # import costs more than a file's worth of casts.
        return np.asarray(array.to_numpy(zero_copy_only=False), dtype=np.float64)
    if pa.types.is_timestamp(kind) and kind.tz is not None:
        import pyarrow.compute as pc

        per_second = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}[kind.unit]
        values = pc.divide(pc.cast(pc.cast(array, pa.timestamp(kind.unit)), pa.int64())
                           .cast(pa.float64()), float(per_second))
        return np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.float64)
    return None


def watermarks_before(ts, latest: float):
    """For each row, the largest time before it (``latest`` before the first row), and the largest
    time after the batch; NaN times are passed over as the row path passes them."""
    import numpy as np

    running = np.fmax.accumulate(ts) if len(ts) else ts
    before = np.empty_like(ts)
    if len(ts):
        before[0] = latest
        np.fmax(running[:-1], latest, out=before[1:])
        latest = max(latest, float(np.fmax(running[-1], latest)))
    return before, latest


def stamp(batch: ColumnBatch, ts, watermarks, source: int, sources: int) -> ColumnBatch:
    """``batch`` with its times, watermarks and source task as columns of gyreflow's."""
    import numpy as np

    data = batch.data
    n = data.num_rows
    for name, values in ((TS, ts), (WATERMARK, watermarks),
                         (SOURCE, np.full(n, source, np.int32)),
                         (SOURCES, np.full(n, sources, np.int32))):
        index = data.schema.get_field_index(name)
        if index >= 0:
            data = data.remove_column(index)
        data = data.append_column(name, arrow_of(values))
    return ColumnBatch(data)


def arrow_of(values):
    """A float64 or int32 numpy array as an Arrow array without nulls, over the same memory:
    ``pyarrow.array`` would look for a masked array first, which imports numpy.ma."""
    import numpy as np
    import pyarrow as pa

    values = np.ascontiguousarray(values)
    kind = {"float64": pa.float64(), "int32": pa.int32()}.get(values.dtype.name)
    if kind is None:
        return pa.array(values)
    return pa.Array.from_buffers(kind, len(values), [None, pa.py_buffer(values)])


def column_form(aggregation):
    """``(kind, column)`` when ``aggregation`` has an Arrow form (a count, or sum/min/max of a
    column), else None."""
    return getattr(aggregation, "columns", None)


def single_source(batch: ColumnBatch):
    """``(source, sources)`` when every row of the stamped batch comes from one source task of one
    layout, else None (a batch joined from several: read row by row)."""
    import numpy as np

    data = batch.data
    found = []
    for name in (SOURCE, SOURCES):
        index = data.schema.get_field_index(name)
        if index < 0:
            return None
        values = data.column(index).to_numpy(zero_copy_only=False)  # a null is NaN
        values = values[~np.isnan(values)] if values.dtype.kind == "f" else values
        if not len(values) or values.min() != values.max():
            return None
        found.append(int(values[0]))
    return found[0], found[1]


def window_starts(ts, current, size: float, slide: float):
    """The windows each row joins: ``(rows, starts)`` (row indices and window starts, one pair per
    row and window not yet fired by the row's ``current`` watermark) and the rows that joined none
    (late), as numpy arrays; the windows of a row are those of ``window_grid`` holding it, their
    bounds rounded once as the row path's (times within ``near_epoch``)."""
    import numpy as np

    last = np.floor(ts / slide)
    while True:  # the division may round across a boundary: as window_grid.last_index
        over = last * slide > ts
        under = (last + 1) * slide <= ts
        if not over.any() and not under.any():
            break
        last -= over
        last += under
    rows, starts = [], []
    joined = np.zeros(len(ts), dtype=bool)
    every = np.arange(len(ts))
    step = 0
    while True:
        index = last - step
        ends = _ends(index, size, slide)
        holds = ends > ts
        if not holds.any():
            break
        open_ = holds & (ends > current)
        joined |= open_
        rows.append(every[open_])
        starts.append(index[open_] * slide)
        step += 1
    if not rows:
        return every[:0], ts[:0], every
    return np.concatenate(rows), np.concatenate(starts), every[~joined]


def _ends(index, size: float, slide: float):
    """The ends of windows ``index`` (a float array of whole numbers), each rounded once."""
    import numpy as np

    if size == slide:
        return (index + 1) * slide
    distinct, inverse = np.unique(index, return_inverse=True)
    ends = np.array([end_of(int(k), size, slide) for k in distinct.tolist()], dtype=np.float64)
    return ends[inverse.reshape(-1)]


def near_epoch(ts, assigner: tuple) -> bool:
    """Whether every time lies within ``window_grid.LIMIT`` slides of the epoch, where window
    bounds in numpy are the row path's (the row path takes the others)."""
    import numpy as np

    slide = assigner[2] if len(assigner) > 2 else assigner[1]
    return bool((np.abs(ts / slide) < LIMIT / 2).all()) if len(ts) else True


def aggregate_windows(batch: ColumnBatch, key: Column, rows, starts, form: tuple) -> list:
    """``[(key, start, accumulator)]`` of the rows ``rows`` in their windows ``starts``: a count
    (in numpy), or the sum/min/max of a column in Arrow (nulls skipped, as ``ColumnAggregate``)."""
    keys, codes = encode_keys(batch, key)
    kind, column = form
    if kind == "count":
        return _count_windows(keys, codes[rows], starts)
    import pyarrow as pa
    import pyarrow.compute as pc

    from gyreflow.runtime.dataflow.columns.batch import ColumnAggregate, exact

    values = ColumnAggregate(kind, column).exact_values(batch.column(column)).take(pa.array(rows))
    table = {"code": pa.array(codes[rows]), "start": pa.array(starts), "value": values}
    spec = (("value", "sum", pc.ScalarAggregateOptions(min_count=0)) if kind == "sum"
            else ("value", kind))
    grouped = pa.table(table).group_by(["code", "start"]).aggregate([spec])
    accumulators = [exact(v) for v in grouped[f"value_{kind}"].to_pylist()]
    return list(zip([keys[c] for c in grouped["code"].to_pylist()],
                    grouped["start"].to_pylist(), accumulators, strict=True))


def _count_windows(keys: list, codes, starts) -> list:
    """``[(key, start, count)]`` of rows with key ``keys[codes[i]]`` in window ``starts[i]``, by
    key and then start: one ``bincount`` over (key, window) pairs numbered in numpy, not an Arrow
    group_by (whose Acero plan costs more than the count of a batch, and its import pulls in
    pyarrow.dataset)."""
    import numpy as np

    if not len(codes):
        return []
    distinct, window = np.unique(starts, return_inverse=True)
    width = len(distinct)
    counts = np.bincount(codes.astype(np.int64) * width + window.reshape(-1))
    pairs = np.flatnonzero(counts)
    return list(zip([keys[c] for c in (pairs // width).tolist()],
                    distinct[pairs % width].tolist(), counts[pairs].tolist(), strict=True))


def merge_windows(data: dict, changed: set, groups: list, merge) -> None:
    """Add ``groups`` (``(key, start, accumulator)``) into the open windows ``data`` (key ->
    {start: accumulator})."""
    for key, start, acc in groups:
        entry = data.get(key)
        if entry is None:
            entry = data[key] = {}
        old = entry.get(start, _NOTHING)
        entry[start] = acc if old is _NOTHING else merge(old, acc)
        changed.add(key)


def finite(ts) -> bool:
    """Whether every time is a finite number (the row path reports the others)."""
    import numpy as np

    return bool(np.isfinite(ts).all())

