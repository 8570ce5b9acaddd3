"""Graph benchmark input and PageRank engines: random graphs, plain, scipy and gyreflow PageRank, checks."""

from __future__ import annotations

import random
import time
from collections.abc import Callable

import numpy as np
import scipy.sparse as sparse
from _graph_loops import SEARCH

from gyreflow.api import Environment
from gyreflow.api.graph import GraphView
from gyreflow.api.graph_algorithms import pagerank

DAMPING = 0.85


class ResultMismatchError(Exception):
    """An engine's result differs from the reference."""


# ---------------------------------------------------------------------------------------------
# Input


def random_edges(n: int, m: int, seed: int) -> list[tuple[int, int]]:
    """``m`` distinct directed edges ``src != dst`` between ``n`` vertices; destinations skewed towards
    low ids (some vertices are popular), and the last 2% of the ids never a source (dangling)."""
    rng = random.Random(seed)
    sources = n - n // 50
    seen: set[tuple[int, int]] = set()
    edges = []
    rand, randrange = rng.random, rng.randrange
    while len(edges) < m:
        edge = (randrange(sources), int(n * rand() ** 1.5))
        if edge[0] != edge[1] and edge not in seen:
            seen.add(edge)
            edges.append(edge)
    return edges


# ---------------------------------------------------------------------------------------------
# PageRank engines


def plain_pagerank(vertices: list, edges: list, damping: float, iterations: int) -> dict:
    """A hand-written PageRank over dicts: adjacency lists, then ``iterations`` synchronous updates
    with the dangling rank spread evenly."""
    out: dict = {v: [] for v in vertices}
    for src, dst in edges:
        out[src].append(dst)
    n = len(vertices)
    rank = dict.fromkeys(vertices, 1.0 / n)
    started = time.perf_counter()
    for _ in range(iterations):
        incoming = dict.fromkeys(vertices, 0.0)
        dangling = 0.0
        for vertex, targets in out.items():
            if targets:
                share = rank[vertex] / len(targets)
                for target in targets:
                    incoming[target] += share
            else:
                dangling += rank[vertex]
        base = (1.0 - damping) / n + damping * dangling / n
        rank = {v: base + damping * incoming[v] for v in vertices}
    SEARCH["seconds"] = time.perf_counter() - started
    return rank


def scipy_pagerank(vertices: list, edges: list, damping: float, iterations: int) -> dict:
    """The same PageRank with ``scipy.sparse``: one matrix-vector product per iteration."""
    n = len(vertices)
    pairs = np.array(edges, dtype=np.int64).reshape(-1, 2)
    ids = np.array(vertices, dtype=np.int64)
    order = np.argsort(ids)
    src = order[np.searchsorted(ids, pairs[:, 0], sorter=order)]
    dst = order[np.searchsorted(ids, pairs[:, 1], sorter=order)]
    matrix = sparse.csr_matrix((np.ones(len(src)), (dst, src)), shape=(n, n))
    degree = np.bincount(src, minlength=n)
    dangling = degree == 0
    rank = np.full(n, 1.0 / n)
    started = time.perf_counter()
    for _ in range(iterations):
        share = np.divide(rank, degree, out=np.zeros(n), where=~dangling)
        rank = (1.0 - damping) / n + damping * (matrix @ share + rank[dangling].sum() / n)
    SEARCH["seconds"] = time.perf_counter() - started
    return dict(zip(vertices, rank.tolist(), strict=True))


def gyreflow_run(env: Environment, vertices: list, edges: list, algorithm: Callable,
                 parallelism: int, directed: bool = True) -> Callable[[], dict]:
    """A pipeline: the graph from two in-memory sources, ``algorithm(graph)``, collected."""

    def run() -> dict:
        pipeline = env.pipeline("graph-benchmark")

        @pipeline.task
        def compute(ctx):
            graph = GraphView(ctx.source(vertices), ctx.source(edges), directed=directed,
                              parallelism=parallelism)
            algorithm(graph).collect("values")

        return dict(pipeline.execute(fresh=True).output("values"))

    return run


def gyreflow_pagerank(env: Environment, vertices: list, edges: list, iterations: int,
                      parallelism: int) -> Callable[[], dict]:
    """Library PageRank in a pipeline."""
    return gyreflow_run(env, vertices, edges, lambda g: pagerank(g, DAMPING, iterations),
                        parallelism)


def check_ranks(name: str, got: dict, expected: dict, tolerance: float = 1e-9) -> None:
    """Raise ResultMismatchError unless every value is within ``tolerance`` (relative) of the
    reference (infinite values equal)."""
    if got.keys() != expected.keys():
        msg = f"{name}: {len(got)} vertices, expected {len(expected)}"
        raise ResultMismatchError(msg)
    wrong = [v for v, r in expected.items()
             if not (got[v] == r or abs(got[v] - r) <= tolerance * max(abs(r), 1e-12))]
    if wrong:
        examples = ", ".join(f"{v}: {got[v]!r} != {expected[v]!r}" for v in wrong[:3])
        msg = f"{name}: {len(wrong)} values differ from the plain loop, e.g. {examples}"
        raise ResultMismatchError(msg)


SCIPY_PAGERANK_SCRIPT = r"""
import sys
import numpy as np
import scipy.sparse as sparse

vertices_path, edges_path, out_path, iterations, damping = sys.argv[1:6]
iterations, damping = int(iterations), float(damping)
ids = np.loadtxt(vertices_path, dtype=np.int64, ndmin=1)
pairs = np.loadtxt(edges_path, dtype=np.int64, ndmin=2)
order = np.argsort(ids)
src = order[np.searchsorted(ids, pairs[:, 0], sorter=order)]
dst = order[np.searchsorted(ids, pairs[:, 1], sorter=order)]
n = len(ids)
matrix = sparse.csr_matrix((np.ones(len(src)), (dst, src)), shape=(n, n))
degree = np.bincount(src, minlength=n)
dangling = degree == 0
rank = np.full(n, 1.0 / n)
for _ in range(iterations):
    share = np.divide(rank, degree, out=np.zeros(n), where=~dangling)
    rank = (1.0 - damping) / n + damping * (matrix @ share + rank[dangling].sum() / n)
with open(out_path, "w") as out:
    out.writelines(f"{v} {r!r}\n" for v, r in zip(ids.tolist(), rank.tolist()))
"""
