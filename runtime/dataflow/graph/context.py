"""The vertex context a vertex program sees, with message sending specialised per combiner.

Messages of one superstep accumulate in a list indexed by a task-local *slot* per target vertex (an
index into ``ids``), so sending along an edge costs one list read and write, not dict lookups; each
vertex's neighbour slots are computed once and cached until its edges change.
"""

from __future__ import annotations

import abc
import copy
import operator
from collections.abc import Callable

_DIRECTIONS = ("out", "in", "both")
_IMMUTABLE = (int, float, complex, str, bytes, tuple, frozenset)


class _Empty:
    """The content of a slot no message reached yet: adding a message or comparing with one yields
    the message, so the sending loops need no emptiness test."""

    __slots__ = ()

    def __add__(self, message):
        return message if isinstance(message, _IMMUTABLE) else copy.copy(message)

    __radd__ = __add__

    def __gt__(self, message) -> bool:  # message < EMPTY
        return True

    def __lt__(self, message) -> bool:  # message > EMPTY
        return True

    def __repr__(self) -> str:
        return "EMPTY"


EMPTY = _Empty()
_NONE_MESSAGE = "a message cannot be None; send another value"


class Slots:
    """Task-local slot numbers for message targets, and each vertex's neighbour slots by direction."""

    def __init__(self) -> None:
        self.slot_of: dict = {}
        self.ids: list = []
        self.cache: dict[str, dict] = {d: {} for d in _DIRECTIONS}

    def slot(self, vertex) -> int:
        """The slot of ``vertex``, assigned on first use."""
        slot = self.slot_of.get(vertex)
        if slot is None:
            slot = self.slot_of[vertex] = len(self.ids)
            self.ids.append(vertex)
        return slot

    def forget(self, vertices) -> None:
        """The edges of ``vertices`` changed: drop their cached neighbour slots."""
        for cache in self.cache.values():
            if cache:
                for vertex in vertices:
                    cache.pop(vertex, None)

    def clear(self) -> None:
        """Drop everything (the graph was restored from a snapshot)."""
        self.__init__()


def _pairs(entry: list, side: int) -> list:
    values = entry[side + 1]
    if values is None:
        return [(target, None) for target in entry[side]]
    return list(zip(entry[side], values, strict=True))


class VertexContextImpl(abc.ABC):
    """The ``VertexContext`` of ``gyreflow.api.graph.views``: one object reused for every vertex."""

    __slots__ = ("_acc", "_aggregates", "_aggregators", "_directed", "_entry", "_previous", "_slots",
                 "emitted", "id", "iteration", "notifications", "num_vertices", "value", "window")

    def __init__(self, directed: bool, aggregators: dict, slots: Slots) -> None:
        self._directed = directed
        self._aggregators = aggregators
        self._slots = slots
        self._aggregates: dict = {}
        self._previous: dict = {}
        self._acc: list = []
        self.emitted: list = []
        self.notifications: dict = {}  # iteration -> vertices that asked for on_notify
        self.id = None
        self.value = None
        self.iteration = 0
        self.window = 0
        self.num_vertices = 0
        self._entry: list = [None, [], None, [], None]

    @property
    def out_neighbours(self) -> list:
        """The targets of the out-edges, one per edge (every incident edge if undirected).
        Read-only: the list is the graph's own."""
        return self._entry[1]

    @property
    def in_neighbours(self) -> list:
        """The sources of the in-edges, one per edge (every incident edge if undirected)."""
        entry = self._entry
        return entry[1] if entry[3] is None else entry[3]

    @property
    def out_edges(self) -> list:
        """The out-edges as ``(target vertex, edge value)`` pairs."""
        return _pairs(self._entry, 1)

    @property
    def in_edges(self) -> list:
        """The in-edges as ``(source vertex, edge value)`` pairs (every incident edge if undirected)."""
        entry = self._entry
        return _pairs(entry, 1 if entry[3] is None else 3)

    @property
    def out_degree(self) -> int:
        """The number of out-edges (incident edges in an undirected graph)."""
        return len(self._entry[1])

    def _neighbour_slots(self, direction: str) -> list[int]:
        if not self._directed or direction == "out":
            direction = "out"
        elif direction not in _DIRECTIONS:
            msg = f"direction must be 'out', 'in' or 'both', got {direction!r}"
            raise ValueError(msg)
        cache = self._slots.cache[direction]
        slots = cache.get(self.id)
        if slots is None:
            entry = self._entry
            targets = (entry[1] if direction == "out" else entry[3] if direction == "in"
                       else entry[1] + entry[3])
            slot_of = self._slots.slot_of
            try:
                slots = [slot_of[target] for target in targets]
            except KeyError:
                slot = self._slots.slot
                slots = [slot(target) for target in targets]
            cache[self.id] = slots
            acc = self._acc
            missing = len(self._slots.ids) - len(acc)
            if missing > 0:
                acc.extend([EMPTY] * missing)
        return slots

    def _target_slot(self, target) -> int:
        slot = self._slots.slot(target)
        acc = self._acc
        if slot >= len(acc):
            acc.extend([EMPTY] * (slot + 1 - len(acc)))
        return slot

    def aggregate(self, name: str, value) -> None:
        """Add ``value`` to aggregator ``name``."""
        add_to_aggregate(self._aggregators, self._aggregates, name, value)

    def aggregated(self, name: str):
        """The combined value of aggregator ``name`` in the previous iteration."""
        return self._previous[name]

    def emit(self, record) -> None:
        """Emit ``record`` when the window's supersteps finish."""
        self.emitted.append(record)

    def notify_at(self, iteration: int) -> None:
        """Call the program's ``on_notify(vertex, iteration)`` for this vertex once superstep
        ``iteration`` (this one or a later one) is complete on every task."""
        if not isinstance(iteration, int) or iteration < self.iteration:
            msg = (f"notify_at({iteration!r}) in superstep {self.iteration}: a notification is for "
                   "this superstep or a later one")
            raise ValueError(msg)
        self.notifications.setdefault(iteration, {})[self.id] = None

    @abc.abstractmethod
    def send(self, target, message) -> None:
        """Send ``message`` to ``target`` for the next iteration."""

    @abc.abstractmethod
    def send_to_neighbours(self, message, direction: str = "out") -> None:
        """Send ``message`` along every edge in ``direction``."""


