"""Per-window computation: aggregations, per-processing-window operators, window-aware functions,
and the stream-table join (a table kept across windows, with a time-to-live)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import NamedTuple

from gyreflow.plan.operators import identity
from gyreflow.runtime.dataflow.columns.batch import Column, ColumnBatch
from gyreflow.runtime.dataflow.columns.table_join import last_per_key, merge_columns, merge_row
from gyreflow.runtime.dataflow.operators import Operator, fold_batch, frozen
from gyreflow.runtime.errors import RecordError, locate_failure

# --- aggregations -----------------------------------------------------------------------------


class Aggregation:
    """What a window computes: ``init``/``add``/``merge``/``result`` (an ``AggregateFunction``)."""

    columns: tuple | None = None  # (kind, column) when column batches are aggregated in Arrow

    def __init__(self, init: Callable, add: Callable, merge: Callable,
                 result: Callable | None = None) -> None:
        self.init = init
        self.add = add
        self.merge = merge
        self.result = accumulated if result is None else result

    @classmethod
    def of(cls, function) -> Aggregation:
        """Wrap a user ``AggregateFunction``."""
        return cls(function.init, function.add, function.merge, function.result)


def accumulated(accumulator):
    """The result of an aggregation whose accumulator is its result (counts, sums, minima)."""
    return accumulator


def collecting(fn: Callable) -> Aggregation:
    """The window's records, handed to ``fn(key, records, window)`` when the window ends;
    ``window`` is an ``EventWindow`` (event time) or a ``WindowContext`` (processing windows)."""
    aggregation = Aggregation(list, _append, lambda a, b: a + b)
    aggregation.window_fn = fn
    return aggregation


def _append(acc: list, record) -> list:
    acc.append(record)
    return acc


def counting() -> Aggregation:
    counted = Aggregation(lambda: 0, lambda acc, _r: acc + 1, lambda a, b: a + b)
    counted.columns = ("count", None)
    return counted


def of_column(kind: str, column: str) -> Aggregation:
    """``sum``/``min``/``max`` of a column (None values skipped): on rows as any aggregation, on
    column batches in Arrow (``columns``)."""
    from gyreflow.runtime.dataflow.columns.batch import ColumnAggregate

    aggregation = Aggregation.of(ColumnAggregate(kind, column))
    aggregation.columns = (kind, column)
    return aggregation


def summing(value: Callable) -> Aggregation:
    return Aggregation(lambda: 0, lambda acc, r: acc + value(r), lambda a, b: a + b)


def _pick(better: Callable, value: Callable) -> Aggregation:
    def add(acc, r):
        v = value(r)
        return v if acc is None or better(v, acc) else acc

    def merge(a, b):
        if a is None:
            return b
        if b is None:
            return a
        return b if better(b, a) else a

    return Aggregation(lambda: None, add, merge)


def minimum(value: Callable) -> Aggregation:
    return _pick(lambda v, acc: v < acc, value)


def maximum(value: Callable) -> Aggregation:
    return _pick(lambda v, acc: v > acc, value)


_NOTHING = object()


def reducing(fn: Callable) -> Aggregation:
    def add(acc, r):
        return r if acc is _NOTHING else fn(acc, r)

    def merge(a, b):
        if a is _NOTHING:
            return b
        return a if b is _NOTHING else fn(a, b)

    return Aggregation(lambda: _NOTHING, add, merge)


def top(k: int, score: Callable) -> Aggregation:
    """The ``k`` records with the highest ``score`` (ties: the earlier record first)."""

    def add(acc, r):
        acc = [*acc, (score(r), r)]
        acc.sort(key=lambda pair: pair[0], reverse=True)
        return acc[:k]

    def merge(a, b):
        merged = sorted([*a, *b], key=lambda pair: pair[0], reverse=True)
        return merged[:k]

    return Aggregation(list, add, merge, lambda acc: [r for _, r in acc])


# --- per processing window -----------------------------------------------------------------------


class WindowContext(NamedTuple):
    """What a window-aware function sees: the processing window its record is in, and the
    operator's parameters (``control.parameters``, ``gyreflow control set``)."""

    window: int
    task_index: int
    parallelism: int
    parameters: dict = {}  # read only; each operator passes its own

    def parameter(self, name: str, default=None):
        """The operator's parameter ``name`` as last set, else ``default``."""
        return self.parameters.get(name, default)


class ContextMapOperator(Operator):
    """Emits ``fn(record, ctx)`` with ``ctx`` a ``WindowContext``."""

    def __init__(self, name: str, fn: Callable) -> None:
        super().__init__(name)
        self.fn = fn

    def process(self, batch: list) -> None:
        self.records_in += len(batch)
        ctx, fn = self.ctx, self.fn
        context = WindowContext(ctx.window, ctx.task_index, ctx.parallelism,
                                ctx.parameters.get(self.name, {}))
        record = None
        try:
            out = [fn(record, context) for record in batch]
        except Exception as exc:
            raise RecordError(self.name, record, exc) from exc
        self._emit(out)


