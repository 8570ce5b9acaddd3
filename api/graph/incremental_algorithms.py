"""Array programs for changing graphs: shortest paths started again beyond a removal, PageRank from
the last window's ranks to a tolerance (incremental WCC and BFS, repaired through parents, live
beside their static programs)."""

from __future__ import annotations

from typing import Any

import numpy as np

from gyreflow.api.graph.array_algorithms import (
    NO_LIMIT,
    ArrayPageRank,
    ArrayShortestPaths,
    _improve,
)
from gyreflow.api.graph.views import Aggregator


class ArrayIncrementalShortestPaths(ArrayShortestPaths):
    """Weighted distances from ``source`` in a changing graph (non-negative weights).

    A window that only adds: its touched vertices that know their distance relax their out-edges,
    and improvements spread. A window that removed edges: no shortest path to a vertex nearer than
    ``d`` can use an edge whose ends are ``d`` or farther, ``d`` the smallest distance at the ends
    of the removed edges and at the removed vertices; the vertices at ``d`` or farther start again,
    and every vertex that still knows its distance relaxes its out-edges once. (Repair through
    parents, as ``incremental_wcc`` and ``incremental_bfs`` do, was 4x slower here: a re-added edge
    may carry another weight, so it restarts every child of a vertex that lost an edge.)
    """

    algorithm = "incremental_sssp"

    def compute(self, part, inbox) -> np.ndarray:
        """Relax the out-edges of the improved vertices (iteration 1: the starters)."""
        distance, improved = _improve(part.values, inbox)
        if part.iteration == 1:
            known = np.isfinite(distance)
            starting = known if part.removal_scope else part.touched & known
            improved = np.union1d(improved, np.flatnonzero(starting))
        if len(improved):
            rows, columns, weights = self.weights(part, improved)
            part.send(columns, distance[rows] + weights)
        return distance

    def removal_scope(self, values: np.ndarray) -> frozenset:
        """The smallest distance at the ends of this task's removed edges and removed vertices."""
        return frozenset((float(values.min()),))

    def restarts(self, values: np.ndarray, scope: frozenset) -> np.ndarray:
        """The vertices at the removal distance or farther (a zero-weight edge may end there);
        none when no vertex that lost an edge or went had a distance (they came in the window)."""
        if not scope:
            return np.zeros(len(values), dtype=bool)
        return values >= min(scope)


class ArrayIncrementalPageRank(ArrayPageRank):
    """Graphalytics PageRank of a changing graph, iterated in every window from the last window's
    ranks (a new vertex starts at ``1 / n``) until no rank moves by more than ``tolerance`` in a
    superstep, or ``max_iterations``. The ranks are a fixed point whatever they start from, so
    removals need no restart. The second superstep scales the start to a total of 1 (new vertices
    and removed ones change it): the total's error would otherwise shrink only by ``damping`` per
    superstep, and the changed vertices' errors shrink faster."""

    aggregators = {"dangling": Aggregator.sum(0.0), "moved": Aggregator.max(0.0),
                   "mass": Aggregator.sum(0.0)}

    def __init__(self, damping: float = 0.85, tolerance: float = 1e-9,
                 max_iterations: int = NO_LIMIT) -> None:
        super().__init__(damping, 1)
        if not tolerance > 0:
            msg = f"tolerance must be positive, got {tolerance!r}"
            raise ValueError(msg)
        self.tolerance = float(tolerance)
        self.max_iterations = max_iterations

    def init(self, ids: np.ndarray, given: np.ndarray) -> np.ndarray:
        """Not known yet: set in iteration 1, once the number of vertices is known."""
        return np.full(len(ids), np.nan)

    def compute(self, part, inbox) -> np.ndarray:
        """Iteration 1: send the shares of the kept ranks; then one PageRank step per superstep,
        aggregating how far the ranks moved."""
        n = part.num_vertices
        if n == 0:  # an empty graph (before the first edge, or after the last removal)
            return part.values
        if part.iteration == 1:
            rank = np.where(np.isnan(part.values), 1.0 / n, part.values)
            part.aggregate("mass", float(rank.sum()))
        else:
            d = self.damping
            mass = part.aggregated("mass") if part.iteration == 2 else 1.0
            scale = 1.0 / mass if mass > 0 else 1.0
            incoming = inbox.dense(0.0, float) + part.aggregated("dangling") / n
            rank = (1.0 - d) / n + d * scale * incoming
            moved = np.abs(rank - scale * part.values)
            part.aggregate("moved", float(moved.max()) if len(moved) else 0.0)
        degree = part.out_degree
        dangling = degree == 0
        part.send_along(np.divide(rank, degree, out=np.zeros_like(rank), where=~dangling))
        part.aggregate("dangling", float(rank[dangling].sum()))
        return rank

    def terminate(self, iteration: int, aggregates: dict[str, Any]) -> bool:
        """Stop once no rank moved by more than the tolerance."""
        return iteration > 1 and aggregates["moved"] <= self.tolerance

    def removal_scope(self, values: np.ndarray) -> frozenset:
        """Nothing starts again."""
        return frozenset()

    def restarts(self, values: np.ndarray, scope: frozenset) -> np.ndarray:
        """No vertex."""
        return np.zeros(len(values), dtype=bool)
