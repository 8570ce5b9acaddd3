"""Graph queries against a plain backtracking matcher over a seeded social graph."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from gyreflow.api.graph import GraphView
from gyreflow.api.graph.query import Query, QuerySyntaxError, query_graph

CITIES = ["Oslo", "Lima", "Pune"]


def social_graph(seed: int = 7, people: int = 50):
    rng = random.Random(seed)
    vertices = []
    for i in range(people):
        value = {"label": "Person", "name": f"p{i}"}
        if rng.random() < 0.8:
            value["age"] = rng.randint(18, 70)
        vertices.append((i, value))
    for j, city in enumerate(CITIES):
        vertices.append((100 + j, {"label": "City", "name": city}))
    edges = set()
    while len(edges) < 65:
        a, b = rng.randrange(people), rng.randrange(people)
        edges.add((a, b, "KNOWS"))
    edges.add((3, 3, "KNOWS"))  # a self-loop
    for i in range(people):
        if rng.random() < 0.7:
            edges.add((i, 100 + rng.randrange(len(CITIES)), "LIVES_IN"))
    edge_list = []
    for a, b, kind in sorted(edges):
        value = {"label": kind}
        if kind == "KNOWS" and (a + b) % 3:
            value["since"] = 2000 + (a * b) % 20
        edge_list.append((a, b, value))
    return vertices, edge_list


VERTICES, EDGES = social_graph()
VALUES = dict(VERTICES)


# ---- the oracle: backtracking over the edge list, edges identified by their index ----

def _node_ok(vertex, spec, params):
    variable, label, props = spec
    value = VALUES.get(vertex, None)
    if label is not None and (not isinstance(value, dict) or value.get("label") != label):
        return False
    for key, want in props.items():
        want = params[want[1:]] if isinstance(want, str) and want.startswith("$") else want
        if not isinstance(value, dict) or key not in value or value[key] != want:
            return False
    return True


def _steps_from(vertex, direction):
    for index, (a, b, _) in enumerate(EDGES):
        if direction in ("out", "both") and a == vertex:
            yield index, b
        elif direction in ("in", "both") and b == vertex:
            yield index, a


def oracle_matches(paths, params=None):
    """Every binding of ``paths`` (lists alternating node and relationship specs)."""
    params = params or {}
    flat = [(i, item) for path in paths for i, item in enumerate(path)]
    vertex_ids = [v for v, _ in VERTICES]
    results = []

    def bind(bindings, variable, value):
        if variable is None:
            return bindings
        if variable in bindings and bindings[variable] != value:
            return None
        return {**bindings, variable: value}

    def node_at(k, vertex, bindings, used):
        _, spec = flat[k]
        if not _node_ok(vertex, spec, params):
            return
        bound = bind(bindings, spec[0], ("v", vertex))
        if bound is not None:
            step(k + 1, vertex, bound, used)

    def step(k, vertex, bindings, used):
        if k == len(flat):
            results.append(bindings)
            return
        position, spec = flat[k]
        if position == 0:  # a new path
            for start in vertex_ids:
                node_at(k, start, bindings, used)
            return
        variable, kind, direction, low, high = spec

        def walk(at, path, used):
            if len(path) >= low:
                value = ("e", tuple(path)) if high != 1 or low != 1 else ("e", path[0])
                bound = bind(bindings, variable, value)
                if bound is not None:
                    node_at(k + 1, at, bound, used)
            if len(path) == high:
                return
            for index, other in _steps_from(at, direction):
                if index in used or (kind is not None and EDGES[index][2].get("label") != kind):
                    continue
                walk(other, [*path, index], used | {index})

        walk(vertex, [], used)

    step(0, None, {}, frozenset())
    return results


def prop(vertex, key):
    value = VALUES.get(vertex)
    return value.get(key) if isinstance(value, dict) else None


def v(binding):
    return binding[1]


P = "Person"


def N(  # noqa: N802 - reads like the pattern
        var=None, label=None, **props):
    return (var, label, props)


def R(  # noqa: N802
        var=None, kind=None, direction="out", low=1, high=1):
    return (var, kind, direction, low, high)


def rows_of(matches, row, where=lambda m: True):
    return Counter(row(m) for m in matches if where(m))


def distinct(counter):
    return Counter(dict.fromkeys(counter, 1))


def grouped(matches, key, value, fold):
    groups = {}
    for m in matches:
        groups.setdefault(key(m), []).append(value(m))
    return Counter((*k, fold(vals)) for k, vals in groups.items())


def _ages_of(m, var):
    return prop(v(m[var]), "age")


def _cases():
    """(query, params, expected Counter of row tuples or a list when ordered)."""
    knows = [N("a", P), R("r", "KNOWS"), N("b", P)]
    m_knows = oracle_matches([knows])
    m_any = oracle_matches([[N("a"), R("r"), N("b")]])
    m_both = oracle_matches([[N("a", P), R(None, "KNOWS", "both"), N("b", P)]])
    m_in = oracle_matches([[N("a", P), R(None, "KNOWS", "in"), N("b", P)]])
    m_var13 = oracle_matches([[N("a", P, name="p9"), R(None, "KNOWS", "out", 1, 3), N("b")]])
    m_var2 = oracle_matches([[N("a", P, name="p3"), R(None, "KNOWS", "out", 2, 2), N("b")]])
    m_lives = oracle_matches([[N("a", P), R(None, "LIVES_IN"), N("c", "City")]])
    m_tri = oracle_matches([[N("a"), R(None, "KNOWS"), N("b"), R(None, "KNOWS"), N("c"),
                             R(None, "KNOWS"), N("a")]])
    m_two = oracle_matches([[N("a", P), R(None, "LIVES_IN"), N("c", "City")],
                            [N("b", P), R(None, "LIVES_IN"), N("c")],
                            [N("a"), R(None, "KNOWS"), N("b")]])
    m_cycle = oracle_matches([[N("a", P, name="p3"), R(None, "KNOWS", "both", 1, 6), N("a")]])
    m_param = oracle_matches([[N("a", P, name="$n"), R(None, "KNOWS"), N("b")]], {"n": "p5"})
    m_star = oracle_matches([[N("a", P, name="p25"), R(None, "KNOWS", "out", 1, 10), N("b")]])
    m_upto = oracle_matches([[N("a", P, name="p5"), R(None, "KNOWS", "in", 1, 2), N("b")]])
    m_zero = oracle_matches([[N("a", P, name="p39"), R(None, "KNOWS", "out", 0, 1), N("b")]])
    m_self = oracle_matches([[N("a"), R(None, "KNOWS"), N("a")]])
    m_rev = oracle_matches([[N("c", "City"), R(None, "LIVES_IN", "in"), N("a")]])
    m_nodes = oracle_matches([[N("a", P)]])
    m_city = oracle_matches([[N("c", "City")]])
    name = lambda m, var: prop(v(m[var]), "name")  # noqa: E731
    age = _ages_of
    since = lambda m: EDGES[m["r"][1]][2].get("since")  # noqa: E731
    return [
        ("MATCH (a:Person)-[r:KNOWS]->(b:Person) RETURN a.name, b.name", {},
         rows_of(m_knows, lambda m: (name(m, "a"), name(m, "b")))),
        ("MATCH (a)-[r]->(b) RETURN count(*)", {}, Counter({(len(m_any),): 1})),
        ("MATCH (a:Person)-[:KNOWS]-(b:Person) RETURN a.name, b.name", {},
         rows_of(m_both, lambda m: (name(m, "a"), name(m, "b")))),
        ("MATCH (a:Person)<-[:KNOWS]-(b:Person) RETURN a.name, b.name", {},
         rows_of(m_in, lambda m: (name(m, "a"), name(m, "b")))),
        ("MATCH (a:Person {name: 'p9'})-[:KNOWS*1..3]->(b) RETURN b.name", {},
         rows_of(m_var13, lambda m: (name(m, "b"),))),
        ("MATCH (a:Person {name: 'p9'})-[:KNOWS*1..3]->(b) RETURN DISTINCT b.name", {},
         distinct(rows_of(m_var13, lambda m: (name(m, "b"),)))),
        ("MATCH (a:Person {name: 'p3'})-[:KNOWS*2]->(b) RETURN b.name", {},
         rows_of(m_var2, lambda m: (name(m, "b"),))),
        ("MATCH (a:Person)-[:LIVES_IN]->(c:City) RETURN c.name, count(*)", {},
         grouped(m_lives, lambda m: (name(m, "c"),), lambda m: 1, len)),
        ("MATCH (a:Person)-[:LIVES_IN]->(c:City) RETURN c.name AS city, avg(a.age) AS mean", {},
         grouped(m_lives, lambda m: (name(m, "c"),), lambda m: age(m, "a"),
                 lambda xs: (sum(x for x in xs if x is not None)
                             / len([x for x in xs if x is not None])))),
        ("MATCH (a:Person)-[:LIVES_IN]->(c:City) RETURN c.name, min(a.age), max(a.age)", {},
         Counter({(k[0], min(x for x in vs if x is not None), max(x for x in vs if x is not None)): 1
                  for k, vs in _groups(m_lives, lambda m: (name(m, "c"),), lambda m: age(m, "a"))})),
        ("MATCH (a:Person)-[:LIVES_IN]->(c:City) RETURN c.name, sum(a.age), count(a.age)", {},
         Counter({(k[0], sum(x for x in vs if x is not None), len([x for x in vs if x is not None])): 1
                  for k, vs in _groups(m_lives, lambda m: (name(m, "c"),), lambda m: age(m, "a"))})),
        ("MATCH (a)-[:KNOWS]->(b)-[:KNOWS]->(c)-[:KNOWS]->(a) RETURN count(*)", {},
         Counter({(len(m_tri),): 1})),
        ("MATCH (a:Person)-[:LIVES_IN]->(c:City), (b:Person)-[:LIVES_IN]->(c), (a)-[:KNOWS]->(b) "
         "RETURN a.name, b.name, c.name", {},
         rows_of(m_two, lambda m: (name(m, "a"), name(m, "b"), name(m, "c")))),
        ("MATCH (a:Person {name: 'p3'})-[:KNOWS*1..6]-(a) RETURN count(*)", {},
         Counter({(len(m_cycle),): 1})),
        ("MATCH (a:Person {name: $n})-[:KNOWS]->(b) RETURN b.name", {"n": "p5"},
         rows_of(m_param, lambda m: (name(m, "b"),))),
        ("MATCH (a:Person {name: 'p25'})-[:KNOWS*]->(b) RETURN count(DISTINCT b)", {},
         Counter({(len({v(m["b"]) for m in m_star}),): 1})),
        ("MATCH (a:Person {name: 'p5'})<-[:KNOWS*..2]-(b) RETURN b.name", {},
         rows_of(m_upto, lambda m: (name(m, "b"),))),
        ("MATCH (a:Person {name: 'p39'})-[:KNOWS*0..1]->(b) RETURN b.name", {},
         rows_of(m_zero, lambda m: (name(m, "b"),))),
        ("MATCH (a)-[:KNOWS]->(a) RETURN a.name", {}, rows_of(m_self, lambda m: (name(m, "a"),))),
        ("MATCH (c:City)<-[:LIVES_IN]-(a) RETURN c.name, a.name", {},
         rows_of(m_rev, lambda m: (name(m, "c"), name(m, "a")))),
        ("MATCH (a:Person) WHERE a.age IS NULL RETURN a.name", {},
         rows_of(m_nodes, lambda m: (name(m, "a"),), lambda m: age(m, "a") is None)),
        ("MATCH (a:Person) WHERE a.age IS NOT NULL AND a.age >= 60 RETURN a.name, a.age", {},
         rows_of(m_nodes, lambda m: (name(m, "a"), age(m, "a")),
                 lambda m: age(m, "a") is not None and age(m, "a") >= 60)),
        ("MATCH (a:Person) WHERE a.age < 25 OR a.age > 65 RETURN a.name", {},
         rows_of(m_nodes, lambda m: (name(m, "a"),),
                 lambda m: age(m, "a") is not None and (age(m, "a") < 25 or age(m, "a") > 65))),
        ("MATCH (a:Person) WHERE NOT a.age > 30 RETURN a.name", {},
         rows_of(m_nodes, lambda m: (name(m, "a"),),
                 lambda m: age(m, "a") is not None and not age(m, "a") > 30)),
        ("MATCH (a:Person) WHERE a.nickname = 'x' RETURN a.name", {}, Counter()),
        ("MATCH (a:Person) RETURN a.nickname, count(*)", {}, Counter({(None, len(m_nodes)): 1})),
        ("MATCH (a:Nobody) RETURN a.name", {}, Counter()),
        ("MATCH (a:Nobody) RETURN count(*)", {}, Counter({(0,): 1})),
        ("MATCH (a:Person)-[r:KNOWS]->(b) WHERE r.since >= 2010 RETURN a.name, r.since", {},
         rows_of(m_knows, lambda m: (name(m, "a"), since(m)),
                 lambda m: since(m) is not None and since(m) >= 2010)),
        ("MATCH (a:Person)-[r:KNOWS]->(b) WHERE r.since IS NULL RETURN count(*)", {},
         Counter({(sum(1 for m in m_knows if since(m) is None),): 1})),
        ("MATCH (a:Person) WHERE a.age >= $low RETURN count(*) AS n", {"low": 40},
         Counter({(sum(1 for m in m_nodes if (age(m, "a") or 0) >= 40),): 1})),
        ("MATCH (a:Person) WHERE a.name IN ['p1', 'p2', 'zz'] RETURN a.name", {},
         Counter({("p1",): 1, ("p2",): 1})),
        ("MATCH (c:City) RETURN c.name ORDER BY c.name DESC", {},
         sorted([(name(m, "c"),) for m in m_city], reverse=True)),
        ("MATCH (a:Person) WHERE a.age IS NOT NULL RETURN a.name, a.age "
         "ORDER BY a.age DESC, a.name LIMIT 5", {},
         sorted([(name(m, "a"), age(m, "a")) for m in m_nodes if age(m, "a") is not None],
                key=lambda r: (-r[1], r[0]))[:5]),
        ("MATCH (a:Person) WHERE a.age IS NOT NULL RETURN a.name ORDER BY a.age, a.name SKIP 3 "
         "LIMIT 4", {},
         [(r[0],) for r in sorted([(name(m, "a"), age(m, "a")) for m in m_nodes
                                   if age(m, "a") is not None], key=lambda r: (r[1], r[0]))[3:7]]),
        ("MATCH (a:Person)-[:KNOWS]->(b) RETURN a.name AS who, count(b) AS n ORDER BY n DESC, "
         "who LIMIT 3", {},
         sorted(grouped(m_knows, lambda m: (name(m, "a"),), lambda m: 1, len).keys(),
                key=lambda r: (-r[1], r[0]))[:3]),
        ("MATCH (a:Person {name: 'p9'})-[:KNOWS]->(b) RETURN collect(b.name) AS names", {},
         None),  # checked as a multiset below
        ("// a comment\nMATCH (a:Person) /* block */ WHERE a.name = \"p7\" RETURN a.age + 1 AS next",
         {}, rows_of(m_nodes, lambda m: (None if age(m, "a") is None else age(m, "a") + 1,),
                     lambda m: name(m, "a") == "p7")),
        ("MATCH (a:Person)-[:KNOWS]->(b:City) RETURN a.name", {}, Counter()),
        ("MATCH (a:Person)-[:KNOWS*1..2]-(b:Person) WHERE a.name = 'p9' RETURN DISTINCT b.name", {},
         distinct(rows_of(oracle_matches([[N("a", P, name="p9"), R(None, "KNOWS", "both", 1, 2),
                                          N("b", P)]]), lambda m: (name(m, "b"),)))),
        ("MATCH (a)-[:KNOWS]->(b) WHERE id(a) = 3 RETURN b", {},
         rows_of(m_knows, lambda m: (v(m["b"]),), lambda m: v(m["a"]) == 3)),
    ]


def _groups(matches, key, value):
    groups = {}
    for m in matches:
        groups.setdefault(key(m), []).append(value(m))
    return groups.items()


CASES = _cases()
SPARK_CASES = (0, 11, 15)


def run_queries(env, cases, parallelism=None, everywhere=False):
    """Each case's rows; ``everywhere``: no vertex ids, the queries start at every vertex."""
    pipeline = env.pipeline("graph-queries")
    queries = [Query(text) for text, _, _ in cases]

    @pipeline.task
    def queries_task(ctx):
        graph = GraphView(ctx.source(VERTICES), ctx.source(EDGES), parallelism=parallelism)
        ids = None if everywhere else [vertex for vertex, _ in VERTICES]
        for i, (query, (_, params, _)) in enumerate(zip(queries, cases, strict=True)):
            query_graph(graph, query, ctx.source([(i, params)]), ids, name=f"q{i}").collect(f"q{i}")

    result = pipeline.execute()
    rows = []
    for i, (query, (_, params, _)) in enumerate(zip(queries, cases, strict=True)):
        matches = [bindings for request, bindings in result.output(f"q{i}") if request == i]
        rows.append([tuple(row.values()) for row in query.rows(matches, params)])
    return rows


