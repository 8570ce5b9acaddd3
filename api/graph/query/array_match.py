"""The array program of a MATCH path: partial paths expand as rows of vertex ids, one hop per superstep.

A row holds, per node position of the path, the vertex id bound there; per hop taken so far, the
edge it took (``src``, ``dst`` and its occurrence among the parallel edges of that pair, so that no
edge repeats within a match); and where it stands: the relationship it is on and the hops taken on
it. A task expands the rows that reached its vertices along its CSR (a ragged gather: no Python
loop per row), drops the rows whose new edge repeats an earlier one, and sends each row to the
task of the vertex it reached; there the node's filter (labels, properties, the WHERE conjuncts
that read only that node: one mask per task and node) and a repeated variable's equality are
array operations too. Complete rows are counted (``count(*)``) or kept as the vertex ids the
rest of the query reads; each task's result rides on its first vertex's value.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping

import numpy as np

from gyreflow.api.graph.arrays import ArrayVertexCompute
from gyreflow.api.graph.query.evaluate import (
    LABEL_KEY,
    edge_label_and_properties,
    evaluate,
    node_label_and_properties,
)


def _properties_match(pattern_properties: tuple, properties: dict, params: dict) -> bool:
    return all(key in properties and properties[key] == evaluate(expr, {}, params)
               for key, expr in pattern_properties)


def ragged(indptr: np.ndarray, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(row, entry)``: for every edge entry of the CSR rows ``positions``, which of the
    positions it belongs to and its index in the CSR arrays.

    >>> row, entry = ragged(np.array([0, 2, 2, 5]), np.array([2, 0]))
    >>> row.tolist(), entry.tolist()
    ([0, 0, 0, 1, 1], [2, 3, 4, 0, 1])
    """
    starts = indptr[positions]
    counts = indptr[positions + 1] - starts
    row = np.repeat(np.arange(len(positions)), counts)
    if not len(row):
        return row, row
    shift = np.repeat(starts - (np.cumsum(counts) - counts), counts)
    return row, shift + np.arange(len(row))


