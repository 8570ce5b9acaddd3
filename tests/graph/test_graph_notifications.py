"""Notifications at ``(window, superstep)`` in vertex programs (``vertex.notify_at`` and
``on_notify``), on every environment: each runs once, after every task completed its superstep,
also when the window resumes from an iteration snapshot. Oracle: hop counts from a plain BFS."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections import deque

import pytest

from gyreflow.api import AllWindow, UserFunctionError
from gyreflow.api.graph import GraphView, VertexCentricCompute

SOURCE = 0


class Levels(VertexCentricCompute):
    """Hop counts from SOURCE; a vertex asks to hear when its first superstep is complete."""

    max_iterations = 50

    def init(self, vertex_id, value):
        return (math.inf, None)

    def compute(self, vertex, messages):
        hops, _ = vertex.value
        if hops != math.inf:
            return
        if vertex.iteration == 1 and vertex.id != SOURCE:
            return
        vertex.value = (vertex.iteration - 1, None)
        vertex.notify_at(vertex.iteration)
        vertex.send_to_neighbours(1)

    def on_notify(self, vertex, iteration):
        hops, seen = vertex.value
        assert seen is None, "notified twice"
        vertex.value = (hops, iteration)


def graph_edges(n: int = 60) -> list[tuple[int, int]]:
    edges = [(i, (i * 7 + 3) % n) for i in range(n)] + [(i, (i + 1) % n) for i in range(0, n, 5)]
    return [e for e in edges if e[0] != e[1]]


def bfs(vertices, edges) -> dict:
    out = {v: [] for v in vertices}
    for s, d in edges:
        out[s].append(d)
    hops = dict.fromkeys(vertices, math.inf)
    hops[SOURCE] = 0
    queue = deque([SOURCE])
    while queue:
        v = queue.popleft()
        for w in out[v]:
            if hops[w] == math.inf:
                hops[w] = hops[v] + 1
                queue.append(w)
    return hops


@pytest.mark.parametrize("parallelism", [1, 3])
def test_each_vertex_hears_once_after_its_superstep_is_complete(make_env, parallelism):
    edges = graph_edges()
    vertices = sorted({v for e in edges for v in e} | {999})  # 999 is never reached
    pipeline = make_env(parallelism).pipeline("levels")

    @pipeline.task
    def levels(ctx):
        graph = GraphView(ctx.source(vertices, AllWindow()), ctx.source(edges, AllWindow()),
                          directed=True)
        graph.compute(Levels()).collect("levels")

    got = dict(pipeline.execute()["levels"].output("levels"))
    expected = {v: (h, None if h == math.inf else h + 1) for v, h in bfs(vertices, edges).items()}
    assert got == expected
    assert max(h for h, _ in got.values() if h != math.inf) >= 4


class AsksTooLate(Levels):
    def compute(self, vertex, messages):
        if vertex.iteration == 2:
            vertex.notify_at(1)
        if vertex.iteration == 1:
            vertex.send_to_neighbours(1)


def test_a_notification_for_a_past_superstep_names_the_operator(make_env):
    pipeline = make_env(1).pipeline("late")

    @pipeline.task
    def late(ctx):
        graph = GraphView(ctx.source([1, 2], AllWindow()), ctx.source([(1, 2)], AllWindow()))
        graph.compute(AsksTooLate(), name="levels").collect()

    with pytest.raises(UserFunctionError, match="levels") as caught:
        pipeline.execute()
    assert "notify_at(1) in superstep 2" in str(caught.value)


SCRIPT = '''
import json, math, sys
sys.path.insert(0, {tests!r})
from test_graph_notifications import Levels, graph_edges
from gyreflow.api import AllWindow, Environment, FileSink
from gyreflow.api.graph import GraphView

edges = graph_edges()
vertices = sorted({{v for e in edges for v in e}})
pipeline = Environment.from_config().pipeline("levels")

@pipeline.task
def levels(ctx):
    graph = GraphView(ctx.source(vertices, AllWindow()), ctx.source(edges, AllWindow()))
    graph.compute(Levels()).sink(FileSink({out!r}, format=lambda w, r: json.dumps([r[0], *r[1]])))

pipeline.execute()
'''


def test_notifications_run_once_when_the_window_resumes_from_an_iteration_snapshot(tmp_path):
    out = tmp_path / "out"
    script = tmp_path / "levels.py"
    script.write_text(SCRIPT.format(tests=os.path.dirname(__file__), out=str(out)),
                      encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    env.update({"GYREFLOW_ENVIRONMENT__TYPE": "local", "GYREFLOW_STATE__BACKEND": "rocksdb",
                "GYREFLOW_STATE__PATH": str(tmp_path / "state"),
                "GYREFLOW_STATE__ITERATION_CHECKPOINT_INTERVAL": "2"})

    def run(*flags, crash=None):
        extra = {"GYREFLOW_CRASH_AT": crash} if crash else {}
        return subprocess.run([sys.executable, "-m", "gyreflow", "run", "-q", *flags, str(script)],
                              env={**env, **extra}, capture_output=True, text=True, timeout=300,
                              check=False)

    assert run(crash="superstep:1.5").returncode == -9
    events = tmp_path / "events.jsonl"
    done = run("--resume", "--events", str(events))
    assert done.returncode == 0, done.stderr
    restored = [json.loads(x) for x in events.read_text().splitlines()]
    # killed as superstep 5 was to start: the snapshot taken before superstep 3 is the latest
    assert [e["superstep"] for e in restored if e["event"] == "iteration_restored"] == [2]
    edges = graph_edges()
    vertices = sorted({v for e in edges for v in e})
    expected = {v: [h, h + 1] for v, h in bfs(vertices, edges).items() if h != math.inf}
    got = {}
    for path in out.iterdir():
        for line in path.read_text().splitlines():
            vertex, hops, seen = json.loads(line)
            if hops is not None and hops != math.inf and not (isinstance(hops, float) and
                                                               math.isinf(hops)):
                got[vertex] = [hops, seen]
    assert got == expected
