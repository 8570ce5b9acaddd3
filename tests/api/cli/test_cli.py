"""The ``gyreflow run`` command on the word count example, in process and as ``python -m gyreflow``."""

from __future__ import annotations

import json
import os
import pathlib

import pytest
from _cli_runs import EXAMPLE, WIDE, clean_environ, run_cli, run_module
from _environments import environment_variables
from _recovery_data import word_count_oracle as expected_windows
from click.testing import CliRunner

from gyreflow.api.cli import main

pytestmark = pytest.mark.usefixtures("every_environment")

# Ten lines: window 2 (lines 4-6) holds only blank lines, a word repeats across windows, one word
# is not ASCII, and the last window is short.
LINES = [
    "the cat saw the dog",
    "a dog saw a cat",
    "the end",
    "",
    "   ",
    "",
    "café au lait",
    "the dog the dog",
    "cat",
    "the café",
]


def write_lines(path: pathlib.Path, lines: list[str]) -> pathlib.Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def read_output(directory: pathlib.Path) -> dict[int, dict[str, int]]:
    """Parse every window file, checking each line's shape on the way."""
    windows = {}
    for path in sorted(directory.iterdir()):
        window = int(path.name.removeprefix("window-").removesuffix(".jsonl"))
        counts: dict[str, int] = {}
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            assert set(record) == {"window", "word", "count"}
            assert record["window"] == window
            assert record["word"] not in counts, f"{record['word']!r} twice in {path.name}"
            counts[record["word"]] = record["count"]
        windows[window] = counts
    return windows


def assert_output(directory: pathlib.Path, lines: list[str], size: int) -> None:
    expected = expected_windows(lines, size)
    names = sorted(os.listdir(directory))  # listdir shows hidden files too
    assert names == [f"window-{w:06d}.jsonl" for w in range(1, len(expected) + 1)]
    assert read_output(directory) == expected


# --- the oracle itself ----------------------------------------------------------------------------


def test_oracle_by_hand():
    assert expected_windows(["a b a", "b", "", "c a"], 2) == {
        1: {"a": 2, "b": 2},
        2: {"c": 1, "a": 3},
    }


# --- gyreflow run --------------------------------------------------------------------------------


@pytest.mark.spark_subset(lambda p: p["size"] == 3)  # each is a Spark run: two of them there
@pytest.mark.parametrize(("lines", "size"), [(LINES, 3), (LINES[:9], 3), (LINES, 4), (LINES, 1)])
def test_run_word_count_in_process(tmp_path, monkeypatch, lines, size):
    monkeypatch.chdir(tmp_path)
    source = write_lines(tmp_path / "input.txt", lines)
    out = tmp_path / "out"
    result = run_cli(["run", "--quiet", str(EXAMPLE), "--", "--input", str(source),
                      "--window", str(size), "--output", str(out)])
    assert result.exit_code == 0, result.output
    assert_output(out, lines, size)
    assert sorted(os.listdir(tmp_path)) == ["input.txt", "out"]  # nothing else written


def test_the_environment_under_test_is_the_one_the_runs_get(environment_type):
    # The default environment is spark: a lost variable would quietly run every case on Spark.
    for name, value in environment_variables(environment_type).items():
        assert os.environ[name] == value
        assert clean_environ()[name] == value


def test_run_quiet_prints_nothing(tmp_path):
    source = write_lines(tmp_path / "input.txt", LINES)
    result = run_cli(["run", "-q", str(EXAMPLE), "--", "--input", str(source), "--window", "3",
                      "--output", str(tmp_path / "out")])
    assert result.exit_code == 0
    assert result.stdout == ""
    assert result.stderr == ""


def test_run_without_quiet_prints_a_summary_of_the_windows(tmp_path):
    source = write_lines(tmp_path / "input.txt", LINES)
    result = run_cli(["run", str(EXAMPLE), "--", "--input", str(source), "--window", "3",
                      "--output", str(tmp_path / "out")])
    assert result.exit_code == 0
    assert "word-count/word_count: 4 windows in" in result.stderr
    # The per-operator table names every operator of the word count.
    for operator in ("lines", "split", "count", "files"):
        assert operator in result.stderr
    assert_output(tmp_path / "out", LINES, 3)