def occurrences(indptr: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """Per CSR entry, how many entries of its row before it have the same column (parallel
    edges are told apart by it).

    >>> occurrences(np.array([0, 3, 4]), np.array([5, 6, 5, 5])).tolist()
    [0, 0, 1, 0]
    """
    rows = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
    order = np.lexsort((np.arange(len(indices)), indices, rows))
    r, c = rows[order], indices[order]
    new = np.ones(len(order), dtype=bool)
    new[1:] = (r[1:] != r[:-1]) | (c[1:] != c[:-1])
    starts = np.maximum.accumulate(np.where(new, np.arange(len(order)), 0))
    found = np.empty(len(order), np.int64)
    found[order] = np.arange(len(order)) - starts
    return found


class _Side:
    """One CSR matrix a relationship follows: its entries' target columns and ids, which entries
    pass the relationship's filter, their occurrence, and whether the row is the edge's source."""

    def __init__(self, matrix, columns_ids, keep, outgoing: bool) -> None:
        self.indptr = matrix.indptr.astype(np.int64)
        self.indices = matrix.indices.astype(np.int64)
        self.targets = columns_ids[self.indices]
        self.keep = keep
        self.occurrence = occurrences(self.indptr, self.indices)
        self.outgoing = outgoing
        self.verify = False  # its entries' filter is checked where the row arrives


class _TaskPlan:
    """What one task precomputes for a plan: node masks over its vertices, the sides per
    relationship."""

    def __init__(self, plan, params: dict, starts, part) -> None:
        given = part.given
        ids = part.ids
        self.object_ids = part.columns.dtype == object
        self.masks = [self._node_mask(plan, position, params, ids, given, starts)
                      for position in range(len(plan.nodes))]
        pushed = plan.rel_pushed or tuple(() for _ in plan.rels)
        verify = plan.verify or tuple(False for _ in plan.rels)
        self.sides = [self._sides(plan, rel, params, part, pushed[index], verify[index])
                      for index, rel in enumerate(plan.rels)]
        # per relationship checked on arrival: its filter over this task's out-edges
        self.arrival = [_out_keep(rel, pushed[index], part, params) if verify[index] else None
                        for index, rel in enumerate(plan.rels)]
        self.out_index = _OutIndex(part) if any(verify) else None

    @staticmethod
    def _node_mask(plan, position: int, params: dict, ids, given, starts) -> np.ndarray:
        node = plan.nodes[position]
        pushed = plan.pushed[position]
        limited = starts is not None and position in plan.first
        mask = np.ones(len(ids), dtype=bool)
        if limited:
            mask = np.fromiter((vertex in starts for vertex in ids.tolist()), dtype=bool,
                               count=len(ids))
        rest = []
        for conjunct in pushed:
            compared = _compared(conjunct, node.variable, given, params)
            if compared is None:
                rest.append(conjunct)
            else:
                mask &= compared
        pushed = rest
        if not (node.labels or node.properties or pushed):
            return mask
        for index, (vertex, value) in enumerate(zip(ids.tolist(), given.tolist(), strict=True)):
            if not mask[index]:
                continue
            labels, properties = node_label_and_properties(value)
            if any(name not in labels for name in node.labels) or \
                    not _properties_match(node.properties, properties, params):
                mask[index] = False
                continue
            if pushed:
                binding = {node.variable: ("node", vertex, value)}
                mask[index] = all(evaluate(c, binding, params) is True for c in pushed)
        return mask

    @staticmethod
    def _sides(plan, rel, params: dict, part, pushed: tuple, verify: bool) -> list:
        sides = []
        matrices = [(part.out_edges, True)]
        if plan.directed and rel.direction == "in":
            matrices = [(part.in_edges, False)]
        elif plan.directed and rel.direction == "both":
            matrices = [(part.out_edges, True), (part.in_edges, False)]
        for matrix, outgoing in matrices:
            keep = None
            if (rel.types or rel.properties or pushed) and (outgoing or not plan.directed):
                keep = _out_keep(rel, pushed, part, params)
            side = _Side(matrix, part.columns, keep, outgoing)
            side.verify = verify and not outgoing  # checked where the row arrives
            if plan.directed and rel.direction == "both" and not outgoing:
                rows = np.repeat(np.arange(part.num_local), np.diff(side.indptr))
                loops = side.indices == rows  # a self-loop is followed once, as an out-edge
                side.keep = ~loops if side.keep is None else side.keep & ~loops
            sides.append(side)
        return sides


_MIRRORED = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "=", "<>": "<>"}
_COMPARE = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
            "=": np.equal, "<>": np.not_equal}


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _property(value, key: str):
    if isinstance(value, Mapping):
        return value.get(key) if key != LABEL_KEY else None
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str) and \
            isinstance(value[1], Mapping):
        return value[1].get(key)
    return None


def _compared(conjunct: tuple, variable: str, given, params: dict) -> np.ndarray | None:
    """Where ``variable.key OP number`` (either way round) is true, as one array operation over
    the property's column; None for any other conjunct (evaluated per vertex)."""
    if conjunct[0] != "cmp":
        return None
    op, left, right = conjunct[1:]
    if right[0] == "prop" and left[0] != "prop":
        op, left, right = _MIRRORED[op], right, left
    if left[0] != "prop" or left[1] != ("var", variable) or right[0] not in ("lit", "param"):
        return None
    number = evaluate(right, {}, params)
    if not _number(number) or (isinstance(number, float) and math.isnan(number)):
        return None
    found = [_property(value, left[2]) for value in given.tolist()]
    numeric = np.fromiter((_number(v) for v in found), dtype=bool, count=len(found))
    numbers = [v if n else 0 for v, n in zip(found, numeric, strict=True)]
    integers = isinstance(number, int) and not any(isinstance(v, float) for v in numbers)
    if not integers and any(isinstance(v, int) and abs(v) > 2**53 for v in [*numbers, number]):
        return None  # float64 would round it: Python compares exactly
    try:
        column = np.array(numbers, dtype=np.int64 if integers else float)
    except OverflowError:
        return None
    result = np.asarray(_COMPARE[op](column, number), dtype=bool) & numeric
    if op == "<>":  # a value of another type is unequal too; null is not
        present = np.fromiter((v is not None for v in found), dtype=bool, count=len(found))
        result |= present & ~numeric
    return result


