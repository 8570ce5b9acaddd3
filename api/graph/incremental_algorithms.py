"""Array programs for changing graphs: shortest paths repaired after removals, PageRank from the
last window's ranks to a tolerance (incremental WCC and BFS live beside their static programs)."""

from __future__ import annotations

from typing import Any

import numpy as np

from gyreflow.api.graph.array_algorithms import NO_LIMIT, ArrayPageRank, ArrayShortestPaths
from gyreflow.api.graph.repair import RepairingCompute
from gyreflow.api.graph.views import Aggregator


class ArrayIncrementalShortestPaths(RepairingCompute, ArrayShortestPaths):
    """Weighted distances from ``source`` in a changing graph (non-negative weights), repaired
    after removals (``RepairingCompute``): each vertex keeps the neighbour its distance came from,
    and a removed edge or vertex starts again only the vertices whose shortest path (the chain
    of parents) used it. The vertices the window's input touched relax their out-edges in its
    first superstep."""

    algorithm = "incremental_sssp"
    weighted = True

    def start(self, ids: np.ndarray, given: np.ndarray) -> np.ndarray:
        """0.0 for the source, ``inf`` otherwise."""
        return ArrayShortestPaths.init(self, ids, given)

    def known(self, values: np.ndarray) -> np.ndarray:
        """The vertices with a distance."""
        return np.isfinite(values)

    def offer(self, values: np.ndarray, rows: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """The distance plus the edge's weight."""
        return values[rows] + weights

    def edges(self, part, where: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The out-edges of ``where`` with their weights (``ArrayShortestPaths.weights``)."""
        return self.weights(part, where)


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
