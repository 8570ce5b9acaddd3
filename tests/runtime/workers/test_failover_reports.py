"""What a run says about its failovers and rescales, as a user or a log sees it.

``gyreflow run --workers 2`` in a process of its own, its worker processes sent real SIGKILLs (found
through /proc), its standard error piped: a worker killed while the job starts is a restart like any
other (one line, the ``start`` event once, exit 0); the summary, ``--metrics-json`` and the
``finish`` event of a run with two kills cover the whole run (the input's record count, a wall time
no shorter than the process was seen running); a ``control rescale N`` of the worker processes is
counted as a rescale by ``/metrics``, ``/api/job`` and ``--events``; a strategy that gives up names
the worker that was killed, not the one that ended after it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _processes import forks
from test_ui import get
from test_worker_host import gyreflow, published, updated_totals, write_job

pytestmark = pytest.mark.processes

WINDOW = 100
TIMEOUT = 120


def words_of(count: int) -> list[str]:
    """The job's input (tests/runtime/workers/test_worker_host.py's script makes the same list)."""
    return [f"w{(i * 7919) % 37}" for i in range(count)]


def read_events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def live_workers(run, count: int = 2, besides: frozenset = frozenset()) -> list[int]:
    """The run's ``count`` worker processes once they are all up (none of ``besides``)."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        assert run.poll() is None, run.communicate()
        pids = [pid for pid in forks(run.pid) if pid not in besides]
        if len(pids) == count:
            return pids
        assert time.monotonic() < deadline, "the workers did not start"
        time.sleep(0.01)


def kill_the_first_worker(run) -> int:
    """SIGKILL the run's first worker process as soon as it exists (while the job starts)."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        assert run.poll() is None, run.communicate()
        pids = forks(run.pid)
        if pids:
            os.kill(pids[0], signal.SIGKILL)
            return pids[0]
        assert time.monotonic() < deadline, "no worker started"


def test_a_worker_killed_as_the_job_starts_is_one_restart_line_after_the_start(tmp_path):
    """With the progress display (on_start starts it, every window updates it), not ``-q``."""
    words = 500
    script, config, out = write_job(tmp_path, words, 0.05)
    shown = config.read_text(encoding="utf-8").replace("[progress]\nenabled = false\n", "")
    assert "progress" not in shown
    config.write_text(shown, encoding="utf-8")
    events = tmp_path / "events.jsonl"
    run = gyreflow("--config", str(config), "--env", "local", "--workers", "2", "--events",
                   str(events), str(script), str(out))
    killed = kill_the_first_worker(run)
    _, stderr = run.communicate(timeout=TIMEOUT)
    assert run.returncode == 0, stderr
    assert "Traceback" not in stderr and "error" not in stderr, stderr
    told = [line for line in stderr.splitlines() if line.startswith("restarted")]
    assert len(told) == 1, stderr
    assert re.fullmatch(r"restarted from window 1 \(attempt 1 of 3\): .*worker 0 "
                        rf"\(pid {killed}\).* killed by SIGKILL", told[0]), told
    heard = read_events(tmp_path / "events.jsonl")
    kinds = [e["event"] for e in heard if e["event"] != "window"]
    assert kinds[:2] == ["start", "restart"] and kinds.count("start") == 1, kinds
    assert kinds[-1] == "finish", kinds
    restart = heard[[e["event"] for e in heard].index("restart")]
    assert (restart["kind"], restart["after_window"], restart["attempt"]) == ("restart", 0, 1)
    assert published(out) == {w: updated_totals(words_of(words), w)
                              for w in range(1, words // WINDOW + 1)}


def test_quiet_a_worker_killed_as_the_job_starts_still_starts_the_run_once(tmp_path):
    words = 500
    script, config, out = write_job(tmp_path, words, 0.05)
    events = tmp_path / "events.jsonl"
    run = gyreflow("--config", str(config), "--env", "local", "--workers", "2", "-q",
                   "--events", str(events), str(script), str(out))
    kill_the_first_worker(run)
    _, stderr = run.communicate(timeout=TIMEOUT)
    assert run.returncode == 0, stderr
    assert stderr == "", stderr
    kinds = [e["event"] for e in read_events(events) if e["event"] not in ("window", "checkpoint")]
    assert kinds == ["start", "restart", "finish"], kinds


def test_the_summary_of_a_run_with_two_kills_covers_the_whole_run(tmp_path):
    """Two SIGKILLs in a paced run: the records read are the input's (each window once), and the
    wall time is no shorter than the time from the first window's output to the last one's, as
    seen from outside, in the summary's title, ``--metrics-json`` and the ``finish`` event alike."""
    import threading

    words = 6000
    last = words // WINDOW
    script, config, out = write_job(tmp_path, words, 0.02)
    metrics, events = tmp_path / "metrics.json", tmp_path / "events.jsonl"
    run = gyreflow("--config", str(config), "--env", "local", "--workers", "2", "--metrics-json",
                   str(metrics), "--events", str(events), str(script), str(out))
    published_at: dict[str, float] = {}

    def watch() -> None:  # when the first window's file and the last one's appear
        while "last" not in published_at and run.poll() is None:
            windows = {int(p.stem.split("-")[1]) for p in out.glob("window-*.jsonl")}
            now = time.monotonic()
            if windows:
                published_at.setdefault("first", now)
            if last in windows:
                published_at["last"] = now
            time.sleep(0.005)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    workers = live_workers(run)
    gone: set[int] = set()
    killed_at = []
    for _ in range(2):
        time.sleep(0.8)
        os.kill(workers[1], signal.SIGKILL)
        killed_at.append(time.monotonic())
        gone.update(workers)
        workers = live_workers(run, besides=frozenset(gone))
    _, stderr = run.communicate(timeout=TIMEOUT)
    watcher.join(5)
    assert run.returncode == 0, stderr
    seen = published_at["last"] - published_at["first"]
    task = json.loads(metrics.read_text(encoding="utf-8"))["pipelines"][0]["tasks"][0]
    assert task["records_read"] == len(words_of(words)), task
    assert task["operators"]["source-0"]["records_out"] == len(words_of(words)), task
    # the kills fell inside the span timed from outside: the last kill and its restart at least
    # (a guard on the span's length alone failed when the first window came out late)
    assert published_at["first"] < killed_at[-1] < published_at["last"], (published_at, killed_at)
    assert task["seconds"] >= seen - 0.05, (task["seconds"], seen)
    assert task["records_per_second"] == pytest.approx(words / task["seconds"], rel=1e-3)
    heard = read_events(events)
    assert [e["kind"] for e in heard if e["event"] == "restart"] == ["restart", "restart"]
    finish = heard[-1]
    assert finish["event"] == "finish", finish
    assert (finish["seconds"], finish["records_read"]) == (task["seconds"], words), finish
    title = " ".join(stderr[stderr.index("cli/job: "):][:300].split())  # it may wrap at 80
    shown = re.match(r"cli/job: \d+ windows.*? in ([\d.]+) s, ([\d,]+) records/s", title)
    assert shown is not None, title
    assert shown.group(1) == f"{task['seconds']:.2f}", title
    assert shown.group(2) == f"{words / task['seconds']:,.0f}", title


