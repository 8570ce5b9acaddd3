"""Event time against independent oracles: a plain-Python reading of the rules record by record
(``event_time_oracle``) and PySpark DataFrame ``window()`` / ``session_window()`` group-bys over the
records that are not late (the DataFrame engine, not gyreflow's Spark environment). Every test runs
on both environments through ``make_env``."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest
from event_time_oracle import expected
from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812 - the name PySpark documents

from gyreflow.api import (
    AggregateFunction,
    Session,
    SizeTumblingWindow,
    Sliding,
    Tumbling,
    WindowResult,
)


def events(seed: int, kind: str, count: int = 400) -> list[dict]:
    """Generated inputs: in order, out of order within the delay, records far behind, many keys,
    sessions that merge, and gaps of empty time."""
    rng = random.Random(f"{seed}-{kind}")
    keys = [f"k{i}" for i in range(40 if kind == "many-keys" else 5)]
    out = []
    t = 1_000.0
    for _ in range(count):
        t += rng.choice([0, 0.25, 0.5, 1, 2]) if kind != "gaps" else rng.choice([0.5, 1, 30])
        ts = t
        if kind in ("disorder", "far-late", "many-keys") and rng.random() < 0.3:
            ts = t - rng.choice([0.5, 1, 2, 3])
        if kind == "far-late" and rng.random() < 0.08:
            ts = t - rng.choice([20, 60])
        if kind == "sessions" and rng.random() < 0.2:
            t += 9  # a pause: sessions end, and out-of-order ones may bridge two of them
            ts = t - rng.choice([0, 4.5])
        out.append({"ts": ts, "key": rng.choice(keys), "value": rng.randrange(-5, 100)})
    return out


def run_windows(make_env, data: list[dict], assigner, aggs, max_delay: float,
                parallelism: int = 1, lines_per_window: int | None = None, **config):
    """``(result lines, late records)`` of the aggregation ``aggs`` (or a dict of them by name,
    when ``aggs`` is a list: one pipeline computes them all). Processing windows: 50 records
    locally; 200 on Spark, where each is a Spark job (the results never depend on it)."""
    env = make_env(parallelism, **config)
    if lines_per_window is None:
        lines_per_window = 200 if env.config["environment.type"] == "spark" else 50
    names = [aggs] if isinstance(aggs, str) else list(aggs)
    pipeline = env.pipeline("event-time-test")

    @pipeline.task
    def job(ctx):
        source = ctx.source(data, SizeTumblingWindow(lines_per_window)).with_parallelism(1)
        timed = source.with_timestamps(lambda e: e["ts"], max_delay=max_delay).with_parallelism(1)
        value = (lambda e: e["value"])  # noqa: E731
        for agg in names:
            windowed = timed.key_by(lambda e: e["key"]).window(assigner)
            results = windowed.count() if agg == "count" else getattr(windowed, agg)(value)
            results.collect(f"results-{agg}")
            results.late().collect(f"late-{agg}")

    result = pipeline.execute()["job"]
    out = {}
    for agg in names:
        lines = sorted((r.key, r.start, r.end, r.value) for r in result.output(f"results-{agg}"))
        late = sorted(result.output(f"late-{agg}"), key=json.dumps)  # parallel tasks: any order
        out[agg] = (lines, late)
    return out[aggs] if isinstance(aggs, str) else out


CASES = [
    (Tumbling(10), "tumbling:10", "count", 0.0, "in-order"),
    (Tumbling(5), "tumbling:5", "sum", 2.0, "disorder"),
    (Tumbling(7.5), "tumbling:7.5", "max", 1.0, "far-late"),
    (Sliding(10, 2.5), "sliding:10:2.5", "min", 2.0, "disorder"),
    (Sliding(30, 10), "sliding:30:10", "count", 0.0, "gaps"),
    (Session(3), "session:3", "sum", 2.0, "sessions"),
    (Session(1.5), "session:1.5", "count", 3.0, "many-keys"),
    (Session(5), "session:5", "max", 1.0, "far-late"),
]


@pytest.mark.spark_subset(  # on Spark one case per kind of window and the far-late input
    lambda p: p["window"] in ("tumbling:7.5", "sliding:10:2.5", "session:3", "session:5"))
@pytest.mark.parametrize(("assigner", "window", "agg", "delay", "kind"), CASES,
                         ids=[f"{c[1]}-{c[2]}-{c[4]}" for c in CASES])
def test_windows_and_late_records_match_the_record_by_record_oracle(make_env, assigner, window,
                                                                    agg, delay, kind):
    data = events(1, kind)
    want_lines, want_late = expected(data, window, agg, delay)
    lines, late = run_windows(make_env, data, assigner, agg, delay, parallelism=3)
    assert lines == want_lines
    assert late == sorted(want_late, key=json.dumps)
    if kind == "far-late":
        assert late, "the generated input has records far behind the watermark"


def test_results_do_not_depend_on_batches_or_processing_windows(make_env, environment_type):
    """The watermark moves with every record: batch size and processing-window size change when
    results are published, never what they are (Spark: fewer, larger windows; each is a job)."""
    data = events(2, "disorder")
    shapes = ((400, 1024), (7, 1), (33, 5)) if environment_type == "local" else ((400, 1024),
                                                                                 (133, 3))
    runs = [run_windows(make_env, data, Sliding(6, 2), "sum", 1.5, lines_per_window=size,
                        **{"runtime.batch_size": batch})
            for size, batch in shapes]
    assert all(run == runs[0] for run in runs)


def dataframe_oracle(spark: SparkSession, on_time: list[dict], window: str) -> list[tuple]:
    """``(key, start, end, count, sum)`` per key and window, by the DataFrame engine."""
    frame = spark.createDataFrame([(e["key"], float(e["ts"]), e["value"]) for e in on_time],
                                  "key string, ts double, value long")
    frame = frame.withColumn("time", F.timestamp_seconds("ts"))
    kind, _, rest = window.partition(":")
    numbers = rest.split(":")
    if kind == "tumbling":
        column = F.window("time", f"{numbers[0]} seconds")
    elif kind == "sliding":
        column = F.window("time", f"{numbers[0]} seconds", f"{numbers[1]} seconds")
    else:
        column = F.session_window("time", f"{numbers[0]} seconds")
    grouped = frame.groupBy("key", column.alias("w")).agg(F.count("*").alias("n"),
                                                          F.sum("value").alias("total"))
    rows = grouped.select("key", F.unix_micros(F.col("w.start")).alias("start"),
                          F.unix_micros(F.col("w.end")).alias("end"), "n", "total").collect()
    return sorted((r["key"], r["start"] / 1e6, r["end"] / 1e6, r["n"], r["total"]) for r in rows)


@pytest.mark.spark  # the DataFrame oracle runs on Spark in every environment
@pytest.mark.parametrize(("assigner", "window", "kind"), [
    (Tumbling(5), "tumbling:5", "disorder"),
    (Sliding(10, 2.5), "sliding:10:2.5", "far-late"),
    (Session(3), "session:3", "in-order"),
], ids=["tumbling", "sliding", "session"])
def test_window_results_match_a_pyspark_dataframe_group_by(make_env, spark, assigner, window,
                                                           kind):
    """Over the records that are not late (by the plain-Python oracle), gyreflow's count and sum
    per key and window equal the DataFrame engine's. Sessions use in-order input: there a fired
    session is never touched by a later record, so the DataFrame's merging agrees."""
    assert kind != "far-late" or expected(events(3, kind), window, "count", 3.0)[1], "no late record"
    data = events(3, kind)
    # A record out of order by at most 3 s is behind no window end; one 20 s or more behind is
    # behind all of its windows: none is late for some of its sliding windows only (the DataFrame
    # would count such a record in all of them).
    delay = 3.0
    _, late = expected(data, window, "count", delay)
    late_ids = {id(e) for e in late}
    on_time = [e for e in data if id(e) not in late_ids]
    both = run_windows(make_env, data, assigner, ["count", "sum"], delay, parallelism=2)
    (counts, got_late), (sums, _) = both["count"], both["sum"]
    assert got_late == sorted(late, key=json.dumps)
    merged = [(c[0], c[1], c[2], c[3], s[3]) for c, s in zip(counts, sums, strict=True)]
    assert merged == dataframe_oracle(spark, on_time, window)


