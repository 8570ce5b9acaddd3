"""An array program of a MATCH run in this process over one partition of a graph: no pipeline."""

from __future__ import annotations

from typing import Any

import numpy as np


class Csr:
    """The edges as compressed rows: ``indices[indptr[v]:indptr[v + 1]]`` are the columns of row
    ``v``'s entries, in the order the edges were given (parallel edges stay apart)."""

    def __init__(self, rows: np.ndarray, columns: np.ndarray, size: int) -> None:
        order = np.argsort(rows, kind="stable")
        self.order = order  # entry -> the edge it came from
        self.indices = columns[order].astype(np.int64)
        self.indptr = np.zeros(size + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=size), out=self.indptr[1:])
        self.shape = (size, size)

    @property
    def nnz(self) -> int:
        return len(self.indices)


class _Inbox:
    def __init__(self, positions: np.ndarray, values: Any) -> None:
        self.positions, self.values = positions, values


class LocalPart:
    """The one partition of a graph of ``values`` (vertices at positions 0..n-1, their ids) and
    edges ``(source position, target position, value)``, as an ``ArrayVertexCompute`` sees it.

    >>> from gyreflow.api.graph.query import Query
    >>> from gyreflow.api.graph.query.array_match import ArrayMatch
    >>> from gyreflow.api.graph.query.arrays import array_plan
    >>> part = LocalPart([{}, {}, {}], [0, 1, 1], [1, 2, 0], [None, None, None])
    >>> plan = array_plan(Query("MATCH (a)-->(b)-->(c) RETURN count(*)"))
    >>> part.run(ArrayMatch(plan, {}, None))[0]["count"]  # 0-1-2, 0-1-0, 1-0-1
    3
    """

    def __init__(self, values: list, sources: list, targets: list, edge_values: list) -> None:
        size = len(values)
        self.num_local = size
        self.ids = np.arange(size, dtype=np.int64)
        self.columns = self.ids
        self.given = np.empty(size, dtype=object)
        self.given[:] = values
        rows = np.asarray(sources, dtype=np.int64)
        columns = np.asarray(targets, dtype=np.int64)
        self.out_edges = Csr(rows, columns, size)
        self.in_edges = Csr(columns, rows, size)
        held = np.empty(len(edge_values), dtype=object)
        held[:] = edge_values
        self.out_values = held[self.out_edges.order]
        self.values = np.empty(0, dtype=object)
        self.iteration = 0
        self._sent: list = []

    def send(self, columns: np.ndarray, values: Any) -> None:
        self._sent.append((np.asarray(columns, dtype=np.int64), values))

    def column_positions(self, ids: Any) -> tuple[np.ndarray, np.ndarray]:
        found = np.asarray(ids, dtype=np.int64)
        return found, np.ones(len(found), dtype=bool)

    def run(self, program) -> np.ndarray:
        """The vertex values after ``program`` (an ``ArrayVertexCompute`` that sends rows, no
        combiner) ran until no message is left or its ``max_iterations``."""
        self.values = program.init(self.ids, self.given)
        inbox = _Inbox(np.zeros(0, dtype=np.int64), np.zeros((0, 0)))
        for iteration in range(1, program.max_iterations + 1):
            self.iteration = iteration
            computed = program.compute(self, inbox)
            if computed is not None:
                self.values = computed
            sent, self._sent = self._sent, []
            if not sent:
                break
            inbox = _Inbox(np.concatenate([columns for columns, _ in sent]),
                           np.concatenate([np.asarray(rows) for _, rows in sent]))
        return self.values


__all__ = ["Csr", "LocalPart"]
