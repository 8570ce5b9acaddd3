"""A GYREFLOW_ variable that spells a config variable with one underscore between section and key is
refused, naming the variable meant; other GYREFLOW_ variables without ``__`` are not configuration."""

from __future__ import annotations

import os

import pytest
from _cli_runs import EXAMPLE, clean_environ

from gyreflow.api.config import Config, ConfigError


@pytest.mark.parametrize(("variable", "meant"), [
    ("GYREFLOW_STATE_BACKEND", "GYREFLOW_STATE__BACKEND"),
    ("GYREFLOW_STATE_MAX_PARALLELISM", "GYREFLOW_STATE__MAX_PARALLELISM"),
    ("GYREFLOW_SPARK_MASTER", "GYREFLOW_SPARK__MASTER"),
])
def test_one_underscore_too_few_is_refused_naming_the_variable_meant(variable, meant):
    with pytest.raises(ConfigError, match=f"{variable} sets nothing: the config variable is {meant}"):
        Config.load(environ={variable: "rocksdb"})


def test_gyreflow_variables_that_are_not_configuration_stay_allowed():
    environ = {name: "1" for name in (
        "GYREFLOW_CRASH_AT", "GYREFLOW_CRASH_RUN", "GYREFLOW_TEST_POSTGRES_URL", "GYREFLOW_TEST_WORKERS",
        "GYREFLOW_TEST_SPARK_MASTER", "GYREFLOW_FUZZ_ALL", "GYREFLOW_UI_SCREENSHOT", "GYREFLOW_HOME",
        "GYREFLOW_EXAMPLE_POSTGRES_URL")}
    assert Config.load(environ=environ) == Config.defaults()


@pytest.mark.processes
def test_gyreflow_run_refuses_the_variable_with_exit_2_before_anything_runs(tmp_path):
    import subprocess
    import sys

    env = {**clean_environ(), "GYREFLOW_STATE_BACKEND": "rocksdb"}
    done = subprocess.run([sys.executable, "-m", "gyreflow", "run", "--env", "local", "--fresh",
                           str(EXAMPLE), "--", "--output", "out"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines == [lines[0]] and lines[0].startswith("error: configuration: ")
    assert "GYREFLOW_STATE_BACKEND" in lines[0] and "GYREFLOW_STATE__BACKEND" in lines[0]
    assert not (tmp_path / "out").exists()
    assert os.listdir(tmp_path) == []


@pytest.mark.processes
@pytest.mark.parametrize("command", [["sql"], ["explain"]])
def test_gyreflow_sql_tells_a_configuration_error_in_one_line(tmp_path, command):
    """``gyreflow sql`` (and ``explain`` of a SQL script) read the configuration to choose the
    environment before anything else: an error there is one line too, exit 2."""
    import subprocess
    import sys

    script = tmp_path / "ages.sql"
    script.write_text("CREATE TABLE t (a int) WITH (type='file', geaflow.dsl.file.path='t.txt');\n"
                      "SELECT a FROM t;\n", encoding="utf-8")
    env = {**clean_environ(), "GYREFLOW_STATE__BAKEND": "rocksdb"}
    done = subprocess.run([sys.executable, "-m", "gyreflow", *command, str(script)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("error: configuration: unknown key [state] bakend"), line
