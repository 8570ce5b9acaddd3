"""A module a source or sink needs that is not installed stops the job before any data moves.

The shipped examples read columns with pyarrow; in a process where pyarrow cannot be imported (a
``sitecustomize`` puts a blocker first on ``sys.meta_path``) ``gyreflow run`` ends before window 1
with exit 2 and one ``error:`` line naming the operator and what to install, no traceback, no
output. A source of one's own declares its modules with ``requires()``; its reader is then never
opened. (pyarrow itself is a dependency of gyreflow: tests/project/test_dependencies.py.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gyreflow.api import Environment, SizeTumblingWindow
from gyreflow.api.config.loading import ConfigError
from gyreflow.api.connectors.requirements import Requirement
from gyreflow.api.connectors.sources import Source

REPO = Path(__file__).resolve().parents[3]
GYREFLOW = Path(sys.executable).with_name("gyreflow")
BLOCKER = """import sys


class _NoPyarrow:
    def find_spec(self, name, path=None, target=None):
        if name == "pyarrow" or name.startswith("pyarrow."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NoPyarrow())
"""
INSTALL = "pip install 'pyarrow>=14' (it comes with gyreflow: an installation with --no-deps leaves it out)"


def run_without_pyarrow(tmp_path: Path, args: list[str]) -> subprocess.CompletedProcess:
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(BLOCKER, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(blocker), "GYREFLOW_PROGRESS__ENABLED": "false"}
    return subprocess.run([str(GYREFLOW), "run", "--env", "local", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.processes
def test_the_event_time_example_without_pyarrow_stops_before_window_1(tmp_path):
    events = tmp_path / "events.jsonl"
    events.write_text("".join(json.dumps({"ts": i * 0.5, "key": f"k{i % 3}", "value": i}) + "\n"
                              for i in range(20)), encoding="utf-8")
    out = run_without_pyarrow(tmp_path, [str(REPO / "examples" / "event_time.py"), "--",
                                         "--input", "events.jsonl", "--window", "tumbling:2",
                                         "--output", "out"])
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.splitlines() == [
        f"error: configuration: operator 'lines' (DirectorySource({tmp_path.name}/events.jsonl, "
        f"jsonl)) needs the Python module pyarrow, which is not installed: {INSTALL}"]
    assert list((tmp_path / "out").iterdir()) == []  # no window ran


@pytest.mark.processes
def test_the_columnar_word_count_without_pyarrow_stops_before_window_1(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    words = tmp_path / "words"
    words.mkdir()
    pq.write_table(pa.table({"word": ["a", "b", "a"]}), words / "part-0.parquet")
    out = run_without_pyarrow(tmp_path, [str(REPO / "examples" / "columnar_word_count.py"), "--",
                                         "--input", "words", "--output", "out"])
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.splitlines() == [
        "error: configuration: operator 'words' (DirectorySource(words/*.parquet, parquet)) "
        f"needs the Python module pyarrow, which is not installed: {INSTALL}"]
    assert not (tmp_path / "out").exists()


class ClientSource(Source):
    """A source whose readers would need a client library nobody has."""

    def __init__(self, opened: list) -> None:
        self.opened = opened

    def requires(self):
        return (Requirement("a_client_nobody_installed", "pip install a-client"),)

    def create_reader(self, task_index, parallelism):
        self.opened.append(task_index)
        raise AssertionError("a reader was opened")

    def describe(self):
        return "ClientSource"


def test_a_source_of_ones_own_declares_what_it_needs(tmp_path):
    opened: list = []
    pipeline = Environment.local(1, progress=False, config={
        "state.path": str(tmp_path / "state")}).pipeline("needs")

    @pipeline.task(name="job")
    def job(ctx):
        ctx.source(ClientSource(opened), SizeTumblingWindow(10)).with_name("client").collect("x")

    with pytest.raises(ConfigError) as raised:
        pipeline.execute()
    assert str(raised.value) == (
        "operator 'client' (ClientSource) needs the Python module a_client_nobody_installed, "
        "which is not installed: pip install a-client")
    assert opened == []
    assert not (tmp_path / "state").exists()  # nothing stored either


def test_a_later_task_that_needs_a_missing_module_stops_the_pipeline_before_the_first_task(tmp_path):
    opened: list = []
    out = tmp_path / "first"
    pipeline = Environment.local(1, progress=False, config={
        "state.path": str(tmp_path / "state")}).pipeline("needs-later")

    @pipeline.task(name="first")
    def first(ctx):
        from gyreflow.api import FileSink

        ctx.source([1, 2, 3], SizeTumblingWindow(10)).sink(FileSink(str(out)))

    @pipeline.task(name="second")
    def second(ctx):
        ctx.source(ClientSource(opened), SizeTumblingWindow(10)).with_name("client").collect("x")

    with pytest.raises(ConfigError, match="operator 'client' .* a_client_nobody_installed"):
        pipeline.execute()
    assert opened == []
    assert not out.exists() or not any(out.iterdir())  # the first task moved no data
