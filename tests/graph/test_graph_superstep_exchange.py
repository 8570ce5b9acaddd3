"""Array supersteps across tasks and worker processes: PageRank's ranks against networkx, the ids of
the messages another task sends looked up once per window, not once per superstep, and messages
from several tasks summed as a plain loop sums them."""

from __future__ import annotations

import math
import random

import networkx as nx
import numpy as np
import pytest

from gyreflow.api import Environment, SizeTumblingWindow
from gyreflow.api.graph import GraphView, algorithms
from gyreflow.runtime.dataflow.graph import arrays
from gyreflow.runtime.dataflow.graph.array_context import KnownIds, receive
from gyreflow.runtime.dataflow.graph.array_supersteps import ArraySupersteps

DAMPING = 0.85
ITERATIONS = 150  # 0.85 ** 150 < 1e-10: the ranks are networkx's converged ones


def small_graph(n: int, m: int, seed: int) -> tuple[list[int], list[tuple[int, int]]]:
    """``m`` distinct directed edges between ``n`` vertices; the last tenth never a source
    (dangling vertices, whose rank is spread over every vertex)."""
    rng = random.Random(seed)
    sources = n - n // 10
    edges: set[tuple[int, int]] = set()
    while len(edges) < m:
        src, dst = rng.randrange(sources), rng.randrange(n)
        if src != dst:
            edges.add((src, dst))
    return list(range(n)), sorted(edges)


def networkx_ranks(vertices: list, edges: list) -> dict:
    graph = nx.DiGraph()
    graph.add_nodes_from(vertices)
    graph.add_edges_from(edges)
    return nx.pagerank(graph, alpha=DAMPING, tol=1e-15, max_iter=1000)


def assert_ranks(got: dict, expected: dict) -> None:
    assert got.keys() == expected.keys()
    wrong = {v: (got[v], r) for v, r in expected.items() if not math.isclose(got[v], r,
                                                                            rel_tol=1e-8)}
    assert not wrong, f"{len(wrong)} ranks differ from networkx's, e.g. {list(wrong.items())[:3]}"


def run_pagerank(env: Environment, vertices: list, edges: list, window: int | None = None,
                 parallelism: int = 2):
    pipeline = env.pipeline("pagerank-exchange")

    @pipeline.task
    def ranks(ctx):
        edge_source = (ctx.source(edges) if window is None
                       else ctx.source(edges, SizeTumblingWindow(window), parallelism=1))
        vertex_source = (ctx.source(vertices) if window is None
                         else ctx.source(vertices, SizeTumblingWindow(len(vertices)),
                                         parallelism=1))
        graph = GraphView(vertex_source, edge_source, directed=True, parallelism=parallelism)
        algorithms.pagerank(graph, DAMPING, ITERATIONS).collect("pr")

    return pipeline.execute(fresh=True)


@pytest.mark.processes
def test_pagerank_on_two_worker_processes_equals_networkx():
    vertices, edges = small_graph(300, 2_000, seed=5)
    env = Environment.local(parallelism=2, progress=False,
                            config={"environment.workers": 2, "state.backend": "memory"})
    result = run_pagerank(env, vertices, edges)
    assert_ranks(dict(result.output("pr")), networkx_ranks(vertices, edges))


