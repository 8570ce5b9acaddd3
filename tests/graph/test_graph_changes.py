"""Dynamic graphs with removals: ``RemoveEdge`` and ``RemoveVertex`` on a graph view's streams.

A seeded generator writes windows of changes (new edges, removals of present edges, weight changes
as a removal and the edge again, removals of vertices left without edges). The oracle keeps the
graph of every version as plain sets and asks networkx: after each window, folding the incremental
algorithms' output (``(vertex, None)`` deletes) must equal networkx on that version; static compute
must equal it in every window. Every case runs on every environment.
"""

from __future__ import annotations

import copy
import math
import random
from collections import Counter

import networkx as nx
import pytest
from _graph_versions import fold_changes
from hypothesis import given, settings
from hypothesis import strategies as st

from gyreflow.api import SizeTumblingWindow
from gyreflow.api import graph_algorithms as algorithms
from gyreflow.api.graph import (
    EVERY_VERTEX,
    Edge,
    GraphView,
    Query,
    RemoveEdge,
    RemoveVertex,
    VertexCentricCompute,
    query_graph,
)
from gyreflow.api.graph.array_algorithms import ArrayConnectedComponents
from gyreflow.api.graph.query import QuerySyntaxError
from gyreflow.api.graph_algorithms import UNREACHABLE
from gyreflow.runtime.dataflow.graph.versions import History, VersionView
from gyreflow.runtime.errors import DataError
from gyreflow.state.keys.keyed import KeyedTable, StateKind


def change_windows(seed: int, n: int, windows: int, per_window: int, removal_share: float,
                   directed: bool, detaches: int = 0):
    """``(batches, versions)``: each window's change records, and after it the graph as
    ``(vertices, {(src, dst): weight})`` (undirected: the pair in sorted order). ``detaches``: how
    many vertices that still have edges each window removes with them (``detach=True``)."""
    rng = random.Random(seed)
    vertices: set = set()
    edges: dict = {}
    batches, versions = [], []

    def norm(src, dst):
        return (src, dst) if directed else (min(src, dst), max(src, dst))

    for _ in range(windows):
        batch = []
        for _ in range(per_window):
            roll = rng.random()
            if edges and roll < removal_share:
                pair = rng.choice(sorted(edges))
                del edges[pair]
                batch.append(RemoveEdge(*pair) if rng.random() < 0.5 or directed
                             else RemoveEdge(pair[1], pair[0]))  # either order, undirected
            elif edges and roll < removal_share + 0.05:
                pair = rng.choice(sorted(edges))  # a new weight: the edge removed and added again
                edges[pair] = rng.randint(1, 9)
                batch += [RemoveEdge(*pair), Edge(*pair, edges[pair])]
            else:
                src, dst = rng.randrange(n), rng.randrange(n)
                if src == dst or norm(src, dst) in edges:
                    continue
                edges[norm(src, dst)] = rng.randint(1, 9)
                vertices |= {src, dst}
                batch.append(Edge(src, dst, edges[norm(src, dst)]))
        linked = {v for pair in edges for v in pair}
        isolated = sorted(vertices - linked)
        for vertex in rng.sample(isolated, min(2, len(isolated))):
            vertices.discard(vertex)
            batch.append(RemoveVertex(vertex))
        for vertex in rng.sample(sorted(linked), min(detaches, len(linked))):
            vertices.discard(vertex)
            for pair in [pair for pair in edges if vertex in pair]:
                del edges[pair]
            batch.append(RemoveVertex(vertex, detach=True))
        batches.append(batch)
        versions.append((set(vertices), dict(edges)))
    return batches, versions


def nx_graph(version, directed: bool):
    vertices, edges = version
    graph = nx.DiGraph() if directed else nx.Graph()
    graph.add_nodes_from(vertices)
    graph.add_weighted_edges_from((s, d, w) for (s, d), w in edges.items())
    return graph


