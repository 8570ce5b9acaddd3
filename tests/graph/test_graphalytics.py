"""LDBC Graphalytics example graphs through ``python -m gyreflow graph`` in every environment.

The expected outputs next to the example graphs are the oracle; the checking rules are the
conformance README's: BFS and CDLP exactly, PR, LCC and SSSP within a relative error of 1e-4
(infinity equals only infinity), WCC by equivalence of the partition. The plain-Python references in
``graph_reference`` are checked against the same files, so the random-graph tests can trust them.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import graph_reference as ref
import pytest
from _environments import environment_variables

ROOT = Path(__file__).resolve().parents[2]
# The LDBC Graphalytics example graphs and expected outputs (Apache License 2.0), kept in the tree.
DATA = Path(__file__).resolve().parents[1] / "data" / "graphalytics"
GRAPHS = ("example-directed", "example-undirected")
ALGORITHMS = ("BFS", "CDLP", "LCC", "PR", "SSSP", "WCC")


def properties(graph: str) -> dict[str, str]:
    return ref.read_graphalytics(DATA, graph)[2]


def read_output(path: Path) -> dict[int, str]:
    """``vertex value`` lines; every vertex once."""
    values: dict[int, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        vertex, value = line.split()
        assert int(vertex) not in values, f"vertex {vertex} twice in {path.name}"
        values[int(vertex)] = value
    return values


def same_partition(got: dict, expected: dict) -> bool:
    """Whether two labellings of the same vertices induce the same partition."""
    forward, backward = {}, {}
    for vertex, label in expected.items():
        if forward.setdefault(label, got[vertex]) != got[vertex]:
            return False
        if backward.setdefault(got[vertex], label) != label:
            return False
    return True


def close(got: float, expected: float) -> bool:
    if math.isinf(expected) or math.isinf(got):
        return got == expected
    return abs(got - expected) <= 1e-4 * abs(expected) or got == expected


def check(algorithm: str, got: dict[int, str], expected_path: Path) -> None:
    """Apply the README's rule for ``algorithm``; ``got`` holds the output file's texts."""
    expected_text = {}
    for line in expected_path.read_text(encoding="utf-8").splitlines():
        vertex, value = line.split()
        expected_text[int(vertex)] = value
    assert sorted(got) == sorted(expected_text), "the output must list exactly the graph's vertices"
    if algorithm in ("BFS", "CDLP"):
        wrong = {v: (got[v], expected_text[v]) for v in got if int(got[v]) != int(expected_text[v])}
    elif algorithm == "WCC":
        assert all(got[v].lstrip("-").isdigit() for v in got), "WCC labels are integers"
        assert same_partition({v: int(x) for v, x in got.items()},
                              {v: int(x) for v, x in expected_text.items()})
        return
    else:
        wrong = {v: (got[v], expected_text[v]) for v in got
                 if not close(float(got[v]), float(expected_text[v]))}
    assert not wrong, f"{algorithm}: vertex: (got, expected) {wrong}"


# --- the rules and the references against the expected files -------------------------------------


def test_checking_rules_can_fail():
    assert same_partition({1: 5, 2: 5, 3: 7}, {1: 1, 2: 1, 3: 3})
    assert not same_partition({1: 5, 2: 5, 3: 5}, {1: 1, 2: 1, 3: 3})
    assert not same_partition({1: 5, 2: 6, 3: 7}, {1: 1, 2: 1, 3: 3})
    assert close(1.00009, 1.0) and not close(1.0002, 1.0)
    assert close(math.inf, math.inf) and not close(1e308, math.inf) and not close(math.inf, 1.0)


def reference_values(graph: str, algorithm: str) -> dict:
    vertices, edges, props = ref.read_graphalytics(DATA, graph)
    directed = props["directed"] == "true"
    if algorithm == "BFS":
        return ref.bfs(vertices, edges, directed, int(props["bfs.source-vertex"]))
    if algorithm == "CDLP":
        return ref.cdlp(vertices, edges, directed, int(props["cdlp.max-iterations"]))
    if algorithm == "LCC":
        return ref.lcc(vertices, edges, directed)
    if algorithm == "PR":
        return ref.pagerank(vertices, edges, directed, float(props["pr.damping-factor"]),
                            int(props["pr.num-iterations"]))
    if algorithm == "SSSP":
        return ref.sssp(vertices, edges, directed, int(props["sssp.source-vertex"]))
    return ref.wcc(vertices, edges)


def as_text(algorithm: str, values: dict) -> dict[int, str]:
    if algorithm in ("BFS", "CDLP", "WCC"):
        return {v: str(x) for v, x in values.items()}
    return {v: "infinity" if math.isinf(x) else repr(float(x)) for v, x in values.items()}


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("graph", GRAPHS)
def test_reference_matches_the_expected_output(graph, algorithm):
    check(algorithm, as_text(algorithm, reference_values(graph, algorithm)),
          DATA / f"{graph}-{algorithm}")


def test_reference_mismatch_is_detected():
    values = reference_values("example-directed", "BFS")
    values[next(iter(values))] += 1
    with pytest.raises(AssertionError):
        check("BFS", as_text("BFS", values), DATA / "example-directed-BFS")


# --- the command line in every environment ----------------------------------------------------


def cli_args(graph: str, algorithm: str, output: Path, environment: str) -> list[str]:
    props = properties(graph)
    args = ["graph", algorithm.lower(), "--vertices", str(DATA / f"{graph}.v"),
            "--edges", str(DATA / f"{graph}.e"), "--output", str(output),
            "--env", environment_variables(environment)["GYREFLOW_ENVIRONMENT__TYPE"], "--quiet"]
    if props["directed"] == "true":
        args.append("--directed")
    if algorithm in ("BFS", "SSSP"):
        args += ["--source-vertex", props[f"{algorithm.lower()}.source-vertex"]]
    if algorithm == "PR":
        args += ["--damping", props["pr.damping-factor"],
                 "--iterations", props["pr.num-iterations"]]
    if algorithm == "CDLP":
        args += ["--iterations", props["cdlp.max-iterations"]]
    return args


def run_graph_command(args: list[str], cwd: Path,
                      environment_type: str = "local") -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    env.update({"COLUMNS": "400", "GYREFLOW_SPARK__MASTER": "local[2]",
                **environment_variables(environment_type)})
    return subprocess.run([sys.executable, "-m", "gyreflow", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("graph", GRAPHS)
def test_cli_matches_the_expected_output(graph, algorithm, environment_type, tmp_path, monkeypatch):
    """The command in this process (click's runner): on Spark, the worker's session serves every
    case; ``test_cli_in_a_process_of_its_own`` covers the process boundary."""
    from click.testing import CliRunner

    from gyreflow.api.cli import main

    for name in [n for n in os.environ if n.startswith("GYREFLOW_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    output = tmp_path / f"{graph}-{algorithm}.out"
    result = CliRunner().invoke(main, cli_args(graph, algorithm, output, environment_type),
                                env={"COLUMNS": "400", "GYREFLOW_SPARK__MASTER": "local[2]",
                                     **environment_variables(environment_type)})
    assert result.exit_code == 0, result.output
    check(algorithm, read_output(output), DATA / f"{graph}-{algorithm}")


@pytest.mark.spark_subset(lambda p: p["algorithm"] == "PR")  # a Spark process each: one there
@pytest.mark.parametrize(("graph", "algorithm"), [("example-directed", "PR"),
                                                  ("example-undirected", "SSSP")])
def test_cli_in_a_process_of_its_own(graph, algorithm, environment_type, tmp_path):
    output = tmp_path / f"{graph}-{algorithm}.out"
    done = run_graph_command(cli_args(graph, algorithm, output, environment_type), tmp_path,
                             environment_type)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    check(algorithm, read_output(output), DATA / f"{graph}-{algorithm}")
