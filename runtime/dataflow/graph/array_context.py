"""What an array vertex program sees in a superstep: the combined incoming messages (``Inbox``), the
outgoing ones (``Outbox``), its task's partition and values (``ArrayContext``), and the split of
messages between the task's own vertices and the other tasks'."""

from __future__ import annotations

import numpy as np

from gyreflow.plan.words import plural
from gyreflow.runtime.dataflow.graph.arrays import reduce_messages, row_edges, rows_at
from gyreflow.runtime.dataflow.graph.chunks import IN, OUT
from gyreflow.runtime.dataflow.graph.context import add_to_aggregate
from gyreflow.runtime.dataflow.graph.partition import Partition

_DIRECTIONS = ("out", "in", "both")


class Inbox:
    """The messages that reached a task's vertices in a superstep, combined per vertex.

    ``positions`` (sorted, each once; every message when the program has no combiner) and
    ``values``; for a ``"histogram"`` combiner ``values`` is the most frequent label (the smallest
    on ties) and ``histogram`` the ``(positions, labels, counts)`` it was chosen from.
    """

    def __init__(self, size: int, positions: np.ndarray, values: np.ndarray,
                 histogram: tuple | None = None, sums: np.ndarray | None = None) -> None:
        self.size = size
        self.positions = positions
        self.values = values
        self.histogram = histogram
        self._sums = sums  # "sum" of floats: the sums per vertex, 0.0 where none arrived

    def __len__(self) -> int:
        return len(self.positions)

    def received(self) -> np.ndarray:
        """A mask of the vertices that received messages."""
        mask = np.zeros(self.size, dtype=bool)
        mask[self.positions] = True
        return mask

    def dense(self, fill, dtype=None) -> np.ndarray:
        """One value per vertex: the combined message, ``fill`` where none arrived."""
        dtype = dtype or (self.values.dtype if len(self.values) else np.asarray(fill).dtype)
        sums = self._sums
        if sums is not None and sums.dtype == dtype and fill == 0:
            return sums.copy()
        array = np.full(self.size, fill, dtype=dtype)
        array[self.positions] = self.values
        return array


class Outbox:
    """The messages a task sends in one superstep, reduced per target column as they are added."""

    def __init__(self, combine: str | None, size: int) -> None:
        self.combine = combine
        self.size = size
        self.total = None  # dense accumulator (sum, and min/max of numbers)
        self.present = None
        self.pieces: list = []

    def add_dense(self, total: np.ndarray, present: np.ndarray) -> None:
        """Add a sum over every column (``present``: the columns a message reached)."""
        if self.total is None:
            self.total, self.present = total.astype(float, copy=True), present.copy()
        else:
            self.total += total
            self.present |= present

    def add(self, columns: np.ndarray, values) -> None:
        """Add one message per entry of ``columns``."""
        columns = np.asarray(columns, dtype=np.int64)
        if np.ndim(values) == 0:
            values = np.full(len(columns), values)
        values = np.asarray(values)
        if len(columns) != len(values):
            msg = f"send: {plural(len(columns), 'target column')} but {plural(len(values), 'value')}"
            raise ValueError(msg)
        if len(columns) == 0:
            return
        if (columns.min() < 0) or (columns.max() >= self.size):
            msg = f"send: target columns must be in 0..{self.size - 1}"
            raise IndexError(msg)
        combine = self.combine
        if combine == "sum" and values.dtype.kind == "f":
            total = np.bincount(columns, weights=values, minlength=self.size)
            present = np.bincount(columns, minlength=self.size) > 0
            self.add_dense(total, present)
        elif combine in ("min", "max") and values.dtype.kind in "iuf" and not self.pieces and (
                self.total is None or self.total.dtype == values.dtype):
            if self.total is None:
                fill = np.inf if values.dtype.kind == "f" else np.iinfo(values.dtype).max
                self.total = np.full(self.size, fill if combine == "min" else -fill, values.dtype)
                self.present = np.zeros(self.size, dtype=bool)
            (np.minimum if combine == "min" else np.maximum).at(self.total, columns, values)
            self.present[columns] = True
        else:
            self.pieces.append((columns, values))

    def finish(self) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """``(columns, values, counts)``: the messages combined per column."""
        pieces = list(self.pieces)
        if self.total is not None:
            at = np.flatnonzero(self.present)
            if not pieces:
                return at, self.total[at], None
            pieces.append((at, self.total[at]))
        if not pieces:
            return np.zeros(0, np.int64), np.zeros(0), None
        columns = np.concatenate([p[0] for p in pieces])
        values = _concat_values([p[1] for p in pieces])
        return reduce_messages(self.combine, columns, values, None, self.size)


