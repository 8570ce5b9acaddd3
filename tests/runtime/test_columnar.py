"""Columnar batches (runtime/dataflow/columns/batch.py): Arrow record batches from ``ArrowSource`` and
``DirectorySource(format="parquet", columnar=True)`` stay columnar through ``key_by("column")``
routing and ``count()``, and user functions see dicts.

Oracles: ``collections.Counter`` and plain-Python loops over the rows as written; on every
environment (in-process, worker processes, Spark). Property tests: column batches survive a
process boundary (pickle, as Arrow IPC) with every type, nulls, empty and huge strings; counting a
column equals a Counter of its values whatever the batches; a reader read in random sizes and
resumed from any offset gives every row once.
"""

from __future__ import annotations

import pickle
import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_rebalance import running_counts

from gyreflow.api import (
    AllWindow,
    ArrowSource,
    DirectorySource,
    SizeTumblingWindow,
    UserFunctionError,
    col,
)
from gyreflow.plan.graph import Partitioning
from gyreflow.runtime.dataflow.columns.batch import (
    Column,
    ColumnAggregate,
    ColumnBatch,
    PendingCounts,
    concat,
)
from gyreflow.runtime.dataflow.emitter import EmitterService, KeyGroupLoad, OutputEdge
from gyreflow.state.keys.keygroups import key_group_of, task_of_key_group

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

VOCABULARY = ["a", "b", "café", "", "x" * 300, None, "Ärger", "w0"]


def make_words(count: int, seed: int = 7) -> list:
    rng = random.Random(seed)
    return [rng.choice(VOCABULARY) for _ in range(count)]


def source_of(rows: list[dict], form: str, rows_per_batch: int):
    """``rows`` as the test's form asks: Arrow columns (an ArrowSource) or the dicts themselves."""
    if form == "columns":
        return ArrowSource(pa.Table.from_pylist(rows), rows_per_batch=rows_per_batch)
    return rows


def final_counts(records: list[tuple]) -> dict:
    last: dict = {}
    for key, count in records:
        last[key] = count
    return last


# Pipelines on every environment ---------------------------------------------------------------


def test_a_column_count_per_window_equals_a_counter(make_env):
    words = make_words(1_000)
    table = pa.table({"word": words, "n": list(range(len(words)))})
    pipeline = make_env(1).pipeline("columns")

    @pipeline.task
    def count(ctx):
        ctx.source(ArrowSource(table, rows_per_batch=97), SizeTumblingWindow(250)) \
            .key_by("word").count().collect("counts")

    result = pipeline.execute()["count"]
    assert {w: dict(records) for w, records in result.by_window("counts").items()} == \
        running_counts(words, 250)


def test_batches_of_a_generator_are_routed_by_column_to_parallel_counts(make_env):
    words = make_words(3_000, seed=11)

    def batches(task_index, parallelism):  # each source task its own share, in batches of 101
        share = words[task_index::parallelism]
        for start in range(0, len(share), 101):
            yield {"word": share[start:start + 101]}

    pipeline = make_env(2).pipeline("routed")

    @pipeline.task
    def count(ctx):
        ctx.source(ArrowSource(batches)).key_by("word").count().with_parallelism(3) \
            .collect("counts")

    assert final_counts(pipeline.execute()["count"].output("counts")) == Counter(words)


def test_user_functions_see_each_record_as_a_dict(make_env):
    table = pa.table({"word": ["a", "bb", None, "ccc"], "n": [1, 2, 3, 4]})
    pipeline = make_env(2).pipeline("rows")

    @pipeline.task
    def rows(ctx):
        source = ctx.source(ArrowSource(table))
        source.filter(lambda r: r["word"] is not None).map(lambda r: (r["word"], r["n"] * 10)) \
            .collect("mapped")
        source.key_by(lambda r: r["n"] % 2).count().collect("by_parity")

    result = pipeline.execute()["rows"]
    assert sorted(result.output("mapped")) == [("a", 10), ("bb", 20), ("ccc", 40)]
    assert final_counts(result.output("by_parity")) == {0: 2, 1: 2}


