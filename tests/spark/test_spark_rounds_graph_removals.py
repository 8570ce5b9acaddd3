"""Incremental graph computations whose windows remove edges, with each superstep's task rebuilt from
the state the step before exported, as Spark's rounds mode does when a step lands on another Python
worker: the repairs (``incremental_wcc``, ``incremental_bfs``, ``incremental_sssp``), residual
PageRank and a user's array program that reads ``removal_scope`` and ``removed_edges()`` in every
superstep equal networkx (or the stream) after every window.

In-process, the rebuild is forced before every iteration event; on Spark (``spark.mode = rounds``)
``SparkGraphRunner.keep_live = False`` makes every step's task start from the pickled state; and
one plain rounds-mode run of a stream of additions and removals, as ``examples/incremental_wcc.py``
reads it, is checked against networkx window by window. In-process, a superstep may also go on
from an iteration snapshot (``progress``, ``restore_progress``), as a resumed window does.
"""

from __future__ import annotations

import math
import pickle
import random

import networkx as nx
import numpy as np
import pytest
from _graph_versions import fold_changes, networkx_results
from test_graph_repair import clustered_windows

from gyreflow.api import Environment, FileSource, SizeTumblingWindow
from gyreflow.api.graph import GraphView, RemoveEdge
from gyreflow.api.graph.array_algorithms import (
    ArrayIncrementalBreadthFirstSearch,
    ArrayIncrementalConnectedComponents,
)
from gyreflow.api.graph.arrays import ArrayVertexCompute
from gyreflow.api.graph.incremental_algorithms import ArrayIncrementalShortestPaths
from gyreflow.api.graph.residual_pagerank import ResidualPageRank
from gyreflow.api.graph_algorithms import incremental_wcc
from gyreflow.runtime.dataflow.iteration import IterationTask
from gyreflow.runtime.spark.graph_steps import SparkGraphRunner
from gyreflow.scheduler.events import EventKind

SOURCE = 0
SUPERSTEPS = 3  # of the witness program, every window
STEPS = (EventKind.EXECUTE_FIRST_ITERATION, EventKind.EXECUTE_COMPUTE, EventKind.FINISH_ITERATION)


class RemovalWitness(ArrayVertexCompute):
    """Counts, in every superstep, the window's removal halves at each vertex (``removed_edges``)
    and, for every vertex, whether the joined removal scope is known (``removal_scope``, +1000):
    a superstep that lost either counts less."""

    combine = "sum"
    always_active = True
    max_iterations = SUPERSTEPS

    def init(self, ids, given):
        return np.zeros(len(ids), dtype=np.int64)

    def removal_scope(self, values):
        return frozenset({"removed"})

    def restarts(self, values, scope):
        return np.zeros(len(values), dtype=bool)

    def compute(self, part, inbox):
        values = part.values.copy()
        if part.removal_scope:
            values += 1000
        removed = part.removed_edges()
        if removed is not None:
            np.add.at(values, removed[0], 1)
        return values


def witness_oracle(batches: list) -> dict:
    """What ``RemovalWitness`` holds after the last window: per vertex, ``SUPERSTEPS`` times its
    removed edge ends and 1000 for each removal window since it appeared."""
    first, ends, windows_with_removals = {}, {}, []
    for window, batch in enumerate(batches, start=1):
        for change in batch:
            for vertex in (change.src, change.dst):
                first.setdefault(vertex, window)
                if isinstance(change, RemoveEdge):
                    ends[vertex] = ends.get(vertex, 0) + 1
        if any(isinstance(change, RemoveEdge) for change in batch):
            windows_with_removals.append(window)
    return {v: SUPERSTEPS * (ends.get(v, 0) + 1000 * sum(w >= since for w in windows_with_removals))
            for v, since in first.items()}


def pagerank_oracle(version: tuple, directed: bool) -> dict:
    """networkx's PageRank (dangling ranks spread over every vertex), as
    tests/graph/test_graph_residual_pagerank.py takes it."""
    vertices, edges = version
    graph = nx.DiGraph() if directed else nx.Graph()
    graph.add_nodes_from(vertices)
    graph.add_edges_from(edges)
    return nx.pagerank(graph, alpha=0.85, tol=1e-15, max_iter=100_000, weight=None)


