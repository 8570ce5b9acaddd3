"""``gyreflow control`` takes negative numbers as arguments: ``rescale quiet -1`` reaches the job and
gets the range error that 0 and 129 get, ``set OPERATOR NAME -0.5`` sends -0.5; other unknown
options are still refused as click refuses them."""

from __future__ import annotations

import subprocess
import sys

import pytest
from _cli_runs import clean_environ
from _control_jobs import LINES, Job, job_args
from _recovery_data import write_lines
from test_notifications import make_lines

pytestmark = pytest.mark.processes

MAX_PARALLELISM = 128  # state.max_parallelism's default: the job's range is 1..128


def control(tmp_path, *args: str) -> subprocess.CompletedProcess:
    """``gyreflow control`` with a control directory in which no job runs."""
    env = clean_environ()
    env["GYREFLOW_CONTROL__DIRECTORY"] = str(tmp_path / "control")
    return subprocess.run([sys.executable, "-m", "gyreflow", "control", *args], env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def range_error(count: int) -> str:
    return (f"parallelism must be an integer from 1 to state.max_parallelism ({MAX_PARALLELISM}), "
            f"got {count}")


def test_a_negative_count_gets_the_range_error_zero_gets(tmp_path):
    path = write_lines(tmp_path / "words.txt", make_lines(LINES, seed=5))
    job = Job(tmp_path, "local", job_args(path, tmp_path / "out", pace=0.004))
    try:
        job.wait_published(2)
        job.ask({"command": "pause"})  # the job waits for the commands below
        pid = str(job.process.pid)
        answers = {count: job.control("rescale", "quiet", str(count), "--job", pid)
                   for count in (0, -1, -7, MAX_PARALLELISM + 1)}
        job.ask({"command": "resume"})
        assert job.wait() == 0, job.output()
    finally:
        if job.process.poll() is None:
            job.process.kill()
    for count, done in answers.items():
        assert done.returncode == 1, (count, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert done.stderr.strip().endswith(range_error(count)), (count, done.stderr)
        assert "no such option" not in done.stderr and "Traceback" not in done.stderr
    assert answers[-1].stderr.replace("got -1", "got 0") == answers[0].stderr


@pytest.mark.parametrize("args", [("rescale", "quiet", "-1"), ("rescale", "-1"),
                                  ("rescale", "quiet", "-1", "--job", "x"),
                                  ("set", "quiet", "threshold", "-0.5")],
                         ids=["operator", "workers", "before-an-option", "set-a-value"])
def test_a_negative_number_is_an_argument_not_an_option(tmp_path, args):
    done = control(tmp_path, *args)

    assert done.returncode == 2, done.stderr  # as with 0: the command went on to find the job
    assert "no running job" in done.stderr, done.stderr
    assert "no such option" not in done.stderr


def test_an_unknown_option_is_still_refused_with_a_suggestion(tmp_path):
    done = control(tmp_path, "rescale", "quiet", "-1", "--jbo", "x")

    assert done.returncode == 2
    assert done.stderr.splitlines()[0] == "error: no such option '--jbo'. Did you mean '--job'?"
    dashed = control(tmp_path, "rescale", "quiet", "-x")
    assert dashed.returncode == 2 and dashed.stderr.startswith("error: no such option '-x'")