def test_top_and_aggregate_per_event_time_window(make_env):
    """The highest bid per tumbling window and a mean per sliding window, against plain loops."""
    data = events(4, "disorder")
    env = make_env(2)
    pipeline = env.pipeline("top")

    class Mean(AggregateFunction):
        def init(self):
            return (0, 0)

        def add(self, acc, e):
            return (acc[0] + e["value"], acc[1] + 1)

        def merge(self, a, b):
            return (a[0] + b[0], a[1] + b[1])

        def result(self, acc):
            return acc[0] / acc[1]

    @pipeline.task
    def job(ctx):
        timed = (ctx.source(data, SizeTumblingWindow(200)).with_parallelism(1)
                 .with_timestamps(lambda e: e["ts"], max_delay=3.0).with_parallelism(1))
        (timed.key_by(lambda e: e["key"]).window(Tumbling(10))
         .top(2, by=lambda e: (e["value"], -e["ts"])).collect("top"))
        (timed.key_by(lambda e: e["key"]).window(Sliding(10, 5)).aggregate(Mean()).collect("mean"))

    result = pipeline.execute()["job"]
    groups, _ = expected_groups(data, "tumbling:10", 3.0)
    want_top = sorted((k, s, e, sorted(v, key=lambda r: (r["value"], -r["ts"]), reverse=True)[:2])
                      for (k, s, e), v in groups.items())
    got_top = sorted((r.key, r.start, r.end, r.value) for r in result.output("top"))
    assert got_top == want_top
    groups, _ = expected_groups(data, "sliding:10:5", 3.0)
    want_mean = {(k, s, e): sum(r["value"] for r in v) / len(v) for (k, s, e), v in groups.items()}
    got_mean = {(r.key, r.start, r.end): r.value for r in result.output("mean")}
    assert got_mean.keys() == want_mean.keys()
    assert all(got_mean[k] == pytest.approx(want_mean[k]) for k in want_mean)


