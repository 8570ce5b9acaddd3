"""Event time on columns (runtime/dataflow/time/event_columns.py): ``with_timestamps("ts")``,
``key_by("key")`` and tumbling or sliding ``count()``/``sum``/``min``/``max`` of a column stamp,
assign and aggregate whole column batches, and give what the record-by-record rules give.

Oracles: ``event_time_oracle.fixed`` (a plain-Python reading of the rules, record by record) for
one source task; a ``Counter`` of (key, window) when no record can be late, for several. On every
environment (in-process, worker processes, Spark), from Arrow tables and from JSON lines read as
columns. Property tests: random times out of order, delays, window sizes and batch sizes.
"""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from collections import Counter

import pytest
from event_time_oracle import AGGREGATES, fixed
from hypothesis import given, settings
from hypothesis import strategies as st

from gyreflow.api import (
    ArrowSource,
    DirectorySource,
    Environment,
    SizeTumblingWindow,
    Sliding,
    Tumbling,
    UserFunctionError,
)
from gyreflow.runtime.dataflow.columns.batch import ColumnBatch
from gyreflow.runtime.dataflow.time.event_columns import STAMP_COLUMNS, watermarks_before

pa = pytest.importorskip("pyarrow")


def make_events(count: int, seed: int, disorder: float = 3.0, keys: int = 5) -> list[dict]:
    """Events in rough time order: each late by up to ``disorder`` seconds, some far behind."""
    rng = random.Random(seed)
    events = []
    t = 0.0
    for _ in range(count):
        t += rng.choice([0, 0.25, 0.5, 1.0])
        ts = t - rng.uniform(0, disorder) if rng.random() < 0.4 else t
        if rng.random() < 0.02:
            ts = t - 40
        ts = int(ts) if float(ts).is_integer() and rng.random() < 0.5 else ts
        events.append({"ts": ts, "key": f"k{rng.randrange(keys)}", "value": rng.randrange(-50, 1000)})
    return events


def late_order(record: dict) -> str:
    """A late record's place in a sorted list: its time as a float (a column of times reads 3
    written as 3 or 3.0 alike)."""
    return json.dumps({**record, "ts": float(record["ts"])}, sort_keys=True)


def expected(events: list[dict], size: float, slide: float, delay: float, agg: str):
    groups, late = fixed(events, size, slide, delay)
    results = sorted((key, float(start), float(end), AGGREGATES[agg](values))
                     for (key, start, end), values in groups.items())
    return results, sorted(late, key=late_order)


def windowed(source, assigner, agg: str, delay: float, window_parallelism: int = 1):
    stream = (source.with_parallelism(1).with_timestamps("ts", max_delay=delay)
              .with_parallelism(1).key_by("key").window(assigner))
    results = stream.count() if agg == "count" else getattr(stream, agg)("value")
    results.with_parallelism(window_parallelism).collect("results")
    results.late().collect("late")


def outcome(result) -> tuple[list, list]:
    results = sorted((r.key, float(r.start), float(r.end), r.value)
                     for r in result.output("results"))
    return results, sorted(result.output("late"), key=late_order)


# On every environment -----------------------------------------------------------------------------


@pytest.mark.parametrize(("assigner", "agg"), [
    (Tumbling(10), "count"), (Tumbling(7.5), "sum"), (Sliding(10, 2.5), "max"),
    (Sliding(6, 4), "min")])
def test_columns_give_the_record_by_record_rules(make_env, assigner, agg):
    events = make_events(1_500, seed=5)
    table = pa.Table.from_pylist(events, schema=pa.schema(
        [("ts", pa.float64()), ("key", pa.string()), ("value", pa.int64())]))
    pipeline = make_env(3).pipeline("columns")

    @pipeline.task
    def job(ctx):
        windowed(ctx.source(ArrowSource(table, rows_per_batch=113), SizeTumblingWindow(400)),
                 assigner, agg, 2.0, window_parallelism=3)

    spec = assigner.spec()
    got = outcome(pipeline.execute()["job"])
    assert got == expected(events, spec[1], spec[-1], 2.0, agg)


