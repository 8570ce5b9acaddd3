"""The graph algorithm library on seeded random graphs against the plain-Python references.

Static algorithms: every vertex's value against ``graph_reference`` (BFS, CDLP and WCC labels
exactly, PageRank, LCC and SSSP within 1e-9 relative). Incremental WCC and BFS: after every window,
the per-window changed results folded together equal the reference over everything appended so far,
and a window only emits vertices whose value changed. k-hop: one result per request, the start
vertex missing from the graph included.

Spark rounds cost ~0.3-1 s each here, so the Spark cases are few and small.
"""

from __future__ import annotations

import math
from collections import Counter

import graph_reference as ref
import pytest
from graph_reference import close

from gyreflow.api import SizeTumblingWindow
from gyreflow.api.graph import GraphView, VertexCentricCompute, algorithms

STATIC = ("bfs", "pr", "wcc", "cdlp", "lcc", "sssp")
DAMPING, PR_ITERATIONS, CDLP_ITERATIONS = 0.85, 6, 4


def references(vertices, edges, directed: bool, source) -> dict[str, dict]:
    return {
        "bfs": ref.bfs(vertices, edges, directed, source),
        "pr": ref.pagerank(vertices, edges, directed, DAMPING, PR_ITERATIONS),
        "wcc": ref.wcc(vertices, edges),
        "cdlp": ref.cdlp(vertices, edges, directed, CDLP_ITERATIONS),
        "lcc": ref.lcc(vertices, edges, directed),
        "sssp": ref.sssp(vertices, edges, directed, source),
    }


def run_static(env, vertices, edges, directed: bool, source, parallelism=None) -> dict[str, list]:
    """Every static algorithm on one graph view, in one pipeline task."""
    pipeline = env.pipeline("static-graph")

    @pipeline.task
    def all_algorithms(ctx):
        graph = GraphView(ctx.source(vertices), ctx.source(edges), directed=directed,
                          parallelism=parallelism)
        algorithms.bfs(graph, source).collect("bfs")
        algorithms.pagerank(graph, DAMPING, PR_ITERATIONS).collect("pr")
        algorithms.wcc(graph).collect("wcc")
        algorithms.cdlp(graph, CDLP_ITERATIONS).collect("cdlp")
        algorithms.lcc(graph).collect("lcc")
        algorithms.sssp(graph, source).collect("sssp")

    result = pipeline.execute()
    return {name: result.output(name) for name in STATIC}


def assert_matches(outputs: dict[str, list], expected: dict[str, dict]) -> None:
    for name in STATIC:
        records = outputs[name]
        got = dict(records)
        assert len(got) == len(records), f"{name}: a vertex was emitted twice"
        assert got.keys() == expected[name].keys(), f"{name}: the vertex set differs"
        if name in ("bfs", "wcc", "cdlp"):
            wrong = {v: (got[v], x) for v, x in expected[name].items() if got[v] != x}
        else:
            wrong = {v: (got[v], x) for v, x in expected[name].items() if not close(got[v], x)}
        assert not wrong, f"{name}: vertex: (got, expected) {dict(list(wrong.items())[:5])}"


# (seed, vertices, edges, directed, self-loops, duplicate edges, isolated vertices, parallelism)
CASES = [
    (1, 30, 70, True, False, False, 3, None),
    (2, 30, 70, False, False, False, 3, None),
    (3, 60, 200, True, True, True, 5, 3),
    (4, 60, 200, False, True, True, 5, 3),
    (5, 1, 0, True, False, False, 0, None),  # a single vertex, no edges
    (6, 12, 40, True, True, False, 0, 2),  # dense: many triangles for LCC
    (7, 80, 90, False, False, False, 10, 2),  # sparse: many components, long paths
    (8, 40, 120, True, False, True, 0, None),
]
# Directed, with self-loops, duplicates, isolated vertices and parallelism 3, small enough for a
# Spark job per superstep (undirected graphs run on Spark through tests/graph/test_graphalytics.py).
SPARK_CASES = [(3, 24, 60, True, True, True, 3, 3)]
ENV_CASES = [("local", case) for case in CASES] + [("spark", case) for case in SPARK_CASES]


def case_id(value) -> str:
    if isinstance(value, str):
        return value
    seed, n, m, directed, loops, dups, isolated, parallelism = value
    return (f"seed{seed}-{'dir' if directed else 'undir'}-n{n}-m{m}"
            f"{'-loops' if loops else ''}{'-dups' if dups else ''}-p{parallelism or 1}")


