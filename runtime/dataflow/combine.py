"""Map-side combine: keyed counts, aggregates and associative reduces fold in the sending task.

Without it every record of a keyed ``count``/``aggregate``/``reduce`` crosses to its key's task
(pickled, sent, unpickled: a Spark shuffle, or a connection between worker processes) only to be
folded into a handful of per-key values, where PySpark's ``reduceByKey`` combines inside each
partition first. Only operators whose result does not depend on how their input is split qualify:
``count`` (integer sums), ``aggregate`` (the user's ``merge`` is part of the contract) and
``reduce(fn, associative=True)`` (the user declares ``fn(fn(a, b), c) == fn(a, fn(b, c))``). A plain
``reduce`` does not: its ``fn(accumulated, record)`` takes a key's first record unchanged and is not
required to be associative, so pre-reducing would change which calls run and what they return.

Upstream, a combining edge keeps one partial value per key for the current window and sends it, one
message per target task, just before the window's barrier: a sending task folds its own records in
the order it emits them, so a reduce that is associative but not commutative still sees each
task's records in order. Downstream, the target's head operator merges such a message into its own
partial state as if it had counted, added or reduced the records itself (``records_in`` counts the
original records). The hosts that cross processes (Spark rounds, worker processes) build both sides
with ``build_emitter`` and ``takes_combined``, so a combined message never reaches an operator that
does not expect one; the in-process host passes records by reference and does not combine.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from gyreflow.plan import operators as specs
from gyreflow.plan.graph import Partitioning
from gyreflow.runtime.dataflow.columns.batch import Column, ColumnBatch, PendingCounts, rows_of
from gyreflow.runtime.dataflow.emitter import EmitterService, KeyGroupLoad, OutputEdge, _by_key
from gyreflow.runtime.dataflow.operators import (
    AggregateOperator,
    CountOperator,
    ReduceOperator,
    fold_batch,
    merge_columns,
    reduce_batch,
)
from gyreflow.runtime.errors import RecordError, locate_failure
from gyreflow.state.keys.keygroups import key_group_of, owner_table

COUNT = "count"
AGGREGATE = "aggregate"
REDUCE = "reduce"
_NOTHING_STORED: dict = {}  # a sending task's fold starts from each key's first record


class Combined:
    """A pre-combined window share: ``values`` per key (counts or accumulators) of ``records`` records."""

    __slots__ = ("records", "values")

    def __init__(self, records: int, values: dict) -> None:
        self.records = records
        self.values = values

    def __reduce__(self):
        return Combined, (self.records, self.values)


def combine_kind(edge, target_head_spec) -> str | None:
    """How ``edge`` may pre-combine into its target (``COUNT``, ``AGGREGATE``) or None."""
    if edge.partitioning is not Partitioning.KEY:
        return None
    if isinstance(target_head_spec, specs.CountSpec) and edge.key_fn is target_head_spec.key_fn:
        return COUNT
    if isinstance(target_head_spec, specs.AggregateSpec) and edge.key_fn is target_head_spec.key_fn:
        return AGGREGATE
    if (isinstance(target_head_spec, specs.ReduceSpec) and target_head_spec.associative
            and edge.key_fn is target_head_spec.key_fn):
        return REDUCE
    return None


def combine_kinds(graph) -> dict[tuple[int, int], str]:
    """Every combining edge of an execution graph: (vertex id, output edge index) -> its kind
    (only into an operator with that one input)."""
    kinds = {}
    for vertex in graph.vertices:
        for index, edge in enumerate(graph.outputs(vertex.id)):
            kind = combine_kind(edge, graph.vertex(edge.target).head.spec)
            if kind is not None and len(graph.inputs(edge.target)) == 1:
                kinds[(vertex.id, index)] = kind
    return kinds


def takes_combined(graph, vertex_id: int, kinds: dict[tuple[int, int], str]) -> bool:
    """Whether a task of ``vertex_id`` receives combined messages (its head must accept them)."""
    return any((edge.source, graph.outputs(edge.source).index(edge)) in kinds
               for edge in graph.inputs(vertex_id))


def build_emitter(graph, vertex_id: int, task_index: int, delivers_by_edge: dict[int, list],
                  kinds: dict[tuple[int, int], str], max_parallelism: int) -> EmitterService:
    """The emitter of task ``task_index`` of ``vertex_id``: one output edge per graph edge, each
    delivering to ``delivers_by_edge[edge index]`` (one deliver per target task), combining where
    ``kinds`` says so."""
    edges, counters = [], {}
    for i, edge in enumerate(graph.outputs(vertex_id)):
        delivers = delivers_by_edge.get(i, [])
        target = graph.vertex(edge.target).head
        kind = kinds.get((vertex_id, i))
        if kind == COUNT:
            counters[i] = CountCombiner(delivers, edge.key_fn, max_parallelism, target.name,
                                        target.assignment)
            delivers = [counters[i].control(d) for d in delivers]
        elif kind == AGGREGATE:
            delivers = [AggregateCombiner(d, target.spec.key_fn, target.spec.function, target.name)
                        for d in delivers]
        elif kind == REDUCE:
            delivers = [ReduceCombiner(d, target.spec.key_fn, target.spec.fn, target.name)
                        for d in delivers]
        edges.append(OutputEdge(edge.partitioning, delivers, edge.key_fn, target.name, task_index,
                                target.assignment))
    emitter = EmitterService(edges, max_parallelism)
    for i, counter in counters.items():
        emitter.routes[i] = counter.route
        # The emitter's own, which ``take_loads`` reports (a one-task target has none yet).
        counter.load = emitter.loads.setdefault(counter.target, counter.load)
    if counters and len(emitter.routes) == 1:
        emitter.emit = emitter.routes[0]
    return emitter


def _drop(message) -> None:
    """A deliver that discards: used to replay a batch only to raise its routing error."""


class CountCombiner:
    """Counts an edge's records per key (``Counter.update``, in C) and routes the distinct keys at the
    window's end: a keyed count shuffles at most one (key, count) per key and task."""

    def __init__(self, delivers: list, key_fn: Callable, max_parallelism: int, target: str,
                 assignment: tuple[int, ...] | None = None) -> None:
        self.delivers = delivers
        self.key_fn = None if key_fn is specs.identity else key_fn
        self.max_parallelism = max_parallelism
        self.counts: Counter = Counter()
        self.pending = PendingCounts()  # key columns of column batches, counted at the barrier
        self.groups: dict = {}  # key -> key group
        self.owners = owner_table(len(delivers), max_parallelism, assignment)
        self.target = target
        self.load = KeyGroupLoad(max_parallelism)  # the emitter's, once built
        self.exact = _by_key([_drop] * len(delivers), key_fn, max_parallelism, target, assignment,
                             KeyGroupLoad(max_parallelism))

    def route(self, batch: list) -> None:
        """Count ``batch``; a failing key function or an unhashable key raises the routing error."""
        if type(batch) is ColumnBatch and isinstance(self.key_fn, Column):
            try:
                self.pending.add(batch, self.key_fn, self.counts)
            except Exception:
                self.exact(batch)  # raises the RecordError of the plain route, naming the record
                raise
            return
        batch = rows_of(batch)
        remaining = iter(batch)  # names a failing record without calling key_fn again
        try:
            self.counts.update(remaining if self.key_fn is None else map(self.key_fn, remaining))
        except Exception as exc:
            raise locate_failure(f"key_by of {self.target}", batch, remaining, exc) from exc

    def control(self, deliver: Callable) -> Callable:
        """Wrap one target's deliver: a barrier or end of input first flushes the window's counts."""

        def send(message) -> None:
            if type(message) is not list and type(message) is not ColumnBatch:
                self.flush()
            deliver(message)

        return send

    def flush(self) -> None:
        self.pending.fold(self.counts)
        counts, self.counts = self.counts, Counter()
        if not counts:
            return
        parts: list[dict] = [{} for _ in self.delivers]
        known, owners, load = self.groups, self.owners, self.load
        loads = load.groups
        # One pass per distinct key, its steps bound to locals: a window of the main job routes
        # about a thousand keys, and this loop is most of what a second count task costs.
        into = [parts[task] for task in owners]  # key group -> its task's part
        get = known.get
        for key, n in counts.items():
            group = get(key)
            if group is None:
                group = self._group_of(key)
            into[group][key] = n
            loads[group] += n
        total = counts.total()
        load.counted += total
        load.total += total
        for deliver, part in zip(self.delivers, parts, strict=True):
            if part:
                deliver([Combined(sum(part.values()), part)])

    def _group_of(self, key) -> int:
        """The key group of a key not seen before (remembered up to a million keys)."""
        try:
            group = key_group_of(key, self.max_parallelism)
        except TypeError as exc:
            raise RecordError(f"key_by of {self.target}", key, exc) from exc
        if len(self.groups) < 1 << 20:
            self.groups[key] = group
        return group


