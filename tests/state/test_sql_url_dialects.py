"""A database URL with a misspelt dialect is a configuration error naming the dialect and the ones
gyreflow reads, not advice about a PostgreSQL server that was never asked."""

from __future__ import annotations

import pytest
from _cli_runs import EXAMPLE, run_module

from gyreflow.state.stores.sql_urls import connection_failure, missing_driver


def test_missing_driver_names_an_unknown_dialect_and_the_supported_ones():
    message = missing_driver("sqlit:///x.db", "state.url")
    assert message is not None
    assert "unknown database dialect 'sqlit'" in message
    assert "sqlite" in message.replace("'sqlit'", "") and "postgresql" in message
    assert "localhost:5432" not in message


@pytest.mark.parametrize("url", ["sqlite:///x.db", "postgresql+psycopg://u@h/db"])
def test_known_dialects_pass(url):
    assert missing_driver(url, "state.url") is None


def test_a_connection_failure_of_an_unknown_dialect_gives_no_server_advice():
    failed = Exception("Can't load plugin: sqlalchemy.dialects:sqlit")
    message = connection_failure("sqlit:///x.db", failed)
    assert "unknown database dialect 'sqlit'" in message
    assert "server" not in message


@pytest.mark.processes
def test_gyreflow_run_refuses_a_misspelt_dialect_with_exit_2_before_anything_runs(tmp_path):
    (tmp_path / "bad.toml").write_text('[state]\nbackend = "jdbc"\nurl = "sqlit:///x.db"\n',
                                       encoding="utf-8")
    done = run_module(["run", "--env", "local", "--fresh", "--config", "bad.toml", str(EXAMPLE), "--",
                       "--output", "out"], cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: configuration: state.url:")
    assert "'sqlit'" in lines[0] and "postgresql" in lines[0] and "localhost:5432" not in lines[0]
    assert not (tmp_path / "out").exists() and not (tmp_path / "x.db").exists()
