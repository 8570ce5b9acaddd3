"""The marks scripts/test.sh --fast selects by: a test that starts Spark or processes is left out.

``scripts/test.sh --fast`` runs ``-m "not spark and not processes"``. The marks come from a test's
module, its parameters and its fixtures (tests/conftest.py); a test that starts a Spark JVM without
the mark all the same fails. Checked with pytest itself in a process of its own, on the real suite
and on a small suite written here (a copy of the real conftest).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
FAST = ["-m", "not spark and not processes"]


def pytest_in_process(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:benchmark", "-p",
                           "no:cacheprovider", "-n", "0", "-q", *args],
                          cwd=cwd, capture_output=True, text=True, timeout=300, check=False)


def collected(out: subprocess.CompletedProcess) -> list[str]:
    return [line for line in out.stdout.splitlines() if "::" in line]


@pytest.mark.processes
def test_the_fast_selection_leaves_out_the_dataframe_oracle_of_event_time():
    out = pytest_in_process(["--collect-only", *FAST, "tests/runtime/test_event_time.py"], TESTS.parent)
    assert out.returncode == 0, out.stdout + out.stderr
    names = collected(out)
    assert names, out.stdout  # the module's in-process tests stay
    assert [name for name in names if "pyspark_dataframe" in name] == []


HELPERS = '''
    import subprocess

    import pytest


    @pytest.fixture
    def a_server():
        subprocess.run(["true"], check=True)
        return "started"
    '''

SUITE = '''
    import pytest
    from _helpers import a_server  # noqa: F401 - a fixture of another module


    @pytest.fixture
    def through_another(a_server):
        return a_server


    @pytest.fixture
    def a_session(spark):
        return spark


    def test_in_process():
        assert 1 + 1 == 2


    def test_with_spark(spark):
        pass


    def test_with_a_fixture_that_asks_for_spark(a_session):
        pass


    def test_with_a_fixture_that_starts_a_process(through_another):
        pass


    def test_starting_a_jvm_without_the_mark():
        import pyspark

        pyspark.SparkContext._gateway = object()  # as SparkContext's start leaves it
    '''


@pytest.mark.processes
def test_fixtures_that_start_spark_or_processes_mark_their_tests(tmp_path):
    for name in ("conftest.py", "_postgres.py", "_spark_master.py"):
        shutil.copy(TESTS / name, tmp_path / name)
    (tmp_path / "_helpers.py").write_text(textwrap.dedent(HELPERS), encoding="utf-8")
    (tmp_path / "test_sample.py").write_text(textwrap.dedent(SUITE), encoding="utf-8")
    out = pytest_in_process(["--collect-only", *FAST], tmp_path)
    assert [name.split("::")[1] for name in collected(out)] == [
        "test_in_process", "test_starting_a_jvm_without_the_mark"], out.stdout + out.stderr

    # The one the marks cannot see fails when it runs.
    out = pytest_in_process(FAST, tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines[-1].startswith("2 passed, 3 deselected, 1 error in "), out.stdout
    assert "ERROR at teardown of test_starting_a_jvm_without_the_mark" in lines[2], out.stdout
    assert lines[3] == ("this test started a Spark JVM without @pytest.mark.spark: mark it (or use "
                        "the spark fixture, which marks it), so that scripts/test.sh --fast leaves "
                        "it out"), out.stdout
