"""Mistakes in a user's own code: one ``error:`` line naming the file and line, the user's frames
only, a documented exit status; a failing function runs once on its record; a bad key reads the
same on every host."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from gyreflow.api import (
    AggregateFunction,
    SizeTumblingWindow,
    Source,
    SourceReader,
    UserFunctionError,
)

REPO = Path(__file__).resolve().parents[2]  # gyreflow's own frames are under its folders

# --- a script's own mistakes, as `gyreflow run` and `gyreflow explain` report them -----------------

HEAD = """from gyreflow.api import Environment, SizeTumblingWindow
env = Environment.local()
pipeline = env.pipeline("mistake")

@pipeline.task
def job(ctx):
"""
BODY = '    ctx.source([1, 2, 3], SizeTumblingWindow(2)).map(lambda r: r){}.collect("c")\n'
TAIL = "\npipeline.execute()\n"


def script(middle: str) -> str:
    return HEAD + middle + TAIL


def gyreflow(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GYREFLOW_") and k not in ("COLUMNS", "LINES")}
    env.update({"GYREFLOW_ENVIRONMENT__TYPE": "local", "GYREFLOW_PROGRESS__ENABLED": "false"})
    return subprocess.run([sys.executable, "-m", "gyreflow", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
                          check=False)


def no_internals(done: subprocess.CompletedProcess) -> None:
    """Nothing of gyreflow's, click's or runpy's: no traceback, no frame of theirs."""
    everything = done.stdout + done.stderr
    assert "Traceback" not in everything, everything
    for internal in ("click", "runpy", f"{REPO}/api/", f"{REPO}/runtime/", "During handling"):
        assert internal not in everything, (internal, everything)


CASES = {
    # name: (script text, exit status, the error line, lines after it)
    "syntax": ("x = (\n", 1, "error: mistake.py:1: SyntaxError: '(' was never closed",
               ["    x = (", "        ^"]),
    "import": ("import no_such_module_here\n", 1,
               "error: mistake.py:1: ModuleNotFoundError: No module named 'no_such_module_here'",
               ['  File "mistake.py", line 1, in <module>', "    import no_such_module_here"]),
    "misspelt method": (script(BODY.format(".mapp(len)")), 2,
                        "error: mistake.py:7: AttributeError: 'Stream' object has no attribute "
                        "'mapp'. Did you mean: 'map'?", None),
    "parallelism 0": (script(BODY.format(".with_parallelism(0)")), 2,
                      "error: mistake.py:7: operator 'map-1': parallelism must be an integer from 1 "
                      "to state.max_parallelism (128), got 0",
                      ["Fix the pipeline definition and run again."]),
    "name": ("print(undefined_name)\n", 1,
             "error: mistake.py:1: NameError: name 'undefined_name' is not defined",
             ['  File "mistake.py", line 1, in <module>', "    print(undefined_name)"]),
}


