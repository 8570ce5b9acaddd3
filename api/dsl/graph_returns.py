"""A MATCH block's RETURN computed on the arrays of its bindings (counts, aggregates, GROUP BY,
DISTINCT, ORDER BY ... LIMIT), without a Python row per binding.

The bindings come from ``graph_arrays.vertex_positions``: per named vertex, its position in the
graph's vertices, one entry a binding, in the order the row path binds them. A property column is
turned into order-preserving integer codes (equal codes: equal values; smaller code: smaller
value), so grouping, DISTINCT and sorting are array operations and only the output rows become
Python tuples. ``why_not`` says which RETURNs stay on the row path (``select.select``); a
property a binding reads as NULL, or of mixed types, makes ``array_return`` give None too.
"""

from __future__ import annotations

import math

import numpy as np
from sqlglot import exp

import gyreflow.api.dsl.functions as fns
from gyreflow.api.dsl.graphs import Vertex
from gyreflow.api.dsl.queries import Relation, _property, function_args, function_name
from gyreflow.runtime.dataflow.columns.zipped import zipped_rows

AGGREGATES = ("count", "sum", "min", "max", "avg")


def _plain(node, named: set) -> bool:
    """``var.property`` or ``var`` of a named vertex."""
    if not isinstance(node, exp.Column) or isinstance(node.this, exp.Star):
        return False
    return (node.table or node.name).lower() in named


def _aggregate_args(node) -> tuple[str, bool, list] | None:
    """``(name, distinct, argument columns)`` of an aggregate call (no argument: COUNT(*))."""
    if not isinstance(node, exp.Func):
        return None
    name = function_name(node)
    if name not in AGGREGATES:
        return None
    args = function_args(node)
    distinct = bool(args) and isinstance(args[0], exp.Distinct)
    if distinct:
        args = list(args[0].expressions) + args[1:]
    if name == "count" and args and isinstance(args[0], exp.Star):
        return (name, False, []) if len(args) == 1 else None
    return name, distinct, args


def why_not(select, named: set, catalog) -> str | None:
    """Why the RETURN ``select`` runs on the row path; None when it runs on the arrays."""
    if not isinstance(select, exp.Select):
        return "not a SELECT"
    for key in ("joins", "where", "having", "with_", "with", "qualify"):
        if select.args.get(key):
            return f"RETURN with {key.upper()}"
    items = select.expressions
    if not items or any(isinstance(item, exp.Star) or any(
            isinstance(node, (exp.Window, exp.Subquery, exp.Select)) for node in item.walk())
            for item in items):
        return "a window, sub-query or * in RETURN"
    for item in items:
        inner = item.this if isinstance(item, exp.Alias) else item
        if _plain(inner, named):
            continue
        found = _aggregate_args(inner)
        if found is None:
            return f"{inner.sql()[:40]!r} is neither a vertex's property nor an aggregate of them"
        name, distinct, args = found
        if catalog.aggregate(name) is not fns.AGGREGATE[name]:
            return f"{name.upper()} is a function of the script's own"
        if not all(_plain(arg, named) and arg.table for arg in args):
            return "an aggregate of something other than vertices' properties"
        if name != "count" and (len(args) != 1 or (distinct and name in ("sum", "avg"))):
            return f"{name.upper()} of several arguments, or SUM/AVG(DISTINCT)"
    group = select.args.get("group")
    if group is not None and not all(_plain(key, named) for key in group.expressions):
        return "GROUP BY of something other than vertices and their properties"
    names = [_name(item, i) for i, item in enumerate(items)]
    vertices = {i for i, item in enumerate(items)  # a vertex sorts by its id: on rows
                if _plain(item.this if isinstance(item, exp.Alias) else item, named)
                and not (item.this if isinstance(item, exp.Alias) else item).table}
    order = select.args.get("order")
    for key in order.expressions if order is not None else []:
        node = key.this
        if isinstance(node, exp.Column) and not node.table and node.name.lower() in names:
            if names.index(node.name.lower()) not in vertices:
                continue
        elif isinstance(node, exp.Literal) and not node.is_string and \
                node.this.isdigit() and 1 <= int(node.this) <= len(items):
            if int(node.this) - 1 not in vertices:
                continue
        elif _plain(node, named) and node.table:
            continue
        return "ORDER BY of something other than an output column or a vertex's property"
    for key in ("limit", "offset"):
        found = select.args.get(key)
        if found is not None and not (isinstance(found.expression, exp.Literal)
                                      and not found.expression.is_string):
            return f"{key.upper()} of an expression"
    return None


def _name(item, index: int) -> str:
    if isinstance(item, exp.Alias):
        return item.alias.lower()
    if isinstance(item, exp.Column):
        return item.name.lower()
    return f"expr${index}"


