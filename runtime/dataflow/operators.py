"""Running operators: each processes whole batches and is built from a plan's operator spec."""

from __future__ import annotations

import copy
import pickle
from collections import Counter
from collections.abc import Callable

from gyreflow.plan import operators as specs
from gyreflow.runtime.dataflow.columns.batch import Column, ColumnBatch, PendingCounts
from gyreflow.runtime.dataflow.columns.expressions import Predicate
from gyreflow.runtime.errors import DataError, RecordError, locate_failure

_MISSING = object()
_IMMUTABLE = frozenset({int, float, str, bytes, bool, complex, type(None), frozenset, range})


def frozen(value):
    """``value`` as it is now, safe to hand downstream: immutable values as they are (no copy on the
    usual path: numbers, strings, tuples of them), anything else as a deep copy, so that a live
    accumulator updated by a later window never changes what an earlier window emitted."""
    kind = type(value)
    if kind in _IMMUTABLE:
        return value
    if kind is tuple and all(type(v) in _IMMUTABLE or frozen(v) is v for v in value):
        return value
    try:
        return pickle.loads(pickle.dumps(value, pickle.HIGHEST_PROTOCOL))
    except Exception:  # noqa: BLE001 - not picklable: the snapshot reports it, naming the operator
        try:
            return copy.deepcopy(value)
        except Exception:  # noqa: BLE001 - nothing copies it: hand it on as it is
            return value


def _discard(batch: list) -> None:
    """The output of a chain whose last operator emits nothing."""


class Operator:
    """Base of running operators: ``process`` a batch, ``finish`` a window, ``close`` at the end.

    An operator that works on column batches says so with ``takes_columns`` (the others get a
    column batch as rows, converted once before them); one that may pass a column batch on as it
    is says ``emits_columns``.
    """

    emits_on_finish = False
    takes_columns = False
    emits_columns = False

    def __init__(self, name: str) -> None:
        self.name = name
        self.out: Callable[[list], None] = _discard
        self.records_in = 0
        self.records_out = 0
        self.ctx = None

    def open(self, ctx) -> None:
        """Prepare to run inside the task described by ``ctx`` (an ``OperatorContext``)."""
        self.ctx = ctx

    def process(self, batch: list) -> None:
        """Handle one batch of records."""
        raise NotImplementedError

    def process_input(self, ordinal: int, batch: list) -> None:
        """Handle one batch arriving on input ``ordinal`` (two-input operators override this)."""
        self.process(batch)

    def finish(self, window: int) -> None:
        """Every record of ``window`` was processed: emit what the window produced."""

    def restored(self) -> None:
        """The task's state was just restored from a snapshot (rebuild what derives from it)."""

    def close(self) -> None:
        """Release what ``open`` acquired."""

    def _emit(self, batch: list) -> None:
        if batch:
            self.records_out += len(batch)
            self.out(batch)


def fold_batch(name: str, batch: list, key_fn: Callable, function, partial: dict) -> None:
    """Fold ``batch`` into ``partial`` (key -> accumulator) with ``function.init``/``add``; a
    failing record raises a RecordError naming the operator ``name`` and the record."""
    init, add = function.init, function.add
    record = None
    try:
        for record in batch:
            key = key_fn(record)
            try:
                partial[key] = add(partial[key], record)
            except KeyError:
                if key in partial:  # the KeyError came from the user's function
                    raise
                partial[key] = add(init(), record)
    except Exception as exc:
        raise RecordError(name, record, exc) from exc


def merge_columns(name: str, batch, key_fn: Callable, function, partial: dict) -> None:
    """Aggregate a column batch per key in Arrow (``function.add_columns``) and merge the result
    into ``partial`` (key -> accumulator); a missing column raises a RecordError naming ``name``."""
    try:
        added = function.add_columns(batch, key_fn)
    except KeyError as exc:
        raise RecordError(name, batch[0] if len(batch) else None, exc) from exc
    merge = function.merge
    for key, accumulator in added.items():
        partial[key] = merge(partial[key], accumulator) if key in partial else accumulator


def reduce_batch(name: str, batch: list, key_fn: Callable, fn: Callable, partial: dict,
                 stored: dict) -> None:
    """Fold ``batch`` into ``partial`` (key -> value) with ``fn``, in order; a key new to
    ``partial`` starts from its ``stored`` value, else from its first record unchanged. A failing
    record raises a RecordError naming the operator ``name`` and the record."""
    record = None
    try:
        for record in batch:
            key = key_fn(record)
            # Subscript + KeyError is ~35% faster than .get with a sentinel on this hot loop.
            try:
                partial[key] = fn(partial[key], record)
            except KeyError:
                if key in partial:  # the KeyError came from the user's function
                    raise
                old = stored.get(key, _MISSING)
                partial[key] = record if old is _MISSING else fn(old, record)
    except Exception as exc:
        raise RecordError(name, record, exc) from exc