def _out_keep(rel, pushed: tuple, part, params: dict) -> np.ndarray:
    """Which of the task's out-edge entries pass the relationship's type, properties and WHERE
    conjuncts on its variable."""
    matrix = part.out_edges
    values = part.out_values.tolist() if part.out_values is not None else [None] * matrix.nnz
    keep = np.fromiter((_edge_ok(rel, value, params) for value in values), dtype=bool,
                       count=len(values))
    if pushed:
        keep &= _edge_conjuncts(rel.variable, pushed, matrix, part, values, params)
    return keep


class _OutIndex:
    """Finds the out-edge entry of a task's vertex by its target column and occurrence."""

    def __init__(self, part) -> None:
        matrix = part.out_edges
        indptr, indices = matrix.indptr.astype(np.int64), matrix.indices.astype(np.int64)
        rows = np.repeat(np.arange(part.num_local), np.diff(indptr))
        self.width = max(part.out_edges.shape[1], 1)
        keys = rows * self.width + indices
        self.order = np.lexsort((occurrences(indptr, indices), keys))
        self.keys = keys[self.order]

    def entries(self, positions, columns, occurrence) -> tuple[np.ndarray, np.ndarray]:
        """``(entries, found)`` of the out-edges ``positions -> columns`` numbered
        ``occurrence`` among their parallel edges."""
        keys = positions * self.width + columns
        at = np.searchsorted(self.keys, keys) + occurrence
        found = at < len(self.keys)
        found[found] = self.keys[at[found]] == keys[found]
        return self.order[np.where(found, at, 0)] if len(self.order) else at, found


def _edge_conjuncts(variable: str, pushed: tuple, matrix, part, values: list,
                    params: dict) -> np.ndarray:
    """Where the WHERE conjuncts on a relationship variable hold, per out-edge entry: the edge
    bound as the per-path traversal binds it (``src``: the row's vertex)."""
    rows = np.repeat(np.arange(part.num_local), np.diff(matrix.indptr))
    sources = part.ids[rows].tolist()
    targets = part.columns[matrix.indices].tolist()
    return np.fromiter(
        (all(evaluate(c, {variable: ("rel", (src, dst, value))}, params) is True for c in pushed)
         for src, dst, value in zip(sources, targets, values, strict=True)),
        dtype=bool, count=len(values))


def _edge_ok(rel, value, params: dict) -> bool:
    label, properties = edge_label_and_properties(value)
    if rel.types and label not in rel.types:
        return False
    return _properties_match(rel.properties, properties, params)


class _Done:
    """The matches one ``compute`` call completes where their last edge is found."""

    def __init__(self) -> None:
        self.count = 0
        self.tables: list = []


