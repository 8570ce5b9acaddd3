"""Repair, not restart: incremental array programs whose values carry their parent, so that a
removed edge starts again only the vertices whose value rested on it (KickStarter, ASPLOS 2017).

A ``RepairingCompute`` computes a smallest value per vertex that travels along edges: a vertex
takes the smallest value its neighbours offer, and remembers the neighbour it took it from (its
parent). The parents form a forest (a vertex takes a value only when it is strictly smaller, so a
parent always had its value first). A window that removes edges or vertices invalidates only the
vertices whose parent chain used a removed edge or vertex: in the window's first superstep,
``invalidated`` finds, among the vertices that lost an edge (``removal_scope``), those with no edge
left to their parent, and their subtrees among the task's own vertices; those start again from
``init``.
The window then trims first: a started-again vertex sends a ``RESET`` to its neighbours on other
tasks, and a neighbour whose parent it is starts again too, until no task sent one (an aggregator
counts them). Only then does it repair: the started-again vertices ask their neighbours for their
values (a ``REQUEST``: the neighbours outside the subtrees answer once), the touched ones offer
theirs, and the smallest offers spread. Trimming before repairing keeps a value that rested on
a removed edge from coming back through a vertex that has not heard of the removal yet (it
could circle for ever, as in distance-vector routing's count to infinity). Everything else
keeps its value, which stays exact.

A program defines ``start`` (the plain start values), ``offer`` (what a vertex offers along an
edge), and optionally ``known`` and ``edges``; its values are a structured array (``value``, the
vertex's own ``id``, its ``parent`` and a ``link`` code) and its results the ``value`` field:

>>> import numpy as np
>>> from gyreflow.api import Environment, SizeTumblingWindow
>>> from gyreflow.api.graph import Edge, GraphView, RemoveEdge
>>> class Hops(RepairingCompute):
...     def start(self, ids, given):
...         return np.where(ids == 1, 0, 99)
...     def offer(self, values, rows, weights):
...         return values[rows] + 1
>>> windows = [[Edge(1, 2), Edge(2, 3), Edge(1, 3)], [RemoveEdge(1, 3)]]
>>> p = Environment.local(progress=False).pipeline("hops")
>>> @p.task
... def hops(ctx):
...     edges = ctx.source(windows, SizeTumblingWindow(1), parallelism=1).flat_map(list)
...     GraphView(None, edges, directed=False).incremental_compute(Hops()).collect("hops")
>>> [(w, sorted(c)) for w, c in sorted(p.execute().by_window("hops").items())]
[(1, [(1, 0), (2, 1), (3, 1)]), (2, [(3, 2)])]
"""

from __future__ import annotations

import abc

import numpy as np

from gyreflow.api.graph.arrays import ArrayVertexCompute
from gyreflow.api.graph.views import Aggregator

NO_PARENT, PARENT, RESTARTED = 0, 1, 2  # ``link`` codes: a root or unreached, a parent, started again
OFFER, RESET, REQUEST, HOLD = 0, 1, 2, 3  # message kinds
_REVERSE = {"out": "in", "in": "out", "both": "both"}


def id_dtype(ids: np.ndarray) -> np.dtype:
    """The dtype of the ``id`` and ``parent`` fields: int64 for integer ids, else object."""
    return np.dtype(np.int64) if ids.dtype.kind in "iu" else np.dtype(object)


def value_dtype(values: np.dtype, ids: np.dtype) -> np.dtype:
    """A repairing program's value: the result, the vertex's id, its parent and the link code."""
    return np.dtype([("value", values), ("id", ids), ("parent", ids), ("link", np.int8)])


def message_dtype(values: np.dtype, ids: np.dtype) -> np.dtype:
    """A message: its kind (``OFFER``, ``RESET``, ``REQUEST``), the offered value, the sender."""
    return np.dtype([("kind", np.int8), ("value", values), ("sender", ids)])


