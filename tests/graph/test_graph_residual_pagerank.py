"""Incremental PageRank by residual propagation (``incremental_pagerank``,
``gyreflow.api.graph.residual_pagerank``) against networkx after every window of a changing graph:
removed edges and vertices, new vertices, dangling and isolated vertices, self-loops, one task
(the whole graph solved in one superstep) and several (residuals pushed across supersteps), the
versions a snapshot reads, random change sequences, and a job killed and resumed in the middle.

The oracle is ``networkx.pagerank`` with a tolerance far below the program's (on these few dozen
vertices its own error is under 1e-12); every folded rank must be within the program's
``TOLERANCE`` of it.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gyreflow.api import Environment, SizeTumblingWindow
from gyreflow.api import graph_algorithms as algorithms
from gyreflow.api.graph import Edge, GraphView, RemoveEdge, RemoveVertex
from gyreflow.api.graph.residual_pagerank import ResidualPageRank
from gyreflow.runtime.driver import JobListener

DAMPING = 0.85
TOLERANCE = 1e-10


def oracle(vertices: set, edges: set, directed: bool) -> dict:
    """networkx's PageRank of one version (dangling ranks spread over every vertex)."""
    graph = nx.DiGraph() if directed else nx.Graph()
    graph.add_nodes_from(vertices)
    graph.add_edges_from(edges)
    if not len(graph):
        return {}
    return nx.pagerank(graph, alpha=DAMPING, tol=1e-15, max_iter=100_000, weight=None)


def changing_windows(seed: int, directed: bool, windows: int = 7, first: int = 70,
                     later: int = 10):
    """``(batches, versions)``: a first window of edges, then windows that add edges (some to new
    vertices, some self-loops), remove edges, remove vertices left without edges and add vertices
    with no edge at all (isolated, dangling)."""
    rng = random.Random(seed)
    count = 25
    edges: set = set()
    vertices: set = set()
    batches, versions = [], []
    for window in range(windows):
        batch: list = []
        gone: set = set()  # removed in this window: no edge may come back to them before its end
        for _ in range(first if window == 0 else later):
            roll = rng.random()
            if window and roll < 0.25 and edges:
                pair = rng.choice(sorted(edges))
                edges.discard(pair)
                batch.append(RemoveEdge(*pair))
                continue
            if window and roll < 0.35:
                lonely = sorted(v for v in vertices if not any(v in e for e in edges))
                if lonely:
                    vertex = rng.choice(lonely)
                    vertices.discard(vertex)
                    gone.add(vertex)
                    batch.append(RemoveVertex(vertex))
                    continue
            if window and roll < 0.45:
                vertices.add(count)  # a vertex with no edge: dangling
                batch.append(("vertex", count))
                count += 1
                continue
            a, b = rng.randrange(count), rng.randrange(count)
            if window and roll > 0.85:
                a, count = count, count + 1  # an edge that brings a new vertex
            if roll > 0.97:
                b = a  # a self-loop
            pair = (a, b) if directed else (min(a, b), max(a, b))
            if pair in edges or gone & set(pair):
                continue
            edges.add(pair)
            vertices.update(pair)
            batch.append(Edge(*pair))
        batches.append(batch)
        versions.append((set(vertices), set(edges)))
    return batches, versions


def run(env, batches, directed: bool, parallelism: int, program=None) -> dict:
    """The job's output per window: ``incremental_pagerank`` (or ``program`` incrementally)."""
    pipeline = env.pipeline("residual-pagerank")

    @pipeline.task
    def ranks(ctx):
        records = ctx.source(batches, SizeTumblingWindow(1), parallelism=1).flat_map(list)
        vertices = records.filter(_is_vertex).map(_vertex)
        edges = records.filter(lambda r: not _is_vertex(r))
        graph = GraphView(vertices, edges, directed=directed, parallelism=parallelism)
        if program is None:
            algorithms.incremental_pagerank(graph, DAMPING, TOLERANCE).collect("ranks")
        else:
            graph.incremental_compute(program).collect("ranks")

    return pipeline.execute().by_window("ranks")


def _is_vertex(record) -> bool:
    return isinstance(record, RemoveVertex) or (isinstance(record, tuple)
                                                and record[0] == "vertex")