def expected(version, directed: bool, source) -> dict[str, dict]:
    graph = nx_graph(version, directed)
    components = nx.weakly_connected_components(graph) if directed else nx.connected_components(graph)
    wcc = {v: min(component) for component in components for v in component}
    hops = nx.single_source_shortest_path_length(graph, source) if source in graph else {}
    distance = nx.single_source_dijkstra_path_length(graph, source) if source in graph else {}
    ranks = nx.pagerank(graph, alpha=0.85, tol=1e-13, max_iter=10_000, weight=None)
    return {"wcc": wcc,
            "bfs": {v: hops.get(v, UNREACHABLE) for v in graph},
            "sssp": {v: float(distance.get(v, math.inf)) for v in graph},
            "pagerank": ranks}


def run_changes(env, batches, directed: bool, source, names, parallelism: int = 2):
    pipeline = env.pipeline("changing-graph")

    @pipeline.task
    def changing(ctx):
        edges = ctx.source(batches, SizeTumblingWindow(1), parallelism=1).flat_map(list)
        graph = GraphView(None, edges, directed=directed, parallelism=parallelism)
        outputs = {"wcc": lambda: algorithms.incremental_wcc(graph),
                   "bfs": lambda: algorithms.incremental_bfs(graph, source),
                   "sssp": lambda: algorithms.incremental_sssp(graph, source),
                   "pagerank": lambda: algorithms.incremental_pagerank(graph, tolerance=1e-12),
                   "record_wcc": lambda: graph.incremental_compute(
                       algorithms.ConnectedComponents(directed)),
                   "record_bfs": lambda: graph.incremental_compute(
                       algorithms.IncrementalBreadthFirstSearch(source)),
                   "record_sssp": lambda: graph.incremental_compute(
                       algorithms.ShortestPaths(source)),
                   "static_wcc": lambda: algorithms.wcc(graph)}
        for name in names:
            outputs[name]().collect(name)

    result = pipeline.execute()
    return {name: result.by_window(name) for name in names}


@pytest.mark.parametrize("directed", [False, True], ids=["undirected", "directed"])
def test_incremental_algorithms_equal_networkx_on_every_version(make_env, directed):
    batches, versions = change_windows(7 + directed, 30, 6, 24, 0.2, directed)
    assert any(isinstance(r, RemoveVertex) for b in batches for r in b)  # the generator's reach
    source = next(r.src for r in batches[0] if isinstance(r, Edge))
    names = ["wcc", "bfs", "sssp", "pagerank", "record_wcc"]
    outputs = run_changes(make_env(), batches, directed, source, names)
    for name in names:
        folded = fold_changes(outputs[name], len(batches), exact=name != "pagerank")
        for window, version in enumerate(versions, start=1):
            want = expected(version, directed, source)["wcc" if name == "record_wcc" else name]
            got = folded[window - 1]
            if name == "pagerank":
                assert set(got) == set(want), f"pagerank vertices after window {window}"
                off = {v: (got[v], want[v]) for v in want if not math.isclose(got[v], want[v],
                                                                            rel_tol=1e-6)}
                assert not off, f"pagerank after window {window}: {off}"
            else:
                assert got == want, f"{name} after window {window}"


@pytest.mark.parametrize("environment_type", ["local"])
@pytest.mark.parametrize("directed", [False, True], ids=["undirected", "directed"])
def test_incremental_components_on_one_task_equal_networkx(make_env, directed):
    """One graph task: every edge is local, and a removal that restarts most of the graph finds the
    task's components at once (not class by class)."""
    batches, versions = change_windows(11 + directed, 40, 6, 30, 0.25, directed)
    outputs = run_changes(make_env(), batches, directed, None, ["wcc"], parallelism=1)
    folded = fold_changes(outputs["wcc"], len(batches))
    for window, version in enumerate(versions, start=1):
        assert folded[window - 1] == expected(version, directed, None)["wcc"], window


@pytest.mark.parametrize("directed", [False, True], ids=["undirected", "directed"])
def test_detached_vertices_take_their_edges_on_every_version(make_env, directed):
    """``RemoveVertex(v, detach=True)`` of vertices that still have edges, some of them added in
    the same window and some added again later: every algorithm equals networkx on each version."""
    batches, versions = change_windows(21 + directed, 30, 6, 20, 0.1, directed, detaches=2)
    assert sum(isinstance(r, RemoveVertex) and r.detach for b in batches for r in b) >= 10
    source = next(r.src for r in batches[0] if isinstance(r, Edge))
    names = ["wcc", "bfs", "sssp", "record_wcc", "static_wcc"]
    outputs = run_changes(make_env(), batches, directed, source, names)
    for name in names:
        if name == "static_wcc":
            folded = [dict(outputs[name].get(window, [])) for window in range(1, len(batches) + 1)]
        else:
            folded = fold_changes(outputs[name], len(batches))
        for window, version in enumerate(versions, start=1):
            want = expected(version, directed, source)[name if name in ("bfs", "sssp") else "wcc"]
            assert folded[window - 1] == want, f"{name} after window {window}"


