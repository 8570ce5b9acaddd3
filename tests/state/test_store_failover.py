"""Failover when the state store is away for a while, and what a restarting job answers.

A PostgreSQL server that stops mid-run and starts again seconds later is a failure the restart
strategy (``[restart]``) takes on: the run starts again from its last completed window and finishes
with the plain-Python oracle's output, exit 0. A store that refuses the job or holds damaged state
still stops it. While a restart waits out its back-off, ``gyreflow control status`` answers at once
(``restarting``, the attempt, the seconds left); while the job runs it lists the worker pids. A
``mid-window`` crash point kills a worker once per run, not on every replay; a give-up after restarts
says how many there were. Real processes, real signals and a PostgreSQL server of the test's own
(the shared one is never stopped).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from _recovery_data import word_count_oracle
from test_job_lock import LINES, command, published, read_output

from gyreflow.runtime.errors import SnapshotWriteError
from gyreflow.runtime.workers.restart import RestartStrategy, store_away
from gyreflow.state.shared.snapshot import BackendUnavailableError, SnapshotCorruptedError

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class OwnPostgres:
    """A throwaway PostgreSQL server this test may stop and start (scripts/postgres.sh)."""

    def __init__(self) -> None:
        # Under /tmp itself: the server runs as the postgres user, who cannot enter pytest's folders.
        self.directory = Path(tempfile.mkdtemp(prefix="gyreflow-test-own-pg-"))
        self.port = _free_port()
        out = subprocess.run(["bash", str(ROOT / "scripts" / "postgres.sh"), "start",
                              str(self.directory), str(self.port)],
                             capture_output=True, text=True, check=False)
        if out.returncode != 0:
            pytest.fail(f"could not start PostgreSQL:\n{out.stderr}")
        self.url = out.stdout.strip().split("=", 1)[1]
        found = [p for p in sorted(Path("/usr/lib/postgresql").glob("*/bin")) if (p / "pg_ctl").exists()]
        self.bin = str(found[-1]) if found else os.path.dirname(shutil.which("pg_ctl") or "")

    def _ctl(self, *args: str) -> None:
        owner = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*owner, f"{self.bin}/pg_ctl", "-D", str(self.directory / "data"), *args],
                       capture_output=True, check=True)

    def stop(self) -> None:
        self._ctl("-m", "fast", "stop")

    def start(self) -> None:
        self._ctl("-l", str(self.directory / "server.log"), "-o",
                  f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1 -c fsync=off",
                  "-w", "start")

    def remove(self) -> None:
        subprocess.run(["bash", str(ROOT / "scripts" / "postgres.sh"), "stop", str(self.directory)],
                       capture_output=True, check=False)
        shutil.rmtree(self.directory, ignore_errors=True)


@pytest.fixture
def own_postgres():
    server = OwnPostgres()
    yield server
    server.remove()


def environ(tmp_path: Path, **settings: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    env.update({"COLUMNS": "400", "GYREFLOW_ENVIRONMENT__TYPE": "local",
                "GYREFLOW_STATE__BACKEND": "rocksdb", "GYREFLOW_STATE__PATH": str(tmp_path / "state"),
                "GYREFLOW_CONTROL__DIRECTORY": str(tmp_path / "control")})
    env.update({f"GYREFLOW_{key.upper()}": value for key, value in settings.items()})
    return env


def wait_for(condition, what: str, job: subprocess.Popen, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert job.poll() is None, f"the job ended before {what}:\n{job.communicate()[1]}"
        assert time.monotonic() < deadline, f"no {what} in {seconds} s"
        time.sleep(0.02)


@pytest.mark.processes
def test_a_postgresql_store_that_stops_and_starts_mid_run_is_restarted_and_output_is_exact(
        tmp_path, own_postgres):
    out = tmp_path / "out"
    env = environ(tmp_path, state__backend="jdbc", state__url=own_postgres.url,
                  state__secret="a-test-secret", restart__attempts="40", restart__delay="0.25",
                  restart__backoff="1", environment__workers="1")
    job = subprocess.Popen(command(tmp_path, out, 0.1), env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: len(published(out)) >= 3, "published window", job)
        own_postgres.stop()
        time.sleep(2.0)  # the job goes on computing, fails its snapshots, restarts, is refused
        own_postgres.start()
        stdout, stderr = job.communicate(timeout=180)
    finally:
        if job.poll() is None:
            job.kill()
            job.communicate()
    assert job.returncode == 0, stderr
    assert "Traceback" not in stdout + stderr
    assert read_output(out) == word_count_oracle(LINES, 5)


@pytest.mark.parametrize(("error", "restartable"), [
    (SnapshotWriteError("jdbc at postgresql://db", 4, 3, RuntimeError(
        "write failed in jdbc:postgresql://db: OperationalError: (psycopg.errors.AdminShutdown) "
        "terminating connection due to administrator command")), True),
    (BackendUnavailableError('jdbc backend (state.url): cannot connect to postgresql://db: '
                             'connection to server at "127.0.0.1", port 5 failed: Connection '
                             'refused'), True),
    (SnapshotWriteError("sqlite", 2, 1, RuntimeError("commit failed in jdbc:sqlite: "
                                                     "OperationalError: database is locked")), True),
    (TimeoutError("timed out"), True),
    (SnapshotWriteError("sqlite", 2, 1, RuntimeError("write failed in jdbc:sqlite: "
                                                     "OperationalError: database or disk is full")),
     True),
    (SnapshotWriteError("sqlite", 2, 1, RuntimeError("write failed in jdbc:sqlite: "
                                                     "OperationalError: no such table: "
                                                     "gyreflow_state")), False),
    (BackendUnavailableError('jdbc backend (state.url): cannot connect to postgresql://db: '
                             'FATAL: password authentication failed for user "app"'), False),
    (BackendUnavailableError("cannot connect to postgresql://db: FATAL: database \"x\" does not "
                             "exist"), False),
    (SnapshotWriteError("jdbc", 2, 1, RuntimeError("write failed in jdbc: ProgrammingError: "
                                                   "permission denied for table gyreflow_state")),
     False),
    (SnapshotCorruptedError("database jdbc:x is damaged and cannot be read (connection refused)"),
     False),
    (RuntimeError("connection refused"), False),  # not a store's error
])
def test_transient_store_failures_are_restarted_refusals_and_damage_are_not(error, restartable):
    assert store_away(error) is restartable
    strategy = RestartStrategy(3, 0.1, 1.0, 1.0, 60, clock=lambda: 0.0)
    assert (strategy.delay_for(error) is not None) is restartable


WORKER_JOB = """
import sys, time
from gyreflow.api import Environment, FileSink, SizeTumblingWindow

