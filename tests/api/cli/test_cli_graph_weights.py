"""``gyreflow graph``: an edge file is one format (``src dst [weight]``) whatever the algorithm; a
weight that is not a number is refused by every algorithm as sssp refuses it (file, line, text; the
same exit status), and lines without a weight stay valid where the algorithm weighs nothing."""

from __future__ import annotations

from pathlib import Path

import networkx as nx
import pytest
from _cli_runs import run_module

pytestmark = pytest.mark.processes

ALGORITHMS = ("bfs", "pr", "wcc", "cdlp", "lcc", "sssp")
VERTICES = "1\n2\n3\n4\n5\n"


def graph(tmp_path: Path, algorithm: str, edges: str, *flags: str):
    (tmp_path / "g.v").write_text(VERTICES, encoding="utf-8")
    (tmp_path / "g.e").write_text(edges, encoding="utf-8")
    args = ["graph", algorithm, "--vertices", "g.v", "--edges", "g.e", "--output", "out.txt",
            "--env", "local", "-q", *flags]
    if algorithm in ("bfs", "sssp"):
        args += ["--source-vertex", "1"]
    return run_module(args, cwd=tmp_path)


@pytest.mark.parametrize(("edges", "problem"), [
    ("1 2 0.5\n2 3 heavy\n", "g.e:2: weight 'heavy' is not a number"),
    ("1 2 0.5\n2 3 1,5\n3 4 1\n", "g.e:2: weight '1,5' is not a number"),
    ("1 2 nan\n", "g.e:1: weight is NaN"),
], ids=["word", "decimal-comma", "nan"])
def test_a_weight_that_is_not_a_number_is_refused_by_every_algorithm_as_by_sssp(tmp_path, edges,
                                                                                problem):
    statuses = {}
    for algorithm in ALGORITHMS:
        done = graph(tmp_path, algorithm, edges)
        statuses[algorithm] = done.returncode
        assert done.stderr.splitlines() == [f"error: {problem}"], (algorithm, done.stderr)
        assert not (tmp_path / "out.txt").exists(), algorithm
    assert set(statuses.values()) == {2}, statuses  # a bad input file, as every other bad line


def test_lines_with_and_without_a_weight_are_both_valid_where_nothing_weighs_them(tmp_path):
    edges = [(1, 2, "0.5"), (2, 3, None), (4, 5, "-2e3")]
    text = "".join(f"{s} {d}" + (f" {w}" if w is not None else "") + "\n" for s, d, w in edges)

    done = graph(tmp_path, "wcc", text)

    assert done.returncode == 0, done.stderr
    oracle = nx.Graph()
    oracle.add_nodes_from(int(v) for v in VERTICES.split())
    oracle.add_edges_from((s, d) for s, d, _ in edges)
    expected = {v: min(component) for component in nx.connected_components(oracle)
                for v in component}  # Graphalytics' label: the smallest id in the component
    written = dict(tuple(map(int, line.split())) for line in
                   (tmp_path / "out.txt").read_text(encoding="utf-8").splitlines())
    assert written == expected
