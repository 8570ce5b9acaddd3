"""Joins, DISTINCT and UNION over tables read in windows of rows, planned onto the stream join, a
first-seen DISTINCT and a union of streams: each window's rows against DuckDB's, which runs the
query over every row so far at each window and gives the rows the window added (the difference
of two results, as the query operator emitted them before)."""

from __future__ import annotations

import random
import subprocess
import sys
from collections import Counter

import pytest
from _duckdb_windows import duckdb_windows as duckdb_changes

from gyreflow.api import Environment

A_COLUMNS = [("id", "bigint"), ("k", "int"), ("s", "varchar"), ("x", "int")]
B_COLUMNS = [("id", "bigint"), ("k", "int"), ("v", "int")]


def tables(seed: int, a_rows: int = 70, b_rows: int = 55) -> tuple[list, list]:
    """Rows of a and b: keys in a small range (NULL now and then), ids unique across both."""
    rng = random.Random(seed)

    def key():
        return None if rng.random() < 0.08 else rng.randrange(9)

    a = [(i, key(), rng.choice(["p", "q", "r"]), rng.choice([None, *range(-3, 4)]))
         for i in range(a_rows)]
    b = [(1000 + i, key(), rng.randrange(-5, 30)) for i in range(b_rows)]
    return a, b


def write(path, rows) -> None:
    path.write_text("".join(",".join("" if v is None else str(v) for v in row) + "\n"
                            for row in rows), encoding="utf-8")


def script(tmp_path, a, b, size: int, query: str) -> str:
    write(tmp_path / "a.txt", a)
    write(tmp_path / "b.txt", b)
    made = []
    for name, columns in (("a", A_COLUMNS), ("b", B_COLUMNS)):
        listed = ", ".join(f"{c} {t}" for c, t in columns)
        made.append(f"CREATE TABLE {name} ({listed}) WITH (type='file', "
                    f"geaflow.dsl.file.path='{tmp_path / (name + '.txt')}');\n")
    return f"SET geaflow.dsl.window.size = {size};\n" + "".join(made) + query + ";\n"


def duckdb_windows(a, b, size: int, query: str) -> dict[int, Counter]:
    return duckdb_changes({"a": ("id BIGINT, k INTEGER, s VARCHAR, x INTEGER", a),
                           "b": ("id BIGINT, k INTEGER, v INTEGER", b)}, size, query)


QUERIES = [
    # inner joins: a WHERE, expressions, ON with a condition of one side, two keys, USING
    "SELECT a.id, b.id, b.v + a.k FROM a JOIN b ON a.k = b.k WHERE b.v > 3",
    "SELECT a.s, b.v FROM a JOIN b ON a.k = b.k AND b.v < 20 AND a.x >= 0",
    "SELECT a.id, b.v FROM a INNER JOIN b ON b.k = a.k AND a.x = b.v",
    "SELECT a.s, b.v FROM a JOIN b USING (k)",
    "SELECT * FROM a JOIN b ON a.k = b.k",
    "SELECT p.id, q.id FROM a p JOIN a q ON p.k = q.k AND p.id < q.id",  # a table with itself
    # outer joins: each row's id shown, so no output row repeats another
    "SELECT a.id, b.id FROM a LEFT JOIN b ON a.k = b.k",
    "SELECT a.id, a.s, b.id, b.v FROM a LEFT OUTER JOIN b ON a.k = b.k AND b.v > 10",
    "SELECT a.id, b.id, b.v FROM a RIGHT JOIN b ON a.k = b.k WHERE b.v >= 0",
    "SELECT a.id, b.id FROM a FULL JOIN b ON a.k = b.k",
    # GROUP BY over an inner join, DISTINCT, UNION
    "SELECT a.s, count(*), sum(b.v) FROM a JOIN b ON a.k = b.k GROUP BY a.s",
    "SELECT DISTINCT a.s, b.v FROM a JOIN b ON a.k = b.k",
    "SELECT DISTINCT k, s FROM a",
    "SELECT DISTINCT x FROM a WHERE k > 2",
    "SELECT id, k FROM a UNION ALL SELECT id, k FROM b WHERE v > 5",
    "SELECT k FROM a UNION SELECT k FROM b",
    "SELECT a.id, b.v FROM a JOIN b ON a.k = b.k UNION ALL SELECT id, x FROM a",
]


