"""EmitterService: partitions a task's output batches into its output channels."""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter

from gyreflow.plan.graph import Partitioning
from gyreflow.plan.operators import identity
from gyreflow.runtime.dataflow.channels import END_OF_INPUT, Barrier
from gyreflow.runtime.dataflow.columns.batch import Column, ColumnBatch, encode_keys
from gyreflow.runtime.dataflow.time.event_time import Watermark
from gyreflow.runtime.errors import RecordError
from gyreflow.state.keys.keygroups import key_group_of, owner_table

Deliver = Callable[[object], None]
_SECOND = itemgetter(1)


def _forward(deliver: Deliver):
    return deliver


def _broadcast(delivers: list[Deliver]):
    def route(batch: list) -> None:
        for deliver in delivers:
            deliver(batch)

    return route


class _Rebalance:
    """Deals batches round-robin over the target tasks. The turn starts afresh at every window, at
    ``task_index + window - 1``, so which task gets a batch depends only on the window and the
    batches before it in that window: a resumed run deals them as the uninterrupted one did, and
    consecutive windows start at different tasks."""

    __slots__ = ("count", "delivers", "position", "task_index")

    def __init__(self, delivers: list[Deliver], task_index: int) -> None:
        self.delivers = delivers
        self.count = len(delivers)
        self.task_index = task_index
        self.position = task_index

    def start_window(self, window: int) -> None:
        self.position = self.task_index + window - 1

    def __call__(self, batch: list) -> None:
        if len(batch) == 1 and type(batch[0]) is Watermark:  # time, not a record: to every task
            for deliver in self.delivers:
                deliver(batch)
            return
        self.delivers[self.position % self.count](batch)
        self.position += 1


SAMPLE_EVERY = 8  # batches: a keyed route counts key groups in the first batch of each window and
# in every eighth after it (counting each record would cost the route about a fifth more)


class KeyGroupLoad:
    """Records sent to each key group of one keyed target since the last ``take``: counted in a
    sample of the batches, scaled to all of them."""

    __slots__ = ("batches", "counted", "groups", "total")

    def __init__(self, max_parallelism: int) -> None:
        self.groups = [0] * max_parallelism
        self.counted = 0  # records in the batches counted
        self.total = 0  # records in every batch
        self.batches = 0

    def take(self) -> tuple[tuple[int, int], ...]:
        """``((key group, records), ...)`` since the last call, and start again from zero."""
        groups = self.groups
        if self.counted == self.total:  # every record counted (a map-side count's keys): as is
            taken = tuple(filter(_SECOND, enumerate(groups)))
        else:
            scale = self.total / self.counted if self.counted else 0.0
            taken = tuple((g, round(n * scale)) for g, n in enumerate(groups) if n)
        groups[:] = [0] * len(groups)
        self.counted = self.total = self.batches = 0
        return taken


def _by_key(delivers: list[Deliver], key_fn: Callable, max_parallelism: int, operator: str,
            assignment: tuple[int, ...] | None, load: KeyGroupLoad):
    """Route each record to the task owning its key group, counting records per key group in
    ``load`` (what a rebalance weighs key groups by)."""
    parallelism = len(delivers)
    owners = owner_table(parallelism, max_parallelism, assignment)
    groups: dict[object, int] = {}  # key -> key group
    tasks: dict[object, int] = {}  # key -> task

    def group_of(key: object) -> int:
        group = key_group_of(key, max_parallelism)
        if len(groups) < 1 << 20:
            groups[key] = group
            tasks[key] = owners[group]
        return group

    if key_fn is identity:
        key_fn = None
    by_column = _by_column(delivers, key_fn, group_of, groups, owners, operator, load) \
        if isinstance(key_fn, Column) else None

    def route(batch: list) -> None:
        if type(batch) is ColumnBatch:
            if by_column is not None:
                by_column(batch)
                return
            batch = batch.rows()
        if len(batch) == 1 and type(batch[0]) is Watermark:  # time, not a record: to every task
            for deliver in delivers:
                deliver(batch)
            return
        parts: list[list] = [[] for _ in range(parallelism)]
        record = None
        counting = load.batches % SAMPLE_EVERY == 0
        load.batches += 1
        load.total += len(batch)
        try:
            if counting:
                appends = [parts[owner].append for owner in owners]
                loads = load.groups
                for record in batch:
                    key = record if key_fn is None else key_fn(record)
                    try:
                        group = groups[key]
                    except KeyError:
                        group = group_of(key)
                    appends[group](record)
                    loads[group] += 1
                load.counted += len(batch)
            else:
                appends = [part.append for part in parts]
                for record in batch:
                    key = record if key_fn is None else key_fn(record)
                    try:
                        appends[tasks[key]](record)
                    except KeyError:
                        appends[owners[group_of(key)]](record)
        except Exception as exc:  # an unhashable key is named where the error is reported
            raise RecordError(f"key_by of {operator}", record, exc) from exc
        for deliver, part in zip(delivers, parts, strict=True):
            if part:
                deliver(part)

    return route


