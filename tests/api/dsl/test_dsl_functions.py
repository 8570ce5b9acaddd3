"""GeaFlow's functions and vertex-centric algorithms as gyreflow's SQL runs them, against independent
oracles: Spark's Murmur3, NumPy's percentiles, Python's own string functions, networkx."""

from __future__ import annotations

from collections import Counter

import pytest

from gyreflow.api import Environment

GRAPH = """
CREATE GRAPH g (
  Vertex person (id bigint ID, name varchar, age int),
  Edge knows (src bigint SOURCE ID, dst bigint DESTINATION ID, weight double)
) WITH (storeType = 'memory');
"""


def rows(script: str, statement: int, root=None) -> list[tuple]:
    return Environment.local(progress=False).sql(script, root=root).output(f"rows-{statement}")


# what Spark SQL's hash() gives (Murmur3 over the UTF-8 bytes, seed 42, as GeaFlow's BinaryString)
SPARK_HASH = {"jim-jim-jim": -287068234, "kate-kate-kate": 1065176434, "héllo wörld": -281075962,
              "": 142593372, "abc": 1322437556}


def test_hash_is_the_absolute_hash_of_geaflows_strings_and_javas_numbers():
    texts = list(SPARK_HASH)
    select = ", ".join(f"hash('{t}')" for t in texts)
    got = rows(f"SELECT {select}, hash(7), hash(-3), hash(5000000000), hash(true);", 1)
    java_long_hash = lambda n: (n ^ (n >> 32)) & 0xFFFFFFFF  # noqa: E731 - Long.hashCode, unsigned
    signed = lambda n: n - (1 << 32) if n >= 1 << 31 else n  # noqa: E731
    numbers = [abs(signed(java_long_hash(n & 0xFFFFFFFFFFFFFFFF))) for n in (7, -3, 5000000000)]
    assert got == [tuple(abs(SPARK_HASH[t]) for t in texts) + tuple(numbers) + (1231,)]


@pytest.mark.parametrize("percent", [0.9, 10, 25, 50, 62.5, 90, 100])
def test_percentile_is_commons_maths_percent_of_100_against_numpy(tmp_path, percent):
    import numpy as np

    values = [3.5, -1.0, 7.25, 2.0, 10.0, 4.0, 4.0]
    text = ", ".join(f"({v})" for v in values)
    got = rows(f"SELECT percentile(x, {percent}) FROM (VALUES {text}) AS t(x);", 1)
    # Commons Math's legacy estimate is Weibull's: position p (n + 1) / 100, clamped to the ends
    assert got == [(pytest.approx(float(np.percentile(values, percent, method="weibull"))),)]


def test_split_ex_and_is_decimal_against_python():
    cases = ["1,jim", "a,,b", "x", ",", " 2.5 ,3"]
    texts = ["12", "-3", "2.50", "1e3", "abc", "", "1,2"]
    select = ", ".join(f"split_ex('{c}', ',', {i})" for c in cases for i in (0, 1, 2, -1))
    got = rows(f"SELECT {select};", 1)[0]
    want = tuple((c.split(",")[i] if 0 <= i < len(c.split(",")) else None) for c in cases
                 for i in (0, 1, 2, -1))
    assert got == want

    def parses(text):
        try:
            float(text)
        except ValueError:
            return False
        return True
    got = rows("SELECT " + ", ".join(f"is_decimal('{t}')" for t in texts) + ", is_decimal(null);", 1)
    assert got == [(*[parses(t) for t in texts], False)]


def test_a_tab_written_as_backslash_t_separates_columns(tmp_path):
    (tmp_path / "t.txt").write_text("1\ta\n2\tb c\n", encoding="utf-8")
    script = ("CREATE TABLE t (id int, name varchar) WITH (type='file', "
              f"geaflow.dsl.column.separator='\\t', geaflow.dsl.file.path='{tmp_path / 't.txt'}');\n"
              "SELECT name, id FROM t;\n")
    assert sorted(rows(script, 2)) == [("a", 1), ("b c", 2)]


def graph_script(edges, ids, calls: str) -> str:
    return GRAPH + (
        f"INSERT INTO g.person SELECT * FROM (VALUES {', '.join(f'({i}, null, 1)' for i in ids)}) "
        "AS t(i, n, a);\n"
        f"INSERT INTO g.knows SELECT * FROM (VALUES {', '.join(f'({s}, {d}, 1.0)' for s, d in edges)}) "
        "AS t(s, d, w);\nUSE GRAPH g;\n" + calls)


