"""Graceful stop: the first Ctrl-C (SIGINT to the process group, as a terminal sends it) or SIGTERM
stops ``gyreflow run`` at the next window boundary: it prints "stopped after window N; run again with
--resume to continue", exits 130 or 143, and no process prints a traceback; windows 1..N are
published whole and nothing after them. A second Ctrl-C stops at once. Either way ``--resume`` then
gives the plain-Python oracle's output. Real processes and signals, local and Spark, on RocksDB.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from _recovery_data import word_count_oracle
from test_job_lock import LINES, command, published, read_output

STOPPED = re.compile(r"^stopped after window (\d+); run again with --resume to continue$")


def environ(tmp_path: Path, environment: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    env.update({"COLUMNS": "400", "GYREFLOW_ENVIRONMENT__TYPE": environment,
                "GYREFLOW_SPARK__MASTER": "local[2]",
                "GYREFLOW_SPARK__CONF": json.dumps({"spark.ui.enabled": "false"}),
                "GYREFLOW_STATE__BACKEND": "rocksdb",
                "GYREFLOW_STATE__PATH": str(tmp_path / "state")})
    return env


# A second Ctrl-C leaves from the driver at once, the same code on both environments: on Spark
# the first Ctrl-C (which reaches the JVM too) and SIGTERM are what differ.
@pytest.mark.parametrize(("environment", "how", "status"), [
    ("local", "ctrl-c", 130), ("local", "sigterm", 143), ("local", "ctrl-c-twice", 130),
    ("spark", "ctrl-c", 130), ("spark", "sigterm", 143)])
def test_stop_then_resume(environment, how, status, tmp_path):
    out = tmp_path / "out"
    job = subprocess.Popen(command(tmp_path, out, 0.05), env=environ(tmp_path, environment),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           start_new_session=True)  # its own process group, as in a terminal
    try:
        deadline = time.monotonic() + 240
        while len(published(out)) < 2:
            assert job.poll() is None, f"the job ended early:\n{job.communicate()[1]}"
            assert time.monotonic() < deadline, "the job published nothing"
            time.sleep(0.02)
        if how == "sigterm":
            os.kill(job.pid, signal.SIGTERM)
        else:
            os.killpg(job.pid, signal.SIGINT)
            if how == "ctrl-c-twice":
                time.sleep(0.05)
                os.killpg(job.pid, signal.SIGINT)
        stdout, stderr = job.communicate(timeout=240)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    assert job.returncode == status, (job.returncode, stderr)
    assert "Traceback" not in stderr + stdout, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    stopped = STOPPED.match(lines[0])
    assert stopped, lines[0]
    last = int(stopped.group(1))
    expected = word_count_oracle(LINES, 5)
    shown = read_output(out)
    assert sorted(shown) == list(range(1, len(shown) + 1)), sorted(shown)
    assert all(shown[w] == expected[w] for w in shown), "a published window differs"
    if how != "ctrl-c-twice":
        assert sorted(shown) == list(range(1, last + 1)), (last, sorted(shown))
        assert 2 <= last < len(expected)
    resumed = subprocess.run(command(tmp_path, out, 0.0, "--resume"),
                             env=environ(tmp_path, environment), capture_output=True, text=True,
                             timeout=300, check=False)
    assert resumed.returncode == 0, resumed.stderr
    assert read_output(out) == expected
    assert not [n for n in os.listdir(out) if n.startswith(".") and n != ".staging"], "stray files"
    assert not (out / ".staging").exists() or not os.listdir(out / ".staging"), "staged files left"