class WindowCountOperator(Operator):
    """Count per key within each processing window (not across windows): ``(key, count)``."""

    emits_on_finish = True

    def __init__(self, name: str, key_fn: Callable | None) -> None:
        super().__init__(name)
        self.key_fn = key_fn
        self.partial: Counter = Counter()

    def process(self, batch: list) -> None:
        self.records_in += len(batch)
        key_fn = self.key_fn
        remaining = iter(batch)  # names a failing record without calling key_fn again
        try:
            self.partial.update(remaining if key_fn is None else map(key_fn, remaining))
        except Exception as exc:
            raise locate_failure(self.name, batch, remaining, exc) from exc

    def finish(self, window: int) -> None:
        partial, self.partial = self.partial, Counter()
        self._emit(list(partial.items()))



class WindowAggregateOperator(Operator):
    """Aggregate per key within each processing window: ``(key, result)`` per key of the window.

    Keeps nothing across windows (an empty state table: a window is finished before it is
    snapshotted, so there is nothing in flight to save)."""

    emits_on_finish = True

    def __init__(self, name: str, key_fn: Callable, aggregation: Aggregation) -> None:
        super().__init__(name)
        self.key_fn = key_fn
        self.aggregation = aggregation
        self.partial: dict = {}

    def process(self, batch: list) -> None:
        self.records_in += len(batch)
        fold_batch(self.name, batch, self.key_fn, self.aggregation, self.partial)

    def finish(self, window: int) -> None:
        partial, self.partial = self.partial, {}
        result = self.aggregation.result
        window_fn = getattr(self.aggregation, "window_fn", None)
        ctx = self.ctx
        context = WindowContext(window, ctx.task_index, ctx.parallelism,
                                ctx.parameters.get(self.name, {}))
        out = []
        key = None
        try:
            for key, acc in partial.items():
                value = result(acc) if window_fn is None else window_fn(key, acc, context)
                out.append((key, frozen(value)))
        except Exception as exc:
            raise RecordError(self.name, key, exc) from exc
        self._emit(out)


# --- stream-table join ---------------------------------------------------------------------------


class TableJoinOperator(Operator):
    """Enrich a keyed stream (input 0) with the latest value per key of a changelog (input 1).

    Within a window every table update is applied before any stream record is joined, so the
    result never depends on how the two inputs interleave: a record of window ``w`` sees the table
    as of the end of ``w``. Emits ``fn(record, value)``; records whose key has no value are dropped
    (``inner``) or get ``None``. With ``ttl`` (a number of windows), a key not updated for that
    many windows is forgotten."""

    emits_on_finish = True

    def __init__(self, name: str, stream_key: Callable, table_key: Callable,
                 value_fn: Callable, fn: Callable, inner: bool, ttl: int | None,
                 merged: bool = False) -> None:
        super().__init__(name)
        self.keys = (stream_key, table_key)
        self.value_fn = value_fn
        self.fn = merge_row if merged else fn
        self.inner = inner
        self.ttl = ttl
        self.merged = merged
        self.waiting: list = []
        # Merged records of a stream keyed by a column: column batches are joined whole
        # (columns/table_join.py); a table keyed by a column is then read as columns too.
        self.takes_columns = merged and isinstance(stream_key, Column)

    def open(self, ctx) -> None:
        super().open(ctx)
        self.table = ctx.state.table(self.name)

    def process(self, batch: list) -> None:
        self.process_input(0, batch)

    def process_input(self, ordinal: int, batch: list) -> None:
        self.records_in += len(batch)
        if ordinal == 0:
            if type(batch) is ColumnBatch:
                self.waiting.append(batch)  # joined whole at the window's end
            else:
                self.waiting.append(batch if isinstance(batch, list) else list(batch))
            return
        key_fn, value_fn = self.keys[1], self.value_fn
        data, changed = self.table.data, self.table.changed
        window = self.ctx.window
        record = None
        if type(batch) is ColumnBatch:
            if isinstance(key_fn, Column) and value_fn is identity:
                try:
                    for key, record in last_per_key(batch, key_fn):
                        data[key] = (record, window)
                        changed.add(key)
                except KeyError as exc:
                    raise RecordError(self.name, batch[0], exc) from exc
                return
            batch = batch.rows()
        try:
            for record in batch:
                key = key_fn(record)
                data[key] = (value_fn(record), window)
                changed.add(key)
        except Exception as exc:
            raise RecordError(self.name, record, exc) from exc

    def finish(self, window: int) -> None:
        waiting, self.waiting = self.waiting, []
        for batch in waiting:
            self._join(batch)
        if self.ttl is not None:
            data = self.table.data
            expired = [k for k, (_, at) in data.items() if window - at >= self.ttl]
            for key in expired:
                self.table.delete(key)

    def _join(self, batch) -> None:
        key_fn, fn, data = self.keys[0], self.fn, self.table.data
        if type(batch) is ColumnBatch:
            joined = None
            try:
                if self.takes_columns:
                    joined = merge_columns(batch, key_fn, lambda key: _value(data.get(key)),
                                           self.inner)
            except KeyError as exc:
                raise RecordError(self.name, batch[0], exc) from exc
            if joined is not None:
                self._emit(joined)
                return
            batch = batch.rows()
        out = []
        record = None
        try:
            for record in batch:
                found = data.get(key_fn(record))
                if found is None:
                    if not self.inner:
                        out.append(dict(record) if self.merged else fn(record, None))
                    continue
                out.append(fn(record, found[0]))
        except Exception as exc:
            raise RecordError(self.name, record, exc) from exc
        self._emit(out)


def _value(found):
    return None if found is None else found[0]