EDGES = [(1, 2), (2, 3), (3, 1), (9, 10), (10, 9), (9, 8), (12, 11), (11, 13), (4, 5), (4, 6), (6, 6)]
IDS = sorted({v for e in EDGES for v in e} | {20})


def test_cc_is_the_smallest_id_as_text_a_vertex_reaches_against_networkx():
    import networkx as nx

    got = rows(graph_script(EDGES, IDS, "CALL cc() YIELD (vid, c) RETURN vid, c;\n"), 5)
    graph = nx.DiGraph(EDGES)
    graph.add_nodes_from(IDS)
    # the value flows against the edges: a vertex ends with the smallest text among those it reaches
    want = [(v, min([str(v)] + [str(w) for w in nx.descendants(graph, v)])) for v in IDS]
    assert sorted(got) == sorted(want)


def test_lpa_settles_on_the_smallest_label_of_small_components():
    import networkx as nx

    # a triangle, a star and a pair with edges both ways: each settles on its smallest id as text
    edges = [(1, 2), (2, 3), (1, 3), (4, 5), (4, 6), (4, 7), (8, 9), (9, 10), (10, 9), (9, 8)]
    ids = sorted({v for e in edges for v in e} | {11})
    got = rows(graph_script(edges, ids, "CALL lpa() YIELD (vid, label) RETURN vid, label;\n"), 5)
    graph = nx.Graph(edges)
    graph.add_nodes_from(ids)
    want = [(v, min(str(w) for w in c)) for c in nx.connected_components(graph) for v in c]
    assert sorted(got) == sorted(want)


def test_inc_khop_gives_every_walk_of_k_edges_against_networkx():
    import networkx as nx

    graph = nx.MultiDiGraph(EDGES)
    graph.add_nodes_from(IDS)

    def walks(path, left):
        if not left:
            yield path
            return
        for _, w in graph.out_edges(path[-1]):
            yield from walks([*path, w], left - 1)
    got = rows(graph_script(EDGES, IDS, "CALL inc_khop(3) YIELD (ret) RETURN ret;\n"), 5)
    want = Counter(("".join(f"{v}," for v in p),) for v in IDS for p in walks([v], 3))
    assert Counter(got) == want


def test_incmst_keeps_each_vertexs_accepted_proposals_under_its_own_id_against_networkx():
    import networkx as nx

    weighted = [(1, 2, 0.5), (1, 3, 0.25), (1, 4, 0.5), (2, 3, 1.5), (3, 3, 2.0), (4, 1, 0.75)]
    script = GRAPH + (
        "INSERT INTO g.person SELECT * FROM (VALUES (1, 'a', 1), (2, 'b', 1), (3, 'c', 1), (4, 'd', 1)) "
        "AS t(i, n, a);\n"
        f"INSERT INTO g.knows SELECT * FROM (VALUES {', '.join(map(str, weighted))}) AS t(s, d, w);\n"
        "USE GRAPH g;\nCALL IncMST() YIELD (src, dst, w) RETURN src, dst, w;\n")
    graph = nx.MultiDiGraph()
    graph.add_weighted_edges_from(weighted)
    # a proposal to another vertex is accepted and kept as (proposer, proposer, weight), once per weight
    want = {(v, v, w) for v, t, w in graph.edges(data="weight") if t != v}
    got = rows(script, 5)
    assert sorted(got) == sorted(want)


def test_exists_with_its_path_in_parentheses_against_networkx():
    import networkx as nx

    edges = [(1, 2), (2, 3), (3, 4), (4, 2), (5, 6)]
    script = graph_script(edges, range(1, 7), "SELECT a_id, b_id FROM (MATCH (a)->(b) "
                          "WHERE EXISTS((b)->(c)->(d)) RETURN a.id AS a_id, b.id AS b_id);\n")
    graph = nx.DiGraph(edges)
    want = [(a, b) for a, b in edges if any(graph.out_degree(c) for c in graph.successors(b))]
    assert sorted(rows(script, 5)) == sorted(want)