class MapOperator(Operator):
    def __init__(self, name: str, fn: Callable) -> None:
        super().__init__(name)
        self.fn = fn

    def process(self, batch: list) -> None:
        self.records_in += len(batch)
        fn = self.fn
        remaining = iter(batch)  # locates a failing record without calling fn again
        try:
            result = [fn(x) for x in remaining]
        except Exception as exc:
            raise locate_failure(self.name, batch, remaining, exc) from exc
        self._emit(result)


class FlatMapOperator(Operator):
    def __init__(self, name: str, fn: Callable) -> None:
        super().__init__(name)
        self.fn = fn
        # gyreflow's own record functions (a graph's edge halves) may give a whole batch's results
        # in one call: ``fn.flat_map_batch(batch)`` equals the loop below.
        self.batch_fn = getattr(fn, "flat_map_batch", None)

    def process(self, batch: list) -> None:
        self.records_in += len(batch)
        fn = self.fn
        if self.batch_fn is not None and type(batch) is list:
            try:
                result = self.batch_fn(batch)
            except Exception:  # noqa: BLE001 - the loop below raises it again, naming the record
                result = None
            if result is not None:
                self._emit(result)
                return
        if fn is str.split:
            # Words never span lines, so the batch's lines joined by a space split into the same
            # words in one C call instead of one call and one list per line. A record that is not
            # a str makes join fail: the loop below then names it as str.split would.
            try:
                self._emit(" ".join(batch).split())
                return
            except TypeError:
                pass
        remaining = iter(batch)
        try:
            result = [y for x in remaining for y in fn(x)]
        except Exception as exc:
            raise locate_failure(self.name, batch, remaining, exc) from exc
        self._emit(result)


class FilterOperator(Operator):
    def __init__(self, name: str, fn: Callable) -> None:
        super().__init__(name)
        self.fn = fn
        # A column predicate (``col("price") > 10``) filters a column batch as a whole, in Arrow.
        self.takes_columns = self.emits_columns = isinstance(fn, Predicate)

    def process(self, batch: list) -> None:
        self.records_in += len(batch)
        fn = self.fn
        if type(batch) is ColumnBatch:
            try:
                kept = ColumnBatch(batch.data.filter(fn.mask(batch.data)))
            except Exception as exc:
                rows = batch.rows()  # a column predicate is gyreflow's own: asked again per row
                remaining = iter(rows)
                try:
                    for row in remaining:
                        fn(row)
                except Exception:  # noqa: BLE001 - the row the predicate fails on
                    raise locate_failure(self.name, rows, remaining, exc) from exc
                raise RecordError(self.name, None, exc, located=False) from exc
            self._emit(kept)
            return
        remaining = iter(batch)
        try:
            result = [x for x in remaining if fn(x)]
        except Exception as exc:
            raise locate_failure(self.name, batch, remaining, exc) from exc
        self._emit(result)


class ReduceOperator(Operator):
    """Keyed fold whose state lives across windows; emits each key updated in a window at its end."""

    emits_on_finish = True

    def __init__(self, name: str, key_fn: Callable, fn: Callable) -> None:
        super().__init__(name)
        self.key_fn = key_fn
        self.fn = fn
        self.updated: dict = {}

    def open(self, ctx) -> None:
        super().open(ctx)
        self.table = ctx.state.table(self.name)

    def process(self, batch: list) -> None:
        self.records_in += len(batch)
        reduce_batch(self.name, batch, self.key_fn, self.fn, self.updated, self.table.data)

    def finish(self, window: int) -> None:
        updated, self.updated = self.updated, {}
        if updated:
            self.table.data.update(updated)
            self.table.mark_changed(updated)
            self._emit([frozen(value) for value in updated.values()])


class AggregateOperator(Operator):
    """Keyed aggregation: per window a fresh accumulator per key, merged into the stored one at the end.

    Emits ``(key, result)`` for every key updated in the window.
    """

    emits_on_finish = True

    def __init__(self, name: str, key_fn: Callable, function) -> None:
        super().__init__(name)
        self.key_fn = key_fn
        self.function = function
        self.partial: dict = {}
        # sum/min/max/mean of a column, keyed by a column: a column batch is aggregated in Arrow
        self.takes_columns = isinstance(key_fn, Column) and hasattr(function, "add_columns")

    def open(self, ctx) -> None:
        super().open(ctx)
        self.table = ctx.state.table(self.name)

    def process(self, batch: list) -> None:
        self.records_in += len(batch)
        if type(batch) is ColumnBatch:
            if self.takes_columns:
                merge_columns(self.name, batch, self.key_fn, self.function, self.partial)
                return
            batch = batch.rows()
        fold_batch(self.name, batch, self.key_fn, self.function, self.partial)

    def finish(self, window: int) -> None:
        partial, self.partial = self.partial, {}
        if not partial:
            return
        stored = self.table.data
        merge, result = self.function.merge, self.function.result
        out = []
        key = None
        try:
            for key, acc in partial.items():
                old = stored.get(key, _MISSING)
                merged = acc if old is _MISSING else merge(old, acc)
                stored[key] = merged
                out.append((key, frozen(result(merged))))
        except Exception as exc:
            raise RecordError(self.name, key, exc) from exc
        self.table.mark_changed(partial)
        self._emit(out)


