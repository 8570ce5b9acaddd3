"""Expressions of graph queries over one match's bindings, and the projection after collection."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from gyreflow.runtime.errors import DataError

LABEL_KEY = "label"  # the key of a vertex or edge mapping that names its label (or edge type)


class QueryArithmeticError(DataError):
    """An integer ``/`` or ``%`` by zero in a query: openCypher raises (a float operand gives
    infinity or NaN instead)."""


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


_INT64 = (-(2**63), 2**63 - 1)


def _int64(result: int, left: int, op: str, right: int) -> int:
    """``result`` of an integer operation, which must fit openCypher's 64-bit integers."""
    if not _INT64[0] <= result <= _INT64[1]:
        msg = (f"integer overflow in a query: {left} {op} {right} is outside the 64-bit range "
               "of openCypher integers (use a float operand for a float result)")
        raise QueryArithmeticError(msg)
    return result


def arithmetic(op: str, left: Any, right: Any) -> Any:
    """``left op right`` as openCypher defines it: integer ``/`` truncates toward zero and ``%``
    takes the dividend's sign (``-7 / 2`` is -3, ``-7 % 3`` is -1), with a float operand both are
    IEEE float operations (``-7.5 % 2`` is -1.5, ``1 / 0.0`` infinity, ``0.0 / 0`` and ``1.0 % 0``
    NaN), and an integer ``/`` or ``%`` by 0 raises ``QueryArithmeticError``, as does an integer
    result outside 64 bits. ``+`` also joins
    strings and lists; operands of other types (booleans included) give null.

    >>> arithmetic("/", -7, 2), arithmetic("%", -7, 3), arithmetic("%", 7, -3)
    (-3, -1, 1)
    >>> arithmetic("/", -7.0, 2), arithmetic("%", -7.5, 2), arithmetic("/", -1, 0.0)
    (-3.5, -1.5, -inf)
    >>> arithmetic("*", "ab", 3) is None
    True
    """
    if not (_number(left) and _number(right)):
        if op == "+" and ((isinstance(left, str) and isinstance(right, str))
                          or isinstance(left, list) or isinstance(right, list)):
            if isinstance(left, list):
                return left + (right if isinstance(right, list) else [right])
            if isinstance(right, list):
                return [left, *right]
            return left + right
        return None
    integers = isinstance(left, int) and isinstance(right, int)
    if op in ("+", "-", "*"):
        result = left + right if op == "+" else left - right if op == "-" else left * right
        return _int64(result, left, op, right) if integers else result
    if integers:
        if right == 0:
            what = "division" if op == "/" else "modulo"
            msg = (f"integer {what} by zero in a query: {left} {op} {right} (openCypher raises for "
                   f"an integer {op} by 0; a float operand gives infinity or NaN)")
            raise QueryArithmeticError(msg)
        quotient = abs(left) // abs(right)
        if (left < 0) != (right < 0):
            quotient = -quotient
        return _int64(quotient, left, op, right) if op == "/" else left - right * quotient
    left, right = float(left), float(right)
    if op == "%":
        return math.fmod(left, right) if right != 0 else math.nan
    if right != 0:
        return left / right
    if left == 0 or math.isnan(left):
        return math.nan
    return math.copysign(math.inf, left) * math.copysign(1.0, right)


def _label_and_properties(value: Any) -> tuple[tuple, dict]:
    """A value's labels and properties: a mapping carries its labels under ``"label"`` (a string or
    a list of strings) and properties under the other keys; a ``(label, properties)`` pair is the
    same; any other value has no label and no properties."""
    if isinstance(value, Mapping):
        label = value.get(LABEL_KEY)
        labels = (label,) if isinstance(label, str) else tuple(label or ())
        return labels, {k: v for k, v in value.items() if k != LABEL_KEY}
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str) and \
            isinstance(value[1], Mapping):
        return (value[0],), dict(value[1])
    return (), {}


def node_label_and_properties(value: Any) -> tuple[tuple, dict]:
    return _label_and_properties(value)


def edge_label_and_properties(value: Any) -> tuple[str | None, dict]:
    labels, properties = _label_and_properties(value)
    return (labels[0] if labels else None), properties


def has_aggregate(expr: tuple) -> bool:
    if expr[0] == "agg":
        return True
    return any(isinstance(part, tuple) and part and isinstance(part[0], str) and has_aggregate(part)
               for part in expr[1:]) or any(
        isinstance(part, tuple) and any(isinstance(p, tuple) and p and has_aggregate(p) for p in part)
        for part in expr[1:] if isinstance(part, tuple) and part and not isinstance(part[0], str))


def variables_of(expr: Any) -> set:
    """The variable names ``expr`` reads.

    >>> sorted(variables_of(("cmp", "<", ("prop", ("var", "a"), "x"), ("var", "b"))))
    ['a', 'b']
    """
    if isinstance(expr, tuple) and len(expr) == 2 and expr[0] == "var":
        return {expr[1]}
    if isinstance(expr, (tuple, list)):
        return set().union(*(variables_of(part) for part in expr)) if expr else set()
    return set()


