"""Errors that answer: an unpicklable function names itself, the captured object and what to do; a
keyed operation on an unkeyed stream says to call key_by; a pipeline never executed gets a warning;
dates, datetimes and decimals are keys with a stable key group."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal

import pytest
from pyspark import cloudpickle

from gyreflow.api import SizeTumblingWindow
from gyreflow.runtime.errors import KeyRequiredError, PlanNotShippableError
from gyreflow.runtime.spark.shipping import explain_unpicklable
from gyreflow.state.keys.keygroups import key_group_of

SCRIPT_FUNCTION = """
import threading
LOCK = threading.Lock()

def tag_with_lock(x):
    with LOCK:
        return x
"""


def script_function():
    """A function of a script (not an importable module): Spark pickles it by value, globals too."""
    namespace = {"__name__": "a_script"}
    exec(compile(SCRIPT_FUNCTION, "job.py", "exec"), namespace)
    return namespace["tag_with_lock"]


def test_an_unpicklable_global_is_named_with_its_function_and_advice():
    from gyreflow.plan.operators import MapSpec

    error = explain_unpicklable("job/t", "map-1", MapSpec(script_function()), cloudpickle.dumps)
    assert isinstance(error, PlanNotShippableError)
    text = str(error)
    assert "\n" not in text  # one paragraph
    assert "operator 'map-1'" in text and "tag_with_lock (job.py, line 5)" in text
    assert "uses the global 'LOCK', a _thread.lock" in text
    assert "inside the function" in text and "--env local" in text


def test_an_unpicklable_closure_variable_is_named():
    from gyreflow.plan.operators import MapSpec

    handle = open(os.devnull, "rb")
    try:
        def read_one(x):
            return handle.read(0) or x

        error = explain_unpicklable("job/t", "map-2", MapSpec(read_one), cloudpickle.dumps)
    finally:
        handle.close()
    assert "captures the variable 'handle', a _io.BufferedReader" in str(error)
    assert explain_unpicklable("job/t", "map-3", MapSpec(len), cloudpickle.dumps) is None


def test_spark_refuses_the_plan_before_any_data_moves(make_env, environment_type):
    if environment_type != "spark":
        pytest.skip("the local environment runs functions in this process: nothing is pickled")
    pipeline = make_env().pipeline("locked")
    tag_with_lock = script_function()

    @pipeline.task
    def t(ctx):
        ctx.source([1, 2]).map(tag_with_lock).collect("out")

    with pytest.raises(PlanNotShippableError, match="uses the global 'LOCK'"):
        pipeline.execute()


def test_reduce_on_an_unkeyed_stream_says_to_call_key_by(make_env):
    pipeline = make_env().pipeline("unkeyed")

    @pipeline.task
    def t(ctx):
        ctx.source([1, 2]).reduce(lambda a, b: a + b).collect("out")

    with pytest.raises(KeyRequiredError, match=r"reduce\(\) needs a keyed stream: call key_by first"):
        pipeline.execute()


def run_script(tmp_path, text: str, *cli: str):
    script = tmp_path / "script.py"
    script.write_text(text, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    env.update({"GYREFLOW_STATE__PATH": str(tmp_path / "state"), "GYREFLOW_ENVIRONMENT__TYPE": "local"})
    command = [sys.executable, "-m", "gyreflow", *cli, str(script)] if cli else [sys.executable,
                                                                                  str(script)]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=120, check=False)


UNKEYED = '''
from gyreflow.api import Environment
p = Environment.from_config().pipeline("p")
@p.task
def t(ctx):
    ctx.source([1, 2]).count().collect("out")
p.execute()
'''


def test_the_cli_answers_a_missing_key_by_in_one_message(tmp_path):
    done = run_script(tmp_path, UNKEYED, "run", "--quiet")
    assert done.returncode == 2
    assert "count() needs a keyed stream: call key_by first" in done.stderr
    assert "Traceback" not in done.stderr


NEVER_RUN = '''
from gyreflow.api import Environment
p = Environment.from_config().pipeline("forgotten")
@p.task
def t(ctx):
    ctx.source([1, 2]).collect("out")
'''


@pytest.mark.parametrize("cli", [("run", "--quiet"), ()])
def test_a_pipeline_never_executed_gets_a_warning(tmp_path, cli):
    """Run as a script, a warning; under ``gyreflow run``, which is there to run a pipeline, the
    script that ran none is an error naming it (exit 1)."""
    done = run_script(tmp_path, NEVER_RUN, *cli)
    if cli:
        assert done.returncode == 1
        assert "ran no pipeline: pipeline 'forgotten' has tasks but was never executed" in done.stderr
        assert "Traceback" not in done.stderr
    else:
        assert done.returncode == 0
        assert done.stderr.count("warning: pipeline 'forgotten' has tasks but was never executed") == 1
    ran = run_script(tmp_path, NEVER_RUN + "p.execute()\n", *cli)
    assert "warning" not in ran.stderr


def test_equal_keys_share_a_key_group():
    for equal in ([1, 1.0, True, Decimal("1"), Decimal("1.000")], [Decimal("0.5"), 0.5],
                  [datetime(2024, 5, 1, 12, tzinfo=UTC),
                   datetime(2024, 5, 1, 14, tzinfo=timezone(timedelta(hours=2)))],
                  [(1, date(2024, 1, 1)), (Decimal(1), date(2024, 1, 1))]):
        assert len(set(equal)) == 1  # Python's own equality: the oracle
        assert len({key_group_of(k, 1 << 16) for k in equal}) == 1, equal


# Pinned key groups (of 128): they must not change between machines, runs or Python versions,
# or state written by one would be read by the wrong task of another.
PINNED = [("word", 15), (1, 79), (Decimal("0.1"), 112), (date(2024, 1, 31), 83),
          (datetime(2024, 1, 31, 12, 30), 66), (datetime(2024, 1, 31, 12, 30, tzinfo=UTC), 37),
          (("a", date(2024, 1, 1), Decimal("2.50")), 27)]


def test_key_groups_are_pinned_across_processes():
    code = ("import sys, pickle; from gyreflow.state.keys.keygroups import key_group_of; "
            "keys = pickle.loads(sys.stdin.buffer.read()); print([key_group_of(k, 128) for k in keys])")
    import pickle

    for seed in ("0", "12345"):
        out = subprocess.run([sys.executable, "-c", code], input=pickle.dumps([k for k, _ in PINNED]),
                             capture_output=True, env={**os.environ, "PYTHONHASHSEED": seed},
                             check=True)
        assert out.stdout.decode().strip() == str([g for _, g in PINNED])


def test_dates_and_decimals_as_keys_count_like_a_counter(make_env):
    records = [(date(2024, 1, 1 + i % 5), Decimal(i % 3) / 2) for i in range(60)]
    pipeline = make_env(2).pipeline("typed-keys")

    @pipeline.task
    def t(ctx):
        ctx.source(records, SizeTumblingWindow(60)).key_by().count().collect("out")

    got = dict(pipeline.execute()["t"].output("out"))
    assert got == dict(Counter(records))
