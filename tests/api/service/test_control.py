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
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from _processes import forks
from test_notifications import (
    QUIET,
    QUIET_WORDS,
    WINDOW,
    example,
    make_lines,
    read_alerts,
    windows_of,
)
from test_recovery import write_lines

from gyreflow.api import JobListener, ProcessFunction, SizeTumblingWindow

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


@pytest.fixture
def workdir(tmp_path) -> Path:
    (tmp_path / "stopped").mkdir()
    return tmp_path


@pytest.mark.parametrize("environment", ["local", "spark"])
def test_a_parameter_set_mid_run_equals_stop_and_resume_with_it(words, workdir, environment):
    path, lines = words
    out = workdir / "out"
    job = Job(workdir, environment, job_args(path, out, pace=0.004))
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


def test_commands_during_a_restart_are_answered_and_the_run_keeps_its_job_lock(words, tmp_path,
                                                                                monkeypatch):
    """A rescale tears the job's tasks down and builds them again; while it does, a command is
    answered (status at once, the others once the new tasks run), a sample that was waiting for a
    window carries over, and the run keeps the job: a second run is refused, as at any time."""
    from gyreflow.api import Environment
    from gyreflow.api.language import environment as environments
    from gyreflow.api.service.control import find_job, send
    from gyreflow.runtime.control import ControlInbox
    from gyreflow.runtime.local.host import LocalHost
    from gyreflow.state.shared.job_lock import JobLockedError

    path, lines = words
    out, state, directory = tmp_path / "out", tmp_path / "state", tmp_path / "control"
    inboxes: list[ControlInbox] = []
    hosts: list[LocalHost] = []
    restarting, go_on = threading.Event(), threading.Event()

    class Inbox(ControlInbox):
        def __init__(self, *args) -> None:
            super().__init__(*args)
            inboxes.append(self)

    def host(config, backend) -> LocalHost:
        if hosts:  # the restart: hold it until the test has looked
            restarting.set()
            assert go_on.wait(TIMEOUT)
        hosts.append(LocalHost(config, backend))
        return hosts[-1]

    monkeypatch.setattr(environments, "ControlInbox", Inbox)
    monkeypatch.setattr(environments, "LocalHost", host)
    env = Environment.local(1, progress=False, config={
        "state.backend": "rocksdb", "state.path": str(state), "control.directory": str(directory)})
    pipeline = example().build(env.pipeline("quiet-words"), str(path), WINDOW, QUIET, str(out), 1,
                               0.004)
    heard = Heard()
    ended: list = []
    runner = threading.Thread(
        target=lambda: ended.append(_outcome(lambda: pipeline.execute(listener=heard))))
    runner.start()
    try:
        deadline = time.monotonic() + TIMEOUT
        while not (out.exists() and len(list(out.iterdir())) >= 3):
            assert time.monotonic() < deadline and runner.is_alive(), ended
            time.sleep(0.02)
        job = find_job(str(directory), None)
        assert send(job, {"command": "pause"})["ok"]
        while (status := send(job, {"command": "status"}))["launched"] != status["last_completed"]:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        sampled: list[dict] = []
        sampler = threading.Thread(target=lambda: sampled.append(send(job, {"command": "sample"})))
        sampler.start()
        while inboxes[0].requests.qsize():  # taken: the sample waits for a window not started
            assert time.monotonic() < deadline
            time.sleep(0.01)
        rescaled = send(job, {"command": "rescale", "operator": "quiet", "parallelism": 3})
        assert rescaled["ok"] and rescaled["window"] == status["last_completed"] + 1, rescaled
        assert restarting.wait(TIMEOUT)
        # While the tasks are rebuilt: the command line finds the job and gets an answer at once.
        shown = subprocess.run([sys.executable, "-m", "gyreflow", "control", "status", "--json"],
                               env=control_environ(directory), capture_output=True, text=True,
                               timeout=TIMEOUT, check=False)
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["state"] == "restarting"
        assert json.loads(shown.stdout)["last_completed"] == status["last_completed"]
        resumed = subprocess.Popen(
            [sys.executable, "-m", "gyreflow", "control", "resume", "--json"],
            env=control_environ(directory), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)
        while not inboxes[0].requests.qsize():  # queued for the tasks being built
            assert resumed.poll() is None and time.monotonic() < deadline, resumed.communicate()
            time.sleep(0.01)
        # The run still holds the job: in this process, and against a second run.
        store = env.state_backend.open_store()
        try:
            with pytest.raises(JobLockedError, match=f"pid {os.getpid()}"):
                store.lock_job("quiet-words/quiet_words")
        finally:
            store.close()
        second = subprocess.run(
            [sys.executable, "-m", "gyreflow", "run", "--quiet", "--env", "local",
             str(QUIET_WORDS), "--", *job_args(path, tmp_path / "second")],
            env={**control_environ(directory), "GYREFLOW_STATE__BACKEND": "rocksdb",
                 "GYREFLOW_STATE__PATH": str(state)},
            capture_output=True, text=True, timeout=TIMEOUT, check=False)
        assert second.returncode == 4, second.stderr
        assert second.stderr.startswith("error:") and "Traceback" not in second.stderr
        assert f"pid {os.getpid()}" in second.stderr
    finally:
        go_on.set()
    stdout, stderr = resumed.communicate(timeout=TIMEOUT)
    assert resumed.returncode == 0, stderr
    assert json.loads(stdout)["message"] == "sources resumed"
    runner.join(TIMEOUT)
    sampler.join(TIMEOUT)
    assert ended and not isinstance(ended[0], BaseException), ended
    assert sampled[0]["ok"], sampled
    assert sampled[0]["window"] == status["last_completed"] + 1
    assert sorted(t["index"] for t in sampled[0]["tasks"] if t["task"] == "quiet") == [0, 1, 2]
    assert read_alerts(out) == quiet_oracle(lines, lambda w: QUIET)
    # One run: started once, restarted once after the boundary with three quiet tasks, finished once.
    assert heard.events == [("start", 1), ("restart", status["last_completed"], 3), ("finish",)]
    store = env.state_backend.open_store()
    try:
        store.lock_job("quiet-words/quiet_words").release()  # released when the run ended
    finally:
        store.close()


class Heard(JobListener):
    def __init__(self) -> None:
        self.events: list[tuple] = []

    def on_start(self, name, graph) -> None:
        self.events.append(("start", _tasks_of(graph, "quiet")))

    def on_restart(self, name, graph, window) -> None:
        self.events.append(("restart", window, _tasks_of(graph, "quiet")))

    def on_finish(self, result) -> None:
        self.events.append(("finish",))


def _tasks_of(graph, operator: str) -> int:
    return next(v.parallelism for v in graph.vertices if operator in [c.name for c in v.chain])


def _outcome(call):
    try:
        return call()
    except BaseException as exc:  # noqa: BLE001 - the test reports it
        return exc


def control_environ(directory: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    env["GYREFLOW_CONTROL__DIRECTORY"] = str(directory)
    return env
