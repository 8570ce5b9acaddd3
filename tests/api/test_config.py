"""Tests for gyreflow.api.config: schema, loading, precedence, validation messages."""

from __future__ import annotations

import pathlib
import pickle
import tomllib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gyreflow.api.config import (
    ENVIRONMENT_TYPES,
    KEYS,
    SCHEMA,
    STATE_BACKENDS,
    Config,
    ConfigError,
    ConfigKey,
    schema_markdown,
)

CONF = pathlib.Path(__file__).parents[2] / "conf"
INT_KEYS = [spec for spec in SCHEMA if spec.type is int]
FREE_STR_KEYS = [spec for spec in SCHEMA if spec.type is str and spec.choices is None]


def write(tmp_path: pathlib.Path, text: str, name: str = "x.toml") -> pathlib.Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# --- schema and defaults -------------------------------------------------------------------------


def test_schema_is_consistent():
    assert isinstance(SCHEMA, tuple)
    assert list(KEYS) == [spec.name for spec in SCHEMA]
    assert KEYS["environment.type"].choices == ENVIRONMENT_TYPES == ("spark", "local")
    assert KEYS["state.backend"].choices == STATE_BACKENDS == ("memory", "rocksdb", "jdbc")
    for spec in SCHEMA:
        assert isinstance(spec, ConfigKey)
        assert spec.section and spec.key and spec.name == f"{spec.section}.{spec.key}"
        assert spec.type in (int, float, bool, str, dict)  # dict: a table such as spark.conf
        assert spec.doc.endswith(".")
        assert spec.validate(spec.default, "default") == spec.default


def test_defaults():
    config = Config.defaults()
    assert dict(config.values) == {
        "environment.type": "spark",
        "environment.parallelism": "auto",
        "scheduler.max_flying_windows": 2,
        "runtime.batch_size": 1024,
        "state.backend": "memory",
        "state.max_parallelism": 128,
        "state.path": ".gyreflow/state",
        "state.url": "",
        "state.checkpoint_url": "",
        "state.checkpoint_options": (),
        "state.local_copies": "auto",
        "state.local_path": "",
        "state.secret": "",
        "state.snapshot_every": 1,
        "state.retained_snapshots": 2,
        "state.iteration_checkpoint_interval": 0,
        "graph.retained_versions": 0,
        "progress.enabled": True,
        "metrics.kept_windows": 1000,
        "spark.master": "local[*]",
        "spark.app_name": "gyreflow",
        "spark.conf": (),
        "spark.mode": "auto",
        "spark.workers": 0,
        "environment.workers": "auto",
        "restart.attempts": 3,
        "restart.delay": 1.0,
        "restart.backoff": 2.0,
        "restart.max_delay": 60.0,
        "restart.reset_seconds": 600.0,
        "restart.user_errors": False,
        "ui.address": "",
        "ui.linger": 0.0,
        "control.enabled": True,
        "control.directory": "",
        "control.parameters": (),
        "control.auto_rebalance": False,
        "control.rebalance_skew": 1.3,
        "control.rebalance_min_records": 1000,
    }
    assert config["runtime.batch_size"] == 1024
    assert config.get("state.backend") == "memory"
    assert config.get("no.such_key") is None
    assert config.get("no.such_key", 7) == 7
    with pytest.raises(KeyError, match="valid keys"):
        config["no.such_key"]


def test_config_is_immutable_hashable_and_picklable():
    config = Config.load(overrides={"environment.parallelism": 3}, environ={})
    assert pickle.loads(pickle.dumps(config)) == config
    assert hash(pickle.loads(pickle.dumps(config))) == hash(config)
    assert {config, Config.load(overrides={"environment.parallelism": 3}, environ={})} == {config}
    assert config != Config.defaults()
    with pytest.raises(TypeError):
        config.values["environment.parallelism"] = 4  # type: ignore[index]


def test_load_without_anything_is_defaults():
    assert Config.load(environ={}) == Config.defaults()


# --- the shipped conf files ----------------------------------------------------------------------


def test_default_toml_equals_schema_defaults():
    assert Config.load(CONF / "default.toml", environ={}) == Config.defaults()