class CountOperator(Operator):
    """Keyed count whose totals live across windows; counting runs inside ``Counter.update`` (C)."""

    emits_on_finish = True

    def __init__(self, name: str, key_fn: Callable) -> None:
        super().__init__(name)
        self.key_fn = None if key_fn is specs.identity else key_fn
        self.partial: Counter = Counter()
        self.pending = PendingCounts()  # key columns of column batches, counted at the window's end

    def open(self, ctx) -> None:
        super().open(ctx)
        self.table = ctx.state.table(self.name)

    takes_columns = True

    def process(self, batch: list) -> None:
        self.records_in += len(batch)
        key_fn = self.key_fn
        if type(batch) is ColumnBatch:
            if isinstance(key_fn, Column):
                try:
                    self.pending.add(batch, key_fn, self.partial)
                except KeyError as exc:
                    raise RecordError(self.name, batch[0], exc) from exc
                return
            batch = batch.rows()  # keyed by a function: it takes rows
        remaining = iter(batch)
        try:
            self.partial.update(remaining if key_fn is None else map(key_fn, remaining))
        except Exception as exc:
            raise locate_failure(self.name, batch, remaining, exc) from exc

    def finish(self, window: int) -> None:
        self.pending.fold(self.partial)
        partial, self.partial = self.partial, Counter()
        if not partial:
            return
        totals = self.table.data
        get = totals.get
        out = []
        for key, n in partial.items():
            total = totals[key] = get(key, 0) + n
            out.append((key, total))
        self.table.mark_changed(partial)
        self._emit(out)


class UnionOperator(Operator):
    takes_columns = True
    emits_columns = True

    def process(self, batch: list) -> None:
        self.records_in += len(batch)
        self._emit(batch)


class JoinOperator(Operator):
    """Inner join of two keyed inputs within one window."""

    emits_on_finish = True

    def __init__(self, name: str, left_key: Callable, right_key: Callable, fn: Callable | None):
        super().__init__(name)
        self.keys = (left_key, right_key)
        self.fn = fn
        self.sides: tuple[dict, dict] = ({}, {})

    def process(self, batch: list) -> None:
        self.process_input(0, batch)

    def process_input(self, ordinal: int, batch: list) -> None:
        self.records_in += len(batch)
        key_fn, side = self.keys[ordinal], self.sides[ordinal]
        record = None
        try:
            for record in batch:
                key = key_fn(record)
                bucket = side.get(key)
                if bucket is None:
                    side[key] = [record]
                else:
                    bucket.append(record)
        except Exception as exc:
            raise RecordError(self.name, record, exc) from exc

    def finish(self, window: int) -> None:
        left, right = self.sides
        self.sides = ({}, {})
        fn = self.fn
        out = []
        pair = None
        try:
            for key, lefts in left.items():
                rights = right.get(key)
                if rights is None:
                    continue
                for lrec in lefts:
                    for rrec in rights:
                        pair = (lrec, rrec)
                        out.append((key, lrec, rrec) if fn is None else fn(lrec, rrec))
        except Exception as exc:
            raise RecordError(self.name, pair, exc) from exc
        self._emit(out)


class SinkOperator(Operator):
    """Hands batches to a sink writer; the writer stages each window and publishes it at its end."""

    def __init__(self, name: str, sink) -> None:
        super().__init__(name)
        self.sink = sink
        self.writer = None

    def open(self, ctx) -> None:
        super().open(ctx)
        self.writer = self.sink.create_writer(ctx.task_index, ctx.parallelism)
        if not getattr(ctx.state, "durable", True):  # commits end with the process: no fsync
            self.writer.durable = False

    def process(self, batch: list) -> None:
        self.records_in += len(batch)
        try:
            self.writer.write(self.ctx.window, batch)
        except DataError:
            raise  # a record the sink cannot write names itself: bad data, not a user function's fault
        except Exception as exc:
            raise RecordError(self.name, None, exc, located=False) from exc

    def finish(self, window: int) -> None:
        self.writer.finish_window(window)

    def publish(self, window: int) -> None:
        """Windows up to ``window`` are completed: make their staged output visible."""
        self.writer.publish(window)

    def recover(self, window: int) -> None:
        """Resuming after the completed window ``window``: publish what was staged up to it and
        drop what was staged after it."""
        self.writer.recover(window)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


class CollectOperator(Operator):
    """Stages records per window; the task hands them to the scheduler with its Done event."""

    def __init__(self, name: str, result_name: str) -> None:
        super().__init__(name)
        self.result_name = result_name
        self.buffer: list = []

    def process(self, batch: list) -> None:
        self.records_in += len(batch)
        self.buffer.extend(batch)

    def take(self) -> list:
        """Return and forget the records staged for the current window."""
        staged, self.buffer = self.buffer, []
        return staged
