"""A graph that a script's INSERTs grow window by window, queried per window in the same job (GeaFlow's
dynamic graph): each window's rows checked against networkx and plain-Python loops over the graph so
far, and a run killed in the middle resumed to the same files."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import networkx as nx
import pytest

from gyreflow.api import Environment
from gyreflow.api.dsl.runner import run

VERTICES = 14
EDGES = 36
WINDOW = 4  # edges per window: 9 windows

SCRIPT = """
CREATE GRAPH g (
  Vertex person (id bigint ID, name varchar),
  Edge knows (srcId bigint SOURCE ID, targetId bigint DESTINATION ID, weight double)
) WITH (storeType = 'rocksdb');
CREATE TABLE v (id bigint, name varchar) WITH (type='file', geaflow.dsl.file.path='v.txt',
  geaflow.dsl.window.size = -1);
CREATE TABLE e (src bigint, dst bigint) WITH (type='file', geaflow.dsl.file.path='e.txt',
  geaflow.dsl.window.size = {window});
CREATE TABLE out (a bigint, b bigint{more}) WITH (type='file', geaflow.dsl.file.path='{out}');
INSERT INTO g.person SELECT id, name FROM v;
INSERT INTO g.knows SELECT src, dst, 1.0 FROM e;
USE GRAPH g;
INSERT INTO out {query};
"""

SSSP = "CALL sssp(0) YIELD (vid, distance) RETURN vid, distance"
WCC = "CALL inc_wcc() YIELD (vid, component) RETURN vid, component"
PATHS = ("SELECT a, b, c, d FROM (MATCH (a:person)-[:knows]->(b:person)<-[:knows]-(c:person)"
         "<-[:knows]-(d:person) WHERE a.id <> c.id RETURN a.id AS a, b.id AS b, c.id AS c, d.id AS d)")


def make_edges(seed: int = 5) -> list[tuple[int, int]]:
    """Distinct edges without self-loops, as GeaFlow's own random test makes them (a path's
    unnamed edges are not told apart: parallel edges would give one row)."""
    rng = random.Random(seed)
    edges: dict = {}
    while len(edges) < EDGES:
        src, dst = rng.randrange(VERTICES), rng.randrange(VERTICES)
        if src != dst:
            edges[(src, dst)] = None
    return list(edges)


def versions(edges) -> list[nx.MultiDiGraph]:
    """The graph after each window (every vertex from window 1 on)."""
    graphs, graph = [], nx.MultiDiGraph()
    graph.add_nodes_from(range(VERTICES))
    for start in range(0, len(edges), WINDOW):
        graph = graph.copy()
        graph.add_edges_from(edges[start:start + WINDOW])
        graphs.append(graph)
    return graphs


def changed(values: list[dict]) -> list[list[tuple]]:
    """Per window, the vertices whose value differs from the window before (new ones included)."""
    before: dict = {}
    out = []
    for now in values:
        out.append(sorted((v, x) for v, x in now.items() if before.get(v) != x))
        before = now
    return out


def paths(graph: nx.MultiDiGraph, starts=None) -> list[tuple]:
    """a->b<-c<-d with a != c, from ``starts`` (None: every vertex), one row per path of edges."""
    found = []
    for a in graph.nodes if starts is None else starts:
        for _, b, _ in graph.out_edges(a, keys=True):
            for c, _, _ in graph.in_edges(b, keys=True):
                for d, _, _ in graph.in_edges(c, keys=True):
                    if a != c:
                        found.append((a, b, c, d))
    return found


def write_inputs(folder: Path, edges) -> None:
    (folder / "v.txt").write_text("".join(f"{i},p{i}\n" for i in range(VERTICES)))
    (folder / "e.txt").write_text("".join(f"{s},{d}\n" for s, d in edges))


def per_window(out: Path) -> list[list[tuple]]:
    """The rows of each window's file of a result folder, in order."""
    windows = []
    for name in sorted(os.listdir(out)):
        if name.startswith("partition-"):
            text = (out / name).read_text()
            windows.append([tuple(int(x) for x in line.split(",")) for line in text.splitlines() if line])
    return [w for w in windows if w]  # a window that changed nothing writes no row