def _vertex(record):
    return record if isinstance(record, RemoveVertex) else record[1]


def check(by_window: dict, versions: list, directed: bool) -> None:
    """Fold the windows' outputs (None deletes) and compare each version with the oracle."""
    state: dict = {}
    for window, (vertices, edges) in enumerate(versions, start=1):
        emitted = by_window.get(window, [])
        assert len({v for v, _ in emitted}) == len(emitted), f"window {window}: a vertex twice"
        for vertex, rank in emitted:
            if rank is None:
                state.pop(vertex, None)
            else:
                state[vertex] = rank
        want = oracle(vertices, edges, directed)
        assert set(state) == set(want), f"window {window}: vertices"
        if not want:
            continue
        errors = {v: abs(state[v] - want[v]) for v in want}
        worst = max(errors, key=errors.get)
        assert errors[worst] <= TOLERANCE, (
            f"window {window}: vertex {worst} off by {errors[worst]:.3g}")


@pytest.mark.parametrize("environment_type", ["local", "workers"])
@pytest.mark.parametrize("directed", [False, True], ids=["undirected", "directed"])
@pytest.mark.parametrize("parallelism", [1, 3])
def test_ranks_equal_networkx_after_every_window(make_env, directed, parallelism):
    batches, versions = changing_windows(11 + directed + parallelism, directed)
    check(run(make_env(), batches, directed, parallelism), versions, directed)


@pytest.mark.spark
@pytest.mark.parametrize("environment_type", ["spark"])
def test_ranks_equal_networkx_on_spark_workers(make_env):
    batches, versions = changing_windows(5, False, windows=4)
    env = make_env(**{"spark.mode": "workers"})
    check(run(env, batches, False, 2), versions, False)


def test_a_window_that_changes_nothing_emits_nothing():
    batches = [[Edge(1, 2), Edge(2, 3), Edge(3, 1), Edge(3, 4)], [], [Edge(4, 1)]]
    by_window = run(Environment.local(progress=False), batches, True, 1)
    assert 2 not in by_window or by_window[2] == []
    assert {v for v, _ in by_window[3]} == {1, 2, 3, 4}


@pytest.mark.parametrize("environment_type", ["local"])
@pytest.mark.parametrize("directed", [False, True], ids=["undirected", "directed"])
def test_a_snapshot_computes_the_version_it_reads(make_env, directed):
    """``snapshot().compute`` (static: from nothing in every window) on the latest completed
    version."""
    batches, versions = changing_windows(3 + directed, directed, windows=5)
    pipeline = make_env().pipeline("residual-versions")

    @pipeline.task
    def ranks(ctx):
        records = ctx.source(batches, SizeTumblingWindow(1), parallelism=1).flat_map(list)
        vertices = records.filter(_is_vertex).map(_vertex)
        edges = records.filter(lambda r: not _is_vertex(r))
        graph = GraphView(vertices, edges, directed=directed, parallelism=2,
                          retained_versions=1)
        graph.snapshot().compute(ResidualPageRank(DAMPING, TOLERANCE)).collect("ranks")

    by_window = pipeline.execute().by_window("ranks")
    for window in range(2, len(versions) + 1):
        got = dict(by_window.get(window, []))
        want = oracle(*versions[window - 2], directed)
        assert set(got) == set(want), f"window {window}"
        assert all(abs(got[v] - want[v]) <= TOLERANCE for v in want), f"window {window}"


def test_damping_and_tolerance_are_checked():
    with pytest.raises(ValueError, match="damping must be at least 0 and below 1"):
        ResidualPageRank(1.0)
    with pytest.raises(ValueError, match="tolerance must be positive"):
        ResidualPageRank(0.85, 0.0)


CHANGE = st.tuples(st.sampled_from(["add", "add", "remove", "vertex", "drop"]),
                   st.integers(0, 9), st.integers(0, 9))


@settings(max_examples=30, deadline=None)
@given(st.lists(st.lists(CHANGE, max_size=8), min_size=1, max_size=4), st.booleans(),
       st.sampled_from([1, 2]))
