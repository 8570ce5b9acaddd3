"""Control messages to a running job (``gyreflow control``), on the local and the Spark environment.

Every job is ``examples/quiet_words.py`` run by ``gyreflow run`` in a process of its own (paced, so
that commands land mid-run), steered by ``gyreflow control`` in other processes. A command takes
effect at one window boundary W on every task, and the output must equal a plain-Python loop that
switches the setting at W. On the local environment it must also equal the same job stopped after
window W-1 (a run that kept its snapshot of window W-1) resumed from there with the new setting:
that equivalence is the job driver's, the same code whichever host runs the tasks.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from test_notifications import QUIET, QUIET_WORDS, WINDOW, make_lines, read_alerts, windows_of
from test_recovery import write_lines

from gyreflow.api import ProcessFunction, SizeTumblingWindow

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


@pytest.fixture(scope="module")
def words(tmp_path_factory) -> tuple[Path, list[str]]:
    lines = make_lines(LINES, seed=5)
    return write_lines(tmp_path_factory.mktemp("control") / "words.txt", lines), lines


def environ(tmp_path: Path, environment: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    env.update({"COLUMNS": "400", "GYREFLOW_ENVIRONMENT__TYPE": environment,
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
                 flags: tuple[str, ...] = (), **extra: str) -> None:
        self.env = environ(tmp_path, environment, **extra)
        self.log = tmp_path / f"job-{time.monotonic_ns()}.log"
        with open(self.log, "w", encoding="utf-8") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "gyreflow", "run", "--quiet", *flags, str(QUIET_WORDS),
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

    def published(self) -> int:
        if not self.out.exists():
            return 0
        return sum(1 for p in self.out.iterdir() if not p.name.startswith("."))

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


@pytest.fixture
def workdir(tmp_path) -> Path:
    (tmp_path / "stopped").mkdir()
    return tmp_path


@pytest.mark.parametrize("environment", ["local", "spark"])
def test_a_parameter_set_mid_run_equals_stop_and_resume_with_it(words, workdir, environment):
    path, lines = words
    out = workdir / "out"
    job = Job(workdir, environment, job_args(path, out, pace=0.004 if environment == "local"
                                             else 0.001))
    job.wait_published(4)
    answer = job.answer("set", "quiet", "quiet", "5")
    boundary = answer["window"]
    assert job.wait() == 0, job.output()
    assert 4 < boundary < WINDOWS - 5, f"the command landed at window {boundary}: pace the job"
    expected = quiet_oracle(lines, lambda w: 5 if w >= boundary else QUIET)
    assert expected != quiet_oracle(lines, lambda w: QUIET)  # the change shows in the output
    assert read_alerts(out) == expected
    if environment == "spark":
        return  # the stop-and-resume equivalence is the driver's, the same code on both hosts
    again = stopped_after_then_resumed(
        workdir, environment, path, boundary, job_args(path, out),
        GYREFLOW_CONTROL__PARAMETERS=json.dumps({"quiet.quiet": 5}))
    assert read_alerts(again) == expected


@pytest.mark.parametrize("environment", ["local", "spark"])
def test_a_rescale_mid_run_equals_stop_and_resume_with_the_new_parallelism(words, workdir,
                                                                            environment):
    path, lines = words
    out = workdir / "out"
    job = Job(workdir, environment, job_args(path, out, parallelism=1,
                                             pace=0.004 if environment == "local" else 0.001))
    job.wait_published(4)
    answer = job.answer("rescale", "quiet", "3")
    boundary = answer["window"]
    assert "from window" in answer["message"]
    sample = job.answer("sample")
    assert job.wait() == 0, job.output()
    assert sorted(t["index"] for t in sample["tasks"] if t["task"] == "quiet") == [0, 1, 2]
    assert boundary < WINDOWS - 3, boundary
    expected = quiet_oracle(lines, lambda w: QUIET)
    assert read_alerts(out) == expected
    if environment == "spark":
        return  # as above: on Spark the plain loop is the oracle
    again = stopped_after_then_resumed(workdir, environment, path, boundary,
                                       job_args(path, out, parallelism=3))
    assert read_alerts(again) == expected


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
    missing = job.control("status", "--job", "no-such-job")
    assert missing.returncode == 2 and "no running job" in missing.stderr
    details = json.loads(record.read_text(encoding="utf-8"))
    with socket.create_connection(("127.0.0.1", details["port"]), timeout=10) as conn:
        conn.sendall(b'{"command": "pause", "token": "guess"}\n')
        assert json.loads(conn.makefile().readline()) == {"ok": False, "error": "wrong token"}
    assert job.answer("status")["state"] == "running"
    for done in (unknown, source, zero, missing):
        assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert job.wait() == 0, job.output()
    assert not record.exists()  # removed when the job ends


class Limit(ProcessFunction):
    def process(self, record, ctx):
        if record >= ctx.parameter("limit", 100):
            ctx.emit(record)


def test_functions_read_their_operator_parameters_from_config(make_env):
    numbers = list(range(20))
    env = make_env(2, **{"control.parameters": {"scale.factor": 3, "limit.limit": 30}})
    pipeline = env.pipeline("parameters")

    @pipeline.task
    def scaled(ctx):
        (ctx.source(numbers, SizeTumblingWindow(5)).with_parallelism(1)
         .map_with_context(lambda r, c: r * c.parameter("factor", 1)).with_name("scale")
         .key_by().process(Limit()).with_name("limit").collect())

    got = sorted(pipeline.execute()["scaled"].output("collect"))
    assert got == [n * 3 for n in numbers if n * 3 >= 30]
