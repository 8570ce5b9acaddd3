"""The oracle of a SQL query over tables read in windows of rows: DuckDB over the rows so far."""

from __future__ import annotations

from collections import Counter

import duckdb


def duckdb_windows(tables: dict[str, tuple[str, list]], size: int, query: str) -> dict[int, Counter]:
    """Per window: DuckDB's result of ``query`` over the rows so far, minus its result at the window
    before. ``tables``: name -> (its columns as DuckDB declares them, its rows); each table gives
    ``size`` rows a window."""
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
        now = Counter(tuple(row) for row in db.execute(query).fetchall())
        if added := now - before:
            changes[window] = added
        before = now
    return changes
