"""What the command line prints reads as plain text: help without reStructuredText markup, counts
in the singular for one, job names whole, and only public names in the package."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from gyreflow.api.cli import main
from gyreflow.plan.words import plural


def every_command(group: click.Group, path: tuple[str, ...] = ()):
    yield path
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from every_command(command, (*path, name))
        else:
            yield (*path, name)


@pytest.mark.parametrize("path", list(every_command(main)), ids=" ".join)
def test_help_has_no_double_backticks(path):
    result = CliRunner().invoke(main, [*path, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "``" not in result.output, result.output


def test_plural_against_a_table():
    table = {(0, "window"): "0 windows", (1, "window"): "1 window", (2, "window"): "2 windows",
             (1, "vertex"): "1 vertex", (5, "vertex"): "5 vertices",
             (1, "worker process"): "1 worker process", (12_345, "record"): "12,345 records"}
    many = {"vertex": "vertices", "worker process": "worker processes"}
    for (count, noun), text in table.items():
        assert plural(count, noun, many.get(noun)) == text


def gyreflow(args: list[str], cwd, **extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GYREFLOW_") and k not in ("COLUMNS", "LINES")}
    env.update({"GYREFLOW_ENVIRONMENT__TYPE": "local", "GYREFLOW_PROGRESS__ENABLED": "false"})
    env.update(extra)
    return subprocess.run([sys.executable, "-m", "gyreflow", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
                          check=False)


ONE_WINDOW = """from gyreflow.api import Environment, SizeTumblingWindow
env = Environment.local()
pipeline = env.pipeline("single")

@pipeline.task
def job(ctx):
    ctx.source([1, 2, 3], SizeTumblingWindow(5)).collect("c")

pipeline.execute()
"""


@pytest.mark.processes
def test_one_window_and_one_edge_are_singular(tmp_path):
    (tmp_path / "single.py").write_text(ONE_WINDOW)
    done = gyreflow(["run", "single.py"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "single/job: 1 window in " in done.stderr
    explained = gyreflow(["explain", "single.py"], tmp_path)
    assert explained.returncode == 0, explained.stderr
    assert "PipelineGraph: 2 vertices, 1 edge" in explained.stdout
    assert "ExecutionGraph: 1 chained vertex, 0 edges, 1 task" in explained.stdout
    assert "CollectionSource(3 items)" in explained.stdout
    for wrong in ("1 windows", "1 edges", "1 tasks", "1 vertices", "1 items"):
        assert wrong not in done.stderr + explained.stdout


@pytest.mark.parametrize("module", ["gyreflow.api", "gyreflow.api.cli"])
def test_a_package_shows_only_its_public_names(module):
    package = importlib.import_module(module)
    public = {name for name in dir(package) if not name.startswith("_")}
    assert public == set(package.__all__)
    for name in ("Any", "TYPE_CHECKING", "annotations", "importlib"):
        assert not hasattr(package, name)


LONG_JOB = """from gyreflow.api import Environment, SizeTumblingWindow
env = Environment.from_config()
pipeline = env.pipeline("a-pipeline-whose-name-is-long-enough-to-pass-eighty-columns-alone")

@pipeline.task
def the_task_with_a_long_name_too(ctx):
    ctx.source(list(range(10)), SizeTumblingWindow(5)).map(str).collect("c")

pipeline.execute()
"""


@pytest.mark.processes
def test_snapshots_never_cut_a_job_name_and_speak_json(tmp_path):
    (tmp_path / "long.py").write_text(LONG_JOB)
    state = {"GYREFLOW_STATE__BACKEND": "rocksdb", "GYREFLOW_STATE__PATH": str(tmp_path / "st")}
    assert gyreflow(["run", "long.py", "-q"], tmp_path, **state).returncode == 0
    name = ("a-pipeline-whose-name-is-long-enough-to-pass-eighty-columns-alone/"
            "the_task_with_a_long_name_too")
    shown = gyreflow(["snapshots"], tmp_path, **state)
    assert shown.returncode == 0, shown.stderr
    assert any(name in line for line in shown.stdout.splitlines()), shown.stdout
    listed = json.loads(gyreflow(["snapshots", "--json"], tmp_path, **state).stdout)
    (job,) = listed["jobs"]
    assert job["job"] == name
    assert job["last_completed"] == 2  # 10 records in windows of 5
    assert job["retained"][-1] == 2 and all(size >= 0 for size in job["parts"].values())


TWO_JOBS = LONG_JOB.replace("a-pipeline-whose-name-is-long-enough-to-pass-eighty-columns-alone",
                            "first").replace("pipeline.execute()", """pipeline.execute()
