"""``gyreflow graph`` refuses bad vertex and edge files naming file and line, before building a pipeline."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from gyreflow.api.cli import main

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
