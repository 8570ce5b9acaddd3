"""MATCH as array joins: the query corpus of test_graph_query against its backtracking oracle, small
random multigraphs (self-loops, parallel edges, cycles) against a plain-Python matcher, and which
queries fall back to the per-path traversal."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_graph_query import CASES, EDGES, VERTICES, check

from gyreflow.api import Environment
from gyreflow.api.graph import GraphView
from gyreflow.api.graph.query import Query
from gyreflow.api.graph.query.array_match import occurrences, ragged
from gyreflow.api.graph.query.arrays import array_plan
from gyreflow.api.graph.query.run import MatchRun

ARRAY_CASES = [case for case in CASES if not isinstance(array_plan(Query(case[0])), str)]


def run_matches(env, texts_and_params, vertices, edges, directed=True, parallelism=None,
                arrays=True):
    """Each query's rows (tuples), each query run once; the runs say which engine they took."""
    ids = [vertex for vertex, _ in vertices]
    runs = [MatchRun(text, params, ids, directed, arrays) for text, params in texts_and_params]
    pipeline = env.pipeline("array-matches")

    @pipeline.task
    def matches(ctx):
        graph = GraphView(ctx.source(vertices), ctx.source(edges), directed=directed,
                          parallelism=parallelism)
        for i, run in enumerate(runs):
            run.stream(ctx, graph, name=f"q{i}").collect(f"q{i}")

    result = pipeline.execute(fresh=True)
    values = dict(vertices)
    return [[tuple(row.values()) for row in run.rows(result.output(f"q{i}"), values)]
            for i, run in enumerate(runs)], runs


def test_most_of_the_corpus_runs_as_array_joins():
    assert len(ARRAY_CASES) >= 40
    reasons = {text: array_plan(Query(text)) for text, _, _ in CASES}
    assert not isinstance(reasons["MATCH (a)-[r]->(b) RETURN count(*)"], str)
    assert reasons["MATCH (a:Person)-[r:KNOWS]->(b) WHERE r.since >= 2010 RETURN a.name, "
                   "r.since"].startswith("a relationship variable the query returns")
    assert not isinstance(reasons["MATCH (a:Person)-[r:KNOWS]->(b) WHERE r.since IS NULL "
                                  "RETURN count(*)"], str)  # an edge mask
    joined = reasons["MATCH (a:Person)-[:LIVES_IN]->(c:City), (b:Person)-[:LIVES_IN]->(c), "
                     "(a)-[:KNOWS]->(b) RETURN a.name, b.name, c.name"]
    assert [node.variable for node in joined.nodes] == ["a", "c", "b", "a"]
    assert array_plan(Query("MATCH (a), (b) RETURN count(*)")).startswith("path patterns that")
    assert array_plan(Query("MATCH (a)-->(b), (a)-->(c), (a)-->(d) RETURN a")).startswith("path")
    fork = array_plan(Query("MATCH (a)-->(b), (a)-->(c) RETURN a"))
    assert [node.variable for node in fork.nodes] == ["b", "a", "c"] and fork.first == (1,)
    both = reasons["MATCH (a:Person)-[:KNOWS]-(b:Person) RETURN a.name, b.name"]
    assert both.verify == (True,)  # its in-edges' type is checked where the row arrives
    turned = array_plan(Query("MATCH (c:City)<-[:LIVES_IN]-(a) RETURN c.name, a.name"))
    assert turned.reversed and turned.first == (1,)
    assert array_plan(Query("MATCH (a)-[]->(b)-[]->(c) RETURN count(*)")).count_only


@pytest.mark.parametrize("environment_type", ["local", "workers"])
def test_array_joins_match_the_backtracking_oracle(make_env, environment_type):
    got, runs = run_matches(make_env(), [(text, params) for text, params, _ in ARRAY_CASES],
                            VERTICES, EDGES, parallelism=2)
    assert all(run.plan is not None for run in runs)
    for case, rows in zip(ARRAY_CASES, got, strict=True):
        check(case, rows)


@pytest.mark.spark
@pytest.mark.parametrize("environment_type", ["spark"])
def test_array_joins_on_spark(make_env, environment_type):
    chosen = [case for case in ARRAY_CASES if "*" in case[0] or "count(*)" in case[0]][:4]
    got, _ = run_matches(make_env(), [(text, params) for text, params, _ in chosen],
                         VERTICES, EDGES)
    for case, rows in zip(chosen, got, strict=True):
        check(case, rows)


def test_the_array_helpers():
    row, entry = ragged(__import__("numpy").array([0, 3, 3, 4]), __import__("numpy").array([0, 2]))
    assert row.tolist() == [0, 0, 0, 1] and entry.tolist() == [0, 1, 2, 3]
    np = __import__("numpy")
    assert occurrences(np.array([0, 4]), np.array([1, 1, 2, 1])).tolist() == [0, 1, 0, 2]


