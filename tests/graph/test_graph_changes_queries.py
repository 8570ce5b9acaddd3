"""Queries and programs on a changing graph: each request reads its version, from given or all vertices."""

from __future__ import annotations

import copy
import random
from collections import Counter

import pytest

from gyreflow.api import SizeTumblingWindow
from gyreflow.api.graph import (
    EVERY_VERTEX,
    Edge,
    GraphView,
    Query,
    RemoveEdge,
    RemoveVertex,
    VertexCentricCompute,
    query_graph,
)
from gyreflow.api.graph.query import QuerySyntaxError


@pytest.mark.parametrize("environment_type", ["local", "workers"])
def test_queries_name_the_version_they_ask_about(make_env):
    """Ann knows Bo in version 1; window 2 replaces Bo with Cy: a request about version 1 still
    finds Bo, one about the current version finds Cy, and the plain-loop answer agrees."""
    people = {1: {"label": "Person", "name": "Ann"}, 2: {"label": "Person", "name": "Bo"},
              3: {"label": "Person", "name": "Cy"}}
    knows = {"label": "KNOWS"}
    windows = [[Edge(1, 2, knows)], [RemoveEdge(1, 2), Edge(1, 3, knows)], []]
    edges_at = {1: {(1, 2)}, 2: {(1, 3)}, 3: {(1, 3)}}
    asks = [[], [("old", {}, 1), ("now", {}, None)], [("before", {}, "completed")]]
    query = Query("MATCH (a:Person {name: 'Ann'})-[:KNOWS]->(b) RETURN b.name")
    pipeline = make_env().pipeline("versioned-queries")

    @pipeline.task
    def versioned(ctx):
        vertices = ctx.source([list(people.items()), [], []], SizeTumblingWindow(1),
                              parallelism=1).flat_map(list)
        edges = ctx.source(windows, SizeTumblingWindow(1), parallelism=1).flat_map(list)
        requests = ctx.source(asks, SizeTumblingWindow(1), parallelism=1).flat_map(list)
        graph = GraphView(vertices, edges, parallelism=2, retained_versions=2)
        query_graph(graph, query, requests, list(people), versions=True).collect("matches")

    matches = pipeline.execute().output("matches")
    window_of = {request[0]: w for w, here in enumerate(asks, 1) for request in here}
    for request_id, _, version in (r for here in asks for r in here):
        number = {None: window_of[request_id], "completed": window_of[request_id] - 1}.get(
            version, version)
        want = sorted(people[dst]["name"] for src, dst in edges_at[number] if src == 1)
        got = query.rows([m for r, m in matches if r == request_id])
        assert sorted(row["b.name"] for row in got) == want, request_id


def people_windows(seed: int = 9, windows: int = 5):
    """Windows of a changing property graph: new people, new ages for some, KNOWS edges added and
    removed, people without edges removed, every other window one with them (``detach``); and
    every version as ``(values, edges)`` (version 0: empty)."""
    rng = random.Random(seed)
    values: dict = {}
    edges: set = set()
    vertex_windows, edge_windows, versions = [], [], {0: ({}, set())}
    next_id = 0
    for window in range(1, windows + 1):
        changed = []
        for i in range(next_id, next_id + 8):
            changed.append((i, {"label": "Person", "name": f"p{i}", "age": rng.randint(18, 70)}))
        next_id += 8
        for i in rng.sample(sorted(values), min(3, len(values))):  # a new age for some
            changed.append((i, {**values[i], "age": rng.randint(18, 70)}))
        values.update(changed)
        here = []
        for _ in range(12):
            a, b = rng.sample(sorted(values), 2)
            if (a, b) not in edges:
                edges.add((a, b))
                here.append(Edge(a, b, {"label": "KNOWS"}))
        for a, b in rng.sample(sorted(edges), min(3, len(edges))):
            edges.discard((a, b))
            here.append(RemoveEdge(a, b))
        linked = {v for edge in edges for v in edge}
        for vid in sorted(set(values) - linked)[:2]:  # removed after the window's other changes
            del values[vid]
            changed.append((vid, RemoveVertex(vid)))
        if window % 2 == 0:  # someone who still knows people leaves, with their edges
            vid = rng.choice(sorted(linked))
            del values[vid]
            edges = {edge for edge in edges if vid not in edge}
            changed.append((vid, RemoveVertex(vid, detach=True)))
        vertex_windows.append(changed)
        edge_windows.append(here)
        versions[window] = (copy.deepcopy(values), set(edges))
    return vertex_windows, edge_windows, versions