other = Environment.local().pipeline("second")
other.task(lambda ctx: ctx.source(list(range(6)), SizeTumblingWindow(3)).collect("c"))
other.execute()""")


@pytest.mark.processes
def test_snapshots_lists_a_damaged_rocksdb_job_as_damaged_and_the_others_as_they_are(tmp_path):
    (tmp_path / "two.py").write_text(TWO_JOBS)
    state = {"GYREFLOW_STATE__BACKEND": "rocksdb", "GYREFLOW_STATE__PATH": str(tmp_path / "st")}
    done = gyreflow(["run", "two.py", "-q"], tmp_path, **state)
    assert done.returncode == 0, done.stderr
    (tmp_path / "st" / "first%2Fthe_task_with_a_long_name_too" / "meta" / "CURRENT").write_text(
        "garbage")
    listed = gyreflow(["snapshots", "--json"], tmp_path, **state)
    assert listed.returncode == 0 and "Traceback" not in listed.stderr, listed.stderr
    jobs = {job["job"]: job for job in json.loads(listed.stdout)["jobs"]}
    assert set(jobs) == {"first/the_task_with_a_long_name_too", "second/<lambda>"}, jobs
    assert "corrupted" in jobs["first/the_task_with_a_long_name_too"]
    assert jobs["second/<lambda>"]["last_completed"] == 2


COUNTS_JOB = """from gyreflow.api import Environment, SizeTumblingWindow
pipeline = Environment.local().pipeline("counts")
pipeline.task(lambda ctx: ctx.source([f"w{i % 3}" for i in range(30)], SizeTumblingWindow(5))
              .key_by().count().collect("c"))
pipeline.execute()
"""


@pytest.mark.processes
def test_a_state_value_sqlite_cannot_decode_is_damaged_state(tmp_path):
    """A value changed behind the store's back into text SQLite cannot decode: exit 3, one line
    naming the database, as any damaged snapshot."""
    import sqlite3

    (tmp_path / "counts.py").write_text(COUNTS_JOB)
    state = {"GYREFLOW_STATE__BACKEND": "jdbc", "GYREFLOW_STATE__PATH": str(tmp_path / "st")}
    crashed = gyreflow(["run", "counts.py", "-q"], tmp_path, GYREFLOW_CRASH_AT="after-commit:2",
                       **state)
    assert crashed.returncode == -9, crashed.stderr
    (database,) = (tmp_path / "st").glob("*.db")
    with sqlite3.connect(database) as db:
        changed = db.execute("UPDATE gyreflow_state SET v = v || x'00'").rowcount
    assert changed > 0
    resumed = gyreflow(["run", "counts.py", "-q", "--resume"], tmp_path, **state)
    assert resumed.returncode == 3, resumed.stderr
    assert resumed.stderr.startswith("error:") and "damaged" in resumed.stderr.splitlines()[0]
    assert "Traceback" not in resumed.stderr, resumed.stderr


def test_one_argument_is_singular():
    result = CliRunner().invoke(main, ["query", "MATCH (a) RETURN a"])
    assert result.exit_code == 2
    assert "got 1 argument\n" in result.output


def test_a_size_window_of_one_record_is_singular_in_the_warning():
    from gyreflow.api import Environment, SizeTumblingWindow

    pipeline = Environment.local(progress=False).pipeline("ones")
    pipeline.task(lambda ctx: ctx.source(list(range(4)), SizeTumblingWindow(1), parallelism=2)
                  .collect("c"), name="job")
    with pytest.warns(Warning) as caught:
        pipeline.execute()
    text = " ".join(str(w.message) for w in caught)
    assert "into windows of 1 record," in text and "windows of 1 consecutive record pin" in text
    assert "1 records" not in text