def slow(x):
    time.sleep(float(sys.argv[2]))
    return x

pipeline = Environment.from_config().pipeline("steady")

@pipeline.task(name="sum")
def total(ctx):
    (ctx.source(list(range(int(sys.argv[3]))), SizeTumblingWindow(10)).map(slow)
     .key_by(lambda x: x % 5).reduce(lambda a, b: a + b)
     .sink(FileSink(sys.argv[1], format=lambda w, r: f"{w} {r}")))

pipeline.execute()
"""


def sums_oracle(count: int) -> dict[int, list[int]]:
    totals: dict[int, int] = {}
    expected = {}
    for window, start in enumerate(range(0, count, 10), start=1):
        touched = set()
        for x in range(start, min(start + 10, count)):
            totals[x % 5] = totals.get(x % 5, 0) + x
            touched.add(x % 5)
        expected[window] = sorted(totals[k] for k in touched)
    return expected


def read_sums(out: Path) -> dict[int, list[int]]:
    found: dict[int, list[int]] = {}
    for name in published(out):
        for line in (out / name).read_text(encoding="utf-8").splitlines():
            window, value = line.split()
            found.setdefault(int(window), []).append(int(value))
    return {window: sorted(values) for window, values in found.items()}


def worker_job(tmp_path: Path, out: Path, pace: float, count: int, *flags: str) -> list[str]:
    script = tmp_path / "steady.py"
    script.write_text(WORKER_JOB, encoding="utf-8")
    return [sys.executable, "-m", "gyreflow", "run", "--quiet", *flags, str(script), "--",
            str(out), str(pace), str(count)]


def control(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gyreflow", "control", *args], env=env,
                          capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.processes
def test_status_answers_at_once_during_a_restart_back_off_and_lists_the_worker_pids(tmp_path):
    from _processes import forks

    out = tmp_path / "out"
    env = environ(tmp_path, environment__workers="2", restart__delay="4", restart__attempts="3")
    job = subprocess.Popen(worker_job(tmp_path, out, 0.02, 400), env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: len(published(out)) >= 2 and len(forks(job.pid)) == 2, "workers", job)
        running = control(env, "status")
        workers = forks(job.pid)
        assert running.returncode == 0, running.stderr
        line = running.stdout.splitlines()[0]
        shown = re.search(r", 2 worker processes \(pid (\d+), (\d+)\)$", line)
        assert shown is not None, line
        assert sorted(map(int, shown.groups())) == sorted(workers)

        os.kill(workers[0], signal.SIGKILL)
        wait_for(lambda: not forks(job.pid), "restart", job)
        asked = time.monotonic()
        waiting = control(env, "status")
        took = time.monotonic() - asked
        assert waiting.returncode == 0, waiting.stderr
        assert took < 4.0, f"status took {took:.1f} s during the back-off"
        restarting = re.match(r"^steady/sum: restarting \(attempt 1 of 3, in (\d+(\.\d)?) s\), "
                              r"last completed window (\d+)", waiting.stdout)
        assert restarting is not None, waiting.stdout
        assert 0 < float(restarting.group(1)) <= 4
        stdout, stderr = job.communicate(timeout=180)
    finally:
        if job.poll() is None:
            job.kill()
            job.communicate()
    assert job.returncode == 0, stderr
    assert read_sums(out) == sums_oracle(400)


@pytest.mark.processes
def test_a_mid_window_crash_point_kills_one_worker_once_per_run(tmp_path):
    out = tmp_path / "out"
    env = environ(tmp_path, environment__workers="2", restart__delay="0.1", restart__attempts="1")
    env["GYREFLOW_CRASH_AT"] = "mid-window:3"
    done = subprocess.run(worker_job(tmp_path, out, 0.0, 60), env=env, capture_output=True,
                          text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr
    assert read_sums(out) == sums_oracle(60)


@pytest.mark.processes
def test_a_give_up_after_restarts_of_a_user_function_says_how_many(tmp_path):
    script = tmp_path / "fails.py"
    script.write_text(
        "from gyreflow.api import Environment, PrintSink, SizeTumblingWindow\n"
        "pipeline = Environment.from_config().pipeline('fails')\n"
        "@pipeline.task(name='t')\n"
        "def t(ctx):\n"
        "    ctx.source(list(range(20)), SizeTumblingWindow(5)).map(lambda x: 1 // (x - 12))"
        ".sink(PrintSink())\n"
        "pipeline.execute()\n", encoding="utf-8")
    env = environ(tmp_path, restart__user_errors="true", restart__attempts="2",
                  restart__delay="0.05", environment__workers="1")
    done = subprocess.run([sys.executable, "-m", "gyreflow", "run", "--quiet", str(script)],
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr
    assert "ZeroDivisionError" in errors[0]
    assert errors[0].endswith("(the job stopped after 2 restarts; see restart.attempts)"), errors[0]


def test_a_failing_store_error_names_what_failed_and_the_windows_in_flight():
    cause = RuntimeError("write failed in jdbc:db: OperationalError: terminating connection due to "
                         "administrator command")
    message = str(SnapshotWriteError("jdbc at db", 14, 11, cause))
    assert message.startswith("the snapshot store failed while writing the snapshot of window 14 ")
    assert "The last completed window is 11 (windows 12 to 14 were in flight); " in message
    assert message.endswith("run with --resume to continue from window 12")
    pruning = str(SnapshotWriteError("jdbc at db", 14, 11, RuntimeError(
        "prune failed in jdbc:db: OperationalError: server closed the connection unexpectedly")))
    assert pruning.startswith("the snapshot store failed while removing snapshots older than the "
                              "retained ones (jdbc at db): prune failed")
    assert "window 14" not in pruning and "The last completed window is 11; " in pruning
