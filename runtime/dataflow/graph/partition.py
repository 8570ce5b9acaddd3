"""One task's share of a graph as arrays: per-key-group chunks in state and the CSR partition built
from them, which follows a window's changes in place (``array_context`` has what a program sees).

A chunk holds the vertices of one key group (ids, the values the vertex stream gave) and their edge
halves (vertex, other end, edge value, side: 1 out, 3 in) in arrival order; it is stored under a key
of its own key group, so snapshots and restores with another parallelism move whole chunks. The
partition numbers the task's vertices ``0..n-1`` and every other vertex its edges reach ``n..m-1``
(grouped by owning task): the *column space* of its CSR matrices and of the messages it sends.
"""

from __future__ import annotations

from functools import cache
from operator import itemgetter

import numpy as np

from gyreflow.runtime.dataflow.graph.arrays import (
    IdIndex,
    concat_ids,
    csr,
    edge_weights,
    id_array,
    key_groups,
    row_edges,
    unique_ids,
)
from gyreflow.state.keys.keygroups import key_group_of

OUT, IN = 1, 3
_DIRECTIONS = ("out", "in", "both")


@cache
def _chunk_keys(max_parallelism: int) -> dict[int, int]:
    candidates = -np.arange(1, 64 * max_parallelism + 1, dtype=np.int64)
    groups = key_groups(candidates, max_parallelism)
    keys: dict[int, int] = {}
    for key, group in zip(candidates.tolist(), groups.tolist(), strict=True):
        keys.setdefault(group, key)
    k = len(candidates) + 1
    while len(keys) < max_parallelism:  # not reached for usual sizes: 64 tries per group
        keys.setdefault(key_group_of(-k, max_parallelism), -k)
        k += 1
    return keys


def chunk_key(group: int, max_parallelism: int) -> int:
    """A state key that falls in key group ``group``: the key of that group's chunk (a negative
    int; the chunks table holds nothing else)."""
    return _chunk_keys(max_parallelism)[group]


def empty_chunk() -> list:
    """[ids, given values, half vertices, half other ends, half values or None, half sides]."""
    none = np.zeros(0, np.int64)
    return [none, np.empty(0, object), none, none, None, np.zeros(0, np.int8)]


def _objects(values: list) -> np.ndarray:
    array = np.empty(len(values), dtype=object)
    array[:] = values
    return array


def _first_seen(ids: np.ndarray) -> np.ndarray:
    if ids.dtype == np.int64:
        _, first = np.unique(ids, return_index=True)
        return ids[np.sort(first)]
    return id_array(list(dict.fromkeys(ids.tolist())))


