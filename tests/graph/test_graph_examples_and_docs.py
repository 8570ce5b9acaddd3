"""The graph examples and the snippets of docs/graphs.md against the plain-Python references."""

from __future__ import annotations

import importlib.util
import json
import os
import re
from pathlib import Path

import graph_reference as ref
import pytest
from _environments import environment_variables
from graph_reference import close

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