class RepairingCompute(ArrayVertexCompute):
    """An incremental array program of smallest values along edges that repairs after removals
    (see the module): subclasses define ``start`` and ``offer``.

    ``direction`` is the edges values travel along (``"out"``; ``"both"`` for weak connectivity
    of a directed graph); ``weighted`` says that ``offer`` reads the edge weights (see
    ``invalidated``; without it an answer to a request offers along a weight of 1). Every
    message arrives (``combine`` None): a vertex takes the smallest offer, the smallest sender on
    ties, and a ``RESET`` must reach a child whichever other neighbours reset in the same
    superstep.
    """

    combine = None
    max_iterations = 2**31 - 1
    direction = "out"
    aggregators = {"resets": Aggregator.sum(0), "repairing": Aggregator.max(0)}
    weighted = False

    @abc.abstractmethod
    def start(self, ids: np.ndarray, given: np.ndarray) -> np.ndarray:
        """The plain start values of the vertices ``ids``."""

    @abc.abstractmethod
    def offer(self, values: np.ndarray, rows: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """What the vertices at ``rows`` (plain ``values`` by position) offer along edges of
        ``weights`` (one entry per edge)."""

    def known(self, values: np.ndarray) -> np.ndarray:
        """A mask of the plain values worth offering (default: every one)."""
        return np.ones(len(values), dtype=bool)

    def edges(self, part, where: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(rows, columns, weights)`` of the ``direction`` edges of the vertices ``where``."""
        return part.edges(where, self.direction)

    def init(self, ids: np.ndarray, given: np.ndarray) -> np.ndarray:
        """``start``'s values, no parent, marked as started again."""
        plain = np.asarray(self.start(ids, given))
        kind = id_dtype(ids)
        values = np.zeros(len(ids), dtype=value_dtype(plain.dtype, kind))
        values["value"] = plain
        values["id"] = ids
        if kind.kind == "O":
            values["parent"] = None
        values["link"] = RESTARTED
        return values

    @staticmethod
    def result(ids: np.ndarray, values: np.ndarray) -> np.ndarray:
        """The ``value`` field."""
        return values["value"]

    def removal_scope(self, values: np.ndarray) -> frozenset:
        """The ids of the vertices that lost an edge or went."""
        return frozenset(values["id"].tolist())

    def restarts(self, values: np.ndarray, scope: frozenset) -> np.ndarray:
        """No vertex before the first superstep: ``invalidated`` picks them there, where the
        edges left are known."""
        return np.zeros(len(values), dtype=bool)

    def invalidated(self, part, values: np.ndarray) -> np.ndarray:
        """A mask of the task's vertices to start again in a window that removed something: the
        subtrees (among the task's vertices; ``RESET`` messages carry them on) of the vertices
        that lost an edge and have none left to their parent (the edge or the parent went). A
        removed edge that no vertex took its value along starts no vertex again. With
        ``weighted`` (``offer`` reads the edge weights), a vertex whose parent lost an edge too
        starts again even with an edge to it left (the edge may have come back with another
        weight), and an answer to a request looks the edge's weight up."""
        lost = part.removal_scope
        ids = values["id"]
        candidates = np.flatnonzero((values["link"] == PARENT) & part.touched
                                    & np.isin(ids, np.array(list(lost), dtype=ids.dtype)))
        if not len(candidates):
            return np.zeros(part.num_local, dtype=bool)
        rows, columns, _ = part.edges(candidates, _REVERSE[self.direction])
        kept = np.zeros(part.num_local, dtype=bool)
        kept[rows[np.asarray(part.columns[columns] == values["parent"][rows], dtype=bool)]] = True
        cut = ~kept[candidates]
        if self.weighted:
            cut |= np.isin(values["parent"][candidates], np.array(list(lost), dtype=ids.dtype))
        return subtrees(values, ids[candidates[cut]].tolist(),
                        lambda at: self._local_edges(part, at))

    def _local_edges(self, part, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The ``direction`` edges of the vertices at ``at`` to the task's own vertices."""
        rows, columns, _ = self.edges(part, at)
        local = columns < part.num_local
        return rows[local], columns[local]

    def compute(self, part, inbox) -> np.ndarray:
        """Trim (carry resets to the children on other tasks) until no task sends one, then
        repair: the started-again vertices ask their neighbours, the touched ones offer, and the
        smallest offers spread."""
        values = part.values  # changed in place: the engine keeps its own copy of the window's start
        links = values["link"]
        removal = bool(part.removal_scope)
        repairing = part.iteration > 1 and part.aggregated("repairing") > 0
        kinds = inbox.values["kind"] if len(inbox) else np.zeros(0, np.int8)
        out = _Messages(values.dtype["value"], values.dtype["id"],
                        part.num_local + len(part.columns))
        if not repairing and (removal if part.iteration == 1 else part.aggregated("resets") > 0):
            if part.iteration == 1:  # the subtrees among the task's vertices at once
                reset, remote = self.invalidated(part, values), True
                if reset.any():
                    values[reset] = self.init(part.ids[reset], part.given[reset])
            else:
                reset, remote = self._reset_children(part, values, inbox, kinds == RESET), False
            part.aggregate("resets", self._tell(RESET, part, reset, self.direction, out, remote))
            out.hold()  # the supersteps go on until no task sent a reset
            out.send(part)
            return values
        part.aggregate("repairing", 1)
        starting = np.zeros(part.num_local, dtype=bool)
        if not repairing:  # the first superstep of the repair
            restarted = links == RESTARTED
            links[restarted] = NO_PARENT
            if removal:  # not new vertices only: their edges' other ends offer anyway
                reverse = self.direction if self._symmetric(part) else _REVERSE[self.direction]
                self._tell(REQUEST, part, restarted, reverse, out)
            starting = part.touched | restarted
        improved = self._adopt(values, inbox, kinds == OFFER)
        plain = values["value"]
        known = self.known(plain)
        starting[improved] = True
        starting &= known
        if starting.any():
            rows, columns, weights = self.edges(part, np.flatnonzero(starting))
            out.offers(columns, self.offer(plain, rows, weights), part.ids[rows])
        asked = kinds == REQUEST
        if asked.any():
            self._answer(part, plain, known, (inbox.positions[asked],
                                              inbox.values["sender"][asked]), out)
        out.send(part)
        return values

    def _symmetric(self, part) -> bool:
        return self.direction == "both" or part.in_edges is part.out_edges

    def _reset_children(self, part, values, inbox, resets) -> np.ndarray:
        """Start again the vertices whose parent sent a ``RESET``; returns their mask."""
        mask = np.zeros(part.num_local, dtype=bool)
        if not resets.any():
            return mask
        at, senders = inbox.positions[resets], inbox.values["sender"][resets]
        child = (values["link"][at] == PARENT) & np.asarray(values["parent"][at] == senders,
                                                            dtype=bool)
        positions = np.unique(at[child])
        if len(positions):
            values[positions] = self.init(part.ids[positions], part.given[positions])
            mask[positions] = True
        return mask

    def _adopt(self, values, inbox, offers) -> np.ndarray:
        """Take the smallest offer where it is smaller than the value; returns the positions."""
        if not offers.any():
            return np.zeros(0, np.int64)
        at, got = inbox.positions[offers], inbox.values[offers]
        at, best, senders = smallest(at, got["value"], got["sender"], len(values))
        better = np.asarray(best < values["value"][at], dtype=bool)
        at = at[better]
        values["value"][at] = best[better]
        values["parent"][at] = senders[better]
        values["link"][at] = PARENT
        return at

    def _answer(self, part, plain, known, requests, out) -> None:
        """Offer the askers the values of the vertices they asked, along the edges to them."""
        at, askers = requests
        columns, found = part.column_positions(askers)
        at, columns = at[found], columns[found]
        keep = known[at]
        at, columns = at[keep], columns[keep]
        if not len(at):
            return
        if not self.weighted:  # the offer needs no edge weight: no edge to look up
            out.offers(columns, self.offer(plain, at, np.ones(len(at))), part.ids[at])
            return
        m = part.num_local + len(part.columns)
        wanted = np.unique(at.astype(np.int64) * m + columns)
        rows, targets, weights = self.edges(part, np.unique(at))
        hit = np.isin(rows.astype(np.int64) * m + targets, wanted)
        if hit.any():
            rows, targets, weights = rows[hit], targets[hit], weights[hit]
            out.offers(targets, self.offer(plain, rows, weights), part.ids[rows])

    @staticmethod
    def _tell(kind: int, part, mask, direction: str, out, remote: bool = False) -> int:
        """Send ``kind`` from the vertices of ``mask`` along their ``direction`` edges (only to
        other tasks' vertices with ``remote``); returns how many messages went."""
        if not mask.any():
            return 0
        rows, columns, _ = part.edges(np.flatnonzero(mask), direction)
        if remote:
            away = columns >= part.num_local
            rows, columns = rows[away], columns[away]
        out.add(kind, columns, part.ids[rows])
        return len(columns)


class _Messages:
    """A superstep's outgoing messages: offers reduced per target column, resets and requests."""

    def __init__(self, values: np.dtype, ids: np.dtype, size: int) -> None:
        self.dtype = message_dtype(values, ids)
        self.size = size
        self.pieces: list = []
        self.offered: list = []
        self.holding = False

    def offers(self, columns, values, senders) -> None:
        self.offered.append((columns, values, senders))

    def add(self, kind: int, columns, senders) -> None:
        if len(columns):
            pieces = np.zeros(len(columns), dtype=self.dtype)
            pieces["kind"] = kind
            pieces["sender"] = senders
            self.pieces.append((columns, pieces))

    def hold(self) -> None:
        """One message to the task's first vertex: the supersteps go on (a task without
        vertices has nothing to hold)."""
        self.holding = True

    def send(self, part) -> None:
        if self.holding and part.num_local:
            self.add(HOLD, np.zeros(1, np.int64), part.ids[:1])
        if self.offered:
            columns = np.concatenate([o[0] for o in self.offered])
            values = np.concatenate([o[1] for o in self.offered])
            senders = np.concatenate([o[2] for o in self.offered])
            columns, values, senders = smallest(columns, values, senders, self.size)
            messages = np.zeros(len(columns), dtype=self.dtype)
            messages["kind"] = OFFER
            messages["value"] = values
            messages["sender"] = senders
            self.pieces.append((columns, messages))
        for columns, messages in self.pieces:
            part.send(columns, messages)


def smallest(positions: np.ndarray, values: np.ndarray, senders: np.ndarray,
             size: int | None = None):
    """``(positions, values, senders)`` with each position once (sorted): its smallest value, and
    of the senders of that value the smallest (``size``: positions are below it; numbers then
    take two dense passes instead of a sort).

    >>> p, v, s = smallest(np.array([2, 0, 2, 2]), np.array([5, 1, 3, 3]), np.array([7, 8, 9, 4]))
    >>> p.tolist(), v.tolist(), s.tolist()
    ([0, 2], [1, 3], [8, 4])
    """
    if (values.dtype.kind in "iuf" and senders.dtype.kind in "iu" and size is not None
            and 16 * len(positions) >= size):  # few messages: a sort of them beats dense passes
        best = np.full(size, np.inf if values.dtype.kind == "f" else np.iinfo(values.dtype).max,
                       dtype=values.dtype)
        np.minimum.at(best, positions, values)
        tie = values == best[positions]
        first = np.full(size, np.iinfo(senders.dtype).max, dtype=senders.dtype)
        np.minimum.at(first, positions[tie], senders[tie])
        present = np.zeros(size, dtype=bool)
        present[positions] = True
        at = np.flatnonzero(present)
        return at, best[at], first[at]
    if values.dtype == object or senders.dtype == object:
        order = sorted(range(len(positions)),
                       key=lambda i: (positions[i], values[i], senders[i]))
        order = np.array(order, dtype=np.int64)
    else:
        order = np.lexsort((senders, values, positions))
    positions = positions[order]
    first = np.ones(len(positions), dtype=bool)
    first[1:] = positions[1:] != positions[:-1]
    return positions[first], values[order][first], senders[order][first]


def subtrees(values: np.ndarray, roots: list, children=None) -> np.ndarray:
    """A mask of the vertices (``values``: a repairing program's, by position) whose parent chain
    among these vertices reaches one of ``roots`` (ids), the roots included: one array step per
    level of the subtrees. With ``children`` (positions -> ``(rows, columns)``: the edges from
    those positions along which values travel, to positions of these vertices) each step looks
    at the edges of the level found, so the cost is the subtrees' edges; without, it follows one
    sort of every vertex's parent."""
    ids, parents = values["id"], values["parent"]
    if children is not None:
        linked = values["link"] == PARENT
        mask = np.zeros(len(values), dtype=bool)
        frontier = np.flatnonzero(np.isin(ids, np.array(roots, dtype=ids.dtype)))
        while len(frontier):
            mask[frontier] = True
            rows, columns = children(frontier)
            hit = linked[columns] & ~mask[columns]
            hit[hit] = np.asarray(parents[columns[hit]] == ids[rows[hit]], dtype=bool)
            frontier = np.unique(columns[hit])
        return mask
    linked = np.flatnonzero(values["link"] == PARENT)
    order = linked[np.argsort(parents[linked], kind="stable")]
    by_parent = parents[order]
    mask = np.zeros(len(values), dtype=bool)
    frontier = np.flatnonzero(np.isin(ids, np.array(roots, dtype=ids.dtype)))
    while len(frontier):
        mask[frontier] = True
        found = ids[frontier]
        lo = np.searchsorted(by_parent, found, side="left")
        hi = np.searchsorted(by_parent, found, side="right")
        counts = hi - lo
        if not counts.sum():
            break
        at = np.repeat(lo - (np.cumsum(counts) - counts), counts) + np.arange(int(counts.sum()))
        children = order[at]
        frontier = children[~mask[children]]
    return mask