class AggregateCombiner:
    """Wraps one target's deliver: adds the routed records into per-key accumulators and sends them
    just before the window's barrier."""

    def __init__(self, deliver: Callable, key_fn: Callable, function, operator: str) -> None:
        self.deliver = deliver
        self.key_fn = key_fn
        self.function = function
        self.operator = operator
        self.partial: dict = {}
        self.records = 0

    def __call__(self, message) -> None:
        if type(message) is list or type(message) is ColumnBatch:
            self._add(message)
            return
        partial, self.partial = self.partial, {}
        if partial:
            self.deliver([Combined(self.records, partial)])
        self.records = 0
        self.deliver(message)

    def _add(self, batch: list) -> None:
        self.records += len(batch)
        if (type(batch) is ColumnBatch and isinstance(self.key_fn, Column)
                and hasattr(self.function, "add_columns")):
            merge_columns(self.operator, batch, self.key_fn, self.function, self.partial)
            return
        fold_batch(self.operator, rows_of(batch), self.key_fn, self.function, self.partial)


class ReduceCombiner(AggregateCombiner):
    """Wraps one target's deliver: reduces the routed records per key with the user's associative
    ``fn``, in the order they come, and sends the partial values just before the window's barrier."""

    def __init__(self, deliver: Callable, key_fn: Callable, fn: Callable, operator: str) -> None:
        super().__init__(deliver, key_fn, None, operator)
        self.fn = fn

    def _add(self, batch: list) -> None:
        self.records += len(batch)
        batch = rows_of(batch)
        reduce_batch(self.operator, batch, self.key_fn, self.fn, self.partial, _NOTHING_STORED)


