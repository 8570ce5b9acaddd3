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


RANKS = np.dtype([("rank", float), ("sent", float), ("incoming", float)])


class ArrayIncrementalPageRank(ArrayPageRank):
    """Graphalytics PageRank of a changing graph, iterated in every window from the last window's
    ranks (a new vertex starts at ``1 / n``), by residuals (delta PageRank): a vertex sends its
    neighbours only the change of its rank since it last sent, and only once that exceeds the
    tolerance; each vertex keeps the sum of what reached it. The ranks are a fixed point
    whatever they start from, so removals need no restart. The second superstep scales the start
    to a total of 1 (new vertices and removed ones change it).

    When no vertex has a change above the tolerance left, every vertex sends what it has left
    (one full superstep), and the iteration stops once the exact step that follows moves no rank
    by more than ``tolerance`` (as a recomputation's stop), or at ``max_iterations``. Values:
    ``(rank, sent, incoming)``; the result is the rank.
    """

    aggregators = {"dangling": Aggregator.sum(0.0), "moved": Aggregator.max(0.0),
                   "mass": Aggregator.sum(0.0), "active": Aggregator.sum(0),
                   "flushing": Aggregator.max(0), "exact": Aggregator.max(0)}

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
        values = np.zeros(len(ids), dtype=RANKS)
        values["rank"] = np.nan
        return values

    @staticmethod
    def result(ids: np.ndarray, values: np.ndarray) -> np.ndarray:
        """The rank."""
        return values["rank"]

    def compute(self, part, inbox) -> np.ndarray:
        """Iteration 1: send the shares of the kept ranks; then one PageRank step per superstep
        from the incoming sums, sending the changes above the tolerance."""
        n = part.num_vertices
        if n == 0:  # an empty graph (before the first edge, or after the last removal)
            return part.values
        values = part.values.copy()
        dangling = part.out_degree == 0
        if part.iteration == 1:
            rank = np.where(np.isnan(values["rank"]), 1.0 / n, values["rank"])
            values["rank"] = values["sent"] = rank
            part.aggregate("mass", float(rank.sum()))
            part.send_along(_shares(rank, part.out_degree))
            part.aggregate("dangling", float(rank[dangling].sum()))
            part.aggregate("active", part.num_local)
            return values
        d = self.damping
        exact = part.iteration == 2 or part.aggregated("flushing") > 0
        if part.iteration == 2:  # the start scaled to a total of 1: a linear map of the sums
            mass = part.aggregated("mass")
            scale = 1.0 / mass if mass > 0 else 1.0
            values["incoming"] = inbox.dense(0.0, float) * scale
            values["sent"] *= scale
            values["rank"] *= scale
            spread = part.aggregated("dangling") * scale
        else:
            values["incoming"] += inbox.dense(0.0, float)
            spread = part.aggregated("dangling")
        rank = (1.0 - d) / n + d * (values["incoming"] + spread / n)
        moved = np.abs(rank - values["rank"])
        part.aggregate("moved", float(moved.max()) if len(moved) else 0.0)
        part.aggregate("exact", int(exact))
        values["rank"] = rank
        change = rank - values["sent"]
        flushing = part.aggregated("active") == 0
        active = change != 0 if flushing else np.abs(change) > self.tolerance
        part.aggregate("flushing", int(flushing))
        part.aggregate("active", int(active.sum()))
        if active.any():
            part.send_along(_shares(change, part.out_degree), where=active & ~dangling)
            values["sent"][active] = rank[active]
        part.aggregate("dangling", float(values["sent"][dangling].sum()))
        return values

    def terminate(self, iteration: int, aggregates: dict[str, Any]) -> bool:
        """Stop after an exact step (every change sent before it) that moved no rank by more
        than the tolerance."""
        return iteration > 1 and aggregates["exact"] > 0 and aggregates["moved"] <= self.tolerance

    def removal_scope(self, values: np.ndarray) -> frozenset:
        """Nothing starts again."""
        return frozenset()

    def restarts(self, values: np.ndarray, scope: frozenset) -> np.ndarray:
        """No vertex."""
        return np.zeros(len(values), dtype=bool)


def _shares(ranks: np.ndarray, degree: np.ndarray) -> np.ndarray:
    return np.divide(ranks, degree, out=np.zeros_like(ranks), where=degree > 0)
