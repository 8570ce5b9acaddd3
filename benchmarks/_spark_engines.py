"""Spark benchmark word count engines: gyreflow pipelines, hand-written RDD and DataFrame jobs."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import add

from _common import CountMismatchError

from gyreflow.api import Environment, Window

SPARK_MASTER = "local[2]"
PARALLELISM = 2  # gyreflow's operators and the hand-written jobs' partitions

GF_BATCH = "gyreflow on Spark, batch, key_by().count()"
GF_BATCH_LAMBDAS = "gyreflow on Spark, batch, map + reduce lambdas"
GF_BATCH_ASSOCIATIVE = "gyreflow on Spark, batch, map + reduce lambdas, associative=True"
RDD = f"PySpark RDD reduceByKey, {SPARK_MASTER}"
DATAFRAME = f"PySpark DataFrame groupBy.count(), {SPARK_MASTER}"
GF_LOCAL = "gyreflow local, batch, key_by().count()"
GF_FILE = "gyreflow on Spark, batch, lines from a file (diagnostic)"
RDD_ALL_WORDS = "PySpark RDD, every word shuffled (diagnostic)"

TINY_SPARK = "gyreflow on Spark, {n} windows of {lines} lines"
TINY_SPARK_ONE = "gyreflow on Spark, the same lines as 1 window"
TINY_LOCAL = "gyreflow local, {n} windows of {lines} lines"
TINY_RDD = "PySpark RDD reduceByKey over the same lines (one Spark job)"

RUN_NUMBERS = itertools.count(1)


@dataclass
class Engine:
    """``run()`` is timed; ``counts(result)`` (untimed) extracts its word counts and may record
    facts about the run in ``runs`` (one entry per run, aligned with the timings)."""

    name: str
    run: Callable[[], object]
    counts: Callable[[object], dict[str, int]]
    runs: list[dict] = field(default_factory=list)


def gyreflow_engine(name: str, make_env: Callable[[], Environment], lines: object,
                    window: Window, expected_windows: int, lambdas: bool = False,
                    associative: bool = False) -> Engine:
    """The idiomatic pipeline ``source -> flat_map(str.split) -> key_by().count() -> collect``, or
    (``lambdas``) map to (word, 1), key by word and reduce with a lambda (``associative``: declared
    so, which folds each task's words per key before the shuffle). ``make_env()`` gives the
    environment of each run (a fresh local one: its memory state outlives a run)."""

    def run():
        # A job of its own per run: the one Spark environment keeps a stream's memory state (in
        # workers mode, in the driver) after the run, and would ask the next run to resume it.
        pipeline = make_env().pipeline(f"wordcount-{next(RUN_NUMBERS)}")

        @pipeline.task
        def wordcount(ctx):
            words = ctx.source(lines, window).flat_map(str.split)
            if lambdas:
                counts = (words.map(lambda w: (w, 1))
                          .key_by(lambda kv: kv[0])
                          .reduce(lambda a, b: (a[0], a[1] + b[1]), associative=associative))
            else:
                counts = words.key_by().count()
            counts.collect("counts")

        return pipeline.execute()

    engine = Engine(name, run, dict)

    def counts(result) -> dict[str, int]:
        task = result["wordcount"]
        if task.window_count != expected_windows:
            msg = f"{name}: ran {task.window_count} windows, expected {expected_windows}"
            raise CountMismatchError(msg)
        engine.runs.append({"window_seconds": [w.seconds for w in task.windows],
                            "shuffled": sum(m.records_in for w in task.windows
                                            for op, m in w.operators.items()
                                            if op.startswith(("count", "reduce")))})
        # Each window emits the new cumulative count of every word it updated: keep the last.
        return dict(task.output("counts"))

    engine.counts = counts
    return engine


def rdd_engine(name: str, sc, lines: list[str]) -> Engine:
    """The hand-written RDD word count: flatMap, map to (w, 1), reduceByKey(add), collect."""

    def run() -> list:
        return (sc.parallelize(lines, PARALLELISM).flatMap(str.split).map(lambda w: (w, 1))
                .reduceByKey(add).collect())

    return Engine(name, run, dict)


def dataframe_engine(spark, lines: list[str]) -> Engine:
    """split/explode/groupBy.count().collect() over a one-column DataFrame of the lines (built from
    the in-memory list in the timed region, like the RDD job's parallelize)."""
    from pyspark.sql import functions as F  # noqa: N812 - the name PySpark documents

    sc = spark.sparkContext

    def run() -> list:
        df = spark.createDataFrame(sc.parallelize([(line,) for line in lines], PARALLELISM),
                                   "line string")
        return (df.select(F.explode(F.split("line", " ")).alias("word"))
                .groupBy("word").count().collect())

    return Engine(DATAFRAME, run, lambda rows: {row["word"]: row["count"] for row in rows})
