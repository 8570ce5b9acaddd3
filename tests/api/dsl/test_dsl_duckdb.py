"""gyreflow's SQL against DuckDB: random small tables written as files and read by the file
connector, random queries from a small grammar (WHERE, GROUP BY with aggregates, DISTINCT, ORDER BY
with LIMIT, an inner JOIN), each compared value by value with DuckDB's rows on the same data."""

from __future__ import annotations

from collections import Counter

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gyreflow.api import Environment

# Strings hold the file connector's separator of these tables (a tab) nowhere: GeaFlow's text
# format splits lines without quoting. They hold no leading or trailing blank (fields are trimmed,
# geaflow.dsl.column.trim) and are never empty or NULL: an empty field of a varchar column is the
# empty string in GeaFlow, so a NULL string cannot be written to a text table.
TEXT = st.text(alphabet="ab,'\"é中Ω😀 ", min_size=1, max_size=4).map(str.strip).filter(bool)
INTS = st.one_of(st.none(), st.integers(-4, 4))
FLOATS = st.one_of(st.none(), st.floats(-1e6, 1e6, allow_nan=False).map(lambda f: f + 0.0))
T_ROW = st.tuples(TEXT, INTS, FLOATS)
U_ROW = st.tuples(TEXT, INTS)

T_COLUMNS = [("id", "bigint"), ("s", "varchar"), ("n", "int"), ("f", "double")]
U_COLUMNS = [("id", "bigint"), ("s", "varchar"), ("m", "int")]


def literal(value) -> str:
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(value)


@st.composite
def conditions(draw, depth=0):
    """A WHERE condition over t: comparisons, IS [NOT] NULL, AND, OR, NOT."""
    if depth < 2 and draw(st.booleans()):
        kind = draw(st.sampled_from(["AND", "OR", "NOT"]))
        if kind == "NOT":
            return f"NOT ({draw(conditions(depth + 1))})"
        return f"({draw(conditions(depth + 1))} {kind} {draw(conditions(depth + 1))})"
    column = draw(st.sampled_from(["n", "f", "s", "id"]))
    if draw(st.integers(0, 5)) == 0:
        return f"{column} IS {draw(st.sampled_from(['NULL', 'NOT NULL']))}"
    op = draw(st.sampled_from(["=", "<>", "<", "<=", ">", ">="]))
    value = {"n": st.integers(-4, 4), "id": st.integers(0, 8), "f": st.floats(-1e6, 1e6, allow_nan=False),
             "s": TEXT}[column]
    return f"{column} {op} {literal(draw(value))}"


AGGREGATES = ["COUNT(*)", "COUNT(n)", "COUNT(f)", "SUM(n)", "SUM(f)", "MIN(n)", "MAX(f)", "MIN(s)",
              "MAX(s)", "AVG(n)", "AVG(f)"]


def duckdb_aggregate(item: str) -> str:
    """GeaFlow's SUM starts from 0: a group without a value sums to 0, not NULL (its documented
    behaviour, kept)."""
    return f"COALESCE({item}, 0)" if item.startswith("SUM") else item


@st.composite
def queries(draw):
    """``(gyreflow's query, DuckDB's query, ordered)``."""
    where = f" WHERE {draw(conditions())}" if draw(st.booleans()) else ""
    kind = draw(st.sampled_from(["select", "group", "global", "distinct", "order", "join"]))
    columns = draw(st.lists(st.sampled_from(["id", "s", "n", "f"]), min_size=1, max_size=3, unique=True))
    listed = ", ".join(columns)
    if kind == "select":
        query = f"SELECT {listed} FROM t{where}"
        return query, query, False
    if kind in ("group", "global"):
        keys = draw(st.lists(st.sampled_from(["s", "n"]), min_size=1, max_size=2, unique=True)) \
            if kind == "group" else []
        aggregates = draw(st.lists(st.sampled_from(AGGREGATES), min_size=1, max_size=3))
        group = f" GROUP BY {', '.join(keys)}" if keys else ""
        return (f"SELECT {', '.join(keys + aggregates)} FROM t{where}{group}",
                f"SELECT {', '.join(keys + [duckdb_aggregate(a) for a in aggregates])} FROM t{where}{group}",
                False)
    if kind == "distinct":
        query = f"SELECT DISTINCT {listed} FROM t{where}"
        return query, query, False
    if kind == "order":
        # every output column is a sort key, so that LIMIT's rows are the same whatever the order of
        # equal rows; NULLs sort last ascending and first descending (Calcite's default collation)
        directions = [draw(st.sampled_from(["ASC", "DESC"])) for _ in columns]
        order = ", ".join(f"{c} {d}" for c, d in zip(columns, directions, strict=True))
        nulls = ", ".join(f"{c} {d} NULLS {'LAST' if d == 'ASC' else 'FIRST'}"
                          for c, d in zip(columns, directions, strict=True))
        limit = draw(st.integers(0, 5))
        return (f"SELECT {listed} FROM t{where} ORDER BY {order} LIMIT {limit}",
                f"SELECT {listed} FROM t{where} ORDER BY {nulls} LIMIT {limit}", True)
    on = draw(st.sampled_from(["t.n = u.m", "t.s = u.s", "t.id = u.id AND t.n < u.m"]))
    query = f"SELECT t.id, t.s, t.f, u.id, u.m FROM t JOIN u ON {on}{_qualified(where)}"
    return query, query, False