def _by_column(delivers: list[Deliver], column: Column, group_of: Callable, groups: dict,
               owners: list[int], operator: str, load: KeyGroupLoad):
    """Route a column batch by the values of one column: the distinct values are looked up once
    each, and every target task gets the rows of its key groups as one column batch."""
    import numpy as np

    parallelism = len(delivers)

    def route(batch: ColumnBatch) -> None:
        key = None
        try:
            values, indices = encode_keys(batch, column)
            value_groups = []
            for key in values:
                try:
                    value_groups.append(groups[key])
                except KeyError:
                    value_groups.append(group_of(key))
        except Exception as exc:
            raise RecordError(f"key_by of {operator}", key if key is not None else batch[0],
                              exc) from exc
        value_groups = np.asarray(value_groups, dtype=np.int64)
        counting = load.batches % SAMPLE_EVERY == 0
        load.batches += 1
        load.total += len(batch)
        if counting:
            loads = load.groups
            for group, n in zip(value_groups.tolist(),
                                np.bincount(indices, minlength=len(values)).tolist(), strict=True):
                loads[group] += n
            load.counted += len(batch)
        row_tasks = np.asarray(owners, dtype=np.int64)[value_groups][indices]
        if parallelism == 1:
            delivers[0](batch)
            return
        for task in range(parallelism):
            rows = np.flatnonzero(row_tasks == task)
            if len(rows) == len(batch):
                delivers[task](batch)
            elif len(rows):
                delivers[task](batch.take(rows))

    return route


class OutputEdge:
    """The channels of one output edge of a task, one per target task, in target-index order."""

    def __init__(self, partitioning: Partitioning, delivers: list[Deliver],
                 key_fn: Callable | None = None, target_name: str = "", task_index: int = 0,
                 assignment: tuple[int, ...] | None = None):
        self.partitioning = partitioning
        self.delivers = delivers
        self.key_fn = key_fn
        self.target_name = target_name
        self.task_index = task_index
        self.assignment = assignment  # the target's key groups by task, when rebalanced


class EmitterService:
    """Sends a task's output: ``emit`` partitions batches, ``barrier`` and ``end_of_input`` go to all."""

    def __init__(self, edges: list[OutputEdge], max_parallelism: int) -> None:
        self.edges = edges
        self.channels: list[Deliver] = [d for edge in edges for d in edge.delivers]
        # Records sent to each key group of each keyed target since the last ``take_loads``.
        self.loads: dict[str, KeyGroupLoad] = {}
        routes = []
        self.rebalanced: list[_Rebalance] = []
        for edge in edges:
            if len(edge.delivers) == 1 or edge.partitioning is Partitioning.FORWARD:
                routes.append(_forward(edge.delivers[0]))
            elif edge.partitioning is Partitioning.BROADCAST:
                routes.append(_broadcast(edge.delivers))
            elif edge.partitioning is Partitioning.KEY:
                load = self.loads.setdefault(edge.target_name, KeyGroupLoad(max_parallelism))
                routes.append(_by_key(edge.delivers, edge.key_fn, max_parallelism, edge.target_name,
                                      edge.assignment, load))
            else:
                self.rebalanced.append(_Rebalance(edge.delivers, edge.task_index))
                routes.append(self.rebalanced[-1])
        self.routes = routes
        if len(routes) == 1:
            self.emit = routes[0]
        # Bytes sent to other processes per output edge ("source->target"), counted by the
        # delivers of a host whose channels cross processes (the worker host).
        self.sent: dict[str, list[int]] = {}

    def take_sent(self) -> tuple[tuple[str, int], ...]:
        """``(("source->target", bytes), ...)`` sent since the last call; the counts start again."""
        taken = []
        for edge, counter in self.sent.items():
            if counter[0]:
                taken.append((edge, counter[0]))
                counter[0] = 0
        return tuple(taken)

    def take_loads(self) -> tuple[tuple[str, tuple[tuple[int, int], ...]], ...]:
        """``(target operator, ((key group, records), ...))`` sent since the last call; the
        counts start again from zero."""
        taken = []
        for target, load in self.loads.items():
            counted = load.take()
            if counted:
                taken.append((target, counted))
        return tuple(taken)

    def emit(self, batch: list) -> None:
        """Send ``batch`` along every output edge."""
        for route in self.routes:
            route(batch)

    def barrier(self, window: int, checkpoint: bool = True, last: bool = False) -> None:
        """Close ``window`` on every output channel; ``checkpoint`` asks downstream tasks to snapshot
        it; ``last``: this task's input ended with it."""
        barrier = Barrier(window, checkpoint, last)
        for deliver in self.channels:
            deliver(barrier)
        self.start_window(window + 1)

    def start_window(self, window: int) -> None:
        """The next batches belong to ``window``: rebalanced edges deal them from its first turn
        (on a restore, the window after the restored one)."""
        for route in self.rebalanced:
            route.start_window(window)

    def end_of_input(self) -> None:
        """Tell every downstream task that nothing more comes from this task."""
        for deliver in self.channels:
            deliver(END_OF_INPUT)