def add_window_input(chunks: dict, records: list, max_parallelism: int, directed: bool = True,
                     owned: range | None = None) -> tuple[set, np.ndarray, tuple]:
    """Add a window's input (``(role, batch)`` pairs; role ``"ensure"``: ids of vertices to create
    when missing) to the chunks (chunk key -> chunk); returns
    the chunk keys that changed, the ids the input touched and the edge halves it added
    (``(vertex ids, other ends, sides, values or None)``). Vertex and edge *blocks* (arrays of
    many, broadcast to every task) contribute the vertices of the ``owned`` key groups."""
    given: dict = {}
    halves: list = []
    blocks: list = []
    ensured: list = []  # vertices to create when missing, their values left alone
    for role, batch in records:
        if not batch:
            continue
        if role == "ensure":
            ensured.extend(batch)
            continue
        tuples = type(batch[0]) is tuple and type(batch[-1]) is tuple
        if role == "vertex":
            if tuples:
                given.update(batch)
            else:
                for block in batch:
                    _add_vertex_block(given, block, max_parallelism, owned)
        elif role == "edge":
            if tuples:
                halves.extend(batch)
            else:
                blocks.extend(_edge_block_halves(block, directed, max_parallelism, owned)
                              for block in batch)
    vertex_ids = id_array(list(given))
    if halves:  # column by column: zip(*halves) over millions of tuples costs several times more
        values = list(map(itemgetter(2), halves))
        blocks.insert(0, (id_array(list(map(itemgetter(0), halves))),
                          id_array(list(map(itemgetter(1), halves))),
                          None if values.count(None) == len(values) else _objects(values),
                          np.array(list(map(itemgetter(3), halves)), dtype=np.int8)))
    vids = concat_ids([b[0] for b in blocks])
    others = concat_ids([b[1] for b in blocks])
    sides = np.concatenate([b[3] for b in blocks]) if blocks else np.zeros(0, np.int8)
    if any(b[2] is not None for b in blocks):
        values = np.concatenate([b[2] if b[2] is not None else np.full(len(b[0]), None, object)
                                 for b in blocks])
    else:
        values = None
    ensured_ids = id_array(ensured)
    touched = concat_ids([vertex_ids, vids, ensured_ids])
    added = (vids, others, sides, values)
    changed = set()
    vertex_groups, vertex_order, vertex_bounds = _grouped(vertex_ids, max_parallelism)
    half_groups, half_order, half_bounds = _grouped(vids, max_parallelism)
    ensured_groups, ensured_order, ensured_bounds = _grouped(ensured_ids, max_parallelism)
    ensured_ids = ensured_ids[ensured_order]
    vertex_ids = vertex_ids[vertex_order]
    vids, others, sides = vids[half_order], others[half_order], sides[half_order]
    if values is not None:
        values = values[half_order]
    for group in np.union1d(np.union1d(vertex_groups, half_groups), ensured_groups).tolist():
        key = chunk_key(group, max_parallelism)
        chunk = chunks.get(key)
        chunk = empty_chunk() if chunk is None else list(chunk)
        ids_here = vertex_ids[vertex_bounds[group]:vertex_bounds[group + 1]]
        lo, hi = half_bounds[group], half_bounds[group + 1]
        candidates = _first_seen(concat_ids([
            ids_here, vids[lo:hi], ensured_ids[ensured_bounds[group]:ensured_bounds[group + 1]]]))
        _, found = IdIndex(chunk[0]).lookup(candidates)
        new = candidates[~found]
        if len(new):
            chunk[0] = concat_ids([chunk[0], new])
            chunk[1] = np.concatenate([chunk[1], np.full(len(new), None, dtype=object)])
        if len(ids_here):
            at, _ = IdIndex(chunk[0]).lookup(ids_here)
            chunk[1] = chunk[1].copy()
            chunk[1][at] = [given[v] for v in ids_here.tolist()]
        if hi > lo:
            old_count = len(chunk[2])
            chunk[2] = concat_ids([chunk[2], vids[lo:hi]])
            chunk[3] = concat_ids([chunk[3], others[lo:hi]])
            if values is not None or chunk[4] is not None:
                old = chunk[4] if chunk[4] is not None else np.full(old_count, None, dtype=object)
                more = values[lo:hi] if values is not None else np.full(hi - lo, None, dtype=object)
                chunk[4] = np.concatenate([old, more])
            chunk[5] = np.concatenate([chunk[5], sides[lo:hi]])
        chunks[key] = chunk
        changed.add(key)
    return changed, touched, added


def _owned(ids: np.ndarray, max_parallelism: int, owned: range | None) -> np.ndarray | None:
    """A mask of the ids in the ``owned`` key groups (None: all are)."""
    if owned is None or (owned.start == 0 and owned.stop >= max_parallelism):
        return None
    groups = key_groups(ids, max_parallelism)
    return (groups >= owned.start) & (groups < owned.stop)


def _add_vertex_block(given: dict, block, max_parallelism: int, owned: range | None) -> None:
    ids = id_array(block.ids)
    values = block.values
    keep = _owned(ids, max_parallelism, owned)
    if keep is not None:
        ids = ids[keep]
        values = None if values is None else np.asarray(values, dtype=object)[keep]
    if values is None:
        given.update(dict.fromkeys(ids.tolist()))
    else:
        given.update(zip(ids.tolist(), np.asarray(values, dtype=object).tolist(), strict=True))


