"""The worker host (environment.workers = 2): jobs against plain-Python oracles, and failover.

Pipelines: a keyed count in size windows (per window, the updated totals of a ``Counter``), an
event-time tumbling count (a ``Counter`` per window and key), and connected components across two
workers (networkx). Failover: a worker process is sent a real SIGKILL at several points of a run (the
first window, a later one, twice in one run); the run goes on by itself and its output equals a
plain-Python oracle, and the restarts are counted by the listeners and by ``gyreflow_restarts_total``.
A killed ``gyreflow run`` (the driver) leaves no worker behind, and ``--resume`` completes the output;
a restart strategy that gives up stops the job with one ``error:`` line.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import networkx as nx
import pytest
from _processes import forked_workers, forks
from prometheus_client import generate_latest

from gyreflow.api import Environment, FileSink, SizeTumblingWindow, Tumbling
from gyreflow.api.graph import GraphView, algorithms
from gyreflow.api.service.monitor import JobMonitor
from gyreflow.runtime.driver import JobListener, Listeners
from gyreflow.runtime.errors import UserFunctionError
from gyreflow.runtime.workers.restart import RestartStrategy
from gyreflow.runtime.workers.wire import WorkerLostError

WORKERS = {"environment.workers": 2, "restart.delay": 0.01}
WORDS = [f"w{(i * 7919) % 37}" for i in range(1200)]
WINDOW = 100


def env(parallelism: int = 2, **config) -> Environment:
    return Environment.local(parallelism, progress=False, config={**WORKERS, **config})


def updated_totals(words: list, window: int, size: int = WINDOW) -> list:
    """Oracle: the keys window ``window`` updated, each with its count over every window so far."""
    totals = Counter(words[:window * size])
    return sorted((w, totals[w]) for w in set(words[(window - 1) * size:window * size]))


def per_window(result, name: str) -> dict[int, list]:
    return {window: sorted(records)
            for window, records in result["job"].collected.get(name, {}).items()}


def test_keyed_counts_in_windows_equal_a_counter():
    pipeline = env(3).pipeline("counts")  # 3 counting tasks on 2 workers: worker 0 runs two

    @pipeline.task(name="job")
    def job(ctx):
        words = ctx.source(WORDS, SizeTumblingWindow(WINDOW)).with_parallelism(1)
        words.key_by().count().collect("counts")

    got = per_window(pipeline.execute(), "counts")
    windows = len(WORDS) // WINDOW
    assert got == {w: updated_totals(WORDS, w) for w in range(1, windows + 1)}


def test_an_event_time_tumbling_count_equals_a_counter_per_window():
    # Out of order by 3 time units, within max_delay: nothing is late; a window fires once the
    # watermark (the largest timestamp minus 5) passes its end, and every window at the end of the
    # input (the timestamp tasks, not chained to the source, learn it from the last barrier).
    events = [(f"k{i % 5}", i * 0.5 + (3.0 if i % 2 else 0.0)) for i in range(1200)]
    pipeline = env(2).pipeline("event-time")

    @pipeline.task(name="job")
    def job(ctx):
        (ctx.source(events, SizeTumblingWindow(50)).with_parallelism(1)
         .with_timestamps(lambda e: e[1], max_delay=5.0)
         .key_by(lambda e: e[0]).window(Tumbling(100)).count().collect("counts"))

    result = pipeline.execute()
    got = Counter()
    for records in result["job"].collected["counts"].values():
        for key, start, _end, count in records:
            got[(key, start)] += count
    expected = Counter((key, ts // 100 * 100) for key, ts in events)
    assert got == expected


def test_connected_components_across_two_workers_equal_networkx():
    edges = [(i, (i * 13 + 5) % 80) for i in range(0, 80, 2)] + [(i, i + 1) for i in range(0, 79, 5)]
    vertices = [(i, 0) for i in range(80)]
    pipeline = env(2).pipeline("wcc")

    @pipeline.task(name="job")
    def job(ctx):
        graph = GraphView(ctx.source(vertices), ctx.source(edges), directed=False)
        algorithms.wcc(graph).collect("wcc")

    got = dict(pipeline.execute().output("wcc"))
    reference = nx.Graph()
    reference.add_nodes_from(range(80))
    reference.add_edges_from(edges)
    assert got == {v: min(c) for c in nx.connected_components(reference) for v in c}


def test_a_user_error_in_a_worker_is_reported_and_not_restarted():
    restarts = []

    class Restarts(JobListener):
        def on_restart(self, name, graph, window):
            restarts.append(window)

    pipeline = env(2).pipeline("fails")

    @pipeline.task(name="job")
    def job(ctx):
        ctx.source(WORDS, SizeTumblingWindow(WINDOW)).map(lambda w: 1 // (w != "w5")).collect("x")

    with pytest.raises(UserFunctionError, match="'w5'"):
        pipeline.execute(listener=Restarts())
    assert restarts == []


UNPICKLABLE = """
import threading
from gyreflow.api import Environment, SizeTumblingWindow

