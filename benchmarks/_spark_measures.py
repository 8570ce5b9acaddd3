"""Checks, set-up and measurements of the Spark benchmark, and the parts of its gap to the RDD job."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable

from _spark_engines import PARALLELISM, SPARK_MASTER

from gyreflow.api import AllWindow, Environment


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def spark_environment() -> tuple[Environment, object, float]:
    """gyreflow's Spark environment and its SparkSession (started here; returned with its start-up
    seconds). Every Spark engine of this benchmark uses this one session."""
    # Python workers must run the interpreter (and site-packages) this script runs in.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    env = Environment.spark(master=SPARK_MASTER, parallelism=PARALLELISM, progress=False,
                            config={"spark.app_name": "gyreflow-spark-benchmark",
                                    "spark.conf": {"spark.ui.enabled": "false"}})
    seconds, spark = timed(env.session)  # the SparkSession the environment runs its jobs on
    return env, spark, seconds


def time_spark_jobs(fn: Callable[[], object]) -> tuple[float, float, object]:
    """Run ``fn()`` once; return its seconds, the seconds spent in ``RDD.collect`` (the Spark jobs:
    gyreflow runs one collect per window round) and its result."""
    from pyspark import RDD

    spent = [0.0]
    original = RDD.collect

    def collect(self):
        start = time.perf_counter()
        try:
            return original(self)
        finally:
            spent[0] += time.perf_counter() - start

    RDD.collect = collect
    try:
        seconds, result = timed(fn)
    finally:
        RDD.collect = original
    return seconds, spent[0], result


def gyreflow_import_seconds() -> float:
    """Seconds a fresh interpreter takes to import the modules a gyreflow Spark task needs."""
    code = ("import time; start = time.perf_counter(); "
            "import gyreflow.api, gyreflow.runtime.spark.host, gyreflow.state.backends; "
            "print(time.perf_counter() - start)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


def plan_size(env: Environment, lines: list[str]) -> tuple[int, float, int]:
    """Bytes and seconds of pickling the batch pipeline's execution graph (what each Spark stage of
    each round carries in its closure: the in-memory source, i.e. the input, is part of it), and
    its number of execution vertices (Spark stages per round)."""
    from pyspark import cloudpickle

    pipeline = env.pipeline("wordcount")

    @pipeline.task
    def wordcount(ctx):
        ctx.source(lines, AllWindow()).flat_map(str.split).key_by().count().collect("counts")

    (_, _, execution), = pipeline.plans()
    seconds, data = timed(lambda: cloudpickle.dumps(execution))
    return len(data), seconds, len(execution.vertices)


def why_lines(gf_batch: float, rdd: float, all_words: float, from_file: float, round_cost: float,
              rdd_round: float, *, plan_bytes: int, plan_pickle: float) -> list[str]:
    """Split the gap between gyreflow's batch run and the RDD job into measured parts."""

    def step(delta: float) -> str:
        return f"{delta:+.2f} s" if delta > 0 else f"{delta:+.2f} s, no measurable cost in this run"

    return [
        f"gyreflow on Spark takes {gf_batch - rdd:.2f} s longer than the RDD job ({gf_batch:.2f} vs "
        f"{rdd:.2f} s). The diagnostic rows are best runs on a noisy machine, so the parts add up "
        "only roughly:",
        f"A round's fixed cost ({step(round_cost - rdd_round)}): gyreflow's round over the tiny "
        f"input takes {round_cost:.2f} s against {rdd_round:.2f} s for a one-shuffle RDD job over "
        "the same lines (two stages, a Spark shuffle, a state store opened and closed per task, "
        "the scheduler and the commit on the driver).",
        f"The input inside the plan ({step(gf_batch - from_file)}: {from_file:.2f} s when the same "
        f"pipeline reads the lines from a file): the in-memory source is part of the plan "
        f"({plan_bytes / 1e6:.1f} MB, {plan_pickle * 1000:.0f} ms to pickle), broadcast once per "
        "run; every Python worker unpickles it once.",
        f"Without a map-side combine (the reduce row) every word crosses the shuffle: the same "
        f"data movement without gyreflow takes {all_words:.2f} s.",
    ]