class _ListContext(VertexContextImpl):
    __slots__ = ()

    def send(self, target, message) -> None:
        if message is None:
            raise ValueError(_NONE_MESSAGE)
        acc = self._acc
        slot = self._target_slot(target)
        current = acc[slot]
        if current is EMPTY:
            acc[slot] = [message]
        else:
            current.append(message)

    def send_to_neighbours(self, message, direction: str = "out") -> None:
        if message is None:
            raise ValueError(_NONE_MESSAGE)
        acc = self._acc
        for slot in self._neighbour_slots(direction):
            current = acc[slot]
            if current is EMPTY:
                acc[slot] = [message]
            else:
                current.append(message)


class _SumContext(VertexContextImpl):
    __slots__ = ()

    def send(self, target, message) -> None:
        if message is None:
            raise ValueError(_NONE_MESSAGE)
        self._acc[self._target_slot(target)] += message

    def send_to_neighbours(self, message, direction: str = "out") -> None:
        if message is None:
            raise ValueError(_NONE_MESSAGE)
        acc = self._acc
        for slot in self._neighbour_slots(direction):
            acc[slot] += message


class _MinContext(VertexContextImpl):
    __slots__ = ()

    def send(self, target, message) -> None:
        if message is None:
            raise ValueError(_NONE_MESSAGE)
        acc = self._acc
        slot = self._target_slot(target)
        if message < acc[slot]:
            acc[slot] = message

    def send_to_neighbours(self, message, direction: str = "out") -> None:
        if message is None:
            raise ValueError(_NONE_MESSAGE)
        acc = self._acc
        for slot in self._neighbour_slots(direction):
            if message < acc[slot]:
                acc[slot] = message


class _MaxContext(VertexContextImpl):
    __slots__ = ()

    def send(self, target, message) -> None:
        if message is None:
            raise ValueError(_NONE_MESSAGE)
        acc = self._acc
        slot = self._target_slot(target)
        if message > acc[slot]:
            acc[slot] = message

    def send_to_neighbours(self, message, direction: str = "out") -> None:
        if message is None:
            raise ValueError(_NONE_MESSAGE)
        acc = self._acc
        for slot in self._neighbour_slots(direction):
            if message > acc[slot]:
                acc[slot] = message


def _combining_context(combine: Callable) -> type[VertexContextImpl]:
    class _CombineContext(VertexContextImpl):
        __slots__ = ()

        def send(self, target, message) -> None:
            acc = self._acc
            slot = self._target_slot(target)
            current = acc[slot]
            acc[slot] = message if current is EMPTY else combine(current, message)

        def send_to_neighbours(self, message, direction: str = "out") -> None:
            acc = self._acc
            for slot in self._neighbour_slots(direction):
                current = acc[slot]
                acc[slot] = message if current is EMPTY else combine(current, message)

    return _CombineContext


def context_class(combine: Callable | None) -> type[VertexContextImpl]:
    """The context class for a program's combiner (None: every message is delivered)."""
    if combine is None:
        return _ListContext
    if combine is operator.add:
        return _SumContext
    if combine is min:
        return _MinContext
    if combine is max:
        return _MaxContext
    return _combining_context(combine)


def add_to_aggregate(aggregators: dict, aggregates: dict, name: str, value) -> None:
    """Combine ``value`` into ``aggregates[name]`` with the program's aggregator ``name``."""
    try:
        combine = aggregators[name].combine
    except KeyError:
        msg = f"no aggregator {name!r}; the program declares {sorted(aggregators)}"
        raise KeyError(msg) from None
    aggregates[name] = combine(aggregates[name], value) if name in aggregates else value
