"""gyreflow's SQL (GeaFlow's Hybrid DSL, its table side): results against DuckDB and plain loops, GeaFlow's
row format against Java's printed values, and refusals with their statement, line and column."""

from __future__ import annotations

import math
import subprocess
import sys
from collections import Counter

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gyreflow.api import Environment
from gyreflow.api.dsl import DslError, prepare
from gyreflow.api.dsl.rows import java_double, java_string

PEOPLE = [(1, "ann", 30, 1.5), (2, "bob", 25, 2.25), (3, "cy", 30, None), (4, "dee", 41, 0.5),
          (5, "ed", 25, 4.0), (6, "flo", 30, 1.0)]


def write_people(tmp_path, rows=PEOPLE):
    text = "".join(",".join("" if v is None else str(v) for v in row) + "\n" for row in rows)
    (tmp_path / "people.txt").write_text(text, encoding="utf-8")
    return ("CREATE TABLE people (id bigint, name varchar, age int, score double) "
            f"WITH (type='file', geaflow.dsl.file.path='{tmp_path / 'people.txt'}');\n")


def select(tmp_path, query: str, rows=PEOPLE):
    env = Environment.local(progress=False)
    result = env.sql(write_people(tmp_path, rows) + query, root=str(tmp_path))
    return result.output("rows-2")


@pytest.mark.parametrize(("value", "java"), [
    (1.0, "1.0"), (0.5, "0.5"), (18.8, "18.8"), (0.816496580927726, "0.816496580927726"),
    (1e7, "1.0E7"), (12345678.9, "1.23456789E7"), (0.001, "0.001"), (0.0001, "1.0E-4"),
    (-2.5e-5, "-2.5E-5"), (9999999.0, "9999999.0"), (float("nan"), "NaN"), (-math.inf, "-Infinity"),
])
def test_doubles_print_as_javas_double_to_string(value, java):
    assert java_double(value) == java


def test_values_print_as_java_string_value_of():
    import datetime as dt

    assert [java_string(v) for v in (None, True, False, 3, "x")] == ["null", "true", "false", "3", "x"]
    assert java_string(dt.datetime(2017, 3, 15, 19, 18, 13, 883000)) == "2017-03-15 19:18:13.883"
    assert java_string(dt.datetime(2017, 3, 15, 19, 18, 13)) == "2017-03-15 19:18:13.0"
    assert java_string(dt.date(2023, 10, 1)) == "2023-10-01"


def duck(query: str, rows=PEOPLE) -> list[tuple]:
    """``query``'s rows by DuckDB over ``rows`` as the table people."""
    db = duckdb.connect()
    db.execute("CREATE TABLE people (id BIGINT, name VARCHAR, age INTEGER, score DOUBLE)")
    db.executemany("INSERT INTO people VALUES (?, ?, ?, ?)", rows)
    return db.execute(query).fetchall()


def test_group_by_having_order_against_duckdb(tmp_path):
    query = ("SELECT age, count(*) AS n, sum(id) AS s, avg(id) AS a, max(name) FROM people "
             "WHERE id > 1 GROUP BY age HAVING count(*) > 1 ORDER BY s DESC")
    assert select(tmp_path, query + ";") == duck(query)


def test_nulls_in_aggregates_and_filters_against_duckdb(tmp_path):
    query = "SELECT count(score), count(1), sum(score) FROM people WHERE score IS NOT NULL OR name = 'cy'"
    assert select(tmp_path, query + ";") == duck(query)


@pytest.mark.parametrize(("query", "ordered"), [
    ("SELECT a.name, b.name FROM people a JOIN people b ON a.age = b.age AND a.id < b.id", False),
    ("SELECT age FROM people WHERE id < 3 UNION SELECT age FROM people", False),
    ("SELECT name FROM (SELECT name, age FROM people WHERE age = 30) t WHERE t.name <> 'cy' "
     "ORDER BY name LIMIT 1", True),
])
def test_join_union_and_subquery_against_duckdb(tmp_path, query, ordered):
    got, want = select(tmp_path, query + ";"), duck(query)
    assert (got if ordered else Counter(got)) == (want if ordered else Counter(want))