def _output(bound: Any) -> Any:
    """What a variable evaluates to: a node's id; an edge's ``[src, dst]`` (a list of them for a
    variable-length relationship)."""
    if bound[0] == "node":
        return bound[1]
    if isinstance(bound[1], list):
        return [[src, dst] for src, dst, _ in bound[1]]
    return [bound[1][0], bound[1][1]]


def _compare(op: str, left: Any, right: Any) -> Any:
    if left is None or right is None:
        return None
    numbers = (int, float)
    if op in ("=", "<>"):
        if isinstance(left, bool) != isinstance(right, bool) and (
                isinstance(left, numbers) and isinstance(right, numbers)):
            equal = False
        else:
            equal = left == right
        return equal if op == "=" else not equal
    comparable = (isinstance(left, numbers) and isinstance(right, numbers)
                  and not isinstance(left, bool) and not isinstance(right, bool)) or \
        type(left) is type(right) and isinstance(left, (str, bool))
    if not comparable:
        return None
    return {"<": left < right, "<=": left <= right, ">": left > right, ">=": left >= right}[op]


def _logic(op: str, left: Any, right: Any) -> Any:
    if op == "and":
        if left is False or right is False:
            return False
        return None if left is None or right is None else True
    if op == "or":
        if left is True or right is True:
            return True
        return None if left is None or right is None else False
    return None if left is None or right is None else left != right


def evaluate(expr: tuple, bindings: dict, params: dict, columns: dict | None = None) -> Any:
    """The value of ``expr`` for one match (null follows openCypher's three-valued logic)."""
    kind = expr[0]
    if kind == "lit":
        return expr[1]
    if kind == "param":
        if expr[1] not in params:
            msg = f"the query needs parameter ${expr[1]}"
            raise KeyError(msg)
        return params[expr[1]]
    if kind == "var":
        if columns is not None and expr[1] in columns:
            return columns[expr[1]]
        bound = bindings.get(expr[1])
        return None if bound is None else _output(bound)
    if kind == "prop":
        base = expr[1]
        if base[0] == "var" and base[1] in bindings:
            bound = bindings[base[1]]
            if bound[0] == "node":
                return _label_and_properties(bound[2])[1].get(expr[2])
            if not isinstance(bound[1], list):
                return _label_and_properties(bound[1][2])[1].get(expr[2])
            return None
        value = evaluate(base, bindings, params, columns)
        return value.get(expr[2]) if isinstance(value, Mapping) else None
    if kind in ("and", "or", "xor"):
        return _logic(kind, evaluate(expr[1], bindings, params, columns),
                      evaluate(expr[2], bindings, params, columns))
    if kind == "not":
        value = evaluate(expr[1], bindings, params, columns)
        return None if value is None else not value
    if kind == "cmp":
        return _compare(expr[1], evaluate(expr[2], bindings, params, columns),
                        evaluate(expr[3], bindings, params, columns))
    if kind == "isnull":
        value = evaluate(expr[1], bindings, params, columns)
        return (value is not None) if expr[2] else (value is None)
    if kind == "in":
        value = evaluate(expr[1], bindings, params, columns)
        items = evaluate(expr[2], bindings, params, columns)
        if value is None or not isinstance(items, list):
            return None
        return any(_compare("=", value, item) is True for item in items)
    if kind == "list":
        return [evaluate(item, bindings, params, columns) for item in expr[1]]
    if kind == "neg":
        value = evaluate(expr[1], bindings, params, columns)
        if not _number(value):
            return None
        return -value if isinstance(value, float) else _int64(-value, 0, "-", value)
    if kind == "bin":
        left = evaluate(expr[2], bindings, params, columns)
        right = evaluate(expr[3], bindings, params, columns)
        if left is None or right is None:
            return None
        return arithmetic(expr[1], left, right)
    if kind == "fn":
        return _function(expr, bindings, params, columns)
    if kind == "test":  # ("test", predicate, ("var", name)): a caller's own test of one binding
        return expr[1](bindings.get(expr[2][1]))
    if kind == "agg":
        if columns is not None and ("agg", expr) in columns:
            return columns[("agg", expr)]
        msg = "an aggregate is allowed in RETURN and ORDER BY only"
        raise ValueError(msg)
    msg = f"unknown expression {kind}"
    raise ValueError(msg)


def _function(expr: tuple, bindings: dict, params: dict, columns) -> Any:
    name, args = expr[1], expr[2]
    if name in ("id", "labels", "type") and args[0][0] == "var" and args[0][1] in bindings:
        bound = bindings[args[0][1]]
        if name == "id":
            return bound[1] if bound[0] == "node" else None
        if name == "labels":
            return list(_label_and_properties(bound[2])[0]) if bound[0] == "node" else None
        if bound[0] == "rel" and not isinstance(bound[1], list):
            return edge_label_and_properties(bound[1][2])[0]
        return None
    value = evaluate(args[0], bindings, params, columns)
    if value is None:
        return None
    if name == "size":
        return len(value) if isinstance(value, (list, str)) else None
    if name == "tolower":
        return value.lower() if isinstance(value, str) else None
    if name == "toupper":
        return value.upper() if isinstance(value, str) else None
    if name == "abs":
        return abs(value) if isinstance(value, (int, float)) else None
    return None