def test_columns_and_rows_meet_in_a_union(make_env):
    columns = make_words(400, seed=3)
    rows = [{"word": w} for w in make_words(300, seed=4)]
    pipeline = make_env(2).pipeline("union")

    @pipeline.task
    def both(ctx):
        merged = ctx.source(ArrowSource(pa.table({"word": columns}))).union(ctx.source(rows))
        merged.key_by("word").count().collect("counts")
        merged.map(lambda r: r["word"]).collect("words")

    result = pipeline.execute()["both"]
    everything = columns + [r["word"] for r in rows]
    assert final_counts(result.output("counts")) == Counter(everything)
    assert Counter(result.output("words")) == Counter(everything)


def test_a_columnar_parquet_directory_counts_what_was_written(make_env, tmp_path):
    folder = tmp_path / "words"
    folder.mkdir()
    written = []
    for index, size in enumerate((500, 0, 333, 1)):  # an empty file and a one-row file too
        words = make_words(size, seed=index)
        written += words
        pq.write_table(pa.table({"word": pa.array(words, pa.string()), "i": list(range(size))}),
                       folder / f"part-{index}.parquet", row_group_size=64)
    pipeline = make_env(1).pipeline("parquet")

    @pipeline.task
    def count(ctx):
        source = ctx.source(DirectorySource(folder, "*.parquet", format="parquet", columnar=True),
                            SizeTumblingWindow(200))
        source.key_by("word").count().collect("counts")
        source.map(lambda r: r["i"]).collect("rows")

    result = pipeline.execute()["count"]
    assert {w: dict(r) for w, r in result.by_window("counts").items()} == \
        running_counts(written, 200)
    assert len(result.output("rows")) == len(written)


def test_a_whole_input_window_counts_on_every_environment(make_env):
    # One AllWindow: on Spark a batch job, which runs in rounds mode (each window a Spark job).
    words = make_words(2_000, seed=5)
    pipeline = make_env(2).pipeline("batch")

    @pipeline.task
    def count(ctx):
        ctx.source(ArrowSource(pa.table({"word": words})), AllWindow()).key_by("word").count() \
            .collect("counts")

    assert dict(pipeline.execute()["count"].output("counts")) == Counter(words)


def aggregate_oracle(rows: list[dict], window: int, kind: str) -> dict[int, dict]:
    """Window w -> each key seen in window w with its sum/min/max/mean over windows 1..w of the
    non-None values (a plain loop)."""
    seen: dict = {}
    expected = {}
    for number, start in enumerate(range(0, len(rows), window), start=1):
        chunk = rows[start:start + window]
        for row in chunk:
            seen.setdefault(row["city"], [])
            if row["price"] is not None:
                seen[row["city"]].append(row["price"])
        result = {}
        for city in {row["city"] for row in chunk}:
            values = seen[city]
            if kind == "sum":
                result[city] = sum(values)
            elif kind == "mean":
                result[city] = sum(values) / len(values) if values else None
            else:
                result[city] = (min if kind == "min" else max)(values) if values else None
        expected[number] = result
    return expected


@pytest.mark.parametrize("form", ["columns", "rows"])
def test_sum_min_max_and_mean_of_a_column_equal_a_plain_loop(make_env, form):
    rng = random.Random(17)
    cities = ["Oslo", "Rome", None, "Lima"]
    rows = [{"city": rng.choice(cities),
             "price": rng.choice([None, rng.randint(-50, 50), 2**62 + rng.randint(0, 9)])}
            for _ in range(600)]
    source = source_of(rows, form, rows_per_batch=64)
    pipeline = make_env(2).pipeline("aggregates")

    @pipeline.task
    def prices(ctx):
        keyed = ctx.source(source, SizeTumblingWindow(150)).with_parallelism(1).key_by("city")
        for kind in ("sum", "min", "max", "mean"):
            getattr(keyed, kind)("price").collect(kind)

    result = pipeline.execute()["prices"]
    for kind in ("sum", "min", "max"):
        assert {w: dict(r) for w, r in result.by_window(kind).items()} == \
            aggregate_oracle(rows, 150, kind), kind
    means = {w: dict(r) for w, r in result.by_window("mean").items()}
    expected = aggregate_oracle(rows, 150, "mean")
    assert {w: set(m) for w, m in means.items()} == {w: set(m) for w, m in expected.items()}
    for window, by_city in expected.items():
        for city, mean in by_city.items():
            assert means[window][city] == (None if mean is None else pytest.approx(mean)), city