def test_a_rescale_of_the_worker_processes_counts_as_a_rescale(tmp_path):
    """``control rescale 3`` of a run in 2 worker processes: ``gyreflow_rescales_total 1`` and no
    restart in ``/metrics``, a ``rescale`` event saying the worker processes went from 2 to 3 in
    ``/api/job`` and ``--events``, and no restart line in the run's log."""
    from gyreflow.api.service.control import find_job, send

    words = 6000
    script, config, out = write_job(tmp_path, words, 0.02)
    events = tmp_path / "events.jsonl"
    control = tmp_path / "control"
    os.environ["GYREFLOW_CONTROL__DIRECTORY"] = str(control)
    try:
        run = gyreflow("--config", str(config), "--env", "local", "--workers", "2", "--ui",
                       "127.0.0.1:0", "--events", str(events), str(script), str(out))
    finally:
        del os.environ["GYREFLOW_CONTROL__DIRECTORY"]
    first = run.stderr.readline()
    assert first.startswith("ui: http://127.0.0.1:"), first
    url = first.split(" ", 1)[1].strip()
    live_workers(run)
    answer = send(find_job(str(control), str(run.pid)),
                  {"command": "rescale", "operator": None, "parallelism": 3})
    assert answer["ok"], answer
    deadline = time.monotonic() + TIMEOUT
    while not (job := json.loads(get(url + "api/job")[2]))["events"]:
        assert run.poll() is None and time.monotonic() < deadline, run.communicate()
        time.sleep(0.05)
    metrics = get(url + "metrics")[2]
    _, stderr = run.communicate(timeout=TIMEOUT)
    assert run.returncode == 0, stderr
    assert (job["rescales"], job["restarts"]) == (1, 0), job
    assert [(e["kind"], e["detail"]) for e in job["events"]] == [
        ("rescale", "worker processes 2 \u2192 3")], job["events"]
    assert "gyreflow_rescales_total 1.0" in metrics.splitlines(), metrics
    assert "gyreflow_restarts_total 0.0" in metrics.splitlines(), metrics
    restarts = [e for e in read_events(events) if e["event"] == "restart"]
    assert [(e["kind"], e["after_window"] + 1) for e in restarts] == [
        ("rescale", answer["window"])], restarts
    assert "restarted" not in stderr, stderr
    assert published(out) == {w: updated_totals(words_of(words), w)
                              for w in range(1, words // WINDOW + 1)}


BROADCAST = """
import sys, time
from gyreflow.api import Environment, FileSink, SizeTumblingWindow

def slow(word):
    time.sleep(0.005)
    return word

env = Environment.from_config(overrides={"environment.parallelism": 2})
pipeline = env.pipeline("cli")

@pipeline.task(name="job")
def job(ctx):
    words = ctx.source([f"w{i}" for i in range(2000)], SizeTumblingWindow(1000)).with_parallelism(1)
    words.map(slow).broadcast().map(str.upper).sink(FileSink(sys.argv[1]))

pipeline.execute()
"""


def zombie_or_gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return True


def test_a_strategy_that_gives_up_names_the_worker_killed_not_the_one_that_lost_it(tmp_path):
    """The driver stopped (SIGSTOP) while worker 0 streams every record to worker 1; worker 1 is
    killed, worker 0 ends on its broken connection; the driver goes on (SIGCONT) and finds both
    dead: the one error line names worker 1 and its signal."""
    script = tmp_path / "job.py"
    script.write_text(BROADCAST, encoding="utf-8")
    config = tmp_path / "job.toml"
    config.write_text('[restart]\nattempts = 0\n[runtime]\nbatch_size = 1\n[progress]\n'
                      'enabled = false\n', encoding="utf-8")
    run = gyreflow("--config", str(config), "--env", "local", "--workers", "2", str(script),
                   str(tmp_path / "out"))
    workers = live_workers(run)
    time.sleep(0.5)  # worker 0's source sends worker 1 a record every 5 ms
    os.kill(run.pid, signal.SIGSTOP)
    try:
        os.kill(workers[1], signal.SIGKILL)
        deadline = time.monotonic() + 10
        while not zombie_or_gone(workers[0]):
            assert time.monotonic() < deadline, "worker 0 outlived its peer"
            time.sleep(0.01)
    finally:
        os.kill(run.pid, signal.SIGCONT)
    _, stderr = run.communicate(timeout=TIMEOUT)
    assert run.returncode == 6, stderr
    first = stderr.splitlines()[0]
    assert first == (f"error: worker 1 (pid {workers[1]}) of job 'cli/job' killed by SIGKILL"), stderr
    assert "Traceback" not in stderr, stderr


def test_the_launcher_names_the_worker_that_died_first_whatever_its_index():
    """Two forked processes: worker 1 killed by SIGKILL, worker 0 ending after it as a worker that
    lost its peer does; seen together, the launcher names worker 1."""
    import multiprocessing

    from gyreflow.runtime.workers.host import ForkLauncher
    from gyreflow.runtime.workers.worker import PEER_LOST_STATUS

    context = multiprocessing.get_context("fork")
    read, write = os.pipe()

    def survivor() -> None:
        os.close(write)
        os.read(read, 1)  # returns once worker 1 is dead (its end of the pipe closed)
        os._exit(PEER_LOST_STATUS)

    def victim() -> None:
        os.close(read)
        time.sleep(60)

    launcher = ForkLauncher()
    launcher.processes = [context.Process(target=survivor), context.Process(target=victim)]
    for process in launcher.processes:
        process.start()
    os.close(read)
    os.close(write)
    try:
        os.kill(launcher.processes[1].pid, signal.SIGKILL)
        for process in launcher.processes:
            process.join(10)
        assert [p.exitcode for p in launcher.processes] == [PEER_LOST_STATUS, -signal.SIGKILL]
        assert launcher.lost() == (1, "killed by SIGKILL")
        assert launcher.ended() == f"worker 1 (pid {launcher.processes[1].pid}) killed by SIGKILL"
    finally:
        launcher.kill()


def test_on_a_terminal_the_restart_line_stands_above_the_progress_display(tmp_path):
    """Under a terminal (a pty) with the progress display on: the restart line starts a line of its
    own instead of being glued to the display's, and the display's last window count is the
    summary's (a window computed again counted once)."""
    import pty
    import threading

    words = 4000
    script, config, out = write_job(tmp_path, words, 0.02)
    config.write_text(config.read_text(encoding="utf-8").replace(
        "[progress]\nenabled = false\n", ""), encoding="utf-8")
    leader, follower = pty.openpty()
    run = subprocess.Popen([sys.executable, "-m", "gyreflow", "run", "--config", str(config),
                            "--env", "local", "--workers", "2", str(script), str(out)],
                           stdin=follower, stdout=follower, stderr=follower,
                           env={**os.environ, "COLUMNS": "100"})
    os.close(follower)
    shown = bytearray()

    def read() -> None:
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:
                return
            if not data:
                return
            shown.extend(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        workers = live_workers(run)
        time.sleep(0.8)
        os.kill(workers[1], signal.SIGKILL)
        assert run.wait(timeout=TIMEOUT) == 0
    finally:
        run.kill()
        reader.join(5)
        os.close(leader)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", shown.decode("utf-8", "replace"))
    told = [m.start() for m in re.finditer("restarted from window", text)]
    assert len(told) == 1, text
    assert text[told[0] - 1] in "\r\n", text[told[0] - 80:told[0] + 80]
    summary = re.search(r"cli/job: (\d+) windows", text)
    assert summary is not None, text
    renders = re.findall(r"cli/job \S* ?━+ (\d+) windows", text[:summary.start()])
    assert renders and renders[-1] == summary.group(1) == str(words // WINDOW), renders[-3:]
