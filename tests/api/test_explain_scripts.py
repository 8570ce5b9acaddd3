"""``gyreflow explain`` on scripts that read what ``execute()`` returns: the README's quick start
and the shipped examples print their plans and exit 0 (explained, nothing ran, so no results)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
# Examples that cannot start without arguments (argparse refuses them, exit 2): not explained here.
NEED_ARGUMENTS = {"directory_etl.py", "event_time.py", "graph_versions.py", "postgres_sink.py",
                  "shortest_paths.py"}


def explain(script: Path, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {"COLUMNS": "400", "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "gyreflow", "explain", str(script), *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def quick_start() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Quick start", 1)[1]
    return re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)


def test_the_readme_quick_start_is_explained(tmp_path):
    script = tmp_path / "quick_start.py"
    script.write_text(quick_start(), encoding="utf-8")
    assert 'result["count_words"]' in script.read_text()  # it reads execute()'s result

    done = explain(script, cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "error" not in done.stderr
    assert "== word-count/count_words ==" in done.stdout
    assert "PipelineGraph: 5 vertices, 4 edges" in done.stdout
    assert "ExecutionGraph" in done.stdout
    assert "{1: [" not in done.stdout  # nothing ran


def examples_without_arguments() -> list[str]:
    return sorted(p.name for p in EXAMPLES.glob("*.py") if p.name not in NEED_ARGUMENTS)


def test_the_examples_that_need_arguments_are_named():
    assert NEED_ARGUMENTS <= {p.name for p in EXAMPLES.glob("*.py")}
    assert len(examples_without_arguments()) >= 5


@pytest.mark.parametrize("name", examples_without_arguments())
def test_each_example_is_explained(name):
    done = explain(EXAMPLES / name)

    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "error:" not in done.stderr
    assert re.search(r"^== \S+/\S+ ==$", done.stdout, flags=re.M), done.stdout
    assert "PipelineGraph" in done.stdout and "ExecutionGraph" in done.stdout


TWO_PIPELINES = """\
from gyreflow.api import Environment

env = Environment.local(progress=False)
first, second = env.pipeline("first"), env.pipeline("second")

@first.task
def one(ctx):
    ctx.source([1, 2]).map(lambda x: x + 1).collect("out")

@second.task
def two(ctx):
    ctx.source([1, 2]).filter(lambda x: x > 1).collect("out")

results = first.execute()
{between}
print("second:", second.execute()["two"].output("out"))
"""


def test_a_script_stops_where_it_first_reads_a_result(tmp_path):
    script = tmp_path / "two.py"
    between = 'try:\n    print("first:", results["one"].output("out"))\nexcept Exception:\n    pass'
    script.write_text(TWO_PIPELINES.format(between=between), encoding="utf-8")

    done = explain(script, cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    assert "== first/one ==" in done.stdout
    assert "== second/two ==" not in done.stdout  # after the script stopped
    assert "first:" not in done.stdout  # the script's except Exception did not swallow the stop
    assert done.stderr == ""  # no "never executed" warning for the pipeline it did not reach


def test_pipelines_executed_before_any_result_is_read_are_all_explained(tmp_path):
    script = tmp_path / "two.py"
    script.write_text(TWO_PIPELINES.format(between=""), encoding="utf-8")

    done = explain(script, cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    assert "== first/one ==" in done.stdout and "== second/two ==" in done.stdout
    assert "second:" not in done.stdout


def test_a_script_that_executes_nothing_still_has_nothing_to_explain(tmp_path):
    script = tmp_path / "nothing.py"
    script.write_text("x = 1\n", encoding="utf-8")

    done = explain(script, cwd=tmp_path)

    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "defines no pipeline that it executes" in done.stderr