# ---- random small multigraphs against a plain-Python matcher --------------------------------

LABELS = ("A", "B")
TYPES = ("X", "Y")


def oracle(vertices, edges, nodes, rels, directed, where=None):
    """Every match of a path as the tuple of its node vertices: backtracking over the edge list,
    each edge at most once per match (edges identified by their index)."""
    values = dict(vertices)
    found = []

    def node_ok(vertex, node):
        value = values.get(vertex)
        label, want = node
        return label is None or (isinstance(value, dict) and value.get("label") == label)

    def steps(vertex, rel):
        kind, direction = rel[0], rel[1]
        for index, (a, b, value) in enumerate(edges):
            if kind is not None and value.get("label") != kind:
                continue
            if not directed:
                if a == vertex:
                    yield index, b
                elif b == vertex:
                    yield index, a
                continue
            if direction in ("out", "both") and a == vertex:
                yield index, b
            if direction in ("in", "both") and b == vertex and not (direction == "both" and a == b):
                yield index, a

    def go(k, vertex, path, used):
        if not node_ok(vertex, nodes[k]):
            return
        path = (*path, vertex)
        if k == len(rels):
            if where is None or where(path):
                found.append(path)
            return
        low, high = rels[k][2], rels[k][3]

        def walk(at, hops, used):
            if hops >= low:
                go(k + 1, at, path, used)
            if hops == high:
                return
            for index, other in steps(at, rels[k]):
                if index not in used:
                    walk(other, hops + 1, used | {index})

        walk(vertex, 0, used)

    for vertex, _ in vertices:
        go(0, vertex, (), frozenset())
    return found


def pattern_text(nodes, rels):
    names = "abcd"
    text = ""
    for k, (label, _) in enumerate(nodes):
        text += f"({names[k]}{':' + label if label else ''})"
        if k < len(rels):
            kind, direction, low, high = rels[k]
            inner = (f":{kind}" if kind else "") + ("" if (low, high) == (1, 1) else f"*{low}..{high}")
            body = f"[{inner}]"
            text += {"out": f"-{body}->", "in": f"<-{body}-", "both": f"-{body}-"}[direction]
    return text


@st.composite
def graphs_and_patterns(draw):
    size = draw(st.integers(1, 6))
    vertices = [(i, {"label": draw(st.sampled_from(LABELS)), "x": draw(st.integers(0, 3))})
                for i in range(size)]
    for _, value in vertices:  # a missing property reads as null
        if value["x"] == 3 and draw(st.booleans()):
            del value["x"]
    edges = [(draw(st.integers(0, size - 1)), draw(st.integers(0, size - 1)),
              {"label": draw(st.sampled_from(TYPES))})
             for _ in range(draw(st.integers(0, 12)))]
    if draw(st.booleans()):  # ids of mixed types: the rows are object arrays
        name = {i: f"v{i}" if i % 2 else i for i in range(size)}
        vertices = [(name[i], value) for i, value in vertices]
        edges = [(name[a], name[b], value) for a, b, value in edges]
    length = draw(st.integers(0, 3))
    nodes = [(draw(st.sampled_from((None, None, *LABELS))), None) for _ in range(length + 1)]
    rels = []
    for _ in range(length):
        low = draw(st.integers(0, 2))
        high = draw(st.integers(max(low, 1), 3))
        if draw(st.booleans()):
            low = high = 1
        rels.append((draw(st.sampled_from((None, None, "X"))),
                     draw(st.sampled_from(("out", "in", "both"))), low, high))
    return vertices, edges, nodes, rels, draw(st.booleans())


