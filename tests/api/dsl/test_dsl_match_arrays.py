"""A script's MATCH run as array joins (``graph_arrays``): counts against kuzu and plain loops, on
a random graph with self-loops, parallel edges and two edge types. GeaFlow matches walks (an edge
may repeat) and merges paths that differ only in unnamed elements: the oracles count the distinct
tuples of the named vertices."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from gyreflow.api import Environment
from gyreflow.api.dsl.gql import parse_gql
from gyreflow.api.dsl.graph_arrays import why_rows
from gyreflow.api.dsl.parsing import Statement

SIZE = 40
GRAPH = """
CREATE GRAPH g (
  Vertex person (id bigint ID, age int),
  Edge knows (src bigint SOURCE ID, dst bigint DESTINATION ID, weight double),
  Edge likes (src bigint SOURCE ID, dst bigint DESTINATION ID, weight double)
) WITH (storeType = 'memory');
"""


def random_graph(seed: int = 5):
    rng = random.Random(seed)
    people = [(i, 18 + rng.randrange(15)) for i in range(SIZE)]
    knows = [(rng.randrange(SIZE), rng.randrange(SIZE), rng.randrange(3) / 2) for _ in range(120)]
    # a self-loop, parallel edges (two alike), a cycle
    knows += [(3, 3, 0.5), (4, 5, 1.0), (4, 5, 1.0), (4, 5, 0.5), (5, 4, 0.0)]
    likes = [(rng.randrange(SIZE), rng.randrange(SIZE), rng.randrange(3) / 2) for _ in range(40)]
    return people, knows, likes


def script(people, knows, likes, query: str) -> str:
    def values(edges):
        return ", ".join(f"({s}, {d}, {w})" for s, d, w in edges)

    return GRAPH + (
        f"INSERT INTO g.person SELECT * FROM (VALUES {', '.join(map(str, people))}) AS t(id, age);\n"
        f"INSERT INTO g.knows SELECT * FROM (VALUES {values(knows)}) AS t(s, d, w);\n"
        f"INSERT INTO g.likes SELECT * FROM (VALUES {values(likes)}) AS t(s, d, w);\n"
        f"USE GRAPH g;\n{query};\n")


def runs_on_arrays(block: str) -> bool:
    return why_rows(parse_gql(block, Statement(1, "query", block, 1, 1), "g")) is None


TWO_HOPS = "MATCH (a:person)-[:knows]->(b:person)-[:knows]->(c:person) RETURN a.id AS x, b.id AS y, c.id AS z"


def test_a_two_hop_count_through_sql_equals_kuzus():
    kuzu = pytest.importorskip("kuzu")
    people, knows, likes = random_graph()
    assert runs_on_arrays(TWO_HOPS)
    result = Environment.local(progress=False).sql(
        script(people, knows, likes, f"SELECT count(*) FROM ({TWO_HOPS})"))
    connection = kuzu.Connection(kuzu.Database(":memory:", buffer_pool_size=2**27))
    connection.execute("CREATE NODE TABLE V(id INT64, age INT64, PRIMARY KEY (id))")
    connection.execute("CREATE REL TABLE knows(FROM V TO V)")
    connection.execute("CREATE REL TABLE likes(FROM V TO V)")
    for vertex, age in people:
        connection.execute(f"CREATE (:V {{id: {vertex}, age: {age}}})")
    for table, edges in (("knows", knows), ("likes", likes)):
        for src, dst, _ in edges:
            connection.execute(f"MATCH (a:V), (b:V) WHERE a.id = {src} AND b.id = {dst} "
                               f"CREATE (a)-[:{table}]->(b)")
    found = connection.execute("MATCH (a:V)-[:knows]->(b:V)-[:knows]->(c:V) "
                               "WITH DISTINCT a.id AS x, b.id AS y, c.id AS z RETURN count(*)")
    want = found.get_next()[0]
    assert want > 100
    assert result.output("rows-6") == [(want,)]


def test_filters_and_directions_against_a_plain_loop():
    people, knows, likes = random_graph()
    block = ("MATCH (a:person WHERE a.age > 22)<-[:knows]-(b)-[:knows]-(c:person WHERE c.age < 25) "
             "WHERE b.id <> 7 RETURN a.id AS x, b.id AS y, c.id AS z")
    assert runs_on_arrays(block)
    result = Environment.local(progress=False).sql(
        script(people, knows, likes, f"SELECT x, y, z FROM ({block})"))
    age = dict(people)
    want = set()
    for b, a, _ in knows:  # b -knows-> a
        if age[a] <= 22 or b == 7:
            continue
        for s, d, _ in knows:  # b -knows- c, either way (the same edge may come back)
            for c in ([d] if s == b else []) + ([s] if d == b else []):
                if age[c] < 25:
                    want.add((a, b, c))
    assert want and sorted(result.output("rows-6")) == sorted(want)


def test_named_edges_are_bound_turned_round_against_their_direction_as_every_walk():
    people, knows, likes = random_graph()
    block = ("MATCH (a:person WHERE a.age > 20)-[e:knows]->(b)<-[f:likes]-(c) "
             "RETURN a.id AS x, e.weight AS w, c.id AS z, f.src AS s, f.dst AS d")
    assert runs_on_arrays(block)
    result = Environment.local(progress=False).sql(
        script(people, knows, likes, f"SELECT x, w, z, s, d FROM ({block})"))
    age = dict(people)
    # every variable named: each walk is a row; f followed against its direction shows its ends
    # swapped (its src is b, its dst c)
    want = Counter((a, w, c, b, c) for a, b, w in knows if age[a] > 20
                   for c, b2, _ in likes if b2 == b)
    assert want and Counter(result.output("rows-6")) == want


def test_paths_that_differ_only_in_an_unnamed_vertex_are_one():
    people, knows, likes = random_graph()
    block = "MATCH (a)-[e:knows]->()-[:knows]->(c) RETURN a.id AS x, e.weight AS w, c.id AS z"
    assert runs_on_arrays(block)
    result = Environment.local(progress=False).sql(
        script(people, knows, likes, f"SELECT x, w, z FROM ({block})"))
    # distinct (a, e as its contents, c): parallel edges alike are one e
    distinct = {(a, (a, b, w), c) for a, b, w in knows for b2, c, _ in knows if b2 == b}
    assert Counter(result.output("rows-6")) == Counter((a, e[2], c) for a, e, c in distinct)


def test_an_edge_named_and_followed_either_way_binds_as_the_walk_took_it():
    people, knows, likes = random_graph()
    block = "MATCH (a)-[e:knows]-(b) RETURN a.id AS x, b.id AS y, e.src AS s, e.dst AS d, e.weight AS w"
    assert runs_on_arrays(block)
    result = Environment.local(progress=False).sql(
        script(people, knows, likes, f"SELECT x, y, s, d, w FROM ({block})"))
    # each edge out of its source as itself, into its target turned round (ends swapped): a
    # self-loop both ways
    want = Counter(row for s, d, w in knows for row in ((s, d, s, d, w), (d, s, d, s, w)))
    assert Counter(result.output("rows-6")) == want


def test_comma_joined_paths_and_a_second_match_join_on_their_shared_vertices():
    people, knows, likes = random_graph()
    block = ("MATCH (a:person)-[e:knows]->(b), (a)-[:likes]->(c) MATCH (c)-[:knows]->(d) "
             "WHERE d.age > 25 RETURN a.id AS x, e.weight AS w, b.id AS y, c.id AS z, d.id AS v")
    assert runs_on_arrays(block)
    result = Environment.local(progress=False).sql(
        script(people, knows, likes, f"SELECT x, w, y, z, v FROM ({block})"))
    age = dict(people)
    want = {(a, w, b, c, d) for a, b, w in knows for a2, c, _ in likes if a2 == a
            for c2, d, _ in knows if c2 == c and age[d] > 25}
    assert want and sorted(result.output("rows-6")) == sorted(want)


def test_a_let_after_the_last_match_sets_the_property_of_each_row():
    people, knows, likes = random_graph()
    block = ("MATCH (a:person)-[e:knows]->(b) LET a.twice = a.age * 2 "
             "RETURN a.id AS x, a.twice AS t, b.id AS y")
    assert runs_on_arrays(block)
    result = Environment.local(progress=False).sql(
        script(people, knows, likes, f"SELECT x, t, y FROM ({block})"))
    age = dict(people)
    assert Counter(result.output("rows-6")) == Counter((a, 2 * age[a], b) for a, b, _ in knows)


def test_what_runs_on_rows():
    assert not runs_on_arrays("MATCH (a)-[e:knows]->{1,2}(b) RETURN a.id")
    assert not runs_on_arrays("MATCH (a)-[e:knows]->(b) | (a)-[e:likes]->(b) RETURN a.id")
    assert not runs_on_arrays("MATCH (a)-[e:knows]->(b) LET a.n = 1 MATCH (b)-->(c) RETURN a.id")
    assert not runs_on_arrays("MATCH (a)-[e:knows]->(b) LET GLOBAL a.n = 1 RETURN a.id")
    assert not runs_on_arrays("MATCH (a)-[:knows]->(b WHERE b.age > a.age) RETURN a.id")
