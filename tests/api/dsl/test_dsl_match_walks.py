"""Two path rules of GeaFlow's traversal, checked against plain-Python loops over random graphs: a
quantified edge steps only on vertices its end node accepts (LDBC IS 2, BI 17), and an unnamed edge
of a later MATCH between two vertices earlier clauses bound gives a row per direction followed
(LDBC BI 11)."""

from __future__ import annotations

import random
from collections import Counter

from gyreflow.api import Environment

MESSAGES = """
CREATE GRAPH m (
  Vertex Post (id bigint ID),
  Vertex Comment (id bigint ID),
  Edge replyOf (src bigint SOURCE ID, dst bigint DESTINATION ID)
) WITH (storeType = 'memory');
"""

PEOPLE = """
CREATE GRAPH p (
  Vertex person (id bigint ID),
  Edge knows (src bigint SOURCE ID, dst bigint DESTINATION ID)
) WITH (storeType = 'memory');
"""


def values(rows) -> str:
    return ", ".join("(" + ", ".join(map(str, r)) + ")" for r in rows)


def test_a_quantified_edge_steps_only_on_vertices_its_end_node_accepts():
    rng = random.Random(7)
    posts = [i for i in range(30) if rng.random() < 0.4]
    comments = [i for i in range(30) if i not in posts]
    # replies point to an earlier message: no cycle
    replies = sorted({(i, rng.randrange(i)) for i in range(1, 30) for _ in range(rng.randrange(3))})
    script = MESSAGES + (
        f"INSERT INTO m.Post SELECT * FROM (VALUES {values((i,) for i in posts)}) AS t(id);\n"
        f"INSERT INTO m.Comment SELECT * FROM (VALUES {values((i,) for i in comments)}) AS t(id);\n"
        f"INSERT INTO m.replyOf SELECT * FROM (VALUES {values(replies)}) AS t(s, d);\n"
        "USE GRAPH m;\n"
        "SELECT a, b FROM (MATCH (c:Comment)-[:replyOf]->{0,}(p:Post) RETURN c.id AS a, p.id AS b);\n")
    result = Environment.local(progress=False).sql(script)
    want = set()
    for c in comments:
        want.add((c, c))  # the walk of no edge ends where it starts, whatever label it asks
        frontier = {c}
        while frontier:  # then on through posts only
            frontier = {d for s, d in replies if s in frontier and d in posts}
            want |= {(c, p) for p in frontier}
    assert sorted(result.output("rows-6")) == sorted(want)
    assert any(a != b for a, b in want) and any(d in comments for _, d in replies), "a weak graph"


def test_an_edge_between_vertices_earlier_clauses_bound_gives_a_row_per_direction():
    rng = random.Random(3)
    people = range(12)
    knows = [(s, d) for s in people for d in people if s != d and rng.random() < 0.2]
    knows += knows[:5]  # parallel edges followed the same way stay one row
    script = PEOPLE + (
        f"INSERT INTO p.person SELECT * FROM (VALUES {values((i,) for i in people)}) AS t(id);\n"
        f"INSERT INTO p.knows SELECT * FROM (VALUES {values(knows)}) AS t(s, d);\n"
        "USE GRAPH p;\n"
        "SELECT x, y FROM (MATCH (a:person)-[:knows]-(b:person) MATCH (b:person)-[:knows]-(a:person) "
        "RETURN a.id AS x, b.id AS y);\n")
    result = Environment.local(progress=False).sql(script)
    edges = set(knows)
    want = Counter()
    for a in people:
        for b in people:
            directions = ((b, a) in edges) + ((a, b) in edges)  # from b back to a: out, in
            if directions:  # the first clause: one row per pair, whichever edges join them
                want[(a, b)] += directions
    assert Counter(result.output("rows-5")) == want
    assert max(want.values()) == 2, "a weak graph: no pair knows each other both ways"
