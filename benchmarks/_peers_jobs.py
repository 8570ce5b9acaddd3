"""One benchmark job per process: ``python _peers_jobs.py ENGINE WORKLOAD INPUT OUTPUT WINDOW``.

Workloads: ``events`` (JSON lines ``{"key", "ts", "value"}``, event-time 10 s tumbling count per
key; rows ``[key, start, count]``), ``words`` (text lines, one word count; rows ``[word, count]``)
and ``windows`` (text lines cut into windows of WINDOW lines, the cumulative count of every word
seen in a window; rows ``[window, word, count]``, windows numbered from 1). Every engine writes its
rows as JSON lines to OUTPUT. Peer engines are imported only by their own job, so this module runs
in the peers' virtual environment as well as in gyreflow's.
"""

from __future__ import annotations

import json
import math
import sys
from collections import Counter

TUMBLE_SECONDS = 10


class UnsupportedWorkloadError(Exception):
    """An engine cannot express this workload (reported as "not supported", exit status 3)."""


def write_rows(path: str, rows) -> None:
    with open(path, "w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(list(row)) + "\n")


# --- plain Python (the oracle) -------------------------------------------------------------------


def loop_events(input_path: str) -> list:
    counts: Counter = Counter()
    with open(input_path, encoding="utf-8") as lines:
        for line in lines:
            event = json.loads(line)
            counts[(event["key"], math.floor(event["ts"] / TUMBLE_SECONDS) * TUMBLE_SECONDS)] += 1
    return [(key, start, count) for (key, start), count in counts.items()]


def loop_words(input_path: str) -> list:
    counts: Counter = Counter()
    with open(input_path, encoding="utf-8") as lines:
        for line in lines:
            counts.update(line.split())
    return list(counts.items())


def loop_windows(input_path: str, window: int) -> list:
    counts: Counter = Counter()
    rows = []
    with open(input_path, encoding="utf-8") as lines:
        seen: set = set()
        number = 1
        for index, line in enumerate(lines, 1):
            words = line.split()
            counts.update(words)
            seen.update(words)
            if index % window == 0:
                rows.extend((number, word, counts[word]) for word in seen)
                seen, number = set(), number + 1
        if seen:
            rows.extend((number, word, counts[word]) for word in seen)
    return rows


def _windows_part(input_path: str, window: int, first: int, stop: int) -> tuple[list, Counter]:
    """``loop_windows`` over the lines ``[first, stop)`` (whole windows of them): rows with counts
    from the first of these lines on, and the counts at the end."""
    import itertools

    counts: Counter = Counter()
    rows = []
    seen: set = set()
    index = first
    with open(input_path, encoding="utf-8") as lines:
        for index, line in enumerate(itertools.islice(lines, first, stop), first + 1):
            words = line.split()
            counts.update(words)
            seen.update(words)
            if index % window == 0:
                number = index // window
                rows.extend((number, word, counts[word]) for word in seen)
                seen = set()
    if seen:
        rows.extend((-(-index // window), word, counts[word]) for word in seen)
    return rows, counts


def _windows_child(conn, *args) -> None:
    conn.send(_windows_part(*args))
    conn.close()


def loop_windows_two_processes(input_path: str, window: int) -> list:
    """``loop_windows`` in two forked processes, each over half of the windows, sharing nothing
    until they hand back their rows; the second half's counts then add the first half's totals.
    What two processes give a plain loop on this machine, engine or not."""
    import multiprocessing

    with open(input_path, "rb") as data:
        total = sum(block.count(b"\n") for block in iter(lambda: data.read(1 << 20), b""))
    windows = -(-total // window)
    middle = -(-windows // 2) * window  # the first line of the second half
    context = multiprocessing.get_context("fork")
    parts, children = [], []
    for first, stop in ((0, middle), (middle, None)):
        receive, send = context.Pipe(duplex=False)
        child = context.Process(target=_windows_child, args=(send, input_path, window, first, stop))
        child.start()
        send.close()
        parts.append(receive)
        children.append(child)
    (rows, before), (later, _) = (part.recv() for part in parts)
    for child in children:
        child.join()
    rows.extend((number, word, count + before[word]) for number, word, count in later)
    return rows


def run_loop(workload: str, input_path: str, window: int) -> list:
    if workload == "events":
        return loop_events(input_path)
    if workload == "words":
        return loop_words(input_path)
    return loop_windows(input_path, window)


# --- gyreflow through its API, in this process ---------------------------------------------------


def run_gyreflow(workload: str, input_path: str, window: int) -> list:

    import os

    from gyreflow.api import AllWindow, Environment, FileSource, SizeTumblingWindow

    pipeline = Environment.local(progress=False).pipeline(workload)

    @pipeline.task(name="job")
    def job(ctx):
        if workload == "events":  # JSON lines parsed as columns, windowed and counted as arrays
            from gyreflow.api import DirectorySource, Tumbling  # column formats: not for text

            folder, name = os.path.split(os.path.abspath(input_path))
            (ctx.source(DirectorySource(folder, name, format="jsonl", columnar=True),
                        SizeTumblingWindow(100_000)).with_parallelism(1)
             .with_timestamps("ts", max_delay=0.0)
             .key_by("key").window(Tumbling(TUMBLE_SECONDS)).count()
             .collect("rows"))
        elif workload == "words":
            (ctx.source(FileSource(input_path), AllWindow())
             .flat_map(str.split).key_by().count().collect("rows"))
        else:
            (ctx.source(FileSource(input_path), SizeTumblingWindow(window)).with_parallelism(1)
             .flat_map(str.split).key_by().count().collect("rows"))

    result = pipeline.execute()["job"]
    if workload == "events":
        return [(r.key, r.start, r.value) for r in result.output("rows")]
    if workload == "words":
        return list(result.output("rows"))
    return [(number, word, count) for number, records in result.by_window("rows").items()
            for word, count in records]


# --- Bytewax -------------------------------------------------------------------------------------


def run_bytewax(workload: str, input_path: str, window: int) -> list:
    from datetime import UTC, datetime, timedelta

    import bytewax.operators as op
    from bytewax.dataflow import Dataflow
    from bytewax.testing import TestingSink, TestingSource, run_main

    flow = Dataflow(workload)
    rows: list = []

    from bytewax.connectors.files import FileSource

    if workload == "events":
        from bytewax.operators.windowing import EventClock, TumblingWindower, count_window

        epoch = datetime(1970, 1, 1, tzinfo=UTC)
        events = op.map("parse", op.input("in", flow, FileSource(input_path)), json.loads)
        clock = EventClock(lambda e: epoch + timedelta(seconds=e["ts"]),
                           wait_for_system_duration=timedelta(seconds=60))
        windower = TumblingWindower(length=timedelta(seconds=TUMBLE_SECONDS), align_to=epoch)
        counted = count_window("count", events, clock, windower, lambda e: e["key"])
        op.output("out", op.map("row", counted.down,
                                lambda kv: (kv[0], kv[1][0] * TUMBLE_SECONDS, kv[1][1])),
                  TestingSink(rows))
        run_main(flow)
        return rows
    if workload == "words":
        words = op.flat_map("split", op.input("in", flow, FileSource(input_path)), str.split)
        op.output("out", op.count_final("count", words, lambda word: word), TestingSink(rows))
        run_main(flow)
        return rows

    def numbered():
        with open(input_path, encoding="utf-8") as file:
            for index, line in enumerate(file):
                yield index // window + 1, line

    def split(item):
        number, line = item
        return [(word, number) for word in line.split()]

    def count(state, number):
        state = (state or 0) + 1
        return state, (number, state)

    source = TestingSource(numbered(), batch_size=1000)
    pairs = op.flat_map("split", op.input("in", flow, source), split)
    counted = op.stateful_map("count", op.key_on("key", pairs, lambda kv: kv[0]),
                              lambda state, kv: count(state, kv[1]))
    op.output("out", counted, TestingSink(rows))
    run_main(flow)
    last: dict = {}
    for word, (number, total) in rows:   # the last count of a word in a window is its total
        last[(number, word)] = total
    return [(number, word, total) for (number, word), total in last.items()]


def _fold_counter(counts: Counter, line: str) -> Counter:
    counts.update(line.split())
    return counts


def _merge_counters(left: Counter, right: Counter) -> Counter:
    left.update(right)
    return left


def run_bytewax_fast(workload: str, input_path: str, window: int) -> list:
    """Bytewax written for speed, as gyreflow's ``count()`` works: lines folded into a ``Counter``
    (its loop runs in C) per window, then a ``stateful_map`` of running totals over the windows."""
    from datetime import UTC, datetime, timedelta

    import bytewax.operators as op
    from bytewax.dataflow import Dataflow
    from bytewax.testing import TestingSink, TestingSource, run_main

    if workload == "events":
        msg = "count_window is the fast formulation already (see the plain row)"
        raise UnsupportedWorkloadError(msg)
    flow = Dataflow(f"{workload}-fast")
    rows: list = []
    if workload == "words":
        from bytewax.connectors.files import FileSource

        lines = op.key_on("all", op.input("in", flow, FileSource(input_path)), lambda _: "all")
        counted = op.fold_final("count", lines, Counter, _fold_counter)
        op.output("out", op.flat_map("rows", counted, lambda kv: list(kv[1].items())),
                  TestingSink(rows))
        run_main(flow)
        return rows

    from bytewax.operators.windowing import EventClock, TumblingWindower, fold_window

    epoch = datetime(1970, 1, 1, tzinfo=UTC)

    # Line i carries the time i hours: tumbling windows of WINDOW hours are windows of lines
    # (ids from 0). Every line is an hour after the one before, so none is late however long the
    # job takes: an EventClock's watermark also advances with the system clock.
    def numbered():
        with open(input_path, encoding="utf-8") as file:
            for index, line in enumerate(file):
                yield epoch + timedelta(hours=index), line

    def totals(state, window_counts):
        number, counts = window_counts
        state = state if state is not None else Counter()
        state.update(counts)
        return state, [(number + 1, word, state[word]) for word in counts]

    lines = op.key_on("all", op.input("in", flow, TestingSource(numbered(), batch_size=1000)),
                      lambda _: "all")
    clock = EventClock(lambda item: item[0], wait_for_system_duration=timedelta(0))
    windower = TumblingWindower(length=timedelta(hours=window), align_to=epoch)
    folded = fold_window("fold", lines, clock, windower, Counter,
                         lambda counts, item: _fold_counter(counts, item[1]), _merge_counters)
    running = op.stateful_map("totals", folded.down, totals)
    op.output("out", op.flat_map("rows", running, lambda kv: kv[1]), TestingSink(rows))
    run_main(flow)
    return rows


# --- PyFlink (Table/SQL API, batch mode) ---------------------------------------------------------


def run_pyflink(workload: str, input_path: str, window: int) -> list:
    from pyflink.table import EnvironmentSettings, TableEnvironment

    env = TableEnvironment.create(EnvironmentSettings.in_batch_mode())
    env.get_config().set("parallelism.default", "2")
    if workload == "events":
        env.execute_sql(f"""
            CREATE TABLE events (
                `key` STRING, ts DOUBLE, `value` BIGINT,
                rt AS TO_TIMESTAMP_LTZ(CAST(ts * 1000 AS BIGINT), 3),
                WATERMARK FOR rt AS rt
            ) WITH ('connector' = 'filesystem', 'path' = '{input_path}', 'format' = 'json')""")
        query = f"""
            SELECT `key`, UNIX_TIMESTAMP(CAST(window_start AS STRING)) AS start_s, COUNT(*)
            FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(rt), INTERVAL '{TUMBLE_SECONDS}' SECONDS))
            GROUP BY `key`, window_start, window_end"""
        env.get_config().set("table.local-time-zone", "UTC")
    elif workload == "words":
        env.execute_sql(f"""
            CREATE TABLE lines (line STRING)
            WITH ('connector' = 'filesystem', 'path' = '{input_path}', 'format' = 'raw')""")
        query = """
            SELECT word, COUNT(*) FROM lines CROSS JOIN UNNEST(SPLIT(line, ' ')) AS t (word)
            GROUP BY word"""
    else:
        msg = "the filesystem source has no line numbers to cut windows of lines"
        raise UnsupportedWorkloadError(msg)
    with env.execute_sql(query).collect() as results:
        return [tuple(row) for row in results]


# --- Pathway -------------------------------------------------------------------------------------


def run_pathway(workload: str, input_path: str, window: int) -> list:
    import pathway as pw

    if workload == "windows":
        msg = "the reducers see no input order to cut windows of lines"
        raise UnsupportedWorkloadError(msg)
    if workload == "events":
        class Event(pw.Schema):
            key: str
            ts: float
            value: int

        events = pw.io.jsonlines.read(input_path, schema=Event, mode="static")
        table = (events.windowby(pw.this.ts, window=pw.temporal.tumbling(duration=TUMBLE_SECONDS),
                                 instance=pw.this.key)
                 .reduce(key=pw.this._pw_instance, start=pw.this._pw_window_start,
                         count=pw.reducers.count()))
    else:
        lines = pw.io.plaintext.read(input_path, mode="static")
        words = lines.select(word=pw.apply_with_type(str.split, list[str], pw.this.data))
        words = words.flatten(pw.this.word)
        table = words.groupby(pw.this.word).reduce(pw.this.word, count=pw.reducers.count())
    frame = pw.debug.table_to_pandas(table)
    columns = ["key", "start", "count"] if workload == "events" else ["word", "count"]
    return [tuple(row) for row in frame[columns].itertuples(index=False)]


# --- Spark (Structured Streaming for events, DataFrames for words) -------------------------------


def run_spark(workload: str, input_path: str, window: int) -> list:
    import os
    import tempfile

    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F  # noqa: N812
    from pyspark.sql.window import Window

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master("local[2]").appName(f"peers-{workload}")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "4")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        if workload == "events":
            latest: dict = {}

            def keep(batch, _batch_id):
                for row in batch.collect():
                    latest[(row["key"], row["start"])] = row["count"]

            directory = os.path.dirname(input_path)
            stream = (spark.readStream.schema("key STRING, ts DOUBLE, value LONG")
                      .json(directory)
                      .withColumn("rt", F.timestamp_seconds("ts")).withWatermark("rt", "0 seconds")
                      .groupBy(F.window("rt", f"{TUMBLE_SECONDS} seconds"), "key").count()
                      .select("key", F.unix_timestamp("window.start").alias("start"), "count"))
            with tempfile.TemporaryDirectory() as checkpoint:
                query = (stream.writeStream.outputMode("update").foreachBatch(keep)
                         .option("checkpointLocation", checkpoint)
                         .trigger(availableNow=True).start())
                query.awaitTermination()
            return [(key, start, count) for (key, start), count in latest.items()]
        lines = spark.read.text(input_path)
        if workload == "words":
            words = lines.select(F.explode(F.split("value", " ")).alias("word"))
            return [tuple(row) for row in words.groupBy("word").count().collect()]
        numbered = (lines.rdd.zipWithIndex()
                    .map(lambda pair: (pair[1] // window + 1, pair[0][0]))
                    .toDF(["window", "line"]))
        counts = (numbered.select("window", F.explode(F.split("line", " ")).alias("word"))
                  .groupBy("window", "word").count()
                  .withColumn("total", F.sum("count").over(
                      Window.partitionBy("word").orderBy("window"))))
        return [tuple(row) for row in counts.select("window", "word", "total").collect()]
    finally:
        spark.stop()


# --- pyarrow alone (no engine: no windows, state, snapshots or recovery) -------------------------


def run_pyarrow(workload: str, input_path: str, _window: int) -> list:
    """What the machine gives without an engine: pyarrow parses and groups the whole input."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if workload == "events":
        import pyarrow.json as pj

        table = pj.read_json(input_path)
        start = pc.multiply(pc.floor(pc.divide(table["ts"], float(TUMBLE_SECONDS))),
                            float(TUMBLE_SECONDS))
        grouped = (pa.table({"key": table["key"], "start": start})
                   .group_by(["key", "start"]).aggregate([("start", "count")]))
        return list(zip(grouped["key"].to_pylist(), grouped["start"].to_pylist(),
                        grouped["start_count"].to_pylist(), strict=True))
    if workload == "words":
        with open(input_path, encoding="utf-8") as text:
            words = pa.array(text.read().split())
        counted = words.value_counts()
        return list(zip(counted.field("values").to_pylist(), counted.field("counts").to_pylist(),
                        strict=True))
    msg = "a cumulative count per window of lines needs an engine (or a loop) around pyarrow"
    raise UnsupportedWorkloadError(msg)


def run_loop2(workload: str, input_path: str, window: int) -> list:
    if workload != "windows":
        msg = "measured for the main job only (what parallelism 2 can give on this machine)"
        raise UnsupportedWorkloadError(msg)
    return loop_windows_two_processes(input_path, window)


ENGINES = {"loop": run_loop, "loop2": run_loop2, "gyreflow": run_gyreflow, "bytewax": run_bytewax,
           "bytewax-fast": run_bytewax_fast, "pyflink": run_pyflink, "pathway": run_pathway,
           "spark": run_spark, "pyarrow": run_pyarrow}


def main(argv: list[str]) -> int:
    engine, workload, input_path, output, window = argv
    try:
        rows = ENGINES[engine](workload, input_path, int(window))
    except UnsupportedWorkloadError as exc:
        print(f"not supported: {exc}", file=sys.stderr)
        return 3
    write_rows(output, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