@settings(max_examples=15, deadline=None)
@given(st.lists(st.tuples(st.integers(-5, 5), st.integers(-3, 3)), max_size=12))
def test_java_integer_division_and_remainder_per_group(tmp_path_factory, pairs):
    tmp_path = tmp_path_factory.mktemp("div")
    rows = [(i, f"n{i}", a, float(b)) for i, (a, b) in enumerate(pairs)]
    got = select(tmp_path, "SELECT id, age / 2, age % 3, id * 7 / 3 FROM people;", rows)
    java_div = lambda a, b: int(a / b)  # noqa: E731 - Java's int division truncates towards zero
    want = [(i, java_div(a, 2), a - 3 * java_div(a, 3), java_div(i * 7, 3)) for i, _, a, _ in rows]
    assert sorted(got) == sorted(want)


def test_insert_writes_geaflows_row_format_per_window(tmp_path):
    script = write_people(tmp_path) + (
        f"CREATE TABLE out (name varchar, score double) WITH (type='file', "
        f"geaflow.dsl.file.path='{tmp_path / 'out'}');\n"
        "SET geaflow.dsl.window.size = 4;\n"
        "INSERT INTO out SELECT name, score FROM people;\n")
    Environment.local(progress=False).sql(script)
    files = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert files == ["partition-000001", "partition-000002"]  # 6 rows, 4 a window
    lines = [line for f in files for line in (tmp_path / "out" / f).read_text().splitlines()]
    assert lines == [f"{n},{'null' if s is None else java_double(s)}" for _, n, _, s in PEOPLE]


def test_an_aggregate_over_windows_emits_the_groups_that_changed(tmp_path):
    script = write_people(tmp_path) + (
        f"CREATE TABLE out (age int, n bigint) WITH (type='file', geaflow.dsl.file.path='{tmp_path / 'o'}',"
        " geaflow.dsl.window.size = 3);\n"
        "INSERT INTO out SELECT age, count(id) FROM people GROUP BY age;\n")
    script = script.replace("geaflow.dsl.file.path='" + str(tmp_path / "people.txt") + "'",
                            "geaflow.dsl.file.path='" + str(tmp_path / "people.txt") + "', "
                            "geaflow.dsl.window.size = '3'")
    Environment.local(progress=False).sql(script)
    first = (tmp_path / "o" / "partition-000001").read_text().split()
    second = (tmp_path / "o" / "partition-000002").read_text().split()
    seen = Counter()
    for _, _, age, _ in PEOPLE[:3]:
        seen[age] += 1
    assert sorted(first) == sorted(f"{a},{n}" for a, n in seen.items())
    before = dict(seen)
    for _, _, age, _ in PEOPLE[3:]:
        seen[age] += 1
    assert sorted(second) == sorted(f"{a},{n}" for a, n in seen.items() if before.get(a) != n)


def test_statements_outside_the_language_are_refused_before_anything_runs(tmp_path):
    with pytest.raises(DslError) as caught:
        prepare("SET a = 1;\n\n  MERGE INTO t USING s ON t.id = s.id;")
    assert (caught.value.statement, caught.value.line, caught.value.column) == (2, 3, 3)
    with pytest.raises(DslError, match="type 'kafka' is not a connector"):
        prepare("CREATE TABLE t (a int) WITH (type='kafka');")


