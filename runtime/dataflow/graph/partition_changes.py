"""The CSR partition following a window's changes in place: edge halves appended after their rows'
entries, new vertices and columns, the values vertex records gave, removed halves dropped, and the
matrices laid out again when the column space grows."""

from __future__ import annotations

import numpy as np

from gyreflow.runtime.dataflow.graph.arrays import (
    IdIndex,
    concat_ids,
    edge_weights,
    id_array,
    key_groups,
    row_edges,
    unique_ids,
)
from gyreflow.runtime.dataflow.graph.chunks import OUT, chunk_key


class PartitionChanges:
    """The in-place changes of ``Partition`` (a part of it: the arrays it changes are the
    partition's)."""

    def extend(self, added: tuple, chunks: dict | None = None,
               ensured: np.ndarray | None = None, new: dict | None = None) -> bool:
        """Add edge halves ``(vertex ids, other ends, sides, values)`` in place, each after the
        edges its row has. With ``chunks`` (after the window was added to them), vertices they have
        beyond the partition (of the key groups of the halves and of ``ensured``) and other ends it
        has no column for are added first (``grow``). False when that cannot be done: the
        partition is then to be built again. Costs a copy of the matrices, no sort of their
        entries."""
        vids, others, sides, values = added
        if new is not None:  # the vertices each key group gained, known without the chunks
            self.place(new)
        elif chunks is not None and not self.grow(chunks, concat_ids([vids, id_array(
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
        if values is not None or self.has_values():
            self.edit_values(("add", placed, None if values is None else values[out],
                              self.out_edges.nnz))
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
                added[group] = (chunk[0][end - start:], chunk[1][end - start:])
        self.place(added)
        return True

    def place(self, added: dict) -> None:
        """Add vertices at the end of their key groups' blocks (``added``: group -> (ids, given
        values)), with no edges yet; the other positions and columns move, their order kept."""
        if not added:
            return
        block = {group: i for i, group in enumerate(self.groups)}
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
                more_ids, more_given = added[group]
                ids_parts.append(more_ids)
                given_parts.append(more_given)
                cursor += len(more_ids)
            sizes.append(cursor - sum(sizes))
        n = cursor
        positions = np.concatenate(moved) if moved else np.zeros(0, np.int64)
        self.moved_to = positions  # where the vertices before went (values follow them)
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

    def set_given(self, ids: np.ndarray, values: np.ndarray) -> None:
        """Set the vertex-stream values of the vertices ``ids`` (all of them the partition's)."""
        positions, _ = self.index.lookup(ids)
        self.given[positions] = values

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
            dtype = index_dtype((n, m), matrix.nnz)
            lengths = np.zeros(n, dtype=dtype)
            lengths[rows] = np.diff(matrix.indptr)
            indptr = np.zeros(n + 1, dtype=dtype)
            np.cumsum(lengths, out=indptr[1:])
            return csr_matrix((matrix.data, columns.astype(dtype, copy=False)[matrix.indices],
                               indptr), shape=(n, m))

        self.out_edges = moved(self.out_edges)
        self.in_edges = moved(self.in_edges) if self.directed else self.out_edges
        self.m = m
        self._changed()

    def remove(self, vids: np.ndarray, others: np.ndarray, sides: np.ndarray) -> tuple:
        """Remove, in place, every edge half ``vertex -> other`` of side ``sides[i]`` (all the
        parallel ones); halves the partition does not have are left alone. Returns how many
        halves went and the mask of the removals that took one or more."""
        rows, found = self.index.lookup(vids)
        columns, reached = self.column_positions(others)
        have = np.flatnonzero(found & reached)
        rows, columns, out = rows[have], columns[have], sides[have] == OUT
        before = self.out_edges.nnz + (self.in_edges.nnz if self.directed else 0)
        matched = np.zeros(len(vids), dtype=bool)
        self.out_edges, gone, hit = _drop_entries(self.out_edges, rows[out], columns[out])
        matched[have[out]] = hit
        if gone is not None and self.has_values():
            self.edit_values(("drop", gone))
        if self.directed:
            self.in_edges, _, hit = _drop_entries(self.in_edges, rows[~out], columns[~out])
            matched[have[~out]] = hit
        else:
            self.in_edges = self.out_edges
        self._changed()
        return before - self.out_edges.nnz - (self.in_edges.nnz if self.directed else 0), matched

    @property
    def out_values(self) -> np.ndarray | None:
        """The out-edges' raw values in CSR order (None: no edge has one), brought up to date
        with the windows' edits at the first read: most programs never read them. Values that are
        all ints (or all floats) are kept as an int64 (float64) array, which edits copy far faster
        than objects; ``tolist`` gives the same values back."""
        if self._stale:
            self._out_values, self._stale = self.values_from(self.source()), False
        if self._value_edits:
            values = self._out_values
            for edit in self._value_edits:
                if edit[0] == "drop":
                    values = np.delete(values, edit[1])
                    continue
                _, placed, more, total = edit
                more = plain_values(more)
                if values is None:
                    values = np.full(total - len(placed), None, dtype=object)
                if more is None:
                    more = np.full(len(placed), None, dtype=object)
                dtype = values.dtype if values.dtype == more.dtype else np.dtype(object)
                merged = np.empty(total, dtype=dtype)
                kept = np.ones(total, dtype=bool)
                kept[placed] = False
                merged[kept] = values
                merged[placed] = more
                values = merged
            self._out_values, self._value_edits = values, []
        return self._out_values

    @out_values.setter
    def out_values(self, values: np.ndarray | None) -> None:
        self._out_values, self._value_edits, self._stale = plain_values(values), [], False

    def has_values(self) -> bool:
        """Whether some out-edge has a value."""
        return self._out_values is not None or bool(self._value_edits) or self._stale

    def edit_values(self, edit: tuple) -> None:
        """Note an edit of the out-edge values (``("add", placed, values or None, entries)`` or
        ``("drop", positions)``), applied at the next read; a few are applied at once. With a
        ``source`` (the chunks the partition follows) the values are only marked stale: a read
        takes them from the chunks again, and a window that nobody reads them in pays nothing."""
        if self.source is not None:
            self._out_values, self._value_edits, self._stale = None, [], True
            return
        self._value_edits.append(edit)
        if len(self._value_edits) > 8:
            self.out_values  # noqa: B018 (applies the edits)

    def values_from(self, chunks: dict) -> np.ndarray | None:
        """The out-edges' values in CSR order, read from ``chunks`` (each row's edges are its
        chunk's halves in order, as the matrices have them)."""
        mp = self.max_parallelism
        rows, values, any_values = [], [], False
        for group in self.groups:
            chunk = chunks.get(chunk_key(group, mp))
            if chunk is None:
                continue
            out = chunk[5] == OUT
            rows.append(self.index.lookup(id_array(chunk[2][out]))[0])
            if chunk[4] is None:
                values.append(np.full(int(out.sum()), None, dtype=object))
            else:
                values.append(chunk[4][out].astype(object, copy=False))
                any_values = True
        if not any_values:
            return None
        order = np.argsort(np.concatenate(rows), kind="stable")
        return plain_values(np.concatenate(values)[order])

    def _changed(self) -> None:
        self.out_degree = np.diff(self.out_edges.indptr)
        self._transposed = {}
        self._reached = {}


def _append_entries(matrix, rows: np.ndarray, columns: np.ndarray,
                    weights: np.ndarray) -> tuple:
    """``matrix`` with one more entry per ``rows[i]``, ``columns[i]`` of weight ``weights[i]``,
    each after the entries its row has (in the order given), and where each new entry went.
    The old entries are copied in runs between the insertion points."""
    if len(rows) == 0:
        return matrix, np.zeros(0, np.int64)
    n = matrix.shape[0]
    order = np.argsort(rows, kind="stable")
    rows, columns, weights = rows[order], columns[order], weights[order]
    old_indptr = matrix.indptr
    at = old_indptr[rows + 1].astype(np.int64) + np.arange(len(rows))
    total = matrix.nnz + len(rows)
    dtype = index_dtype(matrix.shape, total)
    indices = np.empty(total, dtype=dtype)
    data = np.empty(total, dtype=np.result_type(matrix.data.dtype, weights.dtype))
    indices[at], data[at] = columns, weights
    # the old entries between insertion points move by the number of entries inserted before
    cuts = np.unique(old_indptr[rows + 1])
    starts = np.concatenate([[0], cuts])
    ends = np.concatenate([cuts, [matrix.nnz]])
    shifts = np.searchsorted(at - np.arange(len(rows)), starts, side="right")
    old_indices, old_data = matrix.indices, matrix.data
    for start, end, shift in zip(starts.tolist(), ends.tolist(), shifts.tolist(), strict=True):
        if end > start:
            indices[start + shift:end + shift] = old_indices[start:end]
            data[start + shift:end + shift] = old_data[start:end]
    added = np.bincount(rows, minlength=n)
    indptr = np.empty(n + 1, dtype=dtype)
    indptr[0] = 0
    np.cumsum(added, out=indptr[1:])
    indptr += old_indptr
    placed = np.empty(len(at), dtype=np.int64)
    placed[order] = at
    return csr_matrix((data, indices, indptr), shape=matrix.shape), placed

def _drop_entries(matrix, rows: np.ndarray, columns: np.ndarray) -> tuple:
    """``matrix`` without its entries at any (``rows[i]``, ``columns[i]``), the positions of the
    entries dropped (sorted; None: nothing was dropped) and the mask of the pairs that named an
    entry. Only the named rows' entries are looked at; the others are copied in runs."""
    if len(rows) == 0:
        return matrix, None, np.zeros(0, dtype=bool)
    m = matrix.shape[1]
    indptr = matrix.indptr
    named = np.unique(rows)
    at = row_edges(matrix, named)  # the entries of the named rows, row by row
    entry_rows = np.repeat(named, indptr[named + 1] - indptr[named])
    keys = entry_rows.astype(np.int64) * m + matrix.indices[at].astype(np.int64)
    wanted = rows.astype(np.int64) * m + columns.astype(np.int64)
    hit = np.isin(keys, wanted)
    if not hit.any():
        return matrix, None, np.zeros(len(rows), dtype=bool)
    named_pairs = np.isin(wanted, keys[hit])
    gone = np.sort(at[hit])
    dropped = np.bincount(entry_rows[hit], minlength=matrix.shape[0])
    indptr = indptr - np.concatenate([[0], np.cumsum(dropped)]).astype(indptr.dtype)
    total = matrix.nnz - len(gone)
    indices = np.empty(total, dtype=matrix.indices.dtype)
    data = np.empty(total, dtype=matrix.data.dtype)
    # the entries between the dropped ones, copied in runs
    starts = np.concatenate([[0], gone + 1]).tolist()
    ends = np.concatenate([gone, [matrix.nnz]]).tolist()
    old_indices, old_data = matrix.indices, matrix.data
    cursor = 0
    for start, end in zip(starts, ends, strict=True):
        if end > start:
            indices[cursor:cursor + end - start] = old_indices[start:end]
            data[cursor:cursor + end - start] = old_data[start:end]
            cursor += end - start
    return csr_matrix((data, indices, indptr), shape=matrix.shape), gone, named_pairs

def plain_values(values: np.ndarray | None) -> np.ndarray | None:
    """Edge values as an int64 or float64 array when every one is an int or every one a float
    (each comes back as it was from ``tolist``), else as they are."""
    if values is None or values.dtype != object or not len(values):
        return values
    kinds = set(map(type, values.tolist()))
    if kinds == {int}:
        try:
            return values.astype(np.int64)
        except OverflowError:
            return values
    if kinds == {float}:
        return values.astype(np.float64)
    return values


def index_dtype(shape: tuple[int, int], nnz: int):
    """The index dtype scipy gives a CSR matrix of ``shape`` and ``nnz`` entries: int32 when they
    fit (arrays already of that type are taken as they are, with no scan of their contents)."""
    return np.int32 if max(shape[0], shape[1], nnz) < 2**31 - 1 else np.int64

def csr_matrix(*args, **kwargs):
    """``scipy.sparse.csr_matrix``, imported at the first use: importing scipy takes a third of a
    second, which a job without a graph should not pay at start-up."""
    from scipy.sparse import csr_matrix as make

    return make(*args, **kwargs)
