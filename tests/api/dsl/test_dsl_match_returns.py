"""A MATCH block's RETURN computed on the bindings' arrays (``graph_returns``): counts, aggregates,
GROUP BY, DISTINCT and ORDER BY ... LIMIT against DuckDB over the same edge list on random small
graphs, the shapes that take the array path, and NULLs that send it back to rows."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gyreflow.api import Environment
from gyreflow.api.dsl import graph_queries

duckdb = pytest.importorskip("duckdb")

GRAPH = """
CREATE GRAPH g (
  Vertex person (id bigint ID, age int, name varchar, score double),
  Edge knows (src bigint SOURCE ID, dst bigint DESTINATION ID)
) WITH (storeType = 'memory');
"""
# pattern, its named vertices and DuckDB's bindings: GeaFlow merges paths that differ only in
# unnamed elements, so the bindings are the distinct tuples of the named vertices
PATTERNS = [
    ("(a:person)-[:knows]->(b:person)", "SELECT DISTINCT src AS a, dst AS b FROM knows"),
    ("(a:person)<-[:knows]-(b:person)", "SELECT DISTINCT dst AS a, src AS b FROM knows"),
    ("(a:person)-[:knows]->(b:person)-[:knows]->(c:person)",
     "SELECT DISTINCT e.src AS a, e.dst AS b, f.dst AS c FROM knows e JOIN knows f ON e.dst = f.src"),
    ("(a:person)-[:knows]->()-[:knows]->(b:person)",
     "SELECT DISTINCT e.src AS a, f.dst AS b FROM knows e JOIN knows f ON e.dst = f.src"),
]
PROPERTIES = ["age", "name", "score", "id"]


def people_and_edges(seed: int, size: int, edges: int):
    rng = random.Random(seed)
    people = [(i, 18 + rng.randrange(6), f"p{rng.randrange(5)}", rng.randrange(8) / 4) for i in range(size)]
    knows = [(rng.randrange(size), rng.randrange(size)) for _ in range(edges)]
    return people, knows


def run(people, knows, block: str) -> list:
    rows = ", ".join(f"({i}, {'NULL' if age is None else age}, {name!r}, {score})"
                     for i, age, name, score in people)
    edges = ", ".join(f"({s}, {d})" for s, d in knows) or "(0, 0)"
    where = "" if knows else " WHERE s < 0"
    text = GRAPH + (
        f"INSERT INTO g.person SELECT * FROM (VALUES {rows}) AS t(id, age, name, score);\n"
        f"INSERT INTO g.knows SELECT * FROM (VALUES {edges}) AS t(s, d){where};\n"
        f"USE GRAPH g;\nSELECT * FROM ({block});\n")
    return Environment.local(progress=False).sql(text).output("rows-5")


def duck(people, knows, bindings: str, query: str) -> list:
    connection = duckdb.connect()
    connection.execute("CREATE TABLE person (id BIGINT, age INT, name VARCHAR, score DOUBLE)")
    connection.execute("CREATE TABLE knows (src BIGINT, dst BIGINT)")
    if people:
        connection.executemany("INSERT INTO person VALUES (?, ?, ?, ?)", people)
    if knows:
        connection.executemany("INSERT INTO knows VALUES (?, ?)", knows)
    columns = ", ".join(f"{v}.{p} AS {v}_{p}" for v in "abc" for p in PROPERTIES)
    joins = " ".join(f"LEFT JOIN person {v} ON {v}.id = m.{v}" for v in "abc")
    connection.execute(f"CREATE VIEW m0 AS {bindings}")
    names = [c[0] for c in connection.execute("SELECT * FROM m0 LIMIT 0").description]
    for v in "abc":
        if v not in names:
            joins = joins.replace(f"LEFT JOIN person {v} ON {v}.id = m.{v}", f"LEFT JOIN person {v} ON false")
    connection.execute(f"CREATE VIEW b AS SELECT {columns} FROM m0 m {joins}")
    return [tuple(row) for row in connection.execute(query).fetchall()]


@st.composite
def shapes(draw):
    """``(RETURN of the script, DuckDB's query over b, ordered)``, one of the supported shapes."""
    pattern = draw(st.sampled_from(range(len(PATTERNS))))
    var = draw(st.sampled_from("ab"))
    other = "b" if var == "a" else "a"
    prop = draw(st.sampled_from(PROPERTIES))
    number = draw(st.sampled_from(["age", "score", "id"]))
    agg = draw(st.sampled_from(["sum", "min", "max", "avg"]))
    kind = draw(st.sampled_from(range(6)))
    limit = draw(st.integers(1, 6))
    on = prop if agg in ("min", "max") else number
    ours, theirs = {
        0: ("count(*) AS n", "SELECT count(*) FROM b"),
        1: (f"count(DISTINCT {var}.{prop}) AS n", f"SELECT count(DISTINCT {var}_{prop}) FROM b"),
        2: (f"{agg}({var}.{on}) AS m",  # GeaFlow's SUM of nothing is 0
            f"SELECT {f'coalesce(sum({var}_{on}), 0)' if agg == 'sum' else f'{agg}({var}_{on})'} FROM b"),
        3: (f"{var}.{prop} AS k, count(*) AS n, {agg}({other}.{on}) AS m GROUP BY {var}.{prop}",
            f"SELECT {var}_{prop}, count(*), {agg}({other}_{on}) FROM b GROUP BY {var}_{prop}"),
        4: (f"DISTINCT {var}.{prop} AS u, {other}.{number} AS w",
            f"SELECT DISTINCT {var}_{prop}, {other}_{number} FROM b"),
        5: (f"DISTINCT {var}.{prop} AS u, {other}.{number} AS w ORDER BY u DESC, w LIMIT {limit}",
            f"SELECT DISTINCT {var}_{prop} AS u, {other}_{number} AS w FROM b "
            f"ORDER BY u DESC, w LIMIT {limit}"),
    }[kind]
    return pattern, ours, theirs, kind == 5


def _close(rows: list) -> Counter:
    return Counter(tuple(round(v, 9) if isinstance(v, float) else v for v in row) for row in rows)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=shapes(), seed=st.integers(0, 10_000), size=st.integers(1, 9), edges=st.integers(0, 25))
