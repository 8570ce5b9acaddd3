"""A storm of kills: SIGKILLs of random worker processes at random moments of one run, one after another.

Forked workers (environment.workers = 2) and a Spark barrier stage (spark.mode = workers): a killer
thread waits a seeded random delay once the run's workers are up, kills one of them at random,
waits for the restart, and does it again. The job finishes by itself, its published files and
collected counts equal a ``Counter`` oracle, and ``gyreflow_restarts_total`` equals the kills.
benchmarks/failover.py runs the same with 20 kills and both state backends; both find and kill
the workers with benchmarks/_kills.py.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from _spark_master import SPARK_MASTER
from prometheus_client import generate_latest
from test_worker_host import published, updated_totals

from gyreflow.api import FileSink, SizeTumblingWindow
from gyreflow.api.service.monitor import JobMonitor
from gyreflow.runtime.driver import Listeners

# Finding and killing workers is shared with benchmarks/failover.py, appended after this suite's own
# helper modules so that none of theirs is shadowed.
sys.path.append(str(Path(__file__).resolve().parents[3] / "benchmarks"))
from _kills import Killer, forked_workers, spark_workers

pytestmark = pytest.mark.processes

KILLS = 3
WINDOW = 100
WORDS = [f"w{(i * 7919) % 37}" for i in range(4000)]  # 40 windows
PAUSE = 0.03  # each window's first record waits: the run outlasts the kills


@pytest.mark.parametrize("environment_type", ["workers", "spark"])
def test_a_storm_of_kills_leaves_the_output_of_the_oracle(environment_type, make_env, tmp_path):
    if environment_type == "spark" and not SPARK_MASTER.startswith("local"):
        pytest.skip("the kills find worker processes on this machine")
    out = tmp_path / "out"
    config = {"restart.attempts": 100, "restart.delay": 0.01, "restart.backoff": 1.0,
              "restart.reset_seconds": 3600.0, "state.backend": "rocksdb",
              "spark.mode": "workers", "spark.workers": 2}
    pipeline = make_env(2, **config).pipeline("storm")
    records = list(enumerate(WORDS))

    def paced(record):
        index, word = record
        if index % WINDOW == 0:
            time.sleep(PAUSE)
        return word

    @pipeline.task(name="job")
    def job(ctx):
        words = ctx.source(records, SizeTumblingWindow(WINDOW)).with_parallelism(1).map(paced)
        counts = words.key_by().count()
        counts.collect("counts")
        counts.sink(FileSink(str(out)))

    storm = Killer(KILLS, 0.2, 7, forked_workers if environment_type == "workers" else spark_workers)
    monitor = JobMonitor()
    try:
        result = pipeline.execute(listener=Listeners([storm, monitor]))
    finally:
        storm.done.set()
    assert storm.problem is None, storm.problem
    assert len(storm.killed) == KILLS
    assert len(storm.restarts) == KILLS and monitor.restarts == KILLS
    assert f"gyreflow_restarts_total {float(KILLS)}" in generate_latest(monitor.registry).decode()
    windows = range(1, len(WORDS) // WINDOW + 1)
    got = {w: sorted(r) for w, r in result["job"].collected["counts"].items()}
    assert got == {w: updated_totals(WORDS, w, WINDOW) for w in windows}
    assert published(out) == {w: updated_totals(WORDS, w, WINDOW) for w in windows}
