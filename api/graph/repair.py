"""Repair, not restart: incremental array programs whose values carry their parent, so that a
removed edge starts again only the vertices whose value rested on it (KickStarter, ASPLOS 2017).

A ``RepairingCompute`` computes a smallest value per vertex that travels along edges: a vertex
takes the smallest value its neighbours offer, and remembers the neighbour it took it from (its
parent). The parents form a forest (a vertex takes a value only when it is strictly smaller, so a
parent always had its value first). A window that removes edges or vertices invalidates only the
vertices whose parent chain used a removed edge or vertex: in the window's first superstep,
``invalidated`` finds, among the vertices that lost an edge (``removal_scope``), those with no edge
left to their parent (with ``weighted``: none whose offer still gives their value), and their
subtrees among the task's own vertices; those start again from ``init``. The subtrees are
trimmed on the way down, smallest values first (``reanchors``): a vertex that a neighbour left
standing offers its very value takes it as its parent and keeps its value, and its subtree is not
walked (a distance often has another neighbour one step closer; a component label nearly always
has another neighbour in the component).
The window then trims first: a started-again vertex sends a ``RESET`` to its neighbours on other
tasks, and a neighbour whose parent it is starts again too, with its subtree, until no task sent
one (an aggregator counts them). Only then does it repair: the started-again vertices ask their
neighbours for their values (the task's own answer at once, other tasks' get a ``REQUEST``), the
touched ones offer theirs, and the smallest offers spread. Trimming before repairing keeps a value
that rested on a removed edge from coming back through a vertex that has not heard of the removal
yet (it could circle for ever, as in distance-vector routing's count to infinity). Everything else
keeps its value, which stays exact.

A superstep spreads offers among the task's own vertices until none improves (a few array steps
per level of the changed region); only offers to other tasks' vertices wait for the next
superstep. A task whose edges all stay among its own vertices (parallelism 1) trims and repairs
in the window's first superstep, and sends nothing. Every step reads the edges of the vertices it
starts from, and no pass goes over every vertex: a window costs what it changes.

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
from gyreflow.api.graph.trimming import (
    _NONE,
    _REVERSE,
    NO_PARENT,
    PARENT,
    RESTARTED,
    SubtreeTrimming,
    smallest,
    subtrees_at,
)
from gyreflow.api.graph.views import Aggregator
from gyreflow.runtime.dataflow.graph.arrays import distinct, union

OFFER, RESET, REQUEST, HOLD = 0, 1, 2, 3  # message kinds


def id_dtype(ids: np.ndarray) -> np.dtype:
    """The dtype of the ``id`` and ``parent`` fields: int64 for integer ids, else object."""
    return np.dtype(np.int64) if ids.dtype.kind in "iu" else np.dtype(object)


def value_dtype(values: np.dtype, ids: np.dtype) -> np.dtype:
    """A repairing program's value: the result, the vertex's id, its parent and the link code."""
    return np.dtype([("value", values), ("id", ids), ("parent", ids), ("link", np.int8)])


def message_dtype(values: np.dtype, ids: np.dtype) -> np.dtype:
    """A message: its kind (``OFFER``, ``RESET``, ``REQUEST``), the offered value, the sender."""
    return np.dtype([("kind", np.int8), ("value", values), ("sender", ids)])


class RepairingCompute(SubtreeTrimming, ArrayVertexCompute):
    """An incremental array program of smallest values along edges that repairs after removals
    (see the module): subclasses define ``start`` and ``offer``.

    ``direction`` is the edges values travel along (``"out"``; ``"both"`` for weak connectivity
    of a directed graph); ``weighted`` says that ``offer`` reads the edge weights (see
    ``invalidated``; without it an answer to a request offers along a weight of 1);
    ``reanchors`` False starts every invalidated vertex again (no trimming by value). Every
    message arrives (``combine`` None): a vertex takes the smallest offer, the smallest sender on
    ties, and a ``RESET`` must reach a child whichever other neighbours reset in the same
    superstep.
    """

    combine = None
    max_iterations = 2**31 - 1
    direction = "out"
    aggregators = {"resets": Aggregator.sum(0), "repairing": Aggregator.max(0)}
    weighted = False
    reanchors = True  # a vertex about to start again keeps a value a neighbour still gives it
    reports_changes = True  # values change in place, at positions ``part.changing`` is told

    @abc.abstractmethod
    def start(self, ids: np.ndarray, given: np.ndarray) -> np.ndarray:
        """The plain start values of the vertices ``ids``."""

    @abc.abstractmethod
    def offer(self, values: np.ndarray, rows: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """What the vertices at ``rows`` (plain ``values`` by position) offer along edges of
        ``weights`` (one entry per edge)."""

    def known(self, values: np.ndarray) -> np.ndarray:
        """A mask of the plain values worth offering, value by value (default: every one); it is
        asked of the values of the vertices about to offer, not of every vertex."""
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
        ``weighted`` (``offer`` reads the edge weights), an edge to the parent keeps a vertex
        only when the parent's offer along it still gives the vertex's value (the edge may have
        come back with another weight; a parent on another task, whose value is not known here,
        keeps it only when it lost no edge), and an answer to a request looks the edge's weight
        up. Only the vertices that lost the edge to their parent are looked at, or, when the
        window's removals are not known edge by edge (``part.removed_edges``), those that lost
        an edge and whose parent lost one too (or went)."""
        mask = np.zeros(part.num_local, dtype=bool)
        links, parents = values["link"], values["parent"]
        removed = part.removed_edges() if hasattr(part, "removed_edges") else None
        if removed is not None:
            rows, others = removed
            hit = links[rows] == PARENT
            rows, others = rows[hit], others[hit]
            candidates = distinct(rows[np.asarray(parents[rows] == others, dtype=bool)])
        else:
            scope = np.array(list(part.removal_scope), dtype=values["id"].dtype)
            at, found = part.column_positions(scope)
            at = at[found]
            at = at[at < part.num_local]
            at = at[(links[at] == PARENT) & part.touched[at]]
            candidates = distinct(at[np.isin(parents[at], scope)])
        if not len(candidates):
            return mask
        roots = candidates[~self._parent_kept(part, values, candidates)]
        if len(roots):
            mask[self._cut(part, values, roots)] = True
        return mask

    def _cut(self, part, values, roots: np.ndarray) -> np.ndarray:
        """The positions to start again below the vertices at ``roots``, which lost their
        parent: their subtrees among the task's vertices, or, with ``reanchors``, trimmed."""
        if not self.reanchors:
            return subtrees_at(values, roots, lambda at: self._local_edges(part, at))
        return self._trim(part, values, roots)

    def _parent_kept(self, part, values, candidates) -> np.ndarray:
        """Of the vertices at ``candidates`` (each with a parent that lost an edge), those that
        keep it: an edge to it is left (``weighted``: one along which it offers the vertex's
        value)."""
        n = part.num_local
        parents = values["parent"]
        symmetric = self._symmetric(part)
        if self.weighted and symmetric:  # the candidates' own edges carry the parents' weights
            rows, columns, weights = self.edges(part, candidates)
        else:
            rows, columns, weights = part.edges(candidates, _REVERSE[self.direction])
        to_parent = np.asarray(part.columns[columns] == parents[rows], dtype=bool)
        rows, columns, weights = rows[to_parent], columns[to_parent], weights[to_parent]
        kept = np.zeros(n, dtype=bool)
        if not self.weighted:
            kept[rows] = True
            return kept[candidates]
        plain = values["value"]
        local = columns < n  # a parent on another task lost an edge: its value is not known here
        rows, columns, weights = rows[local], columns[local], weights[local]
        if symmetric:
            same = np.asarray(self.offer(plain, columns, weights) == plain[rows], dtype=bool)
            kept[rows[same]] = True
        else:  # the parents' own edges say the weights
            targets, offered, _ = self._along(part, plain, columns, rows)
            kept[targets[np.asarray(offered == plain[targets], dtype=bool)]] = True
        return kept[candidates]

    def _local_edges(self, part, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The ``direction`` edges of the vertices at ``at`` to the task's own vertices."""
        rows, columns, _ = part.edges(at, self.direction)
        local = columns < part.num_local
        return rows[local], columns[local]

    def compute(self, part, inbox) -> np.ndarray:
        """Trim (carry resets to the children on other tasks) until no task sends one, then
        repair: the started-again vertices ask their neighbours, the touched ones offer, and the
        smallest offers spread, among the task's vertices within the superstep."""
        values = part.values  # changed in place: the engine keeps its own copy of the window's start
        removal = bool(part.removal_scope)
        first = part.iteration == 1
        repairing = not first and part.aggregated("repairing") > 0
        kinds = inbox.values["kind"] if len(inbox) else np.zeros(0, np.int8)
        out = _Messages(values.dtype["value"], values.dtype["id"])
        if not repairing and removal and (first or part.aggregated("resets") > 0):
            if first:  # the subtrees among the task's vertices at once
                reset = np.flatnonzero(self.invalidated(part, values))
            else:
                reset = self._reset_children(part, values, inbox, kinds == RESET)
            if len(reset):
                part.changing(reset)
                values[reset] = self.init(part.ids[reset], part.given_at(reset))
                values["link"][reset] = RESTARTED
            if not first or len(part.columns) > part.num_local:
                part.aggregate("resets", self._tell(RESET, part, reset, self.direction, out))
                out.hold()  # the supersteps go on until no task sent a reset
                out.send(part)
                return values
            # No edge leaves the task's vertices: its trimming is whole, it repairs at once (not
            # saying so: other tasks may go on trimming, and then repairing does no harm here).
        else:
            part.aggregate("repairing", 1)
        if repairing:
            seeds = self._take(part, values, *_offers_in(inbox, kinds == OFFER))
            asked = kinds == REQUEST
            if asked.any():
                self._answer(part, values, inbox.positions[asked],
                             inbox.values["sender"][asked], out)
        else:  # the first superstep of the repair
            seeds = self._start_repair(part, values, removal, out)
        self._spread(part, values, seeds, out)
        out.send(part)
        return values

    def _symmetric(self, part) -> bool:
        """Whether a vertex's edges are its neighbours' edges back to it (undirected, "both")."""
        return self.direction == "both" or not getattr(part, "directed", True)

    def _spread(self, part, values, seeds: np.ndarray, out) -> None:
        """The vertices at ``seeds`` offer along their edges; the task's own vertices that take
        an offer offer in turn, until none does; offers to other tasks' vertices go out."""
        n = part.num_local
        ids = part.ids
        plain = values["value"]
        frontier = seeds
        while len(frontier):
            frontier = frontier[np.asarray(self.known(plain[frontier]), dtype=bool)]
            if not len(frontier):
                return
            rows, columns, weights = self.edges(part, frontier)
            offered = self.offer(plain, rows, weights)
            local = columns < n
            if not local.all():
                far = ~local
                out.offers(columns[far], offered[far], ids[rows[far]])
                rows, columns, offered = rows[local], columns[local], offered[local]
            better = np.asarray(offered < plain[columns], dtype=bool)
            frontier = self._take(part, values, columns[better], offered[better],
                                  ids[rows[better]])

    def _start_repair(self, part, values, removal: bool, out) -> np.ndarray:
        """The first superstep of the repair: the window's new edges carry offers, and the
        started-again vertices (and new ones) ask their neighbours; returns the positions that
        offer along their edges next (those, and the vertices that took an offer)."""
        links = values["link"]
        restarted = np.flatnonzero(links == RESTARTED)
        part.changing(restarted)
        if getattr(part, "added", None) is None:  # every edge is new: the touched offer along all
            links[restarted] = NO_PARENT
            seeds = union(np.flatnonzero(part.touched), restarted)
        else:  # along the new edges (a started-again vertex offers along all its edges next)
            rows, columns, weights = self.added(part)
            keep = links[rows] != RESTARTED
            links[restarted] = NO_PARENT
            seeds = union(restarted, self._offer_along(
                part, values, rows[keep], columns[keep], out,
                None if weights is None else weights[keep]))
        if removal and len(restarted):  # not new vertices only: the other ends offer anyway
            seeds = union(seeds, self._ask(part, values, restarted, out))
        return seeds

    def added(self, part) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """``(rows, columns, weights)`` of the ``direction`` edges the window added (``weights``
        None: looked up among the edges of the rows when ``weighted``)."""
        rows, columns = part.added_edges(self.direction)
        return rows, columns, None

    def _offer_along(self, part, values, senders: np.ndarray, targets: np.ndarray,
                     out, weights: np.ndarray | None = None) -> np.ndarray:
        """The vertices at ``senders`` that know their value offer it along their edges to the
        columns ``targets`` (pairwise; ``weights``: those edges' weights, else looked up): other
        tasks' vertices get an offer, the task's own take it at once; returns the positions that
        took one."""
        plain = values["value"]
        known = np.asarray(self.known(plain[senders]), dtype=bool)
        senders, targets = senders[known], targets[known]
        if not len(senders):
            return _NONE
        if weights is not None:
            offered = self.offer(plain, senders, weights[known])
        elif self.weighted:
            targets, offered, senders = self._along(part, plain, senders, targets)
        else:
            offered = self.offer(plain, senders, np.ones(len(senders)))
        local = targets < part.num_local
        if not local.all():
            far = ~local
            out.offers(targets[far], offered[far], part.ids[senders[far]])
            senders, targets, offered = senders[local], targets[local], offered[local]
        return self._take(part, values, targets, offered, part.ids[senders])

    def _ask(self, part, values, restarted: np.ndarray, out) -> np.ndarray:
        """The started-again vertices at ``restarted`` ask their neighbours for what they offer
        along the edges between them: the task's own answer at once, other tasks' vertices get
        a ``REQUEST``; returns the positions that took an answer."""
        n = part.num_local
        symmetric = self._symmetric(part)
        if symmetric and self.weighted:  # the asking vertices' own edges carry the weights
            rows, columns, weights = self.edges(part, restarted)
        else:
            rows, columns, weights = part.edges(restarted, self.direction if symmetric
                                                else _REVERSE[self.direction])
        local = columns < n
        if not local.all():
            far = ~local
            out.add(REQUEST, columns[far], part.ids[rows[far]])
            rows, columns, weights = rows[local], columns[local], weights[local]
        if not (symmetric and self.weighted):
            return self._offer_along(part, values, columns, rows, out)
        plain = values["value"]
        known = np.asarray(self.known(plain[columns]), dtype=bool)
        rows, columns, weights = rows[known], columns[known], weights[known]
        return self._take(part, values, rows, self.offer(plain, columns, weights),
                          part.ids[columns])

    def _along(self, part, plain, senders: np.ndarray, targets: np.ndarray):
        """``(targets, offers, senders)``: what the vertices at ``senders`` offer along their
        ``direction`` edges to the columns ``targets`` (pairwise; one entry per such edge)."""
        m = len(part.columns)
        wanted = distinct(senders.astype(np.int64) * m + targets)
        rows, columns, weights = self.edges(part, distinct(senders))
        hit = np.isin(rows.astype(np.int64) * m + columns, wanted)
        rows, columns, weights = rows[hit], columns[hit], weights[hit]
        return columns, self.offer(plain, rows, weights), rows

    def _reset_children(self, part, values, inbox, resets) -> np.ndarray:
        """The positions of the vertices whose parent sent a ``RESET``, with their subtrees
        among the task's vertices."""
        if not resets.any():
            return _NONE
        at, senders = inbox.positions[resets], inbox.values["sender"][resets]
        child = (values["link"][at] == PARENT) & np.asarray(values["parent"][at] == senders,
                                                            dtype=bool)
        roots = distinct(at[child])
        if not len(roots):
            return _NONE
        return self._cut(part, values, roots)

    def _take(self, part, values, at, offered, senders) -> np.ndarray:
        """Take the smallest offer at each position of ``at`` where it is smaller than the
        value (the smallest sender on ties); returns the positions that took one."""
        if not len(at):
            return _NONE
        better = np.asarray(offered < values["value"][at], dtype=bool)
        if not better.all():
            at, offered, senders = at[better], offered[better], senders[better]
            if not len(at):
                return _NONE
        at, best, senders = smallest(at, offered, senders, len(values))
        part.changing(at)
        values["value"][at] = best
        values["parent"][at] = senders
        values["link"][at] = PARENT
        return at

    def _answer(self, part, values, at, askers, out) -> None:
        """Offer the askers the values of the vertices at ``at`` they asked, along the edges
        to them."""
        columns, found = part.column_positions(askers)
        self._offer_along(part, values, at[found], columns[found], out)

    @staticmethod
    def _tell(kind: int, part, positions, direction: str, out) -> int:
        """Send ``kind`` from the vertices at ``positions`` along their ``direction`` edges to
        other tasks' vertices; returns how many messages went."""
        if not len(positions):
            return 0
        rows, columns, _ = part.edges(positions, direction)
        away = columns >= part.num_local
        out.add(kind, columns[away], part.ids[rows[away]])
        return int(away.sum())


def _offers_in(inbox, offers) -> tuple:
    """``(positions, values, senders)`` of the ``OFFER`` messages of ``inbox``."""
    if not offers.any():
        return _NONE, _NONE, _NONE
    got = inbox.values[offers]
    return inbox.positions[offers], got["value"], got["sender"]


class _Messages:
    """A superstep's outgoing messages: offers reduced per target column, resets and requests."""

    def __init__(self, values: np.dtype, ids: np.dtype) -> None:
        self.dtype = message_dtype(values, ids)
        self.pieces: list = []
        self.offered: list = []
        self.holding = False

    def offers(self, columns, values, senders) -> None:
        if len(columns):
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
            columns, values, senders = smallest(columns, values, senders, len(part.columns))
            messages = np.zeros(len(columns), dtype=self.dtype)
            messages["kind"] = OFFER
            messages["value"] = values
            messages["sender"] = senders
            self.pieces.append((columns, messages))
        for columns, messages in self.pieces:
            part.send(columns, messages)