def check(case, got):
    text, _, expected = case
    if expected is None:  # collect(): one row whose list is the oracle's multiset
        names = [prop(v(m["b"]), "name") for m in
                 oracle_matches([[N("a", P, name="p9"), R(None, "KNOWS"), N("b")]])]
        assert len(got) == 1 and Counter(got[0][0]) == Counter(names), text
    elif isinstance(expected, list):
        assert got == expected, text
    else:
        assert Counter(got) == expected, text


def test_the_corpus_is_large_and_not_trivial():
    assert len(CASES) >= 40
    non_empty = [c for c in CASES if c[2] is None or len(c[2])]
    assert len(non_empty) >= 35


def test_queries_match_the_backtracking_oracle(make_env, environment_type):
    chosen = [CASES[i] for i in SPARK_CASES] if environment_type == "spark" else CASES
    parallelism = 2 if environment_type != "spark" else None
    for case, got in zip(chosen, run_queries(make_env(), chosen, parallelism), strict=True):
        check(case, got)


def joined(case) -> bool:
    """Whether every later pattern of the case's query starts at a node an earlier one binds."""
    try:
        Query(case[0]).program()
    except QuerySyntaxError:
        return False
    return True


def test_queries_without_vertex_ids_start_at_every_vertex(make_env, environment_type):
    chosen = [c for c in CASES if joined(c)]
    assert len(chosen) >= 35
    if environment_type == "spark":
        chosen = [c for i, c in enumerate(CASES) if i in SPARK_CASES and joined(c)]
    parallelism = 2 if environment_type != "spark" else None
    for case, got in zip(chosen, run_queries(make_env(), chosen, parallelism, everywhere=True),
                         strict=True):
        check(case, got)