def test_default_toml_lists_every_key_with_a_comment():
    """Loading alone would pass for an empty file; check the document itself."""
    document = tomllib.loads((CONF / "default.toml").read_text(encoding="utf-8"))
    flat = {f"{section}.{key}": (tuple(sorted(value.items())) if isinstance(value, dict) else value)
            for section, table in document.items() for key, value in table.items()}
    assert flat == {spec.name: spec.default for spec in SCHEMA}
    lines = (CONF / "default.toml").read_text(encoding="utf-8").splitlines()
    for index, line in enumerate(lines):
        if "=" in line and not line.startswith("#"):
            assert lines[index - 1].startswith("# "), f"no comment above {line!r}"
    for spec in SCHEMA:
        if spec.choices is not None:
            assert any(line.startswith("#") and all(c in line for c in spec.choices)
                       for line in lines)


def test_local_toml():
    config = Config.load(CONF / "local.toml", environ={})
    assert config["environment.type"] == "local"
    assert config["environment.parallelism"] == 2
    assert config["progress.enabled"] is True
    assert config["state.backend"] == "memory"
    assert config["runtime.batch_size"] == 1024  # untouched keys keep defaults


# --- environment variables and precedence --------------------------------------------------------


def test_environment_variables_are_parsed_to_the_key_type():
    environ = {
        "GYREFLOW_STATE__BACKEND": "memory",
        "GYREFLOW_SCHEDULER__MAX_FLYING_WINDOWS": "4",
        "GYREFLOW_STATE__PATH": "/tmp/state",
        "GYREFLOW_PROGRESS__ENABLED": "No",
        "GYREFLOW_HOME": "/ignored",  # no "__": not a config variable
        "PATH": "/usr/bin",
    }
    config = Config.load(environ=environ)
    assert config["scheduler.max_flying_windows"] == 4
    assert config["state.path"] == "/tmp/state"
    assert config["progress.enabled"] is False


@pytest.mark.parametrize(
    ("text", "expected"),
    [("true", True), ("TRUE", True), ("1", True), ("yes", True), ("Yes", True),
     ("false", False), ("False", False), ("0", False), ("no", False), ("NO", False)],
)
def test_environment_bool_words(text, expected):
    config = Config.load(environ={"GYREFLOW_PROGRESS__ENABLED": text})
    assert config["progress.enabled"] is expected


def test_load_uses_os_environ_by_default(monkeypatch):
    monkeypatch.setenv("GYREFLOW_RUNTIME__BATCH_SIZE", "77")
    assert Config.load()["runtime.batch_size"] == 77


def test_precedence_overrides_then_environment_then_file(tmp_path):
    path = write(tmp_path, "[runtime]\nbatch_size = 10\n[state]\nmax_parallelism = 10\n"
                           "[environment]\nparallelism = 10\n")
    environ = {"GYREFLOW_STATE__MAX_PARALLELISM": "20", "GYREFLOW_ENVIRONMENT__PARALLELISM": "20"}
    config = Config.load(path, overrides={"environment.parallelism": 30}, environ=environ)
    assert config["runtime.batch_size"] == 10  # file only
    assert config["state.max_parallelism"] == 20  # env beats file
    assert config["environment.parallelism"] == 30  # override beats env and file


def test_with_overrides_returns_a_validated_copy():
    base = Config.defaults()
    changed = base.with_overrides({"state.max_parallelism": 64, "progress.enabled": False})
    assert changed["state.max_parallelism"] == 64 and changed["progress.enabled"] is False
    assert base["state.max_parallelism"] == 128
    with pytest.raises(ConfigError, match="override state.max_parallelism = 0"):
        base.with_overrides({"state.max_parallelism": 0})


def test_int_is_accepted_for_a_float_key():
    ratio = ConfigKey("runtime.ratio", float, 0.5, "A float key for the test.", minimum=0)
    assert ratio.validate(2, "override runtime.ratio = 2") == 2.0
    assert isinstance(ratio.validate(2, "override"), float)
    with pytest.raises(ConfigError, match="must be of type float"):
        ratio.validate(True, "override runtime.ratio = true")
    assert ratio.parse("1e3", "environment variable GYREFLOW_RUNTIME__RATIO=1e3") == 1000.0


# --- errors --------------------------------------------------------------------------------------


