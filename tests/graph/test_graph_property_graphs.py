"""The library's algorithms on property graphs (edge values that are property maps or
``(label, properties)`` pairs, as docs/graphs.md stores them): unweighted algorithms ignore the
values, weighted ones read the property they name, and an edge without it stops the job with one
error naming the algorithm, the edge and the property. Oracles: networkx on the same property
graph, and the plain-Python Graphalytics references of ``graph_reference`` (checked against
networkx in test_graph_algorithms.py) for fixed-iteration PageRank, CDLP and LCC."""

from __future__ import annotations

import math
import random
import subprocess
import sys

import graph_reference as ref
import networkx as nx
import pytest
from _environments import environment_flags

from gyreflow.api import AllWindow, SizeTumblingWindow
from gyreflow.api.graph import Edge, GraphView, RemoveEdge, algorithms
from gyreflow.api.graph.array_algorithms import ArrayShortestPaths, edge_weight
from gyreflow.runtime.errors import DataError

DAMPING, PR_ITERATIONS, CDLP_ITERATIONS = 0.85, 12, 5


def property_graph(seed: int, n: int, m: int) -> tuple[list, list]:
    """``(vertices, edges)``: vertices ``(id, {"label": ..., "name": ...})``; edges ``(src, dst,
    value)`` whose value is a property map with ``weight`` and ``km``, or a ``(type, properties)``
    pair; no self-loops, no pair twice (in either direction: the undirected oracle too)."""
    rng = random.Random(seed)
    vertices = [(v, {"label": "Person", "name": f"p{v}"}) for v in range(n)]
    pairs: dict = {}
    while len(pairs) < m:
        a, b = rng.randrange(n - 2), rng.randrange(n - 2)  # n-2, n-1: isolated
        if a != b and (b, a) not in pairs:
            pairs[(a, b)] = {"weight": rng.randint(1, 9), "km": round(rng.uniform(0.5, 5), 2)}
    edges = []
    for (a, b), properties in pairs.items():
        value = ({"label": "KNOWS", **properties} if rng.random() < 0.6
                 else ("ROAD", dict(properties)))
        edges.append((a, b, value))
    return vertices, edges


def nx_graph(vertices, edges, directed: bool):
    graph = nx.DiGraph() if directed else nx.Graph()
    graph.add_nodes_from(v for v, _ in vertices)
    for a, b, value in edges:
        properties = value[1] if isinstance(value, tuple) else value
        graph.add_edge(a, b, **properties)
    return graph


def oracle(vertices, edges, directed: bool, source) -> dict[str, dict]:
    graph = nx_graph(vertices, edges, directed)
    ids = [v for v, _ in vertices]
    plain = [(a, b) for a, b, _ in edges]
    components = (nx.weakly_connected_components(graph) if directed
                  else nx.connected_components(graph))
    hops = nx.single_source_shortest_path_length(graph, source)
    want = {
        "wcc": {v: min(c) for c in components for v in c},
        "bfs": {v: hops.get(v, ref.UNREACHABLE) for v in ids},
        "pagerank": ref.pagerank(ids, plain, directed, DAMPING, PR_ITERATIONS),
        "cdlp": ref.cdlp(ids, plain, directed, CDLP_ITERATIONS),
        "lcc": ref.lcc(ids, plain, directed),
        "converged": nx.pagerank(graph, alpha=DAMPING, tol=1e-13, max_iter=10_000, weight=None),
    }
    for key in ("weight", "km", None):
        distance = nx.single_source_dijkstra_path_length(graph, source, weight=key or (
            lambda a, b, data: 1))
        want[f"sssp-{key}"] = {v: float(distance.get(v, math.inf)) for v in ids}
    want["ibfs"], want["iwcc"] = want["bfs"], want["wcc"]
    want["isssp-weight"] = want["sssp-weight"]
    return want