def _edge_block_halves(block, directed: bool, max_parallelism: int, owned: range | None):
    """The edge halves of a block of edges, as arrays, those of the ``owned`` vertices only."""
    src, dst = id_array(block.src), id_array(block.dst)
    values = None if block.values is None else np.asarray(block.values)
    if directed:
        vids, others = concat_ids([src, dst]), concat_ids([dst, src])
        sides = np.concatenate([np.full(len(src), OUT, np.int8), np.full(len(dst), IN, np.int8)])
        both = None if values is None else np.concatenate([values, values])
    else:  # an undirected edge is an out-edge at both ends, a self-loop once
        other_end = np.asarray(src != dst, dtype=bool)
        vids, others = concat_ids([src, dst[other_end]]), concat_ids([dst, src[other_end]])
        sides = np.full(len(vids), OUT, np.int8)
        both = None if values is None else np.concatenate([values, values[other_end]])
    keep = _owned(vids, max_parallelism, owned)
    if keep is not None:
        vids, others, sides = vids[keep], others[keep], sides[keep]
        both = None if both is None else both[keep]
    if both is not None and both.dtype != object:
        both = both.astype(object)
    return vids, others, both, sides


def _grouped(ids: np.ndarray, max_parallelism: int):
    """The key groups present in ``ids``, the stable order that sorts ``ids`` by key group and the
    bounds of each group in that order (``bounds[g]:bounds[g + 1]``)."""
    groups = key_groups(ids, max_parallelism)
    order = np.argsort(groups, kind="stable")
    bounds = np.searchsorted(groups[order], np.arange(max_parallelism + 1))
    return np.unique(groups), order, bounds