def _concat_values(parts: list) -> np.ndarray:
    if all(p.dtype != object for p in parts):
        return np.concatenate(parts)
    return np.concatenate([p.astype(object) for p in parts])


class ArrayContext:
    """The ``ArrayPartition`` of ``gyreflow.api.graph.arrays``: what an array program sees."""

    @property
    def given(self):
        """What the vertex stream gave each vertex (None for those only edges named)."""
        return self.part.given

    def given_at(self, positions):
        """``given[positions]``, without making ``given`` when no vertex was given a value."""
        return self.part.given_at(positions)

    @property
    def columns(self):
        """The vertex id of every column (the task's vertices first)."""
        return self.part.columns_ids

    @property
    def out_values(self):
        """The out-edges' raw values in CSR order (None when no edge has a value), read from the
        partition when asked: most programs never do."""
        return self.part.out_values

    @property
    def out_edges(self):
        """The out-edges' CSR matrix (the partition merges its changes at the first read)."""
        return self.part.out_edges

    @property
    def in_edges(self):
        """The in-edges' CSR matrix (undirected: the out-edges' one)."""
        return self.part.in_edges

    @property
    def out_degree(self):
        """The number of out-edges of each vertex."""
        return self.part.out_degree

    def __init__(self, part: Partition, combine, aggregators: dict) -> None:
        self.part = part
        self.ids = part.ids
        self.num_local = part.n
        self.directed = part.directed  # undirected: the in-edges are the out-edges
        self.values = None
        self.touched = None
        self.added = None  # the window's new edge halves; None: every edge is new
        self.removal_scope = frozenset()  # a window that removed edges: the tasks' joined scope
        self.removed = None  # the window's removal halves; None: not known edge by edge
        self.iteration = 0
        self.window = 0
        self.num_vertices = 0
        self._aggregators = aggregators
        self._previous: dict = {}
        self.aggregates: dict = {}
        self.outbox = Outbox(combine, part.m)
        self.reported: list | None = None  # ``changing``'s positions and values, when kept

    def changing(self, positions) -> None:
        """Say that ``values`` are about to change in place at ``positions``: a program with
        ``reports_changes`` says so before it changes any value, and the window keeps the
        values said as they were and compares and stores them only, not every vertex's."""
        if self.reported is not None:
            positions = np.asarray(positions, dtype=np.int64)
            self.reported.append((positions, rows_at(self.values, positions)))

    def send(self, columns, values) -> None:
        """Send ``values[i]`` (or one value to all) to column ``columns[i]``."""
        self.outbox.add(columns, values)

    def send_along(self, values, direction: str = "out", where=None) -> None:
        """Every vertex (or those ``where`` selects: a mask or positions) sends ``values[v]``
        along each of its ``direction`` edges."""
        values = np.asarray(values)
        if where is None and self.outbox.combine == "sum" and values.dtype.kind in "iuf":
            for which, _ in enumerate(self.part.matrices(direction)):
                side = which if direction != "in" else 1
                transposed, reached = self.part.transposed(side)
                self.outbox.add_dense(transposed @ values.astype(float, copy=False), reached)
            return
        for side in self.part.sides(direction):
            rows, columns, _ = self.edges(where, side)
            self.outbox.add(columns, values[rows])

    def edges(self, where=None, direction="out"):
        """``(rows, columns, weights)``: one entry per edge of the selected vertices."""
        matrix = direction if not isinstance(direction, str) else None
        if matrix is None and where is not None:
            rows = np.flatnonzero(where) if np.asarray(where).dtype == bool else np.asarray(where)
            if 16 * len(rows) < self.num_local:  # a few vertices: read from the changes, unmerged
                return self.part.edges(rows, direction)
            where = rows  # many (a static program's superstep): from the merged matrices
        if matrix is None:
            matrices = self.part.matrices(direction)
            if len(matrices) > 1:
                found = [self.edges(where, m) for m in matrices]
                return tuple(np.concatenate(parts) for parts in zip(*found, strict=True))
            matrix = matrices[0]
        if where is None:
            rows = np.repeat(np.arange(self.num_local), np.diff(matrix.indptr))
            return rows, matrix.indices, matrix.data
        rows = np.flatnonzero(where) if np.asarray(where).dtype == bool else np.asarray(where)
        at = row_edges(matrix, rows.astype(np.int64))
        counts = np.diff(matrix.indptr)[rows]
        return np.repeat(rows, counts), matrix.indices[at], matrix.data[at]

    def column_positions(self, ids) -> tuple[np.ndarray, np.ndarray]:
        """``(columns, found)`` of vertex ids in the column space."""
        return self.part.column_positions(ids)

    def added_edges(self, direction: str = "out", values: bool = False) -> tuple:
        """``(rows, columns)``: one entry per ``direction`` edge new to this window's supersteps
        (incremental: those the window's input added; static: every edge); with ``values``,
        ``(rows, columns, values)``, the edges' raw values (None: no edge has one)."""
        part = self.part
        if self.added is None:
            rows, columns, _ = self.edges(None, direction)
            if not values:
                return rows, columns
            raw = part.out_values if direction == "out" or not part.directed else None
            if raw is None and part.out_values is not None:
                msg = "added_edges: the raw values of every edge are the out-edges' only"
                raise ValueError(msg)
            return rows, columns, raw
        if direction not in _DIRECTIONS:  # (the matrices are not read: merging them costs)
            msg = f"direction must be 'out', 'in' or 'both', got {direction!r}"
            raise ValueError(msg)
        vids, others, sides, raw = self.added
        if part.directed and direction != "both":
            keep = sides == (OUT if direction == "out" else IN)
            vids, others = vids[keep], others[keep]
            raw = None if raw is None else raw[keep]
        rows, found = part.index.lookup(vids)
        columns, reached = part.column_positions(others)
        found &= reached
        if values:
            return rows[found], columns[found], None if raw is None else raw[found]
        return rows[found], columns[found]

    def removed_edges(self) -> tuple[np.ndarray, np.ndarray] | None:
        """``(rows, others)``: one entry per edge the window's input removed at the task's
        vertices (incremental; out- and in-edges alike): the vertex's position and the other
        end's id. None when the removals are not known edge by edge (the window removed
        vertices, or a static computation)."""
        if self.removed is None:
            return None
        vids, others, _ = self.removed
        rows, found = self.part.index.lookup(vids)
        return rows[found], others[found]

    def aggregate(self, name: str, value) -> None:
        """Add ``value`` to aggregator ``name`` of this superstep."""
        if isinstance(value, np.generic):
            value = value.item()
        add_to_aggregate(self._aggregators, self.aggregates, name, value)

    def aggregated(self, name: str):
        """The combined value of aggregator ``name`` in the previous superstep."""
        return self._previous[name]


