"""gyreflow's windowed keyed aggregations against an independent oracle: the same computation as a
PySpark DataFrame query.

gyreflow's semantics for keyed ``reduce``/``count``/``aggregate`` over size windows: at the end of
window ``w`` it emits every key updated in ``w`` with the key's cumulative value over windows
``1..w``. As a DataFrame query: give each record its window from its position (the pipelines here
read with source parallelism 1, so ``window = position // n + 1``), aggregate per (window, key),
then take the running sum over windows per key (``Window.partitionBy(key).orderBy(window)``). The
rows that exist after the per-(window, key) aggregation are exactly the keys present in each
window. The query runs in the JVM (no Python workers, no gyreflow code).

Each test runs on both environments through ``make_env``; the SparkSession is shared with
gyreflow's Spark environment.
"""

from __future__ import annotations

import random

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import Window as SqlWindow
from pyspark.sql import functions as F  # noqa: N812 - the name PySpark documents

from gyreflow.api import AggregateFunction, SizeTumblingWindow

SEED = 20240607
LINES = 3_000
WINDOW_LINES = 750  # SizeTumblingWindow(750) on one source task: 4 windows
RECORDS = 3_000
WINDOW_RECORDS = 800  # 4 windows, the last one shorter

# --- deterministic inputs -----------------------------------------------------------------------


def word_lines() -> list[str]:
    """3,000 lines of 1 to 8 words from a 200-word vocabulary with Zipf frequencies (rare words
    miss some windows), single spaces, no empty line (so ``str.split()`` and Spark's
    ``split(line, ' ')`` agree)."""
    rng = random.Random(SEED)
    vocabulary = [f"w{i:03d}" for i in range(200)]
    weights = [1 / (rank + 1) for rank in range(len(vocabulary))]
    return [" ".join(rng.choices(vocabulary, weights=weights, k=rng.randint(1, 8)))
            for _ in range(LINES)]