pipeline = Environment.from_config(None).pipeline("unpicklable")

@pipeline.task
def job(ctx):
    words = ctx.source([f"w{i % 7}" for i in range(400)], SizeTumblingWindow(50), parallelism=1)
    pairs = words.map(lambda w: (w, threading.Lock() if w == "w3" else None)).with_name("pairs")
    pairs.key_by(lambda r: r[0]).map(lambda r: r[0]).with_name("after").key_by().count().collect()

pipeline.execute()
"""


def run_on_two_workers(tmp_path, text: str) -> subprocess.CompletedProcess:
    """``gyreflow run`` of the script ``text`` on two worker processes, its output piped."""
    script = tmp_path / "script.py"
    script.write_text(text, encoding="utf-8")
    environ = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    return subprocess.run(
        [sys.executable, "-m", "gyreflow", "run", "-q", "--env", "local", "--workers", "2",
         str(script)], capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path,
        env={**environ, "COLUMNS": "400"})


def test_a_record_that_cannot_cross_to_another_worker_is_named_as_a_user_error(tmp_path):
    """A record with a lock in it cannot be pickled to another worker process: one line naming
    the operator, the window, the task and the record (exit 1, as a user function that raised),
    no traceback of gyreflow's."""
    done = run_on_two_workers(tmp_path, UNPICKLABLE)
    assert done.returncode == 1, done.stderr
    first = done.stderr.splitlines()[0]
    assert re.match(r"error: operator 'pairs' failed in window \d+ on task 'pairs\[\d/2\]'", first), first
    assert "('w3', <unlocked _thread.lock object" in first and "must pickle" in first, first
    assert "Traceback" not in done.stderr and 'File "' not in done.stderr, done.stderr


COLLECTED_GENERATOR = """
from gyreflow.api import AllWindow, Environment

pipeline = Environment.from_config(None).pipeline("collected")

@pipeline.task
def job(ctx):
    numbers = ctx.source([1, 2, 3], AllWindow())
    numbers.map(lambda n: (i for i in range(n))).with_name("lazy").collect("out")

pipeline.execute()
"""


def test_a_collected_record_that_cannot_reach_the_driver_is_named_as_a_user_error(tmp_path):
    """A collected record (here a generator) travels from its worker process to the driver: one
    that does not pickle is one line naming the collect, the window, the task and the record
    (exit 1), not a worker that dies and restarts."""
    done = run_on_two_workers(tmp_path, COLLECTED_GENERATOR)
    assert done.returncode == 1, done.stderr
    first = done.stderr.splitlines()[0]
    assert re.match(r"error: operator 'collect-\d+' failed in window 1 on task '[^']*collect-\d+"
                    r"\[\d/2\]' while processing record '<generator object", first), first
    assert "collected as 'out'" in first and "must pickle" in first, first
    assert "Traceback" not in done.stderr and "restart" not in done.stderr, done.stderr