def test_json_lines_read_as_columns_give_the_rules(make_env, tmp_path):
    events = make_events(1_200, seed=8)
    folder = tmp_path / "events"
    folder.mkdir()
    (folder / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events),
                                         encoding="utf-8")
    pipeline = make_env(2).pipeline("jsonl")

    @pipeline.task
    def job(ctx):
        source = DirectorySource(str(folder), "*.jsonl", format="jsonl", columnar=True)
        windowed(ctx.source(source, SizeTumblingWindow(300)), Tumbling(5), "sum", 1.0, 2)

    got_results, got_late = outcome(pipeline.execute()["job"])
    want_results, want_late = expected(events, 5.0, 5.0, 1.0, "sum")
    assert got_results == want_results
    assert got_late == want_late  # late records as read: 3.0 where the line had 3 (equal)


def test_several_source_tasks_count_every_record_once(make_env):
    """Four source tasks, times never behind: nothing is late, and each (key, window) holds every
    record of it, whatever the order the tasks' batches meet in."""
    rng = random.Random(2)
    events = [{"ts": i * 0.1, "key": f"k{rng.randrange(7)}"} for i in range(4_000)]

    def share(task_index, parallelism):  # each task its own slice of time, in order
        mine = [e for i, e in enumerate(events) if i * parallelism // len(events) == task_index]
        for start in range(0, len(mine), 97):
            part = mine[start:start + 97]
            yield {"ts": [e["ts"] for e in part], "key": [e["key"] for e in part]}

    pipeline = make_env(4).pipeline("sources")

    @pipeline.task
    def job(ctx):
        (ctx.source(ArrowSource(share), SizeTumblingWindow(250)).with_timestamps("ts")
         .key_by("key").window(Tumbling(3)).count().with_parallelism(2).collect("counts"))

    counts = {(r.key, r.start): r.value for r in pipeline.execute()["job"].output("counts")}
    assert counts == Counter((e["key"], math.floor(e["ts"] / 3) * 3.0) for e in events)


# Properties (in process) ----------------------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), count=st.integers(0, 400),
       size=st.sampled_from([1, 2.5, 10]), steps=st.sampled_from([1, 2, 4]),
       delay=st.sampled_from([0, 0.5, 3]), rows_per_batch=st.integers(1, 150),
       agg=st.sampled_from(sorted(AGGREGATES)), integral=st.booleans())
