"""The graph algorithm library on seeded random graphs against the plain-Python references.

Static algorithms: every vertex's value against ``graph_reference`` (BFS, CDLP and WCC labels
exactly, PageRank, LCC and SSSP within 1e-9 relative). Incremental WCC and BFS: after every window,
the per-window changed results folded together equal the reference over everything appended so far,
and a window only emits vertices whose value changed. k-hop: one result per request, the start
vertex missing from the graph included. Bad input files: ``gyreflow graph`` names file and line.

Spark rounds cost ~0.3-1 s each here, so the Spark cases are few and small.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import graph_reference as ref
import pytest
from _environments import environment_variables
from click.testing import CliRunner

from gyreflow.api import SizeTumblingWindow
from gyreflow.api.cli import main
from gyreflow.api.graph import GraphView, VertexCentricCompute, algorithms

STATIC = ("bfs", "pr", "wcc", "cdlp", "lcc", "sssp")
DAMPING, PR_ITERATIONS, CDLP_ITERATIONS = 0.85, 6, 4


def close(got: float, expected: float, tolerance: float = 1e-9) -> bool:
    if math.isinf(expected) or math.isinf(got):
        return got == expected
    return abs(got - expected) <= tolerance * max(1.0, abs(expected))


def references(vertices, edges, directed: bool, source) -> dict[str, dict]:
    return {
        "bfs": ref.bfs(vertices, edges, directed, source),
        "pr": ref.pagerank(vertices, edges, directed, DAMPING, PR_ITERATIONS),
        "wcc": ref.wcc(vertices, edges),
        "cdlp": ref.cdlp(vertices, edges, directed, CDLP_ITERATIONS),
        "lcc": ref.lcc(vertices, edges, directed),
        "sssp": ref.sssp(vertices, edges, directed, source),
    }


def run_static(env, vertices, edges, directed: bool, source, parallelism=None) -> dict[str, list]:
    """Every static algorithm on one graph view, in one pipeline task."""
    pipeline = env.pipeline("static-graph")

    @pipeline.task
    def all_algorithms(ctx):
        graph = GraphView(ctx.source(vertices), ctx.source(edges), directed=directed,
                          parallelism=parallelism)
        algorithms.bfs(graph, source).collect("bfs")
        algorithms.pagerank(graph, DAMPING, PR_ITERATIONS).collect("pr")
        algorithms.wcc(graph).collect("wcc")
        algorithms.cdlp(graph, CDLP_ITERATIONS).collect("cdlp")
        algorithms.lcc(graph).collect("lcc")
        algorithms.sssp(graph, source).collect("sssp")

    result = pipeline.execute()
    return {name: result.output(name) for name in STATIC}


def assert_matches(outputs: dict[str, list], expected: dict[str, dict]) -> None:
    for name in STATIC:
        records = outputs[name]
        got = dict(records)
        assert len(got) == len(records), f"{name}: a vertex was emitted twice"
        assert got.keys() == expected[name].keys(), f"{name}: the vertex set differs"
        if name in ("bfs", "wcc", "cdlp"):
            wrong = {v: (got[v], x) for v, x in expected[name].items() if got[v] != x}
        else:
            wrong = {v: (got[v], x) for v, x in expected[name].items() if not close(got[v], x)}
        assert not wrong, f"{name}: vertex: (got, expected) {dict(list(wrong.items())[:5])}"


# (seed, vertices, edges, directed, self-loops, duplicate edges, isolated vertices, parallelism)
CASES = [
    (1, 30, 70, True, False, False, 3, None),
    (2, 30, 70, False, False, False, 3, None),
    (3, 60, 200, True, True, True, 5, 3),
    (4, 60, 200, False, True, True, 5, 3),
    (5, 1, 0, True, False, False, 0, None),  # a single vertex, no edges
    (6, 12, 40, True, True, False, 0, 2),  # dense: many triangles for LCC
    (7, 80, 90, False, False, False, 10, 2),  # sparse: many components, long paths
    (8, 40, 120, True, False, True, 0, None),
]
# Directed, with self-loops, duplicates, isolated vertices and parallelism 3, small enough for a
# Spark job per superstep (undirected graphs run on Spark through tests/graph/test_graphalytics.py).
SPARK_CASES = [(3, 24, 60, True, True, True, 3, 3)]
ENV_CASES = [("local", case) for case in CASES] + [("spark", case) for case in SPARK_CASES]


def case_id(value) -> str:
    if isinstance(value, str):
        return value
    seed, n, m, directed, loops, dups, isolated, parallelism = value
    return (f"seed{seed}-{'dir' if directed else 'undir'}-n{n}-m{m}"
            f"{'-loops' if loops else ''}{'-dups' if dups else ''}-p{parallelism or 1}")


@pytest.mark.parametrize(("environment_type", "case"), ENV_CASES, ids=case_id)
def test_static_algorithms_match_the_references(make_env, case):
    seed, n, m, directed, loops, dups, isolated, parallelism = case
    vertices, edges = ref.random_graph(seed, n, m, self_loops=loops, duplicates=dups, weights=True,
                                       isolated=isolated)
    source = vertices[0]
    outputs = run_static(make_env(), vertices, edges, directed, source, parallelism)
    assert_matches(outputs, references(vertices, edges, directed, source))


def test_the_static_comparison_can_fail():
    vertices, edges = ref.random_graph(3, 20, 50, weights=True)
    expected = references(vertices, edges, True, vertices[0])
    outputs = {name: list(values.items()) for name, values in expected.items()}
    assert_matches(outputs, expected)
    for name, change in (("cdlp", 1), ("pr", 1e-6), ("sssp", 1e-6)):
        broken = dict(outputs)
        vertex, value = broken[name][0]
        broken[name] = [(vertex, value + change), *broken[name][1:]]
        with pytest.raises(AssertionError):
            assert_matches(broken, expected)
    with pytest.raises(AssertionError, match="twice"):
        assert_matches({**outputs, "wcc": outputs["wcc"] + outputs["wcc"][:1]}, expected)


def test_graph_generator_decides_loops_duplicates_and_isolated_vertices():
    vertices, edges = ref.random_graph(11, 50, 400, self_loops=False, duplicates=False, isolated=7,
                                       dangling=4)
    pairs = [e[:2] for e in edges]
    assert sorted(vertices) == list(range(50))
    assert len(set(pairs)) == len(pairs) == 400
    assert all(src != dst for src, dst in pairs)
    assert not {v for e in pairs for v in e} & set(range(43, 50))
    out_degree = {v: 0 for v in vertices}
    for src, _ in pairs:
        out_degree[src] += 1
    assert [v for v in range(43) if out_degree[v] == 0] == [39, 40, 41, 42]
    _, looped = ref.random_graph(12, 10, 300, self_loops=True, duplicates=True)
    assert any(src == dst for src, dst in looped) and len(set(looped)) < len(looped)


def test_references_agree_with_networkx():
    nx = pytest.importorskip("networkx")
    vertices, edges = ref.random_graph(21, 80, 300, weights=True, isolated=4)
    directed = nx.DiGraph()
    directed.add_nodes_from(vertices)
    directed.add_weighted_edges_from(edges)
    source = vertices[0]
    lengths = nx.single_source_shortest_path_length(directed, source)
    assert ref.bfs(vertices, edges, True, source) == {
        v: lengths.get(v, ref.UNREACHABLE) for v in vertices}
    distances = nx.single_source_dijkstra_path_length(directed, source)
    got = ref.sssp(vertices, edges, True, source)
    assert all(close(got[v], distances.get(v, math.inf)) for v in vertices)
    components = list(nx.weakly_connected_components(directed))
    assert ref.wcc(vertices, edges) == {v: min(c) for c in components for v in c}
    undirected = directed.to_undirected()
    clustering = nx.clustering(undirected)
    simple = ref.undirected_simple(edges)
    lcc = ref.lcc(vertices, simple, False)
    assert all(close(lcc[v], clustering[v]) for v in vertices)
    # Without dangling vertices networkx's power iteration is the same update rule.
    ring = [(v, (v + 1) % 30) for v in range(30)] + [(v, (v * 7) % 30) for v in range(30)]
    ring = list(dict.fromkeys(e for e in ring if e[0] != e[1]))
    converged = nx.pagerank(nx.DiGraph(ring), alpha=0.85, tol=1e-14, max_iter=1000)
    ranks = ref.pagerank(list(range(30)), ring, True, 0.85, 300)
    assert all(close(ranks[v], converged[v], 1e-8) for v in range(30))


# --- incremental WCC and BFS ------------------------------------------------------------------


def run_incremental(env, vertices, edges, directed: bool, source, window: int, vertex_window: int,
                    parallelism=None) -> dict[str, dict[int, list]]:
    """Incremental WCC and BFS over edges arriving ``window`` per window (vertices
    ``vertex_window`` per window, or only through edges when ``vertices`` is None)."""
    pipeline = env.pipeline("growing-graph")

    @pipeline.task
    def grow(ctx):
        vertex_stream = None
        if vertices is not None:
            vertex_stream = ctx.source(vertices, SizeTumblingWindow(vertex_window), parallelism=1)
        edge_stream = ctx.source(edges, SizeTumblingWindow(window), parallelism=1)
        graph = GraphView(vertex_stream, edge_stream, directed=directed, parallelism=parallelism)
        algorithms.incremental_wcc(graph).collect("wcc")
        algorithms.incremental_bfs(graph, source).collect("bfs")

    result = pipeline.execute()
    return {name: result.by_window(name) for name in ("wcc", "bfs")}


def check_folded(by_window: dict[int, list], expected_after: list[dict]) -> None:
    """Folding windows 1..w equals ``expected_after[w - 1]``; each window emits changes only."""
    folded: dict = {}
    assert set(by_window) <= set(range(1, len(expected_after) + 1))
    for window, expected in enumerate(expected_after, start=1):
        records = by_window.get(window, [])
        emitted = dict(records)
        assert len(emitted) == len(records), f"window {window}: a vertex was emitted twice"
        unchanged = {v: x for v, x in emitted.items() if v in folded and folded[v] == x}
        assert not unchanged, f"window {window} emitted unchanged vertices {unchanged}"
        folded.update(emitted)
        assert folded == expected, f"after window {window}"


def grown_references(vertices, edges, directed, source, window, vertex_window):
    """The static references after each window of a growing graph."""
    edge_windows = -(-len(edges) // window)
    vertex_windows = 0 if vertices is None else -(-len(vertices) // vertex_window)
    wcc_after, bfs_after = [], []
    for w in range(1, max(edge_windows, vertex_windows) + 1):
        so_far = edges[:w * window]
        present = dict.fromkeys(vertices[:w * vertex_window] if vertices is not None else [])
        for edge in so_far:
            present.setdefault(edge[0])
            present.setdefault(edge[1])
        wcc_after.append(ref.wcc(list(present), so_far))
        bfs_after.append(ref.bfs(list(present), so_far, directed, source))
    return wcc_after, bfs_after


def test_check_folded_can_fail():
    expected = [{1: 1, 2: 2}, {1: 1, 2: 1}]
    check_folded({1: [(1, 1), (2, 2)], 2: [(2, 1)]}, expected)
    with pytest.raises(AssertionError, match="unchanged"):
        check_folded({1: [(1, 1), (2, 2)], 2: [(2, 1), (1, 1)]}, expected)
    with pytest.raises(AssertionError, match="after window 2"):
        check_folded({1: [(1, 1), (2, 2)]}, expected)


# (seed, vertices, edges, directed, edges per window, vertices per window or None, parallelism)
INCREMENTAL_CASES = [
    (31, 40, 120, False, 15, None, None),
    (32, 40, 120, True, 15, 10, 2),
    (33, 100, 150, False, 10, 25, 3),
]
SPARK_INCREMENTAL = [(34, 20, 30, True, 10, 10, 2)]
INCREMENTAL_ENV_CASES = ([("local", c) for c in INCREMENTAL_CASES]
                         + [("spark", c) for c in SPARK_INCREMENTAL])


@pytest.mark.parametrize(("environment_type", "case"), INCREMENTAL_ENV_CASES,
                         ids=lambda v: v if isinstance(v, str) else f"seed{v[0]}")
def test_incremental_wcc_and_bfs_fold_to_the_static_references(make_env, case):
    seed, n, m, directed, window, vertex_window, parallelism = case
    vertices, edges = ref.random_graph(seed, n, m)
    source = edges[0][0]
    listed = vertices if vertex_window is not None else None
    outputs = run_incremental(make_env(), listed, edges, directed, source, window, vertex_window,
                              parallelism)
    wcc_after, bfs_after = grown_references(listed, edges, directed, source, window, vertex_window)
    check_folded(outputs["wcc"], wcc_after)
    check_folded(outputs["bfs"], bfs_after)


@pytest.mark.parametrize("environment_type", ["local"])  # a Spark round per superstep: too slow
def test_static_compute_reruns_on_the_graph_so_far_in_every_window(make_env):
    """Static compute restarts every window on everything appended so far: edges added in a later
    window must reach every direction's neighbour lists."""
    vertices, edges = ref.random_graph(35, 30, 90, isolated=2)
    window = 30
    pipeline = make_env(parallelism=2).pipeline("static-growing")

    @pipeline.task
    def grow(ctx):
        graph = GraphView(ctx.source(vertices, SizeTumblingWindow(len(vertices)), parallelism=1),
                          ctx.source(edges, SizeTumblingWindow(window), parallelism=1), directed=True)
        algorithms.wcc(graph).collect("wcc")
        algorithms.cdlp(graph, CDLP_ITERATIONS).collect("cdlp")
        algorithms.pagerank(graph, DAMPING, PR_ITERATIONS).collect("pr")

    result = pipeline.execute()
    for number in range(1, len(edges) // window + 1):
        so_far = edges[:number * window]
        wcc = dict(result.by_window("wcc")[number])
        cdlp = dict(result.by_window("cdlp")[number])
        pr = dict(result.by_window("pr")[number])
        assert wcc == ref.wcc(vertices, so_far), f"wcc in window {number}"
        assert cdlp == ref.cdlp(vertices, so_far, True, CDLP_ITERATIONS), f"cdlp in window {number}"
        expected = ref.pagerank(vertices, so_far, True, DAMPING, PR_ITERATIONS)
        assert all(close(pr[v], x) for v, x in expected.items()), f"pagerank in window {number}"


# --- k-hop traversal --------------------------------------------------------------------------


def run_khop(env, vertices, edges, directed, requests, k) -> list:
    pipeline = env.pipeline("khop")

    @pipeline.task
    def neighbourhoods(ctx):
        graph = GraphView(ctx.source(vertices), ctx.source(edges), directed=directed)
        algorithms.khop(graph, ctx.source(requests), k).collect("khop")

    return pipeline.execute().output("khop")


KHOP_CASES = [("local", (41, True, 2)), ("local", (42, False, 3)), ("local", (43, True, 0)),
              ("spark", (44, True, 2))]


@pytest.mark.parametrize(("environment_type", "case"), KHOP_CASES,
                         ids=lambda v: v if isinstance(v, str) else f"seed{v[0]}-k{v[2]}")
def test_khop_gives_one_result_per_request(make_env, case):
    seed, directed, k = case
    vertices, edges = ref.random_graph(seed, 40, 70, isolated=3)
    isolated = next(v for v in vertices if v >= 37)
    requests = [("hub", 0), ("edge", vertices[5]), ("alone", isolated), ("missing", 10_000),
                ("again", 0)]
    records = run_khop(make_env(), vertices, edges, directed, requests, k)
    got = dict(records)
    assert len(got) == len(records) == len(requests)
    expected = {key: ref.khop(vertices, edges, directed, start, k) for key, start in requests}
    assert got == expected
    assert got["missing"] == {} and got["alone"] == {isolated: 0}


# --- bad input files --------------------------------------------------------------------------

BAD_FILES = [
    # (vertex file, edge file, algorithm, file named, line, words in the message)
    ("1\n2\n3\n", "1 2\n2 3\n3\n", "wcc", "g.e", 3, "expected 'src dst [weight]'"),
    ("1\n2\n3\n", "1 2 1.0 7\n", "bfs", "g.e", 1, "4 columns"),
    ("1\n2\n3\n", "1 2\n2 99\n", "pr", "g.e", 2, "vertex 99 is not in the vertex file"),
    ("1\n2\n3\n", "1 2 0.5\n2 3 heavy\n", "sssp", "g.e", 2, "weight 'heavy' is not a number"),
    ("1\n2\n3\n", "1 2 0.5\n2 3\n", "sssp", "g.e", 2, "missing the weight column"),
    ("1\ntwo\n3\n", "1 3\n", "lcc", "g.v", 2, "vertex id 'two' is not an integer"),
    ("1\n2\n1\n", "1 2\n", "cdlp", "g.v", 3, "vertex 1 is listed twice (first on line 1)"),
    ("1\n2 5\n", "1 2\n", "wcc", "g.v", 2, "expected one vertex id"),
    ("1\n2\n", "1 x\n", "wcc", "g.e", 1, "vertex id 'x' is not an integer"),
]


@pytest.fixture
def no_compute(monkeypatch):
    """Fail the test if the command builds a pipeline: bad files must stop it before."""
    from gyreflow.api.cli import graph as graph_cli

    def refuse(*args, **kwargs):
        raise AssertionError("a pipeline was built for bad input")

    monkeypatch.setattr(graph_cli, "build_pipeline", refuse)


@pytest.mark.parametrize(("vertex_text", "edge_text", "algorithm", "named", "line", "words"),
                         BAD_FILES)
def test_bad_files_fail_with_file_and_line(tmp_path, no_compute, vertex_text, edge_text, algorithm,
                                           named, line, words):
    (tmp_path / "g.v").write_text(vertex_text)
    (tmp_path / "g.e").write_text(edge_text)
    args = ["graph", algorithm, "--vertices", str(tmp_path / "g.v"), "--edges",
            str(tmp_path / "g.e"), "--output", str(tmp_path / "out.txt"), "--env", "local", "-q"]
    if algorithm in ("bfs", "sssp"):
        args += ["--source-vertex", "1"]
    result = CliRunner().invoke(main, args, env={"COLUMNS": "400"})
    assert result.exit_code == 2, result.output
    assert f"{tmp_path / named}:{line}: " in result.stderr
    assert words in result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert not (tmp_path / "out.txt").exists()


def test_missing_source_vertex_is_refused(tmp_path, no_compute):
    (tmp_path / "g.v").write_text("1\n2\n")
    (tmp_path / "g.e").write_text("1 2 1.0\n")
    base = ["graph", "sssp", "--vertices", str(tmp_path / "g.v"), "--edges", str(tmp_path / "g.e"),
            "--output", str(tmp_path / "out.txt"), "--env", "local", "-q"]
    result = CliRunner().invoke(main, base, env={"COLUMNS": "400"})
    assert result.exit_code == 2 and "sssp needs --source-vertex" in result.stderr
    result = CliRunner().invoke(main, [*base, "--source-vertex", "7"], env={"COLUMNS": "400"})
    assert result.exit_code == 2 and "--source-vertex 7 is not in" in result.stderr


def test_bad_file_in_a_subprocess_has_no_traceback(tmp_path):
    (tmp_path / "g.v").write_text("1\n2\n")
    (tmp_path / "g.e").write_text("1 2\n2 3\n")
    environ = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    environ["COLUMNS"] = "400"
    done = subprocess.run(
        [sys.executable, "-m", "gyreflow", "graph", "bfs", "--vertices", "g.v", "--edges", "g.e",
         "--source-vertex", "1", "--output", "out.txt", "--env", "local"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, env=environ, check=False)
    assert done.returncode == 2
    assert "g.e:2: vertex 3 is not in the vertex file" in done.stderr
    assert "Traceback" not in done.stderr


# --- examples and the snippets of docs/graphs.md ----------------------------------------------

ROOT = Path(__file__).resolve().parents[2]


def load_example(name: str):
    spec = importlib.util.spec_from_file_location(f"graph_example_{name}", ROOT / "examples" / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def example_env(monkeypatch, tmp_path, environment_type):
    """Examples build their environment from the configuration: select the test's environment and
    keep their state and output away from the repository."""
    for name in list(os.environ):
        if name.startswith("GYREFLOW_"):
            monkeypatch.delenv(name)
    for name, value in environment_variables(environment_type).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("GYREFLOW_SPARK__MASTER", "local[2]")
    monkeypatch.setenv("GYREFLOW_PROGRESS__ENABLED", "false")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def write_graph(folder: Path, vertices, edges) -> tuple[Path, Path]:
    v_path, e_path = folder / "g.v", folder / "g.e"
    v_path.write_text("".join(f"{v}\n" for v in vertices))
    e_path.write_text("".join(f"{s} {d} 1.5\n" for s, d, *_ in edges))
    return v_path, e_path


def test_pagerank_example(example_env):
    vertices, edges = ref.random_graph(51, 200, 900, isolated=5)
    v_path, e_path = write_graph(example_env, vertices, edges)
    out = example_env / "ranks"
    load_example("pagerank.py").main(["--vertices", str(v_path), "--edges", str(e_path),
                                      "--iterations", "8", "--output", str(out)])
    assert sorted(p.name for p in out.iterdir()) == ["window-000001.txt"]
    got = {}
    for line in (out / "window-000001.txt").read_text().splitlines():
        vertex, rank = line.split()
        assert int(vertex) not in got
        got[int(vertex)] = float(rank)
    expected = ref.pagerank(vertices, edges, True, 0.85, 8)
    assert got.keys() == expected.keys()
    assert all(close(got[v], expected[v]) for v in expected)


def test_khop_example(example_env):
    vertices, edges = ref.random_graph(52, 100, 250, isolated=4)
    v_path, e_path = write_graph(example_env, vertices, edges)
    requests = [(f"r{i}", start) for i, start in enumerate([0, 5, 99, 500, 17, 0, 42])]
    r_path = example_env / "g.requests"
    r_path.write_text("".join(f"{key} {start}\n" for key, start in requests))
    out = example_env / "hoods"
    load_example("khop_traversal.py").main([
        "--vertices", str(v_path), "--edges", str(e_path), "--requests", str(r_path), "--k", "2",
        "--request-window", "3", "--output", str(out)])
    assert sorted(p.name for p in out.iterdir()) == [f"window-{w:06d}.jsonl" for w in (1, 2, 3)]
    answers = {}
    for path in sorted(out.iterdir()):
        window = int(path.name[7:13])
        for line in path.read_text().splitlines():
            record = json.loads(line)
            assert record["window"] == window and record["request"] not in answers
            answers[record["request"]] = (window, {v: h for v, h in record["vertices"]})
    expected = {key: (1 + i // 3, ref.khop(vertices, edges, True, start, 2))
                for i, (key, start) in enumerate(requests)}
    assert answers == expected


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), re.DOTALL)


def test_docs_snippets_run_and_print_what_they_say(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for block in python_blocks(ROOT / "docs" / "graphs.md"):
        exec(compile(block, "docs/graphs.md", "exec"), namespace)
    printed = capsys.readouterr().out.splitlines()
    expected_ranks = ref.pagerank([1, 2, 3], [(1, 2), (2, 3), (3, 1), (1, 3)], True, 0.85, 20)
    assert namespace["ranks"].keys() == expected_ranks.keys()
    assert all(close(namespace["ranks"][v], x) for v, x in expected_ranks.items())
    for line in ("[(1, 9), (2, 9), (3, 7), (4, 7)]",
                 "1 [(1, 1), (2, 1), (3, 3), (4, 3)]",
                 "2 [(3, 1), (4, 1), (5, 5), (6, 5)]",
                 "[('a', {1: 0, 2: 1, 3: 2}), ('b', {3: 0, 4: 1}), ('c', {})]"):
        assert line in printed
    edges = [(1, 2), (3, 4), (2, 3), (5, 6)]
    assert namespace["labels"] == ref.wcc([1, 2, 3, 4, 5, 6], edges)


def test_programs_must_define_compute_and_traversals_start():
    from gyreflow.api import Environment
    from gyreflow.api.graph import GraphView, VertexCentricCompute

    class NoCompute(VertexCentricCompute):
        pass

    class NoStart(VertexCentricCompute):
        def compute(self, vertex, messages):
            pass

    with pytest.raises(TypeError, match="abstract"):
        NoCompute()
    pipeline = Environment.local(progress=False).pipeline("refused")

    @pipeline.task
    def traverse(ctx):
        graph = GraphView(None, ctx.source([(1, 2)]))
        graph.traversal(ctx.source([1]), NoStart()).collect()

    with pytest.raises(TypeError, match="NoStart does not"):
        pipeline.execute()


class _Degree(VertexCentricCompute):
    """Each vertex's number of incident edges, set in the first superstep (no messages): a
    program that ends long before an incremental BFS beside it."""

    def init(self, vertex_id, value):
        return 0

    def compute(self, vertex, messages):
        vertex.value = vertex.out_degree


# On Spark every superstep of every window is a job (a minute here); the race is the task's own.
@pytest.mark.spark_subset(lambda params: False)
def test_a_per_vertex_program_ending_before_its_neighbour_keeps_its_last_window(make_env):
    """The end of input may reach a graph task while its window's iterations run: the task ends
    after that window's results are out, not before (each window's degrees are a Counter's)."""
    _, edges = ref.random_graph(31, 40, 120)
    pipeline = make_env(1).pipeline("two-per-vertex-programs")

    @pipeline.task
    def grow(ctx):
        graph = GraphView(None, ctx.source(edges, SizeTumblingWindow(15), parallelism=1),
                          directed=False)
        graph.incremental_compute(_Degree()).collect("degree")
        algorithms.incremental_bfs(graph, edges[0][0]).collect("bfs")

    folded: dict = {}
    for _, records in sorted(pipeline.execute()["grow"].by_window("degree").items()):
        folded.update(records)
    expected = Counter(v for a, b, *_ in edges for v in ((a, b) if a != b else (a,)))
    assert folded == dict(expected)