def test_run_as_module_subprocess(tmp_path):
    source = write_lines(tmp_path / "input.txt", LINES)
    out = tmp_path / "out"
    result = run_module(["run", "examples/word_count.py", "--", "--input", str(source),
                         "--window", "3", "--output", str(out)])
    assert result.returncode == 0, result.stderr
    assert_output(out, LINES, 3)
    assert result.stdout == ""
    assert "word-count/word_count: 4 windows in" in result.stderr


@pytest.mark.spark_subset(lambda p: False)  # --quiet is the same on both: the local run checks it
def test_run_as_module_subprocess_quiet(tmp_path):
    source = write_lines(tmp_path / "input.txt", LINES)
    out = tmp_path / "out"
    result = run_module(["run", "--quiet", str(EXAMPLE), "--", "--input", str(source),
                         "--window", "2", "--output", str(out)], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (result.stdout, result.stderr) == ("", "")
    assert_output(out, LINES, 2)


def test_run_missing_script_is_a_usage_error(tmp_path):
    result = CliRunner().invoke(main, ["run", str(tmp_path / "nope.py")], env=WIDE)
    assert result.exit_code == 2
    assert "no such script" in result.stderr


# --- gyreflow run: configuration errors -----------------------------------------------------------

STATE_KEYS = ["backend", "max_parallelism", "path", "url", "snapshot_every", "retained_snapshots"]


def test_run_with_unknown_config_key_exits_2_before_running(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[state]\nsnapshot_evry = 3\n", encoding="utf-8")
    source = write_lines(tmp_path / "input.txt", LINES)
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["run", "--config", str(bad), str(EXAMPLE), "--",
                                       "--input", str(source), "--output", str(out)], env=WIDE)
    assert result.exit_code == 2
    message = " ".join(result.stderr.split())
    assert "configuration:" in message
    assert "snapshot_evry" in message
    assert str(bad) in message
    # ConfigError's text, e.g. "unknown key [state] snapshot_evry in FILE; valid keys of [state]:
    # backend, ..." (api/config/loading.py), printed as is.
    assert "unknown key [state] snapshot_evry" in message
    assert "valid keys of [state]:" in message
    valid = message.split("valid keys of [state]:", 1)[1]
    for key in STATE_KEYS:
        assert key in valid
    assert not out.exists()  # nothing ran
    assert result.stdout == ""


def test_run_with_unknown_config_key_subprocess(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[runtime]\nbatch_sise = 3\n", encoding="utf-8")
    out = tmp_path / "out"
    result = run_module(["run", "--config", str(bad), str(EXAMPLE), "--", "--output", str(out)],
                        cwd=tmp_path)
    assert result.returncode == 2
    message = " ".join(result.stderr.split())
    assert "batch_sise" in message
    assert "valid keys of [runtime]: batch_size" in message
    assert not out.exists()


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("[sheduler]\nmax_flying_windows = 2\n", "valid sections: environment, scheduler, runtime"),
        ("[environment]\nparallelism = 0\n", "must be at least 1"),
        ("[environment]\nparallelism = 'two'\n", "must be of type int"),
        ("[environment\n", "invalid TOML"),
    ],
)
def test_run_with_other_bad_configs_exits_2(tmp_path, text, fragment):
    bad = tmp_path / "bad.toml"
    bad.write_text(text, encoding="utf-8")
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["run", "--config", str(bad), str(EXAMPLE), "--",
                                       "--output", str(out)], env=WIDE)
    assert result.exit_code == 2
    assert fragment in " ".join(result.stderr.split())
    assert not out.exists()


def test_run_with_missing_config_file_exits_2(tmp_path):
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["run", "--config", str(tmp_path / "none.toml"),
                                       str(EXAMPLE), "--", "--output", str(out)], env=WIDE)
    assert result.exit_code == 2
    assert "does not exist" in result.stderr
    assert not out.exists()


