"""A collect name stands for one stream per pipeline task: a second stream collected under it is
refused before any data moves, naming both lines; two tasks may each use the same name."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from gyreflow.api import AllWindow, Environment
from gyreflow.api.language.stream import DuplicateCollectError
from gyreflow.runtime.errors import PipelineDefinitionError


def test_a_second_stream_under_the_same_name_is_refused():
    seen = []
    pipeline = Environment.local(progress=False).pipeline("dup")
    lines = {}

    @pipeline.task
    def scaled(ctx):
        s = ctx.source([1, 2], AllWindow()).map(lambda x: seen.append(x) or x)
        lines["first"] = sys._getframe().f_lineno + 1
        s.collect()
        lines["second"] = sys._getframe().f_lineno + 1
        s.map(lambda x: x * 10).collect()

    with pytest.raises(DuplicateCollectError) as caught:
        pipeline.execute()

    message = str(caught.value)
    assert isinstance(caught.value, PipelineDefinitionError)
    assert "'collect'" in message and "pipeline task 'scaled'" in message
    assert f"test_collect_names.py:{lines['first']}" in message
    assert f"test_collect_names.py:{lines['second']}" in message
    assert '.collect("another name")' in message
    assert seen == []  # refused before any data moved


def test_explicit_names_are_refused_too():
    pipeline = Environment.local(progress=False).pipeline("dup")

    @pipeline.task
    def both(ctx):
        s = ctx.source([1, 2])
        s.collect("out")
        s.filter(lambda x: x > 1).collect("out")

    with pytest.raises(DuplicateCollectError, match="same name 'out'"):
        pipeline.plans()


def test_different_names_in_one_task_and_one_name_in_two_tasks(make_env):
    pipeline = make_env().pipeline("names")

    @pipeline.task
    def raw(ctx):
        s = ctx.source([1, 2], AllWindow())
        s.collect()
        s.map(lambda x: x * 10).collect("scaled")

    @pipeline.task
    def other(ctx):
        ctx.source([3], AllWindow()).collect()  # same name as raw's, in another task

    result = pipeline.execute()

    assert sorted(result["raw"].output("collect")) == [1, 2]
    assert sorted(result["raw"].output("scaled")) == [10, 20]
    assert result["other"].output("collect") == [3]


def test_gyreflow_run_refuses_it_in_one_line(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent("""\
        from gyreflow.api import Environment, AllWindow
        p = Environment.local(progress=False).pipeline("r3")
        @p.task
        def t(ctx):
            s = ctx.source([1, 2], AllWindow())
            s.collect()
            s.map(lambda x: x * 10).collect()
        print(p.execute()["t"].output("collect"))
        """), encoding="utf-8")

    done = subprocess.run([sys.executable, "-m", "gyreflow", "run", "--env", "local", "--quiet",
                           "job.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={"COLUMNS": "400", "PATH": "/usr/bin:/bin"})

    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr
    assert errors[0].startswith("error: job.py:7: ")
    assert "'collect'" in errors[0] and "job.py:6" in errors[0] and "job.py:7" in errors[0]
    assert 'collect("another name")' in errors[0]
    assert done.stdout == ""  # nothing ran, nothing printed
