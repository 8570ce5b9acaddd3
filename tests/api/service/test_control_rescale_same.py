"""``gyreflow control rescale OPERATOR N`` with the N tasks the operator already has: answered at
once, and nothing restarts (a restart would compute the windows since the last snapshot again)."""

from __future__ import annotations

import pytest
from _control_jobs import Job, job_args, quiet_oracle
from test_notifications import QUIET, read_alerts

pytestmark = pytest.mark.processes


def test_a_rescale_to_the_tasks_an_operator_has_changes_nothing(words, workdir):
    path, lines = words
    out = workdir / "out"
    job = Job(workdir, "local", job_args(path, out, parallelism=2, pace=0.01),
              GYREFLOW_STATE__BACKEND="rocksdb")
    job.wait_published(3)
    answer = job.answer("rescale", "quiet", "2")
    assert answer["message"] == "quiet already runs with 2 tasks; nothing changes"
    assert "window" not in answer  # no boundary to restart at
    assert job.answer("status")["state"] == "running"
    assert job.wait() == 0, job.output()
    assert read_alerts(out) == quiet_oracle(lines, lambda w: QUIET)
