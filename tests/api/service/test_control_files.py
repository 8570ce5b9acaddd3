"""``gyreflow control`` finds running jobs by their control files: a file whose pid now belongs to a
process started after the job wrote it (the pid was reused) names no running job and is removed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from gyreflow.api.service.control import _CONTROL_FIELDS, running_jobs

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs /proc")


@pytest.fixture
def live_process():
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield process.pid
    process.kill()
    process.wait()


def write_control_file(directory, pid: int, started: float):
    record = dict.fromkeys(_CONTROL_FIELDS, "x")
    record.update(pid=pid, started=started, port=1, token="t", job="word-count")
    path = directory / f"{pid}-word-count.json"
    path.write_text(json.dumps(record), encoding="utf-8")
    return path


def test_a_control_file_of_the_process_that_wrote_it_names_a_running_job(tmp_path, live_process):
    path = write_control_file(tmp_path, live_process, time.time())
    assert [job["file"] for job in running_jobs(str(tmp_path))] == [str(path)]


def test_a_pid_reused_by_a_younger_process_names_no_job_and_its_file_goes(tmp_path, live_process):
    path = write_control_file(tmp_path, live_process, time.time() - 3600)  # written an hour ago
    assert running_jobs(str(tmp_path)) == []
    assert not path.exists()