def test_queries_start_at_every_vertex_of_the_version_they_read(make_env, environment_type):
    """No vertex ids given: each request starts at every vertex of its version, which changes every
    window (new people, new ages, edges removed); checked against plain loops on each version."""
    vertex_windows, edge_windows, versions = people_windows()
    asks = [[(f"w{w}-{kind}", {"age": 40}, version) for kind, version in
             (("now", None), ("completed", "completed"), ("first", 1))]
            for w in range(1, len(edge_windows) + 1)]
    older = Query("MATCH (a:Person)-[:KNOWS]->(b:Person) WHERE b.age > $age "
                  "RETURN a.name AS a, b.name AS b")
    reach = Query("MATCH (a:Person)-[:KNOWS*2]->(c) RETURN a.name AS a, count(*) AS n")
    people = Query("MATCH (a:Person) WHERE a.age > $age RETURN count(*) AS n")
    pipeline = make_env().pipeline("queries-everywhere")

    @pipeline.task
    def everywhere(ctx):
        vertices = ctx.source(vertex_windows, SizeTumblingWindow(1), parallelism=1).flat_map(list)
        edges = ctx.source(edge_windows, SizeTumblingWindow(1), parallelism=1).flat_map(list)
        requests = ctx.source(asks, SizeTumblingWindow(1), parallelism=1).flat_map(list)
        graph = GraphView(vertices, edges, parallelism=2, retained_versions=len(edge_windows))
        query_graph(graph, older, requests, versions=True, name="older").collect("older")
        query_graph(graph, reach, requests, versions=True, name="reach").collect("reach")
        query_graph(graph, people, requests, versions=True, name="people").collect("people")

    result = pipeline.execute()
    for window, here in enumerate(asks, 1):
        for request_id, params, version in here:
            number = {None: window, "completed": window - 1}.get(version, version)
            values, edges = versions[number]
            name = {v: value["name"] for v, value in values.items()}
            want = Counter((name[a], name[b]) for a, b in edges if values[b]["age"] > 40)
            got = older.rows([m for r, m in result.output("older") if r == request_id], params)
            assert Counter((row["a"], row["b"]) for row in got) == want, request_id
            paths = Counter(name[a] for a, b in edges for x, c in edges if x == b and (x, c) != (a, b))
            got = reach.rows([m for r, m in result.output("reach") if r == request_id], params)
            assert {row["a"]: row["n"] for row in got} == dict(paths), request_id
            got = people.rows([m for r, m in result.output("people") if r == request_id], params)
            assert got == [{"n": sum(value["age"] > 40 for value in values.values())}], request_id
    assert any(versions[w][1] != versions[w - 1][1] for w in range(2, len(edge_windows) + 1))
    assert any(set(versions[w - 1][0]) - set(versions[w][0]) for w in range(2, len(edge_windows) + 1))


class OutDegrees(VertexCentricCompute):
    """A request ``(key, None)`` asks every vertex for its out-degree, ``(key, v)`` only ``v``."""

    starts_at_every_vertex = True
    max_iterations = 2

    def start(self, request):
        key, target = request
        return [(EVERY_VERTEX if target is None else target, key)]

    def compute(self, vertex, messages):
        for key in messages:
            vertex.emit((key, vertex.id, len(vertex.out_edges)))


@pytest.mark.parametrize("environment_type", ["local", "workers"])
def test_a_program_starts_at_every_vertex_or_at_the_ones_it_names(make_env):
    edges = [(a, b) for a in range(12) for b in range(a + 1, 12) if (a * b) % 5 == 1]
    asks = [("all", None), ("three", 3), ("eleven", 11)]
    pipeline = make_env().pipeline("every-vertex")

    @pipeline.task
    def degrees(ctx):
        graph = GraphView(ctx.source([(v, None) for v in range(12)]), ctx.source(edges),
                          parallelism=2)
        graph.traversal(ctx.source(asks), OutDegrees()).collect("degrees")

    got = sorted(pipeline.execute().output("degrees"))
    degree = Counter(a for a, _ in edges)
    want = sorted([("all", v, degree[v]) for v in range(12)]
                  + [("three", 3, degree[3]), ("eleven", 11, degree[11])])
    assert got == want


def test_a_query_whose_patterns_share_nothing_needs_vertex_ids():
    query = Query("MATCH (a)-[:KNOWS]->(b), (c)-[:KNOWS]->(d) RETURN a, c")
    with pytest.raises(QuerySyntaxError, match=r"pattern starting at \(c\) shares no variable"):
        query.program()
    assert query.program([1, 2]).vertex_ids == (1, 2)
    Query("MATCH (a)-[:KNOWS]->(b), (b)-[:KNOWS]->(d) RETURN a, d").program()  # joined: fine