@pytest.mark.parametrize(("environment_type", "case"), ENV_CASES, ids=case_id)
def test_static_algorithms_match_the_references(make_env, case):
    seed, n, m, directed, loops, dups, isolated, parallelism = case
    vertices, edges = ref.random_graph(seed, n, m, self_loops=loops, duplicates=dups, weights=True,
                                       isolated=isolated)
    source = vertices[0]
    outputs = run_static(make_env(), vertices, edges, directed, source, parallelism)
    assert_matches(outputs, references(vertices, edges, directed, source))


def test_the_static_comparison_can_fail():
    vertices, edges = ref.random_graph(3, 20, 50, weights=True)
    expected = references(vertices, edges, True, vertices[0])
    outputs = {name: list(values.items()) for name, values in expected.items()}
    assert_matches(outputs, expected)
    for name, change in (("cdlp", 1), ("pr", 1e-6), ("sssp", 1e-6)):
        broken = dict(outputs)
        vertex, value = broken[name][0]
        broken[name] = [(vertex, value + change), *broken[name][1:]]
        with pytest.raises(AssertionError):
            assert_matches(broken, expected)
    with pytest.raises(AssertionError, match="twice"):
        assert_matches({**outputs, "wcc": outputs["wcc"] + outputs["wcc"][:1]}, expected)


def test_graph_generator_decides_loops_duplicates_and_isolated_vertices():
    vertices, edges = ref.random_graph(11, 50, 400, self_loops=False, duplicates=False, isolated=7,
                                       dangling=4)
    pairs = [e[:2] for e in edges]
    assert sorted(vertices) == list(range(50))
    assert len(set(pairs)) == len(pairs) == 400
    assert all(src != dst for src, dst in pairs)
    assert not {v for e in pairs for v in e} & set(range(43, 50))
    out_degree = {v: 0 for v in vertices}
    for src, _ in pairs:
        out_degree[src] += 1
    assert [v for v in range(43) if out_degree[v] == 0] == [39, 40, 41, 42]
    _, looped = ref.random_graph(12, 10, 300, self_loops=True, duplicates=True)
    assert any(src == dst for src, dst in looped) and len(set(looped)) < len(looped)


def test_references_agree_with_networkx():
    nx = pytest.importorskip("networkx")
    vertices, edges = ref.random_graph(21, 80, 300, weights=True, isolated=4)
    directed = nx.DiGraph()
    directed.add_nodes_from(vertices)
    directed.add_weighted_edges_from(edges)
    source = vertices[0]
    lengths = nx.single_source_shortest_path_length(directed, source)
    assert ref.bfs(vertices, edges, True, source) == {
        v: lengths.get(v, ref.UNREACHABLE) for v in vertices}
    distances = nx.single_source_dijkstra_path_length(directed, source)
    got = ref.sssp(vertices, edges, True, source)
    assert all(close(got[v], distances.get(v, math.inf)) for v in vertices)
    components = list(nx.weakly_connected_components(directed))
    assert ref.wcc(vertices, edges) == {v: min(c) for c in components for v in c}
    undirected = directed.to_undirected()
    clustering = nx.clustering(undirected)
    simple = ref.undirected_simple(edges)
    lcc = ref.lcc(vertices, simple, False)
    assert all(close(lcc[v], clustering[v]) for v in vertices)
    # Without dangling vertices networkx's power iteration is the same update rule.
    ring = [(v, (v + 1) % 30) for v in range(30)] + [(v, (v * 7) % 30) for v in range(30)]
    ring = list(dict.fromkeys(e for e in ring if e[0] != e[1]))
    converged = nx.pagerank(nx.DiGraph(ring), alpha=0.85, tol=1e-14, max_iter=1000)
    ranks = ref.pagerank(list(range(30)), ring, True, 0.85, 300)
    assert all(close(ranks[v], converged[v], 1e-8) for v in range(30))


# --- incremental WCC and BFS ------------------------------------------------------------------


def run_incremental(env, vertices, edges, directed: bool, source, window: int, vertex_window: int,
                    parallelism=None) -> dict[str, dict[int, list]]:
    """Incremental WCC and BFS over edges arriving ``window`` per window (vertices
    ``vertex_window`` per window, or only through edges when ``vertices`` is None)."""
    pipeline = env.pipeline("growing-graph")

    @pipeline.task
    def grow(ctx):
        vertex_stream = None
        if vertices is not None:
            vertex_stream = ctx.source(vertices, SizeTumblingWindow(vertex_window), parallelism=1)
        edge_stream = ctx.source(edges, SizeTumblingWindow(window), parallelism=1)
        graph = GraphView(vertex_stream, edge_stream, directed=directed, parallelism=parallelism)
        algorithms.incremental_wcc(graph).collect("wcc")
        algorithms.incremental_bfs(graph, source).collect("bfs")

    result = pipeline.execute()
    return {name: result.by_window(name) for name in ("wcc", "bfs")}


