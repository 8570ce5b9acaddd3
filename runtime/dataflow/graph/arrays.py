"""Graph arrays: vertex ids to dense positions, key groups of id arrays, a task's CSR partition, and
the array reductions that combine messages (sum, minimum, maximum, label histogram)."""

from __future__ import annotations

import math

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
    """Positions of vertex ids in an id array: a binary search over int64 ids, a dict otherwise."""

    def __init__(self, ids: np.ndarray) -> None:
        self.ids = ids
        self.dense = None
        if ids.dtype == np.int64:
            self.order = np.argsort(ids, kind="stable")
            self.sorted = ids[self.order]
            self.table = None
            if len(ids) and int(self.sorted[-1]) - int(self.sorted[0]) < 4 * len(ids) + 1024:
                # Ids in a narrow range (the usual 0..n-1): a direct table beats binary search.
                self.low = int(self.sorted[0])
                self.dense = np.full(int(self.sorted[-1]) - self.low + 1, -1, dtype=np.int64)
                self.dense[ids - self.low] = np.arange(len(ids))
        else:
            self.table = {v: i for i, v in enumerate(ids.tolist())}

    def lookup(self, query: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(positions, found)`` for the ids in ``query``; positions of missing ids are 0."""
        if len(query) == 0:
            return np.zeros(0, np.int64), np.zeros(0, bool)
        if self.table is None:
            if query.dtype != np.int64:
                query = id_array(query.tolist())
            if query.dtype != np.int64 or len(self.sorted) == 0:
                return self._lookup_objects(query)
            if self.dense is not None:
                offset = query - self.low
                inside = (offset >= 0) & (offset < len(self.dense))
                positions = np.where(inside, self.dense[np.where(inside, offset, 0)], -1)
                found = positions >= 0
                positions[~found] = 0
                found &= self.ids[positions] == query  # an offset that wrapped around int64
                return positions, found
            at = np.searchsorted(self.sorted, query)
            np.minimum(at, len(self.sorted) - 1, out=at)
            found = self.sorted[at] == query
            return self.order[at], found
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


def unique_ids(ids: np.ndarray) -> np.ndarray:
    """The distinct ids of ``ids`` (sorted when they sort, else in first-seen order)."""
    try:
        return np.unique(ids)
    except TypeError:
        return id_array(list(dict.fromkeys(ids.tolist())))


def csr(rows: np.ndarray, columns: np.ndarray, data: np.ndarray, shape: tuple[int, int]):
    """A CSR matrix with one entry per edge, duplicates kept and each row in arrival order."""
    import scipy.sparse as sparse  # here, not at the top: importing scipy takes a third of a second

    order = np.argsort(rows, kind="stable")
    indptr = np.zeros(shape[0] + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=shape[0]), out=indptr[1:])
    return sparse.csr_matrix((data[order], columns[order].astype(np.int64), indptr), shape=shape)


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