def test_detaching_from_either_stream_with_string_ids(make_env):
    """String ids; detaches on the vertex stream and the edge stream, twice in one window, of a
    vertex the graph does not have, beside a RemoveEdge; per-vertex, incremental array and static
    array operators all give each version's components (a plain union-find on the edges left)."""
    edges = [[Edge("a", "b"), Edge("b", "c"), Edge("c", "d"), Edge("x", "y")],
             [RemoveVertex("zz", detach=True), RemoveVertex("b", detach=True),
              RemoveVertex("b", detach=True), RemoveEdge("c", "d")],
             [Edge("b", "d"), RemoveVertex("y", detach=True)]]
    vertices = [[], [], [RemoveVertex("x", detach=True)]]
    versions = [({"a", "b", "c", "d", "x", "y"}, [("a", "b"), ("b", "c"), ("c", "d"), ("x", "y")]),
                ({"a", "c", "d", "x", "y"}, [("x", "y")]),
                ({"a", "b", "c", "d"}, [("b", "d")])]
    pipeline = make_env().pipeline("detach-strings")

    @pipeline.task
    def detaching(ctx):
        edge_stream = ctx.source(edges, SizeTumblingWindow(1), parallelism=1).flat_map(list)
        vertex_stream = ctx.source(vertices, SizeTumblingWindow(1), parallelism=1).flat_map(list)
        graph = GraphView(vertex_stream, edge_stream, directed=True, parallelism=2)
        algorithms.incremental_wcc(graph).collect("wcc")
        graph.incremental_compute(algorithms.ConnectedComponents(True)).collect("record_wcc")
        algorithms.wcc(graph).collect("static_wcc")

    result = pipeline.execute()
    for name in ("wcc", "record_wcc", "static_wcc"):
        by_window = result.by_window(name)
        folded = ([dict(by_window.get(w, [])) for w in (1, 2, 3)] if name == "static_wcc"
                  else fold_changes(by_window, 3))
        for window, (names, pairs) in enumerate(versions, start=1):
            want = union_find_labels(names, pairs)
            assert folded[window - 1] == want, f"{name}, window {window}"


def union_find_labels(names, pairs) -> dict:
    """Each vertex's smallest component member, by union-find."""
    parent = {v: v for v in names}

    def root(v):
        while parent[v] != v:
            v = parent[v]
        return v

    for a, b in pairs:
        ra, rb = root(a), root(b)
        parent[max(ra, rb)] = min(ra, rb)
    return {v: root(v) for v in names}


def test_a_detached_vertex_added_again_has_none_of_its_old_edges(make_env):
    """Vertex 2 goes with its edges to 1, 3 and 5 (held by other tasks); an edge 2 -> 6 brings it
    back alone: 1 must not be in its component, which a half left behind at 1 would make it."""
    batches = [[Edge(1, 2), Edge(2, 3), Edge(3, 4), Edge(5, 2)], [RemoveVertex(2, detach=True)],
               [Edge(2, 6)]]
    outputs = run_changes(make_env(), batches, True, 1, ["static_wcc", "wcc", "record_wcc"])
    assert dict(outputs["static_wcc"][3]) == {1: 1, 2: 2, 3: 3, 4: 3, 5: 5, 6: 2}
    for name in ("wcc", "record_wcc"):
        assert fold_changes(outputs[name], 3)[2] == {1: 1, 2: 2, 3: 3, 4: 3, 5: 5, 6: 2}, name


@pytest.mark.parametrize("environment_type", ["local"])
def test_static_compute_sees_every_version_without_the_removed_elements(make_env):
    batches, versions = change_windows(11, 25, 5, 20, 0.3, False)
    outputs = run_changes(make_env(), batches, False, 0, ["static_wcc"])
    for window, version in enumerate(versions, start=1):
        got = dict(outputs["static_wcc"][window])
        assert got == expected(version, False, 0)["wcc"], f"window {window}"