@pytest.mark.processes
def test_the_command_line_reports_a_wrong_statement_in_one_line_and_writes_nothing(tmp_path):
    script = write_people(tmp_path) + (
        "CREATE TABLE out (age int) WITH (type='file', geaflow.dsl.file.path='out');\n"
        "INSERT INTO out SELECT age FROM people;\n"
        "INSERT INTO out SELECT nope FROM people;\n")
    (tmp_path / "bad.sql").write_text(script, encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "gyreflow", "sql", "bad.sql"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "error: bad.sql: statement 4, line 4, column 24: no column nope (columns: id, name, age, score)"]
    assert not (tmp_path / "out").exists()
    good = script.rsplit("INSERT", 1)[0] + "SELECT name FROM people WHERE age = 25 ORDER BY id;\n"
    (tmp_path / "good.sql").write_text(good, encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "gyreflow", "sql", "good.sql"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout, done.stderr) == (0, "bob\ned\n", "")
    assert sorted((tmp_path / "out" / "partition-000001").read_text().split()) == sorted(
        str(r[2]) for r in PEOPLE)


GRAPH = """
CREATE GRAPH g (
  Vertex person (id bigint ID, name varchar, age int),
  Edge knows (src bigint SOURCE ID, dst bigint DESTINATION ID, weight double)
) WITH (storeType = 'memory');
"""


def test_match_over_a_graph_loaded_by_insert_against_networkx(tmp_path):
    import networkx as nx

    people = [(i, f"p{i}", 20 + i % 7) for i in range(12)]
    knows = [(i, (i * 5 + 3) % 12, round(0.1 * (i % 4), 1)) for i in range(12)] + [(0, 5, 0.9), (5, 0, 0.3)]
    rows = ", ".join(f"({i}, '{n}', {a})" for i, n, a in people)
    edges = ", ".join(f"({s}, {d}, {w})" for s, d, w in knows)
    script = GRAPH + (
        f"INSERT INTO g.person SELECT * FROM (VALUES {rows}) AS t(id, name, age);\n"
        f"INSERT INTO g.knows SELECT * FROM (VALUES {edges}) AS t(s, d, w);\n"
        "USE GRAPH g;\n"
        "SELECT a_id, c_id, w FROM (MATCH (a:person WHERE a.age > 22)-[e:knows]->(b)-[f:knows]->(c:person) "
        "WHERE a.id <> c.id RETURN a.id AS a_id, c.id AS c_id, e.weight + f.weight AS w);\n"
        "SELECT b_id, count(a_id) FROM (MATCH (a)<-[e]-(b:person WHERE id < 6) "
        "RETURN b.id AS b_id, a.id AS a_id) GROUP BY b_id;\n")
    result = Environment.local(progress=False).sql(script)
    graph = nx.MultiDiGraph()
    graph.add_nodes_from((i, {"age": a}) for i, _, a in people)
    graph.add_edges_from((s, d, {"weight": w}) for s, d, w in knows)
    want = Counter()
    for a in graph:
        if graph.nodes[a]["age"] <= 22:
            continue
        for _, b, e in graph.out_edges(a, data=True):
            for _, c, f in graph.out_edges(b, data=True):
                if a != c:
                    want[(a, c, e["weight"] + f["weight"])] += 1
    assert Counter(result.output("rows-5")) == want
    # (a)<-[e]-(b): b's out-edges, per b with id < 6
    assert sorted(result.output("rows-6")) == sorted(
        (b, graph.out_degree(b)) for b in graph if b < 6 and graph.out_degree(b))


def test_a_request_table_runs_the_match_once_per_row(tmp_path):
    knows = [(1, 2, 0.5), (1, 4, 1.0), (4, 2, 0.2), (2, 4, 0.7), (4, 1, 0.9)]
    requests = [(1, 0.4), (4, 0.5), (1, 0.6)]
    script = GRAPH + (
        "INSERT INTO g.person SELECT * FROM (VALUES (1, 'a', 20), (2, 'b', 30), (4, 'c', 40)) "
        "AS t(i, n, a);\n"
        f"INSERT INTO g.knows SELECT * FROM (VALUES {', '.join(map(str, knows))}) AS t(s, d, w);\n"
        "USE GRAPH g;\n"
        "SELECT a_id, b_id, w FROM (WITH p AS (SELECT * FROM (VALUES "
        f"{', '.join(map(str, requests))}) AS t(id, least)) "
        "MATCH (a:person WHERE a.id = p.id)-[e WHERE weight > p.least]->(b) "
        "RETURN a.id AS a_id, b.id AS b_id, e.weight AS w);\n")
    got = Environment.local(progress=False).sql(script).output("rows-5")
    assert Counter(got) == Counter((s, d, w) for i, least in requests for s, d, w in knows
                                   if s == i and w > least)