def test_unknown_section_in_file_lists_sections(tmp_path):
    path = write(tmp_path, '[sate]\nbackend = "memory"\n')
    with pytest.raises(ConfigError) as info:
        Config.load(path, environ={})
    message = str(info.value)
    assert "[sate]" in message and str(path) in message
    assert "valid sections: environment, scheduler, runtime, state, graph, progress" in message


def test_unknown_key_in_file_lists_keys_of_section(tmp_path):
    path = write(tmp_path, '[state]\nbakend = "memory"\n')
    with pytest.raises(ConfigError) as info:
        Config.load(path, environ={})
    message = str(info.value)
    assert "[state] bakend" in message and str(path) in message
    assert ("valid keys of [state]: backend, max_parallelism, path, url, checkpoint_url, "
            "checkpoint_options, local_copies, local_path, secret, snapshot_every, "
            "retained_snapshots") in message


def test_top_level_value_in_file(tmp_path):
    path = write(tmp_path, "parallelism = 2\n")
    with pytest.raises(ConfigError, match="unknown section \\[parallelism\\].*valid sections"):
        Config.load(path, environ={})
    path = write(tmp_path, 'state = "memory"\n')
    with pytest.raises(ConfigError, match="must be a table: write \\[state\\]"):
        Config.load(path, environ={})


def test_invalid_choice_in_file_lists_choices(tmp_path):
    path = write(tmp_path, '[state]\nbackend = "redis"\n')
    with pytest.raises(ConfigError) as info:
        Config.load(path, environ={})
    assert str(info.value) == (
        f'[state] backend = "redis" in {path} is not a valid choice; valid choices: memory, rocksdb, jdbc'
    )


def test_invalid_choice_relative_path_is_named_as_given(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "conf").mkdir()
    write(tmp_path / "conf", '[environment]\ntype = "flink"\n')
    with pytest.raises(ConfigError, match='type = "flink" in conf/x.toml is not a valid choice; '
                                          "valid choices: spark, local"):
        Config.load("conf/x.toml", environ={})


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('[state]\nmax_parallelism = "8"', "must be of type int (got str)"),
        ("[state]\nmax_parallelism = 8.0", "must be of type int (got float)"),
        ("[state]\nmax_parallelism = true", "must be of type int (got bool)"),
        ("[progress]\nenabled = 1", "must be of type bool (got int)"),
        ("[state]\npath = 3", "must be of type str (got int)"),
        ("[state]\npath = [1]", "must be of type str (got list)"),
    ],
)
def test_wrong_type_in_file_names_expected_type(tmp_path, line, expected):
    path = write(tmp_path, line + "\n")
    with pytest.raises(ConfigError) as info:
        Config.load(path, environ={})
    assert expected in str(info.value) and str(path) in str(info.value)


def test_below_minimum_in_file_names_minimum(tmp_path):
    path = write(tmp_path, "[scheduler]\nmax_flying_windows = 0\n")
    with pytest.raises(ConfigError) as info:
        Config.load(path, environ={})
    message = str(info.value)
    assert f"[scheduler] max_flying_windows = 0 in {path}" in message
    assert "must be at least 1" in message


def test_missing_file_names_path(tmp_path):
    path = tmp_path / "missing.toml"
    with pytest.raises(ConfigError, match=f"config file {path} does not exist"):
        Config.load(path, environ={})


def test_directory_instead_of_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config file"):
        Config.load(tmp_path, environ={})


def test_toml_syntax_error_names_file_and_parser_message(tmp_path):
    path = write(tmp_path, "[state\nbackend = 'memory'\n")
    with pytest.raises(ConfigError) as info:
        Config.load(path, environ={})
    message = str(info.value)
    assert f"invalid TOML in config file {path}" in message
    assert "line 1" in message  # the parser's own message
    assert isinstance(info.value.__cause__, tomllib.TOMLDecodeError)