class Partition:
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

    def extend(self, added: tuple, chunks: dict | None = None,
               ensured: np.ndarray | None = None) -> bool:
        """Add edge halves ``(vertex ids, other ends, sides, values)`` in place, each after the
        edges its row has. With ``chunks`` (after the window was added to them), vertices they have
        beyond the partition (of the key groups of the halves and of ``ensured``) and other ends it
        has no column for are added first (``grow``). False when that cannot be done: the
        partition is then to be built again. Costs a copy of the matrices, no sort of their
        entries."""
        vids, others, sides, values = added
        if chunks is not None and not self.grow(chunks, concat_ids([vids, id_array(
                ensured if ensured is not None else [])])):
            return False
        rows, found = self.index.lookup(vids)
        if not found.all():
            return False
        columns, reached = self.column_positions(others)
        if not reached.all() and chunks is not None:
            self._add_columns(unique_ids(others[~reached]))
            columns, reached = self.column_positions(others)
        if not reached.all():
            return False
        out = sides == OUT
        weights = edge_weights(values, len(vids))
        self.out_edges, placed = _append_entries(self.out_edges, rows[out], columns[out],
                                                 weights[out])
        if values is not None or self.out_values is not None:
            merged = np.full(self.out_edges.nnz, None, dtype=object)
            kept = np.ones(len(merged), dtype=bool)
            kept[placed] = False
            if self.out_values is not None:
                merged[kept] = self.out_values
            if values is not None:
                merged[placed] = values[out]
            self.out_values = merged
        if self.directed:
            self.in_edges, _ = _append_entries(self.in_edges, rows[~out], columns[~out],
                                               weights[~out])
        else:
            self.in_edges = self.out_edges
        self._changed()
        return True

    def grow(self, chunks: dict, ids: np.ndarray) -> bool:
        """Add the vertices that the chunks of the key groups of ``ids`` have beyond the partition
        (a chunk appends new vertices after its others), each at the end of its group's block as a
        rebuild would place it, with no edges yet; False (nothing changed) when a chunk's first
        vertices are not the partition's. The other positions and columns move, their order kept."""
        _, found = self.index.lookup(ids)
        if found.all():
            return True
        mp = self.max_parallelism
        block = {group: i for i, group in enumerate(self.groups)}
        added: dict[int, np.ndarray] = {}
        for group in np.unique(key_groups(unique_ids(ids[~found]), mp)).tolist():
            chunk = chunks.get(chunk_key(group, mp))
            i = block.get(group)
            start, end = (0, 0) if i is None else (int(self.offsets[i]), int(self.offsets[i + 1]))
            if chunk is None or len(chunk[0]) < end - start or not np.array_equal(
                    chunk[0][:end - start], self.ids[start:end]):
                return False
            if len(chunk[0]) > end - start:
                added[group] = (chunk, end - start)
        if not added:
            return True
        groups = sorted(set(self.groups) | set(added))
        ids_parts, given_parts, sizes, moved = [], [], [], []
        cursor = 0
        for group in groups:
            i = block.get(group)
            if i is not None:
                start, end = int(self.offsets[i]), int(self.offsets[i + 1])
                ids_parts.append(self.ids[start:end])
                given_parts.append(self.given[start:end])
                moved.append(np.arange(cursor, cursor + end - start))
                cursor += end - start
            if group in added:
                chunk, have = added[group]
                ids_parts.append(chunk[0][have:])
                given_parts.append(chunk[1][have:])
                cursor += len(chunk[0]) - have
            sizes.append(cursor - sum(sizes))
        n = cursor
        positions = np.concatenate(moved) if moved else np.zeros(0, np.int64)
        columns = np.concatenate([positions, n + np.arange(self.m - self.n)])
        self._relayout(positions, n, columns, n + self.m - self.n)
        self.groups = groups
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.ids = concat_ids(ids_parts)
        self.given = np.concatenate(given_parts)
        self.index = IdIndex(self.ids)
        self.bounds = self.bounds + (n - self.n)
        self.n = n
        self.columns_ids = concat_ids([self.ids, self.remote_ids])
        self.columns_index = None
        return True

    def update_given(self, chunks: dict, ids: np.ndarray) -> bool:
        """Take the vertex-stream values of the key groups of ``ids`` from their chunks again (after
        ``grow``); False (the partition is then to be built again) when a block and its chunk differ
        in size."""
        mp = self.max_parallelism
        block = {group: i for i, group in enumerate(self.groups)}
        for group in np.unique(key_groups(unique_ids(ids), mp)).tolist():
            i, chunk = block.get(group), chunks.get(chunk_key(group, mp))
            if i is None or chunk is None:
                return False
            start, end = int(self.offsets[i]), int(self.offsets[i + 1])
            if len(chunk[1]) != end - start:
                return False
            self.given[start:end] = chunk[1]
        return True

    def _add_columns(self, remote: np.ndarray) -> None:
        """Add columns for the other tasks' vertices ``remote`` (distinct, none present), each at
        the end of its owning task's block."""
        n, p = self.n, self.parallelism
        owners = key_groups(remote, self.max_parallelism) * p // self.max_parallelism
        order = np.argsort(owners, kind="stable")
        remote, owners = remote[order], owners[order]
        old = np.diff(self.bounds)
        more = np.bincount(owners, minlength=p)
        starts = np.concatenate([[0], np.cumsum(old + more)])  # of each owner's new block
        placed_old = np.arange(self.m - n) + np.repeat(starts[:-1] - (self.bounds[:-1] - n), old)
        placed_new = (np.repeat(starts[:-1] + old, more)
                      + np.arange(len(remote)) - np.repeat(np.cumsum(more) - more, more))
        everything = concat_ids([self.remote_ids, remote])
        remote_ids = np.empty(len(everything), dtype=everything.dtype)
        remote_ids[np.concatenate([placed_old, placed_new])] = everything
        m = n + len(remote_ids)
        self._relayout(np.arange(n), n, np.concatenate([np.arange(n), n + placed_old]), m)
        self.remote_ids = remote_ids
        self.bounds = n + starts
        self.columns_ids = concat_ids([self.ids, remote_ids])
        self.columns_index = None

    def _relayout(self, rows: np.ndarray, n: int, columns: np.ndarray, m: int) -> None:
        """Move row ``i`` of the matrices to ``rows[i]`` of ``n`` (rows not named stay empty) and
        column ``j`` to ``columns[j]`` of ``m``; each row's entries keep their order."""
        def moved(matrix):
            lengths = np.zeros(n, dtype=np.int64)
            lengths[rows] = np.diff(matrix.indptr)
            indptr = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(lengths, out=indptr[1:])
            return csr_matrix((matrix.data, columns[matrix.indices], indptr), shape=(n, m))

        self.out_edges = moved(self.out_edges)
        self.in_edges = moved(self.in_edges) if self.directed else self.out_edges
        self.m = m
        self._changed()

    def remove(self, vids: np.ndarray, others: np.ndarray, sides: np.ndarray) -> None:
        """Remove, in place, every edge half ``vertex -> other`` of side ``sides[i]`` (all the
        parallel ones); halves the partition does not have are left alone."""
        rows, found = self.index.lookup(vids)
        columns, reached = self.column_positions(others)
        have = found & reached
        rows, columns, out = rows[have], columns[have], sides[have] == OUT
        self.out_edges, kept = _drop_entries(self.out_edges, rows[out], columns[out])
        if kept is not None and self.out_values is not None:
            self.out_values = self.out_values[kept]
        if self.directed:
            self.in_edges, _ = _drop_entries(self.in_edges, rows[~out], columns[~out])
        else:
            self.in_edges = self.out_edges
        self._changed()

    def _changed(self) -> None:
        self.out_degree = np.diff(self.out_edges.indptr)
        self._transposed = {}
        self._reached = {}

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