def check_folded(by_window: dict[int, list], expected_after: list[dict]) -> None:
    """Folding windows 1..w equals ``expected_after[w - 1]``; each window emits changes only."""
    folded: dict = {}
    assert set(by_window) <= set(range(1, len(expected_after) + 1))
    for window, expected in enumerate(expected_after, start=1):
        records = by_window.get(window, [])
        emitted = dict(records)
        assert len(emitted) == len(records), f"window {window}: a vertex was emitted twice"
        unchanged = {v: x for v, x in emitted.items() if v in folded and folded[v] == x}
        assert not unchanged, f"window {window} emitted unchanged vertices {unchanged}"
        folded.update(emitted)
        assert folded == expected, f"after window {window}"


def grown_references(vertices, edges, directed, source, window, vertex_window):
    """The static references after each window of a growing graph."""
    edge_windows = -(-len(edges) // window)
    vertex_windows = 0 if vertices is None else -(-len(vertices) // vertex_window)
    wcc_after, bfs_after = [], []
    for w in range(1, max(edge_windows, vertex_windows) + 1):
        so_far = edges[:w * window]
        present = dict.fromkeys(vertices[:w * vertex_window] if vertices is not None else [])
        for edge in so_far:
            present.setdefault(edge[0])
            present.setdefault(edge[1])
        wcc_after.append(ref.wcc(list(present), so_far))
        bfs_after.append(ref.bfs(list(present), so_far, directed, source))
    return wcc_after, bfs_after


def test_check_folded_can_fail():
    expected = [{1: 1, 2: 2}, {1: 1, 2: 1}]
    check_folded({1: [(1, 1), (2, 2)], 2: [(2, 1)]}, expected)
    with pytest.raises(AssertionError, match="unchanged"):
        check_folded({1: [(1, 1), (2, 2)], 2: [(2, 1), (1, 1)]}, expected)
    with pytest.raises(AssertionError, match="after window 2"):
        check_folded({1: [(1, 1), (2, 2)]}, expected)


# (seed, vertices, edges, directed, edges per window, vertices per window or None, parallelism)
INCREMENTAL_CASES = [
    (31, 40, 120, False, 15, None, None),
    (32, 40, 120, True, 15, 10, 2),
    (33, 100, 150, False, 10, 25, 3),
]
SPARK_INCREMENTAL = [(34, 20, 30, True, 10, 10, 2)]
INCREMENTAL_ENV_CASES = ([("local", c) for c in INCREMENTAL_CASES]
                         + [("spark", c) for c in SPARK_INCREMENTAL])


@pytest.mark.parametrize(("environment_type", "case"), INCREMENTAL_ENV_CASES,
                         ids=lambda v: v if isinstance(v, str) else f"seed{v[0]}")
def test_incremental_wcc_and_bfs_fold_to_the_static_references(make_env, case):
    seed, n, m, directed, window, vertex_window, parallelism = case
    vertices, edges = ref.random_graph(seed, n, m)
    source = edges[0][0]
    listed = vertices if vertex_window is not None else None
    outputs = run_incremental(make_env(), listed, edges, directed, source, window, vertex_window,
                              parallelism)
    wcc_after, bfs_after = grown_references(listed, edges, directed, source, window, vertex_window)
    check_folded(outputs["wcc"], wcc_after)
    check_folded(outputs["bfs"], bfs_after)


@pytest.mark.parametrize("environment_type", ["local"])  # a Spark round per superstep: too slow
def test_static_compute_reruns_on_the_graph_so_far_in_every_window(make_env):
    """Static compute restarts every window on everything appended so far: edges added in a later
    window must reach every direction's neighbour lists."""
    vertices, edges = ref.random_graph(35, 30, 90, isolated=2)
    window = 30
    pipeline = make_env(parallelism=2).pipeline("static-growing")

    @pipeline.task
    def grow(ctx):
        graph = GraphView(ctx.source(vertices, SizeTumblingWindow(len(vertices)), parallelism=1),
                          ctx.source(edges, SizeTumblingWindow(window), parallelism=1), directed=True)
        algorithms.wcc(graph).collect("wcc")
        algorithms.cdlp(graph, CDLP_ITERATIONS).collect("cdlp")
        algorithms.pagerank(graph, DAMPING, PR_ITERATIONS).collect("pr")

    result = pipeline.execute()
    for number in range(1, len(edges) // window + 1):
        so_far = edges[:number * window]
        wcc = dict(result.by_window("wcc")[number])
        cdlp = dict(result.by_window("cdlp")[number])
        pr = dict(result.by_window("pr")[number])
        assert wcc == ref.wcc(vertices, so_far), f"wcc in window {number}"
        assert cdlp == ref.cdlp(vertices, so_far, True, CDLP_ITERATIONS), f"cdlp in window {number}"
        expected = ref.pagerank(vertices, so_far, True, DAMPING, PR_ITERATIONS)
        assert all(close(pr[v], x) for v, x in expected.items()), f"pagerank in window {number}"


# --- k-hop traversal --------------------------------------------------------------------------


def run_khop(env, vertices, edges, directed, requests, k) -> list:
    pipeline = env.pipeline("khop")

    @pipeline.task
    def neighbourhoods(ctx):
        graph = GraphView(ctx.source(vertices), ctx.source(edges), directed=directed)
        algorithms.khop(graph, ctx.source(requests), k).collect("khop")

    return pipeline.execute().output("khop")


KHOP_CASES = [("local", (41, True, 2)), ("local", (42, False, 3)), ("local", (43, True, 0)),
              ("spark", (44, True, 2))]


@pytest.mark.parametrize(("environment_type", "case"), KHOP_CASES,
                         ids=lambda v: v if isinstance(v, str) else f"seed{v[0]}-k{v[2]}")
def test_khop_gives_one_result_per_request(make_env, case):
    seed, directed, k = case
    vertices, edges = ref.random_graph(seed, 40, 70, isolated=3)
    isolated = next(v for v in vertices if v >= 37)
    requests = [("hub", 0), ("edge", vertices[5]), ("alone", isolated), ("missing", 10_000),
                ("again", 0)]
    records = run_khop(make_env(), vertices, edges, directed, requests, k)
    got = dict(records)
    assert len(got) == len(records) == len(requests)
    expected = {key: ref.khop(vertices, edges, directed, start, k) for key, start in requests}
    assert got == expected
    assert got["missing"] == {} and got["alone"] == {isolated: 0}


def test_programs_must_define_compute_and_traversals_start():
    from gyreflow.api import Environment
    from gyreflow.api.graph import GraphView, VertexCentricCompute

    class NoCompute(VertexCentricCompute):
        pass

    class NoStart(VertexCentricCompute):
        def compute(self, vertex, messages):
            pass

    with pytest.raises(TypeError, match="abstract"):
        NoCompute()
    pipeline = Environment.local(progress=False).pipeline("refused")

    @pipeline.task
    def traverse(ctx):
        graph = GraphView(None, ctx.source([(1, 2)]))
        graph.traversal(ctx.source([1]), NoStart()).collect()

    with pytest.raises(TypeError, match="NoStart does not"):
        pipeline.execute()


class _Degree(VertexCentricCompute):
    """Each vertex's number of incident edges, set in the first superstep (no messages): a
    program that ends long before an incremental BFS beside it."""

    def init(self, vertex_id, value):
        return 0

    def compute(self, vertex, messages):
        vertex.value = vertex.out_degree


# On Spark every superstep of every window is a job (a minute here); the race is the task's own.
@pytest.mark.spark_subset(lambda params: False)
def test_a_per_vertex_program_ending_before_its_neighbour_keeps_its_last_window(make_env):
    """The end of input may reach a graph task while its window's iterations run: the task ends
    after that window's results are out, not before (each window's degrees are a Counter's)."""
    _, edges = ref.random_graph(31, 40, 120)
    pipeline = make_env(1).pipeline("two-per-vertex-programs")

    @pipeline.task
    def grow(ctx):
        graph = GraphView(None, ctx.source(edges, SizeTumblingWindow(15), parallelism=1),
                          directed=False)
        graph.incremental_compute(_Degree()).collect("degree")
        algorithms.incremental_bfs(graph, edges[0][0]).collect("bfs")

    folded: dict = {}
    for _, records in sorted(pipeline.execute()["grow"].by_window("degree").items()):
        folded.update(records)
    expected = Counter(v for a, b, *_ in edges for v in ((a, b) if a != b else (a,)))
    assert folded == dict(expected)
