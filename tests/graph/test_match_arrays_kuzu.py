"""MATCH as array joins against kuzu (an embedded Cypher database) on one random directed graph with
self-loops, parallel edges and cycles. kuzu matches relationships as walks, gyreflow as trails (no
edge twice in a match): the kuzu queries ask for distinct edges themselves (``id(e1) <> id(e2)``,
``is_trail``). An undirected arrow follows a self-loop once in gyreflow, twice in kuzu: the random
graphs of such patterns have none."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_match_arrays import run_matches

from gyreflow.api import Environment

kuzu = pytest.importorskip("kuzu")

SIZE, EDGE_COUNT = 60, 240


def random_graph(seed: int = 3):
    rng = random.Random(seed)
    vertices = [(i, {"x": rng.randrange(5)}) for i in range(SIZE)]
    edges = [(rng.randrange(SIZE), rng.randrange(SIZE), {}) for _ in range(EDGE_COUNT)]
    edges += [(7, 7, {}), (8, 9, {}), (8, 9, {}), (9, 8, {})]  # a self-loop, parallel edges, a cycle
    return vertices, edges


# (gyreflow query, the same in kuzu)
QUERIES = [
    ("MATCH (a)-[]->(b)-[]->(c) RETURN count(*)",
     "MATCH (a)-[e1]->(b)-[e2]->(c) WHERE id(e1) <> id(e2) RETURN count(*)"),
    ("MATCH (a)-[]->(b)-[]->(c) WHERE a.x < 2 AND c.x >= 3 RETURN count(*)",
     "MATCH (a)-[e1]->(b)-[e2]->(c) WHERE id(e1) <> id(e2) AND a.x < 2 AND c.x >= 3 "
     "RETURN count(*)"),
    ("MATCH (a)-[]->(b)-[]->(c)-[]->(d) RETURN DISTINCT a.id, d.id",
     "MATCH (a)-[e1]->(b)-[e2]->(c)-[e3]->(d) WHERE id(e1) <> id(e2) AND id(e1) <> id(e3) "
     "AND id(e2) <> id(e3) RETURN DISTINCT a.id, d.id"),
    ("MATCH (a)-[*1..3]->(b) RETURN count(*)",
     "MATCH p = (a)-[*1..3]->(b) WHERE is_trail(p) RETURN count(*)"),
    ("MATCH (a)<-[]-(b) WHERE b.x = 4 RETURN a.x, count(*)",
     "MATCH (a)<-[e]-(b) WHERE b.x = 4 RETURN a.x, count(*)"),
    ("MATCH (a)-[]-(b) WHERE a.x = 0 RETURN b.id",
     "MATCH (a)-[e]-(b) WHERE a.x = 0 RETURN b.id"),
]


@pytest.fixture(scope="module")
def graph_and_kuzu():
    vertices, edges = random_graph()
    connection = kuzu.Connection(kuzu.Database(":memory:", buffer_pool_size=2**27))
    connection.execute("CREATE NODE TABLE V(id INT64, x INT64, PRIMARY KEY (id))")
    connection.execute("CREATE REL TABLE E(FROM V TO V)")
    for vertex, value in vertices:
        connection.execute(f"CREATE (:V {{id: {vertex}, x: {value['x']}}})")
    for src, dst, _ in edges:
        connection.execute(f"MATCH (a:V), (b:V) WHERE a.id = {src} AND b.id = {dst} "
                           "CREATE (a)-[:E]->(b)")
    return vertices, edges, connection


def kuzu_rows(connection, text):
    result = connection.execute(text)
    rows = []
    while result.has_next():
        rows.append(tuple(result.get_next()))
    return rows


def test_array_joins_equal_kuzu(graph_and_kuzu):
    vertices, edges, connection = graph_and_kuzu
    # ``a.id``: the vertex values carry their id too, as kuzu's property
    with_ids = [(vertex, {**value, "id": vertex}) for vertex, value in vertices]
    got, runs = run_matches(Environment.local(progress=False),
                            [(ours, {}) for ours, _ in QUERIES], with_ids, edges, parallelism=2)
    assert all(run.plan is not None for run in runs)
    for (ours, theirs), rows in zip(QUERIES, got, strict=True):
        want = kuzu_rows(connection, theirs)
        assert len(want) > 0 and want != [(0,)], theirs
        assert Counter(rows) == Counter(want), ours


# ---- random small graphs and fixed-length patterns ------------------------------------------


@st.composite
def small_cases(draw):
    size = draw(st.integers(1, 7))
    vertices = [(i, {"x": draw(st.integers(0, 2))}) for i in range(size)]
    edges = [(draw(st.integers(0, size - 1)), draw(st.integers(0, size - 1)), {})
             for _ in range(draw(st.integers(0, 14)))]
    hops = draw(st.integers(1, 3))
    arrows = [draw(st.sampled_from(["out", "in", "both"])) for _ in range(hops)]
    filters = [draw(st.sampled_from([None, 0, 1])) for _ in range(hops + 1)]
    return vertices, edges, arrows, filters, draw(st.integers(1, 3))


def fixed_path(arrows, filters, named_edges: bool):
    text = ""
    for k, arrow in enumerate(arrows):
        body = f"[e{k}]" if named_edges else "[]"
        text += f"(n{k})" + {"out": f"-{body}->", "in": f"<-{body}-", "both": f"-{body}-"}[arrow]
    text += f"(n{len(arrows)})"
    conditions = [f"n{k}.x = {value}" for k, value in enumerate(filters) if value is not None]
    return text, conditions


def small_database():
    """A new small in-memory kuzu database with the schema; the caller closes it. One database
    for every example, emptied by ``DETACH DELETE`` each time, crashed kuzu 0.11 (a segmentation
    fault in a variable-length MATCH after some hundred rounds of deletes and inserts), so each
    example has its own."""
    database = kuzu.Database(":memory:", buffer_pool_size=2**26)
    connection = kuzu.Connection(database)
    connection.execute("CREATE NODE TABLE V(id INT64, x INT64, PRIMARY KEY (id))")
    connection.execute("CREATE REL TABLE E(FROM V TO V)")
    return database, connection


def queries_of(arrows, filters, high) -> list[tuple[str, str]]:
    """(gyreflow query, the same in kuzu) for a fixed-length path and a variable-length one."""
    ours_path, conditions = fixed_path(arrows, filters, False)
    theirs_path, _ = fixed_path(arrows, filters, True)
    distinct = [f"id(e{i}) <> id(e{j})" for i in range(len(arrows)) for j in range(i)]
    ours_where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
    theirs_where = " AND ".join(conditions + distinct)
    theirs_where = f" WHERE {theirs_where}" if theirs_where else ""
    last = f"n{len(arrows)}"
    return [(f"MATCH {ours_path}{ours_where} RETURN count(*)",
             f"MATCH {theirs_path}{theirs_where} RETURN count(*)"),
            (f"MATCH {ours_path}{ours_where} RETURN DISTINCT n0.id, {last}.x",
             f"MATCH {theirs_path}{theirs_where} RETURN DISTINCT n0.id, {last}.x"),
            (f"MATCH (a)-[*1..{high}]->(b) RETURN b.id, count(*)",
             f"MATCH p = (a)-[*1..{high}]->(b) WHERE is_trail(p) RETURN b.id, count(*)")]


def kuzu_answers(vertices, edges, texts: list[str]) -> list[list[tuple]]:
    """The rows of each of ``texts`` on a new database holding the graph, closed after."""
    database, connection = small_database()
    try:
        for vertex, value in vertices:
            connection.execute(f"CREATE (:V {{id: {vertex}, x: {value['x']}}})")
        for src, dst, _ in edges:
            connection.execute(f"MATCH (a:V), (b:V) WHERE a.id = {src} AND b.id = {dst} "
                               "CREATE (a)-[:E]->(b)")
        return [kuzu_rows(connection, text) for text in texts]
    finally:
        connection.close()
        database.close()


@settings(max_examples=15)
@given(small_cases())
def test_random_small_graphs_equal_kuzu(case):
    vertices, edges, arrows, filters, high = case
    if "both" in arrows:  # kuzu follows a self-loop both ways round, gyreflow once
        edges = [edge for edge in edges if edge[0] != edge[1]]
    queries = queries_of(arrows, filters, high)
    want = kuzu_answers(vertices, edges, [theirs for _, theirs in queries])
    with_ids = [(vertex, {**value, "id": vertex}) for vertex, value in vertices]
    got, runs = run_matches(Environment.local(progress=False), [(q, {}) for q, _ in queries],
                            with_ids, edges)
    assert all(run.plan is not None for run in runs)
    for (ours, _), rows, expected in zip(queries, got, want, strict=True):
        assert Counter(rows) == Counter(expected), (ours, edges)
