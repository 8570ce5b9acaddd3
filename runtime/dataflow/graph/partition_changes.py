"""The CSR partition following a window's changes in place: edge halves appended after their rows'
entries, new vertices and columns, the values vertex records gave and removed halves dropped, at
the cost of the changes: the matrices take them as changes to a base (``delta_csr``), and the id
indexes as insertions (``positions``)."""

from __future__ import annotations

from itertools import repeat
from operator import is_not

import numpy as np

from gyreflow.runtime.dataflow.graph.arrays import (
    concat_ids,
    distinct,
    edge_weights,
    id_array,
    key_groups,
    unique_ids,
)
from gyreflow.runtime.dataflow.graph.chunks import OUT, chunk_key
from gyreflow.runtime.dataflow.graph.positions import inserted


def any_given(given: np.ndarray) -> bool:
    """Whether any vertex of ``given`` (vertex-stream values, objects) was given a value.

    >>> any_given(np.array([None, None], dtype=object)), any_given(np.array([None, 0], dtype=object))
    (False, True)
    """
    return any(map(is_not, given, repeat(None)))


class PartitionChanges:
    """The in-place changes of ``Partition`` (a part of it: the arrays it changes are the
    partition's)."""

    def extend(self, added: tuple, chunks: dict | None = None,
               ensured: np.ndarray | None = None, new: dict | None = None) -> bool:
        """Add edge halves ``(vertex ids, other ends, sides, values)`` in place, each after the
        edges its row has. With ``chunks`` (after the window was added to them), vertices they have
        beyond the partition (of the key groups of the halves and of ``ensured``) and other ends it
        has no column for are added first (``grow``). False when that cannot be done: the
        partition is then to be built again. Costs the halves added (``delta_csr``)."""
        vids, others, sides, values = added
        if new is not None:  # the vertices each key group gained, known without the chunks
            self.place(new)
        elif chunks is not None and not self.grow(chunks, concat_ids([vids, id_array(
                ensured if ensured is not None else [])])):
            return False
        rows, found, columns, reached = self._ends(vids, others)
        if not found.all():
            return False
        if not reached.all() and chunks is not None:
            self._add_columns(unique_ids(others[~reached]))
            columns, reached = self.column_positions(others)
        if not reached.all():
            return False
        out = sides == OUT
        weights = edge_weights(values, len(vids))
        self._edges_change()
        kept = None if values is None or not self._out.keep_values else plain_values(values[out])
        self._out.append(rows[out], columns[out], weights[out], kept)
        if self.directed:
            self._in.append(rows[~out], columns[~out], weights[~out])
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
        for group in distinct(key_groups(unique_ids(ids[~found]), mp)).tolist():
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
        existing = np.asarray(self.groups, dtype=np.int64)
        order = sorted(added)
        counts = np.array([len(added[group][0]) for group in order], dtype=np.int64)
        # a group's new vertices go in at the end of its block, or where its block would start:
        # before the block of the first group after it
        points = np.repeat(self.offsets[np.searchsorted(existing, order, side="right")], counts)
        new_ids = concat_ids([id_array(added[group][0]) for group in order])
        new_given = np.concatenate([np.asarray(added[group][1], dtype=object)
                                    for group in order])
        groups = sorted(set(self.groups) | set(added))
        every = np.asarray(groups, dtype=np.int64)
        sizes = np.zeros(len(groups), dtype=np.int64)
        sizes[np.searchsorted(every, existing)] += np.diff(self.offsets)
        sizes[np.searchsorted(every, order)] += counts
        n = self.n + len(points)
        self.inserted = points  # where the vertices went in: values follow (``positions.moved``)
        self.ids = inserted(self.ids, points, new_ids)
        if self._given is not None or any_given(new_given):
            self._given = inserted(self.given, points, new_given)
        self.index.insert(points, new_ids, self.ids)
        for store in {id(self._out): self._out, id(self._in): self._in}.values():
            store.insert_rows(points)
            store.insert_columns(points)  # the task's vertices' columns come first
        self.groups = groups
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.bounds = self.bounds + (n - self.n)
        self.n = n
        self.m += len(points)
        self._columns_ids = None
        self._changed()

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
        for group in distinct(key_groups(unique_ids(ids), mp)).tolist():
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
        # each new column goes in at the end of its owner's block: before the old column that
        # starts the next block, in the order of ``remote`` within an owner
        points = np.repeat(self.bounds[1:], more)  # current columns
        everything = concat_ids([self.remote_ids, remote])
        remote_ids = np.empty(len(everything), dtype=everything.dtype)
        remote_ids[np.concatenate([placed_old, placed_new])] = everything
        self.remote_index.insert(points - n, remote, remote_ids)
        for store in {id(self._out): self._out, id(self._in): self._in}.values():
            store.insert_columns(points)
        self.remote_ids = remote_ids
        self.bounds = n + starts
        self.m = n + len(remote_ids)
        self._columns_ids = None
        self._changed()

    def remove(self, vids: np.ndarray, others: np.ndarray, sides: np.ndarray) -> tuple:
        """Remove, in place, every edge half ``vertex -> other`` of side ``sides[i]`` (all the
        parallel ones); halves the partition does not have are left alone. Returns how many
        halves went and the mask of the removals that took one or more."""
        rows, found, columns, reached = self._ends(vids, others)
        have = np.flatnonzero(found & reached)
        rows, columns, out = rows[have], columns[have], sides[have] == OUT
        matched = np.zeros(len(vids), dtype=bool)
        self._edges_change()
        gone, hit = self._out.remove(rows[out], columns[out])
        matched[have[out]] = hit
        if self.directed:
            more, hit = self._in.remove(rows[~out], columns[~out])
            gone += more
            matched[have[~out]] = hit
        self._changed()
        return gone, matched

    def _ends(self, vids: np.ndarray, others: np.ndarray) -> tuple:
        """``(rows, found, columns, reached)`` of halves' vertices and other ends, looked up
        together (one lookup costs about what two of half the size do)."""
        count = len(vids)
        positions, hit = self.column_positions(concat_ids([id_array(vids), id_array(others)]))
        rows, found = positions[:count], hit[:count] & (positions[:count] < self.n)
        return rows, found, positions[count:], hit[count:]

    @property
    def out_values(self) -> np.ndarray | None:
        """The out-edges' raw values in CSR order (None: no edge has one). With a ``source``
        (the chunks the partition follows) they are read from the chunks at the first read after
        a change: most programs never read them. Values that are all ints (or all floats) are
        kept as an int64 (float64) array, which copies far faster than objects; ``tolist`` gives
        the same values back."""
        if self._stale:
            self._read_values, self._stale = self.values_from(self.source()), False
        if self._read_values is not None or not self._out.keep_values:
            return self._read_values
        return self._out.values()

    def _edges_change(self) -> None:
        """The edges are about to change: with a ``source``, the values are read from it next."""
        if self.source is not None:
            self._out.forget_values()
            self._read_values, self._stale = None, True

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
        self._degree = None
        self._transposed = {}
        self._reached = {}


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
