"""What ``gyreflow run`` and ``gyreflow control`` tell a user is true for the run in front of them.

With the memory state backend nothing survives the process, so a stop does not advise ``--resume``
(which could not continue) but ``--fresh`` or a persistent backend; a ``--resume`` after it says the
same in one line. Two runs writing one output folder are refused whatever the backend (exit 4, one
``error:`` line naming the holder), and the first run's output is whole. ``control list`` with no job
says so and where it looked; resuming a finished job prints one line, "nothing to do". Real
processes with their output piped, as a log sees them.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _recovery_data import word_count_oracle
from test_job_lock import LINES, REFUSE_SECONDS, command, published, read_output

pytestmark = pytest.mark.processes

MEMORY_ADVICE = ("the memory state backend keeps nothing once the process ends: run again with "
                 "--fresh to start over, or choose a persistent backend (state.backend = "
                 '"rocksdb" or "jdbc") to be able to resume')


def environ(tmp_path: Path, backend: str = "memory") -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    env.update({"COLUMNS": "400", "GYREFLOW_ENVIRONMENT__TYPE": "local",
                "GYREFLOW_ENVIRONMENT__WORKERS": "1", "GYREFLOW_STATE__BACKEND": backend,
                "GYREFLOW_STATE__PATH": str(tmp_path / "state"),
                "GYREFLOW_CONTROL__DIRECTORY": str(tmp_path / "control")})
    return env


def started(job: subprocess.Popen, out: Path, windows: int = 2) -> None:
    deadline = time.monotonic() + 120
    while len(published(out)) < windows:
        assert job.poll() is None, f"the job ended early:\n{job.communicate()[1]}"
        assert time.monotonic() < deadline, "the job published nothing"
        time.sleep(0.02)


def stopped_with_memory_advice(args: list[str], env: dict, out: Path) -> None:
    """Run ``args``, Ctrl-C it once it published two windows: it exits 130 with one line, the
    stop and the memory backend's advice."""
    job = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, start_new_session=True)
    try:
        started(job, out)
        os.killpg(job.pid, signal.SIGINT)
        stdout, stderr = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            job.kill()
            job.communicate()
    assert job.returncode == 130, stderr
    lines = (stdout + stderr).strip().splitlines()
    assert len(lines) == 1, stdout + stderr
    assert re.fullmatch(rf"stopped after window \d+; {re.escape(MEMORY_ADVICE)}", lines[0]), lines


def test_a_stop_with_the_memory_backend_advises_what_is_true_and_resume_says_the_same(tmp_path):
    out = tmp_path / "out"
    env = environ(tmp_path)
    stopped_with_memory_advice(command(tmp_path, out, 0.05), env, out)

    again = subprocess.run(command(tmp_path, out, 0.0, "--resume"), env=env, capture_output=True,
                           text=True, timeout=120, check=False)
    assert again.returncode == 3, again.stderr
    shown = again.stderr.strip().splitlines()
    assert len(shown) == 1 and shown[0].startswith("error: cannot resume job 'locked/count': the "
                                                   "memory state backend keeps nothing"), shown
    assert "--from-window" not in again.stderr and "Traceback" not in again.stderr

    fresh = subprocess.run(command(tmp_path, out, 0.0, "--fresh"), env=env, capture_output=True,
                           text=True, timeout=120, check=False)
    assert fresh.returncode == 0, fresh.stderr
    assert read_output(out) == word_count_oracle(LINES, 5)


def test_a_user_function_failure_with_the_memory_backend_does_not_advise_resume(tmp_path):
    script = tmp_path / "fails.py"
    script.write_text(
        "from gyreflow.api import Environment, PrintSink, SizeTumblingWindow\n"
        "pipeline = Environment.from_config().pipeline('fails')\n"
        "@pipeline.task(name='t')\n"
        "def t(ctx):\n"
        "    ctx.source(list(range(20)), SizeTumblingWindow(5)).map(lambda x: 1 // (x - 12))"
        ".sink(PrintSink())\n"
        "pipeline.execute()\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "gyreflow", "run", "--quiet", str(script)],
                          env=environ(tmp_path), capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 1, done.stderr
    assert "--resume" not in done.stderr, done.stderr
    assert done.stderr.splitlines()[1] == MEMORY_ADVICE[0].upper() + MEMORY_ADVICE[1:] + "."


@pytest.mark.parametrize("backend", ["memory", "rocksdb"])
def test_two_runs_into_one_output_folder_are_refused_whatever_the_backend(tmp_path, backend):
    out = tmp_path / "out"
    first_env = environ(tmp_path / "first", backend)
    first = subprocess.Popen(command(tmp_path, out, 0.05), env=first_env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        started(first, out)
        asked = time.monotonic()
        # Another state location: only the output folder is shared.
        second = subprocess.run(command(tmp_path, out, 0.0), env=environ(tmp_path / "second",
                                                                         backend),
                                capture_output=True, text=True, timeout=120, check=False)
        took = time.monotonic() - asked
        stdout, stderr = first.communicate(timeout=180)
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    assert second.returncode == 4, second.stderr
    assert took < REFUSE_SECONDS
    shown = second.stderr.strip().splitlines()
    assert len(shown) == 1, second.stderr
    assert re.fullmatch(rf"error: job 'locked/count' is being run by pid {first.pid} on host \S+ "
                        rf"since \S+ \(output {re.escape(str(out))}\); wait for it to end or stop "
                        "it, then run again", shown[0]), shown[0]
    assert first.returncode == 0, stderr
    assert read_output(out) == word_count_oracle(LINES, 5)


def test_control_list_without_a_job_says_so_and_where_it_looked(tmp_path):
    env = environ(tmp_path)
    done = subprocess.run([sys.executable, "-m", "gyreflow", "control", "list"], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"no running jobs (control files in {tmp_path / 'control'})\n"
    assert done.stderr == ""


def test_resuming_a_finished_job_says_nothing_to_do(tmp_path):
    out = tmp_path / "out"
    env = environ(tmp_path, "rocksdb")
    first = subprocess.run(command(tmp_path, out, 0.0), env=env, capture_output=True, text=True,
                           timeout=120, check=False)
    assert first.returncode == 0, first.stderr
    again = command(tmp_path, out, 0.0, "--resume")
    again.remove("--quiet")
    done = subprocess.run(again, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert lines[0] == "nothing to do: locked/count finished at window 12", lines
    assert not any("windows" in line or "records/s" in line for line in lines), lines
    assert read_output(out) == word_count_oracle(LINES, 5)