@pytest.mark.parametrize("environment_type", ["local"])
def test_a_removal_restarts_only_the_component_it_split(make_env):
    """Two components; a window removes an edge of the first: the second emits nothing."""
    batches = [[Edge(1, 2), Edge(2, 3), Edge(10, 11), Edge(11, 12)], [RemoveEdge(2, 3)]]
    outputs = run_changes(make_env(), batches, False, 1, ["wcc", "record_wcc"])
    assert sorted(outputs["wcc"][2]) == [(3, 3)]
    assert sorted(outputs["record_wcc"][2]) == [(3, 3)]


@pytest.mark.parametrize("environment_type", ["local"])
def test_removing_a_vertex_that_still_has_edges_names_it(make_env):
    batches = [[Edge(1, 2), Edge(2, 3)], [RemoveVertex(2), RemoveEdge(1, 2)]]
    for name in ("wcc", "record_wcc"):
        with pytest.raises(DataError) as failure:
            run_changes(make_env(), batches, False, 1, [name])
        text = str(failure.value)
        assert "RemoveVertex(2) refused: vertex 2 still has 1 edge(s)" in text, text
        assert "RemoveEdge" in text, text
        assert "detach=True" in text, text
        assert failure.value.window == 2


@pytest.mark.parametrize("environment_type", ["local"])
def test_a_removed_and_added_again_vertex_comes_back(make_env):
    batches = [[Edge(1, 2)], [RemoveEdge(1, 2), RemoveVertex(2)], [Edge(3, 2)]]
    outputs = run_changes(make_env(), batches, False, 1, ["wcc", "record_wcc"])
    for name in ("wcc", "record_wcc"):
        assert fold_changes(outputs[name], 3) == [{1: 1, 2: 1}, {1: 1}, {1: 1, 2: 2, 3: 2}], name


# --- versions -----------------------------------------------------------------------------------


def run_versions(env, batches, requests, directed: bool, retained: int | None, k: int = 2):
    """k-hop traversals whose requests ``(key, start, version)`` name a version, and WCC on the
    latest completed version, in every window."""
    pipeline = env.pipeline("graph-versions")

    @pipeline.task
    def versions(ctx):
        edges = ctx.source(batches, SizeTumblingWindow(1), parallelism=1).flat_map(list)
        asked = ctx.source(requests, SizeTumblingWindow(1), parallelism=1).flat_map(list)
        graph = GraphView(None, edges, directed=directed, parallelism=2,
                          retained_versions=retained)
        graph.traversal(asked, algorithms.KHopNeighbourhood(k), version=_third).collect("khop")
        graph.snapshot().compute(algorithms.ConnectedComponents(directed)).collect("completed")
        graph.snapshot(2).compute(algorithms.ConnectedComponents(directed)).collect("second")

    result = pipeline.execute()
    return {name: result.by_window(name) for name in ("khop", "completed", "second")}


def _third(request):
    return request[2]


def khop_oracle(version, directed: bool, start, k: int) -> dict:
    graph = nx_graph(version, directed)
    if start not in graph:
        return {}
    return nx.single_source_shortest_path_length(graph, start, cutoff=k)


@pytest.mark.parametrize("directed", [False, True], ids=["undirected", "directed"])
def test_traversals_and_snapshots_read_the_versions_they_name(make_env, directed):
    batches, versions = change_windows(3 + directed, 25, 6, 20, 0.25, directed, detaches=1)
    rng = random.Random(5)
    requests, asked = [], {}
    for window in range(1, len(batches) + 1):
        here = []
        for i in range(3):
            version = rng.choice([None, "completed", *range(max(0, window - 2), window + 1)])
            key, start = f"w{window}r{i}", rng.randrange(25)
            here.append((key, start, version))
            number = window if version is None else window - 1 if version == "completed" else version
            asked[key] = (window, start, number)
        requests.append(here)
    outputs = run_versions(make_env(), batches, requests, directed, retained=2)
    states = [(set(), {})] + versions  # version 0: the empty graph
    got: dict = {}
    for window, records in outputs["khop"].items():
        for key, vertex, hops in records:
            assert asked[key][0] == window, f"{key} answered in window {window}"
            got.setdefault(key, {})[vertex] = hops
    for key, (_, start, number) in asked.items():
        assert got.get(key, {}) == khop_oracle(states[number], directed, start, 2), key
    for window in range(1, len(batches) + 1):
        want = expected(states[window - 1], directed, 0)["wcc"]
        assert dict(outputs["completed"].get(window, [])) == want, f"completed, window {window}"
    assert {w for w, records in outputs["second"].items() if records} == {2}
    assert dict(outputs["second"][2]) == expected(states[2], directed, 0)["wcc"]