def _append_entries(matrix, rows: np.ndarray, columns: np.ndarray,
                    weights: np.ndarray) -> tuple:
    """``matrix`` with one more entry per ``rows[i]``, ``columns[i]`` of weight ``weights[i]``,
    each after the entries its row has (in the order given), and where each new entry went."""
    if len(rows) == 0:
        return matrix, np.zeros(0, np.int64)
    n = matrix.shape[0]
    order = np.argsort(rows, kind="stable")
    rows, columns, weights = rows[order], columns[order], weights[order]
    added = np.bincount(rows, minlength=n)
    before = np.cumsum(added) - added  # new entries of the rows above
    indptr = matrix.indptr.astype(np.int64)
    within = np.arange(len(rows)) - before[rows]
    at = indptr[rows + 1] + before[rows] + within
    total = matrix.nnz + len(rows)
    new = np.zeros(total, dtype=bool)
    new[at] = True
    indices = np.empty(total, dtype=np.int64)
    data = np.empty(total, dtype=np.result_type(matrix.data.dtype, weights.dtype))
    indices[new], data[new] = columns, weights
    indices[~new], data[~new] = matrix.indices, matrix.data
    indptr = indptr + np.concatenate([[0], np.cumsum(added)])
    placed = np.empty(len(at), dtype=np.int64)
    placed[order] = at
    return csr_matrix((data, indices, indptr), shape=matrix.shape), placed


def _drop_entries(matrix, rows: np.ndarray, columns: np.ndarray) -> tuple:
    """``matrix`` without its entries at any (``rows[i]``, ``columns[i]``), and the mask of the
    entries kept (None: nothing was dropped). Only the named rows' entries are looked at."""
    if len(rows) == 0:
        return matrix, None
    m = matrix.shape[1]
    indptr = matrix.indptr.astype(np.int64)
    named = np.unique(rows)
    at = row_edges(matrix, named)  # the entries of the named rows, row by row
    entry_rows = np.repeat(named, indptr[named + 1] - indptr[named])
    keys = entry_rows.astype(np.int64) * m + matrix.indices[at].astype(np.int64)
    hit = np.isin(keys, rows.astype(np.int64) * m + columns.astype(np.int64))
    if not hit.any():
        return matrix, None
    kept = np.ones(matrix.nnz, dtype=bool)
    kept[at[hit]] = False
    dropped = np.bincount(entry_rows[hit], minlength=matrix.shape[0])
    indptr = indptr - np.concatenate([[0], np.cumsum(dropped)])
    return csr_matrix((matrix.data[kept], matrix.indices[kept].astype(np.int64), indptr),
                             shape=matrix.shape), kept


def csr_matrix(*args, **kwargs):
    """``scipy.sparse.csr_matrix``, imported at the first use: importing scipy takes a third of a
    second, which a job without a graph should not pay at start-up."""
    from scipy.sparse import csr_matrix as make

    return make(*args, **kwargs)
