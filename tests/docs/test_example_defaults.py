"""Shipped examples do with their defaults what the docs say: quiet_words.py writes alerts, and the
README's ``gyreflow graph pr`` command finds its files from the repository root; each against a
plain-Python loop."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "examples" / "data" / "sample.txt"

pytestmark = pytest.mark.processes


def run_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    env.update({"GYREFLOW_ENVIRONMENT__TYPE": "local", "COLUMNS": "400",
                "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"})
    return env


def quiet_oracle(lines: list[str], window: int, quiet: int) -> list[dict]:
    """Alerts by definition: a word seen last in window s (count c so far) is quiet at s + quiet when
    it is not seen in windows s+1 .. s+quiet, and window s + quiet exists."""
    windows = [lines[i:i + window] for i in range(0, len(lines), window)]
    last: dict[str, int] = {}
    counts: dict[str, int] = {}
    alerts = []
    for number, chunk in enumerate(windows, 1):
        for word in (w for line in chunk for w in line.split()):
            if word in last and number - last[word] > quiet:
                alerts.append({"word": word, "count": counts[word], "last_seen": last[word],
                               "quiet_at": last[word] + quiet})
            last[word] = number
            counts[word] = counts.get(word, 0) + 1
    alerts += [{"word": w, "count": counts[w], "last_seen": s, "quiet_at": s + quiet}
               for w, s in last.items() if s + quiet <= len(windows)]
    return alerts


def test_quiet_words_with_its_defaults_writes_the_alerts_a_plain_loop_finds(tmp_path):
    done = subprocess.run([sys.executable, "-m", "gyreflow", "run", "--quiet",
                           str(ROOT / "examples" / "quiet_words.py"), "--", "--output", "alerts"],
                          cwd=tmp_path, env=run_env(), capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr
    got = [json.loads(line) for path in sorted((tmp_path / "alerts").iterdir())
           for line in path.read_text(encoding="utf-8").splitlines()]
    expected = quiet_oracle(SAMPLE.read_text(encoding="utf-8").splitlines(), 10, 3)
    assert expected, "the defaults must produce alerts"
    key = lambda a: (a["quiet_at"], a["word"])  # noqa: E731
    assert sorted(got, key=key) == sorted(expected, key=key)


def pagerank_oracle(vertices: list[int], edges: list[tuple[int, int]], damping: float,
                    iterations: int) -> dict[int, float]:
    """Graphalytics PageRank as a plain loop (dangling vertices share their rank with everyone)."""
    n = len(vertices)
    out = {v: 0 for v in vertices}
    for s, _ in edges:
        out[s] += 1
    rank = {v: 1 / n for v in vertices}
    for _ in range(iterations):
        dangling = sum(rank[v] for v in vertices if out[v] == 0)
        incoming = {v: 0.0 for v in vertices}
        for s, t in edges:
            incoming[t] += rank[s] / out[s]
        rank = {v: (1 - damping) / n + damping * (incoming[v] + dangling / n) for v in vertices}
    return rank


def test_the_readme_graph_command_runs_from_the_repository_root_as_written(tmp_path):
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```bash\n(gyreflow graph pr .*?)```", text, flags=re.S).group(1)
    command = block.split("#")[0].replace("\\\n", " ")
    for folder in ("examples",):  # what a clone has at its root
        shutil.copytree(ROOT / folder, tmp_path / folder)
    done = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=run_env(), capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    data = ROOT / "examples" / "data"
    vertices = [int(line) for line in (data / "example-directed.v").read_text().split()]
    edges = [tuple(map(int, line.split()[:2]))
             for line in (data / "example-directed.e").read_text().splitlines() if line.strip()]
    expected = pagerank_oracle(vertices, edges, 0.85, 20)
    got = {int(v): float(r) for v, r in
           (line.split() for line in (tmp_path / "ranks.txt").read_text().splitlines())}
    assert got.keys() == expected.keys()
    assert all(abs(got[v] - expected[v]) < 1e-9 for v in expected)


EXAMPLES = {  # script -> arguments; postgres_sink.py (a database) pins its source in code too
    "word_count.py": [], "quiet_words.py": [], "columnar_word_count.py": [], "incremental_wcc.py": [],
    "keyed_join.py": [], "khop_traversal.py": [], "pagerank.py": [], "tutorial_readings.py": [],
    "directory_etl.py": ["--input", "landing"],
    "event_time.py": ["--input", "events.jsonl", "--window", "tumbling:5", "--output", "out/e"],
    "graph_versions.py": ["--edges", "changes.txt", "--requests", "requests.txt"],
    "shortest_paths.py": ["--vertices", "examples/data/example-directed.v", "--edges",
                          "examples/data/example-directed.e", "--source", "1"],
}


def test_every_example_is_covered():
    shipped = {p.name for p in (ROOT / "examples").glob("*.py")} - {"postgres_sink.py"}
    assert shipped == set(EXAMPLES)


@pytest.mark.parametrize("script", sorted(EXAMPLES))
def test_examples_keep_their_windows_at_any_configured_parallelism(tmp_path, script):
    """Planned at parallelism 4, no shipped example has a size-windowed source split across tasks
    (gyreflow would warn): their windows, and so their output, are the same at any parallelism."""
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    (tmp_path / "landing").mkdir()
    (tmp_path / "events.jsonl").write_text('{"ts": 1, "key": "a", "value": 1}\n')
    (tmp_path / "changes.txt").write_text("1 2\n2 3\n")
    (tmp_path / "requests.txt").write_text("a 1 1\n")
    env = {**run_env(), "GYREFLOW_ENVIRONMENT__PARALLELISM": "4"}
    done = subprocess.run([sys.executable, "-m", "gyreflow", "explain", f"examples/{script}", "--",
                           *EXAMPLES[script]], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "SourceParallelismWarning" not in done.stderr, done.stderr
    assert " p=4" in done.stdout  # the configured parallelism reached the plan