def test_non_utf8_file_is_a_config_error(tmp_path):
    path = tmp_path / "x.toml"
    path.write_bytes(b'[state]\npath = "\xff"\n')
    with pytest.raises(ConfigError, match="invalid TOML"):
        Config.load(path, environ={})


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("GYREFLOW_SATE__BACKEND", "memory",
         "unknown section [sate] from environment variable GYREFLOW_SATE__BACKEND; "
         "valid sections: environment, scheduler, runtime, state, graph, progress"),
        ("GYREFLOW_STATE__BAKEND", "memory",
         "unknown key [state] bakend from environment variable GYREFLOW_STATE__BAKEND; "
         "valid keys of [state]: backend, "),
        ("GYREFLOW_STATE__BACKEND", "redis",
         "environment variable GYREFLOW_STATE__BACKEND=redis is not a valid choice; "
         "valid choices: memory, rocksdb, jdbc"),
        ("GYREFLOW_STATE__MAX_PARALLELISM", "lots",
         "environment variable GYREFLOW_STATE__MAX_PARALLELISM=lots cannot be parsed as int"),
        ("GYREFLOW_STATE__MAX_PARALLELISM", "0",
         "environment variable GYREFLOW_STATE__MAX_PARALLELISM=0 is below the minimum; "
         "state.max_parallelism must be at least 1"),
        ("GYREFLOW_PROGRESS__ENABLED", "maybe",
         "GYREFLOW_PROGRESS__ENABLED=maybe cannot be parsed as bool (true/false, 1/0 or yes/no)"),
    ],
)
def test_environment_errors_name_the_variable(variable, value, expected):
    with pytest.raises(ConfigError) as info:
        Config.load(environ={variable: value})
    assert expected in str(info.value)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"sate.backend": "memory"},
         "unknown section [sate] in override 'sate.backend'; valid sections: environment, "),
        ({"state.bakend": "memory"},
         "unknown key [state] bakend in override 'state.bakend'; valid keys of [state]: backend"),
        ({"backend": "memory"}, "unknown section [backend] in override 'backend'"),
        ({"state.backend": "redis"},
         'override state.backend = "redis" is not a valid choice; valid choices: memory, rocksdb, jdbc'),
        ({"environment.parallelism": "2"},
         'override environment.parallelism = "2" must be of type int or "auto" (got str)'),
        ({"environment.parallelism": True},
         'override environment.parallelism = true must be of type int or "auto" (got bool)'),
        ({"runtime.batch_size": -5},
         "override runtime.batch_size = -5 is below the minimum; "
         "runtime.batch_size must be at least 1"),
    ],
)
def test_override_errors_say_override(overrides, expected):
    with pytest.raises(ConfigError) as info:
        Config.load(overrides=overrides, environ={})
    assert expected in str(info.value)
    with pytest.raises(ConfigError):
        Config.defaults().with_overrides(overrides)


def test_config_error_is_a_value_error():
    assert issubclass(ConfigError, ValueError)


# --- rendering -----------------------------------------------------------------------------------


def test_as_toml_round_trips_defaults_and_has_every_section(tmp_path):
    text = Config.defaults().as_toml()
    for section in ("environment", "scheduler", "runtime", "state", "progress"):
        assert f"[{section}]\n" in text
    assert "enabled = true\n" in text
    assert Config.load(write(tmp_path, text), environ={}) == Config.defaults()


def test_schema_markdown_has_a_row_per_key():
    table = schema_markdown().splitlines()
    assert table[0] == "| key | type | default | choices / range | meaning |"
    assert len(table) == 2 + len(SCHEMA)
    for spec, row in zip(SCHEMA, table[2:], strict=True):
        kind = "table" if spec.type is dict else spec.type.__name__
        assert row.startswith(f"| `{spec.name}` | {kind} |")
        assert spec.doc in row
    assert "| `state.backend` | str | `\"memory\"` | `memory`, `rocksdb`, `jdbc` |" in table[2 + 4]
    assert "≥ 1" in table[2 + 1]


@given(
    key=st.sampled_from(INT_KEYS),
    offset=st.integers(min_value=0, max_value=2**63 - 1),
)
def test_any_int_at_or_above_minimum_round_trips(tmp_path_factory, key, offset):
    value = min(key.minimum + offset, 2**63 - 1)
    config = Config.defaults().with_overrides({key.name: value})
    path = tmp_path_factory.mktemp("roundtrip") / "x.toml"
    path.write_text(config.as_toml(), encoding="utf-8")
    loaded = Config.load(path, environ={})
    assert loaded == config
    assert loaded[key.name] == value


@given(key=st.sampled_from(FREE_STR_KEYS), value=st.text())
def test_any_string_round_trips_through_toml(key, value):
    config = Config.defaults().with_overrides({key.name: value})
    document = tomllib.loads(config.as_toml())
    assert document[key.section][key.key] == value
