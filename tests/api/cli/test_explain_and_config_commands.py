"""The ``gyreflow explain`` and ``gyreflow config`` commands, and ``gyreflow --version``."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import tomllib

import pytest
from _cli_runs import EXAMPLE, ROOT, WIDE, run_cli, run_module
from click.testing import CliRunner

from gyreflow.api.cli import main

pytestmark = pytest.mark.usefixtures("every_environment")

SAMPLE = ROOT / "examples" / "data" / "sample.txt"
GOLDEN = pathlib.Path(__file__).resolve().parents[2] / "golden"


# --- gyreflow explain -----------------------------------------------------------------------------

EXPLAIN_ARGS = ["--", "--input", str(SAMPLE), "--window", "3", "--output", "out/wc",
                "--parallelism", "2"]


def test_explain_text_matches_golden(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # the plan at parallelism 1 (the auto default would be this machine's cores)
    monkeypatch.setenv("GYREFLOW_ENVIRONMENT__PARALLELISM", "1")
    result = run_cli(["explain", str(EXAMPLE), "--format", "text", *EXPLAIN_ARGS])
    assert result.exit_code == 0
    assert result.stdout == (GOLDEN / "word_count.txt").read_text(encoding="utf-8")
    assert not (tmp_path / "out").exists()  # explained, not run
    default = run_cli(["explain", str(EXAMPLE), *EXPLAIN_ARGS])
    assert default.stdout == result.stdout


def test_explain_dot(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GYREFLOW_ENVIRONMENT__PARALLELISM", "1")  # not this machine's cores
    result = run_cli(["explain", str(EXAMPLE), "--format", "dot", *EXPLAIN_ARGS])
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0] == 'digraph "word-count/word_count" {'
    assert lines[-1] == "}"
    assert result.stdout.count("{") == result.stdout.count("}")
    # lines(0) -> split(1) -key-> count(2) -rebalance-> files(3)
    edges = [line.strip() for line in lines if "->" in line]
    assert edges == [
        'n0 -> n1 [label="forward"];',
        'n1 -> n2 [label="key", style=bold];',
        'n2 -> n3 [label="rebalance", style=bold];',
    ]
    assert [line.strip() for line in lines if line.strip().startswith("subgraph")] == [
        "subgraph cluster_v0 {", "subgraph cluster_v1 {", "subgraph cluster_v2 {"
    ]
    assert not (tmp_path / "out").exists()
    dot = shutil.which("dot")
    if dot is not None:
        svg = subprocess.run([dot, "-Tsvg"], input=result.stdout, capture_output=True, text=True,
                             timeout=30)
        assert svg.returncode == 0, svg.stderr


def test_explain_mermaid_subprocess(tmp_path, monkeypatch):
    monkeypatch.setenv("GYREFLOW_ENVIRONMENT__PARALLELISM", "1")  # not this machine's cores
    result = run_module(["explain", str(EXAMPLE), "--format", "mermaid", *EXPLAIN_ARGS],
                        cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:2] == ["flowchart LR", "  %% word-count/word_count"]
    assert [line for line in lines if "-->" in line] == [
        "  n0 -->|forward| n1",
        "  n1 -->|key| n2",
        "  n2 -->|rebalance| n3",
    ]
    opened = sum(1 for line in lines if line.startswith("  subgraph "))
    assert opened == 3 == lines.count("  end")
    assert not (tmp_path / "out").exists()


def test_explain_rejects_unknown_format():
    result = CliRunner().invoke(main, ["explain", str(EXAMPLE), "--format", "svg"], env=WIDE)
    assert result.exit_code == 2
    assert "svg" in result.stderr


# --- gyreflow config ------------------------------------------------------------------------------


def test_config_prints_the_defaults_as_toml(monkeypatch):
    for name in ("GYREFLOW_ENVIRONMENT__TYPE", "GYREFLOW_ENVIRONMENT__WORKERS",
                 "GYREFLOW_SPARK__MASTER"):
        monkeypatch.delenv(name, raising=False)  # the defaults alone, not the environment under test
    result = run_cli(["config"])
    assert result.exit_code == 0
    printed = tomllib.loads(result.stdout)
    with open(ROOT / "conf" / "default.toml", "rb") as handle:
        shipped = tomllib.load(handle)  # the hand-written, commented list of defaults
    assert printed == shipped


def test_config_round_trips(tmp_path):
    custom = tmp_path / "custom.toml"
    custom.write_text(
        '[environment]\nparallelism = 3\n[state]\npath = "dir with \\"quotes\\" and \\\\"\n'
        "[progress]\nenabled = false\n",
        encoding="utf-8",
    )
    first = run_cli(["config", "--config", str(custom)])
    assert first.exit_code == 0
    values = tomllib.loads(first.stdout)
    assert values["environment"]["parallelism"] == 3
    assert values["state"]["path"] == 'dir with "quotes" and \\'
    assert values["progress"]["enabled"] is False
    assert values["runtime"]["batch_size"] == 1024
    again = tmp_path / "again.toml"
    again.write_text(first.stdout, encoding="utf-8")
    second = run_cli(["config", "--config", str(again)])
    assert second.stdout == first.stdout


def test_config_reads_environment_variables():
    result = CliRunner().invoke(main, ["config"], env={"GYREFLOW_RUNTIME__BATCH_SIZE": "64"})
    assert result.exit_code == 0
    assert tomllib.loads(result.stdout)["runtime"]["batch_size"] == 64


def test_config_with_unknown_key_exits_2(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[progress]\nenable = true\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["config", "--config", str(bad)], env=WIDE)
    assert result.exit_code == 2
    assert "valid keys of [progress]: enabled" in " ".join(result.stderr.split())
    assert result.stdout == ""


def test_config_schema_lists_every_key():
    result = run_cli(["config", "--schema"])
    assert result.exit_code == 0
    with open(ROOT / "conf" / "default.toml", "rb") as handle:
        shipped = tomllib.load(handle)
    for section, keys in shipped.items():
        for name in keys:
            assert f"`{section}.{name}`" in result.stdout


def test_version():
    result = run_module(["--version"])
    assert result.returncode == 0
    assert "0.1.0" in result.stdout
