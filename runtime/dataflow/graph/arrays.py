"""Graph arrays: vertex ids to dense positions, key groups of id arrays, a task's CSR partition, and
the array reductions that combine messages (sum, minimum, maximum, label histogram)."""

from __future__ import annotations

import math
import weakref

import numpy as np

from gyreflow.state.keys.keygroups import key_group_of

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
COMBINES = ("sum", "min", "max", "histogram", None)


def _crc_table() -> np.ndarray:
    table = np.zeros(256, dtype=np.uint32)
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0xEDB88320 if crc & 1 else crc >> 1
        table[byte] = crc
    return table


_CRC = _crc_table()


def id_array(ids) -> np.ndarray:
    """Vertex ids as an array: int64 when every id is an int that fits, otherwise objects.

    >>> id_array([3, 1]).dtype, id_array(["a", 1]).dtype
    (dtype('int64'), dtype('O'))
    """
    if isinstance(ids, np.ndarray):
        if ids.dtype == np.int64 or ids.dtype == object:
            return ids
        if ids.dtype.kind in "iu":
            return ids.astype(np.int64)
    ids = list(ids)
    if set(map(type, ids)) <= {int}:
        try:
            return np.array(ids, dtype=np.int64) if ids else np.zeros(0, np.int64)
        except OverflowError:
            pass
    array = np.empty(len(ids), dtype=object)
    array[:] = ids
    return array


def raw_items(dtype: np.dtype) -> np.dtype | None:
    """The type of a structured ``dtype``'s items as plain bytes, or None (not structured, or
    holding objects): numpy copies a structured array field by field, about four times slower
    than its bytes, so whole-array copies of a repairing program's values go through this view."""
    if dtype.names is None or dtype.hasobject:
        return None
    return np.dtype((np.void, dtype.itemsize))


def copied(array: np.ndarray) -> np.ndarray:
    """A copy of ``array`` (a structured one copied as bytes: the same values, the same dtype).

    >>> values = np.array([(1, 2.5)], dtype=[("a", np.int64), ("b", np.float64)])
    >>> copy = copied(values)
    >>> copy.tolist(), copy.dtype == values.dtype, np.shares_memory(copy, values)
    ([(1, 2.5)], True, False)
    """
    raw = raw_items(array.dtype)
    if raw is None:
        return array.copy()
    return array.view(raw).copy().view(array.dtype)


