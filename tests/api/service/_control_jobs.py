"""``examples/quiet_words.py`` run by ``gyreflow run`` and steered by ``gyreflow control``, and its oracle."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from test_notifications import QUIET, QUIET_WORDS, WINDOW, windows_of

# Every job is ``examples/quiet_words.py`` run by ``gyreflow run`` in a process of its own (paced, so
# that commands land mid-run), steered by ``gyreflow control`` in other processes. A command takes
# effect at one window boundary W on every task, and the output must equal a plain-Python loop that
# switches the setting at W. On the local environment it must also equal the same job stopped after
# window W-1 (a run that kept its snapshot of window W-1) resumed from there with the new setting:
# that equivalence is the job driver's, the same code whichever host runs the tasks.

LINES = 900
WINDOWS = LINES // WINDOW
TIMEOUT = 240


def quiet_oracle(lines: list[str], quiet_at) -> dict[int, list[dict]]:
    """Alerts when a word seen in window s (due at s + quiet_at(s)) is not seen again by then."""
    state: dict[str, tuple[int, int, int]] = {}
    alerts: dict[int, list[dict]] = {}
    for window, chunk in enumerate(windows_of(lines, WINDOW), start=1):
        for line in chunk:
            for word in line.split():
                count = state.get(word, (0, 0, 0))[1] + 1
                state[word] = (window, count, window + quiet_at(window))
        due = [{"word": w, "count": c, "last_seen": s, "quiet_at": window}
               for w, (s, c, d) in state.items() if d == window]
        if due:
            alerts[window] = sorted(due, key=lambda r: r["word"])
    return alerts


def environ(tmp_path: Path, environment: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    env.update({"COLUMNS": "400", "GYREFLOW_ENVIRONMENT__TYPE": environment,
                "GYREFLOW_ENVIRONMENT__WORKERS": "1",  # local: in this process unless extra says
                "GYREFLOW_SPARK__MASTER": "local[2]",
                "GYREFLOW_SPARK__CONF": json.dumps({"spark.ui.enabled": "false"}),
                "GYREFLOW_CONTROL__DIRECTORY": str(tmp_path / "control"),
                "GYREFLOW_STATE__BACKEND": "rocksdb",
                "GYREFLOW_STATE__PATH": str(tmp_path / "state")})
    env.update(extra)
    return env


def job_args(path: Path, out: Path, parallelism: int = 1, pace: float = 0.0) -> list[str]:
    return ["--input", str(path), "--window", str(WINDOW), "--quiet", str(QUIET), "--output",
            str(out), "--parallelism", str(parallelism), "--pace", str(pace)]


class Job:
    """``gyreflow run`` of the example in the background."""

    def __init__(self, tmp_path: Path, environment: str, args: list[str],
                 flags: tuple[str, ...] = (), *, summary: bool = False, **extra: str) -> None:
        self.env = environ(tmp_path, environment, **extra)
        self.log = tmp_path / f"job-{time.monotonic_ns()}.log"
        quiet = () if summary else ("--quiet",)  # a summary: progress off, as in a log
        with open(self.log, "w", encoding="utf-8") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "gyreflow", "run", *quiet, *flags, str(QUIET_WORDS),
                 "--", *args], env=self.env, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL)
        self.out = Path(args[args.index("--output") + 1])

    def control(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "gyreflow", "control", *args],
                              env=self.env, capture_output=True, text=True, timeout=120,
                              check=False)

    def answer(self, *args: str) -> dict:
        done = self.control(*args, "--json", "--job", str(self.process.pid))
        assert done.returncode == 0, done.stderr + self.output()
        return json.loads(done.stdout)

    def ask(self, command: dict) -> dict:
        """``command``'s answer, sent from this process (no interpreter to start)."""
        from gyreflow.api.service.control import find_job, send

        answer = send(find_job(self.env["GYREFLOW_CONTROL__DIRECTORY"], str(self.process.pid)),
                      command)
        assert answer["ok"], answer
        return answer

    def published(self) -> int:
        if not self.out.exists():
            return 0
        return sum(1 for p in self.out.iterdir() if not p.name.startswith("."))

    def windows_published(self) -> int:
        """The highest window with a file in the output directory."""
        if not self.out.exists():
            return 0
        return max((int(p.name.split("-")[1].split(".")[0]) for p in self.out.iterdir()
                    if p.name.startswith("window-")), default=0)

    def wait_windows(self, window: int) -> None:
        deadline = time.monotonic() + TIMEOUT
        while self.windows_published() < window:
            assert self.process.poll() is None, f"the job ended early:\n{self.output()}"
            assert time.monotonic() < deadline, "no progress"
            time.sleep(0.02)

    def wait_published(self, count: int) -> None:
        deadline = time.monotonic() + TIMEOUT
        while self.published() < count:
            assert self.process.poll() is None, f"the job ended early:\n{self.output()}"
            assert time.monotonic() < deadline, "no progress"
            time.sleep(0.02)
        directory = Path(self.env["GYREFLOW_CONTROL__DIRECTORY"])
        while not any(directory.glob(f"{self.process.pid}-*.json")):
            assert time.monotonic() < deadline, "no control file"
            time.sleep(0.02)

    def wait(self) -> int:
        try:
            return self.process.wait(timeout=TIMEOUT)
        finally:
            if self.process.poll() is None:
                self.process.kill()

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")[-3000:]


def run_to_end(tmp_path: Path, environment: str, args: list[str], flags=(), **extra) -> None:
    job = Job(tmp_path, environment, args, flags, **extra)
    assert job.wait() == 0, job.output()


def stopped_after_then_resumed(tmp_path: Path, environment: str, path: Path, boundary: int,
                               resumed_args: list[str], **resumed_env: str) -> Path:
    """The job with its state as it stood after window ``boundary - 1`` (a retained snapshot of an
    uninterrupted run), resumed from there with the new setting; returns its output directory."""
    out = tmp_path / "stopped" / "out"
    keep = {"GYREFLOW_STATE__RETAINED_SNAPSHOTS": str(WINDOWS + 5)}
    run_to_end(tmp_path / "stopped", environment, job_args(path, out), **keep)
    resumed = [*resumed_args[:resumed_args.index("--output") + 1], str(out),
               *resumed_args[resumed_args.index("--output") + 2:]]
    run_to_end(tmp_path / "stopped", environment, resumed,
               ("--resume", "--from-window", str(boundary - 1)), **keep, **resumed_env)
    return out
