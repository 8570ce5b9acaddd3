"""Reading graph versions: traversals, snapshots and array programs, retained versions, their history."""

from __future__ import annotations

import copy
import math
import random

import networkx as nx
import pytest
from _graph_versions import change_windows, expected, nx_graph
from hypothesis import given, settings
from hypothesis import strategies as st

from gyreflow.api import SizeTumblingWindow
from gyreflow.api import graph_algorithms as algorithms
from gyreflow.api.graph import Edge, GraphView
from gyreflow.api.graph.array_algorithms import ArrayConnectedComponents
from gyreflow.runtime.dataflow.graph.versions import History, VersionView
from gyreflow.runtime.errors import DataError
from gyreflow.state.keys.keyed import KeyedTable, StateKind


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
