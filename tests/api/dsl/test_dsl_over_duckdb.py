"""Window functions (ROW_NUMBER, RANK, DENSE_RANK, aggregates OVER frames of rows), aggregates with
FILTER (WHERE ...), INTERVAL arithmetic and DATE_FORMAT, REGEXP_EXTRACT, SPLIT_INDEX against DuckDB on
random small tables."""

from __future__ import annotations

import datetime as dt
from collections import Counter

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_dsl_duckdb import INTS, QUARTERS, T_COLUMNS, create, rows_of, write_table

from gyreflow.api import Environment

ROW = st.tuples(st.sampled_from(["a", "b", "中"]), INTS, QUARTERS)
PARTITIONS = ["", "PARTITION BY s ", "PARTITION BY s, n "]
FRAMES = ["", " ROWS BETWEEN 1 PRECEDING AND CURRENT ROW", " ROWS BETWEEN 2 PRECEDING AND 1 FOLLOWING",
          " ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW",
          " ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING"]


def nulls(order: str) -> str:
    """An ORDER BY for DuckDB with Calcite's NULL order (last ascending, first descending)."""
    parts = []
    for part in order.split(", "):
        parts.append(part + (" NULLS FIRST" if part.endswith("DESC") else " NULLS LAST"))
    return ", ".join(parts)


@st.composite
def over_queries(draw):
    """``(gyreflow's query, DuckDB's)`` with one window function over t."""
    partition = draw(st.sampled_from(PARTITIONS))
    direction = draw(st.sampled_from(["", " DESC"]))
    kind = draw(st.sampled_from(["row_number", "rank", "aggregate", "top"]))
    if kind == "row_number":  # ties broken by id: one answer
        order = f"n{direction}, id"
        item = "ROW_NUMBER() OVER ({p}ORDER BY {o})"
    elif kind == "rank":
        order = f"n{direction}"
        item = draw(st.sampled_from(["RANK", "DENSE_RANK"])) + "() OVER ({p}ORDER BY {o})"
    elif kind == "aggregate":
        function = draw(st.sampled_from(["COUNT(*)", "COUNT(f)", "SUM(n)", "AVG(f)", "MIN(n)", "MAX(f)"]))
        frame = draw(st.sampled_from(FRAMES))
        order = draw(st.sampled_from(["id", f"n{direction}"])) if frame == "" else "id"
        item = function + " OVER ({p}ORDER BY {o}" + frame + ")"
    else:  # the first rows of each partition (Nexmark q18, q19)
        order = f"f{direction}, id"
        top = draw(st.integers(1, 3))
        inner = "SELECT id, s, n, ROW_NUMBER() OVER ({p}ORDER BY {o}) AS rn FROM t"
        query = f"SELECT id, s, rn FROM ({inner}) AS x WHERE rn <= {top}"
        return (query.format(p=partition, o=order), query.format(p=partition, o=nulls(order)))
    query = "SELECT id, s, n, " + item + " FROM t"
    duck = f"SELECT id, s, n, COALESCE({item}, 0) FROM t" if item.startswith("SUM") else query
    return query.format(p=partition, o=order), duck.format(p=partition, o=nulls(order))


def run_both(tmp_path, rows, query: str, duck: str):
    rows = [(i, *r) for i, r in enumerate(rows)]
    write_table(tmp_path / "t.txt", rows)
    script = create("t", T_COLUMNS, tmp_path / "t.txt") + query + ";\n"
    got = rows_of(Environment.local(progress=False).sql(script).output("rows-2"))
    db = duckdb.connect()
    db.execute("CREATE TABLE t (id BIGINT, s VARCHAR, n INTEGER, f DOUBLE)")
    if rows:
        db.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", rows)
    return Counter(got), Counter(rows_of(db.execute(duck).fetchall()))


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(ROW, max_size=10), over_queries())
def test_window_functions_against_duckdb(tmp_path_factory, rows, query):
    got, want = run_both(tmp_path_factory.mktemp("o"), rows, *query)
    assert got == want, query


FILTERED = ["COUNT(*) FILTER (WHERE n > 0)", "COUNT(DISTINCT n) FILTER (WHERE f >= 0)",
            "SUM(f) FILTER (WHERE n < 2)", "MAX(n) FILTER (WHERE s <> 'a')",
            "AVG(f) FILTER (WHERE n IS NULL)", "COUNT(*)"]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(ROW, max_size=10), st.lists(st.sampled_from(FILTERED), min_size=1, max_size=3),
       st.sampled_from(["s", "n", "s, n"]))