def test_run_uses_the_config_file(tmp_path):
    config = tmp_path / "good.toml"
    config.write_text("[environment]\nparallelism = 2\n[scheduler]\nmax_flying_windows = 3\n",
                      encoding="utf-8")
    script = tmp_path / "show.py"
    script.write_text(
        "from gyreflow.api import Environment\n"
        "env = Environment.from_config()\n"
        "config = env.config\n"
        "print(config['environment.parallelism'], config['scheduler.max_flying_windows'])\n"
        "pipeline = env.pipeline('show')\n"
        "pipeline.task(lambda ctx: ctx.source([1]).collect('out'))\n"
        "pipeline.execute()\n",
        encoding="utf-8",
    )
    result = run_cli(["run", "--quiet", "--config", str(config), str(script)])
    assert result.exit_code == 0
    assert result.stdout == "2 3\n"


# --- gyreflow run: user function errors -----------------------------------------------------------

FAILING_SOURCE_TASK = """
from gyreflow.api import Environment, SizeTumblingWindow

def scale(record):
    return 100 // (record - 6)

pipeline = Environment.from_config().pipeline("failing")

@pipeline.task
def divide(ctx):
    numbers = ctx.source(list(range(10)), SizeTumblingWindow(4), name="numbers")
    numbers.map(scale).with_name("scale").collect("out")

pipeline.execute()
"""

FAILING_DOWNSTREAM_TASK = """
from gyreflow.api import Environment, SizeTumblingWindow

def check(word):
    if word == "bad":
        raise ValueError("no bad words")
    return word

pipeline = Environment.from_config().pipeline("failing")

@pipeline.task
def words(ctx):
    source = ctx.source(["ok", "fine", "good", "bad", "ok"], SizeTumblingWindow(2), name="words")
    source.broadcast().map(check).with_name("check").collect("out")

pipeline.execute()
"""


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        # Record 6 is the 7th: window 2 of size 4; the map runs chained in the source task.
        (FAILING_SOURCE_TASK, ["operator 'scale'", "window 2", "record 6", "ZeroDivisionError"]),
        # "bad" is the 4th record: window 2 of size 2; the map runs in its own task.
        (FAILING_DOWNSTREAM_TASK,
         ["operator 'check'", "window 2", "record 'bad'", "ValueError: no bad words"]),
    ],
)
def test_failing_user_function_exits_1_naming_operator_window_record(tmp_path, script, expected):
    path = tmp_path / "failing.py"
    path.write_text(script, encoding="utf-8")
    in_process = CliRunner().invoke(main, ["run", "--quiet", str(path)], env=WIDE)
    assert in_process.exit_code == 1
    subprocess_result = run_module(["run", "--quiet", str(path)], cwd=tmp_path)
    assert subprocess_result.returncode == 1
    for stderr in (in_process.stderr, subprocess_result.stderr):
        message = " ".join(stderr.split())
        assert message.startswith("error:")
        for fragment in expected:
            assert fragment in message
        assert "Original traceback" in message
    assert "Traceback" not in subprocess_result.stderr.split("Original traceback", 1)[0]


FAILING_ON_BRACKETS = """
from gyreflow.api import Environment

def check(word):
    if word.startswith("["):
        raise ValueError("bracketed")
    return word

pipeline = Environment.from_config().pipeline("brackets")

@pipeline.task
def words(ctx):
    ctx.source(["fine", RECORD], name="words").map(check).with_name("check").collect("out")

pipeline.execute()
"""


# The driver prints the message, the same code on every environment: one record on Spark
@pytest.mark.spark_subset(lambda p: p["record"] == "[/oops]")
@pytest.mark.parametrize("record", ["[bold]text", "[/oops]"])
def test_error_message_shows_records_with_square_brackets_verbatim(tmp_path, record):
    # Records are user data: text in square brackets must reach stderr as written, whatever a
    # terminal renderer would make of it.
    path = tmp_path / "brackets.py"
    path.write_text(FAILING_ON_BRACKETS.replace("RECORD", repr(record)), encoding="utf-8")
    result = run_module(["run", "--quiet", str(path)], cwd=tmp_path)
    assert result.returncode == 1
    message = " ".join(result.stderr.split())
    assert message.startswith("error: operator 'check' failed in window 1")
    assert f"record {record!r}" in message