ARRAY = {
    "wcc": lambda g, s: algorithms.wcc(g),
    "bfs": lambda g, s: algorithms.bfs(g, s),
    "pagerank": lambda g, s: algorithms.pagerank(g, DAMPING, PR_ITERATIONS),
    "cdlp": lambda g, s: algorithms.cdlp(g, CDLP_ITERATIONS),
    "lcc": lambda g, s: algorithms.lcc(g),
    "sssp-weight": lambda g, s: algorithms.sssp(g, s),
    # sssp's own program under other operator names (one pipeline task names each once)
    "sssp-km": lambda g, s: g.compute(ArrayShortestPaths(s, weight="km"), name="sssp-km"),
    "sssp-None": lambda g, s: g.compute(ArrayShortestPaths(s, weight=None), name="sssp-none"),
    "iwcc": lambda g, s: algorithms.incremental_wcc(g),
    "ibfs": lambda g, s: algorithms.incremental_bfs(g, s),
    "isssp-weight": lambda g, s: algorithms.incremental_sssp(g, s),
    "converged": lambda g, s: algorithms.incremental_pagerank(g, DAMPING, tolerance=1e-12),
}
PER_VERTEX = {
    "wcc": lambda g, s: g.compute(algorithms.ConnectedComponents(g.directed)),
    "bfs": lambda g, s: g.compute(algorithms.BreadthFirstSearch(s)),
    "pagerank": lambda g, s: g.compute(algorithms.PageRank(DAMPING, PR_ITERATIONS)),
    "cdlp": lambda g, s: g.compute(algorithms.LabelPropagation(CDLP_ITERATIONS, g.directed)),
    "lcc": lambda g, s: g.compute(algorithms.LocalClusteringCoefficient()),
    "sssp-weight": lambda g, s: g.compute(algorithms.ShortestPaths(s)),
    "sssp-km": lambda g, s: g.compute(algorithms.ShortestPaths(s, weight="km")),
    "sssp-None": lambda g, s: g.compute(algorithms.ShortestPaths(s, weight=None)),
    "iwcc": lambda g, s: g.incremental_compute(algorithms.IncrementalConnectedComponents(
        g.directed)),
    "ibfs": lambda g, s: g.incremental_compute(algorithms.IncrementalBreadthFirstSearch(s)),
}


def run(env, vertices, edges, directed: bool, source, programs: dict) -> dict[str, dict]:
    pipeline = env.pipeline("property-graph")

    @pipeline.task
    def compute(ctx):
        graph = GraphView(ctx.source(vertices, AllWindow()), ctx.source(edges, AllWindow()),
                          directed=directed, parallelism=2)
        for name, make in programs.items():
            make(graph, source).collect(name)

    result = pipeline.execute()
    return {name: dict(result.output(name)) for name in programs}


def check(got: dict[str, dict], want: dict[str, dict]) -> None:
    for name, values in got.items():
        expected = want[name]
        assert values.keys() == expected.keys(), name
        off = {v: (values[v], x) for v, x in expected.items()
               if not (values[v] == x or math.isclose(values[v], x, rel_tol=1e-7, abs_tol=1e-12))}
        assert not off, f"{name}: vertex: (got, expected) {dict(list(off.items())[:5])}"


@pytest.mark.parametrize("directed", [True, False], ids=["directed", "undirected"])
def test_array_algorithms_on_a_property_graph_equal_networkx(make_env, directed):
    vertices, edges = property_graph(3 + directed, 16, 30)
    got = run(make_env(), vertices, edges, directed, 0, ARRAY)
    check(got, oracle(vertices, edges, directed, 0))


@pytest.mark.parametrize("environment_type", ["local", "workers"])
@pytest.mark.parametrize("directed", [True, False], ids=["directed", "undirected"])
def test_per_vertex_programs_on_a_property_graph_equal_networkx(make_env, directed):
    vertices, edges = property_graph(5 + directed, 16, 30)
    got = run(make_env(), vertices, edges, directed, 0, PER_VERTEX)
    check(got, oracle(vertices, edges, directed, 0))


def test_edge_weight_reads_numbers_maps_and_pairs():
    assert edge_weight(3, "weight", "sssp", 1, 2) == 3.0
    assert edge_weight(None, "weight", "sssp", 1, 2) == 1.0
    assert edge_weight({"weight": 2.5}, "weight", "sssp", 1, 2) == 2.5
    assert edge_weight(("ROAD", {"km": 4}), "km", "sssp", 1, 2) == 4.0
    assert edge_weight({"weight": 2.5}, None, "sssp", 1, 2) == 1.0
    with pytest.raises(DataError, match=r"sssp: edge 1 -> 2 has no property 'km'"):
        edge_weight({"label": "KNOWS", "weight": 2}, "km", "sssp", 1, 2)
    with pytest.raises(DataError, match=r"has 'far', not a number, as property 'km'"):
        edge_weight(("ROAD", {"km": "far"}), "km", "sssp", 1, 2)


MISSING = [[(1, 2, {"label": "KNOWS", "weight": 2})], [(2, 3, {"label": "KNOWS"})]]


@pytest.mark.parametrize("environment_type", ["local", "workers"])
@pytest.mark.parametrize("name", ["sssp", "incremental_sssp", "ShortestPaths"])
def test_an_edge_without_the_weight_property_is_named(make_env, name):
    pipeline = make_env().pipeline("missing-weight")

    @pipeline.task
    def compute(ctx):
        edges = ctx.source(MISSING, SizeTumblingWindow(1), parallelism=1).flat_map(list)
        graph = GraphView(None, edges, directed=True)
        if name == "ShortestPaths":
            graph.incremental_compute(algorithms.ShortestPaths(1)).collect("out")
        else:
            getattr(algorithms, name)(graph, 1).collect("out")

    with pytest.raises(DataError) as failure:
        pipeline.execute()
    text = str(failure.value)
    assert f"{name}: edge 2 -> 3 has no property 'weight'" in text, text
    assert "weight='KEY'" in text and "weight=None" in text, text
    assert failure.value.window == 2