def accept_combined(op) -> None:
    """Let the running operator ``op`` (a count or aggregate at the head of its task) take combined
    messages besides record batches."""
    plain = op.process_input
    if isinstance(op, CountOperator):

        def merge(combined: Combined) -> None:
            op.partial.update(combined.values)
    elif isinstance(op, AggregateOperator):
        fn = op.function.merge

        def merge(combined: Combined) -> None:
            partial = op.partial
            key = None
            try:
                for key, acc in combined.values.items():
                    partial[key] = fn(partial[key], acc) if key in partial else acc
            except Exception as exc:
                raise RecordError(op.name, key, exc) from exc
    elif isinstance(op, ReduceOperator):

        def merge(combined: Combined) -> None:
            # A partial value is a record of its key: fold it in as the operator folds records.
            reduce_batch(op.name, list(combined.values.values()), op.key_fn, op.fn, op.updated,
                         op.table.data)
    else:
        msg = f"operator {op.name!r} cannot take pre-combined input"
        raise TypeError(msg)

    def process_input(ordinal: int, batch: list) -> None:
        if len(batch) == 1 and type(batch[0]) is Combined:
            combined = batch[0]
            merge(combined)
            op.records_in += combined.records
        else:
            plain(ordinal, batch)

    op.process_input = process_input