@pytest.mark.processes
def test_pagerank_of_a_growing_graph_on_two_worker_processes_equals_networkx_in_every_window():
    """Four tasks on two workers: each worker's two tasks send to the same tasks of the other, and
    the vertices they send to change from window to window."""
    vertices, edges = small_graph(1_000, 6_000, seed=11)
    window = 2_000
    env = Environment.local(parallelism=4, progress=False,
                            config={"environment.workers": 2, "state.backend": "memory"})
    result = run_pagerank(env, vertices, edges, window, parallelism=4)
    for number in range(1, len(edges) // window + 1):
        assert_ranks(dict(result.by_window("pr")[number]),
                     networkx_ranks(vertices, edges[:number * window]))


@pytest.fixture
def superstep_lookups(monkeypatch) -> list[int]:
    """How many id arrays were looked up in a partition's index while supersteps ran, per
    superstep call (the graph's building looks ids up too: not counted)."""
    counts: list[int] = []
    running = [False]
    lookup, superstep = arrays.IdIndex.lookup, ArraySupersteps.superstep

    def counted_lookup(index, query):
        if running[0]:
            counts[-1] += 1
        return lookup(index, query)

    def counted_superstep(operator, *args, **kwargs):
        counts.append(0)
        running[0] = True
        try:
            return superstep(operator, *args, **kwargs)
        finally:
            running[0] = False

    monkeypatch.setattr(arrays.IdIndex, "lookup", counted_lookup)
    monkeypatch.setattr(ArraySupersteps, "superstep", counted_superstep)
    return counts


def test_the_ids_another_task_sends_are_looked_up_once_per_window(superstep_lookups):
    """Two tasks in one process: each receives the other's messages to the same vertices every
    superstep; their ids are looked up in the first superstep that receives them only, and the
    ranks of every window (the graph grows: the lookups of the last window do not hold) are
    networkx's on the graph so far."""
    vertices, edges = small_graph(200, 1_200, seed=9)
    window = 400
    env = Environment.local(parallelism=2, progress=False,
                            config={"environment.workers": 1, "state.backend": "memory"})
    result = run_pagerank(env, vertices, edges, window)
    windows = len(edges) // window
    for number in range(1, windows + 1):
        assert_ranks(dict(result.by_window("pr")[number]),
                     networkx_ranks(vertices, edges[:number * window]))
    supersteps = len(superstep_lookups)
    assert supersteps == windows * 2 * (ITERATIONS + 1)
    # One lookup per task and window (in its second superstep, the first with messages).
    assert sum(superstep_lookups) == windows * 2


class _Part:
    """What ``receive`` reads of a partition: its size and id index."""

    def __init__(self, ids: list[int]) -> None:
        self.n = len(ids)
        self.index = arrays.IdIndex(np.array(ids, dtype=np.int64))


@pytest.mark.parametrize("dtypes", [("float64", "float64"), ("float32", "float64"),
                                    ("float64", "int64")])
def test_summed_messages_from_several_pieces_equal_a_plain_loop(dtypes):
    """A task's own piece and other tasks' pieces (by id, some to vertices it does not have)
    summed per vertex: the same floats as adding them one by one in the pieces' order."""
    rng = random.Random(21)
    ids = rng.sample(range(1_000), 300)
    part = _Part(ids)
    pieces, expected = [], {}
    for number in range(4):
        dtype = dtypes[number % 2]
        chosen = sorted(rng.sample(range(len(ids)), 120))
        values = np.array([rng.random() * 10 for _ in chosen], dtype=np.float64).astype(dtype)
        if number == 0:  # the task's own messages, by position
            pieces.append((np.array(chosen, dtype=np.int64), None, values, None))
            targets = chosen
        else:
            strangers = [1_000 + number, 2_000 + number]  # ids the partition does not have
            sent = [ids[p] for p in chosen] + strangers
            pieces.append((None, np.array(sent, dtype=np.int64),
                           np.concatenate([values, np.ones(2, dtype=dtype)]), None))
            targets = chosen
        for position, value in zip(targets, values.tolist(), strict=True):
            expected[position] = expected.get(position, 0) + value
    inbox = receive(pieces, part, "sum", KnownIds(4))
    assert inbox.positions.tolist() == sorted(expected)
    assert inbox.values.tolist() == [expected[p] for p in sorted(expected)]
    dense = inbox.dense(0.0, float)
    assert dense.tolist() == [expected.get(p, 0.0) for p in range(len(ids))]
    dense[:] = -1.0  # a program may change what it was given: the inbox's next answer is whole
    assert inbox.dense(0.0, float).tolist() == [expected.get(p, 0.0) for p in range(len(ids))]
    assert inbox.dense(-1.0).tolist() == [expected.get(p, -1.0) for p in range(len(ids))]
