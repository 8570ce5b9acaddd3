"""EmitterService: partitions a task's output batches into its output channels."""

from __future__ import annotations

from collections.abc import Callable

from gyreflow.plan.graph import Partitioning
from gyreflow.plan.operators import identity
from gyreflow.runtime.dataflow.channels import END_OF_INPUT, Barrier
from gyreflow.runtime.dataflow.event_time import Watermark
from gyreflow.runtime.errors import RecordError
from gyreflow.state.keys.keygroups import key_group_of, task_of_key_group

Deliver = Callable[[object], None]


def _forward(deliver: Deliver):
    return deliver


def _broadcast(delivers: list[Deliver]):
    def route(batch: list) -> None:
        for deliver in delivers:
            deliver(batch)

    return route


def _rebalance(delivers: list[Deliver], start: int):
    state = [start]
    count = len(delivers)

    def route(batch: list) -> None:
        if len(batch) == 1 and type(batch[0]) is Watermark:  # time, not a record: to every task
            for deliver in delivers:
                deliver(batch)
            return
        delivers[state[0] % count](batch)
        state[0] += 1

    return route


def _by_key(delivers: list[Deliver], key_fn: Callable, max_parallelism: int, operator: str):
    parallelism = len(delivers)
    cache: dict[object, int] = {}

    def task_of(key: object) -> int:
        task = task_of_key_group(key_group_of(key, max_parallelism), parallelism, max_parallelism)
        if len(cache) < 1 << 20:
            cache[key] = task
        return task

    if key_fn is identity:
        key_fn = None

    def route(batch: list) -> None:
        if len(batch) == 1 and type(batch[0]) is Watermark:  # time, not a record: to every task
            for deliver in delivers:
                deliver(batch)
            return
        parts: list[list] = [[] for _ in range(parallelism)]
        appends = [part.append for part in parts]
        record = None
        try:
            for record in batch:
                key = record if key_fn is None else key_fn(record)
                try:
                    appends[cache[key]](record)
                except KeyError:
                    appends[task_of(key)](record)
        except TypeError as exc:
            cause: BaseException = exc
            if "unhashable" in str(exc):
                try:  # stable_hash names the key's type and what keys may be
                    task_of(record if key_fn is None else key_fn(record))
                except TypeError as clear:
                    cause = clear
            raise RecordError(f"key_by of {operator}", record, cause) from exc
        except Exception as exc:
            raise RecordError(f"key_by of {operator}", record, exc) from exc
        for deliver, part in zip(delivers, parts, strict=True):
            if part:
                deliver(part)

    return route


class OutputEdge:
    """The channels of one output edge of a task, one per target task, in target-index order."""

    def __init__(self, partitioning: Partitioning, delivers: list[Deliver],
                 key_fn: Callable | None = None, target_name: str = "", task_index: int = 0):
        self.partitioning = partitioning
        self.delivers = delivers
        self.key_fn = key_fn
        self.target_name = target_name
        self.task_index = task_index


class EmitterService:
    """Sends a task's output: ``emit`` partitions batches, ``barrier`` and ``end_of_input`` go to all."""

    def __init__(self, edges: list[OutputEdge], max_parallelism: int) -> None:
        self.edges = edges
        self.channels: list[Deliver] = [d for edge in edges for d in edge.delivers]
        routes = []
        for edge in edges:
            if len(edge.delivers) == 1 or edge.partitioning is Partitioning.FORWARD:
                routes.append(_forward(edge.delivers[0]))
            elif edge.partitioning is Partitioning.BROADCAST:
                routes.append(_broadcast(edge.delivers))
            elif edge.partitioning is Partitioning.KEY:
                routes.append(_by_key(edge.delivers, edge.key_fn, max_parallelism, edge.target_name))
            else:
                routes.append(_rebalance(edge.delivers, edge.task_index))
        self.routes = routes
        if len(routes) == 1:
            self.emit = routes[0]

    def emit(self, batch: list) -> None:
        """Send ``batch`` along every output edge."""
        for route in self.routes:
            route(batch)

    def barrier(self, window: int, checkpoint: bool = True) -> None:
        """Close ``window`` on every output channel; ``checkpoint`` asks downstream tasks to snapshot it."""
        barrier = Barrier(window, checkpoint)
        for deliver in self.channels:
            deliver(barrier)

    def end_of_input(self) -> None:
        """Tell every downstream task that nothing more comes from this task."""
        for deliver in self.channels:
            deliver(END_OF_INPUT)
