"""Array programs for changing graphs: shortest paths started again beyond a removal, PageRank's
residual program by its older name (incremental WCC and BFS, repaired through parents, live
beside their static programs)."""

from __future__ import annotations

import numpy as np

from gyreflow.api.graph.array_algorithms import (
    ArrayShortestPaths,
    _improve,
)
from gyreflow.api.graph.residual_pagerank import ResidualPageRank


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


# Incremental PageRank's array program (``residual_pagerank``), by the name this module gave it
ArrayIncrementalPageRank = ResidualPageRank
