"""A DirectorySource job run as a real ``gyreflow run`` process, killed at a crash point and resumed:
the job, the command and the published rows that the cut-file and replaced-file tests share."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

WINDOW = 20  # records a window

JOB = """
import os, sys, time
from gyreflow.api import DirectorySource, Environment, FileSink, SizeTumblingWindow
fmt, columnar, folder, out = sys.argv[1], sys.argv[2] == "1", sys.argv[3], sys.argv[4]


def slowed(record):
    # The run that is killed (at a crash point after a commit of window 3 or a later one) reads
    # slowly from window 4 on: the snapshots of window 3 are durable long before the source could
    # reach the end of the file, so the kill finds it inside the file.
    ident = int(record.split(",")[0]) if isinstance(record, str) else int(record["id"])
    if ident >= 60 and os.environ.get("GYREFLOW_CRASH_AT"):
        time.sleep(0.02)
    return record


pipeline = Environment.from_config(None).pipeline("files")
source = DirectorySource(folder, format=fmt, columnar=columnar)
pipeline.task(lambda ctx: ctx.source(source, SizeTumblingWindow(WINDOW)).map(slowed)
              .sink(FileSink(out)), name="job")
pipeline.execute()
""".replace("WINDOW", str(WINDOW))


def gyreflow_run(tmp_path: Path, fmt: str, columnar: bool, workers: str, *flags: str,
                 crash: str | None = None) -> subprocess.CompletedProcess:
    """The job over ``tmp_path / "in"`` into ``tmp_path / "out"``, RocksDB state, ``workers`` worker
    processes; ``crash``: the crash point where it SIGKILLs itself."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    env.update({"COLUMNS": "400", "GYREFLOW_ENVIRONMENT__TYPE": "local",
                "GYREFLOW_ENVIRONMENT__WORKERS": workers, "GYREFLOW_STATE__BACKEND": "rocksdb",
                "GYREFLOW_STATE__PATH": str(tmp_path / "state")})
    if crash is not None:
        env["GYREFLOW_CRASH_AT"] = crash
    (tmp_path / "job.py").write_text(JOB, encoding="utf-8")
    return subprocess.run(
        [sys.executable, "-m", "gyreflow", "run", "--quiet", *flags, str(tmp_path / "job.py"),
         "--", fmt, "1" if columnar else "0", str(tmp_path / "in"), str(tmp_path / "out")],
        env=env, capture_output=True, text=True, timeout=180, check=False)


def published(out: Path) -> list:
    """The rows of every published window file, in window order."""
    return [json.loads(line) for name in sorted(os.listdir(out)) if name.startswith("window-")
            for line in (out / name).read_text(encoding="utf-8").splitlines()]