def test_returns_on_arrays_equal_duckdbs(shape, seed, size, edges):
    pattern, ours, theirs, ordered = shape
    people, knows = people_and_edges(seed, size, edges)
    taken = []
    computed = graph_queries.array_return

    def spy(*args):
        found = computed(*args)
        taken.append(found is not None)
        return found

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(graph_queries, "array_return", spy)
        got = run(people, knows, f"MATCH {PATTERNS[pattern][0]} RETURN {ours}")
    want = duck(people, knows, PATTERNS[pattern][1], theirs)
    assert taken and all(taken)  # the RETURN ran on the arrays (each time the block is read)
    if ordered:
        assert got == want
    else:
        assert _close(got) == _close(want)


# each RETURN shape of docs/dsl.md that runs on the arrays
ON_ARRAYS = [
    "count(*)", "count(DISTINCT b.age)", "count(DISTINCT a.age, b.name)", "sum(a.age)", "avg(b.score)",
    "min(a.name)", "max(b.score)", "a.age AS k, count(*) AS n GROUP BY a.age",
    "a.id AS k, sum(b.age) AS s, max(b.name) AS m GROUP BY a.id",
    "a, count(*) AS n GROUP BY a", "a.id, b.id", "DISTINCT a.name, b.age",
    "DISTINCT a.id AS x ORDER BY x DESC LIMIT 3",
    "a.name AS k, count(*) AS n GROUP BY a.name ORDER BY n DESC, k LIMIT 2",
    "a.id AS x, b.id AS y ORDER BY b.age, 1 LIMIT 4 OFFSET 1",
]
ON_ROWS = [
    "count(*) + 1 AS n", "a.age + 1 AS k", "count(*) AS n GROUP BY a.age HAVING count(*) > 1",
    "a ORDER BY a LIMIT 2", "percentile(a.age, 50) AS p", "sum(DISTINCT a.age) AS s",
]


@pytest.mark.parametrize("items", ON_ARRAYS + ON_ROWS)
def test_the_shapes_that_run_on_arrays_and_their_rows_as_the_row_path_makes_them(monkeypatch, items):
    """Each shape of ON_ARRAYS takes the array path, the others the rows; either way the output
    (its order too) is what the row path makes."""
    people, knows = people_and_edges(3, 12, 40)
    block = f"MATCH (a:person)-[:knows]->(b:person) RETURN {items}"
    taken = []
    computed = graph_queries.array_return

    def spy(*args):
        found = computed(*args)
        taken.append(found is not None)
        return found

    monkeypatch.setattr(graph_queries, "array_return", spy)
    got = run(people, knows, block)
    assert any(taken) == (items in ON_ARRAYS)
    monkeypatch.setattr(graph_queries, "_returned_on_arrays", lambda *args: None)
    assert got == run(people, knows, block)


def test_a_null_property_sends_the_return_back_to_rows():
    people, knows = people_and_edges(4, 8, 20)
    people[knows[0][0]] = (knows[0][0], None, "p1", 1.0)
    block = "MATCH (a:person)-[:knows]->(b:person) RETURN count(a.age) AS n, sum(a.age) AS s"
    got = run(people, knows, block)
    ages = {i: age for i, age, _, _ in people}
    pairs = set(knows)
    values = [ages[a] for a, _ in pairs if ages[a] is not None]
    assert got == [(len(values), sum(values))]
