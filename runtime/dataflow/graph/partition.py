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
    concat_ids,
    csr,
    edge_weights,
    id_array,
    key_groups,
    unique_ids,
)
from gyreflow.runtime.dataflow.graph.chunks import OUT
from gyreflow.runtime.dataflow.graph.delta_csr import DeltaCsr, csr_matrix
from gyreflow.runtime.dataflow.graph.partition_changes import (
    PartitionChanges,
    any_given,
    plain_values,
)
from gyreflow.runtime.dataflow.graph.positions import ShiftedIndex

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
        given = (np.concatenate([chunk[1] for _, chunk in chunks]) if chunks
                 else np.empty(0, object))
        self._given = given if any_given(given) else None  # None: no vertex was given a value
        self.n = n = len(ids)
        self.index = ShiftedIndex(ids)
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
        self.remote_index = ShiftedIndex(self.remote_ids)
        self.m = m = n + len(self.remote_ids)
        columns = local
        if len(remote):
            at, _ = self.remote_index.lookup(others[~found])
            columns = local.copy()
            columns[~found] = n + at
        weights = edge_weights(values, len(vids))
        out = sides == OUT
        out_values = None
        if values is not None:
            out_values = plain_values(values[out][np.argsort(rows[out], kind="stable")])
        self._out = DeltaCsr(csr(rows[out], columns[out], weights[out], (n, m)), out_values)
        self.directed = directed
        if directed:
            into = ~out
            self._in = DeltaCsr(csr(rows[into], columns[into], weights[into], (n, m)),
                                keep_values=False)
        else:
            self._in = self._out
        self.source = None  # a callable giving the chunks followed (``out_values``)
        self._read_values = None  # the values read from ``source`` (not kept by ``_out``)
        self._stale = False
        self._degree = None
        self._columns_ids = None
        self.inserted = None  # where the last ``place`` put vertices in (``positions.inserted``)
        self._transposed: dict = {}
        self._reached: dict = {}

    def matrices(self, direction: str) -> list:
        """The CSR matrices of ``direction`` ("out", "in", "both"; undirected: always the out one)."""
        _check(direction)
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
        """``(columns, found)`` of the ids in ``query`` in the column space: the task's own
        vertices' positions, then the other tasks' vertices after ``n``."""
        query = id_array(query)
        columns, found = self.index.lookup(query)
        if not found.all() and len(self.remote_ids):
            missing = ~found
            at, more = self.remote_index.lookup(query[missing])
            columns[missing] = np.where(more, self.n + at, 0)
            found[missing] = more
        return columns, found

    @property
    def columns_ids(self) -> np.ndarray:
        """The id of every column: the task's vertices, then the other tasks' it reaches."""
        if self._columns_ids is None:
            self._columns_ids = (concat_ids([self.ids, self.remote_ids]) if len(self.remote_ids)
                                 else self.ids)
        return self._columns_ids

    @property
    def given(self) -> np.ndarray:
        """What the vertex stream gave each vertex (None for the vertices only edges named). While
        no vertex was given a value it is not kept: made at the first read, so that a window's new
        vertices need not move an array of Nones (``given_at`` reads without making it)."""
        if self._given is None:
            self._given = np.full(self.n, None, dtype=object)
        return self._given

    def given_at(self, positions: np.ndarray) -> np.ndarray:
        """``given[positions]``."""
        if self._given is None:
            return np.full(len(positions), None, dtype=object)
        return self._given[positions]

    @property
    def out_edges(self):
        """The out-edges as a CSR matrix over the column space (merged from the changes when
        they are read: most windows of an incremental program never read them whole)."""
        return self._out.merged()

    @property
    def in_edges(self):
        """The in-edges (undirected: the out-edges, the same matrix)."""
        return self._in.merged()

    @property
    def out_degree(self) -> np.ndarray:
        """The number of out-edges of every vertex."""
        if self._degree is None:
            self._degree = self._out.degree()
        return self._degree

    def edges(self, rows: np.ndarray, direction: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(rows, columns, weights)``: one entry per ``direction`` edge of the vertices at
        ``rows``, row by row in the order given (each row's edges in arrival order), read from
        the matrices' changes without merging them ("both": the out-edges, then the in-edges)."""
        found = [(self._out if side == "out" else self._in).entries(rows)
                 for side in self.sides(direction)]
        if len(found) == 1:
            return found[0]
        return tuple(np.concatenate(parts) for parts in zip(*found, strict=True))

    def sides(self, direction: str) -> list[str]:
        """The sides ("out", "in") whose edges ``direction`` follows, as ``matrices`` lists them."""
        _check(direction)
        if not self.directed or direction == "out":
            return ["out"]
        return ["in"] if direction == "in" else ["out", "in"]


def _check(direction: str) -> None:
    if direction not in _DIRECTIONS:
        msg = f"direction must be 'out', 'in' or 'both', got {direction!r}"
        raise ValueError(msg)
