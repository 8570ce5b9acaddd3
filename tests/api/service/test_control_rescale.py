"""Rescaling a running job with ``gyreflow control``: an operator's tasks, and its worker processes."""

from __future__ import annotations

import time
from collections import Counter

import pytest
from _control_jobs import TIMEOUT, WINDOWS, Job, job_args, quiet_oracle, stopped_after_then_resumed
from _processes import forks
from test_notifications import QUIET, read_alerts

pytestmark = pytest.mark.processes


RESCALES = [  # (environment, state backend, windows per snapshot); Spark keeps memory state in a
    # scratch directory of the run
    ("local", "rocksdb", 1), ("local", "memory", 3), ("local", "jdbc", 1), ("spark", "memory", 1),
    ("spark", "rocksdb", 1)]


@pytest.mark.parametrize(("environment", "backend", "every"), RESCALES)
def test_a_rescale_up_then_down_mid_run_continues_from_the_state_the_run_holds(
        words, workdir, environment, backend, every):
    path, lines = words
    out = workdir / "out"
    scratch = workdir / "tmp"
    scratch.mkdir()
    job = Job(workdir, environment, job_args(path, out, parallelism=1, pace=0.01),
              GYREFLOW_STATE__BACKEND=backend, GYREFLOW_STATE__SNAPSHOT_EVERY=str(every),
              TMPDIR=str(scratch))
    job.wait_published(4)
    answer = job.answer("rescale", "quiet", "3")  # while windows run
    up = answer["window"]
    assert "from window" in answer["message"]
    sample = job.answer("sample")
    assert sorted(t["index"] for t in sample["tasks"] if t["task"] == "quiet") == [0, 1, 2]
    job.wait_windows(sample["window"])
    job.ask({"command": "pause"})  # and while paused (the job waits for the command line)
    down = job.answer("rescale", "quiet", "1")["window"]
    assert settled_status(job)["state"] == "paused"  # the restarted tasks keep the pause
    job.ask({"command": "resume"})
    assert job.wait() == 0, job.output()
    assert 4 < up < down < WINDOWS, (up, down)
    # Each restart goes on after a snapshotted window: none is computed twice (read_alerts
    # refuses output left staged by tasks that were rolled back).
    assert (up - 1) % every == 0 and (down - 1) % every == 0, (up, down)
    expected = quiet_oracle(lines, lambda w: QUIET)
    assert read_alerts(out) == expected
    # The sink runs chained to the rescaled operator: one file per task and window.
    parts = Counter(int(p.name.split("-")[1].split(".")[0]) for p in out.iterdir())
    assert parts == {w: 3 if up <= w < down else 1 for w in range(1, WINDOWS + 1)}
    assert not list(scratch.glob("gyreflow-spark-state-*"))  # removed when the job ended
    if (environment, backend) != ("local", "rocksdb"):
        return  # the stop-and-resume equivalence is the driver's, the same code on every host
    again = stopped_after_then_resumed(workdir, environment, path, up,
                                       job_args(path, out, parallelism=3))
    assert read_alerts(again) == expected


def worker_processes(pid: int) -> int:
    """How many worker processes of the forked worker host run under the job ``pid``."""
    return len(forks(pid))


def settled_status(job: Job) -> dict:
    """``status`` once the tasks a rescale rebuilds run again (it answers "restarting" before)."""
    deadline = time.monotonic() + TIMEOUT
    while (status := job.answer("status"))["state"] == "restarting":
        assert time.monotonic() < deadline, "the tasks did not start again"
        time.sleep(0.05)
    return status


@pytest.mark.parametrize("environment", ["workers", "spark"])
def test_the_workers_rescale_mid_run_and_the_output_stays_exact(words, workdir, environment):
    """``gyreflow control rescale N``: the job's tasks move to N worker processes at a window
    boundary (each task restores its key groups in the worker that takes it); the alerts equal
    the oracle's and the job ends by itself."""
    path, lines = words
    out = workdir / "out"
    extra = {"GYREFLOW_ENVIRONMENT__WORKERS": "2"} if environment == "workers" else {}
    job = Job(workdir, "local" if environment == "workers" else "spark",
              job_args(path, out, parallelism=3, pace=0.01), **extra)
    job.wait_published(4)
    assert job.answer("status")["workers"] == 2
    first = 3 if environment == "workers" else 1  # local[2] has two task slots
    answer = job.answer("rescale", str(first))
    assert answer["message"].startswith(f"the job's tasks run in {first} worker process")
    up = answer["window"]
    status = settled_status(job)
    assert status["workers"] == first, status
    if environment == "workers":
        assert worker_processes(job.process.pid) == first
        too_many = job.control("rescale", "999", "--job", str(job.process.pid))
        assert too_many.returncode == 1 and "from 1 to 256" in too_many.stderr
    down = job.answer("rescale", "2")["window"]
    assert settled_status(job)["workers"] == 2
    assert job.wait() == 0, job.output()
    assert 4 < up < down <= WINDOWS, (up, down)
    assert read_alerts(out) == quiet_oracle(lines, lambda w: QUIET)


@pytest.mark.parametrize("what", ["operator", "workers"])
def test_the_run_summary_names_the_layout_a_rescale_left(words, workdir, what):
    """The summary at the end names the tasks and processes the run ended with, not the ones it
    started with, and says that a rescale changed them."""
    path, lines = words
    out = workdir / "out"
    extra = {"GYREFLOW_ENVIRONMENT__WORKERS": "2"} if what == "workers" else {}
    job = Job(workdir, "local", job_args(path, out, parallelism=1, pace=0.01), summary=True,
              GYREFLOW_PROGRESS__ENABLED="false", **extra)
    job.wait_published(4)
    if what == "operator":
        job.answer("rescale", "quiet", "3")
    else:
        job.answer("rescale", "3")
    assert job.wait() == 0, job.output()
    assert read_alerts(out) == quiet_oracle(lines, lambda w: QUIET)
    summary = [line for line in job.output().splitlines() if "ran on local" in line
               or line.startswith("  ")]
    if what == "operator":
        assert summary[0].endswith("ran on local, in this process, parallelism 1"), summary
        assert "  with 3 tasks: quiet, alerts" in summary, summary  # the sink chained to it
    else:
        assert summary[0].endswith("ran on local, in 3 worker processes, parallelism 2"), summary
    assert "  (rescaled once while it ran)" in summary, summary
