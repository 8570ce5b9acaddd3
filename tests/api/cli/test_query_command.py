"""``gyreflow query GRAPH_DIR|JOB`` and ``gyreflow explain QUERY``: a job's stored graph, graph folders,
and their errors, as a user runs them (subprocesses, output piped), against plain-Python oracles."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from test_graph_query import social_graph
from test_graph_recovery import (
    CHANGING_LINES,
    CHANGING_WINDOW,
    changing_versions,
    environ,
    write_changes,
)

ROOT = Path(__file__).resolve().parents[3]
CONFORMANCE = ROOT / "tests" / "data" / "graphalytics"  # the Graphalytics examples, kept here
WINDOWS = CHANGING_LINES // CHANGING_WINDOW
TIMEOUT = 300

pytestmark = pytest.mark.processes

SOCIAL_JOB = '''
"""Two per-vertex computations on one directed property graph (so the job keeps two graphs)."""
import json
import sys

from gyreflow.api import Environment
from gyreflow.api.graph import GraphView
from gyreflow.api.graph_algorithms import ConnectedComponents

data = json.loads(open(sys.argv[1], encoding="utf-8").read())
pipeline = Environment.from_config().pipeline("social")


@pipeline.task(name="people")
def people(ctx):
    vertices = ctx.source([tuple(v) for v in data["vertices"]], name="vertices")
    edges = ctx.source([tuple(e) for e in data["edges"]], name="edges")
    graph = GraphView(vertices, edges, directed=True)
    graph.compute(ConnectedComponents(directed=True), name="components").collect("components")
    graph.compute(ConnectedComponents(directed=True), name="again").collect("again")


pipeline.execute()
'''


def gyreflow(*args: str, store: dict[str, str], cwd: Path | None = None):
    return subprocess.run([sys.executable, "-m", "gyreflow", *args], env=environ(store), cwd=cwd,
                          capture_output=True, text=True, timeout=TIMEOUT, check=False)


def rows(done) -> list[dict]:
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def one_error_line(done, status: int, *fragments: str) -> str:
    assert done.returncode == status, (done.returncode, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def neighbour_pairs(edges) -> Counter:
    """Both orientations of every undirected edge between two different vertices."""
    pairs = Counter()
    for src, dst in edges:
        if src != dst:
            pairs[(src, dst)] += 1
            pairs[(dst, src)] += 1
    return pairs


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> dict[str, dict[str, str]]:
    """Three jobs with stored state: the array WCC on RocksDB, the per-vertex snapshot components
    on SQLite (JDBC), and a directed property graph with two computations on RocksDB."""
    root = tmp_path_factory.mktemp("query-jobs")
    changing_file = write_changes(root / "changes.txt")
    stores = {
        "array": {"GYREFLOW_STATE__BACKEND": "rocksdb", "GYREFLOW_STATE__PATH": str(root / "a")},
        "entries": {"GYREFLOW_STATE__BACKEND": "jdbc", "GYREFLOW_STATE__PATH": str(root / "b")},
        "social": {"GYREFLOW_STATE__BACKEND": "rocksdb", "GYREFLOW_STATE__PATH": str(root / "c")},
    }
    args = ["--edges", str(changing_file), "--window", str(CHANGING_WINDOW), "--parallelism", "2"]
    for kind, script in (("array", "incremental_wcc.py"), ("entries", "graph_versions.py")):
        done = gyreflow("run", "--quiet", str(ROOT / "examples" / script), "--", *args,
                        "--output", str(root / f"out-{kind}"), store=stores[kind])
        assert done.returncode == 0, done.stderr
    vertices, edges = social_graph()
    data = root / "social.json"
    data.write_text(json.dumps({"vertices": vertices, "edges": edges}), encoding="utf-8")
    script = root / "social_job.py"
    script.write_text(SOCIAL_JOB, encoding="utf-8")
    done = gyreflow("run", "--quiet", str(script), "--", str(data), store=stores["social"])
    assert done.returncode == 0, done.stderr
    return stores


@pytest.mark.parametrize(("kind", "job"), [("array", "incremental-wcc/incremental_wcc"),
                                           ("entries", "graph-versions/graph_versions")])
def test_a_jobs_graph_is_its_last_completed_window_or_a_retained_one(stored, kind, job):
    versions = changing_versions()
    for window in (None, WINDOWS - 1):
        flags = [] if window is None else ["--window", str(window)]
        vertices, edges = versions[WINDOWS if window is None else window]
        counted = rows(gyreflow("query", job, "MATCH (a) RETURN count(*) AS n", *flags,
                                store=stored[kind]))
        assert counted == [{"n": len(vertices)}]
        pairs = rows(gyreflow("query", job, "MATCH (a)-[]-(b) RETURN a AS v, b AS w", *flags,
                              store=stored[kind]))
        got = Counter((row["v"], row["w"]) for row in pairs if row["v"] != row["w"])
        assert got == neighbour_pairs(edges)
    # the oracle tells the versions apart: a removal or an addition happened in the last window
    assert neighbour_pairs(versions[WINDOWS][1]) != neighbour_pairs(versions[WINDOWS - 1][1])


def test_a_directed_property_graph_keeps_labels_properties_and_direction(stored):
    vertices, edges = social_graph()
    values = dict(vertices)
    text = ("MATCH (a:Person)-[:KNOWS]->(b:Person) WHERE b.age > $age "
            "RETURN a.name AS a, b.name AS b")
    done = gyreflow("query", "social/people", text, "--param", "age=40", "--graph", "components",
                    store=stored["social"])
    got = Counter((row["a"], row["b"]) for row in rows(done))
    expected = Counter((values[s]["name"], values[d]["name"]) for s, d, value in edges
                       if value["label"] == "KNOWS" and values[d].get("age", 0) > 40)
    assert got == expected and expected


def test_a_job_with_two_graphs_needs_one_named(stored):
    done = gyreflow("query", "social/people", "MATCH (a) RETURN a", store=stored["social"])
    one_error_line(done, 2, "2 graphs", "(again, components)", "--graph")
    done = gyreflow("query", "social/people", "MATCH (a) RETURN a", "--graph", "nope",
                    store=stored["social"])
    one_error_line(done, 2, "no graph 'nope'", "again, components")


def test_an_unknown_job_or_window_is_one_line_naming_what_there_is(stored):
    done = gyreflow("query", "incremental-wcc/nope", "MATCH (a) RETURN a", store=stored["array"])
    one_error_line(done, 2, "no stored state for job 'incremental-wcc/nope'",
                   "incremental-wcc/incremental_wcc")
    done = gyreflow("query", "data/grpah", "MATCH (a) RETURN a", store=stored["array"])
    one_error_line(done, 2, "no stored state for job 'data/grpah'", "no folder or file has that name")
    done = gyreflow("query", "incremental-wcc/incremental_wcc", "MATCH (a) RETURN a",
                    "--window", "2", store=stored["array"])
    one_error_line(done, 2, f"keeps windows {WINDOWS - 1}, {WINDOWS}, not 2")


def test_a_jobs_store_is_left_as_it_was(stored):
    before = gyreflow("snapshots", store=stored["array"])
    rows(gyreflow("query", "incremental-wcc/incremental_wcc", "MATCH (a) RETURN count(*) AS n",
                  store=stored["array"]))
    after = gyreflow("snapshots", store=stored["array"])
    assert before.returncode == after.returncode == 0
    assert before.stdout == after.stdout  # no job of its own, nothing written


def read_edge_file(path: Path) -> list[tuple[int, int]]:
    return [(int(line.split()[0]), int(line.split()[1]))
            for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_graph_folders_and_properties_files(tmp_path):
    folder = tmp_path / "dataset"
    folder.mkdir()
    for suffix in (".v", ".e", ".properties"):
        shutil.copy(CONFORMANCE / f"example-directed{suffix}", folder)
    directed = read_edge_file(CONFORMANCE / "example-directed.e")
    done = gyreflow("query", str(folder), "MATCH (a)-[]->(b) RETURN a AS s, b AS d", store={})
    assert Counter((row["s"], row["d"]) for row in rows(done)) == Counter(directed)
    # the properties file says the other dataset is undirected: every edge both ways
    undirected = read_edge_file(CONFORMANCE / "example-undirected.e")
    done = gyreflow("query", str(CONFORMANCE / "example-undirected.properties"),
                    "MATCH (a)-[]->(b) RETURN a AS s, b AS d", store={})
    assert Counter((row["s"], row["d"]) for row in rows(done)) == neighbour_pairs(undirected)
    # JSON lines in a folder
    jsonl = tmp_path / "people"
    jsonl.mkdir()
    (jsonl / "vertices.jsonl").write_text('{"id": 1, "name": "Ann"}\n\r\n{"id": 2, "name": "Bo"}\n')
    (jsonl / "edges.jsonl").write_text('{"src": 1, "dst": 2, "label": "KNOWS"}\n')
    done = gyreflow("query", str(jsonl), "MATCH (a)-[:KNOWS]->(b) RETURN a.name AS a, b.name AS b",
                    store={})
    assert rows(done) == [{"a": "Ann", "b": "Bo"}]


def test_graph_file_errors_name_the_file_and_line(tmp_path):
    (tmp_path / "vertices.jsonl").write_text('{"id": 1}\n\nnot json\n', encoding="utf-8")
    (tmp_path / "edges.jsonl").write_text('{"src": 1}\n', encoding="utf-8")
    done = gyreflow("query", str(tmp_path), "MATCH (a) RETURN a", store={})
    one_error_line(done, 2, "vertices.jsonl:3: not a JSON object")
    (tmp_path / "vertices.jsonl").write_text('{"id": 1}\n', encoding="utf-8")
    done = gyreflow("query", str(tmp_path), "MATCH (a) RETURN a", store={})
    one_error_line(done, 2, "edges.jsonl:1: an edge line is a JSON object with src, dst")
    done = gyreflow("query", str(CONFORMANCE), "MATCH (a) RETURN a", store={})
    one_error_line(done, 2, "2 pairs", "example-directed, example-undirected", "NAME.properties")


def test_explain_prints_a_querys_plan():
    done = gyreflow("explain", "MATCH (a:Person)-[:KNOWS*1..2]->(b) RETURN b.name, count(*) "
                    "ORDER BY b.name LIMIT 3", store={})
    assert done.returncode == 0, done.stderr
    plan = done.stdout.splitlines()
    assert plan[1].strip().startswith("Node (a:Person)") and "start at every vertex" in plan[1]
    assert "hops 1..2" in plan[2] and plan[3].strip().startswith("Node (b)")
    assert [line.strip().split()[0] for line in plan[5:]] == ["Aggregate", "Order", "Skip/Limit"]
    one_error_line(gyreflow("explain", "MATCH (a) RETURN a UNION MATCH (b) RETURN b", store={}),
                   2, "unsupported: UNION at 1:20")
    one_error_line(gyreflow("explain", "--format", "dot", "MATCH (a) RETURN a", store={}),
                   2, "text only")


def test_a_named_path_is_refused_naming_it():
    """``MATCH p = ...`` is openCypher outside the subset: the refusal names it, as for UNION."""
    query = "MATCH p = (a)-[]->(b) RETURN p"
    done = gyreflow("query", str(CONFORMANCE / "example-directed.properties"), query, store={})
    one_error_line(done, 2, "unsupported: named path (p = ...) at 1:7")
    one_error_line(gyreflow("explain", query, store={}), 2, "unsupported: named path (p = ...) at 1:7")


def test_integer_division_truncates_and_by_zero_is_one_error_line():
    """openCypher arithmetic as a user sees it: -7 / 2 is -3, -7 % 3 is -1 (Python would say -4
    and 2); an integer / or % by 0 is one error line with exit status 2, a float one infinity."""
    graph = str(CONFORMANCE / "example-directed.properties")
    done = gyreflow("query", graph, "MATCH (a) WHERE id(a) = 1 RETURN -7 / 2 AS q, -7 % 3 AS r, "
                    "7 % -3 AS s, -7.5 % 2 AS f", store={})
    assert rows(done) == [{"q": -3, "r": -1, "s": 1, "f": -1.5}]
    done = gyreflow("query", graph, "MATCH (a) WHERE id(a) / 0 = 1 RETURN a", store={})
    one_error_line(done, 2, "integer division by zero in a query: ", " / 0 (openCypher raises")


def test_an_edge_may_name_a_vertex_the_vertex_file_lacks(tmp_path):
    """A JSON-lines edge to a vertex missing from vertices.jsonl makes the vertex, as a pipeline's
    graph does: a pattern and its mirror image agree, against networkx."""
    nx = pytest.importorskip("networkx")
    edges = [(1, 2), (2, 3), (3, 1), (4, 2), (5, 5), (2, 3)]  # 3, 4, 5 only named by edges
    (tmp_path / "vertices.jsonl").write_text('{"id": 1, "name": "Ann"}\n{"id": 2}\n', "utf-8")
    (tmp_path / "edges.jsonl").write_text(
        "".join(json.dumps({"src": s, "dst": d}) + "\n" for s, d in edges), "utf-8")
    oracle = nx.MultiDiGraph()
    oracle.add_nodes_from([1, 2])
    oracle.add_edges_from(edges)
    forward = rows(gyreflow("query", str(tmp_path), "MATCH (a)-->(b) RETURN a, b", store={}))
    mirrored = rows(gyreflow("query", str(tmp_path), "MATCH (b)<--(a) RETURN a, b", store={}))
    expected = Counter(oracle.edges())
    assert Counter((r["a"], r["b"]) for r in forward) == expected
    assert Counter((r["a"], r["b"]) for r in mirrored) == expected
    alone = rows(gyreflow("query", str(tmp_path), "MATCH (a) RETURN a, a.name AS name", store={}))
    assert sorted((r["a"], r["name"]) for r in alone) == [(1, "Ann")] + [
        (v, None) for v in sorted(oracle.nodes) if v != 1]


def test_window_and_graph_options_on_files_are_refused(tmp_path):
    (tmp_path / "vertices.jsonl").write_text('{"id": 1}\n', "utf-8")
    (tmp_path / "edges.jsonl").write_text('{"src": 1, "dst": 1}\n', "utf-8")
    for options in (["--window", "9"], ["--graph", "g"], ["--window", "1", "--graph", "g"]):
        done = gyreflow("query", *options, str(tmp_path), "MATCH (a) RETURN a", store={})
        assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr
        assert done.stderr.startswith("error: ") and "a job's stored graphs" in done.stderr
        for option in options[::2]:
            assert option in done.stderr.splitlines()[0]


def test_queries_and_graph_runs_at_once_leave_the_configured_store_alone(tmp_path):
    """Two file queries and two ``gyreflow graph`` runs at once, with RocksDB configured: each
    ends well, with the plain loop's answer, and neither meets the other nor writes to the store."""
    import random

    draw = random.Random(7)
    edges = [(draw.randrange(300), draw.randrange(300)) for _ in range(1200)]
    (tmp_path / "vertices.jsonl").write_text(
        "".join(json.dumps({"id": v}) + "\n" for v in range(300)), "utf-8")
    (tmp_path / "edges.jsonl").write_text(
        "".join(json.dumps({"src": s, "dst": d}) + "\n" for s, d in edges), "utf-8")
    (tmp_path / "g.v").write_text("".join(f"{v}\n" for v in range(300)), "utf-8")
    (tmp_path / "g.e").write_text("".join(f"{s} {d}\n" for s, d in set(edges)), "utf-8")
    store = {"GYREFLOW_STATE__BACKEND": "rocksdb", "GYREFLOW_STATE__PATH": str(tmp_path / "state")}
    out_degree = Counter(s for s, _ in edges)
    # (a)-->(b)-->(c): walks of two edges, never one edge twice (a self loop followed by itself)
    two_hops = sum(out_degree[d] for _, d in edges) - sum(s == d for s, d in edges)
    query = [sys.executable, "-m", "gyreflow", "query", str(tmp_path),
             "MATCH (a)-->(b)-->(c) RETURN count(*) AS n"]
    graph = [sys.executable, "-m", "gyreflow", "graph", "wcc", "--vertices", str(tmp_path / "g.v"),
             "--edges", str(tmp_path / "g.e"), "--env", "local", "-q", "--output"]
    runs = [subprocess.Popen(command, env=environ(store), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
            for command in (query, query, graph + [str(tmp_path / "w1")],
                            graph + [str(tmp_path / "w2")])]
    done = [(run.wait(TIMEOUT), *run.communicate()) for run in runs]
    for status, _stdout, stderr in done:
        assert status == 0 and "Traceback" not in stderr, stderr
    assert [json.loads(stdout) for _, stdout, _ in done[:2]] == [{"n": two_hops}] * 2
    parent = list(range(300))  # union-find: the components the WCC labels must draw

    def root(v: int) -> int:
        while parent[v] != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    for s, d in edges:
        parent[root(s)] = root(d)
    for name in ("w1", "w2"):
        labels = dict(line.split() for line in (tmp_path / name).read_text("utf-8").splitlines())
        pairs = {(root(int(v)), label) for v, label in labels.items()}
        assert len(pairs) == len({r for r, _ in pairs}) == len({lab for _, lab in pairs})
    listed = gyreflow("snapshots", "--json", store=store)
    assert listed.returncode == 0 and json.loads(listed.stdout)["jobs"] == [], listed.stdout