def test_user_errors_are_restarted_only_when_configured_then_the_last_one_stops_the_job():
    restarts = []

    class Restarts(JobListener):
        def on_restart(self, name, graph, window):
            restarts.append(window)

    pipeline = env(2, **{"restart.user_errors": True, "restart.attempts": 2}).pipeline("fails")

    @pipeline.task(name="job")
    def job(ctx):
        ctx.source(WORDS, SizeTumblingWindow(WINDOW)).map(lambda w: 1 // (w != "w5")).collect("x")

    with pytest.raises(UserFunctionError, match="'w5'"):
        pipeline.execute(listener=Restarts())
    assert restarts == [0, 0]  # it fails in the first window: nothing was completed before


def test_the_restart_delays_grow_to_their_cap_and_start_over_after_a_healthy_period():
    now = [0.0]
    strategy = RestartStrategy(attempts=3, delay=1.0, backoff=2.0, max_delay=3.0,
                               reset_seconds=100.0, clock=lambda: now[0])
    lost = WorkerLostError("worker 0 (pid 1) of job 'x' killed by SIGKILL")
    delays = []
    for _ in range(4):
        delays.append(strategy.delay_for(lost))
        now[0] += 10.0
    assert delays == [1.0, 2.0, 3.0, None]  # doubled, capped at 3, then the attempts ran out
    now[0] += 100.0  # a healthy period
    assert strategy.delay_for(lost) == 1.0
    assert strategy.delay_for(UserFunctionError("op", 1, "t", "r", ValueError("x"))) is None
    assert strategy.delay_for(KeyError("not a failure a restart may cure")) is None


# Failover: real SIGKILLs to worker processes --------------------------------------------------


def worker_pids() -> list[int]:
    """This process's children that are forks of it (the worker processes, not the writer)."""
    return forked_workers()


class KillWorker(JobListener):
    """Sends SIGKILL to one worker process when the job finishes the given windows (once each)."""

    def __init__(self, windows: tuple[int, ...]) -> None:
        self.windows = list(windows)
        self.restarts: list[int] = []
        self.killed: list[int] = []

    def on_window(self, metrics) -> None:
        if self.windows and metrics.window >= self.windows[0]:
            self.windows.pop(0)
            pid = worker_pids()[-1]
            os.kill(pid, signal.SIGKILL)
            self.killed.append(pid)

    def on_restart(self, name, graph, window) -> None:
        self.restarts.append(window)


@pytest.mark.parametrize(("windows", "backend"), [((1,), "memory"), ((6,), "memory"),
                                                  ((2, 8), "rocksdb")],
                         ids=["first", "later", "twice-rocksdb"])
def test_a_killed_worker_is_restarted_and_the_output_equals_the_oracle(windows, backend, tmp_path):
    out = tmp_path / "out"
    state = {"state.backend": backend, "state.path": str(tmp_path / "state")}
    pipeline = env(2, **state).pipeline("failover")

    @pipeline.task(name="job")
    def job(ctx):
        words = ctx.source(WORDS, SizeTumblingWindow(WINDOW)).with_parallelism(1)
        counts = words.key_by().count()
        counts.collect("counts")
        counts.sink(FileSink(str(out)))

    killer = KillWorker(windows)
    monitor = JobMonitor()
    result = pipeline.execute(listener=Listeners([killer, monitor]))
    all_windows = range(1, len(WORDS) // WINDOW + 1)
    # each window counted once, those finished again after a restart apart
    assert result["job"].window_count == len(all_windows)
    assert result["job"].recomputed >= 0
    assert len(killer.killed) == len(windows)
    assert len(killer.restarts) == len(windows)
    assert monitor.restarts == len(windows)
    assert f"gyreflow_restarts_total {float(len(windows))}" in generate_latest(
        monitor.registry).decode()
    assert per_window(result, "counts") == {w: updated_totals(WORDS, w) for w in all_windows}
    published = {int(p.stem.split("-")[1]): sorted(tuple(json.loads(line))
                                                   for line in p.read_text().splitlines())
                 for p in out.glob("window-*.jsonl")}
    assert published == {w: updated_totals(WORDS, w) for w in all_windows}
    assert not worker_pids()  # every worker process of the run ended with it


def test_the_job_stops_with_the_last_error_once_the_attempts_ran_out(tmp_path):
    pipeline = env(2, **{"restart.attempts": 1}).pipeline("gives-up")

    @pipeline.task(name="job")
    def job(ctx):
        ctx.source(WORDS, SizeTumblingWindow(WINDOW)).with_parallelism(1).key_by().count().collect("c")

    killer = KillWorker((2, 6))
    with pytest.raises(WorkerLostError, match=r"killed by SIGKILL \(the job stopped after 1 restart"):
        pipeline.execute(listener=killer)
    assert len(killer.restarts) == 1 and len(killer.killed) == 2
    assert not worker_pids()


# The command line -----------------------------------------------------------------------------

SCRIPT = """
import sys, time
from gyreflow.api import Environment, FileSink, SizeTumblingWindow

words = [f"w{{(i * 7919) % 37}}" for i in range({words})]

def slow(word):
    if word == "w0":
        time.sleep({pause})
    return word

env = Environment.from_config(overrides={{"environment.parallelism": 2}})
pipeline = env.pipeline("cli")

@pipeline.task(name="job")
def job(ctx):
    (ctx.source(words, SizeTumblingWindow({window})).with_parallelism(1).map(slow)
     .key_by().count().sink(FileSink(sys.argv[1])))

pipeline.execute()
"""


def write_job(tmp_path: Path, words: int, pause: float) -> tuple[Path, Path, Path]:
    script = tmp_path / "job.py"
    script.write_text(SCRIPT.format(words=words, pause=pause, window=WINDOW), encoding="utf-8")
    config = tmp_path / "job.toml"
    config.write_text(textwrap.dedent(f"""
        [state]
        backend = "jdbc"
        path = "{tmp_path / 'state'}"
        [restart]
        delay = 0.01
        [progress]
        enabled = false
    """), encoding="utf-8")
    return script, config, tmp_path / "out"


def gyreflow(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "gyreflow", "run", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def published(out: Path) -> dict[int, list]:
    return {int(p.stem.split("-")[1]): sorted(tuple(json.loads(line))
                                              for line in p.read_text().splitlines())
            for p in out.glob("window-*.jsonl")}


def wait_for_windows(out: Path, count: int, process: subprocess.Popen, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while len(list(out.glob("window-*.jsonl"))) < count:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the job did not publish in time"
        time.sleep(0.02)


def test_a_killed_driver_leaves_no_worker_and_resume_completes_the_output(tmp_path):
    words = 1500
    script, config, out = write_job(tmp_path, words, 0.02)
    args = ["--config", str(config), "--env", "local", "--workers", "2", "-q", str(script),
            str(out)]
    first = gyreflow(*args)
    wait_for_windows(out, 3, first)
    workers = forks(first.pid)
    assert len(workers) == 2
    first.send_signal(signal.SIGKILL)
    first.communicate()
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{pid}").exists() and "Z" not in
              Path(f"/proc/{pid}/stat").read_text().split()[2] for pid in workers):
        assert time.monotonic() < deadline, "a worker outlived its driver"
        time.sleep(0.02)
    second = gyreflow("--resume", *args)
    stdout, stderr = second.communicate(timeout=120)
    assert second.returncode == 0, stderr
    expected_words = [f"w{(i * 7919) % 37}" for i in range(words)]
    assert published(out) == {w: updated_totals(expected_words, w)
                              for w in range(1, words // WINDOW + 1)}


def kill_a_worker_mid_run(script: Path, config: Path, out: Path) -> subprocess.Popen:
    """``gyreflow run --workers 2`` of the job; worker 1 SIGKILLed once 2 windows are published."""
    run = gyreflow("--config", str(config), "--env", "local", "--workers", "2", "-q", str(script),
                   str(out))
    wait_for_windows(out, 2, run)
    worker = max(forks(run.pid))
    os.kill(worker, signal.SIGKILL)
    return run


def test_a_strategy_that_gives_up_stops_the_job_with_one_error_line(tmp_path):
    script, config, out = write_job(tmp_path, 1500, 0.02)
    config.write_text(config.read_text().replace("delay = 0.01", "attempts = 0"), encoding="utf-8")
    run = kill_a_worker_mid_run(script, config, out)
    _, stderr = run.communicate(timeout=60)
    assert run.returncode == 6, stderr
    first = stderr.splitlines()[0]
    assert first.startswith("error: worker 1 (pid ") and "killed by SIGKILL" in first, stderr
    assert "Traceback" not in stderr and len(stderr.splitlines()) == 2, stderr  # the line, a hint
    assert "--resume" in stderr.splitlines()[1], stderr


def test_a_killed_worker_under_the_command_line_recovers_with_no_trace_in_its_log(tmp_path):
    """As a log sees it (stderr piped): the surviving worker's lost connection is one line, not a
    Python trace, the job exits 0 by itself, and the output is a Counter's."""
    words = 1500
    script, config, out = write_job(tmp_path, words, 0.02)
    run = kill_a_worker_mid_run(script, config, out)
    _, stderr = run.communicate(timeout=120)
    assert run.returncode == 0, stderr
    assert "Traceback" not in stderr, stderr
    expected_words = [f"w{(i * 7919) % 37}" for i in range(words)]
    assert published(out) == {w: updated_totals(expected_words, w)
                              for w in range(1, words // WINDOW + 1)}


def test_a_worker_whose_peer_went_away_leaves_the_report_to_the_driver():
    """The surviving worker's view of a killed peer (a broken pipe while it sends), as a log sees
    it: nothing printed (the driver's one error line, or its restart, tells), exit status 75 (so
    that the driver names the worker that died first); other failures keep their trace."""
    code = textwrap.dedent("""
        import sys, types
        import gyreflow.runtime.workers.worker as worker

        class Failing:
            def __init__(self, *args):
                pass
            def run(self):
                raise {error}

        worker.Worker = Failing
        worker._die_with_parent = lambda parent: None
        worker.serve(types.SimpleNamespace(parent=0), 1)
    """)
    lost = subprocess.run([sys.executable, "-c", code.format(error='BrokenPipeError(32, "pipe")')],
                          capture_output=True, text=True, timeout=60, check=False)
    assert lost.returncode == 75
    assert lost.stderr == "", lost.stderr
    bug = subprocess.run([sys.executable, "-c", code.format(error='KeyError("x")')],
                         capture_output=True, text=True, timeout=60, check=False)
    assert bug.returncode == 1 and "Traceback" in bug.stderr and "KeyError" in bug.stderr