def expected_groups(data, window, delay):
    """The oracle's records per (key, start, end) rather than an aggregate."""
    from event_time_oracle import fixed

    kind, _, rest = window.partition(":")
    numbers = [float(x) for x in rest.split(":")]
    size = numbers[0]
    slide = numbers[1] if kind == "sliding" else size
    tagged = [dict(e, value=i) for i, e in enumerate(data)]
    groups, late = fixed(tagged, size, slide, delay)
    return {key: [data[i] for i in values] for key, values in groups.items()}, late


# --- per processing window ------------------------------------------------------------------------


def test_per_window_count_aggregate_and_top_are_each_windows_own(make_env):
    words = [random.Random(5).choice("abcdefg") for _ in range(700)]
    env = make_env(3)
    pipeline = env.pipeline("per-window")

    @pipeline.task
    def job(ctx):
        keyed = ctx.source(words, SizeTumblingWindow(100)).with_parallelism(1).key_by()
        keyed.window().count().collect("count")
        keyed.window().sum(lambda _w: 2).collect("sum")
        keyed.window().top(2, by=lambda w: w).collect("top")
        ctx.source(words, SizeTumblingWindow(100)).with_parallelism(1).map_with_context(
            lambda w, c: (c.window, w)).collect("context")

    result = pipeline.execute()["job"]
    for window in range(1, 8):
        chunk = words[(window - 1) * 100:window * 100]
        counts = Counter(chunk)
        assert sorted(result.by_window("count")[window]) == sorted(counts.items())
        assert sorted(result.by_window("sum")[window]) == sorted((w, 2 * n) for w, n in counts.items())
        assert sorted(result.by_window("top")[window]) == sorted((w, [w] * min(2, n))
                                                                 for w, n in counts.items())
        assert result.by_window("context")[window] == [(window, w) for w in chunk]