class _RowPathError(Exception):
    """A value the arrays do not reproduce exactly (NULL, mixed types): the row path runs."""


class _Column:
    """A column of one value per binding: ``codes`` (order-preserving), ``decode(codes)`` the values."""

    def __init__(self, codes: np.ndarray, decode, numbers=None, kind=None):
        self.codes, self.decode, self.numbers, self.kind = codes, decode, numbers, kind


class _Bindings:
    """The columns the RETURN reads, made once each."""

    def __init__(self, positions: dict, vertices: list):
        self.positions, self.vertices, self.made = positions, vertices, {}
        self.count = len(next(iter(positions.values()))) if positions else 0

    def column(self, node: exp.Column) -> _Column:
        var = (node.table or node.name).lower()
        key = node.name.lower() if node.table else None
        if (var, key) not in self.made:
            self.made[(var, key)] = self._make(var, key)
        return self.made[(var, key)]

    def _make(self, var: str, key: str | None) -> _Column:
        at = self.positions[var]
        vertices = self.vertices
        if key is None:  # the vertex itself: equal vertices are at one position
            table = np.empty(len(vertices), dtype=object)
            table[:] = vertices
            return _Column(at, lambda codes: table[codes].tolist(), kind=Vertex)
        used = np.flatnonzero(np.bincount(at, minlength=len(vertices))).tolist()
        values = [_property(vertices[p], key) for p in used]
        kinds = {type(v) for v in values}
        if len(kinds) > 1 or not kinds <= {int, float, str}:
            raise _RowPathError(f"{var}.{key}: NULL or values of several types")
        kind = kinds.pop() if kinds else int
        if kind is float and any(math.isnan(v) for v in values):
            raise _RowPathError(f"{var}.{key}: NaN")
        if kind is int and values and not -2**62 < min(values) <= max(values) < 2**62:
            raise _RowPathError(f"{var}.{key}: integers beyond 64 bits")
        table = np.zeros(len(vertices), dtype=np.int64)
        if kind is int:  # an integer is its own code
            table[used] = values
            return _Column(table[at], lambda codes: codes.tolist(), None, kind)
        distinct = sorted(set(values))
        code_of = {value: code for code, value in enumerate(distinct)}
        table[used] = [code_of[v] for v in values]
        codes = table[at]
        numbers = np.asarray(distinct, dtype=np.float64) if kind is float else None
        lookup = np.empty(len(distinct), dtype=object)
        lookup[:] = distinct
        return _Column(codes, lambda codes: lookup[codes].tolist(), numbers, kind)


def _keys(columns: list[np.ndarray], count: int) -> np.ndarray:
    """One int64 per row, equal where the rows' codes all are."""
    if not columns:
        return np.zeros(count, dtype=np.int64)
    key = None
    for codes in columns:
        if key is None:
            key = codes
            continue
        _, key = np.unique(key, return_inverse=True)
        _, codes = np.unique(codes, return_inverse=True)
        width = int(codes.max()) + 1 if len(codes) else 1
        if (int(key.max()) + 1 if len(key) else 1) * width >= 2**62:
            stacked = np.stack([key, codes], axis=1)
            key = np.unique(stacked, axis=0, return_inverse=True)[1].reshape(-1)
        else:
            key = key.astype(np.int64) * width + codes
    return key