def city_amounts() -> list[tuple[str, int]]:
    """3,000 (city, amount) records, amounts -50..500: 12 cities in odd windows, the first 8 of
    them in even windows (so some keys are not updated in some windows)."""
    rng = random.Random(SEED + 1)
    cities = ["oslo", "rome", "lima", "pune", "kyiv", "doha", "baku", "riga", "nice", "bonn",
              "cork", "fez"]
    return [(rng.choice(cities if (i // WINDOW_RECORDS) % 2 == 0 else cities[:8]),
             rng.randint(-50, 500))
            for i in range(RECORDS)]


# --- the oracle: PySpark DataFrame queries --------------------------------------------------------


def _running_totals(per_window: DataFrame, key: str, columns: list[str]) -> DataFrame:
    """Per (window, key) row: each column's running sum over the key's windows 1..window."""
    so_far = (SqlWindow.partitionBy(key).orderBy("window")
              .rowsBetween(SqlWindow.unboundedPreceding, SqlWindow.currentRow))
    return per_window.select("window", key, *[F.sum(c).over(so_far).alias(c) for c in columns])


def _windows(rows, key: str, value) -> dict[int, dict]:
    out: dict[int, dict] = {}
    for row in rows:
        out.setdefault(int(row["window"]), {})[row[key]] = value(row)
    return out


@pytest.fixture(scope="module")
def word_count_oracle(spark) -> dict[int, dict[str, int]]:
    lines = spark.createDataFrame(list(enumerate(word_lines())), "position long, line string")
    words = lines.select((F.floor(F.col("position") / WINDOW_LINES) + 1).alias("window"),
                         F.explode(F.split("line", " ")).alias("word"))
    per_window = words.groupBy("window", "word").agg(F.count(F.lit(1)).alias("count"))
    rows = _running_totals(per_window, "word", ["count"]).collect()
    return _windows(rows, "word", lambda row: row["count"])


@pytest.fixture(scope="module")
def sum_count_oracle(spark) -> dict[int, dict[str, tuple[int, int]]]:
    records = spark.createDataFrame([(i, city, amount) for i, (city, amount)
                                     in enumerate(city_amounts())],
                                    "position long, city string, amount long")
    per_window = (records.withColumn("window", F.floor(F.col("position") / WINDOW_RECORDS) + 1)
                  .groupBy("window", "city")
                  .agg(F.sum("amount").alias("total"), F.count(F.lit(1)).alias("n")))
    rows = _running_totals(per_window, "city", ["total", "n"]).collect()
    return _windows(rows, "city", lambda row: (row["total"], row["n"]))


def test_oracles_cover_what_the_tests_need(word_count_oracle, sum_count_oracle):
    # Several windows, keys missing from some windows, and the totals add up to the input.
    for oracle, windows, records in ((word_count_oracle, -(-LINES // WINDOW_LINES), None),
                                     (sum_count_oracle, -(-RECORDS // WINDOW_RECORDS), RECORDS)):
        assert sorted(oracle) == list(range(1, windows + 1))
        keys = set().union(*oracle.values())
        assert any(set(values) != keys for values in oracle.values())
        final: dict = {}
        for window in sorted(oracle):
            final.update(oracle[window])
        if records is not None:
            assert sum(n for _, n in final.values()) == records
    words = sum(len(line.split()) for line in word_lines())
    final_counts: dict = {}
    for window in sorted(word_count_oracle):
        final_counts.update(word_count_oracle[window])
    assert sum(final_counts.values()) == words


# --- gyreflow against the oracle ----------------------------------------------------------------


def as_windows(by_window: dict[int, list]) -> dict[int, dict]:
    """{window: [(key, value), ...]} -> {window: {key: value}}, refusing a key emitted twice in a
    window (each updated key is emitted once, at the window's end)."""
    out = {}
    for window, records in by_window.items():
        values = dict(records)
        assert len(values) == len(records), f"window {window}: a key was emitted more than once"
        out[window] = values
    return out


@pytest.mark.parametrize("parallelism", [1, 3])
def test_windowed_word_count_matches_dataframe_query(make_env, parallelism, word_count_oracle):
    lines = word_lines()
    pipeline = make_env(parallelism).pipeline("oracle-word-count")

    @pipeline.task
    def count_words(ctx):
        # Source parallelism 1: window w is lines[(w - 1) * n : w * n], as the oracle assumes.
        words = ctx.source(lines, SizeTumblingWindow(WINDOW_LINES), parallelism=1).flat_map(str.split)
        (words.map(lambda w: (w, 1))
              .key_by(lambda kv: kv[0])
              .reduce(lambda a, b: (a[0], a[1] + b[1]))
              .collect("reduce"))
        words.key_by().count().collect("count")

    result = pipeline.execute()["count_words"]
    assert as_windows(result.by_window("reduce")) == word_count_oracle
    assert as_windows(result.by_window("count")) == word_count_oracle


class SumAndCount(AggregateFunction):
    """(sum of amounts, number of records) per city."""

    def init(self):
        return (0, 0)

    def add(self, acc, record):
        return (acc[0] + record[1], acc[1] + 1)

    def merge(self, left, right):
        return (left[0] + right[0], left[1] + right[1])

    def result(self, acc):
        return acc


@pytest.mark.parametrize("parallelism", [3])
def test_windowed_keyed_aggregate_matches_dataframe_query(make_env, parallelism, sum_count_oracle):
    records = city_amounts()
    pipeline = make_env(parallelism).pipeline("oracle-aggregate")

    @pipeline.task
    def sum_per_city(ctx):
        (ctx.source(records, SizeTumblingWindow(WINDOW_RECORDS), parallelism=1)
            .key_by(lambda r: r[0])
            .aggregate(SumAndCount())
            .collect("totals"))

    result = pipeline.execute()["sum_per_city"]
    got = {w: {city: tuple(value) for city, value in values.items()}
           for w, values in as_windows(result.by_window("totals")).items()}
    assert got == sum_count_oracle


SOURCE_TASKS = 3
TASK_WINDOW = 300  # records per source task per window: 1,000 per task, so 4 windows


@pytest.fixture(scope="module")
def parallel_source_oracle(spark) -> dict[int, dict[str, tuple[int, int]]]:
    """(running sum of amounts, running count) per (window, city) when SOURCE_TASKS source tasks
    read the records: task ``p % SOURCE_TASKS`` reads record ``p`` as its ``p // SOURCE_TASKS``-th,
    so its window is ``(p // SOURCE_TASKS) // TASK_WINDOW + 1``."""
    records = spark.createDataFrame([(i, city, amount) for i, (city, amount)
                                     in enumerate(city_amounts())],
                                    "position long, city string, amount long")
    window = F.floor(F.floor(F.col("position") / SOURCE_TASKS) / TASK_WINDOW) + 1
    per_window = (records.withColumn("window", window).groupBy("window", "city")
                  .agg(F.sum("amount").alias("total"), F.count(F.lit(1)).alias("n")))
    rows = _running_totals(per_window, "city", ["total", "n"]).collect()
    return _windows(rows, "city", lambda row: (row["total"], row["n"]))


@pytest.mark.parametrize("parallelism", [2])
def test_counts_and_aggregates_sent_by_several_source_tasks(make_env, parallelism,
                                                            parallel_source_oracle):
    """Every source task sends records of every city in every window (on Spark each sends one
    pre-combined count or accumulator per city and receiving task); the receiving tasks must end
    each window with the DataFrame's running totals, and the operators must count every record."""
    records = city_amounts()
    pipeline = make_env(parallelism).pipeline("oracle-parallel-source")

    @pipeline.task
    def per_city(ctx):
        cities = (ctx.source(records, SizeTumblingWindow(TASK_WINDOW), parallelism=SOURCE_TASKS)
                  .key_by(lambda r: r[0]))
        cities.count().with_name("city_count").collect("counts")
        cities.aggregate(SumAndCount()).with_name("city_sum").collect("totals")

    result = pipeline.execute()["per_city"]
    totals = {w: {city: tuple(value) for city, value in values.items()}
              for w, values in as_windows(result.by_window("totals")).items()}
    assert totals == parallel_source_oracle
    counts = as_windows(result.by_window("counts"))
    assert counts == {w: {city: n for city, (_, n) in values.items()}
                      for w, values in parallel_source_oracle.items()}
    for name in ("city_count", "city_sum"):
        seen = sum(w.operators[name].records_in for w in result.windows if name in w.operators)
        assert seen == RECORDS, f"{name} counted {seen} input records, the input has {RECORDS}"