def test_event_time_windows_need_timestamps(make_env):
    env = make_env(1)
    pipeline = env.pipeline("no-timestamps")

    @pipeline.task
    def job(ctx):
        ctx.source([1, 2]).key_by().window(Tumbling(5)).count().collect()

    with pytest.raises(TypeError, match="with_timestamps"):
        pipeline.execute()


# --- stream-table join ----------------------------------------------------------------------------


def test_join_table_enriches_with_the_latest_value_and_forgets_after_its_ttl(make_env):
    """Prices change over windows; orders see the price of their key as of their window's end."""
    rng = random.Random(6)
    stream = []
    for window in range(1, 6):
        for _ in range(30):
            if rng.random() < 0.3 and window < 3:
                stream.append(("price", rng.choice("xyz"), rng.randrange(100), window))
            else:
                stream.append(("order", rng.choice("xyzw"), rng.randrange(10), window))
    by_window = [[r for r in stream if r[3] == w] for w in range(1, 6)]
    for records in by_window:
        assert len(records) == 30
    env = make_env(2)
    pipeline = env.pipeline("table")

    @pipeline.task
    def job(ctx):
        records = ctx.source(stream, SizeTumblingWindow(30)).with_parallelism(1)
        orders = records.filter(lambda r: r[0] == "order").key_by(lambda r: r[1])
        prices = records.filter(lambda r: r[0] == "price").key_by(lambda r: r[1])
        orders.join_table(prices, lambda o, p: (o[1], o[2], p), value=lambda p: p[2],
                          ttl=2).collect("joined")
        orders.join_table(prices, value=lambda p: p[2], inner=False).collect("left")

    result = pipeline.execute()["job"]
    expiring: dict = {}  # key -> (price, window of its update), forgotten 2 windows later
    lasting: dict = {}
    want, want_left = {}, {}
    for window, records in enumerate(by_window, start=1):
        for r in records:
            if r[0] == "price":
                expiring[r[1]] = (r[2], window)
                lasting[r[1]] = r[2]
        orders = [o for o in records if o[0] == "order"]
        want[window] = sorted((o[1], o[2], expiring[o[1]][0]) for o in orders if o[1] in expiring)
        want_left[window] = sorted(((o, lasting.get(o[1])) for o in orders), key=repr)
        expiring = {k: v for k, v in expiring.items() if window - v[1] < 2}
    got = result.by_window("joined")
    assert {w: sorted(got.get(w, [])) for w in range(1, 6)} == want
    assert want[3] and not want[5], "prices joined, then the ttl expired them all"
    left = result.by_window("left")
    assert {w: sorted(left.get(w, []), key=repr) for w in range(1, 6)} == want_left


def test_window_results_are_records_with_names(make_env):
    env = make_env(1)
    pipeline = env.pipeline("named")

    @pipeline.task
    def job(ctx):
        (ctx.source([{"t": 1.5}], SizeTumblingWindow(1)).with_timestamps(lambda r: r["t"])
         .key_by(lambda r: "k").window(Tumbling(1)).count().map(json.dumps).collect())

    assert pipeline.execute()["job"].output("collect") == [json.dumps(WindowResult("k", 1.0, 2.0, 1))]


# --- several timestamp tasks ------------------------------------------------------------------------