class ArrayMatch(ArrayVertexCompute):
    """Finds the matches of an ``ArrayPlan`` (see the module's text); a task's result is
    ``{"count", "rows", "seconds"}`` on its first vertex, None on the others."""

    combine = None

    def __init__(self, plan, params: dict, starts: frozenset | None) -> None:
        self.plan = plan
        self.params = params
        self.starts = starts
        self.max_iterations = plan.max_hops + 2
        nodes = len(plan.nodes)
        self.hop_column = nodes  # then src, dst, occurrence per hop
        self.rel_column = nodes + 3 * plan.max_hops
        self.verify_column = self.rel_column + 2  # 1: the last hop's filter is checked here
        self.width = self.rel_column + 3  # relationship, hops taken on it, the check
        self.bound_at = plan.bound_at
        last = len(plan.nodes) - 1
        node = plan.nodes[last]
        # a last node that asks nothing: a match is complete (counted, or its kept vertex ids
        # taken) where its last edge is found, not one superstep later at the last vertex's task
        self.finish_at_send = bool(plan.rels) and not plan.keep_hops and not (
            plan.verify and plan.verify[-1]) and not (
            node.labels or node.properties or plan.pushed[last] or self.bound_at[last] != last
            or (starts is not None and last in plan.first))
        self._tasks: dict = {}
        # the vertex ids the rows keep, then (src, dst, occurrence) of each hop in ``keep_hops``
        self.kept_columns = [*plan.keep, *(self.hop_column + 3 * hop + k for hop in plan.keep_hops
                                           for k in range(3))]

    def init(self, ids: np.ndarray, given: np.ndarray) -> np.ndarray:
        return np.full(len(ids), None, dtype=object)

    def _task(self, part) -> _TaskPlan:
        key = id(part.ids)
        found = self._tasks.get(key)
        if found is None or found[0] is not part.ids:
            found = self._tasks[key] = (part.ids, _TaskPlan(self.plan, self.params, self.starts, part))
        return found[1]

    def compute(self, part, inbox) -> np.ndarray:
        started = time.perf_counter()
        values = part.values
        if not len(values):
            return values
        task = self._task(part)
        result = dict(values[0] or {"count": 0, "rows": [], "seconds": 0.0})
        dtype = object if task.object_ids else np.int64
        if part.iteration == 1:
            positions = np.arange(part.num_local)
            rows = np.zeros((part.num_local, self.width), dtype=dtype)
            rows[:, self.rel_column] = -1
        else:
            positions = inbox.positions
            rows = np.asarray(inbox.values)
            if not len(positions):
                rows = np.zeros((0, self.width), dtype=dtype)
            elif dtype is object and rows.dtype != object:
                rows = rows.astype(object)
        done = _Done()  # what this call completes where a last edge is found
        done_rows = self._settle(part, task, positions, rows, part.iteration - 1, done)
        if self.plan.count_only:
            result["count"] += len(done_rows) + done.count
        else:
            kept = [done_rows[:, self.kept_columns]] if len(done_rows) else []
            result["rows"] = [*result["rows"], *kept, *done.tables]
        result["seconds"] += time.perf_counter() - started
        values = values.copy()
        values[0] = result
        return values

    def _settle(self, part, task: _TaskPlan, positions, rows, hops: int, done) -> np.ndarray:
        """Take the rows that reached ``positions`` as far as they go here: through the nodes
        they reach (and zero-hop relationships), out along the next edges (sent); returns the
        complete rows."""
        plan = self.plan
        complete = []
        rel_col = self.rel_column
        if len(rows) and task.out_index is not None:
            positions, rows = self._arrived(part, task, positions, rows, hops)
        while len(rows):
            rel = rows[:, rel_col].astype(np.int64)
            taken = rows[:, rel_col + 1].astype(np.int64)
            lows = np.array([r.min_hops for r in plan.rels] + [0], dtype=np.int64)
            highs = np.array([r.max_hops for r in plan.rels] + [0], dtype=np.int64)
            on = np.where(rel < 0, len(plan.rels), rel)
            at_node = (rel < 0) | (taken >= lows[on])
            going_on = (rel >= 0) & (taken < highs[on])
            if self.finish_at_send:  # complete when its last edge was found
                at_node &= ~((rel == len(plan.rels) - 1) & (taken >= 1))
            if going_on.any():
                self._expand(part, task, positions[going_on], rows[going_on], rel[going_on],
                             hops, done)
            positions, rows = positions[at_node], rows[at_node]
            node = rel[at_node] + 1  # the node position each row reaches
            keep = np.zeros(len(rows), dtype=bool)
            ids = part.ids[positions]
            for position in np.unique(node).tolist():
                these = node == position
                ok = task.masks[position][positions[these]]
                bound = self.bound_at[position]
                if bound != position:
                    ok &= rows[these, bound] == ids[these]
                keep[these] = ok
                rows[np.flatnonzero(these), position] = ids[these]
            positions, rows, node = positions[keep], rows[keep], node[keep]
            last = node == len(plan.nodes) - 1
            complete.append(rows[last])
            positions, rows = positions[~last], rows[~last]
            rows[:, rel_col] = node[~last]
            rows[:, rel_col + 1] = 0
        return np.concatenate(complete) if complete else np.zeros((0, self.width), np.int64)

    def _arrived(self, part, task: _TaskPlan, positions, rows, hops: int) -> tuple:
        """Drop the rows whose last hop followed an in-edge that fails its relationship's
        filter: here, at the edge's source, is the edge's value."""
        check = rows[:, self.verify_column].astype(np.int64) == 1
        if not check.any():
            return positions, rows
        at = np.flatnonzero(check)
        column = self.hop_column + 3 * (hops - 1)
        targets, reached = part.column_positions(rows[at, column + 1])
        entries, found = task.out_index.entries(positions[at], targets.astype(np.int64),
                                                rows[at, column + 2].astype(np.int64))
        found &= reached
        rel = rows[at, self.rel_column].astype(np.int64)
        passing = np.zeros(len(at), dtype=bool)
        for index in np.unique(rel).tolist():
            these = np.flatnonzero((rel == index) & found)
            passing[these] = task.arrival[index][entries[these]]
        keep = np.ones(len(rows), dtype=bool)
        keep[at] = passing
        rows = rows[keep]
        rows[:, self.verify_column] = 0
        return positions[keep], rows

    def _expand(self, part, task: _TaskPlan, positions, rows, rel, hops: int, done) -> None:
        """Send every row one hop further along its relationship's edges (a row whose new edge
        completes the match at an unconstrained last node is counted here instead)."""
        if hops >= self.plan.max_hops:
            return
        last_rel = len(self.plan.rels) - 1
        for index in np.unique(rel).tolist():
            these = np.flatnonzero(rel == index)
            from_rows, at = rows[these], positions[these]
            for side in task.sides[index]:
                row, entry = ragged(side.indptr, at)
                if side.keep is not None:
                    passing = side.keep[entry]
                    row, entry = row[passing], entry[passing]
                if not len(row):
                    continue
                here = part.ids[at][row]
                there = side.targets[entry]
                src, dst = (here, there) if side.outgoing else (there, here)
                occurrence = side.occurrence[entry]
                fresh = self._fresh(from_rows, row, src, dst, occurrence, hops) \
                    if self.plan.trails else None
                if fresh is not None:
                    row, entry, src, dst, occurrence = (row[fresh], entry[fresh], src[fresh],
                                                        dst[fresh], occurrence[fresh])
                taken = from_rows[row, self.rel_column + 1].astype(np.int64) + 1
                if self.finish_at_send and index == last_rel:
                    self._finish(done, from_rows, row, side.targets[entry],
                                 taken >= self.plan.rels[index].min_hops)
                    going = taken < self.plan.rels[index].max_hops
                    if not going.all():
                        row, entry, src, dst, occurrence, taken = (
                            row[going], entry[going], src[going], dst[going], occurrence[going],
                            taken[going])
                    if not len(row):
                        continue
                grown = from_rows[row]
                column = self.hop_column + 3 * hops
                grown[:, column] = src
                grown[:, column + 1] = dst
                grown[:, column + 2] = occurrence
                grown[:, self.rel_column + 1] = taken
                grown[:, self.verify_column] = 1 if side.verify else 0
                part.send(side.indices[entry], grown)

    def _finish(self, done, from_rows, row, there, complete) -> None:
        """Count, or keep the vertex ids of, the rows whose new edge ends their match at
        ``there`` (the last node, which asks nothing)."""
        if self.plan.count_only:
            done.count += int(np.count_nonzero(complete))
            return
        if not complete.any():
            return
        row, there = row[complete], there[complete]
        last = len(self.plan.nodes) - 1
        kept = np.empty((len(row), len(self.plan.keep)), dtype=from_rows.dtype if
                        from_rows.dtype == object or there.dtype != object else object)
        for i, position in enumerate(self.plan.keep):
            kept[:, i] = there if position == last else from_rows[row, position]
        done.tables.append(kept)

    def _fresh(self, from_rows, row, src, dst, occurrence, hops: int) -> np.ndarray | None:
        """A mask of the new edges no earlier hop of their row took (None: all of them)."""
        repeated = np.zeros(len(row), dtype=bool)
        for hop in range(hops):
            column = self.hop_column + 3 * hop
            ends = (dst, src) if self.plan.directed else (dst, src, src, dst)
            for k in range(0, len(ends), 2):
                earlier_dst = from_rows[:, column + 1][row]
                maybe = np.flatnonzero(earlier_dst == ends[k])
                if not len(maybe):
                    continue
                at = row[maybe]
                same = (from_rows[at, column] == ends[k + 1][maybe]) & \
                    (from_rows[at, column + 2] == occurrence[maybe])
                repeated[maybe[same]] = True
        return ~repeated if repeated.any() else None


__all__ = ["ArrayMatch", "occurrences", "ragged"]