def programs(directed: bool, pagerank: bool) -> dict:
    chosen = {"wcc": ArrayIncrementalConnectedComponents(directed),
              "bfs": ArrayIncrementalBreadthFirstSearch(SOURCE),
              "sssp": ArrayIncrementalShortestPaths(SOURCE),
              "witness": RemovalWitness()}
    if pagerank:
        chosen["pagerank"] = ResidualPageRank(tolerance=1e-9)
    return chosen


def run_programs(env, batches: list, directed: bool, chosen: dict) -> dict:
    pipeline = env.pipeline("removals-rebuilt")

    @pipeline.task
    def changing(ctx):
        edges = ctx.source(batches, SizeTumblingWindow(1), parallelism=1).flat_map(list)
        graph = GraphView(None, edges, directed=directed, parallelism=2)
        for name, program in chosen.items():
            graph.incremental_compute(program, name=name).collect(name)

    result = pipeline.execute()
    return {name: result.by_window(name) for name in chosen}


def assert_equal_oracles(outputs: dict, batches: list, versions: list, directed: bool) -> None:
    for name in outputs:
        after = fold_changes(outputs[name], len(batches), exact=name != "pagerank")
        if name == "witness":
            assert after[-1] == witness_oracle(batches)
            continue
        for window, version in enumerate(versions, start=1):
            if name == "pagerank":
                want = pagerank_oracle(version, directed)
                assert after[window - 1].keys() == want.keys(), (name, window)
                assert all(math.isclose(after[window - 1][v], r, abs_tol=1e-6)
                           for v, r in want.items()), (name, window)
            else:
                want = networkx_results(version, directed, SOURCE)[name]
                assert after[window - 1] == want, (name, window)


def rebuild_every_step(monkeypatch, snapshots: bool = False) -> None:
    """Before every iteration event, replace the graph operator's attributes with those of one
    opened afresh that took over what the operator exported (pickled), as a Spark step does on a
    Python worker that did not run the step before. With ``snapshots``, a superstep after the
    first also goes on from an iteration snapshot (``progress``), as a resumed window does, with
    nothing of the window's removals but what the snapshot holds."""
    original = IterationTask.on_event

    def on_event(self, event):
        if event.kind in STEPS:
            op = self.graph
            exported = pickle.loads(pickle.dumps(op.export_state(), pickle.HIGHEST_PROTOCOL))
            record = None
            if snapshots and event.kind is EventKind.EXECUTE_COMPUTE:
                inbox = op.loop.take(op.index, event.iteration)
                record = pickle.loads(op.progress(event.iteration - 1, event.payload, inbox))
            kept = {k: getattr(op, k) for k in ("name", "spec", "out", "loop", "ctx",
                                                "records_in", "records_out")}
            vars(op).clear()
            type(op).__init__(op, kept["name"], kept["spec"])
            op.open(kept["ctx"])
            vars(op).update(kept)
            op.import_state(exported)
            if record is not None:
                op.scope, op.removed_halves = frozenset(), None  # a fresh window's, before step 1
                op.restore_progress(record)
        original(self, event)

    monkeypatch.setattr(IterationTask, "on_event", on_event)


def changing_graph(directed: bool) -> tuple[list, list]:
    """Clusters joined by bridges, then windows that remove and add edges (no vertex removed:
    the witness counts edge ends)."""
    batches, versions = clustered_windows(11 + directed, 3, 8, 4, directed)
    kept_batches, kept_versions, edges = [], [], {}
    vertices: set = set()
    for batch in batches:
        kept = [c for c in batch if hasattr(c, "src")]  # drop RemoveVertex
        for change in kept:
            pair = (change.src, change.dst) if directed else tuple(sorted((change.src, change.dst)))
            if isinstance(change, RemoveEdge):
                edges.pop(pair, None)
            else:
                edges[pair] = change.value
                vertices.update(pair)
        kept_batches.append(kept)
        kept_versions.append((set(vertices), dict(edges)))
    return kept_batches, kept_versions