def test_any_times_and_batches_give_the_rules(seed, count, size, steps, delay, rows_per_batch,
                                              agg, integral):
    events = make_events(count, seed, disorder=4 * size)
    if integral:  # whole seconds in an integer column
        events = [{**e, "ts": int(e["ts"])} for e in events]
    kind = pa.int64() if integral else pa.float64()
    table = pa.Table.from_pylist(events, schema=pa.schema(
        [("ts", kind), ("key", pa.string()), ("value", pa.int64())]))
    assigner = Tumbling(size) if steps == 1 else Sliding(size, size / steps)
    pipeline = Environment.local(progress=False).pipeline("property")

    @pipeline.task
    def job(ctx):
        windowed(ctx.source(ArrowSource(table, rows_per_batch=rows_per_batch),
                            SizeTumblingWindow(max(1, count // 3 or 1))), assigner, agg, delay, 2)

    spec = assigner.spec()
    assert outcome(pipeline.execute()["job"]) == expected(events, spec[1], spec[-1], delay, agg)


@settings(max_examples=200, deadline=None)
@given(times=st.lists(st.one_of(st.floats(-1e6, 1e6), st.just(math.nan)), max_size=40),
       latest=st.one_of(st.just(-math.inf), st.floats(-1e6, 1e6)))
def test_the_watermark_before_each_row_is_the_largest_time_before_it(times, latest):
    import numpy as np

    before, after = watermarks_before(np.asarray(times, dtype=np.float64), latest)
    running = latest
    for ts, got in zip(times, before.tolist(), strict=True):
        assert got == running
        if ts > running:  # NaN is never larger: passed over
            running = ts
    assert after == running


@settings(max_examples=200, deadline=None)
@given(pairs=st.lists(st.tuples(st.sampled_from(["a", "b", None, "d"]),
                                st.sampled_from([-20.0, -10.0, 0.0, 10.0, 1e15, 2.5])),
                      max_size=60),
       sliding=st.booleans())
def test_a_batch_counts_each_key_and_window_as_a_counter_does(pairs, sliding):
    """The count of a batch's rows per (key, window start), numbered in numpy, against a Counter;
    a null key counts as None, and a row may join several windows (sliding)."""
    import numpy as np

    from gyreflow.runtime.dataflow.columns.batch import Column
    from gyreflow.runtime.dataflow.time.event_columns import aggregate_windows

    batch = ColumnBatch(pa.record_batch({"key": pa.array([k for k, _ in pairs], pa.string())}))
    rows = list(range(len(pairs))) * (2 if sliding else 1)
    starts = [s for _, s in pairs] + ([s + 5.0 for _, s in pairs] if sliding else [])
    got = aggregate_windows(batch, Column("key"), np.asarray(rows, dtype=np.int64),
                            np.asarray(starts, dtype=np.float64), ("count", None))
    oracle = Counter((pairs[row][0], start) for row, start in zip(rows, starts, strict=True))
    assert sorted(got, key=repr) == sorted(((k, s, n) for (k, s), n in oracle.items()), key=repr)
    assert all(type(n) is int and type(s) is float for _, s, n in got)


def test_rows_after_a_stamped_batch_are_the_row_path_items():
    import numpy as np

    from gyreflow.runtime.dataflow.time.event_columns import stamp

    batch = ColumnBatch(pa.record_batch({"ts": [1.0, 2.0], "key": ["a", "b"]}))
    stamped = stamp(batch, np.array([1.0, 2.0]), np.array([-math.inf, 0.5]), 1, 3)
    assert stamped.data.schema.names == ["ts", "key", *STAMP_COLUMNS]
    assert stamped.rows() == [(1.0, -math.inf, 1, 3, {"ts": 1.0, "key": "a"}),
                              (2.0, 0.5, 1, 3, {"ts": 2.0, "key": "b"})]


# Errors and the row path's fallbacks -------------------------------------------------------------


def test_a_null_time_names_the_operator_and_the_record():
    table = pa.table({"ts": [1.0, None], "key": ["a", "b"]})
    pipeline = Environment.local(progress=False).pipeline("nulls")

    @pipeline.task
    def job(ctx):
        (ctx.source(ArrowSource(table)).with_timestamps("ts").with_name("stamp")
         .key_by("key").window(Tumbling(5)).count().collect("out"))

    with pytest.raises(UserFunctionError) as caught:
        pipeline.execute()
    text = str(caught.value)
    assert "stamp" in text and "'key': 'b'" in text and "NoneType" in text


def test_a_missing_time_column_names_the_columns_there_are():
    table = pa.table({"time": [1.0], "key": ["a"]})
    pipeline = Environment.local(progress=False).pipeline("missing")

    @pipeline.task
    def job(ctx):
        (ctx.source(ArrowSource(table)).with_timestamps("ts").key_by("key")
         .window(Tumbling(5)).count().collect("out"))

    with pytest.raises(UserFunctionError, match=r"no column 'ts'.*\['time', 'key'\]"):
        pipeline.execute()


def test_zoned_timestamps_sessions_and_key_functions_keep_the_rules():
    """Times as zoned timestamps (read as arrays), a session window and a key function (read as
    rows) give what the same job on dicts gives."""
    from datetime import UTC, datetime

    events = [{**e, "ts": round(e["ts"] * 4) / 4} for e in make_events(300, seed=4)]  # exact in µs
    stamps = [datetime.fromtimestamp(1_700_000_000 + e["ts"], UTC) for e in events]
    table = pa.table({"ts": pa.array(stamps, pa.timestamp("us", tz="UTC")),
                      "key": [e["key"] for e in events], "value": [e["value"] for e in events]})
    pipeline = Environment.local(progress=False).pipeline("fallbacks")

    @pipeline.task
    def job(ctx):
        source = ctx.source(ArrowSource(table, rows_per_batch=50), SizeTumblingWindow(120))
        source.with_timestamps("ts", max_delay=2).key_by("key").window(Tumbling(10)).count() \
            .collect("zoned")
        source.with_timestamps("ts", max_delay=2).key_by(lambda r: r["key"]) \
            .window(Tumbling(10)).sum("value").collect("by_function")

    result = pipeline.execute()["job"]
    shifted = [{**e, "ts": 1_700_000_000 + e["ts"]} for e in events]
    for name, agg in (("zoned", "count"), ("by_function", "sum")):
        got = sorted((r.key, r.start, r.end, r.value) for r in result.output(name))
        groups, _ = fixed(shifted, 10.0, 10.0, 2.0)
        assert got == sorted((k, s, e, AGGREGATES[agg](v)) for (k, s, e), v in groups.items())


def test_timestamps_in_a_task_of_their_own_close_every_window_at_the_end(make_env):
    """Two event-time branches of one source: their timestamp operators are not chained to the
    source, and learn from the last barrier that the input ended (every window fires)."""
    events = [{"ts": i * 0.5, "key": f"k{i % 3}"} for i in range(300)]
    pipeline = make_env(1).pipeline("branches")

    @pipeline.task
    def job(ctx):
        source = ctx.source(events, SizeTumblingWindow(120))
        source.with_timestamps(lambda e: e["ts"]).key_by(lambda e: e["key"]) \
            .window(Tumbling(10)).count().collect("rows")
        source.with_timestamps("ts").key_by("key").window(Tumbling(10)).count().collect("named")

    result = pipeline.execute()["job"]
    want = Counter((e["key"], math.floor(e["ts"] / 10) * 10.0) for e in events)
    for name in ("rows", "named"):
        assert {(r.key, r.start): r.value for r in result.output(name)} == want


COLUMNAR_JOB = (
    "import sys\n"
    "from gyreflow.api import DirectorySource, Environment, SizeTumblingWindow, Tumbling\n"
    "pipeline = Environment.local(progress=False).pipeline('events')\n"
    "@pipeline.task(name='job')\n"
    "def job(ctx):\n"
    "    lines = ctx.source(DirectorySource(sys.argv[1], 'events.jsonl', format='jsonl',\n"
    "                                       columnar=True), SizeTumblingWindow(50))\n"
    "    lines.with_parallelism(1).with_timestamps('ts').key_by('key').window(Tumbling(10))\\\n"
    "        .count().collect('rows')\n"
    "rows = pipeline.execute()['job'].output('rows')\n"
    "print(sorted((r.key, r.start, r.value) for r in rows))\n"
    "print(sorted(m for m in ('pyarrow.compute', 'numpy.ma') if m in sys.modules))\n"
)


@pytest.mark.processes
def test_json_lines_counted_in_event_time_import_no_compute_module(tmp_path):
    """JSON lines read as columns, stamped, windowed and counted: the 64-bit check, the times, the
    stamp columns and the key codes need neither pyarrow.compute (30 ms to import) nor numpy.ma
    (which ``pyarrow.array`` of a numpy array imports)."""
    events = [{"ts": i * 0.7, "key": f"k{i % 4}", "value": i} for i in range(300)]
    (tmp_path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events),
                                           encoding="utf-8")
    done = subprocess.run([sys.executable, "-c", COLUMNAR_JOB, str(tmp_path)], capture_output=True,
                          text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    want = Counter((e["key"], math.floor(e["ts"] / 10) * 10.0) for e in events)
    assert done.stdout.splitlines() == [str(sorted((k, s, n) for (k, s), n in want.items())), "[]"]
