"""Configuration mistakes told as what they are: a NaN or infinite number, a GYREFLOW_ variable
without the GYREFLOW_SECTION__KEY shape, a non-table value for a table key (with an example that
fits the key)."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest
from _cli_runs import EXAMPLE, clean_environ

from gyreflow.api.config import Config, ConfigError


def config_error_line(tmp_path, *args: str, env: dict[str, str] | None = None) -> str:
    """Run ``gyreflow config ARGS``: it must exit 2 with one ``error:`` line; return that line."""
    done = subprocess.run([sys.executable, "-m", "gyreflow", "config", *args], cwd=tmp_path,
                          env={**clean_environ(), **(env or {})}, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("error: configuration: "), line
    return line


# A NaN is not a number, not a number below the minimum; an infinity is no finite number.

@pytest.mark.processes
def test_nan_in_a_toml_file_is_told_as_not_a_number(tmp_path):
    (tmp_path / "c.toml").write_text("[restart]\ndelay = nan\n", encoding="utf-8")
    line = config_error_line(tmp_path, "--config", "c.toml")
    assert "[restart] delay = nan in c.toml is not a number" in line
    assert "restart.delay must be a number (not NaN)" in line
    assert "below the minimum" not in line


@pytest.mark.processes
def test_nan_in_an_environment_variable_is_told_as_not_a_number(tmp_path):
    line = config_error_line(tmp_path, env={"GYREFLOW_UI__LINGER": "nan"})
    assert "GYREFLOW_UI__LINGER=nan is not a number; ui.linger must be a number (not NaN)" in line
    assert "below the minimum" not in line


@pytest.mark.parametrize(("value", "shown"), [(math.inf, "inf"), (-math.inf, "-inf")])
def test_an_infinite_float_is_refused_as_not_finite(value, shown):
    with pytest.raises(ConfigError, match=f"restart.max_delay = {shown} is infinite; "
                                          "restart.max_delay must be a finite number, at least 0"):
        Config.load(overrides={"restart.max_delay": value}, environ={})


@pytest.mark.processes
def test_inf_in_a_toml_file_is_refused(tmp_path):
    (tmp_path / "c.toml").write_text("[control]\nrebalance_skew = inf\n", encoding="utf-8")
    line = config_error_line(tmp_path, "--config", "c.toml")
    assert "rebalance_skew = inf in c.toml is infinite" in line
    assert "control.rebalance_skew must be a finite number" in line


def test_finite_floats_still_load():
    config = Config.load(environ={"GYREFLOW_UI__LINGER": "2.5"}, overrides={"restart.delay": 0})
    assert (config["ui.linger"], config["restart.delay"]) == (2.5, 0.0)


# GYREFLOW_ variables of the wrong shape fail, naming the shape and the variable meant.

@pytest.mark.processes
def test_an_empty_section_fails_instead_of_being_ignored(tmp_path):
    line = config_error_line(tmp_path, env={"GYREFLOW__BACKEND": "rocksdb"})
    assert "environment variable GYREFLOW__BACKEND sets nothing" in line
    assert "GYREFLOW_SECTION__KEY, e.g. GYREFLOW_STATE__BACKEND" in line
    assert "did you mean GYREFLOW_STATE__BACKEND?" in line


@pytest.mark.parametrize(("variable", "meant"), [
    ("GYREFLOW___STATE__BACKEND", "GYREFLOW_STATE__BACKEND"),
    ("GYREFLOW_STATE___BACKEND", "GYREFLOW_STATE__BACKEND"),
    ("GYREFLOW_STATE__BACKEND_", "GYREFLOW_STATE__BACKEND"),
    ("GYREFLOW__STATE_MAX_PARALLELISM", "GYREFLOW_STATE__MAX_PARALLELISM"),
    ("GYREFLOW__LINGER", "GYREFLOW_UI__LINGER"),
    ("GYREFLOW__ENABLED", "GYREFLOW_PROGRESS__ENABLED or GYREFLOW_CONTROL__ENABLED"),
])
def test_underscores_out_of_place_name_the_variable_meant(variable, meant):
    with pytest.raises(ConfigError, match=f"{variable} sets nothing: config variables are named "
                                          f"GYREFLOW_SECTION__KEY.*did you mean {meant}\\?"):
        Config.load(environ={variable: "1"})


@pytest.mark.parametrize("variable", ["GYREFLOW__NOPE", "GYREFLOW__", "GYREFLOW_STATE__"])
def test_a_misshapen_variable_without_a_likely_meaning_still_fails(variable):
    with pytest.raises(ConfigError, match=f"{variable} sets nothing: .*GYREFLOW_SECTION__KEY") as raised:
        Config.load(environ={variable: "1"})
    assert "did you mean" not in str(raised.value)


def test_gyreflow_variables_that_are_not_configuration_are_still_accepted():
    """Every GYREFLOW_ name the repository reads outside the configuration."""
    environ = {name: "1" for name in (
        "GYREFLOW_CRASH_AT", "GYREFLOW_CRASH_RUN", "GYREFLOW_FUZZ_ALL", "GYREFLOW_HOME",
        "GYREFLOW_UI_SCREENSHOT", "GYREFLOW_EXAMPLE_POSTGRES_URL", "GYREFLOW_TEST_POSTGRES_URL",
        "GYREFLOW_TEST_SPARK_MASTER", "GYREFLOW_TEST_WORKERS", "GYREFLOW_TEST_SPARK_DRIVER_OPTIONS",
        "GYREFLOW_TEST_SPARK_CLASS_ARCHIVE", "GYREFLOW_TEST_MERMAID_JS", "GYREFLOW_TEST_FOLD_WRITE",
        "GYREFLOW_TEST_FOLD_VERSION", "GYREFLOW_")}
    assert Config.load(environ=environ) == Config.defaults()


@pytest.mark.processes
def test_gyreflow_run_refuses_an_empty_section_before_anything_runs(tmp_path):
    env = {**clean_environ(), "GYREFLOW__BACKEND": "rocksdb"}
    done = subprocess.run([sys.executable, "-m", "gyreflow", "run", "--env", "local", "--fresh",
                           str(EXAMPLE), "--", "--output", "out"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("error: configuration: environment variable GYREFLOW__BACKEND"), line
    assert "did you mean GYREFLOW_STATE__BACKEND?" in line
    assert os.listdir(tmp_path) == []


# A non-table value for a table key shows an example of that key.

@pytest.mark.processes
@pytest.mark.parametrize(("toml", "example"), [
    ('[state]\ncheckpoint_options = "x"\n',
     'e.g. {"client_kwargs.endpoint_url" = "http://127.0.0.1:9000"}'),
    ("[control]\nparameters = 3\n", 'e.g. {"OPERATOR.NAME" = "value"}'),
    ("[spark]\nconf = 1\n", 'e.g. {"spark.executor.memory" = "2g"}'),
])
def test_a_table_key_shows_an_example_of_its_own(tmp_path, toml, example):
    (tmp_path / "c.toml").write_text(toml, encoding="utf-8")
    line = config_error_line(tmp_path, "--config", "c.toml")
    assert line.endswith(f"must be a table of settings, {example}"), line
    if "spark" not in toml:
        assert "spark.executor.memory" not in line


@pytest.mark.parametrize(("variable", "example"), [
    ("GYREFLOW_CONTROL__PARAMETERS", '{"OPERATOR.NAME": "value"}'),
    ("GYREFLOW_STATE__CHECKPOINT_OPTIONS", '{"client_kwargs.endpoint_url": "http://127.0.0.1:9000"}'),
    ("GYREFLOW_SPARK__CONF", '{"spark.executor.memory": "2g"}'),
])
@pytest.mark.parametrize("text", ["3", "[1]", "not json"])
def test_a_table_variable_that_is_no_json_object_shows_a_json_example(variable, example, text):
    with pytest.raises(ConfigError) as raised:
        Config.load(environ={variable: text})
    assert str(raised.value) == (f"environment variable {variable}={text} cannot be parsed as a "
                                 f"table (a JSON object, e.g. {example})")


def test_a_table_key_still_takes_a_table():
    config = Config.load(environ={"GYREFLOW_CONTROL__PARAMETERS": '{"count.limit": 3}'},
                         overrides={"state.checkpoint_options": {"anon": True}})
    assert config["control.parameters"] == (("count.limit", "3"),)
    assert config["state.checkpoint_options"] == (("anon", "true"),)
