"""Rows of array-joined matches by columns: each RETURN expression evaluated once per vertex, not per match.

When every RETURN item reads at most one node variable (``c.x``, ``id(c)``, ``c``) or is an
aggregate of such an expression (``count(*)``, ``avg(a.age)``, ``count(DISTINCT b)``), and ORDER BY
names RETURN columns, the rows follow from the matched vertex ids alone:
per kept variable the distinct vertices (``np.unique``), per item their values, coded as integers;
the rows' code tuples are counted with one ``np.unique`` over the code matrix, and a row is made
per distinct tuple (repeated as often as it occurs, unless DISTINCT or grouped by ``count(*)``).
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np

from gyreflow.api.graph.query.evaluate import (
    _aggregate,
    _freeze,
    evaluate,
    has_aggregate,
    order_and_slice,
    variables_of,
)

COUNT_ALL = ("agg", "count", None, False)


def _eligible(plan, query) -> tuple | None:
    """Per RETURN item what it reads: ``("key", variable or None)`` for an expression of at most
    one kept node, ``("agg", variable or None)`` for an aggregate whose argument is such an
    expression (None: ``count(*)``); and the ORDER BY keys as column references. None when the
    rows need the per-match path."""
    if plan.where is not None:
        return None
    kinds = []
    kept = set(plan.keep_names)
    for item in query.ast.items:
        expr = item.expr
        aggregate = expr[0] == "agg"
        if has_aggregate(expr) and not (aggregate and (expr[2] is None
                                                       or not has_aggregate(expr[2]))):
            return None
        names = variables_of(expr[2]) if aggregate and expr[2] is not None else \
            set() if aggregate else variables_of(expr)
        if len(names) > 1 or not names <= kept:
            return None
        kinds.append(("agg" if aggregate else "key", next(iter(names)) if names else None))
    aliases = {item.alias for item in query.ast.items}
    order = []
    for expr, descending in query.ast.order:
        same = [item.alias for item in query.ast.items if item.expr == expr]
        if expr[0] == "var" and expr[1] in aliases:
            order.append((expr, descending))
        elif same:
            order.append((("var", same[0]), descending))
        else:
            return None
    return tuple(kinds), tuple(order)


def _codes(column: np.ndarray) -> tuple[list, np.ndarray]:
    """``(distinct vertex ids, each row's index into them)``."""
    if column.dtype != object:
        unique, inverse = np.unique(column, return_inverse=True)
        return unique.tolist(), inverse.reshape(-1)
    index: dict = {}
    inverse = np.fromiter((index.setdefault(v, len(index)) for v in column.tolist()), np.int64,
                          count=len(column))
    return list(index), inverse


def _counted(columns: list, sizes: list) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of the code columns (``sizes``: how many codes each has) and how often
    each occurs: one integer key per row (mixed radix) counted with ``bincount`` or a 1-D
    ``unique`` where it fits, a row-wise ``unique`` otherwise."""
    total = len(columns[0])
    if not total:
        return np.zeros((0, len(columns)), np.int64), np.zeros(0, np.int64)
    span = 1
    for size in sizes:
        span *= max(size, 1)
    if span >= 2**62:
        return np.unique(np.stack(columns, axis=1), axis=0, return_counts=True)
    key = np.zeros(total, np.int64)
    for column, size in zip(columns, sizes, strict=True):
        key = key * max(size, 1) + column
    if span <= 4 * total + 1024:
        counts = np.bincount(key, minlength=span)
        keys = np.flatnonzero(counts)
        counts = counts[keys]
    else:
        keys, counts = np.unique(key, return_counts=True)
    groups = np.empty((len(keys), len(columns)), np.int64)
    for i in range(len(columns) - 1, -1, -1):
        size = max(sizes[i], 1)
        keys, groups[:, i] = np.divmod(keys, size)
    return groups, counts


def column_rows(plan, query, tables: list, params: dict, vertex_values) -> list[dict] | None:
    """The rows of ``query`` from the tasks' tables of kept vertex ids, or None when the query
    needs them per match."""
    eligible = _eligible(plan, query)
    if eligible is None:
        return None
    kinds, order = eligible
    width = len(plan.keep_names)
    table = np.concatenate(tables) if tables else np.zeros((0, width), np.int64)
    coder = _Coder(plan, table, params, vertex_values)
    items = query.ast.items
    keys = [coder.column(item.expr, kind[1]) for item, kind in zip(items, kinds, strict=True)
            if kind[0] == "key"]
    if keys:
        groups, counts = _counted([c for c, _ in keys], [len(d) for _, d in keys])
    else:
        groups, counts = np.zeros((1, 0), np.int64), np.array([len(table)])
    group_of = {tuple(codes): at for at, codes in enumerate(groups.tolist())}
    aggregates: dict = {}
    for item, kind in zip(items, kinds, strict=True):
        if kind[0] == "agg" and item.expr[2] is not None and item.expr not in aggregates:
            aggregates[item.expr] = _fold(item.expr, coder.column(item.expr[2], kind[1]), keys,
                                          group_of, len(groups))
    aggregated = query.aggregated
    entries = []
    for at, (codes, count) in enumerate(zip(groups.tolist(), counts.tolist(), strict=True)):
        values = iter([keys[i][1][code] for i, code in enumerate(codes)])
        found = {expr: folded[at] for expr, folded in aggregates.items()}
        found[COUNT_ALL] = count
        row: dict[str, Any] = {item.alias: found[item.expr] if kind[0] == "agg" else next(values)
                               for item, kind in zip(items, kinds, strict=True)}
        if aggregated:
            columns = {("agg", expr): value for expr, value in found.items()}
            entries.append((row, {**columns, **row}, {}))
        elif count:
            entries.extend([(row, row, {})] * (1 if query.ast.distinct else count))
    ordered = attrs.evolve(query.ast, order=order)
    return [dict(row) for row in order_and_slice(ordered, entries, params)]


class _Coder:
    """Expressions of one kept node as integer codes per row: evaluated once per distinct
    vertex, equal values (as DISTINCT and grouping see them) one code."""

    def __init__(self, plan, table: np.ndarray, params: dict, vertex_values) -> None:
        self.plan, self.table, self.params, self.vertex_values = plan, table, params, vertex_values
        self.vertices: dict[str, tuple] = {}

    def column(self, expr: tuple, variable: str | None) -> tuple[np.ndarray, list]:
        """``(code per row, value per code)`` of ``expr``."""
        total = len(self.table)
        if variable is None:  # a constant: one value for every row
            return np.zeros(total, np.int64), [evaluate(expr, {}, self.params)]
        if variable not in self.vertices:
            column = self.table[:, self.plan.keep_names.index(variable)]
            self.vertices[variable] = _codes(column)
        ids, inverse = self.vertices[variable]
        values, coded, frozen = [], [], {}
        for vertex in ids:
            binding = {variable: ("node", vertex, self.vertex_values.get(vertex))}
            value = evaluate(expr, binding, self.params)
            key = _freeze(value)
            if key not in frozen:
                frozen[key] = len(values)
                values.append(value)
            coded.append(frozen[key])
        codes = np.asarray(coded, np.int64)[inverse] if ids else np.zeros(0, np.int64)
        return codes, values


def _fold(expr: tuple, argument: tuple, keys: list, group_of: dict, groups: int) -> list:
    """Per group, the aggregate ``expr`` of its rows' ``argument`` (codes and values)."""
    _, function, _, distinct = expr
    codes, decoded = argument
    pairs, counts = _counted([c for c, _ in keys] + [codes],
                             [len(d) for _, d in keys] + [len(decoded)])
    found: list[list] = [[] for _ in range(groups)]
    for row, count in zip(pairs.tolist(), counts.tolist(), strict=True):
        at = group_of[tuple(row[:-1])]
        value = decoded[row[-1]]
        once = distinct or function in ("min", "max")
        found[at].extend([value] if once else [value] * count)
    return [_aggregate(function, values, distinct) for values in found]


__all__ = ["column_rows"]
