"""Dynamic graphs with removals: ``RemoveEdge`` and ``RemoveVertex`` on a graph view's streams.

A seeded generator writes windows of changes (new edges, removals of present edges, weight changes
as a removal and the edge again, removals of vertices left without edges). The oracle keeps the
graph of every version as plain sets and asks networkx: after each window, folding the incremental
algorithms' output (``(vertex, None)`` deletes) must equal networkx on that version; static compute
must equal it in every window. Every case runs on every environment.
"""

from __future__ import annotations

import math

import pytest
from _graph_versions import change_windows, expected, fold_changes, run_changes

from gyreflow.api import SizeTumblingWindow
from gyreflow.api import graph_algorithms as algorithms
from gyreflow.api.graph import Edge, GraphView, RemoveEdge, RemoveVertex
from gyreflow.runtime.errors import DataError


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