def test_a_missing_key_column_names_the_operator_and_the_column(make_env):
    pipeline = make_env(1).pipeline("missing")

    @pipeline.task
    def count(ctx):
        ctx.source(ArrowSource(pa.table({"word": ["a"]}))).key_by("wrod").count() \
            .with_name("tally").collect("counts")

    with pytest.raises(UserFunctionError) as raised:
        pipeline.execute()
    text = str(raised.value)
    assert "'wrod'" in text and "word" in text, text


# Parts, against plain loops ---------------------------------------------------------------------

@st.composite
def record_batches(draw):
    size = draw(st.integers(0, 40))
    kinds = {
        "text": st.one_of(st.none(), st.text(max_size=30)),
        "big": st.sampled_from(["", "é\r\n" * 3_000, "x" * 100_000, '"quoted",\n']),
        "int": st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
        "float": st.one_of(st.none(), st.floats(allow_nan=False)),
        "bool": st.one_of(st.none(), st.booleans()),
        "bytes": st.one_of(st.none(), st.binary(max_size=30)),
    }
    data = {name: draw(st.lists(kind, min_size=size, max_size=size)) for name, kind in kinds.items()}
    schema = pa.schema([("text", pa.string()), ("big", pa.string()), ("int", pa.int64()),
                        ("float", pa.float64()), ("bool", pa.bool_()), ("bytes", pa.binary())])
    return pa.RecordBatch.from_pydict(data, schema=schema), data


@settings(max_examples=60)
@given(record_batches())
def test_a_column_batch_crosses_a_process_boundary_unchanged(drawn):
    batch, data = drawn
    crossed = pickle.loads(pickle.dumps(ColumnBatch(batch), protocol=5))
    assert crossed.data.schema == batch.schema
    rows = [dict(zip(data, values, strict=True)) for values in zip(*data.values(), strict=True)]
    assert crossed.rows() == rows


@settings(max_examples=60)
@given(st.lists(st.lists(st.one_of(st.none(), st.sampled_from(VOCABULARY), st.text(max_size=3)),
                         max_size=50), max_size=8))
def test_counting_a_column_equals_a_counter_whatever_the_batches(chunks):
    counts: dict = {}
    pending = PendingCounts()
    for chunk in chunks:
        pending.add(ColumnBatch(pa.record_batch({"w": pa.array(chunk, pa.string())})),
                    Column("w"), counts)
    pending.fold(counts)
    assert counts == Counter(w for chunk in chunks for w in chunk)


@settings(max_examples=60)
@given(st.lists(st.one_of(st.none(), st.integers(-5, 5)), max_size=120), st.integers(1, 4),
       st.sampled_from(["plain", "dictionary", "dictionary slice"]))
