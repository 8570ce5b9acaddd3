"""Positions that move when items are inserted before them, followed at the cost of the insertions:
``Insertions`` says where a base's positions went, ``ShiftedIndex`` finds ids among positions that
moved, and ``inserted`` copies an array with items inserted (a run per insertion point).

A partition places a key group's new vertices at the end of the group's block, so every position
after them moves. Rewriting every position-keyed structure each window would cost the graph; these
keep the base as it was and the insertions since, and are folded into a new base only now and then.
"""

from __future__ import annotations

import numpy as np

from gyreflow.runtime.dataflow.graph.arrays import IdIndex, concat_ids, id_array, raw_items

_NONE = np.zeros(0, np.int64)


def moved(positions: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Where ``positions`` go when an item is inserted before each of ``points`` (sorted; items at
    one point keep their order). An item inserted at ``p`` lands before the position ``p`` was."""
    if not len(points):
        return positions
    return positions + np.searchsorted(points, positions, side="right")


def inserted(array: np.ndarray, points: np.ndarray, items: np.ndarray,
             dtype=None) -> np.ndarray:
    """``array`` with ``items[i]`` inserted before position ``points[i]`` (sorted), in order, as
    ``dtype`` (default: ``array``'s when ``items`` have it, objects when either are, else the
    common type).

    >>> inserted(np.array([1, 2, 3]), np.array([1, 3, 3]), np.array([7, 8, 9])).tolist()
    [1, 7, 2, 3, 8, 9]
    """
    if not len(points):
        return array
    if dtype is None:
        dtype = array.dtype
        if items.dtype != dtype:
            dtype = (np.dtype(object) if object in (array.dtype, items.dtype)
                     else np.result_type(array.dtype, items.dtype))
    raw = raw_items(dtype)
    if raw is not None and array.dtype == dtype and items.dtype == dtype:
        # A structured array (a repairing program's values) moved as bytes (``raw_items``).
        return inserted(array.view(raw), points, items.view(raw)).view(dtype)
    count = len(points)
    out = np.empty(len(array) + count, dtype=dtype)
    out[points + np.arange(count)] = items  # item i lands i places after its point
    # Each run of the array between two distinct points moves by the items before it: the index
    # of the first item at the run's end point (a window's new vertices share few points, one
    # per key group's block, so this loop is short).
    start = int(points[0])
    out[:start] = array[:start]
    firsts = np.flatnonzero(points[1:] != points[:-1]) + 1
    for cut, before in zip(points[firsts].tolist(), firsts.tolist(), strict=True):
        out[start + before:cut + before] = array[start:cut]
        start = cut
    out[start + count:] = array[start:]
    return out


_DENSE = 32  # a query of at least a 32nd of the base positions reads a dense table


class Insertions:
    """The items inserted into an ordered space of ``base`` positions since the base was made: each
    item has a *serial* (the order of insertion); a *stable* id is a base position (below
    ``base``) or ``base + serial``, and never moves, while current positions do."""

    __slots__ = ("_at", "_gaps", "_serial_at", "_shifts", "_stable_of", "base", "position_of")

    def __init__(self, base: int) -> None:
        self.base = base
        self.position_of = _NONE  # serial -> current position
        self._at = self._serial_at = self._gaps = None
        # dense tables, made for a large query: base position -> items before it; current
        # position -> stable id (a search per item of an unsorted query costs ~60 ns, a table
        # of every position ~1.5 ns a position once)
        self._shifts = self._stable_of = None

    def __len__(self) -> int:
        return len(self.position_of)

    @property
    def size(self) -> int:
        """The current number of positions."""
        return self.base + len(self.position_of)

    def insert(self, points: np.ndarray) -> None:
        """Insert one item before each of the current positions ``points`` (sorted)."""
        if not len(points):
            return
        self.position_of = np.concatenate([moved(self.position_of, points),
                                           points + np.arange(len(points))])
        self._at = self._serial_at = self._gaps = None
        self._shifts = self._stable_of = None

    def _sorted(self):
        if self._at is None:
            order = np.argsort(self.position_of, kind="stable")
            self._serial_at, self._at = order, self.position_of[order]
            self._gaps = self._at - np.arange(len(order))  # base positions before each item
        return self._at, self._serial_at, self._gaps

    def current(self, stable: np.ndarray) -> np.ndarray:
        """The current positions of stable ids."""
        if not len(self.position_of) or not len(stable):
            return stable
        base = stable < self.base
        out = np.where(base, stable, 0)
        if len(stable) * _DENSE >= self.base:
            out = out + self._shift_table()[out]
        else:
            _, _, gaps = self._sorted()
            out = out + np.searchsorted(gaps, out, side="right")
        if not base.all():
            out[~base] = self.position_of[stable[~base] - self.base]
        return out

    def stable(self, positions: np.ndarray) -> np.ndarray:
        """The stable ids of current positions."""
        if not len(self.position_of) or not len(positions):
            return positions
        if len(positions) * _DENSE >= self.base:
            if self._stable_of is None:
                table = np.empty(self.size, dtype=np.int64)
                table[self.base_positions()] = np.arange(self.base)
                table[self.position_of] = self.base + np.arange(len(self.position_of))
                self._stable_of = table
            return self._stable_of[positions]
        at, serial, _ = self._sorted()
        found = np.searchsorted(at, positions)
        hit = at[np.minimum(found, len(at) - 1)] == positions
        out = positions - found
        out[hit] = self.base + serial[found[hit]]
        return out

    def base_positions(self) -> np.ndarray:
        """The current position of every base position (one pass, no search)."""
        if not len(self.position_of):
            return np.arange(self.base)
        return np.arange(self.base) + self._shift_table()[:self.base]

    def _shift_table(self) -> np.ndarray:
        """Per base position (and the end), how many items were inserted before it."""
        if self._shifts is None:
            _, _, gaps = self._sorted()
            self._shifts = np.cumsum(np.bincount(gaps, minlength=self.base + 1))[:self.base + 1]
        return self._shifts


class ShiftedIndex:
    """The positions of ids in an id array that items are inserted into: the ``IdIndex`` of a base
    array and the insertions since, made again once they are many (or a lookup is large)."""

    def __init__(self, ids: np.ndarray) -> None:
        self._reset(ids)

    def _reset(self, ids: np.ndarray) -> None:
        self.ids = ids
        self.base = IdIndex(ids)
        self.insertions = Insertions(len(ids))
        self.new_ids: list[np.ndarray] = []
        self._new_index = None

    def insert(self, points: np.ndarray, ids: np.ndarray, everything: np.ndarray) -> None:
        """Items ``ids`` were inserted before the current positions ``points``; ``everything`` is
        the id array after it."""
        self.ids = everything
        if len(self.insertions) + len(ids) > max(1024, len(everything) // 32):
            self._reset(everything)  # many insertions: searching them costs more than a new index
            return
        self.insertions.insert(points)
        self.new_ids.append(id_array(ids))
        self._new_index = None

    def lookup(self, query: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(positions, found)`` of the ids in ``query``; positions of missing ids are 0."""
        if not len(self.insertions):
            return self.base.lookup(query)
        if len(query) > max(4096, len(self.ids) // 8):
            self._reset(self.ids)
            return self.base.lookup(query)
        positions, found = self.base.lookup(query)
        positions = self.insertions.current(positions)
        if not found.all():
            if self._new_index is None:
                new = concat_ids(self.new_ids)
                self._new_index = IdIndex(new)
            missing = ~found
            serial, more = self._new_index.lookup(query[missing])
            at = positions[missing]
            at[more] = self.insertions.position_of[serial[more]]
            positions[missing] = at
            found[missing] = more
        positions[~found] = 0
        return positions, found
