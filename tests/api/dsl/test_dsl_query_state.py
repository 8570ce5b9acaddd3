"""The query operator over tables read in windows: its snapshots write what a window added (the rows
and the result's difference, not the rows so far), a Top-N keeps only the rows that can still be in
it, a graph the script's INSERTs grow is kept and grown, not loaded again; each window's rows
against DuckDB over the rows so far, or plain loops over the graph so far."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from collections import Counter

import pytest
from _duckdb_windows import duckdb_windows as duckdb_changes

from gyreflow.api import Environment, JobListener
from gyreflow.api.dsl import graphs
from gyreflow.api.dsl.runner import run

COLUMNS = "id bigint, k int, s varchar, x int"


def rows_of(seed: int, count: int) -> list[tuple]:
    rng = random.Random(seed)
    return [(i, rng.randrange(6), rng.choice("pqr"), rng.randrange(-50, 50)) for i in range(count)]


def script(tmp_path, rows, size: int, query: str) -> str:
    (tmp_path / "a.txt").write_text("".join(",".join(map(str, r)) + "\n" for r in rows), encoding="utf-8")
    return (f"SET geaflow.dsl.window.size = {size};\n"
            f"CREATE TABLE a ({COLUMNS}) WITH (type='file', geaflow.dsl.file.path='{tmp_path / 'a.txt'}');\n"
            f"{query};\n")


def duckdb_windows(rows, size: int, query: str) -> dict[int, Counter]:
    return duckdb_changes({"a": (A_COLUMNS, rows)}, size, query)


A_COLUMNS = "id BIGINT, k INTEGER, s VARCHAR, x INTEGER"

QUERIES = [
    # Top-N: each keeps the rows that can still be in it (ids break ties: one answer)
    "SELECT id, x FROM a ORDER BY x DESC, id LIMIT 4",
    "SELECT id, s FROM a WHERE k > 1 ORDER BY x, id LIMIT 3",
    "SELECT id, x + k FROM a ORDER BY x DESC, id LIMIT 3 OFFSET 2",
    "SELECT * FROM a ORDER BY k, x, id LIMIT 5",
    "SELECT id, -x AS x FROM a ORDER BY x, id LIMIT 3",  # ORDER BY the SELECT's x: every row so far
    # every row so far, the result's difference logged
    "SELECT k, count(*), sum(x) FROM a GROUP BY k",
    "SELECT s, max(x) FROM a WHERE k < 4 GROUP BY s",
    "SELECT s, count(DISTINCT k) FROM a GROUP BY s",
]


@pytest.mark.parametrize("query", QUERIES)
@pytest.mark.parametrize(("seed", "size"), [(1, 6), (2, 11)])
def test_each_window_adds_what_duckdb_adds_over_the_rows_so_far(tmp_path, query, seed, size):
    rows = rows_of(seed, 90)
    got = Environment.local(1, progress=False).sql(script(tmp_path, rows, size, query)).by_window("rows-3")
    want = duckdb_windows(rows, size, query.replace("count(*)", "count(*)::BIGINT").replace(
        "sum(x)", "sum(x)::BIGINT").replace("count(DISTINCT k)", "count(DISTINCT k)::BIGINT"))
    assert {w: Counter(r) for w, r in got.items() if r} == want, query
    assert len(want) > 2


class Bytes(JobListener):
    def __init__(self) -> None:
        self.written: dict[int, int] = {}

    def on_checkpoint(self, checkpoint) -> None:
        self.written[checkpoint.window] = checkpoint.bytes


def late_and_early(written: dict) -> tuple[float, float]:
    sizes = [written[w] for w in sorted(written)]
    return sum(sizes[-10:]) / 10, sum(sizes[5:15]) / 10


@pytest.mark.parametrize("query", ["SELECT id, x FROM a ORDER BY x DESC, id LIMIT 5",
                                   "SELECT id, x FROM a WHERE k > 2"
                                   " UNION ALL SELECT id, x FROM a WHERE k < 2 ORDER BY x LIMIT 1",
                                   "SELECT s, count(DISTINCT k) FROM a GROUP BY s"])
def test_a_snapshot_writes_what_the_window_added_not_the_rows_so_far(tmp_path, query):
    """80 windows of 20 rows: a snapshot of the rows so far would write 8 times more in the last
    windows than in windows 6 to 15 (and a Top-N's rows do not grow at all)."""
    rows = rows_of(3, 80 * 20)
    heard = Bytes()
    env = Environment.local(1, progress=False, config={"state.backend": "rocksdb",
                                                       "state.path": str(tmp_path / "state")})
    env.sql(script(tmp_path, rows, 20, query), listener=heard)
    late, early = late_and_early(heard.written)
    assert len(heard.written) == 80
    assert late < 2 * early, [heard.written[w] for w in sorted(heard.written)]


GRAPH = """
CREATE GRAPH g (
  Vertex person (id bigint ID, name varchar),
  Vertex city (id bigint ID, name varchar),
  Edge knows (srcId bigint SOURCE ID, targetId bigint DESTINATION ID, w int),
  Edge lives (srcId bigint SOURCE ID, targetId bigint DESTINATION ID, w int)
);
CREATE TABLE p (id bigint, name varchar) WITH (type='file', geaflow.dsl.file.path='p.txt');
CREATE TABLE c (id bigint, name varchar) WITH (type='file', geaflow.dsl.file.path='c.txt');
CREATE TABLE e (src bigint, dst bigint, w int, kind varchar) WITH (type='file',
  geaflow.dsl.file.path='e.txt');
CREATE TABLE out (a bigint, b bigint, w int, n varchar) WITH (type='file', geaflow.dsl.file.path='out');
INSERT INTO g.person SELECT id, name FROM p;
INSERT INTO g.city SELECT id, name FROM c;
INSERT INTO g.knows SELECT src, dst, w FROM e WHERE kind = 'k';
INSERT INTO g.lives SELECT src, dst, w FROM e WHERE kind = 'l';
USE GRAPH g;
INSERT INTO out SELECT a, b, w, n FROM (MATCH (a)-[r]->(b) RETURN a.id AS a, b.id AS b, r.w AS w,
  b.name AS n);
"""


def graph_inputs(folder, seed: int, windows: int, size: int):
    """Per window ``size`` rows of each table: people, cities (ids apart; a later row of an id
    renames it), edges of both labels between the ids so far."""
    rng = random.Random(seed)
    people, cities, edges = [], [], []
    for w in range(windows):
        for i in range(size):
            people.append((rng.randrange(3 * (w + 1)), f"p{w}_{i}"))
            cities.append((1000 + rng.randrange(2 * (w + 1)), f"c{w}_{i}"))
            ids = [v for v, _ in people] + [v for v, _ in cities]
            edges.append((rng.choice(ids), rng.choice(ids), rng.randrange(100), rng.choice("kl")))
    for name, listed in (("p", people), ("c", cities), ("e", edges)):
        (folder / f"{name}.txt").write_text("".join(",".join(map(str, r)) + "\n" for r in listed))
    return people, cities, edges


def graph_oracle(people, cities, edges, size: int, windows: int) -> list[Counter]:
    """Per window: each edge so far out of a vertex the window's rows touched (a new vertex, an
    end of a new edge), to a vertex, with the name the vertex has now (a city's row after a
    person's of the same id: the graph's types in order)."""
    out = []
    for w in range(windows):
        end = (w + 1) * size
        names: dict = {}
        for v, n in people[:end]:
            names[v] = n
        for v, n in cities[:end]:
            names[v] = n
        new = slice(w * size, end)
        touched = {v for v, _ in people[new]} | {v for v, _ in cities[new]} | {
            v for s, d, _, _ in edges[new] for v in (s, d)}
        got = Counter()
        for s, d, weight, _ in edges[:end]:
            if s in touched and s in names and d in names:
                got[(s, d, weight, names[d])] += 1
        out.append(got)
    return out


def read_windows(out) -> list[Counter]:
    found = []
    for name in sorted(os.listdir(out)):
        lines = (out / name).read_text().splitlines()
        found.append(Counter((int(a), int(b), int(w), n) for a, b, w, n in (x.split(",") for x in lines)))
    return found


def run_graph(folder, size: int) -> None:
    here = os.getcwd()
    try:
        os.chdir(folder)
        run(Environment.local(progress=False), GRAPH, {"geaflow.dsl.window.size": str(size),
                                                       "geaflow.file.persistent.root": str(folder / "g")},
            root=str(folder), name="graph")
    finally:
        os.chdir(here)


def test_a_match_of_one_edge_walks_the_graph_kept_from_window_to_window(tmp_path, monkeypatch):
    """Each window's rows are the edges out of the vertices it touched over the graph so far; the
    graph is grown by each window's rows: as many edges made as rows came (loading the graph
    again each window made the edges so far every window)."""
    windows, size = 12, 3
    people, cities, edges = graph_inputs(tmp_path, 4, windows, size)
    made = Counter()
    add_edge = graphs.Graph.add_edge

    def counted(self, *args):
        made["edges"] += 1
        add_edge(self, *args)

    monkeypatch.setattr(graphs.Graph, "add_edge", counted)
    run_graph(tmp_path, size)
    want = graph_oracle(people, cities, edges, size, windows)
    assert [c for c in read_windows(tmp_path / "out") if c] == [c for c in want if c]
    assert made["edges"] == len(edges)


def test_a_kept_graph_has_the_order_of_one_loaded_from_the_rows_so_far():
    """Vertices in the order of their first rows (the graph's types in order, then rows), a later
    row's value for an id, edges by their ends in that order, though rows of an earlier type came
    in a later window (a plain loop over the rows so far, type by type, is the oracle)."""
    from gyreflow.api.dsl.catalog import Catalog
    from gyreflow.api.dsl.gql import ElementType, GraphDef
    from gyreflow.api.dsl.query_state import KeptGraphs, apply_change

    catalog = Catalog()
    types = {"a": ElementType("vertex", "a", [("id", "bigint"), ("n", "varchar")], id_column="id"),
             "b": ElementType("vertex", "b", [("id", "bigint"), ("n", "varchar")], id_column="id"),
             "e": ElementType("edge", "e", [("s", "bigint"), ("t", "bigint")], source_column="s",
                              target_column="t"),
             "f": ElementType("edge", "f", [("s", "bigint"), ("t", "bigint")], source_column="s",
                              target_column="t")}
    definition = GraphDef("g", types, {})
    catalog.add_graph(definition, "/nowhere")
    tables = {label: catalog.graph_table(definition, label) for label in types}
    rng = random.Random(7)
    kept = KeptGraphs(catalog, frozenset(tables.values()))
    value = None
    for _ in range(15):
        added = {}
        for label in rng.sample(list(types), rng.randrange(1, 4)):
            if types[label].kind == "vertex":
                added[tables[label]] = [(rng.randrange(12), f"{label}{rng.randrange(99)}") for _ in range(2)]
            else:
                added[tables[label]] = [(rng.randrange(12), rng.randrange(12)) for _ in range(3)]
        value = apply_change(value, (added, {}, (), (), None))
        graph = kept.grown(value, added)["g"]
        so_far = value["all"]
        order, names = [], {}
        for label in ("a", "b"):
            for vid, name in so_far.get(tables[label], []):
                if vid not in names:
                    order.append(vid)
                names[vid] = (label, name)
        assert [(v, x.label, x["n"]) for v, x in graph.vertices.items()] == [(v, *names[v]) for v in order]
        for end, index in ((0, graph.out_edges), (1, graph.in_edges)):
            want: dict = {}
            for label in ("e", "f"):
                for row in so_far.get(tables[label], []):
                    want.setdefault(row[end], []).append((label, row))
            got = {v: [(x.label, (x["s"], x["t"])) for x in listed] for v, listed in index.items()}
            assert {v: listed for v, listed in got.items() if listed} == want


KILLED = -signal.SIGKILL


@pytest.mark.processes
def test_a_run_killed_in_the_middle_resumes_to_the_uninterrupted_runs_files(tmp_path):
    """A Top-N, an aggregate and a MATCH over a growing graph, killed after window 5 of 10 and
    resumed: the same files as a run not killed, each against its oracle."""
    size, windows = 4, 10
    rows = rows_of(6, size * windows)
    queries = {"top": "SELECT id, x FROM a ORDER BY x DESC, id LIMIT 3",
               "counts": "SELECT k, count(DISTINCT s) FROM a GROUP BY k"}
    results = {}
    for name, crash in (("whole", None), ("killed", "window-finished:5")):
        folder = tmp_path / name
        folder.mkdir()
        people, cities, edges = graph_inputs(folder, 8, windows, size)
        text = script(folder, rows, size, "")
        for query in queries:
            text += (f"CREATE TABLE {query}_out (a bigint, b bigint) WITH (type='file', "
                     f"geaflow.dsl.file.path='{folder / query}');\n"
                     f"INSERT INTO {query}_out {queries[query]};\n")
        (folder / "job.sql").write_text(text + GRAPH)
        store = {"GYREFLOW_STATE__BACKEND": "rocksdb", "GYREFLOW_STATE__PATH": str(folder / "state")}
        env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
        env.update({"COLUMNS": "400", "GYREFLOW_ENVIRONMENT__TYPE": "local", **store})
        command = [sys.executable, "-m", "gyreflow", "sql", "job.sql",
                   "--set", f"geaflow.file.persistent.root={folder / 'g'}"]
        if crash is not None:
            done = subprocess.run(command, cwd=folder, env={**env, "GYREFLOW_CRASH_AT": crash},
                                  capture_output=True, text=True, timeout=300, check=False)
            assert done.returncode == KILLED, done.stderr
            command.append("--resume")
        done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=300,
                              check=False)
        assert done.returncode == 0, done.stderr
        results[name] = {f"{q}/{n}": (folder / q / n).read_text()
                         for q in [*queries, "out"] for n in sorted(os.listdir(folder / q))}
        assert [c for c in read_windows(folder / "out") if c] == [
            c for c in graph_oracle(people, cities, edges, size, windows) if c]
        for query, sql in queries.items():
            texts = [(folder / query / n).read_text() for n in sorted(os.listdir(folder / query))]
            got = [Counter(tuple(map(int, line.split(","))) for line in text.split()) for text in texts]
            assert [c for c in got if c] == list(duckdb_windows(rows, size, sql.replace(
                "count(DISTINCT s)", "count(DISTINCT s)::BIGINT")).values())
    assert results["killed"] == results["whole"]