def _groups(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(group of each row, first row of each group)``, groups numbered in the order they first
    occur (as a dict of the rows' keys numbers them)."""
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    by_first = np.argsort(first, kind="stable")
    rank = np.empty(len(first), dtype=np.int64)
    rank[by_first] = np.arange(len(first))
    return rank[inverse.reshape(-1)], first[by_first]


def _aggregate(name, distinct, args, bindings, group, groups: int) -> list:
    """The aggregate's value per group, as ``functions.AGGREGATE`` computes it."""
    if name == "count":
        if distinct:
            key = _keys([group] + [bindings.column(a).codes for a in args], len(group))
            group = group[np.unique(key, return_index=True)[1]]
        return np.bincount(group, minlength=groups).tolist()
    column = bindings.column(args[0])
    if name in ("sum", "avg") and column.numbers is None and column.kind is not int:
        raise _RowPathError(f"{name.upper()} of strings")
    order = np.argsort(group, kind="stable")
    sizes = np.bincount(group, minlength=groups)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    codes = column.codes[order]
    if name in ("min", "max"):
        if not len(codes):
            return [None] * groups
        reduce = np.minimum if name == "min" else np.maximum
        return column.decode(reduce.reduceat(codes, starts))
    values = codes if column.kind is int else column.numbers[codes]
    if column.kind is int:
        if len(values) and int(np.abs(values).max()) * len(values) >= 2**63:
            raise _RowPathError("a sum beyond 64 bits")
        totals = np.add.reduceat(values, starts).tolist() if len(values) else [0] * groups
    else:
        totals = [math.fsum(part) for part in np.split(values, starts[1:])] if len(values) \
            else [0] * groups
    sizes = sizes.tolist()
    if name == "sum":
        return [total if size else 0 for total, size in zip(totals, sizes, strict=True)]
    return [total / size if size else None for total, size in zip(totals, sizes, strict=True)]


def array_return(select: exp.Select, positions: dict, vertices: list) -> Relation | None:
    """The rows of the RETURN ``select`` (``why_not`` has passed it) over the bindings, as
    ``select.select`` makes them; None when a value asks for the row path."""
    try:
        return _evaluate(select, _Bindings(positions, vertices))
    except _RowPathError:
        return None


def _evaluate(select: exp.Select, bindings: _Bindings) -> Relation:
    items = select.expressions
    names = [_name(item, i) for i, item in enumerate(items)]
    inners = [item.this if isinstance(item, exp.Alias) else item for item in items]
    found = [_aggregate_args(inner) for inner in inners]
    group = select.args.get("group")
    grouped = group is not None or any(f is not None for f in found)
    count = bindings.count
    if grouped:
        keys = [bindings.column(k).codes for k in (group.expressions if group is not None else [])]
        rows, firsts = _groups(_keys(keys, count)) if count else (np.zeros(0, np.int64),
                                                                    np.zeros(0, np.int64))
        size = len(firsts)
        if not size and group is None:  # no binding, no GROUP BY: one row of the empty group
            size = 1
        at = firsts  # the row a group's plain columns are read at (its first)
    else:
        rows, size, at = None, count, np.arange(count)
    outputs: list[list] = []  # per output column, its values
    codes: list = []  # per output column, order-preserving codes (None: made from the values)
    vertex = [False] * len(items)  # a vertex sorts by its id: the row path sorts such a column
    for inner, aggregate in zip(inners, found, strict=True):
        if aggregate is None:
            column = bindings.column(inner)
            vertex[len(codes)] = column.kind is Vertex
            if len(at) < size:  # the empty group reads NULL
                outputs.append([None] * size)
                codes.append(np.zeros(size, np.int64))
            else:
                outputs.append(column.decode(column.codes[at]))
                codes.append(column.codes[at])
        else:
            outputs.append(_aggregate(*aggregate, bindings, rows, size))
            codes.append(None)
    index = context = np.arange(size)  # the output rows kept; the rows an ORDER BY reads
    if select.args.get("distinct") and size > 1:
        key = _keys([c if c is not None else _codes(v) for c, v in zip(codes, outputs, strict=True)],
                    size)
        # as select.select keeps them: in the order of each output's last occurrence, read at
        # its first (what an ORDER BY of the input sees)
        first = np.unique(key, return_index=True)[1]
        last = size - 1 - np.unique(key[::-1], return_index=True)[1]
        by_last = np.argsort(last, kind="stable")
        index, context = last[by_last], first[by_last]
    order = select.args.get("order")
    if order is not None and len(index) > 1:
        sort_keys = []
        for ordered in order.expressions:
            node = ordered.this
            if isinstance(node, exp.Literal):
                column = int(node.this) - 1
            elif isinstance(node, exp.Column) and not node.table:
                column = names.index(node.name.lower())
            else:
                column = None
            if column is not None:
                if vertex[column]:
                    raise _RowPathError("ORDER BY a vertex")
                key = codes[column] if codes[column] is not None else _codes(outputs[column])
                key = key[index]
            else:  # a property of the input, read at the output row's binding
                if len(at) < size:
                    raise _RowPathError("ORDER BY over the empty group")
                if bindings.column(node).kind is Vertex:
                    raise _RowPathError("ORDER BY a vertex")
                key = bindings.column(node).codes[at][context]
            key = key.astype(np.int64)
            sort_keys.append(-key if ordered.args.get("desc") else key)
        index = index[np.lexsort(sort_keys[::-1])]  # stable, as sorted() in select._order
    offset, limit = select.args.get("offset"), select.args.get("limit")
    start = int(offset.expression.this) if offset is not None else 0
    index = index[start:start + int(limit.expression.this)] if limit is not None else index[start:]
    picked = [[values[i] for i in index.tolist()] if len(index) < size or
              not np.array_equal(index, np.arange(size)) else values for values in outputs]
    out = zipped_rows(*picked) if picked and len(index) else []
    return Relation([(None, n) for n in names], out)


def _codes(values: list) -> np.ndarray:
    """Order-preserving codes of an aggregate's values."""
    kinds = {type(v) for v in values}
    if len(kinds) > 1 or not kinds <= {int, float, str}:
        raise _RowPathError("an aggregate's values of several types, or NULL")
    return np.unique(np.asarray(values), return_inverse=True)[1].reshape(-1).astype(np.int64)


__all__ = ["array_return", "why_not"]