@pytest.mark.parametrize("snapshots", [False, True], ids=["exported", "snapshots"])
@pytest.mark.parametrize("directed", [False, True], ids=["undirected", "directed"])
def test_tasks_rebuilt_before_every_step_equal_networkx_in_process(monkeypatch, directed,
                                                                   snapshots):
    batches, versions = changing_graph(directed)
    rebuild_every_step(monkeypatch, snapshots)
    env = Environment.local(progress=False, config={"environment.workers": 1})
    outputs = run_programs(env, batches, directed, programs(directed, pagerank=True))
    assert_equal_oracles(outputs, batches, versions, directed)


def test_tasks_rebuilt_for_every_spark_step_equal_networkx(make_env, environment_type,
                                                           monkeypatch):
    """On Spark in rounds mode, every step's task is rebuilt from the pickled state (WCC and the
    witness: BFS and SSSP repair with the same code, rebuilt before every step in process above)."""
    monkeypatch.setattr(SparkGraphRunner, "keep_live", False)
    batches, versions = changing_graph(False)
    env = make_env(**{"spark.mode": "rounds"})
    chosen = {name: program for name, program in programs(False, pagerank=False).items()
              if name in ("wcc", "witness")}
    outputs = run_programs(env, batches, False, chosen)
    assert_equal_oracles(outputs, batches, versions, False)


def removal_stream(path, lines: int = 1200, vertices: int = 700, share: float = 0.09,
                   seed: int = 3) -> list[str]:
    """``examples/incremental_wcc.py``'s input: ``src dst`` lines, and ``- src dst`` for a share
    of them, each removing an edge that is there."""
    rng = random.Random(seed)
    edges: list = []
    out = []
    for _ in range(lines):
        if edges and rng.random() < share:
            a, b = edges.pop(rng.randrange(len(edges)))
            out.append(f"- {a} {b}")
        else:
            a, b = rng.randrange(vertices), rng.randrange(vertices)
            edges.append((a, b))
            out.append(f"{a} {b}")
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return out


def parse(line: str) -> list:
    columns = line.split()
    if not columns:
        return []
    if columns[0] == "-":
        return [RemoveEdge(int(columns[1]), int(columns[2]))]
    return [(int(columns[0]), int(columns[1]))]


def test_rounds_mode_components_of_a_stream_with_removals_equal_networkx(make_env, tmp_path):
    """The outside tester's case: 6 windows of 200 lines, 9% removals, graph parallelism 2;
    each window's changed labels equal networkx's (on Spark, rounds mode: steps move between
    Python workers as Spark places them)."""
    window = 200
    lines = removal_stream(tmp_path / "stream.e")
    pipeline = make_env(2, **{"spark.mode": "rounds"}).pipeline("wcc-removals")

    @pipeline.task
    def components(ctx):
        edges = (ctx.source(FileSource(str(tmp_path / "stream.e")), SizeTumblingWindow(window),
                            parallelism=1).flat_map(parse))
        graph = GraphView(None, edges, directed=False, parallelism=2)
        incremental_wcc(graph).collect("wcc")

    by_window = pipeline.execute().by_window("wcc")
    graph, before = nx.Graph(), {}
    for w in range(1, len(lines) // window + 1):
        for line in lines[(w - 1) * window:w * window]:
            columns = line.split()
            if columns[0] == "-":  # every edge between them: one in a simple graph
                if graph.has_edge(int(columns[1]), int(columns[2])):
                    graph.remove_edge(int(columns[1]), int(columns[2]))
            else:
                graph.add_edge(int(columns[0]), int(columns[1]))
        labels = {v: min(part) for part in nx.connected_components(graph) for v in part}
        changed = {v: c for v, c in labels.items() if before.get(v) != c}
        assert dict(by_window.get(w, [])) == changed, f"window {w}"
        before = labels