def run_script(folder: Path, query: str, more: str = "", settings: dict | None = None) -> list[list[tuple]]:
    out = folder / "out"
    text = SCRIPT.format(window=WINDOW, more=more, out=out, query=query)
    settings = {"geaflow.file.persistent.root": str(folder / "graphs"), **(settings or {})}
    here = os.getcwd()
    try:
        os.chdir(folder)
        run(Environment.local(progress=False), text, settings, root=str(folder), name="stream")
    finally:
        os.chdir(here)
    return per_window(out)


def test_sssp_and_inc_wcc_emit_per_window_what_changed_in_the_graph_so_far(tmp_path):
    edges = make_edges()
    graphs = versions(edges)
    hops = [dict(nx.single_source_shortest_path_length(g, 0)) for g in graphs]
    components = [{v: min(c) for c in nx.weakly_connected_components(g) for v in c} for g in graphs]
    first = tmp_path / "sssp"
    first.mkdir()
    write_inputs(first, edges)
    got = run_script(first, SSSP)
    expected = changed(hops)
    assert [sorted(w) for w in got] == [w for w in expected if w], "sssp per window"
    second = tmp_path / "wcc"
    second.mkdir()
    write_inputs(second, edges)
    got = run_script(second, WCC)
    assert got == [w for w in changed(components) if w], "inc_wcc per window, in vertex order"


def test_a_match_runs_per_window_over_the_graph_so_far(tmp_path):
    edges = make_edges(seed=9)
    write_inputs(tmp_path, edges)
    got = run_script(tmp_path, PATHS, ", c bigint, d bigint")
    expected = [sorted(paths(g)) for g in versions(edges)]
    assert [sorted(w) for w in got] == [w for w in expected if w]


def test_incremental_traversal_finds_per_window_every_path_through_the_windows_changes(tmp_path):
    """GeaFlow's own check (IncrMatchTest): the rows of the windows so far are every path of the graph
    so far; each window's rows are the paths from the vertices the window touched or that reach
    them backwards along the pattern (a plain loop here)."""
    edges = make_edges(seed=11)
    write_inputs(tmp_path, edges)
    got = run_script(tmp_path, PATHS, ", c bigint, d bigint",
                     {"geaflow.dsl.graph.enable.incr.traversal": "true"})
    graphs = versions(edges)
    expected, seen = [], set()
    for w, graph in enumerate(graphs):
        new = edges[w * WINDOW:(w + 1) * WINDOW]
        if w == 0:
            starts = set(graph.nodes)
        else:
            touched = {v for e in new for v in e}
            once = {b for v in touched for _, b in graph.out_edges(v)}  # c -> b, backwards from c
            twice = {a for v in once for a, _ in graph.in_edges(v)}  # a -> b, backwards from b
            starts = touched | once | twice
        expected.append(sorted(paths(graph, starts)))
    assert [sorted(w) for w in got] == [w for w in expected if w]
    for w, graph in enumerate(graphs):
        seen |= set(expected[w])
        assert seen == set(paths(graph)), f"window {w + 1}: the windows so far miss paths"


KILLED = -signal.SIGKILL