def test_a_path_aggregate_reads_the_request_row():
    edges = [(1, 2), (1, 3), (2, 3), (3, 1), (4, 3)]
    requests = [(1, "r1"), (2, "r2"), (4, "r4")]
    script = graph_script(edges, range(1, 5), (
        "SELECT name, a_id, b_id, n FROM (WITH p AS (SELECT * FROM (VALUES "
        f"{', '.join(f'({i}, {n!r})' for i, n in requests)}) AS t(id, name)) "
        "MATCH (a WHERE a.id = p.id)-[e]->(b) WHERE COUNT((b)<-(c) => c.id * p.id) >= 2 "
        "LET b.n = SUM((b)<-(c) => c.id * p.id) "
        "RETURN p.name AS name, a.id AS a_id, b.id AS b_id, b.n AS n);\n"))
    want = []
    for pid, name in requests:
        for a, b in edges:
            if a == pid:
                into = [c for c, d in edges if d == b]
                if len(into) >= 2:
                    want.append((name, a, b, sum(c * pid for c in into)))
    assert sorted(rows(script, 5)) == sorted(want)


def test_a_walk_of_no_edge_ends_at_its_start_whatever_label_the_end_asks():
    script = (
        "CREATE GRAPH g (Vertex person (id bigint ID), Vertex post (id bigint ID), "
        "Edge likes (src bigint SOURCE ID, dst bigint DESTINATION ID)) WITH (storeType = 'memory');\n"
        "INSERT INTO g.person SELECT * FROM (VALUES (1), (2)) AS t(i);\n"
        "INSERT INTO g.post SELECT * FROM (VALUES (10), (11)) AS t(i);\n"
        "INSERT INTO g.likes SELECT * FROM (VALUES (1, 10), (10, 11), (2, 2)) AS t(s, d);\n"
        "USE GRAPH g;\n"
        "SELECT a_id, b_id FROM (MATCH (a:person)-[:likes]->{0,2}(b:post) "
        "RETURN a.id AS a_id, b.id AS b_id);\n")
    likes = {1: [10], 10: [11], 2: [2]}
    posts = {10, 11}
    want = []
    for a in (1, 2):
        want.append((a, a))  # no edge: b is a itself, though a is a person
        frontier = [a]
        for _ in range(2):
            frontier = [w for v in frontier for w in likes.get(v, [])]
            want += [(a, w) for w in frontier if w in posts]
    assert sorted(rows(script, 6)) == sorted(want)


def test_a_path_aggregate_in_return_starts_from_the_rows_bindings():
    edges = [(1, 2), (1, 3), (2, 3), (3, 1), (4, 3)]
    script = graph_script(edges, range(1, 5), (
        "SELECT * FROM (MATCH (a WHERE a.id = 1)-[e]->(b) RETURN a.id AS a_id, b.id AS b_id, "
        "SUM((b)<-(c) => c.id) AS s, COUNT((b)->(c) => c.id) AS n);\n"))
    want = [(1, b, sum(c for c, d in edges if d == b), sum(1 for s, _ in edges if s == b))
            for a, b in edges if a == 1]
    assert sorted(rows(script, 5)) == sorted(want)


def test_an_unnamed_loop_edge_followed_both_ways_keeps_both_paths():
    # 1 and 2 know each other both ways; 3 knows 1 once
    edges = [(1, 2), (2, 1), (3, 1)]
    script = graph_script(edges, [1, 2, 3], (
        "SELECT a_id, b_id FROM (MATCH (a WHERE a.id = 1)-[:knows]-{0,1}(b) "
        "RETURN a.id AS a_id, b.id AS b_id);\n"
        "SELECT a_id, b_id FROM (MATCH (a WHERE a.id = 1)-[:knows]-(b) "
        "RETURN a.id AS a_id, b.id AS b_id);\n"))
    result = Environment.local(progress=False).sql(script)
    # {0,1}: the walk of no edge, then one path per edge of 1, out-edges and in-edges alike
    around = [d for s, d in edges if s == 1] + [s for s, d in edges if d == 1]
    assert Counter(result.output("rows-5")) == Counter([(1, 1)] + [(1, b) for b in around])
    # a plain unnamed edge: paths that differ only in it are one path, as before
    assert sorted(result.output("rows-6")) == sorted({(1, b) for b in around})
