"""Delta PageRank: ``incremental_pagerank`` sends a vertex's rank change only once it exceeds the
tolerance, and still equals networkx on every version of a changing graph."""

from __future__ import annotations

import math
import random

import networkx as nx
import numpy as np
import pytest

from gyreflow.api import Environment, SizeTumblingWindow
from gyreflow.api.graph import Edge, GraphView, RemoveEdge
from gyreflow.api.graph.incremental_algorithms import ArrayIncrementalPageRank

SENT: list = []


class Recording(ArrayIncrementalPageRank):
    """Records the ids of the vertices that sent a change in each superstep after the first,
    other than the full superstep before an exact step."""

    def compute(self, part, inbox):
        values = super().compute(part, inbox)
        if part.iteration > 1 and part.num_vertices and part.aggregated("active") > 0:
            sent = values["sent"] != part.values["sent"]
            if part.iteration == 2:
                sent = values["sent"] != part.values["sent"] / part.aggregated("mass")
            SENT.append((part.window, sorted(part.ids[sent].tolist())))
        return values


def two_rings(size: int) -> list:
    """Two rings with chords, ``0..size-1`` and ``100..100+size-1``: no dangling vertex."""
    edges = []
    for base in (0, 100):
        edges += [Edge(base + i, base + (i + 1) % size) for i in range(size)]
        edges += [Edge(base + i, base + (i + 3) % size) for i in range(0, size, 2)]
    return edges


def test_an_unchanged_component_sends_no_change():
    """Window 2 moves one edge of the first ring (no vertex comes or goes): after the first
    superstep only vertices of that ring send their rank changes; the other ring's ranks move by
    less than the tolerance and stay put. Each window's ranks equal networkx's."""
    first = two_rings(12)
    batches = [first, [RemoveEdge(0, 1), Edge(0, 6)]]
    SENT.clear()
    pipeline = Environment.local(progress=False).pipeline("delta")

    @pipeline.task
    def ranks(ctx):
        edges = ctx.source(batches, SizeTumblingWindow(1), parallelism=1).flat_map(list)
        graph = GraphView(None, edges, directed=False)
        graph.incremental_compute(Recording(tolerance=1e-12)).collect("ranks")

    by_window = pipeline.execute().by_window("ranks")
    later = [ids for window, ids in SENT if window == 2]
    assert later and any(later)
    assert all(v < 100 for ids in later for v in ids), later
    graph = nx.Graph([(e.src, e.dst) for e in first])
    folded = dict(by_window[1])
    check(folded, graph)
    graph.remove_edge(0, 1)
    graph.add_edge(0, 6)
    folded.update(by_window[2])
    check(folded, graph)
    assert all(v < 100 for v, _ in by_window[2])  # the other ring's ranks did not change


def check(folded: dict, graph: nx.Graph) -> None:
    want = nx.pagerank(graph, alpha=0.85, tol=1e-14, max_iter=10_000, weight=None)
    assert set(folded) == set(want)
    off = {v: (folded[v], want[v]) for v in want if not math.isclose(folded[v], want[v],
                                                                     rel_tol=1e-7)}
    assert not off


@pytest.mark.parametrize("directed", [False, True], ids=["undirected", "directed"])
def test_delta_pagerank_equals_networkx_on_every_version(directed):
    """Additions, removals, new vertices and dangling ones (directed), on three tasks."""
    rng = random.Random(13 + directed)
    edges: set = set()
    batches, versions = [], []
    for window in range(7):
        batch = []
        for _ in range(40 if window == 0 else 8):
            if edges and rng.random() < 0.35:
                pair = rng.choice(sorted(edges))
                edges.discard(pair)
                batch.append(RemoveEdge(*pair))
            else:
                a, b = rng.randrange(30 + 3 * window), rng.randrange(30 + 3 * window)
                pair = (a, b) if directed else (min(a, b), max(a, b))
                if a != b and pair not in edges:
                    edges.add(pair)
                    batch.append(Edge(*pair))
        batches.append(batch)
        versions.append(set(edges))
    pipeline = Environment.local(progress=False).pipeline("delta-versions")

    @pipeline.task
    def ranks(ctx):
        stream = ctx.source(batches, SizeTumblingWindow(1), parallelism=1).flat_map(list)
        graph = GraphView(None, stream, directed=directed, parallelism=3)
        graph.incremental_compute(ArrayIncrementalPageRank(tolerance=1e-12)).collect("ranks")

    by_window = pipeline.execute().by_window("ranks")
    folded: dict = {}
    seen: set = set()
    for window, pairs in enumerate(versions, start=1):
        for vertex, rank in by_window.get(window, []):
            folded[vertex] = rank
        seen |= {v for r in batches[window - 1] if isinstance(r, Edge) for v in (r.src, r.dst)}
        graph = nx.DiGraph() if directed else nx.Graph()
        graph.add_nodes_from(seen)
        graph.add_edges_from(pairs)
        check(folded, graph)
    assert np.isfinite(list(folded.values())).all()