def test_call_algorithms_against_networkx(tmp_path):
    import networkx as nx

    edges = [(1, 2), (1, 3), (2, 3), (3, 4), (5, 6), (6, 7), (7, 5), (4, 1), (8, 8)]
    ids = sorted({v for e in edges for v in e} | {9})
    script = GRAPH + (
        f"INSERT INTO g.person SELECT * FROM (VALUES {', '.join(f'({i}, null, 1)' for i in ids)}) "
        "AS t(i, n, a);\n"
        f"INSERT INTO g.knows SELECT * FROM (VALUES {', '.join(f'({s}, {d}, 1.0)' for s, d in edges)}) "
        "AS t(s, d, w);\nUSE GRAPH g;\n"
        "CALL sssp(1) YIELD (vid, distance) RETURN vid, distance;\n"
        "CALL wcc() YIELD (vid, component) RETURN vid, component;\n"
        "CALL kcore(2) YIELD (vid, k) RETURN vid, k;\n"
        "CALL jaccard_similarity(1, 3) YIELD (a, b, j) RETURN a, b, j;\n")
    result = Environment.local(progress=False).sql(script)
    graph = nx.DiGraph(edges)
    graph.add_nodes_from(ids)
    assert sorted(result.output("rows-5")) == sorted(nx.single_source_shortest_path_length(graph, 1).items())
    want = {v: min(c) for c in nx.weakly_connected_components(graph) for v in c}
    assert sorted(result.output("rows-6")) == sorted(want.items())
    plain = nx.Graph(graph)
    plain.remove_edges_from(nx.selfloop_edges(plain))
    core = nx.k_core(plain, 2)
    assert sorted(result.output("rows-7")) == sorted((v, core.degree(v) if v in core else 0) for v in ids)
    a, b = set(plain[1]), set(plain[3])
    assert result.output("rows-8") == [(1, 3, len(a & b) / len(a | b))]


@pytest.mark.processes
def test_a_query_that_fails_while_it_runs_names_its_statement_and_line(tmp_path):
    script = write_people(tmp_path) + "\nSELECT id / (age - age) FROM people;\n"
    (tmp_path / "div.sql").write_text(script, encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "gyreflow", "sql", "div.sql"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.splitlines() == [
        "error: div.sql: statement 2, line 3, window 1: division by zero, in id / (age - age) "
        "on row (id=1, age=30)"]


@pytest.mark.processes
def test_a_one_table_query_that_fails_in_a_later_window_names_that_window(tmp_path):
    """A filter's error (an operator of its own, not the query operator) names its window too."""
    script = write_people(tmp_path).replace(");\n", ", geaflow.dsl.window.size = 1);\n")
    script += "SELECT id FROM people WHERE 10 / (id - 2) > 0;\n"
    (tmp_path / "win.sql").write_text(script, encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "gyreflow", "sql", "win.sql"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.splitlines() == [
        "error: win.sql: statement 2, line 2, window 2: division by zero, in 10 / (id - 2) on row (id=2)"]


@pytest.mark.processes
def test_a_row_that_does_not_fit_its_columns_is_one_error_line_and_exit_5(tmp_path):
    (tmp_path / "t.txt").write_text("1,a\n2\n", encoding="utf-8")
    (tmp_path / "bad.sql").write_text(
        "CREATE TABLE t (id bigint, s varchar) WITH (type='file', geaflow.dsl.file.path='t.txt');\n"
        "SELECT s, count(id) FROM t GROUP BY s;\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "gyreflow", "sql", "bad.sql"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (5, "")
    assert done.stderr.splitlines() == ["error: t.txt, line 2: 1 fields for 2 columns"]