@pytest.mark.parametrize("query", QUERIES)
@pytest.mark.parametrize(("seed", "size"), [(1, 10), (2, 7)])
def test_each_window_adds_what_duckdb_adds_over_the_rows_so_far(tmp_path, query, seed, size):
    a, b = tables(seed)
    got = Environment.local(2, progress=False).sql(script(tmp_path, a, b, size, query)).by_window(
        "rows-4")
    duck = query.replace("count(*)", "count(*)::BIGINT")
    want = duckdb_windows(a, b, size, duck)
    assert {w: Counter(rows) for w, rows in got.items() if rows} == want, query
    assert sum(map(len, want.values())) > 2


def test_in_every_environment(make_env, tmp_path):
    a, b = tables(3)
    query = "SELECT a.id, b.id, a.s FROM a FULL JOIN b ON a.k = b.k WHERE a.x IS NULL OR a.x > -2"
    got = make_env(3).sql(script(tmp_path, a, b, 9, query)).by_window("rows-4")
    assert {w: Counter(rows) for w, rows in got.items() if rows} == duckdb_windows(a, b, 9, query)


def test_the_joins_run_on_the_stream_join_and_the_rest_on_the_query_operator(tmp_path):
    a, b = tables(4)
    text = script(tmp_path, a, b, 10, "SELECT a.id, b.v FROM a LEFT JOIN b ON a.k = b.k") + (
        "SELECT DISTINCT s FROM a;\n"
        "SELECT a.id FROM a JOIN b ON a.k = b.k ORDER BY a.id;\n"  # ORDER BY: every row so far
        "SELECT a.id FROM a JOIN b ON a.k + 1 = b.k;\n")  # no equi-key of columns
    (tmp_path / "q.sql").write_text(text, encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "gyreflow", "explain", "q.sql"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stderr) == (0, "")
    plans: dict[str, list[str]] = {}
    for line in done.stdout.splitlines():
        if line.startswith("== "):
            plans[line.strip("= ").split("/")[-1]] = []
        elif line.startswith("  ") and " p=" in line:
            plans[list(plans)[-1]].append(line.split()[0:2])
    assert ["left", "join"] in plans["statement-4"]
    assert any(kind == "stream_join" for _, kind in
               (line.split()[-4:-2] for line in done.stdout.splitlines()
                if line.startswith("  left join")))
    assert ["distinct", "process"] in plans["statement-5"]
    assert ["query", "process"] in plans["statement-6"]
    assert ["query", "process"] in plans["statement-7"]


def test_an_outer_row_that_found_its_match_does_not_cancel_an_equal_new_row(tmp_path):
    """``SELECT a.s``: a's row 1 has no match in window 1 (``p``, NULL-padded, emitted); in window
    2 it finds one, and a new row 2 of a, also ``p``, has none. The difference of two results
    (DuckDB's, the query operator's) cancels the padded row that went against row 2's, and emits
    ``p`` once for the match; the stream join emits the match and row 2's padded row."""
    a = [(1, 5, "p", 0), (2, 6, "p", 0)]
    b = [(1000, 7, 0), (1001, 5, 0)]
    query = "SELECT a.s FROM a LEFT JOIN b ON a.k = b.k"
    got = Environment.local(1, progress=False).sql(script(tmp_path, a, b, 1, query)).by_window(
        "rows-4")
    assert {w: Counter(r) for w, r in got.items() if r} == {1: Counter({("p",): 1}),
                                                            2: Counter({("p",): 2})}
    assert duckdb_windows(a, b, 1, query) == {1: Counter({("p",): 1}), 2: Counter({("p",): 1})}