def run_array_versions(env, batches, directed: bool, source, names=("wcc", "sssp", "pagerank")):
    """The library's array algorithms (static) on the latest completed version in every window,
    and WCC on version 2 in window 2."""
    pipeline = env.pipeline("array-versions")

    @pipeline.task
    def versions(ctx):
        edges = ctx.source(batches, SizeTumblingWindow(1), parallelism=1).flat_map(list)
        graph = GraphView(None, edges, directed=directed, parallelism=2, retained_versions=2)
        completed = graph.snapshot()
        jobs = {"wcc": lambda: algorithms.wcc(completed),
                "sssp": lambda: algorithms.sssp(completed, source),
                "pagerank": lambda: algorithms.pagerank(completed, iterations=30)}
        for name in names:
            jobs[name]().collect(name)
        graph.snapshot(2).compute(ArrayConnectedComponents(directed), name="second"
                                  ).collect("second")

    result = pipeline.execute()
    return {name: result.by_window(name) for name in (*names, "second")}


def check_array_versions(outputs, versions, directed: bool, source) -> None:
    states = [(set(), {})] + versions
    for window in range(1, len(versions) + 1):
        version = states[window - 1]
        want = expected(version, directed, source)
        for name in ("wcc", "sssp"):
            if name in outputs:
                got = dict(outputs[name].get(window, []))
                assert got == want[name], f"{name}, window {window}"
        if "pagerank" in outputs:
            ranks = dict(outputs["pagerank"].get(window, []))
            oracle = pagerank_oracle(version, directed) if version[0] else {}
            assert ranks.keys() == oracle.keys(), f"pagerank vertices, window {window}"
            off = {v: (ranks[v], oracle[v]) for v in oracle
                   if not math.isclose(ranks[v], oracle[v], rel_tol=1e-9)}
            assert not off, f"pagerank, window {window}: {off}"
    assert {w for w, records in outputs["second"].items() if records} == {2}
    assert dict(outputs["second"][2]) == expected(states[2], directed, 0)["wcc"]


def pagerank_oracle(version, directed: bool, iterations: int = 30) -> dict:
    """Graphalytics PageRank (dangling ranks spread evenly) by a plain loop over the version."""
    vertices, edges = version
    out = {v: [] for v in vertices}
    for src, dst in edges:
        out[src].append(dst)
        if not directed:
            out[dst].append(src)
    n = len(vertices)
    rank = {v: 1.0 / n for v in vertices}
    for _ in range(iterations):
        dangling = sum(rank[v] for v in vertices if not out[v])
        new = {v: (1 - 0.85) / n + 0.85 * dangling / n for v in vertices}
        for v, targets in out.items():
            for target in targets:
                new[target] += 0.85 * rank[v] / len(targets)
        rank = new
    return rank


@pytest.mark.parametrize("directed", [False, True], ids=["undirected", "directed"])
def test_array_programs_compute_on_the_versions_they_name(make_env, directed):
    """``snapshot().compute`` with array programs (WCC, SSSP, PageRank of the library) on a
    changing graph with edge and detached-vertex removals, against networkx and a plain loop on
    each version."""
    batches, versions = change_windows(31 + directed, 25, 5, 18, 0.2, directed, detaches=1)
    source = next(r.src for r in batches[0] if isinstance(r, Edge))
    outputs = run_array_versions(make_env(), batches, directed, source)
    check_array_versions(outputs, versions, directed, source)


