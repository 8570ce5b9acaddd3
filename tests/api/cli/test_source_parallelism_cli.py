"""gyreflow run prints the source-parallelism warning once, for the split source only, as one line
naming the script's line (then that line), with no traceback."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = """\
from gyreflow.api import Environment, SizeTumblingWindow

pipeline = Environment.from_config().pipeline("two-sources")

@pipeline.task
def job(ctx):
    left = ctx.source(["a", "b", "c"], SizeTumblingWindow(2), name="left")
    right = ctx.source(["x", "y", "z"], SizeTumblingWindow(2), name="right", parallelism=1)
    left.union(right).collect("out")

pipeline.execute()
"""


@pytest.mark.processes
def test_gyreflow_run_prints_one_warning_for_the_split_source(tmp_path):
    (tmp_path / "job.py").write_text(SCRIPT)
    done = subprocess.run(
        [sys.executable, "-m", "gyreflow", "run", "--quiet", "--env", "local", "job.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
        env={"PATH": str(Path(sys.executable).parent), "GYREFLOW_ENVIRONMENT__PARALLELISM": "2",
             "GYREFLOW_CONTROL__ENABLED": "false", "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    warned = [line for line in lines if "SourceParallelismWarning" in line]
    assert len(warned) == 1, done.stderr
    assert warned[0].startswith("job.py:7: SourceParallelismWarning: source 'left' "
                                "runs with parallelism 2 and SizeTumblingWindow(2)")
    assert "Traceback" not in done.stderr
    assert textwrap.dedent(lines[lines.index(warned[0]) + 1]).strip().startswith("left = ctx.source(")
