"""``gyreflow control`` sample, pause and resume on a running job, and the commands it refuses."""

from __future__ import annotations

import json
import socket
import stat
import time
from collections import Counter
from pathlib import Path

import pytest
from _control_jobs import Job, job_args, quiet_oracle
from test_notifications import QUIET, WINDOW, read_alerts

pytestmark = pytest.mark.processes


def test_a_sample_counts_what_every_task_did_before_its_window(words, workdir):
    path, lines = words
    job = Job(workdir, "local", job_args(path, workdir / "out", parallelism=2, pace=0.004))
    job.wait_published(3)
    sample = job.answer("sample")
    assert job.wait() == 0, job.output()
    before = lines[:(sample["window"] - 1) * WINDOW]
    tasks = sample["tasks"]
    source = [t for t in tasks if t["task"] == "lines"]
    quiet = [t for t in tasks if t["task"] == "quiet"]
    assert len(source) == 1 and len(quiet) == 2
    assert source[0]["records_in"] == len(before)
    assert source[0]["records_out"] == sum(len(line.split()) for line in before)
    assert sum(t["records_in"] for t in quiet) == sum(len(line.split()) for line in before)
    assert sum(t["state_keys"] for t in quiet) == len(Counter(w for x in before for w in x.split()))


def test_pause_holds_new_windows_and_resume_finishes_exactly(words, workdir):
    path, lines = words
    out = workdir / "out"
    job = Job(workdir, "local", job_args(path, out, pace=0.004))
    job.wait_published(3)
    job.answer("pause")
    deadline = time.monotonic() + 30
    while True:  # the windows in flight complete
        status = job.answer("status")
        if status["last_completed"] == status["launched"]:
            break
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert status["state"] == "paused"
    published = job.published()
    time.sleep(1.0)
    assert job.answer("status")["last_completed"] == status["last_completed"]
    assert job.published() == published
    assert job.process.poll() is None
    job.answer("resume")
    assert job.wait() == 0, job.output()
    assert read_alerts(out) == quiet_oracle(lines, lambda w: QUIET)


def test_commands_that_cannot_apply_are_refused_in_one_line(words, workdir):
    path, _ = words
    job = Job(workdir, "local", job_args(path, workdir / "out", pace=0.004))
    job.wait_published(2)
    job.ask({"command": "pause"})  # the job waits for the commands below, however slowly they start
    pid = str(job.process.pid)
    directory = Path(job.env["GYREFLOW_CONTROL__DIRECTORY"])
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    (record,) = directory.glob(f"{pid}-*.json")
    assert stat.S_IMODE(record.stat().st_mode) == 0o600
    unknown = job.control("set", "nope", "x", "1", "--job", pid)
    assert unknown.returncode == 1 and "no operator 'nope'" in unknown.stderr
    assert "quiet" in unknown.stderr  # the operators are listed
    source = job.control("rescale", "split", "2", "--job", pid)
    assert source.returncode == 1 and "source" in source.stderr
    zero = job.control("rescale", "quiet", "0", "--job", pid)
    assert zero.returncode == 1 and "parallelism must be" in zero.stderr
    in_process = job.control("rescale", "2", "--job", pid)  # no worker processes to rescale
    assert in_process.returncode == 1 and "do not run in worker processes" in in_process.stderr
    missing = job.control("status", "--job", "no-such-job")
    assert missing.returncode == 2 and "no running job" in missing.stderr
    details = json.loads(record.read_text(encoding="utf-8"))
    with socket.create_connection(("127.0.0.1", details["port"]), timeout=10) as conn:
        conn.sendall(b'{"command": "pause", "token": "guess"}\n')
        assert json.loads(conn.makefile().readline()) == {"ok": False, "error": "wrong token"}
    assert job.answer("status")["state"] == "paused"
    job.ask({"command": "resume"})
    assert job.answer("status")["state"] == "running"
    for done in (unknown, source, zero, in_process, missing):
        assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert job.wait() == 0, job.output()
    assert not record.exists()  # removed when the job ends
