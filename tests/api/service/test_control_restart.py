"""Commands to a job while a rescale rebuilds its tasks: answered, and the run keeps its job lock."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from _control_jobs import TIMEOUT, job_args, quiet_oracle
from test_notifications import QUIET, QUIET_WORDS, WINDOW, example, read_alerts

from gyreflow.api import JobListener


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


def test_a_rescale_waiting_when_the_tasks_fail_is_carried_out_by_the_restarted_tasks(tmp_path):
    """A rescale waits for the next window with a snapshot (``state.snapshot_every = 8``); a task
    fails meanwhile and the run restarts the tasks (a failover): the restarted tasks carry the
    rescale out, and its command is answered so, not as if the job had ended."""
    from collections import Counter

    from gyreflow.api import Environment, SizeTumblingWindow
    from gyreflow.api.service.control import send

    directory, fail = tmp_path / "control", tmp_path / "fail"
    words = [f"w{i % 17}" for i in range(3_000)]

    def paced(word: str) -> str:
        time.sleep(0.005)
        if fail.exists():  # once: the restarted tasks find it gone
            fail.unlink()
            raise ValueError("the failure the run restarts after")
        return word

    env = Environment.local(progress=False, config={
        "environment.workers": 2, "environment.parallelism": 2, "state.snapshot_every": 8,
        "state.backend": "rocksdb", "state.path": str(tmp_path / "state"),
        "control.directory": str(directory), "restart.user_errors": True,
        "restart.delay": 0.0})
    pipeline = env.pipeline("failing")

    @pipeline.task
    def counts(ctx):
        (ctx.source(words, SizeTumblingWindow(20), parallelism=1).map(paced).with_name("paced")
         .key_by().count().with_name("count").collect("counts"))

    restarts: list[tuple[str, int]] = []

    class Restarts(JobListener):
        def on_restart(self, name, graph, window, restart=None) -> None:
            restarts.append((restart.kind, _tasks_of(graph, "count")))

    ended: list = []
    runner = threading.Thread(target=lambda: ended.append(
        _outcome(lambda: pipeline.execute(listener=Restarts()))))
    runner.start()
    try:
        deadline = time.monotonic() + TIMEOUT
        while (job := _job_in(directory)) is None:  # its folder exists before its file
            assert time.monotonic() < deadline and runner.is_alive(), ended
            time.sleep(0.02)
        while send(job, {"command": "status"}).get("last_completed", 0) < 9:
            assert time.monotonic() < deadline and runner.is_alive(), ended
            time.sleep(0.02)
        answers: list[dict] = []
        asking = threading.Thread(target=lambda: answers.append(
            send(job, {"command": "rescale", "operator": "count", "parallelism": 3})))
        asking.start()
        while send(job, {"command": "status"}).get("state") != "rescaling":
            assert time.monotonic() < deadline and asking.is_alive(), answers
            time.sleep(0.005)
        fail.touch()
        asking.join(TIMEOUT)
    finally:
        fail.unlink(missing_ok=True)
        runner.join(TIMEOUT)
    result = ended[0]
    assert not isinstance(result, BaseException), result
    assert answers and answers[0]["ok"], answers
    final = {}
    by_window = result["counts"].by_window("counts")
    for window in sorted(by_window):
        final.update(dict(by_window[window]))
    assert final == dict(Counter(words))
    assert restarts == [("restart", 2), ("rescale", 3)], restarts


def _job_in(directory: Path) -> dict | None:
    """The job whose control file is in ``directory``, or None while there is none yet."""
    from gyreflow.api.service.control import ControlError, find_job

    try:
        return find_job(str(directory), None)
    except (ControlError, FileNotFoundError):  # no file yet, or not even the folder
        return None
