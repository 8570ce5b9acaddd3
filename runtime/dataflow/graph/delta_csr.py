"""A CSR matrix that follows a changing graph at the cost of its changes: a base matrix that is
never written again, the rows and columns inserted since (``positions.Insertions``: the base's
positions move, its arrays do not), a mask of the base entries removed and the entries appended
as an edge list. It is merged into a plain CSR matrix when a program reads the matrix whole, or
once the changes weigh a sixteenth of the base (so a window that nobody reads the matrix in pays
its changes, and every window a share of one merge).

Each row lists its base entries (those not removed, in base order), then the entries appended to
it, in the order they came: what appending them to the merged matrix would have given.
"""

from __future__ import annotations

import numpy as np

from gyreflow.runtime.dataflow.graph.arrays import appended, distinct, row_edges
from gyreflow.runtime.dataflow.graph.positions import Insertions

_NONE = np.zeros(0, np.int64)
MERGE_SHARE = 16  # merge once the changes weigh 1/MERGE_SHARE of the base's entries
MERGE_FLOOR = 4096


def index_dtype(shape: tuple[int, int], nnz: int):
    """The index dtype scipy gives a CSR matrix of ``shape`` and ``nnz`` entries: int32 when they
    fit (arrays already of that type are taken as they are, with no scan of their contents)."""
    return np.int32 if max(shape[0], shape[1], nnz) < 2**31 - 1 else np.int64


def csr_matrix(*args, **kwargs):
    """``scipy.sparse.csr_matrix``, imported at the first use: importing scipy takes a third of a
    second, which a job without a graph should not pay at start-up."""
    from scipy.sparse import csr_matrix as make

    return make(*args, **kwargs)


def _objects(count: int) -> np.ndarray:
    return np.full(count, None, dtype=object)


