"""SQL defects an outside comparison with DuckDB found in planning and SELECT: IN (sub-query) over
tables read in windows, JOIN ... USING, columns neither grouped nor aggregated, set operations'
ORDER BY / OFFSET / ALL, NaN as a group value, the up-front check's division by an empty COUNT,
and errors of the query operator naming the row. Each result is DuckDB's (or a plain loop's)."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import duckdb
import pytest
from _duckdb_windows import duckdb_windows
from hypothesis import given, settings
from hypothesis import strategies as st

from gyreflow.api.dsl.parsing import DslError, parse_script
from gyreflow.api.dsl.runner import prepare
from gyreflow.api.dsl.select import evaluate


def write(path, rows) -> None:
    """Rows as lines of text: NULL as an empty field (``null`` alone on its line: a blank line is
    no row)."""
    path.write_text("".join((",".join("" if v is None else str(v) for v in row) or "null") + "\n"
                            for row in rows), encoding="utf-8")


def table(tmp_path, name: str, columns: str, rows, window: int = 0, file: str | None = None) -> str:
    """``CREATE TABLE`` of ``rows`` written to a file (``window`` rows a window; 0: read whole)."""
    path = tmp_path / f"{file or name}.txt"
    write(path, rows)
    size = f", geaflow.dsl.window.size = {window}" if window else ""
    return f"CREATE TABLE {name} ({columns}) WITH (type='file', geaflow.dsl.file.path='{path}'{size});\n"


def duck(tables: dict[str, tuple[str, list]]):
    db = duckdb.connect()
    for name, (columns, rows) in tables.items():
        db.execute(f"CREATE TABLE {name} ({columns})")
        if rows:
            db.executemany(f"INSERT INTO {name} VALUES ({', '.join('?' * len(rows[0]))})", rows)
    return db


def query_of(text: str):
    return parse_script(text + ";")[0].query


def refusal(script: str) -> DslError:
    with pytest.raises(DslError) as caught:
        prepare(script)
    return caught.value


# ---- 1. IN (sub-query) over tables read in windows: a semi-join over every row so far

T_ROWS = [(1, 5), (2, 5), (3, 6), (4, 7), (5, None), (6, 8), (7, 5)]
U_ROWS = [(9,), (5,), (None,), (7,), (5,)]  # 5 twice: an outer row still comes out once


def test_in_a_sub_query_over_windows_is_the_semi_join_duckdb_gives_over_the_rows_so_far(make_env, tmp_path):
    """t's row 1 matches in window 1; row 4 (v = 7) only once u's 7 came, in window 4; each outer
    row comes out once, in the window where it first has a match, whichever side brought it."""
    script = ("SET geaflow.dsl.window.size = 1;\n" + table(tmp_path, "t", "id int, v int", T_ROWS)
              + table(tmp_path, "u", "k int", U_ROWS)
              + "SELECT id FROM t WHERE v IN (SELECT k FROM u);\n"
              + "SELECT t.id FROM t JOIN (SELECT DISTINCT k FROM u) d ON t.v = d.k;\n"
              + "SELECT id, v FROM t WHERE v IN (SELECT k FROM u WHERE k > 5) AND id > 2;\n")
    result = make_env(2).sql(script)
    tables = {"t": ("id INTEGER, v INTEGER", T_ROWS), "u": ("k INTEGER", U_ROWS)}
    for number, query in ((4, "SELECT id FROM t WHERE v IN (SELECT k FROM u)"),
                          (6, "SELECT id, v FROM t WHERE v IN (SELECT k FROM u WHERE k > 5) AND id > 2")):
        got = {w: Counter(rows) for w, rows in result.by_window(f"rows-{number}").items() if rows}
        assert got == duckdb_windows(tables, 1, query), query
    assert got  # something came out
    # the same as the stream join of t with u's distinct keys, window by window
    assert ({w: Counter(r) for w, r in result.by_window("rows-4").items() if r}
            == {w: Counter(r) for w, r in result.by_window("rows-5").items() if r})
    assert sorted(result.output("rows-4")) == sorted(duck(tables).execute(
        "SELECT id FROM t WHERE v IN (SELECT k FROM u)").fetchall())


def test_not_in_a_sub_query_over_windows_is_refused_before_it_runs_with_its_place(tmp_path):
    script = ("SET geaflow.dsl.window.size = 2;\n" + table(tmp_path, "t", "id int, v int", T_ROWS)
              + table(tmp_path, "u", "k int", U_ROWS)
              + "SELECT id\nFROM t WHERE  v NOT IN (SELECT k FROM u);\n")
    error = refusal(script)
    assert (error.statement, error.line, error.column) == (4, 5, 15)
    assert "NOT IN (sub-query) over a table read in windows" in error.message
    assert "does not take back" in error.message


def test_not_in_over_whole_tables_still_runs_as_duckdb(make_env, tmp_path):
    rows = [(1, 5), (2, 6), (3, None), (4, 9)]
    script = (table(tmp_path, "t", "id int, v int", rows) + table(tmp_path, "u", "k int", [(5,), (7,)])
              + "SELECT id FROM t WHERE v NOT IN (SELECT k FROM u);\n")
    want = duck({"t": ("id INTEGER, v INTEGER", rows), "u": ("k INTEGER", [(5,), (7,)])}).execute(
        "SELECT id FROM t WHERE v NOT IN (SELECT k FROM u)").fetchall()
    assert sorted(make_env(1).sql(script).output("rows-3")) == sorted(want) == [(2,), (4,)]


# ---- 2. JOIN ... USING (k): a.k = b.k, k is COALESCE(a.k, b.k), SELECT * lists k once, first

A_ROWS = [(1, None), (2, 1), (3, 5), (4, 1), (5, None)]  # id, k
B_ROWS = [(10, None), (11, 1), (12, 7), (13, 5)]  # bid, k
USING_QUERIES = [
    "SELECT a.id, b.bid FROM a JOIN b USING (k)",
    "SELECT k, a.id, b.bid FROM a FULL JOIN b USING (k)",
    "SELECT k, a.id, b.bid FROM a RIGHT JOIN b USING (k)",
    "SELECT k, a.k, b.k, a.id FROM a LEFT JOIN b USING (k) WHERE k IS NULL OR k > 0",
    "SELECT * FROM a JOIN b USING (k)",
    "SELECT * FROM a FULL JOIN b USING (k)",
]


def _duckdb_using(query: str) -> str:
    """SQL (and Calcite) list a USING column first in ``*``; DuckDB keeps it where the left has it."""
    return query.replace("SELECT *", "SELECT k, a.id, b.bid")


def test_join_using_over_whole_tables_and_windows_against_duckdb(make_env, environment_type,
                                                                  tmp_path):
    queries = on_host(USING_QUERIES, environment_type)
    whole = (table(tmp_path, "a", "id int, k int", A_ROWS) + table(tmp_path, "b", "bid int, k int", B_ROWS))
    windowed = (table(tmp_path, "wa", "id int, k int", A_ROWS, window=2, file="a")
                + table(tmp_path, "wb", "bid int, k int", B_ROWS, window=2, file="b"))
    statements = [q + ";\n" for q in queries] + [
        q.replace("FROM a", "FROM wa a").replace("JOIN b", "JOIN wb b") + ";\n" for q in queries]
    result = make_env(2).sql(whole + windowed + "".join(statements))
    tables = {"a": ("id INTEGER, k INTEGER", A_ROWS), "b": ("bid INTEGER, k INTEGER", B_ROWS)}
    db = duck(tables)
    for i, query in enumerate(queries):
        want = Counter(db.execute(_duckdb_using(query)).fetchall())
        assert Counter(result.output(f"rows-{5 + i}")) == want, query
        by_window = result.by_window(f"rows-{5 + len(queries) + i}")
        assert ({w: Counter(r) for w, r in by_window.items() if r}
                == duckdb_windows(tables, 2, _duckdb_using(query))), query
    assert Counter(result.output("rows-5")) == Counter({(2, 11): 1, (4, 11): 1, (3, 13): 1})


def test_select_star_of_a_join_using_names_the_using_column_once_first(tmp_path):
    _, catalog = prepare(table(tmp_path, "a", "id int, k int, x int", [(1, 2, 3)])
                         + table(tmp_path, "b", "bid int, k int, y int", [(4, 2, 5)]))
    relation = evaluate(query_of("SELECT * FROM a JOIN b USING (k)"), catalog)
    assert relation.names() == ["k", "id", "x", "bid", "y"]
    assert relation.rows == [(2, 1, 3, 4, 5)]
    assert evaluate(query_of("SELECT a.*, b.* FROM a JOIN b USING (k)"), catalog).names() == [
        "id", "k", "x", "bid", "k", "y"]


# ---- 3. a column neither grouped nor aggregated: refused before anything runs

@pytest.mark.parametrize(("query", "column"), [
    ("SELECT g, id FROM t GROUP BY g", 11),
    ("SELECT count(*), id FROM t", 18),
    ("SELECT id FROM t HAVING id > 1", 8),
    ("SELECT g, count(*) FROM t GROUP BY g ORDER BY id", 47),
    ("SELECT g, sum(id) FROM t GROUP BY g HAVING max(id) > id", 54),
    ("SELECT g || t.id FROM t GROUP BY g", 15),  # the column's name
])
def test_a_column_neither_grouped_nor_aggregated_is_refused_at_its_place(tmp_path, query, column):
    script = table(tmp_path, "t", "id int, g varchar", [(1, "a")]) + query + ";\n"
    error = refusal(script)
    assert (error.statement, error.line, error.column) == (2, 2, column), error
    assert error.message.startswith(("column id is", "column t.id is"))
    assert "neither in GROUP BY nor inside an aggregate" in error.message
    db = duck({"t": ("id INTEGER, g VARCHAR", [(1, "a")])})
    with pytest.raises(duckdb.BinderException):
        db.execute(query)


def test_grouped_expressions_constants_aliases_and_filters_run_as_duckdb(make_env, tmp_path):
    rows = [(1, "a"), (2, "a"), (3, "b"), (4, "c")]
    queries = [
        "SELECT g, upper(g), 'x', 7, count(*) FROM t GROUP BY g",
        "SELECT upper(g) AS u, count(*) FROM t GROUP BY upper(g) HAVING upper(g) <> 'B'",
        "SELECT t.g, count(*) FILTER (WHERE id > 1), max(id) + 1 FROM t GROUP BY g ORDER BY g",
        "SELECT id + 1, count(*) FROM t GROUP BY id + 1",
        "SELECT count(*), sum(id) FROM t HAVING count(*) > 1",
    ]
    script = table(tmp_path, "t", "id int, g varchar", rows) + "".join(q + ";\n" for q in queries)
    result = make_env(1).sql(script)
    db = duck({"t": ("id INTEGER, g VARCHAR", rows)})
    for i, query in enumerate(queries):
        assert Counter(result.output(f"rows-{i + 2}")) == Counter(db.execute(query).fetchall()), query


# ---- 4. set operations: ORDER BY a position, OFFSET, EXCEPT ALL and INTERSECT ALL

V_ROWS = [(5,), (3,), (None,), (9,), (3,), (1,), (3,), (None,)]
K_ROWS = [(3,), (4,), (None,), (8,), (3,)]
SET_QUERIES = [  # (gyreflow's, DuckDB's: NULLs last ascending, first descending, as Calcite)
    ("SELECT v FROM t UNION SELECT k FROM u ORDER BY 1", "NULLS LAST"),
    ("SELECT v FROM t UNION ALL SELECT k FROM u ORDER BY 1 DESC", "NULLS FIRST"),
    ("SELECT v FROM t UNION SELECT k FROM u ORDER BY v LIMIT 2 OFFSET 2", "NULLS LAST"),
    ("SELECT v FROM t UNION ALL SELECT k FROM u ORDER BY v OFFSET 3", "NULLS LAST"),
    ("SELECT v FROM t EXCEPT ALL SELECT k FROM u ORDER BY 1", "NULLS LAST"),
    ("SELECT v FROM t INTERSECT ALL SELECT k FROM u ORDER BY 1", "NULLS LAST"),
    ("SELECT v FROM t EXCEPT SELECT k FROM u ORDER BY 1", "NULLS LAST"),
    ("SELECT v FROM t INTERSECT SELECT k FROM u ORDER BY 1", "NULLS LAST"),
]


def _duckdb_order(query: str, nulls: str) -> str:
    head, _, order = query.partition(" ORDER BY ")
    key, _, rest = order.partition(" LIMIT ") if " LIMIT " in order else order.partition(" OFFSET ")
    tail = (" LIMIT " if " LIMIT " in order else " OFFSET ") + rest if rest else ""
    return f"{head} ORDER BY {key} {nulls}{tail}"


def on_host(queries: list, environment_type: str) -> list:
    """The queries a test runs on this host: every one, or on Spark (where each is a Spark job of
    the same operators) the first three."""
    return queries[:3] if environment_type == "spark" else queries


def test_set_operations_order_by_position_offset_and_all_against_duckdb(make_env, environment_type,
                                                                       tmp_path):
    queries = on_host(SET_QUERIES, environment_type)
    script = (table(tmp_path, "t", "v int", V_ROWS) + table(tmp_path, "u", "k int", K_ROWS)
              + "".join(q + ";\n" for q, _ in queries))
    result = make_env(2).sql(script)
    db = duck({"t": ("v INTEGER", V_ROWS), "u": ("k INTEGER", K_ROWS)})
    for i, (query, nulls) in enumerate(queries):
        assert result.output(f"rows-{i + 3}") == db.execute(_duckdb_order(query, nulls)).fetchall(), query


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([None, 1, 2, 3]), st.sampled_from(["p", "q"])), max_size=9),
       st.lists(st.tuples(st.sampled_from([None, 1, 2, 3]), st.sampled_from(["p", "q"])), max_size=9),
       st.sampled_from(["UNION", "UNION ALL", "EXCEPT", "EXCEPT ALL", "INTERSECT", "INTERSECT ALL"]))
def test_set_operations_are_duckdbs_multisets(tmp_path_factory, left, right, operation):
    tmp_path = tmp_path_factory.mktemp("sets")
    _, catalog = prepare(table(tmp_path, "t", "n int, s varchar", left)
                         + table(tmp_path, "u", "n int, s varchar", right))
    query = f"SELECT n, s FROM t {operation} SELECT n, s FROM u"
    got = evaluate(query_of(query), catalog.bound({"t": left, "u": right})).rows
    want = duck({"t": ("n INTEGER, s VARCHAR", left), "u": ("n INTEGER, s VARCHAR", right)}).execute(
        query).fetchall()
    assert Counter(got) == Counter(want), query


# ---- 5. NaN groups with NaN (Java's Double.equals, DuckDB)

NAN_ROWS = [(1, 3.0), (2, float("nan")), (3, 1.0), (4, 2.0), (5, 0.5), (6, float("nan")), (7, 1.0)]


def _nan_text(rows) -> list:
    return [(i, "NaN" if x != x else x) for i, x in rows]


def _plain(rows) -> list:
    """Rows with each NaN as the text NaN (NaN is unequal to itself in Python)."""
    return [tuple("NaN" if isinstance(v, float) and v != v else v for v in row) for row in rows]


def test_nan_is_one_group_and_one_distinct_value_as_in_duckdb(make_env, tmp_path):
    whole = table(tmp_path, "t", "id int, x double", _nan_text(NAN_ROWS))
    windowed = table(tmp_path, "w", "id int, x double", _nan_text(NAN_ROWS), window=2, file="t")
    ordered = ["SELECT x, count(*) FROM t GROUP BY x ORDER BY x",
               "SELECT x, count(*) FROM t GROUP BY x HAVING count(*) > 1 ORDER BY x"]
    unordered = ["SELECT DISTINCT x FROM t", "SELECT x FROM t UNION SELECT x FROM t WHERE id > 3",
                 "SELECT x FROM t EXCEPT SELECT x FROM t WHERE id = 2",
                 "SELECT DISTINCT x FROM w", "SELECT x FROM w UNION SELECT x FROM w WHERE id > 3"]
    result = make_env(2).sql(whole + windowed + "".join(q + ";\n" for q in ordered + unordered))
    db = duck({"t": ("id INTEGER, x DOUBLE", NAN_ROWS)})
    for i, query in enumerate(ordered):
        assert _plain(result.output(f"rows-{i + 3}")) == _plain(db.execute(query).fetchall()), query
    for i, query in enumerate(unordered):
        got = result.output(f"rows-{i + 3 + len(ordered)}")
        want = db.execute(query.replace(" w", " t")).fetchall()
        assert Counter(_plain(got)) == Counter(_plain(want)), query


GROUPED_NAN = [  # planned onto gyreflow's own operators (lowering, running), and window functions
    "SELECT x, count(*) FROM t GROUP BY x", "SELECT x, id > 3 AS late, count(*) FROM t GROUP BY x, id > 3",
    "SELECT x + 1 AS y, min(id), max(id) FROM t GROUP BY x + 1",
    "SELECT id, count(*) OVER (PARTITION BY x) FROM t",
    "SELECT id, ROW_NUMBER() OVER (PARTITION BY x ORDER BY id) FROM t"]
RUNNING_NAN = ["SELECT x, count(*), min(id), max(id) FROM w GROUP BY x",
               "SELECT x, id > 3 AS late, count(*) FROM w GROUP BY x, id > 3"]


def _duckdb_nan_windows(rows: list, size: int, query: str) -> dict[int, Counter]:
    """``duckdb_windows`` of table t with each NaN as the text NaN before rows are compared (a
    NaN in a row makes it unequal to itself: an unchanged group would look changed)."""
    db = duck({"t": ("id INTEGER, x DOUBLE", [])})
    before: Counter = Counter()
    changes = {}
    for window in range(1, -(-len(rows) // size) + 1):
        db.executemany("INSERT INTO t VALUES (?, ?)", rows[(window - 1) * size:window * size])
        now = Counter(_plain(db.execute(query).fetchall()))
        if added := now - before:
            changes[window] = added
        before = now
    return changes


def test_nan_is_one_group_of_group_by_and_partition_by_on_every_path_as_in_duckdb(make_env, tmp_path):
    """GROUP BY keys made by the planned operators (a column, columns, an expression), the running
    aggregates over windows of rows, and PARTITION BY: every NaN is one group."""
    whole = table(tmp_path, "t", "id int, x double", _nan_text(NAN_ROWS))
    windowed = table(tmp_path, "w", "id int, x double", _nan_text(NAN_ROWS), window=2, file="t")
    result = make_env(2).sql(whole + windowed + "".join(q + ";\n" for q in GROUPED_NAN + RUNNING_NAN))
    db = duck({"t": ("id INTEGER, x DOUBLE", NAN_ROWS)})
    for i, query in enumerate(GROUPED_NAN):
        got = result.output(f"rows-{i + 3}")
        assert Counter(_plain(got)) == Counter(_plain(db.execute(query).fetchall())), query
    for i, query in enumerate(RUNNING_NAN, len(GROUPED_NAN)):
        got = {w: Counter(_plain(rows)) for w, rows in result.by_window(f"rows-{i + 3}").items() if rows}
        assert got == _duckdb_nan_windows(NAN_ROWS, 2, query.replace(" w ", " t ")), query


# ---- 6. the up-front check evaluates no expression over rows of tables

DIVISIONS = ["SELECT sum(v) / count(v) FROM t", "SELECT count(*) / count(*) FROM t",
             "SELECT 100 / count(*) FROM t", "SELECT 100 / count(*) FROM t WHERE v > 0",
             "SELECT c FROM (SELECT 10 / count(*) AS c FROM t) s"]


def test_dividing_by_an_aggregate_is_checked_and_runs_as_duckdb(make_env, tmp_path):
    rows = [(1, 10), (2, 20), (3, 40)]
    create = table(tmp_path, "t", "id int, v int", rows)
    for query in DIVISIONS:  # not refused: COUNT is 0 only over the check's empty tables
        prepare(create + query + ";\n")
    result = make_env(1).sql(create + "".join(q + ";\n" for q in DIVISIONS))
    db = duck({"t": ("id INTEGER, v INTEGER", rows)})
    for i, query in enumerate(DIVISIONS):
        assert result.output(f"rows-{i + 2}") == db.execute(query.replace(" / ", " // ")).fetchall(), query


@pytest.mark.parametrize(("query", "words"), [
    ("SELECT nosuch FROM t", "no column nosuch"),
    ("SELECT nosuch(count(*)) / count(*) FROM t", "no function NOSUCH"),
    ("SELECT 1 / count(*) FROM t GROUP BY w", "no column w"),
])
def test_what_the_check_refuses_for_the_query_itself_it_still_refuses(tmp_path, query, words):
    error = refusal(table(tmp_path, "t", "id int, v int", [(1, 1)]) + query + ";\n")
    assert words in error.message


# ---- 7. an error inside the query operator names the row, not the window's notification

PATTERNS = [(2, "yyyy"), (1, "MM"), (3, "Q")]  # Q: a pattern letter DATE_FORMAT does not read
BAD_PATTERN = ("DATE_FORMAT: the pattern letter 'Q' is not one gyreflow reads (yyyy, yy, MM, dd, HH, "
               "mm, ss, SSS), in DATE_FORMAT('2020-01-02 03:04:05', p) on row (p='Q')")


def test_an_error_under_order_by_names_the_row_and_expression(make_env, tmp_path):
    script = (table(tmp_path, "t", "id int, p varchar", PATTERNS)
              + "SELECT id, date_format('2020-01-02 03:04:05', p) FROM t ORDER BY id;\n")
    with pytest.raises(Exception) as caught:
        make_env(1).sql(script)
    assert f"statement 2, line 2, window 1: {BAD_PATTERN}" in str(caught.value)


@pytest.mark.processes
def test_the_cli_names_the_row_of_an_error_in_the_query_operator(tmp_path):
    (tmp_path / "q.sql").write_text(
        table(tmp_path, "t", "id int, p varchar", PATTERNS)
        + "SELECT id, date_format('2020-01-02 03:04:05', p) FROM t ORDER BY id;\n"
        + "SELECT id, 10 / (id - 1) FROM t ORDER BY id;\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "gyreflow", "sql", "q.sql", "--env", "local"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.splitlines() == [f"error: q.sql: statement 2, line 2, window 1: {BAD_PATTERN}"]