def test_random_change_sequences_equal_networkx(windows, directed, parallelism):
    """Random windows of additions, removals (present or not), isolated vertices and detached
    vertex removals, on one task and on two."""
    edges: set = set()
    vertices: set = set()
    batches, versions = [], []
    for changes in windows:
        batch: list = []
        dropped: set = set()  # vertex removals apply at the end of their window
        for kind, a, b in changes:
            pair = (a, b) if directed else (min(a, b), max(a, b))
            if kind == "add" and pair not in edges:
                edges.add(pair)
                vertices.update(pair)
                batch.append(Edge(*pair))
            elif kind == "remove":
                edges.discard(pair)
                batch.append(RemoveEdge(*pair))
            elif kind == "vertex" and a not in vertices:
                vertices.add(a)
                batch.append(("vertex", a))
            elif kind == "drop" and a in vertices:
                dropped.add(a)
                batch.append(RemoveVertex(a, detach=True))
        vertices -= dropped
        edges = {e for e in edges if not dropped & set(e)}
        batches.append(batch)
        versions.append((set(vertices), set(edges)))
    by_window = run(Environment.local(progress=False), batches, directed, parallelism)
    check(by_window, versions, directed)


# --- killed and resumed in the middle ------------------------------------------------------------

SCRIPT = """
import json, sys
from gyreflow.api import Environment, FileSink, FileSource, SizeTumblingWindow
from gyreflow.api.graph import GraphView, RemoveEdge
from gyreflow.api.graph_algorithms import incremental_pagerank

def parse(line):
    c = line.split()
    if not c:
        return []
    return [RemoveEdge(int(c[1]), int(c[2]))] if c[0] == "-" else [(int(c[0]), int(c[1]))]

def show(window, record):
    return json.dumps({"window": window, "vertex": record[0], "rank": record[1]})

edges_path, window, output, parallelism = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
pipeline = Environment.from_config(None).pipeline("residual-resume")

@pipeline.task(name="ranks")
def ranks(ctx):
    edges = ctx.source(FileSource(edges_path), SizeTumblingWindow(window), parallelism=1)
    graph = GraphView(None, edges.flat_map(parse), directed=False, parallelism=parallelism)
    incremental_pagerank(graph, 0.85, TOLERANCE).sink(FileSink(output, format=show))

pipeline.execute()
""".replace("TOLERANCE", repr(TOLERANCE))

RESUME_WINDOW = 40
RESUME_WINDOWS = 6


def resume_lines(seed: int = 8) -> tuple[list[str], list[tuple[set, set]]]:
    """Edge lines (``- a b`` removes) over 60 ids, and every version they make."""
    rng = random.Random(seed)
    edges: set = set()
    seen: set = set()
    lines, versions = [], []
    for _ in range(RESUME_WINDOWS):
        for _ in range(RESUME_WINDOW):
            if edges and rng.random() < 0.2:
                a, b = rng.choice(sorted(edges))
                edges.discard((a, b))
                lines.append(f"- {a} {b}")
            else:
                a, b = sorted((rng.randrange(60), rng.randrange(60)))
                if (a, b) in edges:
                    lines.append(f"- {a} {b}")  # taken out: every window keeps its size
                    edges.discard((a, b))
                else:
                    edges.add((a, b))
                    seen.update((a, b))
                    lines.append(f"{a} {b}")
        versions.append((set(seen), set(edges)))
    return lines, versions