def _joined(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    if first.dtype == second.dtype:
        return np.concatenate([first, second])
    return np.concatenate([first.astype(object), second.astype(object)])


class DeltaCsr:
    """A CSR matrix as a base, the rows and columns inserted, the base entries removed and the
    entries appended since (see the module). ``values``: raw values per entry kept alongside (an
    array in base order, None when no entry has one), or not kept at all (``keep_values``)."""

    floor = MERGE_FLOOR  # changes that never make a merge due, whatever the base's size

    def __init__(self, base, values: np.ndarray | None = None, keep_values: bool = True) -> None:
        self.keep_values = keep_values
        self._reset(base, values)

    def _reset(self, base, values: np.ndarray | None) -> None:
        self.base = base
        self.base_values = values if self.keep_values else None
        self.rows = Insertions(base.shape[0])
        self.cols = Insertions(base.shape[1])
        self.dead: np.ndarray | None = None  # mask of the removed base entries
        self.dead_rows: list[np.ndarray] = []  # their base rows
        self.dead_count = 0
        # appended entries: stable row and column ids, weights and whether each is still there
        # (grown in place, ``arrays.appended``: a window costs its own entries)
        self.add_rows = self.add_cols = _NONE
        self.add_data = np.zeros(0)
        self.add_alive = np.zeros(0, dtype=bool)
        self.add_count = 0
        self.add_values: np.ndarray | None = None

    @property
    def shape(self) -> tuple[int, int]:
        return (self.rows.size, self.cols.size)

    @property
    def nnz(self) -> int:
        return self.base.nnz - self.dead_count + self.add_count

    def changed(self) -> bool:
        """Whether there is anything to merge."""
        return bool(self.dead_count or len(self.add_rows) or len(self.rows) or len(self.cols))

    def _live(self) -> np.ndarray | None:
        """The indices of the appended entries still there (None: all of them)."""
        return None if self.add_count == len(self.add_rows) else np.flatnonzero(self.add_alive)

    def _due(self) -> bool:
        weight = self.dead_count + len(self.add_rows) + len(self.rows) + len(self.cols)
        return weight > max(self.floor, self.base.nnz // MERGE_SHARE)

    # Changes ----------------------------------------------------------------------------------

    def insert_rows(self, points: np.ndarray) -> None:
        """Empty rows inserted before the current rows ``points`` (sorted)."""
        self.rows.insert(points)

    def insert_columns(self, points: np.ndarray) -> None:
        """Empty columns inserted before the current columns ``points`` (sorted)."""
        self.cols.insert(points)

    def append(self, rows: np.ndarray, columns: np.ndarray, data: np.ndarray,
               values: np.ndarray | None = None) -> None:
        """Entries appended at the end of their rows (current positions), in the order given."""
        if not len(rows):
            return
        if self.keep_values and (values is not None or self.base_values is not None
                                 or self.add_values is not None):
            more = values if values is not None else _objects(len(rows))
            old = self.add_values if self.add_values is not None else _objects(len(self.add_rows))
            self.add_values = _joined(old, more)
            if self.base_values is None:
                self.base_values = _objects(self.base.nnz)
        self.add_rows = appended(self.add_rows, self.rows.stable(rows).astype(np.int64))
        self.add_cols = appended(self.add_cols, self.cols.stable(columns).astype(np.int64))
        self.add_data = appended(self.add_data, data.astype(float, copy=False))
        self.add_alive = appended(self.add_alive, np.ones(len(rows), dtype=bool))
        self.add_count += len(rows)
        self._settle()

    def remove(self, rows: np.ndarray, columns: np.ndarray) -> tuple[int, np.ndarray]:
        """Remove every entry at any (``rows[i]``, ``columns[i]``) (current positions); returns how
        many went and the mask of the pairs that named one. Only the named rows are looked at."""
        if not len(rows):
            return 0, np.zeros(0, dtype=bool)
        width = self.cols.size + 1
        rows, columns = self.rows.stable(rows), self.cols.stable(columns)
        wanted = rows.astype(np.int64) * width + columns
        taken = []
        gone = 0
        named = distinct(rows[rows < self.rows.base])
        if len(named):
            base = self.base
            at = row_edges(base, named)
            lengths = base.indptr[named + 1] - base.indptr[named]
            entry_rows = np.repeat(named, lengths)
            # the named rows of a hub hold many entries: those to a named column first
            columns_named = np.zeros(self.cols.size, dtype=bool)
            columns_named[columns] = True
            near = np.flatnonzero(columns_named[base.indices[at]])
            at, entry_rows = at[near], entry_rows[near]
            keys = entry_rows.astype(np.int64) * width + base.indices[at]
            hit = np.isin(keys, wanted)
            if self.dead is not None:
                hit &= ~self.dead[at]
            if hit.any():
                if self.dead is None:
                    self.dead = np.zeros(base.nnz, dtype=bool)
                self.dead[at[hit]] = True
                self.dead_rows.append(entry_rows[hit])
                self.dead_count += int(hit.sum())
                gone += int(hit.sum())
                taken.append(keys[hit])
        candidates = self._appended_to(rows)
        if len(candidates):
            keys = self.add_rows[candidates] * width + self.add_cols[candidates]
            hit = np.isin(keys, wanted)
            if hit.any():
                taken.append(keys[hit])
                gone += int(hit.sum())
                self.add_alive[candidates[hit]] = False
                self.add_count -= int(hit.sum())
        matched = (np.isin(wanted, np.concatenate(taken)) if taken
                   else np.zeros(len(wanted), dtype=bool))
        self._settle()
        return gone, matched

    def _appended_to(self, rows: np.ndarray) -> np.ndarray:
        """The indices of the appended entries of the stable ``rows``, in order: one pass over a
        mask (a sort of every appended entry would cost more as they add up)."""
        if not len(self.add_rows) or not len(rows):
            return _NONE
        named = np.zeros(self.rows.size, dtype=bool)
        named[rows] = True
        return np.flatnonzero(named[self.add_rows] & self.add_alive)

    def forget_values(self) -> None:
        """Keep no raw values from now on (they are read from elsewhere)."""
        self.keep_values = False
        self.base_values = self.add_values = None

    def _settle(self) -> None:
        if self._due():
            self.merged()

    # Reads ------------------------------------------------------------------------------------

    def merged(self):
        """The matrix as a plain CSR matrix (which becomes the new base)."""
        if not self.changed():
            return self.base
        base = self.base
        n, m = self.shape
        counts = np.diff(base.indptr).astype(np.int64)
        if self.dead_count:
            counts -= np.bincount(np.concatenate(self.dead_rows), minlength=len(counts))
        placed = self.rows.base_positions()
        per_row = np.zeros(n, dtype=np.int64)
        per_row[placed] = counts
        live = self._live()
        add_rows = self.rows.current(self.add_rows if live is None else self.add_rows[live])
        order = np.argsort(add_rows, kind="stable")
        add_rows = add_rows[order]
        if live is not None:
            order = live[order]
        added = np.bincount(add_rows, minlength=n)
        total = int(per_row.sum()) + len(add_rows)
        dtype = index_dtype((n, m), total)
        indptr = np.zeros(n + 1, dtype=dtype)
        np.cumsum(per_row + added, out=indptr[1:])
        starts = np.cumsum(added) - added
        at = indptr[add_rows] + per_row[add_rows] + (np.arange(len(add_rows)) - starts[add_rows])
        keep = None if self.dead is None else ~self.dead
        old = base.indices if keep is None else base.indices[keep]
        if len(self.cols):
            old = self.cols.base_positions().astype(dtype)[old]
        mask = None
        if len(at):  # where the base's entries go: one mask for every array
            mask = np.ones(total, dtype=bool)
            mask[at] = False
        indices = self._placed(old.astype(dtype, copy=False),
                               self.cols.current(self.add_cols[order]).astype(dtype), at, mask)
        data = self._placed(base.data if keep is None else base.data[keep],
                            self.add_data[order], at, mask)
        values = None
        if self.base_values is not None:
            olds = self.base_values if keep is None else self.base_values[keep]
            more = (self.add_values[order] if self.add_values is not None
                    else _objects(len(add_rows)))
            values = self._placed(olds, more, at, mask)
        self._reset(csr_matrix((data, indices, indptr), shape=(n, m)), values)
        return self.base

    @staticmethod
    def _placed(old: np.ndarray, more: np.ndarray, at: np.ndarray, mask) -> np.ndarray:
        """``old`` in order with ``more`` placed at the positions ``at`` (sorted) among them
        (``mask``: False at ``at``; None when ``at`` is empty)."""
        dtype = old.dtype if old.dtype == more.dtype else (
            np.dtype(object) if object in (old.dtype, more.dtype)
            else np.result_type(old.dtype, more.dtype))
        if mask is None:  # nothing placed: the base's arrays serve (they are never written)
            return old if old.dtype == dtype else old.astype(dtype)
        out = np.empty(len(mask), dtype=dtype)
        out[mask] = old
        out[at] = more
        return out

    def values(self) -> np.ndarray | None:
        """The raw values in the merged matrix's order (None: no entry has one)."""
        self.merged()
        return self.base_values

    def degree(self) -> np.ndarray:
        """The number of entries of each current row."""
        if not self.changed():
            return np.diff(self.base.indptr)
        counts = np.diff(self.base.indptr).astype(np.int64)
        if self.dead_count:
            counts -= np.bincount(np.concatenate(self.dead_rows), minlength=len(counts))
        degree = np.zeros(self.rows.size, dtype=np.int64)
        degree[self.rows.base_positions()] = counts
        if self.add_count:
            live = self._live()
            rows = self.add_rows if live is None else self.add_rows[live]
            degree += np.bincount(self.rows.current(rows), minlength=self.rows.size)
        return degree

    def entries(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(rows, columns, weights)``: one per entry of the current ``rows``, row by row in the
        order given, without merging."""
        rows = rows.astype(np.int64, copy=False)
        if not self.changed():
            matrix = self.base
            at = row_edges(matrix, rows)
            counts = np.diff(matrix.indptr)[rows]
            return np.repeat(rows, counts), matrix.indices[at], matrix.data[at]
        stable = self.rows.stable(rows)
        in_base = stable < self.rows.base
        asked = np.flatnonzero(in_base)  # which of ``rows`` the base entries answer
        base = self.base
        named = stable[asked]
        at = row_edges(base, named)
        which = np.repeat(asked, base.indptr[named + 1] - base.indptr[named])
        if self.dead is not None:
            alive = ~self.dead[at]
            at, which = at[alive], which[alive]
        columns = self.cols.current(base.indices[at].astype(np.int64))
        data = base.data[at]
        candidates = self._appended_to(stable)
        if len(candidates):
            order = np.argsort(stable, kind="stable")
            ordered = stable[order]
            lo = np.searchsorted(ordered, self.add_rows[candidates], side="left")
            hi = np.searchsorted(ordered, self.add_rows[candidates], side="right")
            many = hi - lo
            if many.any():
                entry = np.repeat(candidates, many)
                offset = np.arange(len(entry)) - np.repeat(np.cumsum(many) - many, many)
                more = order[np.repeat(lo, many) + offset]
                keys = np.concatenate([which * 2, more * 2 + 1])
                sort = np.argsort(keys, kind="stable")
                which = np.concatenate([which, more])[sort]
                columns = np.concatenate([columns, self.cols.current(self.add_cols[entry])])[sort]
                data = np.concatenate([data, self.add_data[entry]])[sort]
        dtype = index_dtype(self.shape, self.nnz)
        return rows[which], columns.astype(dtype, copy=False), data