def rows_at(array: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """``array[positions]`` for integer ``positions``: numpy's ``take``, which moves a
    structured array's items whole where indexing goes field by field (200,000 of 24 bytes:
    0.6 ms against 5.9 here).

    >>> values = np.array([(1, 2.5), (3, 4.5)], dtype=[("a", np.int64), ("b", np.float64)])
    >>> rows_at(values, np.array([1, 1, 0])).tolist()
    [(3, 4.5), (3, 4.5), (1, 2.5)]
    """
    return np.take(array, positions)


def set_rows(array: np.ndarray, positions: np.ndarray, values: np.ndarray) -> None:
    """``array[positions] = values`` for integer ``positions`` and as many ``values``: numpy's
    ``put`` (whole items, see ``rows_at``)."""
    if len(positions) != len(values):
        msg = f"{len(positions)} positions for {len(values)} values"
        raise ValueError(msg)
    np.put(array, positions, values)


def assign(target: np.ndarray, source: np.ndarray) -> None:
    """``target[:] = source`` for arrays of one dtype, a structured one moved as bytes
    (``raw_items``)."""
    raw = raw_items(target.dtype)
    if raw is None or source.dtype != target.dtype:
        target[:] = source
    else:
        target.view(raw)[:] = source.view(raw)


def concat_ids(parts: list[np.ndarray]) -> np.ndarray:
    """Concatenate id arrays; int64 stays int64, a mix becomes objects."""
    if not parts:
        return np.zeros(0, np.int64)
    if all(p.dtype == np.int64 for p in parts):
        return np.concatenate(parts)
    return np.concatenate([p.astype(object) for p in parts])


def key_groups(ids: np.ndarray, max_parallelism: int) -> np.ndarray:
    """``key_group_of`` of every id: vectorised for int64 ids (crc32 of the id's stable encoding)."""
    if ids.dtype == np.int64:
        data = ids.astype("<i8").view(np.uint8).reshape(-1, 8)
        crc = np.full(len(ids), 0xFFFFFFFF, dtype=np.uint32)
        crc = _CRC[(crc ^ np.uint32(ord("i"))) & 0xFF] ^ (crc >> 8)
        for column in range(8):
            crc = _CRC[(crc ^ data[:, column]) & 0xFF] ^ (crc >> 8)
        crc ^= np.uint32(0xFFFFFFFF)
        return (crc % np.uint32(max_parallelism)).astype(np.int64)
    return np.fromiter((key_group_of(v, max_parallelism) for v in ids), dtype=np.int64,
                       count=len(ids))


class IdIndex:
    """Positions of vertex ids in an id array: a direct table over int64 ids in a narrow range, a
    binary search over other int64 ids, a dict otherwise."""

    def __init__(self, ids: np.ndarray) -> None:
        self.ids = ids
        self.dense = None
        self.table = None
        self._order = None
        if ids.dtype == np.int64:
            if len(ids):
                low, high = int(ids.min()), int(ids.max())
                if high - low < 4 * len(ids) + 1024:
                    # Ids in a narrow range (the usual 0..n-1): a direct table beats binary
                    # search, and needs no sort.
                    self.low = low
                    self.dense = np.full(high - low + 1, -1, dtype=np.int64)
                    self.dense[ids - low] = np.arange(len(ids))
        else:
            self.table = {v: i for i, v in enumerate(ids.tolist())}

    @property
    def order(self) -> np.ndarray:
        """The stable order that sorts the ids (int64 ids only; made at the first use)."""
        if self._order is None:
            self._order = np.argsort(self.ids, kind="stable")
            self.sorted = self.ids[self._order]
        return self._order

    def lookup(self, query: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(positions, found)`` for the ids in ``query``; positions of missing ids are 0."""
        if len(query) == 0:
            return np.zeros(0, np.int64), np.zeros(0, bool)
        if self.table is None:
            if query.dtype != np.int64:
                query = id_array(query.tolist())
            if query.dtype != np.int64 or len(self.ids) == 0:
                return self._lookup_objects(query)
            if self.dense is not None:
                offset = query - self.low
                inside = (offset >= 0) & (offset < len(self.dense))
                positions = np.where(inside, self.dense[np.where(inside, offset, 0)], -1)
                found = positions >= 0
                positions[~found] = 0
                found &= self.ids[positions] == query  # an offset that wrapped around int64
                return positions, found
            order = self.order
            at = np.searchsorted(self.sorted, query)
            np.minimum(at, len(self.sorted) - 1, out=at)
            found = self.sorted[at] == query
            return order[at], found
        return self._lookup_objects(query)

    def _lookup_objects(self, query: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        table = self.table
        if table is None:
            table = self.table = {v: i for i, v in enumerate(self.ids.tolist())}
        get = table.get
        found_at = [get(v, -1) for v in query.tolist()]
        positions = np.array(found_at, dtype=np.int64)
        found = positions >= 0
        positions[~found] = 0
        return positions, found


_INDEXES: dict[int, tuple] = {}


def index_of(ids: np.ndarray) -> IdIndex:
    """The ``IdIndex`` of the id array ``ids``, kept while that array lives: a chunk's ids are
    looked up in every window that adds to it, and change only when it gains or loses vertices
    (which makes a new array)."""
    key = id(ids)
    found = _INDEXES.get(key)
    if found is not None and found[0]() is ids:
        return found[1]
    index = IdIndex(ids)
    try:
        _INDEXES[key] = (weakref.ref(ids, lambda _, key=key, cache=_INDEXES: cache.pop(key, None)), index)
    except TypeError:  # an array that cannot be referred to weakly: not kept
        pass
    return index


_FILLS: dict[int, tuple] = {}


def appended(array: np.ndarray, more: np.ndarray) -> np.ndarray:
    """``array`` followed by ``more``, writing only ``more`` where it can: an array this function
    made is a view of a larger buffer, and the next values go after it in place when nothing was
    appended to the buffer beyond the view yet. Views handed out earlier (earlier versions of a
    chunk) see only their own length, so they never change; appending to one of them copies.
    Objects and ids mixed with ints give an object array (as ``concat_ids``)."""
    if not len(more):
        return array
    length, total = len(array), len(array) + len(more)
    if array.dtype != more.dtype:
        if array.dtype == object or more.dtype == object:
            return np.concatenate([array.astype(object), more.astype(object)])
        return np.concatenate([array, more])
    buffer = array.base
    if buffer is not None:
        entry = _FILLS.get(id(buffer))
        if (entry is not None and entry[0]() is buffer and entry[1] == length
                and len(buffer) >= total and array.ctypes.data == buffer.ctypes.data):
            buffer[length:total] = more
            _FILLS[id(buffer)] = (entry[0], total)
            return buffer[:total]
    buffer = np.empty(max(16, total + total // 2), dtype=array.dtype)
    buffer[:length] = array
    buffer[length:total] = more
    key = id(buffer)
    _FILLS[key] = (weakref.ref(buffer, lambda _, key=key, fills=_FILLS: fills.pop(key, None)), total)
    return buffer[:total]


def distinct(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)``: the distinct values, sorted. Integers and booleans by a sort and
    one comparison of neighbours, which here takes a tenth of the time of numpy's own (it hashes
    them: 600 us against 40 us for 7,000 int64s); other dtypes (floats and their NaNs, objects)
    as numpy does.

    >>> distinct(np.array([3, 1, 3, 2, 1])).tolist(), distinct(np.array(["b", "a", "b"])).tolist()
    ([1, 2, 3], ['a', 'b'])
    """
    if values.dtype.kind not in "iub" or values.ndim != 1:
        return np.unique(values)
    ordered = np.sort(values)
    if len(ordered) < 2:
        return ordered
    keep = np.empty(len(ordered), dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def union(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """``np.union1d(first, second)`` through ``distinct``."""
    return distinct(np.concatenate([np.ravel(first), np.ravel(second)]))


def unique_ids(ids: np.ndarray) -> np.ndarray:
    """The distinct ids of ``ids`` (sorted when they sort, else in first-seen order)."""
    try:
        return distinct(ids)
    except TypeError:
        return id_array(list(dict.fromkeys(ids.tolist())))


def csr(rows: np.ndarray, columns: np.ndarray, data: np.ndarray, shape: tuple[int, int]):
    """A CSR matrix with one entry per edge, duplicates kept and each row in arrival order."""
    import scipy.sparse as sparse  # here, not at the top: importing scipy takes a third of a second

    dtype = np.int32 if max(shape[0], shape[1], len(rows)) < 2**31 - 1 else np.int64
    order = np.argsort(rows, kind="stable")
    indptr = np.zeros(shape[0] + 1, dtype=dtype)
    np.cumsum(np.bincount(rows, minlength=shape[0]), out=indptr[1:])
    return sparse.csr_matrix((data[order], columns[order].astype(dtype), indptr), shape=shape)


def edge_weights(values: np.ndarray | None, count: int) -> np.ndarray:
    """Edge values as float weights: 1.0 for an edge without a value, NaN for one that is no
    number (a property map, a ``(label, properties)`` pair, text): programs that ignore weights
    never look, and weighted ones read the property they name from the raw values instead."""
    if values is None:
        return np.ones(count)
    if values.dtype.kind == "f":
        return values
    if values.dtype == object:
        missing = np.equal(values, None)
        if missing.any():
            values = values.copy()
            values[missing] = 1.0
    try:
        return values.astype(float)  # float() of each value, in C
    except (TypeError, ValueError):
        return np.array([_number(value) for value in values.tolist()], dtype=float)


def _number(value) -> float:
    if isinstance(value, (int, float, np.number)):
        return float(value)
    return math.nan


def row_edges(matrix, rows: np.ndarray) -> np.ndarray:
    """The indices (into ``matrix.indices``) of the entries of ``rows``, row by row."""
    indptr = matrix.indptr
    starts = indptr[rows]
    lengths = indptr[rows + 1] - starts
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    ends = np.cumsum(lengths)
    return np.arange(total, dtype=np.int64) + np.repeat(starts - (ends - lengths), lengths)


# Reductions ------------------------------------------------------------------------------------


def _sentinel(dtype, combine: str):
    if dtype.kind == "f":
        return np.inf if combine == "min" else -np.inf
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return info.max if combine == "min" else info.min
    return None


def reduce_messages(combine: str | None, positions: np.ndarray, values: np.ndarray,
                    counts: np.ndarray | None, size: int):
    """Combine messages per target position: ``(positions, values, counts)`` with each position once
    (sorted), except with no combiner, which keeps every message. ``counts`` is the label histogram
    (``"histogram"``: one entry per distinct label of a position), else None.

    >>> p, v, _ = reduce_messages("min", np.array([2, 0, 2]), np.array([5, 1, 3]), None, 3)
    >>> p.tolist(), v.tolist()
    ([0, 2], [1, 3])
    """
    if combine is None or len(positions) == 0:
        return positions, values, counts
    if combine == "histogram":
        return _histogram(positions, values, counts)
    if combine == "sum":
        if values.dtype.kind == "f":
            total = np.bincount(positions, weights=values, minlength=size)
        else:
            total = np.zeros(size, dtype=values.dtype)
            np.add.at(total, positions, values)
        present = np.flatnonzero(np.bincount(positions, minlength=size))
        return present, total[present], None
    sentinel = _sentinel(values.dtype, combine)
    if sentinel is None:  # objects: the first of each position after a stable sort by value
        order = np.argsort(values, kind="stable")
        if combine == "max":
            order = order[::-1]
        unique, first = np.unique(positions[order], return_index=True)
        return unique, values[order][first], None
    best = np.full(size, sentinel, dtype=values.dtype)
    (np.minimum if combine == "min" else np.maximum).at(best, positions, values)
    present = np.zeros(size, dtype=bool)
    present[positions] = True
    at = np.flatnonzero(present)
    return at, best[at], None


def _label_codes(positions: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, int, object]:
    """``(codes, width, decode)``: labels as ints ``0..width-1`` in label order, such that
    ``position * width + code`` fits int64; ``decode(codes)`` gives the labels back. Integer labels
    in a narrow range are shifted by their minimum (no sort); others are ranked."""
    top = int(positions.max()) + 1 if len(positions) else 1
    if labels.dtype.kind in "iu" and len(labels):
        low, high = int(labels.min()), int(labels.max())
        width = high - low + 1
        if width * top < _INT64_MAX:
            return ((labels - low).astype(np.int64, copy=False), width,
                    lambda codes: (codes + low).astype(labels.dtype, copy=False))
    distinct, codes = np.unique(labels, return_inverse=True)
    return codes.reshape(-1).astype(np.int64, copy=False), max(len(distinct), 1), distinct.__getitem__


def _histogram(positions, labels, counts):
    """(position, label, count) per distinct pair, sorted by position then label."""
    codes, width, decode = _label_codes(positions, labels)
    keys = positions.astype(np.int64) * width + codes
    if counts is None:
        keys = np.sort(keys)
        starts = _run_starts(keys)
        summed = np.diff(np.append(starts, len(keys)))
    else:
        order = np.argsort(keys)
        keys = keys[order]
        starts = _run_starts(keys)
        summed = np.add.reduceat(np.asarray(counts, dtype=np.int64)[order], starts)
    unique = keys[starts]
    return unique // width, decode(unique % width), summed


def _run_starts(ordered: np.ndarray) -> np.ndarray:
    """Where each run of equal values of the sorted ``ordered`` starts."""
    if len(ordered) == 0:
        return np.zeros(0, np.int64)
    return np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))


def most_frequent(positions, labels, counts):
    """Per position, the label with the largest count, the smallest label on ties; the entries
    come as ``reduce_messages`` leaves them: sorted by position, then label, each pair once."""
    if len(positions) == 0:
        return positions, labels
    starts = _run_starts(positions)
    counts = np.asarray(counts)
    largest = np.maximum.reduceat(counts, starts)
    spans = np.diff(np.append(starts, len(positions)))
    best = np.flatnonzero(counts == np.repeat(largest, spans))
    first = _run_starts(positions[best])  # the smallest label among the most frequent
    chosen = best[first]
    return positions[chosen], labels[chosen]