class KnownIds:
    """The positions of the id arrays another task sent to this one, kept from one superstep to the
    next: a task sends to the same vertices superstep after superstep (PageRank: every one), and
    comparing two id arrays costs a fraction of looking the ids up again. At most ``limit`` arrays
    (one per sending task) are kept, for one partition; the operator forgets them whenever the
    partition may change (a window's first superstep, a restore), as a window changes it in place."""

    def __init__(self, limit: int) -> None:
        self.limit = max(limit, 1)
        self.part: Partition | None = None
        self.known: dict[tuple, tuple] = {}  # (length, first, last) -> (ids, positions, found)

    def forget(self) -> None:
        """Keep nothing: the partition is about to change."""
        self.part, self.known = None, {}

    def lookup(self, part: Partition, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``part.index.lookup(ids)``, or the answer kept for the same ids."""
        if part is not self.part:  # the graph changed: the positions describe the old one
            self.part, self.known = part, {}
        if ids.dtype != np.int64 or len(ids) == 0:
            return part.index.lookup(ids)
        key = (len(ids), int(ids[0]), int(ids[-1]))
        kept = self.known.get(key)
        if kept is not None and (kept[0] is ids or np.array_equal(kept[0], ids)):
            return kept[1], kept[2]
        positions, found = part.index.lookup(ids)
        if len(self.known) >= self.limit:
            self.known.pop(next(iter(self.known)))
        self.known[key] = (ids, positions, found)
        return positions, found


def receive(pieces: list, part: Partition, combine, known: KnownIds | None = None) -> Inbox:
    """Combine the message pieces that reached a task into its inbox (``known``: the lookups of
    the last supersteps, to reuse)."""
    n = part.n
    if not pieces:
        return Inbox(n, np.zeros(0, np.int64), np.zeros(0))
    if len(pieces) == 1 and pieces[0][1] is None:
        positions, _, values, counts = pieces[0]  # one task's own messages: already combined
        if combine != "histogram":
            return Inbox(n, positions, values)
        from gyreflow.runtime.dataflow.graph.arrays import most_frequent

        chosen = most_frequent(positions, values, counts)
        return Inbox(n, *chosen, (positions, values, counts))
    all_positions, all_values, all_counts = [], [], []
    histogram = combine == "histogram"
    for positions, ids, values, counts in pieces:
        if positions is None:
            positions, found = (part.index.lookup(ids) if known is None
                                else known.lookup(part, ids))
            if not found.all():  # messages to vertices the graph does not have are dropped
                positions, values = positions[found], values[found]
                counts = None if counts is None else counts[found]
        all_positions.append(positions)
        all_values.append(values)
        if histogram:
            all_counts.append(np.ones(len(positions), np.int64) if counts is None else counts)
    if combine == "sum" and all(v.dtype.kind == "f" for v in all_values):
        return _summed(n, all_positions, all_values)
    positions = np.concatenate(all_positions)
    values = _concat_values(all_values)
    counts = np.concatenate(all_counts) if histogram else None
    positions, values, counts = reduce_messages(combine, positions, values, counts, n)
    if combine == "histogram":
        from gyreflow.runtime.dataflow.graph.arrays import most_frequent

        histogram = (positions, values, counts)
        positions, values = most_frequent(positions, values, counts)
        return Inbox(n, positions, values, histogram)
    return Inbox(n, positions, values)


def _summed(n: int, all_positions: list, all_values: list) -> Inbox:
    """The inbox of float messages summed per vertex, added piece by piece into one array: each
    piece holds a position once (its sender combined it per column), and the sums come out as
    ``reduce_messages`` adds them, in the order of the pieces."""
    sums = np.zeros(n, dtype=np.result_type(*all_values))
    received = np.zeros(n, dtype=bool)
    for positions, values in zip(all_positions, all_values, strict=True):
        sums[positions] += values
        received[positions] = True
    positions = np.flatnonzero(received)
    return Inbox(n, positions, sums[positions], sums=sums)


def split_outgoing(part: Partition, columns, values, counts) -> tuple[tuple, dict[int, tuple]]:
    """The combined messages as a piece for this task's own vertices and one per other task."""
    n = part.n
    cut = np.searchsorted(columns, n)
    local = (columns[:cut], None, values[:cut], None if counts is None else counts[:cut])
    remote: dict[int, tuple] = {}
    if cut < len(columns):
        bounds = np.searchsorted(columns, part.bounds)
        for owner in range(len(part.bounds) - 1):
            lo, hi = max(bounds[owner], cut), bounds[owner + 1]
            if hi > lo:
                remote[owner] = (None, part.columns_ids[columns[lo:hi]], values[lo:hi],
                                 None if counts is None else counts[lo:hi])
    return local, remote
