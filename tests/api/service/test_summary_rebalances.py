"""The run summary of ``gyreflow run`` counts rescales and rebalances apart, as the monitor does."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _control_jobs import TIMEOUT, environ, job_args, quiet_oracle
from _recovery_data import write_lines
from test_notifications import QUIET, QUIET_WORDS

pytestmark = pytest.mark.processes

LINES = 1000


def hot_lines() -> list[str]:
    """Lines where one word carries half the records: its key group makes its task the busiest,
    and moving the other key groups away evens the tasks out (a rebalance moves key groups)."""
    rng = random.Random(11)
    rare = [f"w{i}" for i in range(80)]
    return [" ".join(["hot"] * 3 + rng.choices(rare, k=3)) for _ in range(LINES)]


class SummaryJob:
    """``gyreflow run`` of ``examples/quiet_words.py`` with its stdout and stderr piped."""

    def __init__(self, tmp_path: Path, args: list[str]) -> None:
        self.env = environ(tmp_path, "local", GYREFLOW_PROGRESS__ENABLED="false")
        self.out = Path(args[args.index("--output") + 1])
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gyreflow", "run", str(QUIET_WORDS), "--", *args],
            env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            stdin=subprocess.DEVNULL)

    def answer(self, *args: str) -> dict:
        done = subprocess.run([sys.executable, "-m", "gyreflow", "control", *args, "--json", "--job",
                               str(self.process.pid)], env=self.env, capture_output=True, text=True,
                              timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def wait_window(self, window: int) -> None:
        """Until window ``window``'s output is published and the control endpoint is open."""
        deadline = time.monotonic() + TIMEOUT
        control = Path(self.env["GYREFLOW_CONTROL__DIRECTORY"])
        while not (self.out.exists() and any(int(p.name.split("-")[1].split(".")[0]) >= window
                                             for p in self.out.glob("window-*"))
                   and any(control.glob(f"{self.process.pid}-*.json"))):
            assert self.process.poll() is None, "the job ended early"
            assert time.monotonic() < deadline, "no progress"
            time.sleep(0.02)

    def finish(self) -> tuple[int, str, str]:
        try:
            stdout, stderr = self.process.communicate(timeout=TIMEOUT)
        finally:
            if self.process.poll() is None:
                self.process.kill()
        return self.process.returncode, stdout, stderr


def read_alerts(out: Path) -> dict[int, list[dict]]:
    alerts: dict[int, list[dict]] = {}
    for part in sorted(out.glob("window-*")):
        window = int(part.name.split("-")[1].split(".")[0])
        rows = [json.loads(line) for line in part.read_text(encoding="utf-8").splitlines() if line]
        if rows:
            alerts.setdefault(window, []).extend(rows)
    return {w: sorted(rows, key=lambda r: r["word"]) for w, rows in alerts.items()}


@pytest.mark.parametrize(("start", "rescale_to", "expected"), [
    (1, 3, "(rescaled once and rebalanced once while it ran)"),
    (2, None, "(rebalanced once while it ran)"),
])
def test_the_summary_counts_a_rebalance_apart_from_the_rescales(tmp_path, start, rescale_to, expected):
    """``control rescale`` then ``control rebalance`` (which moves key groups): the summary says
    each happened once, and a run that was only rebalanced does not say it was rescaled."""
    lines = hot_lines()
    path = write_lines(tmp_path / "words.txt", lines)
    out = tmp_path / "out"
    job = SummaryJob(tmp_path, job_args(path, out, parallelism=start, pace=0.01))
    job.wait_window(3)
    if rescale_to is not None:
        answer = job.answer("rescale", "quiet", str(rescale_to))
        assert "from window" in answer["message"], answer
        job.wait_window(answer["window"] + 3)  # loads measured by the rebuilt tasks
    answer = job.answer("rebalance", "quiet")
    assert answer["message"].startswith("key groups move from window"), answer
    code, _, stderr = job.finish()
    assert code == 0, stderr
    summary = [line for line in stderr.splitlines() if line.startswith("  ")]  # the run summary
    assert f"  {expected}" in summary, stderr
    assert not any("rescaled 2 times" in line for line in summary), stderr
    assert read_alerts(out) == quiet_oracle(lines, lambda w: QUIET)