@pytest.mark.parametrize("environment_type", ["spark"])
def test_array_programs_on_versions_in_spark_rounds(make_env):
    """Spark's rounds mode moves a task between processes every superstep: the version's
    partition is built again from the chunks and their history."""
    batches, versions = change_windows(33, 12, 3, 10, 0.2, False, detaches=1)
    source = next(r.src for r in batches[0] if isinstance(r, Edge))
    outputs = run_array_versions(make_env(**{"spark.mode": "rounds"}), batches, False, source,
                                 names=("wcc",))
    check_array_versions(outputs, versions, False, source)


@pytest.mark.parametrize("environment_type", ["local"])
@pytest.mark.parametrize(("retained", "configured"), [(2, 0), (None, 2)],
                         ids=["argument", "graph.retained_versions"])
def test_a_version_beyond_the_retained_ones_is_refused_naming_it(make_env, retained, configured):
    batches = [[Edge(1, 2)], [Edge(2, 3)], [Edge(3, 4)], [Edge(4, 5)]]
    requests = [[], [], [], [("late", 1, 1)]]
    env = make_env(**{"graph.retained_versions": configured})
    with pytest.raises(DataError) as failure:
        run_versions(env, batches, requests, False, retained=retained)
    text = str(failure.value).splitlines()[0]
    assert "version 1, which is not readable in window 4" in text and "2..4" in text, text
    assert "keep at least 3" in text, text
    assert failure.value.window == 4


@pytest.mark.parametrize("environment_type", ["local"])
def test_a_snapshot_needs_retained_versions(make_env):
    pipeline = make_env().pipeline("no-versions")

    @pipeline.task
    def build(ctx):
        edges = ctx.source([(1, 2)])
        with pytest.raises(ValueError, match="retained_versions >= 1"):
            GraphView(None, edges).snapshot()
        ctx.source([1]).collect("nothing")

    pipeline.execute()
    pipeline = make_env(**{"graph.retained_versions": 3}).pipeline("configured")

    @pipeline.task
    def configured(ctx):
        edges = ctx.source([(1, 2)])
        assert GraphView(None, edges).retained_versions == 3
        assert GraphView(None, edges, retained_versions=1).retained_versions == 1
        ctx.source([1]).collect("nothing")

    pipeline.execute()


@pytest.mark.parametrize("environment_type", ["local", "workers"])
def test_queries_name_the_version_they_ask_about(make_env):
    """Ann knows Bo in version 1; window 2 replaces Bo with Cy: a request about version 1 still
    finds Bo, one about the current version finds Cy, and the plain-loop answer agrees."""
    people = {1: {"label": "Person", "name": "Ann"}, 2: {"label": "Person", "name": "Bo"},
              3: {"label": "Person", "name": "Cy"}}
    knows = {"label": "KNOWS"}
    windows = [[Edge(1, 2, knows)], [RemoveEdge(1, 2), Edge(1, 3, knows)], []]
    edges_at = {1: {(1, 2)}, 2: {(1, 3)}, 3: {(1, 3)}}
    asks = [[], [("old", {}, 1), ("now", {}, None)], [("before", {}, "completed")]]
    query = Query("MATCH (a:Person {name: 'Ann'})-[:KNOWS]->(b) RETURN b.name")
    pipeline = make_env().pipeline("versioned-queries")

    @pipeline.task
    def versioned(ctx):
        vertices = ctx.source([list(people.items()), [], []], SizeTumblingWindow(1),
                              parallelism=1).flat_map(list)
        edges = ctx.source(windows, SizeTumblingWindow(1), parallelism=1).flat_map(list)
        requests = ctx.source(asks, SizeTumblingWindow(1), parallelism=1).flat_map(list)
        graph = GraphView(vertices, edges, parallelism=2, retained_versions=2)
        query_graph(graph, query, requests, list(people), versions=True).collect("matches")

    matches = pipeline.execute().output("matches")
    window_of = {request[0]: w for w, here in enumerate(asks, 1) for request in here}
    for request_id, _, version in (r for here in asks for r in here):
        number = {None: window_of[request_id], "completed": window_of[request_id] - 1}.get(
            version, version)
        want = sorted(people[dst]["name"] for src, dst in edges_at[number] if src == 1)
        got = query.rows([m for r, m in matches if r == request_id])
        assert sorted(row["b.name"] for row in got) == want, request_id


