"""Word count benchmark engines (Counter loop, gyreflow, PySpark, Bytewax), input shape and count check."""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from operator import add

from _common import CountMismatchError

from gyreflow.api import Environment, Window

VOCABULARY_SIZE = 1000
WORDS_PER_LINE = 10
STREAM_WINDOW_WORDS = 100_000
STREAM_WINDOW_LINES = STREAM_WINDOW_WORDS // WORDS_PER_LINE
SPARK_MASTER = "local[2]"

LOOP = "plain Counter loop"
BATCH = "gyreflow batch, key_by().count()"
STREAM = "gyreflow stream, key_by().count()"
BATCH_LAMBDAS = "gyreflow batch, map + reduce lambdas"
STREAM_LAMBDAS = "gyreflow stream, map + reduce lambdas"
SPARK = f"PySpark RDD {SPARK_MASTER}"
BYTEWAX = "Bytewax"



@dataclass
class Engine:
    """An engine: ``run()`` is timed; ``counts(result)`` (untimed) extracts its word counts."""

    name: str
    run: Callable[[], object]
    counts: Callable[[object], dict[str, int]]


def counter_loop(lines: list[str]) -> Engine:
    """The reference: ``collections.Counter`` updated line by line."""

    def run() -> Counter:
        counter: Counter = Counter()
        for line in lines:
            counter.update(line.split())
        return counter

    return Engine(LOOP, run, dict)


def gyreflow_engine(name: str, lines: list[str], window: Window,
                    expected_windows: int | None = None, lambdas: bool = False) -> Engine:
    """gyreflow on the local environment: split, then the built-in keyed count, or (``lambdas``)
    map to (word, 1) pairs, key by word and reduce with a lambda."""

    def run():
        env = Environment.local(progress=False)
        pipeline = env.pipeline("wordcount")

        @pipeline.task
        def wordcount(ctx):
            words = ctx.source(lines, window).flat_map(str.split)
            if lambdas:
                counts = (words.map(lambda w: (w, 1))
                          .key_by(lambda kv: kv[0])
                          .reduce(lambda a, b: (a[0], a[1] + b[1])))
            else:
                counts = words.key_by().count()
            counts.collect("counts")

        return pipeline.execute()

    def counts(result) -> dict[str, int]:
        windows = result["wordcount"].window_count
        if expected_windows is not None and windows != expected_windows:
            msg = f"{name}: ran {windows} windows, expected {expected_windows}"
            raise CountMismatchError(msg)
        # Each window emits the new cumulative count of every word it updated: keep the last.
        return dict(result.output("counts"))

    return Engine(name, run, counts)


def start_spark():
    """Start a SparkSession on ``local[2]`` without UI and warm it up with a tiny job.

    Returns (session, session start-up seconds, warm-up job seconds).
    """
    # Python workers must run the interpreter (and site-packages) this script runs in.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    start = time.perf_counter()
    spark = (SparkSession.builder.master(SPARK_MASTER).appName("gyreflow-wordcount-benchmark")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    started = time.perf_counter()
    # A tiny job launches the Python workers, which the timed jobs then reuse.
    spark.sparkContext.parallelize(range(2), 2).map(lambda x: x).collect()
    return spark, started - start, time.perf_counter() - started


def spark_engine(spark, lines: list[str]) -> Engine:
    """A hand-written RDD word count (the SparkSession is already running)."""
    sc = spark.sparkContext

    def run() -> list:
        return (sc.parallelize(lines, 2).flatMap(str.split).map(lambda w: (w, 1))
                .reduceByKey(add).collect())

    return Engine(SPARK, run, dict)


def bytewax_engine(lines: list[str], batch_size: int) -> Engine:
    """A Bytewax 0.21 dataflow: TestingSource -> flat_map split -> count_final -> TestingSink."""
    import bytewax.operators as op
    from bytewax.dataflow import Dataflow
    from bytewax.testing import TestingSink, TestingSource, run_main

    def run() -> list:
        out: list = []
        flow = Dataflow("wordcount")
        words = op.flat_map("split", op.input("lines", flow, TestingSource(lines, batch_size)),
                            str.split)
        op.output("out", op.count_final("count", words, lambda w: w), TestingSink(out))
        run_main(flow)
        return out

    return Engine(BYTEWAX, run, dict)