def test_aggregates_with_filter_against_duckdb(tmp_path_factory, rows, items, keys):
    query = f"SELECT {keys}, {', '.join(items)} FROM t GROUP BY {keys}"
    duck = query.replace("SUM(f) FILTER (WHERE n < 2)", "COALESCE(SUM(f) FILTER (WHERE n < 2), 0)")
    got, want = run_both(tmp_path_factory.mktemp("f"), rows, query, duck)
    assert got == want, query


TEXTS = ["https://www.nexmark.com/abc/de/f/item.htm?query=1&channel_id=1234", "channel_id=7&x=1",
         "a//b/", "", "/", "no match here", "x&channel_id=&y"]


@pytest.mark.parametrize(("ours", "theirs"), [
    ("REGEXP_EXTRACT(u, '(&|^)channel_id=([^&]*)', 2)",
     "CASE WHEN regexp_matches(u, '(&|^)channel_id=([^&]*)') "
     "THEN regexp_extract(u, '(&|^)channel_id=([^&]*)', 2) END"),
    ("REGEXP_EXTRACT(u, '[a-z]+')",
     "CASE WHEN regexp_matches(u, '[a-z]+') THEN regexp_extract(u, '[a-z]+') END"),
    # SPLIT_INDEX counts from 0 and is NULL beyond the last piece (and for ''); split_part from 1, ''
    *[(f"SPLIT_INDEX(u, '/', {i})", f"CASE WHEN u <> '' AND len(string_split(u, '/')) > {i} "
       f"THEN split_part(u, '/', {i + 1}) END") for i in (0, 1, 3, 4, 5)],
])
def test_text_functions_against_duckdb(tmp_path, ours, theirs):
    (tmp_path / "u.txt").write_text("".join(f"{i}\t{t}\n" for i, t in enumerate(TEXTS)), encoding="utf-8")
    script = (f"CREATE TABLE v (id bigint, u varchar) WITH (type='file', geaflow.dsl.file.path="
              f"'{tmp_path / 'u.txt'}', geaflow.dsl.column.separator='\\t');\nSELECT id, {ours} FROM v;\n")
    got = Environment.local(progress=False).sql(script).output("rows-2")
    db = duckdb.connect()
    db.execute("CREATE TABLE v (id BIGINT, u VARCHAR)")
    db.executemany("INSERT INTO v VALUES (?, ?)", list(enumerate(TEXTS)))
    assert sorted(got) == sorted(db.execute(f"SELECT id, {theirs} FROM v").fetchall())


MOMENTS = st.datetimes(dt.datetime(1990, 1, 1), dt.datetime(2040, 1, 1)).map(
    lambda m: m.replace(microsecond=m.microsecond // 1000 * 1000))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(MOMENTS, min_size=1, max_size=6), st.integers(0, 100_000))
def test_date_format_and_interval_arithmetic_against_duckdb(tmp_path_factory, moments, seconds):
    tmp_path = tmp_path_factory.mktemp("d")
    millis = [round((m - dt.datetime(1970, 1, 1)).total_seconds() * 1000) for m in moments]
    (tmp_path / "d.txt").write_text("".join(f"{i},{ms}\n" for i, ms in enumerate(millis)), encoding="utf-8")
    query = (f"SELECT id, DATE_FORMAT(ts, 'yyyy-MM-dd'), DATE_FORMAT(ts, 'HH:mm'), "
             f"DATE_FORMAT(ts - INTERVAL '{seconds}' SECOND, 'yyyy-MM-dd HH:mm:ss.SSS'), "
             f"ts + INTERVAL '{seconds}' SECOND > ts FROM d WHERE ts BETWEEN ts - INTERVAL '1' MINUTE AND ts")
    script = (f"SET gyreflow.dsl.time.zone = 'UTC';\nCREATE TABLE d (id bigint, ts timestamp) WITH "
              f"(type='file', geaflow.dsl.file.path='{tmp_path / 'd.txt'}');\n{query};\n")
    got = Environment.local(progress=False).sql(script).output("rows-3")
    db = duckdb.connect()
    db.execute("CREATE TABLE d (id BIGINT, ts TIMESTAMP)")
    db.executemany("INSERT INTO d VALUES (?, make_timestamp(? * 1000))", list(enumerate(millis)))
    want = db.execute(f"SELECT id, strftime(ts, '%Y-%m-%d'), strftime(ts, '%H:%M'), "
                      f"strftime(ts - INTERVAL '{seconds}' SECOND, '%Y-%m-%d %H:%M:%S.%g'), "
                      f"ts + INTERVAL '{seconds}' SECOND > ts FROM d").fetchall()
    assert sorted(got) == sorted(want)