def people_windows(seed: int = 9, windows: int = 5):
    """Windows of a changing property graph: new people, new ages for some, KNOWS edges added and
    removed, people without edges removed, every other window one with them (``detach``); and
    every version as ``(values, edges)`` (version 0: empty)."""
    rng = random.Random(seed)
    values: dict = {}
    edges: set = set()
    vertex_windows, edge_windows, versions = [], [], {0: ({}, set())}
    next_id = 0
    for window in range(1, windows + 1):
        changed = []
        for i in range(next_id, next_id + 8):
            changed.append((i, {"label": "Person", "name": f"p{i}", "age": rng.randint(18, 70)}))
        next_id += 8
        for i in rng.sample(sorted(values), min(3, len(values))):  # a new age for some
            changed.append((i, {**values[i], "age": rng.randint(18, 70)}))
        values.update(changed)
        here = []
        for _ in range(12):
            a, b = rng.sample(sorted(values), 2)
            if (a, b) not in edges:
                edges.add((a, b))
                here.append(Edge(a, b, {"label": "KNOWS"}))
        for a, b in rng.sample(sorted(edges), min(3, len(edges))):
            edges.discard((a, b))
            here.append(RemoveEdge(a, b))
        linked = {v for edge in edges for v in edge}
        for vid in sorted(set(values) - linked)[:2]:  # removed after the window's other changes
            del values[vid]
            changed.append((vid, RemoveVertex(vid)))
        if window % 2 == 0:  # someone who still knows people leaves, with their edges
            vid = rng.choice(sorted(linked))
            del values[vid]
            edges = {edge for edge in edges if vid not in edge}
            changed.append((vid, RemoveVertex(vid, detach=True)))
        vertex_windows.append(changed)
        edge_windows.append(here)
        versions[window] = (copy.deepcopy(values), set(edges))
    return vertex_windows, edge_windows, versions


def test_queries_start_at_every_vertex_of_the_version_they_read(make_env, environment_type):
    """No vertex ids given: each request starts at every vertex of its version, which changes every
    window (new people, new ages, edges removed); checked against plain loops on each version."""
    vertex_windows, edge_windows, versions = people_windows()
    asks = [[(f"w{w}-{kind}", {"age": 40}, version) for kind, version in
             (("now", None), ("completed", "completed"), ("first", 1))]
            for w in range(1, len(edge_windows) + 1)]
    older = Query("MATCH (a:Person)-[:KNOWS]->(b:Person) WHERE b.age > $age "
                  "RETURN a.name AS a, b.name AS b")
    reach = Query("MATCH (a:Person)-[:KNOWS*2]->(c) RETURN a.name AS a, count(*) AS n")
    people = Query("MATCH (a:Person) WHERE a.age > $age RETURN count(*) AS n")
    pipeline = make_env().pipeline("queries-everywhere")

    @pipeline.task
    def everywhere(ctx):
        vertices = ctx.source(vertex_windows, SizeTumblingWindow(1), parallelism=1).flat_map(list)
        edges = ctx.source(edge_windows, SizeTumblingWindow(1), parallelism=1).flat_map(list)
        requests = ctx.source(asks, SizeTumblingWindow(1), parallelism=1).flat_map(list)
        graph = GraphView(vertices, edges, parallelism=2, retained_versions=len(edge_windows))
        query_graph(graph, older, requests, versions=True, name="older").collect("older")
        query_graph(graph, reach, requests, versions=True, name="reach").collect("reach")
        query_graph(graph, people, requests, versions=True, name="people").collect("people")

    result = pipeline.execute()
    for window, here in enumerate(asks, 1):
        for request_id, params, version in here:
            number = {None: window, "completed": window - 1}.get(version, version)
            values, edges = versions[number]
            name = {v: value["name"] for v, value in values.items()}
            want = Counter((name[a], name[b]) for a, b in edges if values[b]["age"] > 40)
            got = older.rows([m for r, m in result.output("older") if r == request_id], params)
            assert Counter((row["a"], row["b"]) for row in got) == want, request_id
            paths = Counter(name[a] for a, b in edges for x, c in edges if x == b and (x, c) != (a, b))
            got = reach.rows([m for r, m in result.output("reach") if r == request_id], params)
            assert {row["a"]: row["n"] for row in got} == dict(paths), request_id
            got = people.rows([m for r, m in result.output("people") if r == request_id], params)
            assert got == [{"n": sum(value["age"] > 40 for value in values.values())}], request_id
    assert any(versions[w][1] != versions[w - 1][1] for w in range(2, len(edge_windows) + 1))
    assert any(set(versions[w - 1][0]) - set(versions[w][0]) for w in range(2, len(edge_windows) + 1))