def test_routing_by_column_sends_each_row_to_its_key_groups_task(keys, parallelism, encoding):
    received: list[list] = [[] for _ in range(parallelism)]
    edge = OutputEdge(Partitioning.KEY, [received[t].append for t in range(parallelism)],
                      Column("k"), "count")
    emitter = EmitterService([edge], 128)
    column = pa.array(keys, pa.int64())
    if encoding != "plain":  # as a columnar Parquet source reads text: codes into a dictionary
        column = column.dictionary_encode()
    batch = ColumnBatch(pa.record_batch({"k": column, "i": list(range(len(keys)))}))
    if encoding == "dictionary slice":  # a slice uses only some of its dictionary's values
        keys = keys[len(keys) // 3:]
        batch = batch[len(batch) // 3:]
        batch = ColumnBatch(batch.data.set_column(1, "i", pa.array(range(len(keys)), pa.int64())))
    emitter.emit(batch)
    for task, messages in enumerate(received):
        for message in messages:
            assert type(message) is ColumnBatch
        rows = [row for message in messages for row in message.rows()]
        expected = [{"k": k, "i": i} for i, k in enumerate(keys)
                    if task_of_key_group(key_group_of(k, 128), parallelism, 128) == task]
        assert rows == expected  # a task's rows keep the order they came in
    if parallelism > 1:  # one target task: the batch goes as it is, uncounted
        load = emitter.loads["count"]
        assert isinstance(load, KeyGroupLoad) and load.total == len(keys)


@settings(max_examples=40)
@given(st.lists(st.integers(0, 30), min_size=1, max_size=6), st.lists(st.integers(1, 50),
                                                                        min_size=1, max_size=20),
       st.data())
def test_an_arrow_reader_read_in_any_sizes_and_resumed_anywhere_gives_every_row_once(
        sizes, reads, data):
    rows = list(range(sum(sizes)))
    chunks, start = [], 0
    for size in sizes:
        chunks.append({"n": rows[start:start + size]})
        start += size
    reader = ArrowSource(lambda: iter(chunks), rows_per_batch=7).create_reader(0, 1)
    got: list = []
    stop_at = data.draw(st.integers(0, len(reads)))
    for count in reads[:stop_at]:
        batch = reader.read(count)
        assert len(batch) <= count
        got += [r["n"] for r in (batch.rows() if batch else [])]
    resumed = ArrowSource(lambda: iter(chunks)).create_reader(0, 1)
    resumed.seek(reader.offset())
    while batch := resumed.read(13):
        got += [r["n"] for r in batch.rows()]
    assert got == rows


@settings(max_examples=60)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", None]),
                          st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1))), max_size=40),
       st.sampled_from(["sum", "min", "max", "mean"]))
def test_an_aggregate_of_a_column_batch_equals_the_same_aggregate_of_its_rows(pairs, kind):
    function = ColumnAggregate(kind, "v")
    rows = [{"k": k, "v": v} for k, v in pairs]
    by_rows: dict = {}
    for row in rows:
        by_rows[row["k"]] = function.add(by_rows.get(row["k"], function.init()), row)
    batch = ColumnBatch(pa.RecordBatch.from_pylist(
        rows, schema=pa.schema([("k", pa.string()), ("v", pa.int64())])))
    by_columns = function.add_columns(batch, Column("k"))
    assert {k: function.result(a) for k, a in by_columns.items()} == \
        {k: function.result(a) for k, a in by_rows.items()}


def test_batches_whose_columns_differ_in_type_are_joined_with_promotion():
    joined = concat([ColumnBatch(pa.record_batch({"n": [1, 2]})),
                     ColumnBatch(pa.record_batch({"n": [0.5]})),
                     ColumnBatch(pa.record_batch({"n": [3], "extra": ["x"]}))])
    assert joined.rows() == [{"n": 1.0, "extra": None}, {"n": 2.0, "extra": None},
                             {"n": 0.5, "extra": None}, {"n": 3.0, "extra": "x"}]


def test_a_count_across_batches_of_two_types_keeps_both():
    counts: dict = {}
    pending = PendingCounts()
    pending.add(ColumnBatch(pa.record_batch({"k": [1, 2, 1]})), Column("k"), counts)
    pending.add(ColumnBatch(pa.record_batch({"k": ["1", "2"]})), Column("k"), counts)
    pending.fold(counts)
    assert counts == Counter([1, 2, 1, "1", "2"])


# Column predicates ----------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["columns", "rows"])
def test_a_column_filter_keeps_what_a_plain_condition_keeps(make_env, form):
    rng = random.Random(23)
    rows = [{"city": rng.choice(["Oslo", "Rome", None]), "price": rng.choice([None, *range(-5, 30)])}
            for _ in range(500)]
    source = source_of(rows, form, rows_per_batch=50)
    pipeline = make_env(2).pipeline("filters")

    @pipeline.task
    def cheap(ctx):
        kept = ctx.source(source).filter(
            ((col("price") >= 3) & (col("price") < 20)) | col("city").is_null())
        kept.map(lambda r: (r["city"], r["price"])).collect("kept")
        kept.key_by("city").count().collect("per_city")

    def condition(row) -> bool:  # the same condition written out
        price = row["price"]
        return (price is not None and 3 <= price < 20) or row["city"] is None

    expected = [(r["city"], r["price"]) for r in rows if condition(r)]
    result = pipeline.execute()["cheap"]
    assert Counter(result.output("kept")) == Counter(expected)
    assert final_counts(result.output("per_city")) == Counter(city for city, _ in expected)


