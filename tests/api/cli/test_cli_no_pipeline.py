"""``gyreflow run`` of a script that runs no pipeline is an error (exit 1, one line naming the script),
as ``gyreflow explain`` of it is; a script that runs one, or that ends itself with ``sys.exit``, keeps
its own exit status."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from _cli_runs import ROOT, run_module

pytestmark = pytest.mark.processes

NOTHING = 'print("hello")\n'
NO_TASKS = ("from gyreflow.api import Environment\n"
            "pipeline = Environment.from_config().pipeline('empty')\n")
NEVER_EXECUTED = ("from gyreflow.api import Environment\n"
                  "pipeline = Environment.from_config().pipeline('forgotten')\n"
                  "@pipeline.task\n"
                  "def words(ctx):\n"
                  "    ctx.source(['a b']).flat_map(str.split).collect('out')\n")
LINES = ["a b a", "c b", "a"]
COUNTS = (f"LINES = {LINES!r}\n"
          "from gyreflow.api import AllWindow, Environment\n"
          "pipeline = Environment.from_config().pipeline('count')\n"
          "@pipeline.task\n"
          "def words(ctx):\n"
          "    (ctx.source(LINES, AllWindow()).flat_map(str.split).key_by().count()\n"
          "     .collect('counts'))\n"
          "import json\n"
          "print(json.dumps(sorted(pipeline.execute()['words'].output('counts'))))\n")


def script(tmp_path: Path, text: str, name: str = "job.py") -> str:
    (tmp_path / name).write_text(text, encoding="utf-8")
    return name


def errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


@pytest.mark.parametrize(("text", "said"), [
    (NOTHING, "it built no pipeline with tasks, or never called execute() on one"),
    (NO_TASKS, "it built no pipeline with tasks, or never called execute() on one"),
    (NEVER_EXECUTED, "pipeline 'forgotten' has tasks but was never executed"),
], ids=["no-pipeline", "no-tasks", "never-executed"])
def test_a_script_that_runs_no_pipeline_exits_1_in_one_line(tmp_path, text, said):
    name = script(tmp_path, text)

    done = run_module(["run", "--env", "local", "-q", name], cwd=tmp_path)

    assert done.returncode == 1, done.stderr
    assert errors(done.stderr) == [f"error: {name} ran no pipeline: {said}"], done.stderr
    assert "Traceback" not in done.stderr
    assert "warning:" not in done.stderr  # the error says it; no second word on the same thing
    explained = run_module(["explain", name], cwd=tmp_path)  # the same script, the same status
    assert explained.returncode == done.returncode


def test_a_script_that_runs_a_pipeline_still_exits_0(tmp_path):
    name = script(tmp_path, COUNTS)

    done = run_module(["run", "--env", "local", "-q", name], cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    counted = Counter(word for line in LINES for word in line.split())
    assert json.loads(done.stdout.splitlines()[-1]) == [list(kv) for kv in sorted(counted.items())]


def test_a_pipeline_left_beside_one_that_ran_is_only_a_warning(tmp_path):
    name = script(tmp_path, COUNTS + NEVER_EXECUTED)

    done = run_module(["run", "--env", "local", "-q", name], cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    assert done.stderr.count("warning: pipeline 'forgotten' has tasks but was never executed") == 1
    assert errors(done.stderr) == []


@pytest.mark.parametrize(("text", "args", "status"), [
    ("import sys\nsys.exit(0)\n", [], 0),
    ("import sys\nsys.exit()\n", [], 0),
    ("import sys\nsys.exit(3)\n", [], 3),
    ("import argparse\nargparse.ArgumentParser().parse_args()\n", ["--", "--help"], 0),
    ("import argparse\nargparse.ArgumentParser().parse_args()\n", ["--", "--nope"], 2),
], ids=["exit-0", "exit-none", "exit-3", "argparse-help", "argparse-error"])
def test_a_script_that_exits_by_itself_keeps_its_own_status(tmp_path, text, args, status):
    name = script(tmp_path, text)

    done = run_module(["run", "--env", "local", "-q", name, *args], cwd=tmp_path)

    assert done.returncode == status, done.stderr
    assert errors(done.stderr) == []
    assert "ran no pipeline" not in done.stderr


def _examples() -> list[Path]:
    return sorted((ROOT / "examples").glob("*.py"))


# The examples that run on their own data when given no argument (the others need --input and the
# like, and exit 2 through argparse, as they always did).
RUN_WITHOUT_ARGUMENTS = ("columnar_word_count", "incremental_wcc", "keyed_join", "khop_traversal",
                         "pagerank", "quiet_words", "word_count")


@pytest.mark.parametrize("example", RUN_WITHOUT_ARGUMENTS)
def test_the_examples_that_need_no_argument_still_run_and_exit_0(tmp_path, example):
    done = run_module(["run", "--env", "local", "-q", str(ROOT / "examples" / f"{example}.py")],
                      cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    assert errors(done.stderr) == []


@pytest.mark.parametrize("example", _examples(), ids=lambda p: p.stem)
def test_every_example_asked_for_help_exits_0(tmp_path, example):
    done = run_module(["run", "--env", "local", "-q", str(example), "--", "--help"], cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout
    assert errors(done.stderr) == []