class OutDegrees(VertexCentricCompute):
    """A request ``(key, None)`` asks every vertex for its out-degree, ``(key, v)`` only ``v``."""

    starts_at_every_vertex = True
    max_iterations = 2

    def start(self, request):
        key, target = request
        return [(EVERY_VERTEX if target is None else target, key)]

    def compute(self, vertex, messages):
        for key in messages:
            vertex.emit((key, vertex.id, len(vertex.out_edges)))


@pytest.mark.parametrize("environment_type", ["local", "workers"])
def test_a_program_starts_at_every_vertex_or_at_the_ones_it_names(make_env):
    edges = [(a, b) for a in range(12) for b in range(a + 1, 12) if (a * b) % 5 == 1]
    asks = [("all", None), ("three", 3), ("eleven", 11)]
    pipeline = make_env().pipeline("every-vertex")

    @pipeline.task
    def degrees(ctx):
        graph = GraphView(ctx.source([(v, None) for v in range(12)]), ctx.source(edges),
                          parallelism=2)
        graph.traversal(ctx.source(asks), OutDegrees()).collect("degrees")

    got = sorted(pipeline.execute().output("degrees"))
    degree = Counter(a for a, _ in edges)
    want = sorted([("all", v, degree[v]) for v in range(12)]
                  + [("three", 3, degree[3]), ("eleven", 11, degree[11])])
    assert got == want


def test_a_query_whose_patterns_share_nothing_needs_vertex_ids():
    query = Query("MATCH (a)-[:KNOWS]->(b), (c)-[:KNOWS]->(d) RETURN a, c")
    with pytest.raises(QuerySyntaxError, match=r"pattern starting at \(c\) shares no variable"):
        query.program()
    assert query.program([1, 2]).vertex_ids == (1, 2)
    Query("MATCH (a)-[:KNOWS]->(b), (b)-[:KNOWS]->(d) RETURN a, d").program()  # joined: fine


# --- the history behind versions, alone -----------------------------------------------------------


@settings(max_examples=60)
@given(st.integers(0, 3), st.lists(st.lists(st.tuples(st.integers(0, 7), st.integers(0, 7),
                                                      st.booleans()), max_size=6), max_size=25))
def test_a_version_view_equals_a_copy_taken_at_that_version(retained, windows):
    """Random edge changes window by window; the view of every retained version equals a deep copy
    of the graph taken when that version was current, nothing older is kept, and the changes a
    snapshot writes (written keys, then removed ones) rebuild the history exactly."""
    table = KeyedTable("g:history", StateKind.VALUE)
    graph: dict = {}
    history = History(retained)
    copies = {0: {}}
    persisted: dict = {}  # the history as the snapshots so far would restore it
    for window, changes in enumerate(windows, start=1):
        history.trim(table, window)
        history.remember(table, graph, window, {src for src, _, _ in changes})
        for src, dst, add in changes:
            entry = graph.setdefault(src, [None, [], None, [], None])
            if add:
                entry[1].append(dst)
            elif dst in entry[1]:
                entry[1] = [d for d in entry[1] if d != dst]
        copies[window] = copy.deepcopy(graph)
        for version in range(history.oldest(window), window + 1):
            view = VersionView(graph, table.data, version)
            assert dict(view.items()) == copies[version], (window, version)
        assert all(window - retained < image[0] or image[0] == window
                   for images in table.data.values() for image in images)
        assert len(history.index) <= retained + 1
        written, removed = table.take_changes()  # what a snapshot of the window persists
        persisted.update(copy.deepcopy(written))
        for vid in removed:
            persisted.pop(vid, None)
        assert persisted == table.data, window
