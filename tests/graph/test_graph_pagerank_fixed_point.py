"""Incremental PageRank after every window of a changing graph against the exact fixed point.

The windows add edges, remove present edges, bring new vertices and leave vertices without edges
(dangling) or remove them. The oracle is a numpy power iteration run until a step moves the ranks
by less than 1e-13 in total; the job stops once no rank moves by more than ``TOLERANCE`` in a
superstep, so each rank must be within the rest of a geometric tail,
``TOLERANCE * damping / (1 - damping)``, of the fixed point.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from gyreflow.api import Environment, SizeTumblingWindow
from gyreflow.api import graph_algorithms as algorithms
from gyreflow.api.graph import Edge, GraphView, RemoveEdge, RemoveVertex

DAMPING = 0.85
TOLERANCE = 1e-10
BOUND = TOLERANCE * DAMPING / (1 - DAMPING)


def exact_ranks(vertices: set, edges: set, directed: bool) -> dict:
    """The fixed point by plain power iteration (dangling ranks spread over every vertex)."""
    order = sorted(vertices)
    index = {v: i for i, v in enumerate(order)}
    n = len(order)
    outs: list[list[int]] = [[] for _ in range(n)]
    for a, b in edges:
        outs[index[a]].append(index[b])
        if not directed:
            outs[index[b]].append(index[a])
    rank = np.full(n, 1.0 / n)
    for _ in range(100_000):
        new = np.zeros(n)
        dangling = 0.0
        for i, targets in enumerate(outs):
            if targets:
                new[targets] += rank[i] / len(targets)
            else:
                dangling += rank[i]
        new = (1 - DAMPING) / n + DAMPING * (new + dangling / n)
        done = np.abs(new - rank).sum() < 1e-13
        rank = new
        if done:
            break
    return dict(zip(order, rank.tolist(), strict=True))


def changing_windows(seed: int, directed: bool, windows: int = 8):
    """``(batches, versions)``: a first window of edges, then windows of 12 changes each."""
    rng = random.Random(seed)
    count = 40
    edges: set = set()
    vertices: set = set()
    batches, versions = [], []
    for window in range(windows):
        batch = []
        for _ in range(120 if window == 0 else 12):
            roll = rng.random()
            if window and roll < 0.3 and edges:
                pair = rng.choice(sorted(edges))
                edges.discard(pair)
                batch.append(RemoveEdge(*pair))
                continue
            if window and roll < 0.4:  # a vertex left without edges goes
                lonely = sorted(v for v in vertices if not any(v in e for e in edges))
                if lonely:
                    vertex = rng.choice(lonely)
                    vertices.discard(vertex)
                    batch.append(RemoveVertex(vertex))
                    continue
            a, b = rng.randrange(count), rng.randrange(count)
            if window and roll > 0.8:
                a, count = count, count + 1  # a new vertex
            pair = (a, b) if directed else (min(a, b), max(a, b))
            if a == b or pair in edges:
                continue
            edges.add(pair)
            vertices.update(pair)
            batch.append(Edge(*pair, 1))
        batches.append(batch)
        versions.append((set(vertices), set(edges)))
    return batches, versions


@pytest.mark.parametrize("directed", [False, True], ids=["undirected", "directed"])
def test_incremental_pagerank_is_within_its_bound_of_the_fixed_point(directed):
    batches, versions = changing_windows(5 + directed, directed)
    env = Environment.local(2, progress=False, config={"state.backend": "memory"})
    pipeline = env.pipeline("pagerank-fixed-point")

    @pipeline.task
    def ranks(ctx):
        changes = ctx.source(batches, SizeTumblingWindow(1), parallelism=1).flat_map(list)
        graph = GraphView(None, changes, directed=directed, parallelism=2)
        algorithms.incremental_pagerank(graph, DAMPING, TOLERANCE).collect("ranks")

    by_window = pipeline.execute().by_window("ranks")
    state: dict = {}
    for window, (vertices, edges) in enumerate(versions, start=1):
        for vertex, rank in by_window.get(window, []):
            if rank is None:
                state.pop(vertex, None)
            else:
                state[vertex] = rank
        want = exact_ranks(vertices, edges, directed)
        assert set(state) == set(want), f"window {window}: vertices"
        errors = {v: abs(state[v] - want[v]) for v in want}
        worst = max(errors, key=errors.get)
        assert errors[worst] <= BOUND, (
            f"window {window}: vertex {worst} off by {errors[worst]:.3g} (bound {BOUND:.3g})")