@settings(max_examples=30)
@given(graphs_and_patterns())
def test_random_paths_match_a_plain_python_matcher(case):
    vertices, edges, nodes, rels, directed = case
    pattern = pattern_text(nodes, rels)
    names = "abcd"[:len(nodes)]
    texts = [(f"MATCH {pattern} RETURN count(*)", {}),
             (f"MATCH {pattern} RETURN {', '.join(names)}", {}),
             (f"MATCH {pattern} WHERE a.x < 2 RETURN DISTINCT {names[-1]}", {}),
             (f"MATCH {pattern} WHERE 1 <> a.x AND a.x >= 1.5 AND {names[-1]}.x <= $top "
              "RETURN count(*)", {"top": 2}),
             (f"MATCH {pattern} RETURN {names[-1]}.x AS k, count(a.x) AS c, "
              "count(DISTINCT a.x) AS d, sum(a.x) AS s, min(a.x) AS lo, collect(a.x) AS xs, "
              "count(*) AS n ORDER BY k", {})]
    env = Environment.local(progress=False)
    arrays, runs = run_matches(env, texts, vertices, edges, directed)
    matches = oracle(vertices, edges, nodes, rels, directed)
    x = {vertex: value.get("x") for vertex, value in vertices}
    low_x = [m for m in matches if x[m[0]] is not None and x[m[0]] < 2]
    assert arrays[0] == [(len(matches),)], (pattern, directed)
    assert Counter(arrays[1]) == Counter(matches), (pattern, directed)
    assert Counter(arrays[2]) == Counter({(m[-1],): 1 for m in low_x}), (pattern, directed)
    assert arrays[3] == [(sum(1 for m in matches if x[m[0]] is not None and x[m[0]] >= 2
                              and x[m[-1]] is not None and x[m[-1]] <= 2),)]
    groups: dict = {}
    for m in matches:
        groups.setdefault(x[m[-1]], []).append(x[m[0]])
    want = []
    for key in sorted(groups, key=lambda k: (k is None, k)):
        xs = [v for v in groups[key] if v is not None]
        want.append((key, len(xs), len(set(xs)), sum(xs) if xs else None, min(xs, default=None),
                     Counter(xs), len(groups[key])))
    assert [(*row[:5], Counter(row[5]), row[6]) for row in arrays[4]] == want, pattern
    for text, run in zip(texts, runs, strict=True):
        assert run.plan is not None, text
    if rels and rels[0][2:] == (1, 1):  # WHERE type(r) = 'Y' is the pattern's [:Y]
        typed = [("Y", *rels[0][1:]), *rels[1:]]
        text = pattern_text(nodes, typed).replace("[:Y]", "[r]", 1)
        got, _ = run_matches(env, [(f"MATCH {text} WHERE type(r) = 'Y' RETURN count(*)", {})],
                             vertices, edges, directed)
        assert got[0] == [(len(oracle(vertices, edges, nodes, typed, directed)),)], text


VALUES = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.integers(-(2**63), 2**63 - 1),
                   st.floats(-4, 4), st.just(float("nan")), st.text(max_size=2))


@given(st.lists(st.one_of(st.none(), st.dictionaries(st.just("x"), VALUES))),
       st.sampled_from(["<", "<=", ">", ">=", "=", "<>"]),
       st.one_of(st.integers(-3, 3), st.floats(-4, 4), st.integers(2**60, 2**62)), st.booleans())
def test_a_comparison_mask_equals_evaluating_each_vertex(values, op, number, mirrored):
    import numpy as np

    from gyreflow.api.graph.query.array_match import _compared
    from gyreflow.api.graph.query.evaluate import evaluate

    sides = [("prop", ("var", "a"), "x"), ("lit", number)]
    conjunct = ("cmp", op, *(reversed(sides) if mirrored else sides))
    given = np.empty(len(values), dtype=object)
    given[:] = values
    mask = _compared(conjunct, "a", given, {})
    want = [evaluate(conjunct, {"a": ("node", i, value)}, {}) is True
            for i, value in enumerate(values)]
    assert mask is None or mask.tolist() == want


@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 40)), max_size=30),
       st.sampled_from([(3, 41), (3, 10**9), (2**40, 2**40)]))
def test_counting_code_rows_equals_a_counter(rows, sizes):
    import numpy as np

    from gyreflow.api.graph.query.array_rows import _counted

    columns = [np.array([r[i] for r in rows], np.int64) for i in range(2)]
    groups, counts = _counted(columns, list(sizes))
    got = Counter(dict(zip(map(tuple, groups.tolist()), counts.tolist(), strict=True)))
    assert got == Counter(rows)


@settings(max_examples=20)
@given(graphs_and_patterns())
def test_comma_separated_patterns_join_into_one_path(case):
    vertices, edges, _, _, directed = case
    plain = [(None, None)] * 4
    one = [(None, "out", 1, 1)]
    texts = [("MATCH (a)-[]->(b), (b)-[:X]->(c) RETURN count(*)", {}),
             ("MATCH (a)-[]->(b), (c)-[]->(b) RETURN a, b, c", {}),
             ("MATCH (a)-[]->(b), (b)-[]->(c), (c)-[]->(a) RETURN a, b, c", {}),
             ("MATCH (b)-[]->(a), (b)-[:X]->(c) RETURN a, b, c", {})]
    got, runs = run_matches(Environment.local(progress=False), texts, vertices, edges, directed)
    assert all(run.plan is not None for run in runs)
    two = oracle(vertices, edges, plain[:3], [one[0], ("X", "out", 1, 1)], directed)
    assert got[0] == [(len(two),)]
    meeting = oracle(vertices, edges, plain[:3], [one[0], (None, "in", 1, 1)], directed)
    assert Counter(got[1]) == Counter(meeting)
    loops = [m[:3] for m in oracle(vertices, edges, plain, one * 3, directed) if m[3] == m[0]]
    assert Counter(got[2]) == Counter(loops)
    fork = oracle(vertices, edges, plain[:3], [(None, "in", 1, 1), ("X", "out", 1, 1)], directed)
    assert Counter(got[3]) == Counter(fork)