def _qualified(where: str) -> str:
    """A WHERE over t's columns, each named t.x (u has columns of the same names)."""
    import re

    return re.sub(r"(?<![\w.'])(id|s|n|f)(?= (?:IS|=|<>|<|>))", r"t.\1", where)


def write_table(path, rows) -> None:
    text = "".join("\t".join("" if v is None else repr(v) if isinstance(v, float) else str(v) for v in row)
                   + "\n" for row in rows)
    path.write_text(text, encoding="utf-8")


def create(name: str, columns, path) -> str:
    listed = ", ".join(f"{c} {t}" for c, t in columns)
    return (f"CREATE TABLE {name} ({listed}) WITH (type='file', geaflow.dsl.file.path='{path}', "
            "geaflow.dsl.column.separator='\\t');\n")


def normal(value):
    """A value as compared: doubles to 12 significant digits (sums add in different orders)."""
    return float(f"{value:.12g}") if isinstance(value, float) else value


def rows_of(rows) -> list[tuple]:
    return [tuple(normal(v) for v in row) for row in rows]


def against_duckdb(tmp_path, t_rows, u_rows, query: str, duck: str, ordered: bool) -> None:
    t_rows = [(i, *r) for i, r in enumerate(t_rows)]
    u_rows = [(i, *r) for i, r in enumerate(u_rows)]
    write_table(tmp_path / "t.txt", t_rows)
    write_table(tmp_path / "u.txt", u_rows)
    script = (create("t", T_COLUMNS, tmp_path / "t.txt") + create("u", U_COLUMNS, tmp_path / "u.txt")
              + query + ";\n")
    got = rows_of(Environment.local(2, progress=False).sql(script).output("rows-3"))
    db = duckdb.connect()
    db.execute("CREATE TABLE t (id BIGINT, s VARCHAR, n INTEGER, f DOUBLE)")
    db.execute("CREATE TABLE u (id BIGINT, s VARCHAR, m INTEGER)")
    if t_rows:
        db.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", t_rows)
    if u_rows:
        db.executemany("INSERT INTO u VALUES (?, ?, ?)", u_rows)
    want = rows_of(db.execute(duck).fetchall())
    if ordered:
        assert got == want, query
    else:
        assert Counter(got) == Counter(want), query


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(T_ROW, max_size=8), st.lists(U_ROW, max_size=5), queries())
def test_random_queries_against_duckdb(tmp_path_factory, t_rows, u_rows, query):
    against_duckdb(tmp_path_factory.mktemp("q"), t_rows, u_rows, *query)


@pytest.mark.parametrize("query", [
    "SELECT n, SUM(f), COUNT(f) FROM t GROUP BY n",
    "SELECT MIN(s), MAX(s), COUNT(*) FROM t WHERE s <> 'a'",
    "SELECT DISTINCT n FROM t WHERE NOT (f > 0)",
    "SELECT t.s, u.m FROM t JOIN u ON t.s = u.s WHERE t.n IS NULL",
])
def test_quotes_commas_unicode_and_nulls_against_duckdb(tmp_path, query):
    t_rows = [("a,b", 1, 0.5), ("it's", None, None), ('"q"', 1, -2.25), ("中Ω😀", None, 3.0),
              ("a,b", 2, None), ("é", 2, 1e-7)]
    u_rows = [("a,b", 1), ("中Ω😀", None), ("it's", 2)]
    duck = query.replace("SUM(f)", "COALESCE(SUM(f), 0)")
    against_duckdb(tmp_path, t_rows, u_rows, query, duck, False)