def environ(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    env.update({"COLUMNS": "400", "GYREFLOW_ENVIRONMENT__TYPE": "local"})
    env.update(extra)
    return env


@pytest.mark.processes
def test_a_run_killed_in_the_middle_resumes_to_the_uninterrupted_runs_windows(tmp_path):
    edges = make_edges(seed=3)
    graphs = versions(edges)
    expected = [w for w in changed([dict(nx.single_source_shortest_path_length(g, 0)) for g in graphs])
                if w]
    results = {}
    for name, crash in (("whole", None), ("killed", "window-finished:4")):
        folder = tmp_path / name
        folder.mkdir()
        write_inputs(folder, edges)
        script = folder / "stream.sql"
        script.write_text(SCRIPT.format(window=WINDOW, more="", out=folder / "out", query=SSSP))
        store = {"GYREFLOW_STATE__BACKEND": "rocksdb", "GYREFLOW_STATE__PATH": str(folder / "state")}
        command = [sys.executable, "-m", "gyreflow", "sql", "stream.sql",
                   "--set", f"geaflow.file.persistent.root={folder / 'graphs'}"]
        if crash is not None:
            done = subprocess.run(command, cwd=folder, env=environ({**store, "GYREFLOW_CRASH_AT": crash}),
                                  capture_output=True, text=True, timeout=300, check=False)
            assert done.returncode == KILLED, done.stderr
            assert 0 < len(os.listdir(folder / "out")) < len(graphs)
            command.append("--resume")
        done = subprocess.run(command, cwd=folder, env=environ(store), capture_output=True, text=True,
                              timeout=300, check=False)
        assert done.returncode == 0, done.stderr
        results[name] = {n: (folder / "out" / n).read_text() for n in sorted(os.listdir(folder / "out"))}
        assert [sorted(w) for w in per_window(folder / "out")] == expected
    assert results["killed"] == results["whole"]


def test_a_stored_graph_keeps_the_rows_of_every_job_that_inserted_into_it(tmp_path):
    graph = ("CREATE GRAPH kept (Vertex person (id bigint ID, name varchar)) WITH (storeType='rocksdb');\n")
    settings = {"geaflow.file.persistent.root": str(tmp_path / "graphs")}
    env = Environment.local(progress=False)
    for job, (vid, name) in enumerate([(2, "vadas"), (6, "peter")]):
        run(env, graph + f"INSERT INTO kept.person SELECT {vid}, '{name}';", settings, root=str(tmp_path),
            name=f"write-{job}")
    run(env, graph + "INSERT INTO kept.person SELECT 2, 'vadas';", settings, root=str(tmp_path),
        name="write-0", fresh=True)  # the first job again: its own rows replaced, not doubled
    result = run(env, graph + "USE GRAPH kept;\nSELECT * FROM (MATCH (a) RETURN a.id, a.name);", settings,
                 root=str(tmp_path), name="read")
    assert sorted(result.output("rows-3")) == [(2, "vadas"), (6, "peter")]


def test_a_stored_graph_declared_using_tables_keeps_their_rows_for_later_jobs(tmp_path):
    """As GeaFlow loads a graph's `using` tables into its store when the graph is first created: a
    later job that declares the graph without `using` reads them, and neither job doubles an edge."""
    edges = make_edges(seed=13)
    write_inputs(tmp_path, edges)
    tables = (f"CREATE TABLE v (id bigint, name varchar) WITH (type='file', "
              f"geaflow.dsl.file.path='{tmp_path / 'v.txt'}');\n"
              f"CREATE TABLE e (src bigint, dst bigint) WITH (type='file', "
              f"geaflow.dsl.file.path='{tmp_path / 'e.txt'}');\n")
    using = ("CREATE GRAPH u (Vertex person using v WITH ID(id), Edge knows using e WITH ID(src, dst)) "
             "WITH (storeType='rocksdb');\n")
    inline = ("CREATE GRAPH u (Vertex person (id bigint ID, name varchar), "
              "Edge knows (src bigint SOURCE ID, dst bigint DESTINATION ID)) WITH (storeType='rocksdb');\n")
    count = ("USE GRAPH u;\n"
             "SELECT a, b FROM (MATCH (x:person)-[k:knows]->(y:person) RETURN x.id AS a, y.id AS b);\n")
    settings = {"geaflow.file.persistent.root": str(tmp_path / "graphs")}
    env = Environment.local(progress=False)
    first = run(env, tables + using + count, settings, root=str(tmp_path), name="first")
    again = run(env, tables + using + count, settings, root=str(tmp_path), name="again")
    later = run(env, inline + count, settings, root=str(tmp_path), name="later")
    for result, rows in ((first, "rows-5"), (again, "rows-5"), (later, "rows-3")):
        assert Counter(result.output(rows)) == Counter(edges)