@pytest.mark.processes
@pytest.mark.parametrize("command", ["run", "explain"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_mistake_in_the_script_is_one_line_and_the_scripts_own_frames(tmp_path, case, command):
    text, status, line, after = CASES[case]
    (tmp_path / "mistake.py").write_text(text)
    done = gyreflow([command, "mistake.py"], tmp_path)
    assert done.returncode == status, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0] == line
    if after is not None:
        assert lines[1:1 + len(after)] == after
    else:  # the frames of the script: where execute() was called and the line that is wrong
        assert lines[1:] == ['  File "mistake.py", line 9, in <module>', "    pipeline.execute()",
                             '  File "mistake.py", line 7, in job', lines[4], lines[5]]
        assert lines[4].strip().startswith("ctx.source(")
    no_internals(done)


PARALLEL = """from gyreflow.api import Environment, SizeTumblingWindow
env = Environment.local()
pipeline = env.pipeline("parallel")

@pipeline.task
def job(ctx):
    ctx.source(list(range(10)), SizeTumblingWindow(5)).map(str).with_name("m") \\
        .with_parallelism(1000).collect("c")

pipeline.execute()
"""


@pytest.mark.processes
def test_more_tasks_than_key_groups_are_refused_as_rescale_refuses_them(tmp_path):
    (tmp_path / "parallel.py").write_text(PARALLEL)
    done = gyreflow(["run", "parallel.py"], tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[0] == (
        "error: parallel.py:8: operator 'm': parallelism must be an integer from 1 to "
        "state.max_parallelism (128), got 1000")
    no_internals(done)


EXAMPLE_SOURCE = """import argparse
from gyreflow.api import Environment, SizeTumblingWindow
parser = argparse.ArgumentParser()
parser.add_argument("--parallelism", type=int, default=None)
args = parser.parse_args()
env = Environment.local()
pipeline = env.pipeline("example")

@pipeline.task
def job(ctx):
    ctx.source(list(range(10)), SizeTumblingWindow(5), parallelism=args.parallelism).collect("c")

pipeline.execute()
"""


@pytest.mark.processes
@pytest.mark.parametrize("parallelism", ["0", "-1", "1000"])
def test_a_parallelism_flag_passed_on_by_a_script_is_refused_in_one_line(tmp_path, parallelism):
    (tmp_path / "example.py").write_text(EXAMPLE_SOURCE)
    done = gyreflow(["run", "example.py", "--", "--parallelism", parallelism], tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[0] == (
        "error: example.py:11: operator 'source-0': parallelism must be an integer from 1 to "
        f"state.max_parallelism (128), got {parallelism}")
    no_internals(done)


@pytest.mark.processes
def test_click_usage_errors_read_like_the_others(tmp_path):
    done = gyreflow(["snapshots", "--no-such-flag"], tmp_path)
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert lines[0] == "error: no such option '--no-such-flag'."
    assert lines[1].startswith("Usage: ") and "Error" not in done.stderr
    done = gyreflow(["run", "--resum", "x.py"], tmp_path)  # not taken for the script's name
    assert done.returncode == 2
    assert done.stderr.splitlines()[0] == "error: no such option '--resum'. Did you mean '--resume'?"
    done = gyreflow([], tmp_path)  # no command: the help, as click gives it
    assert done.returncode == 2 and done.stderr.startswith("Usage: gyreflow [OPTIONS] COMMAND")
    assert "error:" not in done.stderr
    done = gyreflow(["run", "--env", "nowhere", "x.py"], tmp_path)
    assert done.returncode == 2
    assert done.stderr.splitlines()[0].startswith("error: invalid value for '--env': 'nowhere'")


# --- a failing function runs once on its record --------------------------------------------------

BAD = 7
DATA = list(range(12))


def build_counted(kind: str, calls):
    """A pipeline whose function ``kind`` logs every call and raises on record BAD."""

    def step(x):
        calls.append((kind, x))
        if x == BAD:
            raise ValueError(f"refuses {x}")
        return {"map": x, "filter": True, "flat_map": [x], "key": x % 3, "window": x % 3}[kind]

    def build(ctx):
        stream = ctx.source(DATA, SizeTumblingWindow(4), parallelism=1)
        if kind == "map":
            stream.map(step).collect("out")
        elif kind == "filter":
            stream.filter(step).collect("out")
        elif kind == "flat_map":  # fused with the map after it
            stream.flat_map(step).map(lambda x: x).collect("out")
        elif kind == "fused":
            stream.map(lambda x: x).map(step).collect("out")
        elif kind == "window":  # a processing window's count, keyed inside the operator
            stream.key_by(step).window().count().collect("out")
        else:  # a key function: counted where the records are routed or counted
            stream.key_by(step).count().collect("out")

    return build


@pytest.mark.parametrize("kind", ["map", "filter", "flat_map", "fused", "key", "window"])
def test_a_failing_function_runs_once_on_the_failing_record(make_env, call_log, kind):
    # One task for a window's count: its key function then runs in the counting operator.
    env = make_env(1 if kind == "window" else 2, **{"runtime.batch_size": 5})
    pipeline = env.pipeline("once")
    pipeline.task(build_counted("map" if kind == "fused" else kind, call_log), name="job")
    with pytest.raises(UserFunctionError) as info:
        pipeline.execute()
    error = info.value
    assert error.record == BAD
    calls = Counter(record for _, record in call_log.entries())
    assert calls[BAD] == 1, calls  # an oracle of its own: every call is one line of the file
    if kind not in ("key", "window"):  # a key function may run where records are routed too
        assert max(calls.values()) == 1, calls
    assert "During handling" not in error.original_traceback
    assert error.original_traceback.count("Traceback") == 1
    assert f"{REPO}/runtime/" not in error.original_traceback


class FailingResult(AggregateFunction):
    """A sum whose result logs every call and refuses the total of one event-time window."""

    def __init__(self, calls, refused: int) -> None:
        self.calls, self.refused = calls, refused

    def init(self):
        return 0

    def add(self, acc, record):
        return acc + record

    def merge(self, left, right):
        return left + right

    def result(self, acc):
        self.calls.append(("result", acc))
        if acc == self.refused:
            raise ValueError(f"refuses the total {acc}")
        return acc


def test_a_failing_window_result_runs_once_and_names_its_key(make_env, call_log):
    from gyreflow.api import Tumbling

    data = list(range(12))
    key, start = 1, 4  # the window [4, 8) of key 1 holds 4 and 7
    refused = sum(x for x in data if x % 3 == key and start <= x < start + 4)
    pipeline = make_env(1).pipeline("results")

    @pipeline.task
    def job(ctx):
        (ctx.source(data, SizeTumblingWindow(12)).with_timestamps(float, max_delay=0)
            .key_by(lambda x: x % 3).window(Tumbling(4)).aggregate(FailingResult(call_log, refused))
            .collect("out"))

    with pytest.raises(UserFunctionError) as info:
        pipeline.execute()
    assert info.value.record == key
    calls = Counter(call_log.entries())
    assert calls[("result", refused)] == 1, calls
    assert max(calls.values()) == 1, calls


# --- a key that is not a key ---------------------------------------------------------------------

KEY_MESSAGE = ("cannot partition by a key of type list (or a tuple holding one): keys must be str, "
               "bytes, int, float, bool, None, decimal.Decimal, datetime.datetime, datetime.date or "
               "tuples of these; return a tuple of its fields from the key_by function instead")


@pytest.mark.parametrize("parallelism", [1, 2])
@pytest.mark.parametrize("operation", ["count", "reduce"])
def test_an_unhashable_key_reads_the_same_on_every_host(make_env, parallelism, operation):
    env = make_env(parallelism)
    pipeline = env.pipeline("keys")

    def build(ctx):
        keyed = ctx.source([["a", 1], ["b", 2]], SizeTumblingWindow(2), parallelism=1) \
            .key_by(lambda r: [r[0]])
        (keyed.count() if operation == "count" else keyed.reduce(lambda a, b: a)).collect("out")

    pipeline.task(build, name="job")
    with pytest.raises(UserFunctionError) as info:
        pipeline.execute()
    assert str(info.value.cause) == KEY_MESSAGE
    assert info.value.record in (["a", 1], ["b", 2])
    assert "Traceback" not in str(info.value)


@pytest.mark.processes
@pytest.mark.parametrize("workers", ["1", "2"])
def test_an_unhashable_key_is_one_line_in_and_out_of_process(tmp_path, workers):
    (tmp_path / "keys.py").write_text(script(
        "    ctx.source([['a', 1], ['b', 2]], SizeTumblingWindow(2)).key_by(lambda r: [r[0]])"
        ".count().collect('c')\n").replace("Environment.local()", "Environment.from_config()"))
    done = gyreflow(["run", "keys.py", "--env", "local", "--workers", workers], tmp_path)
    assert done.returncode == 1, done.stderr
    first = done.stderr.splitlines()[0]
    assert first.startswith("error: operator ") and first.endswith(
        "while processing record ['a', 1]: TypeError: " + KEY_MESSAGE)
    no_internals(done)



# --- the user's own source or sink ----------------------------------------------------------------


class BrokenReader(SourceReader):
    """Two records, then the feed it reads breaks."""

    def __init__(self) -> None:
        self.reads = 0

    def read(self, max_records: int) -> list:
        self.reads += 1
        if self.reads == 2:
            raise ValueError("the feed broke")
        return [1, 2]

    def offset(self) -> int:
        return self.reads

    def seek(self, offset) -> None:
        self.reads = offset or 0

    def close(self) -> None:
        pass


class BrokenSource(Source):
    def create_reader(self, task_index: int, parallelism: int) -> SourceReader:
        return BrokenReader()


def test_a_failing_source_of_the_users_is_its_code_not_a_fault_of_gyreflow(make_env):
    from gyreflow.runtime.dataflow.task_runner import UserCodeError

    pipeline = make_env(1).pipeline("custom")
    pipeline.task(lambda ctx: ctx.source(BrokenSource(), SizeTumblingWindow(2)).collect("c"),
                  name="job")
    with pytest.raises(UserCodeError) as info:
        pipeline.execute()
    message = str(info.value)
    assert message.startswith("task '") and "test_user_mistakes.py:" in message
    assert message.endswith("ValueError: the feed broke")
    shown = info.value.original_traceback
    assert shown.startswith("Traceback") and "in read" in shown
    assert f"{REPO}/runtime/" not in shown and f"{REPO}/api/" not in shown  # gyreflow's frames


CUSTOM = """from gyreflow.api import Environment, SizeTumblingWindow, Source, SourceReader

class Reader(SourceReader):
    reads = 0
    def read(self, max_records):
        self.reads += 1
        if self.reads == 2:
            raise ValueError("the feed broke")
        return [1, 2]
    def offset(self):
        return self.reads
    def seek(self, offset):
        self.reads = offset or 0
    def close(self):
        pass

class Feed(Source):
    def create_reader(self, task_index, parallelism):
        return Reader()

pipeline = Environment.from_config().pipeline("custom")
pipeline.task(lambda ctx: ctx.source(Feed(), SizeTumblingWindow(2)).collect("c"), name="job")
pipeline.execute()
"""


@pytest.mark.processes
@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_failing_source_of_the_users_exits_1_with_its_own_frames(tmp_path, workers):
    (tmp_path / "custom.py").write_text(CUSTOM)
    done = gyreflow(["run", "custom.py", "--env", "local", "--workers", workers], tmp_path)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0].startswith("error: task 'source-0")
    # the second read is window 1's look-ahead at window 2's records: window 2's error (window 1
    # completes)
    assert lines[0].endswith("failed in window 2 in custom.py:8: ValueError: the feed broke")
    assert lines[2:] == ["Original traceback:", "Traceback (most recent call last):",
                         '  File "custom.py", line 8, in read',
                         '    raise ValueError("the feed broke")', "ValueError: the feed broke"]


class Point:
    """Hashable in Python, but not a key: its hash differs between processes."""

    def __init__(self, x: int) -> None:
        self.x = x

    def __hash__(self) -> int:
        return hash(self.x)

    def __eq__(self, other) -> bool:
        return isinstance(other, Point) and other.x == self.x


@pytest.mark.parametrize("parallelism", [1, 2])
def test_an_object_key_is_refused_with_the_same_advice_on_every_host(make_env, parallelism):
    pipeline = make_env(parallelism).pipeline("keys")
    pipeline.task(lambda ctx: ctx.source([1, 2, 3], SizeTumblingWindow(3), parallelism=1)
                  .key_by(lambda r: Point(r % 2)).count().collect("out"), name="job")
    with pytest.raises(UserFunctionError) as info:
        pipeline.execute()
    message = str(info.value.cause)
    assert message.startswith("cannot partition by key <") and " of type Point: " in message
    assert message.endswith(KEY_MESSAGE.split(": ", 1)[1])
