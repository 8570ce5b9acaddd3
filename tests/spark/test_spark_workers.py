"""Workers mode on Spark (spark.mode = workers): the worker processes run as one barrier stage.

Pipelines on the shared ``local[2]`` session, against plain-Python oracles: a keyed count in size
windows (per window, the updated totals of a ``Counter``) and an event-time tumbling count (a
``Counter`` per window and key). Failover: one worker's Python process gets a real SIGKILL mid-run;
the job goes on by itself from the last completed window, its output equals the oracle, and the
restart is counted by ``gyreflow_restarts_total``; a barrier stage that Spark cancels (as when it
loses an executor) is started again by the driver the same way. A ``gyreflow run`` driver killed with SIGKILL
mid-run leaves no process behind (its JVM, its worker processes), and run again with ``--resume``
publishes the oracle's output. A master with fewer task
slots than workers (workers mode chosen with ``gyreflow run --spark-mode workers``) is refused
before any data moves: one ``error:`` line, exit status 2.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from _spark_master import SPARK_MASTER
from prometheus_client import generate_latest
from test_spark_recovery import MARKER, assert_no_leftovers
from test_worker_host import published, updated_totals, wait_for_windows

from gyreflow.api import Environment, FileSink, SizeTumblingWindow, Tumbling
from gyreflow.api.service.monitor import JobMonitor
from gyreflow.runtime.driver import JobListener, Listeners
from gyreflow.runtime.spark.barrier import dynamic_allocation_refusal, task_slots, too_few_slots

pytestmark = pytest.mark.skipif(not SPARK_MASTER.startswith("local"),
                                reason="the kill tests find worker processes on this machine")

WORDS = [f"w{(i * 7919) % 37}" for i in range(600)]
WINDOW = 100


def env(tmp_path: Path, parallelism: int = 2, **config) -> Environment:
    overrides = {"spark.mode": "workers", "spark.workers": 2, "restart.delay": 0.01,
                 "state.path": str(tmp_path / "state"), **config}
    return Environment.spark(SPARK_MASTER, parallelism, progress=False, config=overrides)


def per_window(result, name: str) -> dict[int, list]:
    return {window: sorted(records)
            for window, records in result["job"].collected.get(name, {}).items()}


def test_a_keyed_count_in_workers_mode_equals_a_counter(tmp_path):
    pipeline = env(tmp_path, 3).pipeline("counts")  # 3 counting tasks on 2 workers

    @pipeline.task(name="job")
    def job(ctx):
        words = ctx.source(WORDS, SizeTumblingWindow(WINDOW)).with_parallelism(1)
        words.key_by().count().collect("counts")

    got = per_window(pipeline.execute(), "counts")
    assert got == {w: updated_totals(WORDS, w) for w in range(1, len(WORDS) // WINDOW + 1)}


def test_an_event_time_tumbling_count_in_workers_mode_equals_a_counter_per_window(tmp_path):
    events = [(f"k{i % 5}", i * 0.5 + (3.0 if i % 2 else 0.0)) for i in range(400)]
    pipeline = env(tmp_path).pipeline("event-time")

    @pipeline.task(name="job")
    def job(ctx):
        (ctx.source(events, SizeTumblingWindow(50)).with_parallelism(1)
         .with_timestamps(lambda e: e[1], max_delay=5.0)
         .key_by(lambda e: e[0]).window(Tumbling(40)).count().collect("counts"))

    got = Counter()
    for records in pipeline.execute()["job"].collected["counts"].values():
        for key, start, _end, count in records:
            got[(key, start)] += count
    # Nothing is late (out of order by 3 within a delay of 5), and at the end of the input every
    # window fires, also in timestamp tasks not chained to the source.
    assert got == Counter((key, ts // 40 * 40) for key, ts in events)


class KillAWorker(JobListener):
    """SIGKILLs the Python process of one worker (its pid read from a file the job's map wrote)
    when the job finishes window ``window``."""

    def __init__(self, pids: Path, window: int) -> None:
        self.pids = pids
        self.window = window
        self.killed: list[int] = []
        self.restarts: list[int] = []

    def on_window(self, metrics) -> None:
        if not self.killed and metrics.window >= self.window:
            pid = max(int(p.name) for p in self.pids.iterdir())
            os.kill(pid, signal.SIGKILL)
            self.killed.append(pid)

    def on_restart(self, name, graph, window) -> None:
        self.restarts.append(window)


def test_a_killed_spark_worker_is_restarted_and_the_output_equals_the_oracle(tmp_path):
    pids = tmp_path / "pids"
    pids.mkdir()
    out = tmp_path / "out"
    pipeline = env(tmp_path, **{"restart.attempts": 2}).pipeline("failover")

    def note_pid(word):
        (pids / str(os.getpid())).touch()
        return word

    @pipeline.task(name="job")
    def job(ctx):
        words = ctx.source(WORDS, SizeTumblingWindow(WINDOW)).with_parallelism(1).map(note_pid)
        counts = words.key_by().count()
        counts.collect("counts")
        counts.sink(FileSink(str(out)))

    killer = KillAWorker(pids, 2)
    monitor = JobMonitor()
    result = pipeline.execute(listener=Listeners([killer, monitor]))
    assert len(killer.killed) == 1 and killer.killed[0] != os.getpid()
    assert len(killer.restarts) == 1 and monitor.restarts == 1
    assert "gyreflow_restarts_total 1.0" in generate_latest(monitor.registry).decode()
    windows = range(1, len(WORDS) // WINDOW + 1)
    assert per_window(result, "counts") == {w: updated_totals(WORDS, w) for w in windows}
    assert published(out) == {w: updated_totals(WORDS, w) for w in windows}


class CancelTheStage(JobListener):
    """Cancels every Spark job (the workers' barrier stage: what Spark does when it loses an
    executor of the stage) when the job finishes window ``window``, and holds the driver until
    Spark ended the stage (however slow the machine, the job cannot finish first)."""

    def __init__(self, window: int) -> None:
        self.window = window
        self.restarts: list[int] = []

    def on_window(self, metrics) -> None:
        if metrics.window == self.window and not self.restarts:
            from pyspark import SparkContext

            SparkContext.getOrCreate().cancelAllJobs()
            deadline = time.monotonic() + 60  # the driver goes on once Spark ended the stage
            while time.monotonic() < deadline and any(
                    t.name == "gyreflow-barrier-stage" for t in threading.enumerate()):
                time.sleep(0.05)

    def on_restart(self, name, graph, window) -> None:
        self.restarts.append(window)


def test_a_cancelled_barrier_stage_is_started_again_by_the_driver(tmp_path):
    # 20 windows of 0.1 s: the workers, which Spark does not stop at once, cannot finish the job
    # before the driver sees that the stage ended.
    words, size = WORDS[:200], 10

    def slow(word):
        time.sleep(0.01)
        return word

    pipeline = env(tmp_path, **{"restart.attempts": 2}).pipeline("cancelled")

    @pipeline.task(name="job")
    def job(ctx):
        (ctx.source(words, SizeTumblingWindow(size)).with_parallelism(1).map(slow)
         .key_by().count().collect("counts"))

    canceller = CancelTheStage(2)
    result = pipeline.execute(listener=canceller)
    assert len(canceller.restarts) == 1
    windows = range(1, len(words) // size + 1)
    assert per_window(result, "counts") == {w: updated_totals(words, w, size) for w in windows}


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


def write_job(tmp_path: Path, words: int, pause: float, workers: int = 2,
              mode: str = "workers") -> tuple[Path, Path, Path]:
    script = tmp_path / "job.py"
    script.write_text(SCRIPT.format(words=words, pause=pause, window=WINDOW), encoding="utf-8")
    config = tmp_path / "job.toml"
    config.write_text(textwrap.dedent(f"""
        [environment]
        type = "spark"
        [spark]
        master = "local[2]"
        mode = "{mode}"
        workers = {workers}
        [state]
        backend = "jdbc"
        path = "{tmp_path / 'state'}"
        [progress]
        enabled = false
    """), encoding="utf-8")
    return script, config, tmp_path / "out"


def gyreflow(*args: str, app: str = "gyreflow", log: Path | None = None) -> subprocess.Popen:
    """``gyreflow run ARGS`` as Spark application ``app`` (its processes carry the marker of
    tests/spark/test_spark_recovery.py); output to ``log`` when given (a JVM that outlived its driver
    would hold a pipe open), else piped."""
    env = {**os.environ, "GYREFLOW_SPARK__APP_NAME": app, MARKER: app}
    output = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE} if log is None else {
        "stdout": log.open("w"), "stderr": subprocess.STDOUT}
    return subprocess.Popen([sys.executable, "-m", "gyreflow", "run", *args], env=env,
                            stdin=subprocess.DEVNULL, text=True, **output)


def test_a_killed_driver_leaves_no_worker_and_resume_completes_the_output(tmp_path):
    words = 1000
    script, config, out = write_job(tmp_path, words, 0.01)
    args = ["--config", str(config), "-q", str(script), str(out)]
    app = f"gyreflow-workers-{uuid.uuid4().hex}"
    first = gyreflow(*args, app=app, log=tmp_path / "first.log")
    try:
        wait_for_windows(out, 3, first, seconds=120)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    assert len(published(out)) < words // WINDOW  # killed mid-run
    assert_no_leftovers(app, "the killed driver")  # the JVM and the worker processes ended too
    second = gyreflow("--resume", *args, app=app)
    _, stderr = second.communicate(timeout=180)
    assert second.returncode == 0, stderr
    expected_words = [f"w{(i * 7919) % 37}" for i in range(words)]
    assert published(out) == {w: updated_totals(expected_words, w)
                              for w in range(1, words // WINDOW + 1)}


def test_more_workers_than_task_slots_are_refused_in_one_line_before_any_data_moves(tmp_path):
    script, config, out = write_job(tmp_path, 200, 0.0, workers=3, mode="rounds")
    started = time.monotonic()
    run = gyreflow("--config", str(config), "--spark-mode", "workers", "-q", str(script), str(out))
    _, stderr = run.communicate(timeout=120)
    assert run.returncode == 2, stderr
    assert "Traceback" not in stderr
    (line,) = stderr.strip().splitlines()
    assert line.startswith("error: ") and "needs 3 task slots" in line and "has 2" in line
    assert "spark.workers" in line and "spark.master" in line
    assert not out.exists()
    assert time.monotonic() - started < 60


class FakeContext:
    """What the slot count reads of a SparkContext on a cluster."""

    def __init__(self, parallelism: int, **conf: str) -> None:
        self.defaultParallelism = parallelism
        self.conf = conf

    def getConf(self):  # noqa: N802 - SparkContext's name
        return self.conf


def test_task_slots_and_the_refusals_in_one_line():
    assert task_slots(None, "local[4]") == 4
    assert task_slots(None, "local[4]", task_cpus=2) == 2
    assert task_slots(None, "local[*]") == os.cpu_count()
    assert task_slots(FakeContext(6), "spark://node:7077", task_cpus=2) == 3
    assert too_few_slots(2, 2, "local[2]") is None
    assert "\n" not in too_few_slots(5, 2, "local[2]")
    assert dynamic_allocation_refusal(None) is None
    assert dynamic_allocation_refusal(FakeContext(4)) is None
    refusal = dynamic_allocation_refusal(FakeContext(4, **{"spark.dynamicAllocation.enabled": "true"}))
    assert "spark.dynamicAllocation.enabled" in refusal and "\n" not in refusal


SESSION_FIRST = '''
import json, sys
from pyspark.sql import SparkSession
from gyreflow.api import AllWindow, Environment
from wordlib import Shout, first_letter  # a module of the script's own folder

SparkSession.builder.master("local[2]").getOrCreate()  # the application starts Spark first
env = Environment.spark("local[2]", 2, progress=False,
                        config={{"spark.mode": sys.argv[1], "state.path": sys.argv[2]}})
pipeline = env.pipeline("mine")

@pipeline.task(name="job")
def job(ctx):
    ctx.source({words!r}, AllWindow()).map(Shout()).key_by(first_letter).count().collect("c")

print(json.dumps(sorted(map(list, pipeline.execute()["job"].collected["c"][1]))))
'''


@pytest.mark.parametrize("mode", ["workers", "rounds"])
def test_a_session_the_application_started_first_still_runs_its_own_modules(tmp_path, mode):
    """Spark's Python workers inherit the import path of whoever started the JVM: when the
    application (a notebook, ``spark-submit``) started it, functions and classes of the script's
    own modules travel with the plan."""
    words = [f"w{i % 13}x{i}" for i in range(300)]
    (tmp_path / "wordlib.py").write_text(
        "class Shout:\n    def __call__(self, word):\n        return word.upper()\n\n\n"
        "def first_letter(word):\n    return word[:2]\n")
    (tmp_path / "app.py").write_text(SESSION_FIRST.format(words=words))
    elsewhere = tmp_path / "cwd"  # Python workers run in the JVM's folder: not the script's
    elsewhere.mkdir()
    run = subprocess.run([sys.executable, str(tmp_path / "app.py"), mode, str(tmp_path / "state")],
                         cwd=elsewhere, capture_output=True, text=True, timeout=240,
                         env={**os.environ, MARKER: f"session-first-{mode}"})
    assert run.returncode == 0, run.stderr[-3000:]
    expected = Counter(word.upper()[:2] for word in words)
    assert [tuple(pair) for pair in json.loads(run.stdout.splitlines()[-1])] \
        == sorted(expected.items())
