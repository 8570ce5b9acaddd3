"""Array programs for changing graphs: shortest paths repaired through parents, PageRank's
residual program by its older name (incremental WCC and BFS, repaired the same way, live beside
their static programs)."""

from __future__ import annotations

from typing import Any

import numpy as np

from gyreflow.api.graph.array_algorithms import NO_LIMIT
from gyreflow.api.graph.arrays import ids_equal
from gyreflow.api.graph.repair import RepairingCompute
from gyreflow.api.graph.residual_pagerank import ResidualPageRank
from gyreflow.api.graph.weights import out_edge_weights, raw_weights


class ArrayIncrementalShortestPaths(RepairingCompute):
    """Weighted distances from ``source`` in a changing graph (non-negative weights), repaired
    after removals (``RepairingCompute``): each vertex keeps the neighbour its distance came from,
    and a removed edge or vertex starts again only the vertices whose shortest path (the chain of
    parents) used it. An edge to the parent keeps a vertex only while the parent's distance plus
    the edge's weight is still the vertex's distance: an edge removed and added again in one
    window may carry another weight. Edge weights as ``sssp`` reads them (``weight``)."""

    algorithm = "incremental_sssp"
    weighted = True

    def __init__(self, source: Any, max_iterations: int = NO_LIMIT,
                 weight: str | None = "weight") -> None:
        self.source = source
        self.max_iterations = max_iterations
        self.weight = weight

    def start(self, ids: np.ndarray, given: np.ndarray) -> np.ndarray:
        """0.0 for the source, ``inf`` otherwise."""
        return np.where(ids_equal(ids, self.source), 0.0, np.inf)

    def known(self, values: np.ndarray) -> np.ndarray:
        """The vertices with a distance."""
        return values < np.inf

    def offer(self, values: np.ndarray, rows: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """The distance plus the edge's weight."""
        return values[rows] + weights

    def edges(self, part, where: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``out_edge_weights`` of the vertices ``where``, reading each property once per edge."""
        read = self.__dict__.get("_read")
        if read is None:
            read = self._read = {}
        return out_edge_weights(part, where, self.weight, self.algorithm, read)

    def added(self, part) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The window's new out-edges with their weights, read from their values as ``edges``
        reads them (not from the edges of their sources)."""
        rows, columns, raw = part.added_edges(self.direction, values=True)
        return rows, columns, raw_weights(part, rows, columns, raw, self.weight, self.algorithm)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_read", None)  # what this process read: not shipped
        return state


# Incremental PageRank's array program (``residual_pagerank``), by the name this module gave it
ArrayIncrementalPageRank = ResidualPageRank