@st.composite
def predicates(draw, depth: int = 0):
    """A predicate and the plain-Python condition it stands for, built side by side."""
    roll = draw(st.integers(0, 5 if depth < 3 else 2))
    if roll <= 1:
        symbol = draw(st.sampled_from(["==", "!=", "<", "<=", ">", ">="]))
        value = draw(st.integers(-3, 3))
        plain = {"==": lambda v: v == value, "!=": lambda v: v != value,
                 "<": lambda v: v < value, "<=": lambda v: v <= value,
                 ">": lambda v: v > value, ">=": lambda v: v >= value}[symbol]
        made = {"==": col("n") == value, "!=": col("n") != value, "<": col("n") < value,
                "<=": col("n") <= value, ">": col("n") > value, ">=": col("n") >= value}[symbol]
        return made, lambda row: row["n"] is not None and plain(row["n"])
    if roll == 2:
        values = draw(st.lists(st.integers(-3, 3), max_size=3))
        null = draw(st.booleans())
        if null:
            return col("n").is_null(), lambda row: row["n"] is None
        return col("n").isin(values), lambda row: row["n"] is not None and row["n"] in values
    left, left_plain = draw(predicates(depth + 1))
    if roll == 3:
        return ~left, lambda row: not left_plain(row)
    right, right_plain = draw(predicates(depth + 1))
    if roll == 4:
        return left & right, lambda row: left_plain(row) and right_plain(row)
    return left | right, lambda row: left_plain(row) or right_plain(row)


@settings(max_examples=100)
@given(predicates(), st.lists(st.one_of(st.none(), st.integers(-4, 4)), max_size=40))
def test_a_predicate_on_a_batch_and_on_rows_keeps_what_its_plain_condition_keeps(drawn, values):
    predicate, plain = drawn
    rows = [{"n": v} for v in values]
    batch = pa.RecordBatch.from_pylist(rows, schema=pa.schema([("n", pa.int64())]))
    expected = [plain(row) for row in rows]
    assert batch.filter(predicate.mask(batch)).to_pylist() == \
        [row for row, keep in zip(rows, expected, strict=True) if keep]
    assert [predicate(row) for row in rows] == expected


def test_a_predicate_that_cannot_compare_names_the_operator_and_the_record(make_env):
    pipeline = make_env(1).pipeline("mismatch")

    @pipeline.task
    def bad(ctx):
        ctx.source(ArrowSource(pa.table({"city": ["Oslo", "Rome"]}))) \
            .filter(col("city") > 3).with_name("cheap").collect("out")

    with pytest.raises(UserFunctionError) as raised:
        pipeline.execute()
    text = str(raised.value)
    assert "cheap" in text and "Oslo" in text, text


def test_comparing_with_none_is_refused_with_the_way_to_ask_for_nulls():
    with pytest.raises(ValueError, match=r"is_null\(\)"):
        col("city") == None  # noqa: B015, E711 - the comparison is the test


def test_a_value_python_cannot_hold_stops_the_job_naming_the_columns(tmp_path):
    from gyreflow.api import Environment
    from gyreflow.runtime.errors import DataError

    folder = tmp_path / "times"
    folder.mkdir()
    pq.write_table(pa.table({"at": pa.array([1_000_000_001], pa.timestamp("ns")), "k": ["a"]}),
                   folder / "a.parquet")
    pipeline = Environment.local(progress=False).pipeline("nanoseconds")

    @pipeline.task
    def times(ctx):
        source = ctx.source(DirectorySource(folder, "*.parquet", format="parquet", columnar=True))
        source.key_by("k").count().collect("counts")  # on the columns: no row is made
        source.map(lambda r: r["at"]).collect("at")  # rows: the nanoseconds do not fit

    with pytest.raises(DataError, match=r"columns at, k\) cannot be given to a user function"):
        pipeline.execute()