def test_the_watermark_is_the_minimum_over_timestamp_tasks(make_env):
    """Task 0's time runs ten times faster than task 1's. Windows fire by the slower task: had the
    faster one's watermark counted, task 1's records would all be late."""
    items = []
    for j in range(60):
        items.append(("fast", 10.0 * j))  # read by source task 0 (even positions)
        items.append(("slow", float(j)))  # read by source task 1
    env = make_env(2)
    pipeline = env.pipeline("two-clocks")

    @pipeline.task
    def job(ctx):
        windowed = (ctx.source(items, SizeTumblingWindow(12)).with_parallelism(2)
                    .with_timestamps(lambda r: r[1], max_delay=0.0).with_parallelism(2)
                    .key_by(lambda r: r[0]).window(Tumbling(30)))
        counts = windowed.count()
        counts.collect("counts")
        counts.late().collect("late")

    result = pipeline.execute()["job"]
    assert result.output("late") == []
    want = Counter((key, (ts // 30) * 30) for key, ts in items)
    got = {(r.key, r.start): r.value for r in result.output("counts")}
    assert got == dict(want)


def quiet_second_task(task_index, parallelism):
    """Task 0: 40 records over 0.4 s of processing time, ends at 0.6 s; task 1: nothing for 1.2 s,
    then ends (the last of the two)."""
    import time

    if task_index == 0:
        for i in range(40):
            yield ("k", float(i))
            time.sleep(0.01)
    time.sleep(1.2 if task_index == 1 else 0.2)


@pytest.mark.parametrize("idle_timeout", [None, 0.25])
def test_an_idle_timestamp_task_stops_holding_the_watermark(make_env, environment_type,
                                                            idle_timeout):
    if environment_type == "spark":
        pytest.skip("processing-time pacing of live sources is measured on the local environment")
    from gyreflow.api import GeneratorSource, TimeTumblingWindow

    env = make_env(2)
    pipeline = env.pipeline("idle")

    @pipeline.task
    def job(ctx):
        (ctx.source(GeneratorSource(quiet_second_task), TimeTumblingWindow(0.2)).with_parallelism(2)
         .with_timestamps(lambda r: r[1], idle_timeout=idle_timeout).with_parallelism(2)
         .key_by(lambda r: r[0]).window(Tumbling(10)).count().collect("counts"))

    by_window = pipeline.execute()["job"].by_window("counts")
    results = sorted((r.start, r.value) for rs in by_window.values() for r in rs)
    assert results == [(0.0, 10), (10.0, 10), (20.0, 10), (30.0, 10)]
    last = max(by_window)
    early = [w for w, rs in by_window.items() if rs and w < last]
    if idle_timeout is None:
        assert not early, "windows fired while a silent task held the watermark back"
    else:
        assert early, "the idle task still held the watermark back"


def test_a_window_function_sees_its_window_and_records(make_env):
    data = events(7, "disorder", count=120)
    env = make_env(2)
    pipeline = env.pipeline("apply")

    @pipeline.task
    def job(ctx):
        (ctx.source(data, SizeTumblingWindow(40)).with_parallelism(1)
         .with_timestamps(lambda e: e["ts"], max_delay=3.0).with_parallelism(1)
         .key_by(lambda e: e["key"]).window(Tumbling(10))
         .apply(lambda key, records, w: (key, w.start, w.end, sorted(r["value"] for r in records)))
         .collect("event"))
        (ctx.source(data, SizeTumblingWindow(40)).with_parallelism(1).key_by(lambda e: e["key"])
         .window().apply(lambda key, records, w: (w.window, len(records))).collect("processing"))

    result = pipeline.execute()["job"]
    groups, _ = expected_groups(data, "tumbling:10", 3.0)
    want = sorted((k, s, e, sorted(r["value"] for r in v)) for (k, s, e), v in groups.items())
    assert sorted(r.value for r in result.output("event")) == want
    assert all((r.key, r.start, r.end) == r.value[:3] for r in result.output("event"))
    for window in range(1, 4):
        chunk = Counter(e["key"] for e in data[(window - 1) * 40:window * 40])
        got = dict(result.by_window("processing")[window])
        assert got == {key: (window, n) for key, n in chunk.items()}
