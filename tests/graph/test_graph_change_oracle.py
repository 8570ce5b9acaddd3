"""Incremental algorithms against networkx on windows of additions and removals that Hypothesis
makes: removals of the source, of bridge edges, of vertices other values rested on, and vertices
added again later. After every window, the folded upsert stream of ``incremental_bfs``,
``incremental_sssp``, ``incremental_wcc`` and ``incremental_pagerank`` (array programs) and of the
per-vertex BFS, SSSP and WCC programs under ``incremental_compute`` equals networkx on that
version of the graph."""

from __future__ import annotations

import itertools
import math

import pytest
from _graph_versions import expected, run_changes
from _graph_versions import fold_changes as fold
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gyreflow.api.graph import Edge, RemoveEdge, RemoveVertex

SOURCE = 0
NAMES = ["bfs", "sssp", "wcc", "pagerank", "record_bfs", "record_sssp", "record_wcc"]
_RUNS = itertools.count()


def play(steps: list[list[tuple]], directed: bool) -> tuple[list, list]:
    """``(batches, versions)`` from steps ``("edge", a, b, w)``, ``("cut", a, b)`` and
    ``("drop", v)``: an edge already there, or a cut of one that is not, is skipped. As
    docs/graphs.md says, a window's vertex removals apply after its other changes: a dropped
    vertex there at the end of its window goes, with the edges it has then (``detach=True``)."""
    vertices: set = set()
    edges: dict = {}
    batches, versions = [], []

    def norm(a, b):
        return (a, b) if directed else (min(a, b), max(a, b))

    for window in steps:
        batch, drops = [], []
        for step in window:
            if step[0] == "edge":
                _, a, b, weight = step
                if a == b or norm(a, b) in edges:
                    continue
                edges[norm(a, b)] = weight
                vertices |= {a, b}
                batch.append(Edge(a, b, weight))
            elif step[0] == "cut":
                _, a, b = step
                if norm(a, b) in edges:
                    del edges[norm(a, b)]
                    batch.append(RemoveEdge(a, b))
            elif step[1] not in drops:
                drops.append(step[1])
        for vertex in drops:
            if vertex not in vertices:
                continue
            linked = [pair for pair in edges if vertex in pair]
            for pair in linked:
                del edges[pair]
            vertices.discard(vertex)
            batch.append(RemoveVertex(vertex, detach=True))
        batches.append(batch)
        versions.append((set(vertices), dict(edges)))
    return batches, versions


def check(outputs: dict, versions: list, directed: bool) -> None:
    for name in NAMES:
        folded = fold(outputs[name], len(versions), exact=name != "pagerank")
        for window, version in enumerate(versions, start=1):
            want = expected(version, directed, SOURCE)[name.removeprefix("record_")]
            got = folded[window - 1]
            if name == "pagerank":
                assert set(got) == set(want), f"pagerank vertices after window {window}"
                off = {v: (got[v], want[v]) for v in want
                       if not math.isclose(got[v], want[v], rel_tol=1e-6, abs_tol=1e-9)}
                assert not off, f"pagerank after window {window}: {off}"
            else:
                assert got == want, f"{name} after window {window}"


def run_and_check(make_env, tmp_path, steps, directed: bool) -> None:
    batches, versions = play(steps, directed)
    env = make_env(**{"state.path": str(tmp_path / f"state-{next(_RUNS)}")})
    check(run_changes(env, batches, directed, SOURCE, NAMES), versions, directed)


VERTEX = st.integers(0, 5)
STEP = st.one_of(
    st.tuples(st.just("edge"), VERTEX, VERTEX, st.integers(1, 4)),
    st.tuples(st.just("cut"), VERTEX, VERTEX),
    st.tuples(st.just("drop"), VERTEX),
)


@pytest.mark.parametrize("environment_type", ["local"])
@pytest.mark.parametrize("directed", [False, True], ids=["undirected", "directed"])
@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.lists(STEP, max_size=6), min_size=1, max_size=5))
def test_every_version_equals_networkx(make_env, tmp_path, directed, steps):
    run_and_check(make_env, tmp_path, steps, directed)


# Each case removes what other vertices' values rest on, on every environment.
CASES = {
    # the source goes with its edges: everything it reached is unreachable, then it comes back
    "source removed": [[("edge", 0, 1, 1), ("edge", 1, 2, 1)], [("drop", 0)],
                       [("edge", 0, 2, 3)]],
    # a bridge edge goes; the far side is reached again by a longer way later
    "bridge cut": [[("edge", 0, 1, 1), ("edge", 1, 2, 1), ("edge", 2, 3, 1), ("edge", 4, 5, 1)],
                   [("cut", 1, 2)], [("edge", 0, 4, 2), ("edge", 5, 2, 1)]],
    # the vertex that carried the shortest paths goes; the others keep a longer way
    "carrier removed": [[("edge", 0, 1, 1), ("edge", 1, 3, 1), ("edge", 0, 2, 2), ("edge", 2, 4, 2),
                         ("edge", 4, 3, 2)], [("drop", 1)], [("edge", 1, 3, 1)],
                        [("edge", 0, 1, 1)]],
    # a vertex added and dropped in one window is in no version: nothing to delete
    "added and dropped in one window": [[("edge", 0, 1, 1)], [("edge", 2, 3, 1), ("drop", 2)],
                                        [("edge", 0, 2, 1)]],
    # the source is cut off and dropped in one window, then added again with other edges
    "source cut and dropped": [[("edge", 0, 1, 2), ("edge", 2, 0, 1)], [("cut", 0, 1), ("drop", 0)],
                               [("edge", 1, 0, 1), ("edge", 0, 2, 1)]],
}


@pytest.mark.parametrize("directed", [False, True], ids=["undirected", "directed"])
@pytest.mark.parametrize("case", list(CASES))
def test_removals_others_rest_on_equal_networkx(make_env, tmp_path, directed, case):
    run_and_check(make_env, tmp_path, CASES[case], directed)
