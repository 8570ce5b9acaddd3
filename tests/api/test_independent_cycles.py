"""A job of independent pipelines whose inputs end at different windows: every window of the longer
one is published, and a resume after SIGKILL past the shorter one's end gives the same files.
The oracle is a plain-Python running count per window."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from gyreflow.api import FileSink, SizeTumblingWindow

SHORT = list(range(20))  # 2 windows of 10
LONG = list(range(70))  # 14 windows of 5

SCRIPT = '''
import sys
from gyreflow.api import Environment, FileSink, SizeTumblingWindow
out = sys.argv[1]
pipeline = Environment.from_config().pipeline("cycles")

@pipeline.task(name="job")
def job(ctx):
    (ctx.source(list(range(20)), SizeTumblingWindow(10), parallelism=1)
     .map(lambda x: (x % 3, 1)).key_by(lambda t: t[0]).reduce(lambda a, b: (a[0], a[1] + b[1]))
     .sink(FileSink(out + "/short")))
    (ctx.source(list(range(70)), SizeTumblingWindow(5), parallelism=1)
     .map(lambda x: (x % 4, 1)).key_by(lambda t: t[0]).reduce(lambda a, b: (a[0], a[1] + b[1]))
     .sink(FileSink(out + "/long")))

pipeline.execute()
'''


def running_counts(items: list[int], size: int, modulo: int) -> dict[int, dict[int, int]]:
    """Window -> key -> count over windows 1..window, for the keys seen in the window."""
    total: Counter = Counter()
    out = {}
    for window, start in enumerate(range(0, len(items), size), start=1):
        chunk = items[start:start + size]
        total.update(x % modulo for x in chunk)
        out[window] = {x % modulo: total[x % modulo] for x in chunk}
    return out


def read(folder: Path) -> dict[int, dict[int, int]]:
    out = {}
    for name in sorted(os.listdir(folder)):
        assert not name.startswith("."), f"left in {folder}: {name}"
        window = int(name.split("-")[1].split(".")[0])
        out[window] = {k: v for k, v in (json.loads(line) for line in
                                          (folder / name).read_text().splitlines())}
    return out


def assert_matches_the_oracle(out: Path) -> None:
    assert read(out / "short") == running_counts(SHORT, 10, 3)
    assert read(out / "long") == running_counts(LONG, 5, 4)


def test_every_window_of_the_longer_pipeline_is_published(make_env, tmp_path):
    out = tmp_path / "out"
    pipeline = make_env(2).pipeline("cycles")

    @pipeline.task(name="job")
    def job(ctx):
        (ctx.source(SHORT, SizeTumblingWindow(10), parallelism=1)
         .map(lambda x: (x % 3, 1)).key_by(lambda t: t[0]).reduce(lambda a, b: (a[0], a[1] + b[1]))
         .sink(FileSink(out / "short")))
        (ctx.source(LONG, SizeTumblingWindow(5), parallelism=1)
         .map(lambda x: (x % 4, 1)).key_by(lambda t: t[0]).reduce(lambda a, b: (a[0], a[1] + b[1]))
         .sink(FileSink(out / "long")))

    pipeline.execute()
    assert_matches_the_oracle(out)


@pytest.mark.parametrize(("environment", "backend", "crash_at"), [
    ("local", "rocksdb", "after-commit:12"),
    ("local", "jdbc", "mid-publish:13"),
    ("local", "rocksdb", "window-finished:3"),
    ("spark", "rocksdb", "after-commit:9"),
])
def test_killed_after_the_shorter_input_ended_then_resumed(tmp_path, environment, backend,
                                                           crash_at):
    script = tmp_path / "job.py"
    script.write_text(SCRIPT, encoding="utf-8")
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    env.update({"GYREFLOW_ENVIRONMENT__TYPE": environment, "GYREFLOW_STATE__BACKEND": backend,
                "GYREFLOW_STATE__PATH": str(tmp_path / "state"), "GYREFLOW_SPARK__MASTER": "local[2]",
                "GYREFLOW_STATE__RETAINED_SNAPSHOTS": "2", "COLUMNS": "400"})

    def run(*flags: str, crash: str | None = None):
        extra = {"GYREFLOW_CRASH_AT": crash} if crash else {}
        return subprocess.run([sys.executable, "-m", "gyreflow", "run", "--quiet", *flags,
                               str(script), str(out)], env={**env, **extra}, capture_output=True,
                              text=True, timeout=300, check=False)

    done = run(crash=crash_at)
    assert done.returncode == -signal.SIGKILL, done.stderr
    done = run("--resume")
    assert done.returncode == 0, done.stderr
    assert_matches_the_oracle(out)