SCRIPT = """
from gyreflow.api import Environment, SizeTumblingWindow
from gyreflow.api.graph import Edge, GraphView, RemoveEdge, algorithms

p = Environment.from_config().pipeline("roads")

@p.task
def roads(ctx):
    edges = ctx.source({windows!r}, SizeTumblingWindow(1), parallelism=1).flat_map(list)
    graph = GraphView(None, edges, directed=True)
    algorithms.wcc(graph).collect("wcc")
    algorithms.sssp(graph, 1).collect("sssp")

p.execute()
"""


@pytest.mark.processes
@pytest.mark.parametrize("environment_type", ["local", "workers"])
def test_a_missing_weight_is_one_error_line_with_exit_5(tmp_path, environment_type):
    """Piped as a log sees it: exit 5 (input the job cannot use), one ``error:`` line naming the
    algorithm, the edge and the property, a hint that is true, no traceback."""
    script = tmp_path / "roads.py"
    script.write_text(SCRIPT.format(windows=MISSING), encoding="utf-8")
    command = [sys.executable, "-m", "gyreflow", "run", "-q", *environment_flags(environment_type),
               str(script)]
    env = {"PATH": "/usr/bin:/bin", "COLUMNS": "400", "GYREFLOW_STATE__BACKEND": "rocksdb",
           "GYREFLOW_STATE__PATH": str(tmp_path / "state")}
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False,
                          env=env, cwd=tmp_path)
    assert done.returncode == 5, done.stderr
    lines = done.stderr.splitlines()
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1, done.stderr
    assert "failed in window 2" in errors[0], errors
    assert "sssp: edge 2 -> 3 has no property 'weight'" in errors[0], errors
    assert "Traceback" not in done.stderr and "fix the function" not in done.stderr, done.stderr
    assert lines[-1] == ("Completed windows are kept: fix the input (the data, or the system it "
                         "comes from) and run again with --resume."), done.stderr


@pytest.mark.parametrize("environment_type", ["local", "workers"])
@pytest.mark.parametrize("directed", [True, False], ids=["directed", "undirected"])
def test_khop_on_a_property_graph_equals_networkx(make_env, directed):
    vertices, edges = property_graph(9 + directed, 16, 30)
    starts = [0, 3, 15]
    pipeline = make_env().pipeline("property-khop")

    @pipeline.task
    def reach(ctx):
        graph = GraphView(ctx.source(vertices, AllWindow()), ctx.source(edges, AllWindow()),
                          directed=directed, parallelism=2)
        algorithms.khop(graph, ctx.source([(s, s) for s in starts], AllWindow()), 2).collect("k")

    got = dict(pipeline.execute().output("k"))
    graph = nx_graph(vertices, edges, directed)
    assert got == {s: nx.single_source_shortest_path_length(graph, s, cutoff=2) for s in starts}


@pytest.mark.parametrize("environment_type", ["local", "workers"])
def test_a_reweighted_property_edge_is_read_again(make_env):
    """Weights read in one window are not kept for the next: an edge removed and added again with
    another ``weight`` property changes the distances (networkx on each version)."""
    windows = [[Edge(1, 2, {"label": "ROAD", "weight": 5}), Edge(2, 3, ("ROAD", {"weight": 1})),
                Edge(1, 3, {"label": "ROAD", "weight": 9})],
               [RemoveEdge(1, 2), Edge(1, 2, {"label": "ROAD", "weight": 1})],
               [RemoveEdge(2, 3), Edge(2, 3, ("ROAD", {"weight": 20}))]]
    pipeline = make_env().pipeline("reweighted")

    @pipeline.task
    def roads(ctx):
        edges = ctx.source(windows, SizeTumblingWindow(1), parallelism=1).flat_map(list)
        graph = GraphView(None, edges, directed=True, parallelism=2)
        algorithms.incremental_sssp(graph, 1).collect("incremental")
        algorithms.sssp(graph, 1).collect("static")

    result = pipeline.execute()
    folded: dict = {}
    graph = nx.DiGraph()
    for window, changes in enumerate(windows, start=1):
        for change in changes:
            if isinstance(change, Edge):
                value = change.value
                graph.add_edge(change.src, change.dst,
                               **(value[1] if isinstance(value, tuple) else value))
        want = {v: float(d) for v, d in nx.single_source_dijkstra_path_length(graph, 1).items()}
        folded.update(result.by_window("incremental").get(window, []))
        assert folded == want, window
        assert dict(result.by_window("static")[window]) == want, window
