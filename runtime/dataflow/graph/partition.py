"""One task's share of a graph as arrays: the CSR partition built from its per-key-group chunks
(``chunks``), which follows a window's changes in place (``partition_changes``; ``array_context``
has what a program sees).

Chunks are stored under a key of their own key group, so snapshots and restores with another
parallelism move whole chunks. The partition numbers the task's vertices ``0..n-1`` and every other
vertex its edges reach ``n..m-1`` (grouped by owning task): the *column space* of its CSR matrices
and of the messages it sends.
"""

from __future__ import annotations

import numpy as np

from gyreflow.runtime.dataflow.graph.arrays import (
    IdIndex,
    concat_ids,
    csr,
    edge_weights,
    id_array,
    key_groups,
    unique_ids,
)
from gyreflow.runtime.dataflow.graph.chunks import OUT
from gyreflow.runtime.dataflow.graph.partition_changes import PartitionChanges, csr_matrix

_DIRECTIONS = ("out", "in", "both")


class Partition(PartitionChanges):
    """A task's vertices as dense positions and its edges as CSR matrices over the column space."""

    def __init__(self, chunks: list[tuple[int, list]], directed: bool, parallelism: int,
                 max_parallelism: int) -> None:
        chunks = sorted(chunks, key=lambda item: item[0])
        self.parallelism, self.max_parallelism = parallelism, max_parallelism
        self.groups = [group for group, _ in chunks]
        sizes = [len(chunk[0]) for _, chunk in chunks]
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.ids = ids = concat_ids([chunk[0] for _, chunk in chunks])
        self.given = (np.concatenate([chunk[1] for _, chunk in chunks]) if chunks
                      else np.empty(0, object))
        self.n = n = len(ids)
        self.index = IdIndex(ids)
        vids = concat_ids([chunk[2] for _, chunk in chunks])
        others = concat_ids([chunk[3] for _, chunk in chunks])
        sides = (np.concatenate([chunk[5] for _, chunk in chunks]) if chunks
                 else np.zeros(0, np.int8))
        if any(chunk[4] is not None for _, chunk in chunks):
            values = np.concatenate([chunk[4] if chunk[4] is not None
                                     else np.full(len(chunk[2]), None, dtype=object)
                                     for _, chunk in chunks])
        else:
            values = None
        rows, _ = self.index.lookup(vids)
        local, found = self.index.lookup(others)
        remote = unique_ids(others[~found])
        owners = key_groups(remote, max_parallelism) * parallelism // max_parallelism
        order = np.argsort(owners, kind="stable")
        self.remote_ids, owners = remote[order], owners[order]
        self.bounds = n + np.searchsorted(owners, np.arange(parallelism + 1))
        self.columns_ids = concat_ids([ids, self.remote_ids])
        self.m = m = n + len(self.remote_ids)
        columns = local
        if len(remote):
            at, _ = IdIndex(self.remote_ids).lookup(others[~found])
            columns = local.copy()
            columns[~found] = n + at
        weights = edge_weights(values, len(vids))
        out = sides == OUT
        self.out_edges = csr(rows[out], columns[out], weights[out], (n, m))
        self.source = None  # a callable giving the chunks followed (``edit_values``)
        self.out_values = None if values is None else values[out][np.argsort(rows[out], kind="stable")]
        self.directed = directed
        if directed:
            into = ~out
            self.in_edges = csr(rows[into], columns[into], weights[into], (n, m))
        else:
            self.in_edges = self.out_edges
        self.out_degree = np.diff(self.out_edges.indptr)
        self._transposed: dict = {}
        self._reached: dict = {}
        self.columns_index = None

    def matrices(self, direction: str) -> list:
        """The CSR matrices of ``direction`` ("out", "in", "both"; undirected: always the out one)."""
        if direction not in _DIRECTIONS:
            msg = f"direction must be 'out', 'in' or 'both', got {direction!r}"
            raise ValueError(msg)
        if not self.directed or direction == "out":
            return [self.out_edges]
        if direction == "in":
            return [self.in_edges]
        return [self.out_edges, self.in_edges]

    def transposed(self, which: int):
        """The transpose of the out (0) or in (1) matrix as CSR with every entry 1 (a value sent
        along an edge arrives as it is, whatever the weight), and the columns it reaches."""
        found = self._transposed.get(which)
        if found is None:
            matrix = self.out_edges if which == 0 else self.in_edges
            ones = csr_matrix((np.ones(matrix.nnz), matrix.indices, matrix.indptr),
                                     shape=matrix.shape)
            found = self._transposed[which] = (ones.T.tocsr(),
                                               np.bincount(matrix.indices, minlength=self.m) > 0)
        return found

    def column_positions(self, query: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(columns, found)`` of the ids in ``query`` in the column space."""
        if self.columns_index is None:
            self.columns_index = IdIndex(self.columns_ids)
        return self.columns_index.lookup(id_array(query))


