"""The custom source and sink of docs/connectors.md ("Writing a source or sink"), as written there,
in a job killed at crash points and resumed: the offsets bring every record back exactly once, and
the files hold the windows a plain loop cuts."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
STOP, SIZE, READERS = 40, 5, 2

pytestmark = pytest.mark.processes

JOB = f"""\
from custom_connectors import JsonLinesSink, Squares

from gyreflow.api import Environment, SizeTumblingWindow

pipeline = Environment.from_config().pipeline("custom")

@pipeline.task
def job(ctx):
    squares = ctx.source(Squares({STOP}), SizeTumblingWindow({SIZE}), parallelism={READERS})
    squares.map(lambda pair: pair[0]).sink(JsonLinesSink("out"))

pipeline.execute()
"""


def definitions() -> str:
    """The classes of the section's two blocks (what comes before each block's own demo)."""
    text = (ROOT / "docs" / "connectors.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    source = next(b for b in blocks if "(SourceReader)" in b)
    sink = next(b for b in blocks if "(SinkWriter)" in b)
    return source.split("\nreader = ")[0] + "\n\n" + sink.split("\npipeline = ")[0]


def oracle() -> dict[int, list[int]]:
    """Source task i reads i, i + READERS, ...; window w holds the w-th SIZE of every task."""
    windows: dict[int, list[int]] = {}
    for task in range(READERS):
        share = list(range(task, STOP, READERS))
        for start in range(0, len(share), SIZE):
            windows.setdefault(start // SIZE + 1, []).extend(share[start:start + SIZE])
    return {w: sorted(ns) for w, ns in windows.items()}


def run(folder: Path, *flags: str, crash_at: str | None = None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    env.update({"GYREFLOW_ENVIRONMENT__TYPE": "local", "GYREFLOW_STATE__BACKEND": "rocksdb",
                "GYREFLOW_STATE__PATH": str(folder / "state"), "COLUMNS": "400"})
    if crash_at:
        env["GYREFLOW_CRASH_AT"] = crash_at
    return subprocess.run([sys.executable, "-W", "ignore::UserWarning", "-m", "gyreflow", "run",
                           "--quiet", *flags, "job.py"], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=300, check=False)


def published(folder: Path) -> dict[int, list[int]]:
    got: dict[int, list[int]] = {}
    for path in sorted((folder / "out").glob("window-*.jsonl")):
        window = int(path.name.split("-")[1])
        got.setdefault(window, []).extend(json.loads(line) for line in path.read_text().splitlines())
    return {w: sorted(ns) for w, ns in got.items()}


@pytest.mark.parametrize("crash_at", ["before-commit:3", "after-commit:2", "mid-publish:2"])
def test_the_documented_source_and_sink_resume_exactly_once(tmp_path, crash_at):
    (tmp_path / "custom_connectors.py").write_text(definitions(), encoding="utf-8")
    (tmp_path / "job.py").write_text(JOB, encoding="utf-8")
    done = run(tmp_path, crash_at=crash_at)
    assert done.returncode == -signal.SIGKILL, done.stderr
    done = run(tmp_path, "--resume")
    assert done.returncode == 0, done.stderr
    assert published(tmp_path) == oracle()
    assert not list((tmp_path / "out" / ".staging").iterdir())