def _unique(values: list) -> list:
    """``values`` without repeats, first ones kept, equal as Python's ``==`` says (``1``,
    ``1.0`` and ``True`` are one): a set for hashable values, a list scan for the others.

    >>> _unique([1, 1.0, "a", [2], [2], True, "a"])
    [1, 'a', [2]]
    """
    seen: set = set()
    others: list = []
    unique = []
    for value in values:
        try:
            if value in seen:
                continue
            seen.add(value)
        except TypeError:  # a list or a map
            if value in others:
                continue
            others.append(value)
        unique.append(value)
    return unique


def _aggregate(function: str, values: list, distinct: bool) -> Any:
    if function != "count" or values is not None:
        values = [v for v in values if v is not None]
    if distinct:
        values = _unique(values)
    if function == "count":
        return len(values)
    if function == "collect":
        return values
    if not values:
        return None
    if function == "sum":
        return sum(values)
    if function == "avg":
        return sum(values) / len(values)
    return min(values) if function == "min" else max(values)


def _aggregates_of(expr: tuple) -> list:
    if expr[0] == "agg":
        return [expr]
    found = []
    for part in expr[1:]:
        if isinstance(part, tuple) and part and isinstance(part[0], str):
            found.extend(_aggregates_of(part))
        elif isinstance(part, tuple):
            for item in part:
                if isinstance(item, tuple) and item and isinstance(item[0], str):
                    found.extend(_aggregates_of(item))
    return found


def _freeze(value: Any) -> Any:
    if isinstance(value, list):
        return ("list", tuple(_freeze(v) for v in value))
    if isinstance(value, dict):
        return ("map", tuple(sorted((k, _freeze(v)) for k, v in value.items())))
    if isinstance(value, float) and math.isnan(value):
        return ("nan",)
    if isinstance(value, bool):
        return ("bool", value)
    return value


def _sort_key(value: Any) -> tuple:
    """openCypher's order: numbers, then strings, then booleans, lists; null last (ascending)."""
    if value is None:
        return (9, 0)
    if isinstance(value, bool):
        return (3, value)
    if isinstance(value, (int, float)):
        return (1, value)
    if isinstance(value, str):
        return (2, value)
    if isinstance(value, list):
        return (4, tuple(_sort_key(v) for v in value))
    return (5, repr(value))


def project(ast, matches: list, params: dict, aggregated: bool) -> list[dict]:
    """RETURN, DISTINCT, aggregation with implicit grouping, ORDER BY, SKIP and LIMIT."""
    items = ast.items
    if aggregated:
        groups: dict = {}
        keys = [i for i, item in enumerate(items) if not has_aggregate(item.expr)]
        for match in matches:
            key = tuple(_freeze(evaluate(items[i].expr, match, params)) for i in keys)
            groups.setdefault(key, []).append(match)
        if not groups and not keys:
            groups[()] = []
        rows = []
        for group in groups.values():
            columns: dict = {}
            for item in items:
                for agg in _aggregates_of(item.expr):
                    _, function, arg, distinct = agg
                    values = None if arg is None else [evaluate(arg, m, params) for m in group]
                    if arg is None:
                        values = [1] * len(group)
                    columns[("agg", agg)] = _aggregate(function, values, distinct)
            sample = group[0] if group else {}
            row = {item.alias: evaluate(item.expr, sample, params, columns) for item in items}
            rows.append((row, {**columns, **row}, sample))
    else:
        rows = []
        for match in matches:
            row = {item.alias: evaluate(item.expr, match, params) for item in items}
            rows.append((row, row, match))
    if ast.distinct:
        seen, unique = set(), []
        for entry in rows:
            key = tuple(_freeze(v) for v in entry[0].values())
            if key not in seen:
                seen.add(key)
                unique.append(entry)
        rows = unique
    return order_and_slice(ast, rows, params)


def order_and_slice(ast, rows: list, params: dict) -> list[dict]:
    """ORDER BY, SKIP and LIMIT over ``(row, columns, sample match)`` entries: the rows."""
    for expr, descending in reversed(ast.order):
        rows.sort(key=lambda entry, e=expr: _sort_key(evaluate(e, entry[2], params, entry[1])),
                  reverse=descending)
    skip = evaluate(ast.skip, {}, params) if ast.skip is not None else 0
    limit = evaluate(ast.limit, {}, params) if ast.limit is not None else None
    for name, value in (("SKIP", skip), ("LIMIT", limit)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            msg = f"{name} needs a non-negative integer, got {value!r}"
            raise ValueError(msg)
    selected = rows[skip:] if limit is None else rows[skip:skip + limit]
    return [entry[0] for entry in selected]