@pytest.mark.parametrize("where", ["", " WHERE n > 100"])
def test_an_aggregate_without_group_by_gives_one_row_even_over_an_empty_table(tmp_path, where):
    query = f"SELECT COUNT(*), COUNT(f), SUM(n), MIN(s), AVG(f) FROM t{where}"
    against_duckdb(tmp_path, [], [], query, query.replace("SUM(n)", "COALESCE(SUM(n), 0)"), False)


# ---- GROUP BY over a table read in windows: the groups whose row changed, window by window

QUARTERS = st.one_of(st.none(), st.integers(-8, 8).map(lambda n: n / 4))  # sums exact in any order
W_ROW = st.tuples(st.sampled_from(["a", "b,c", "中"]), INTS, QUARTERS)
RUNNING_ITEMS = ["COUNT(*)", "COUNT(f)", "SUM(n)", "SUM(f)", "AVG(f)", "MIN(n)", "MAX(f)", "MIN(s)",
                 "SUM(n) + COUNT(*)"]


@st.composite
def windowed_queries(draw):
    keys = draw(st.lists(st.sampled_from(["s", "n"]), min_size=1, max_size=2, unique=True))
    items = draw(st.lists(st.sampled_from(RUNNING_ITEMS), min_size=1, max_size=3))
    where = f" WHERE {draw(conditions())}" if draw(st.booleans()) else ""
    having = draw(st.sampled_from(["", " HAVING COUNT(*) > 1", " HAVING SUM(n) >= 0"]))
    return f"SELECT {', '.join(keys + items)} FROM t{where} GROUP BY {', '.join(keys)}{having}"


def duckdb_changes(rows, size: int, query: str) -> dict[int, Counter]:
    """The rows each window adds to the query's result over every row so far (window w: the
    first w * size rows), by DuckDB."""
    db = duckdb.connect()
    db.execute("CREATE TABLE t (id BIGINT, s VARCHAR, n INTEGER, f DOUBLE)")
    duck = query.replace("SUM(n)", "COALESCE(SUM(n), 0)").replace("SUM(f)", "COALESCE(SUM(f), 0)")
    before: Counter = Counter()
    changes = {}
    for window, start in enumerate(range(0, len(rows), size), 1):
        db.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", rows[start:start + size])
        now = Counter(db.execute(duck).fetchall())
        if added := now - before:
            changes[window] = Counter(rows_of(added.elements()))
        before = now
    return changes


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(W_ROW, max_size=10), st.integers(1, 4), windowed_queries())
def test_group_by_over_windows_of_rows_against_duckdb(tmp_path_factory, rows, size, query):
    tmp_path = tmp_path_factory.mktemp("w")
    rows = [(i, *r) for i, r in enumerate(rows)]
    write_table(tmp_path / "t.txt", rows)
    script = (create("t", T_COLUMNS, tmp_path / "t.txt").replace(
        ");\n", f", geaflow.dsl.window.size = {size});\n") + query + ";\n")
    got = Environment.local(2, progress=False).sql(script).by_window("rows-2")
    assert {w: Counter(rows_of(r)) for w, r in got.items() if r} == duckdb_changes(rows, size, query), query


@pytest.mark.parametrize(("separator", "types", "lines"), [
    (",", ["bigint", "varchar", "int", "timestamp"],
     ["1,x||y|, 3 ,1700000000123", "", "  ", "2,z,null,2024-01-02 03:04:05.5\r", "3,|w, 15 ,-1500"]),
    # a line ending in | before one starting with |: lines joined by || would split wrongly there
    ("||", ["varchar", "int", "varchar"], ["a|| 1 ||p|", "|q||null||b"]),
])
def test_a_text_table_reads_as_a_loop_over_its_lines_reads_it(tmp_path, separator, types, lines):
    from gyreflow.api.dsl.rows import cast_value, read_text_rows

    (tmp_path / "t.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    want = [tuple(cast_value(f.strip(), t, "UTC") for f, t in zip(line.split(separator), types, strict=True))
            for line in map(str.rstrip, lines) if line]
    assert read_text_rows(str(tmp_path / "t.txt"), types, separator, True, "UTC") == want
