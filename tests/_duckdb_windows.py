"""The oracle of a SQL query over tables read in windows of rows: DuckDB over the rows so far."""

from __future__ import annotations

import math
from collections import Counter

import duckdb


def canonical(row) -> tuple:
    """``row`` as a tuple whose NaNs are all the one object ``math.nan``: a NaN is not equal to
    itself, but a Counter or tuple comparison takes the same object as equal, so rows with NaN
    then count and compare as one value (as SQL's GROUP BY and DISTINCT take them)."""
    return tuple(math.nan if isinstance(v, float) and v != v else v for v in row)


def duckdb_windows(tables: dict[str, tuple[str, list]], size: int, query: str) -> dict[int, Counter]:
    """Per window: DuckDB's result of ``query`` over the rows so far, minus its result at the window
    before. ``tables``: name -> (its columns as DuckDB declares them, its rows); each table gives
    ``size`` rows a window. NaNs are ``math.nan`` (``canonical``): compare the engine's rows
    through ``canonical`` too."""
    db = duckdb.connect()
    for name, (columns, _rows) in tables.items():
        db.execute(f"CREATE TABLE {name} ({columns})")
    before: Counter = Counter()
    changes = {}
    windows = max(-(-len(rows) // size) for _columns, rows in tables.values())
    for window in range(1, windows + 1):
        lo, hi = (window - 1) * size, window * size
        for name, (columns, rows) in tables.items():
            if rows[lo:hi]:
                marks = ", ".join("?" * len(columns.split(",")))
                db.executemany(f"INSERT INTO {name} VALUES ({marks})", rows[lo:hi])
        now = Counter(canonical(row) for row in db.execute(query).fetchall())
        if added := now - before:
            changes[window] = added
        before = now
    return changes