@pytest.mark.processes
@pytest.mark.parametrize(("moment", "every"), [("window-finished:3", 0), ("superstep:4.2", 1)])
def test_killed_in_the_middle_and_resumed_the_ranks_equal_networkx(tmp_path, moment, every):
    """``y`` and the residuals are the program's values: a job killed after window 3 (or inside
    window 4's supersteps, with iteration snapshots) and resumed goes on from them."""
    lines, versions = resume_lines()
    edges = tmp_path / "edges.txt"
    edges.write_text("\n".join(lines) + "\n", encoding="utf-8")
    script = tmp_path / "job.py"
    script.write_text(SCRIPT, encoding="utf-8")
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    env.update({"GYREFLOW_ENVIRONMENT__TYPE": "local", "GYREFLOW_ENVIRONMENT__WORKERS": "1",
                "GYREFLOW_STATE__BACKEND": "rocksdb", "GYREFLOW_STATE__PATH": str(tmp_path / "s"),
                "GYREFLOW_STATE__ITERATION_CHECKPOINT_INTERVAL": str(every)})
    command = [sys.executable, "-m", "gyreflow", "run", "--quiet"]
    args = ["--", str(edges), str(RESUME_WINDOW), str(out), "2"]
    crashed = subprocess.run([*command, str(script), *args], env={**env, "GYREFLOW_CRASH_AT": moment},
                             capture_output=True, text=True, timeout=300, check=False)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-2000:]
    resumed = subprocess.run([*command, "--resume", str(script), *args], env=env,
                             capture_output=True, text=True, timeout=300, check=False)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    by_window: dict = {}
    for path in sorted(out.glob("window-*")):
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            by_window.setdefault(record["window"], []).append((record["vertex"], record["rank"]))
    assert sorted(by_window) == list(range(1, RESUME_WINDOWS + 1))
    check(by_window, versions, False)


def test_the_bound_holds_where_it_is_tight():
    """A star whose centre gathers everything: the largest rank is where the threshold's bound
    is tightest; the ranks of a window from the last window's ``y`` are still within it."""
    leaves = list(range(1, 60))
    batches = [[Edge(0, v) for v in leaves], [Edge(61, 0), RemoveEdge(0, 5)]]
    by_window = run(Environment.local(progress=False), batches, False, 1)
    state = dict(by_window[1])
    state.update(by_window[2])
    graph = nx.Graph([(0, v) for v in leaves if v != 5] + [(61, 0)])
    graph.add_node(5)
    want = nx.pagerank(graph, alpha=DAMPING, tol=1e-15, max_iter=100_000)
    assert max(abs(state[v] - want[v]) for v in want) <= TOLERANCE
    assert np.isclose(sum(state.values()), 1.0, atol=1e-12)


class _CheckpointBytes(JobListener):
    def __init__(self) -> None:
        self.by_window: dict[int, int] = {}

    def on_checkpoint(self, checkpoint) -> None:
        self.by_window[checkpoint.window] = checkpoint.bytes


@pytest.mark.parametrize("environment_type", ["local", "workers"])
@pytest.mark.parametrize("backend", ["memory", "rocksdb"])
def test_a_window_that_moves_every_rank_writes_the_values_once(make_env, backend):
    """Every rank moves in every window (a new vertex changes them all): the window's checkpoint
    holds the values written whole, not each vertex's position beside its value, nor a fold
    that writes them again. Oracle: the values' own bytes (``VALUE``: 24 a vertex), with the
    ranks still equal to networkx's."""
    rng = random.Random(3)
    n = 3000
    edges = {tuple(sorted(rng.sample(range(n), 2))) for _ in range(4 * n)}
    batches = [[Edge(a, b) for a, b in sorted(edges)]]
    versions = [(set(range(n)) & {v for e in edges for v in e}, set(edges))]
    for window in range(8):
        new = n + window
        added = {(rng.randrange(n), new), tuple(sorted(rng.sample(range(n), 2)))}
        edges |= added
        batches.append([Edge(a, b) for a, b in sorted(added)])
        versions.append(({v for e in edges for v in e}, set(edges)))
    env = make_env(**{"state.backend": backend, "state.max_parallelism": 4,
                      "scheduler.max_flying_windows": 1})
    listener = _CheckpointBytes()
    pipeline = env.pipeline("every-rank-moves")

    @pipeline.task
    def ranks(ctx):
        records = ctx.source(batches, SizeTumblingWindow(1), parallelism=1).flat_map(list)
        graph = GraphView(None, records, directed=False)
        algorithms.incremental_pagerank(graph, DAMPING, TOLERANCE).collect("ranks")

    by_window = pipeline.execute(listener=listener)["ranks"].by_window("ranks")
    check(by_window, versions, False)
    values = 24 * (n + len(batches))
    later = [listener.by_window[w] for w in range(2, len(batches) + 1)]
    # a window that logged the values as a change folded them into a new base every second
    # window (1.14x the values then); positions beside the values would weigh 32 a vertex
    assert max(later) < 1.1 * values, (later, values)
