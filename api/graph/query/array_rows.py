"""Rows of array-joined matches by columns: each RETURN expression evaluated once per vertex, not per match.

When every RETURN item reads at most one node variable (``c.x``, ``id(c)``, ``c``) or is
``count(*)``, and ORDER BY names RETURN columns, the rows follow from the matched vertex ids alone:
per kept variable the distinct vertices (``np.unique``), per item their values, coded as integers;
the rows' code tuples are counted with one ``np.unique`` over the code matrix, and a row is made
per distinct tuple (repeated as often as it occurs, unless DISTINCT or grouped by ``count(*)``).
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np

from gyreflow.api.graph.query.evaluate import (
    _freeze,
    evaluate,
    has_aggregate,
    order_and_slice,
    variables_of,
)

COUNT_ALL = ("agg", "count", None, False)


def _eligible(plan, query) -> tuple | None:
    """The RETURN items' variables (None for a constant, "count" for count(*)) and the ORDER BY
    keys as column references, or None when the rows need the per-match path."""
    if plan.where is not None:
        return None
    kinds = []
    for item in query.ast.items:
        if has_aggregate(item.expr):
            if item.expr != COUNT_ALL:
                return None
            kinds.append("count")
            continue
        names = variables_of(item.expr)
        if len(names) > 1 or not names <= set(plan.keep_names) and names:
            return None
        kinds.append(next(iter(names)) if names else None)
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
    total = len(table)
    items = query.ast.items
    per_vertex: dict[str, tuple] = {}
    code_columns, decoders = [], []
    for item, kind in zip(items, kinds, strict=True):
        if kind == "count":
            continue
        if kind is None:  # a constant: one value for every row
            code_columns.append(np.zeros(total, np.int64))
            decoders.append([evaluate(item.expr, {}, params)])
            continue
        if kind not in per_vertex:
            per_vertex[kind] = _codes(table[:, plan.keep_names.index(kind)])
        ids, inverse = per_vertex[kind]
        values, coded, frozen = [], [], {}
        for vertex in ids:
            value = evaluate(item.expr, {kind: ("node", vertex, vertex_values.get(vertex))}, params)
            key = _freeze(value)
            if key not in frozen:
                frozen[key] = len(values)
                values.append(value)
            coded.append(frozen[key])
        code_columns.append(np.asarray(coded, np.int64)[inverse] if ids else
                            np.zeros(0, np.int64))
        decoders.append(values)
    if code_columns:
        groups, counts = _counted(code_columns, [len(values) for values in decoders])
    else:
        groups, counts = np.zeros((1, 0), np.int64), np.array([total])
    aggregated = "count" in kinds
    entries = []
    for codes, count in zip(groups.tolist(), counts.tolist(), strict=True):
        values = iter([decoders[i][code] for i, code in enumerate(codes)])
        row: dict[str, Any] = {item.alias: (count if kind == "count" else next(values))
                               for item, kind in zip(items, kinds, strict=True)}
        if aggregated:
            entries.append((row, {**row, ("agg", COUNT_ALL): count}, {}))
        elif count:
            entries.extend([(row, row, {})] * (1 if query.ast.distinct else count))
    ordered = attrs.evolve(query.ast, order=order)
    return [dict(row) for row in order_and_slice(ordered, entries, params)]


__all__ = ["column_rows"]
