"""ORDER BY's order of SQL values: NULL last ascending (Calcite's default), NaN above every double."""

from __future__ import annotations

import functools
import math


def _sort_key(value):
    """Orders values with NULL last (ascending), as Calcite's default collation does, and NaN above
    every other double and equal to itself, as Java's ``Double.compareTo`` (and DuckDB) order it."""
    if value is None:
        return (1, 0)
    if isinstance(value, dict) and hasattr(value, "label"):  # a vertex or edge: by its id
        return (0, getattr(value, "id", None) if hasattr(value, "id") else (value.src, value.dst))
    if type(value) is float and value != value:  # NaN: after +Infinity
        return (0, math.inf, 1)
    return (0, value)


def ordering(keys: list):
    """A sort key by ORDER BY ``keys`` of ``(fn, descending)``, NULLs last ascending (as
    Calcite); ties keep the rows' order."""
    def compare(a, b):
        for fn, descending in keys:
            x, y = _sort_key(fn(a)), _sort_key(fn(b))
            if x != y:
                result = -1 if x < y else 1
                return -result if descending else result
        return 0
    return functools.cmp_to_key(compare)


def _order(rows: list, keys: list) -> list:
    """``rows`` of ``(output, ctx)`` sorted by ``keys`` of ``(fn, descending)``."""
    return sorted(rows, key=ordering(keys))
