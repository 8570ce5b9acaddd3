"""Running the ``gyreflow`` command in process (click's CliRunner) and as ``python -m gyreflow``."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

from click.testing import CliRunner

from gyreflow.api.cli import main

ROOT = pathlib.Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "word_count.py"
WIDE = {"COLUMNS": "400"}  # rich wraps stderr at the terminal width: keep messages on one line


def clean_environ() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GYREFLOW_")
           or k in ("GYREFLOW_ENVIRONMENT__TYPE", "GYREFLOW_ENVIRONMENT__WORKERS",
                    "GYREFLOW_ENVIRONMENT__PARALLELISM", "GYREFLOW_SPARK__MASTER")}
    env.update(WIDE)
    return env


def run_cli(args: list[str], **kwargs):
    return CliRunner().invoke(main, args, env=WIDE, catch_exceptions=False, **kwargs)


def run_module(args: list[str], cwd: pathlib.Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gyreflow", *args],
        cwd=cwd, env=clean_environ(), capture_output=True, text=True, timeout=120,
    )