def test_the_oracle_comparison_can_fail():
    case = CASES[0]
    got = list(case[2].elements())
    with pytest.raises(AssertionError):
        check(case, got[1:])


def test_an_undirected_graph_follows_every_edge_whatever_the_arrow(make_env):
    import networkx as nx

    edges = [(a, b, None) for a, b in nx.gnm_random_graph(20, 30, seed=5).edges]
    ids = list(range(20))
    texts = ["MATCH (a)-[]-(b) RETURN count(*)", "MATCH (a)-[]->(b) RETURN count(*)",
             "MATCH (a)-[*2]-(b) RETURN count(*)"]
    queries = [Query(text) for text in texts]
    pipeline = make_env().pipeline("undirected-queries")

    @pipeline.task
    def undirected(ctx):
        graph = GraphView(ctx.source([(i, None) for i in ids]), ctx.source(edges), directed=False)
        for i, query in enumerate(queries):
            query_graph(graph, query, ctx.source([(i, {})]), ids, name=f"u{i}").collect(f"u{i}")

    result = pipeline.execute()
    counts = [query.rows([m for _, m in result.output(f"u{i}")])[0]["count(*)"]
              for i, query in enumerate(queries)]
    reference = nx.Graph([(a, b) for a, b, _ in edges])
    degrees = [d for _, d in reference.degree]
    assert counts == [2 * len(edges), 2 * len(edges), sum(d * (d - 1) for d in degrees)]
