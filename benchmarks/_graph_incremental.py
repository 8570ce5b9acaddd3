"""Graph benchmark incremental WCC: the run over windows of edges, checked against union-find."""

from __future__ import annotations

import math

from _graph_engines import ResultMismatchError

from gyreflow.api import Environment, SizeTumblingWindow
from gyreflow.api.graph import GraphView
from gyreflow.api.graph_algorithms import incremental_wcc


def run_incremental_wcc(env: Environment, edges: list, window: int, parallelism: int):
    """Incremental WCC over ``edges`` in windows of ``window``; returns the task result."""
    pipeline = env.pipeline("incremental-wcc-benchmark")

    @pipeline.task
    def components(ctx):
        stream = ctx.source(edges, SizeTumblingWindow(window), parallelism=1)
        graph = GraphView(None, stream, directed=False, parallelism=parallelism)
        incremental_wcc(graph).collect("labels")

    return pipeline.execute(fresh=True)["components"]


class UnionFind:
    """Union-find with the smallest id as each root: the reference labelling after each window."""

    def __init__(self) -> None:
        self.parent: dict = {}

    def find(self, v):
        parent = self.parent
        root = v
        while parent[root] != root:
            root = parent[root]
        while parent[v] != root:
            parent[v], v = root, parent[v]
        return root

    def add(self, a, b) -> None:
        for v in (a, b):
            self.parent.setdefault(v, v)
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def check_windows(result, edges: list, window: int) -> None:
    """Fold each window's changed labels and compare with union-find over the edges so far."""
    by_window = result.by_window("labels")
    windows = math.ceil(len(edges) / window)
    union = UnionFind()
    labels: dict = {}
    for number in range(1, windows + 1):
        for a, b in edges[(number - 1) * window:number * window]:
            union.add(a, b)
        labels.update(by_window.get(number, []))
        expected = {v: union.find(v) for v in union.parent}
        if labels != expected:
            wrong = [v for v in expected if labels.get(v) != expected[v]][:3]
            msg = f"incremental WCC after window {number}: labels differ, e.g. vertices {wrong}"
            raise ResultMismatchError(msg)
