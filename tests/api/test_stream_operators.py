"""Stream operators that take records one by one (map, flat_map, filter, union, broadcast), and collect.

Each is checked against plain-Python oracles computed from the definitions, over several windows.
"""

from __future__ import annotations

from collections import Counter

import pytest
from _operator_oracles import BATCH, LINES, PARALLELISM, as_multisets, chunks, expect, run

from gyreflow.api import AllWindow, SizeTumblingWindow

# --- map / flat_map / filter ------------------------------------------------------------------


def test_map_single_task_preserves_order_per_window(make_env):
    data = list(range(17))
    result = run(make_env(1, **{"runtime.batch_size": 4}),
                 lambda ctx: ctx.source(data, SizeTumblingWindow(5)).map(lambda x: x * x + 1)
                 .collect("out"))
    expected = {i + 1: [x * x + 1 for x in chunk] for i, chunk in enumerate(chunks(data, 5))}
    assert result.by_window("out") == expected
    assert result.output("out") == [x * x + 1 for x in data]


@pytest.mark.parametrize("parallelism", PARALLELISM)
@pytest.mark.parametrize("batch_size", BATCH)
def test_flat_map_filter_map_chain(make_env, parallelism, batch_size):
    def build(ctx):
        (ctx.source(LINES, SizeTumblingWindow(4), parallelism=1)
         .flat_map(str.split)
         .filter(lambda w: len(w) > 2)
         .map(str.upper)
         .collect("words"))

    result = run(make_env(parallelism, **{"runtime.batch_size": batch_size}), build)
    oracle = []
    for chunk in chunks(LINES, 4):
        words = []
        for line in chunk:
            for word in line.split():
                if len(word) > 2:
                    words.append(word.upper())
        oracle.append(words)
    assert as_multisets(result.by_window("words")) == expect(oracle)


@pytest.mark.parametrize("parallelism", PARALLELISM)
def test_flat_map_with_empty_and_generator_outputs(make_env, parallelism):
    data = list(range(23))

    def explode(x):
        # 0..3 copies: some records produce nothing at all.
        yield from ((x, i) for i in range(x % 4))

    result = run(make_env(parallelism, **{"runtime.batch_size": 2}),
                 lambda ctx: ctx.source(data, SizeTumblingWindow(6), parallelism=1)
                 .flat_map(explode).collect("out"))
    oracle = [[(x, i) for x in chunk for i in range(x % 4)] for chunk in chunks(data, 6)]
    assert as_multisets(result.by_window("out")) == expect(oracle)


@pytest.mark.parametrize("parallelism", PARALLELISM)
def test_filter_that_empties_a_window_keeps_the_window(make_env, parallelism):
    data = [1, 3, 5, 2, 4, 6, 7, 9, 11, 8]  # window 3 (7, 9, 11) has no even record
    result = run(make_env(parallelism),
                 lambda ctx: ctx.source(data, SizeTumblingWindow(3), parallelism=1)
                 .filter(lambda x: x % 2 == 0).collect("out"))
    oracle = [[x for x in chunk if x % 2 == 0] for chunk in chunks(data, 3)]
    assert oracle[2] == [] and len(oracle) == 4
    assert as_multisets(result.by_window("out")) == expect(oracle)


def test_operators_with_different_parallelism_rebalance_every_record(make_env):
    data = list(range(60))

    def build(ctx):
        (ctx.source(data, SizeTumblingWindow(7), parallelism=1)
         .map(lambda x: x * 3).with_parallelism(2)
         .filter(lambda x: x % 2 == 1).with_parallelism(3)
         .map(lambda x: x - 1).with_parallelism(5)
         .collect("out"))

    result = run(make_env(1, **{"runtime.batch_size": 2}), build)
    oracle = [[x * 3 - 1 for x in chunk if (x * 3) % 2 == 1] for chunk in chunks(data, 7)]
    assert as_multisets(result.by_window("out")) == expect(oracle)



# --- union and broadcast -----------------------------------------------------------------------


@pytest.mark.parametrize("parallelism", PARALLELISM)
@pytest.mark.parametrize("batch_size", [1, 1024])
def test_union_of_three_sources_per_window(make_env, parallelism, batch_size):
    a = list(range(0, 12))
    b = [f"b{i}" for i in range(12)]
    c = [(i,) for i in range(12)]

    def build(ctx):
        sa = ctx.source(a, SizeTumblingWindow(4), parallelism=1)
        sb = ctx.source(b, SizeTumblingWindow(4), parallelism=1)
        sc = ctx.source(c, SizeTumblingWindow(4), parallelism=1)
        sa.union(sb, sc).collect("out")

    result = run(make_env(parallelism, **{"runtime.batch_size": batch_size}), build)
    oracle = [x + y + z for x, y, z in zip(chunks(a, 4), chunks(b, 4), chunks(c, 4), strict=True)]
    assert as_multisets(result.by_window("out")) == expect(oracle)


def test_union_of_a_stream_with_itself_doubles_it(make_env):
    data = list(range(9))

    def build(ctx):
        stream = ctx.source(data, SizeTumblingWindow(4)).map(lambda x: x + 100)
        stream.union(stream).collect("out")

    result = run(make_env(1), build)
    oracle = [[x + 100 for x in chunk] * 2 for chunk in chunks(data, 4)]
    assert as_multisets(result.by_window("out")) == expect(oracle)


@pytest.mark.parametrize("parallelism", PARALLELISM)
def test_union_then_keyed_reduce(make_env, parallelism):
    left = [f"w{i % 3}" for i in range(12)]
    right = [f"w{i % 5}" for i in range(12)]

    def build(ctx):
        sl = ctx.source(left, SizeTumblingWindow(3), parallelism=1)
        sr = ctx.source(right, SizeTumblingWindow(3), parallelism=1)
        (sl.union(sr).map(lambda w: (w, 1)).key_by(lambda kv: kv[0])
         .reduce(lambda x, y: (x[0], x[1] + y[1])).collect("out"))

    result = run(make_env(parallelism, **{"runtime.batch_size": 2}), build)
    merged = [x + y for x, y in zip(chunks(left, 3), chunks(right, 3), strict=True)]
    running: Counter = Counter()
    oracle = []
    for chunk in merged:
        running.update(chunk)
        oracle.append([(w, running[w]) for w in set(chunk)])
    assert as_multisets(result.by_window("out")) == expect(oracle)


@pytest.mark.parametrize("parallelism", [1, 2])
def test_broadcast_sends_every_record_to_every_task(make_env, parallelism):
    data = list(range(11))

    def build(ctx):
        (ctx.source(data, SizeTumblingWindow(4), parallelism=1).broadcast()
         .map(lambda x: ("seen", x)).with_parallelism(3).collect("out"))

    result = run(make_env(parallelism, **{"runtime.batch_size": 3}), build)
    oracle = [[("seen", x) for x in chunk for _ in range(3)] for chunk in chunks(data, 4)]
    assert as_multisets(result.by_window("out")) == expect(oracle)


def test_broadcast_from_parallel_source(make_env):
    data = list(range(8))  # 2 source tasks, 4 records each: one window per task

    def build(ctx):
        (ctx.source(data, AllWindow(), parallelism=2).broadcast()
         .map(lambda x: -x).with_parallelism(4).collect("out"))

    result = run(make_env(1), build)
    assert result.by_window("out").keys() == {1}
    assert Counter(result.output("out")) == Counter(-x for x in data for _ in range(4))


def test_broadcast_to_single_task_is_plain(make_env):
    data = ["a", "b", "c"]
    result = run(make_env(1), lambda ctx: ctx.source(data).broadcast().map(str.upper)
                 .collect("out"))
    assert result.output("out") == ["A", "B", "C"]


# --- collecting results ------------------------------------------------------------------------


@pytest.mark.parametrize("parallelism", PARALLELISM)
def test_two_collects_and_output_in_window_order(make_env, parallelism):
    data = list(range(25))

    def build(ctx):
        stream = ctx.source(data, SizeTumblingWindow(6), parallelism=1)
        stream.filter(lambda x: x % 3 == 0).collect("threes")
        stream.map(lambda x: -x).collect("negated")

    env = make_env(parallelism, **{"runtime.batch_size": 2})
    pipeline = env.pipeline("collects")
    pipeline.task(build, name="job")
    result = pipeline.execute()
    windows = chunks(data, 6)
    assert as_multisets(result.by_window("threes")) == expect(
        [[x for x in c if x % 3 == 0] for c in windows])
    assert as_multisets(result["job"].by_window("negated")) == expect(
        [[-x for x in c] for c in windows])
    flat = result.output("negated")
    window_of = {-x: i // 6 + 1 for i, x in enumerate(data)}
    assert Counter(flat) == Counter(-x for x in data)
    order = [window_of[r] for r in flat]
    assert order == sorted(order)


def test_pipeline_tasks_run_in_order_and_are_independent(make_env):
    env = make_env(2)
    pipeline = env.pipeline("two")

    @pipeline.task
    def first(ctx):
        ctx.source(range(10), parallelism=1).map(lambda x: x * 2).collect("doubled")

    @pipeline.task(name="second")
    def _second(ctx):
        ctx.source(["a", "b"], parallelism=1).map(str.upper).collect("upper")

    result = pipeline.execute()
    assert list(result) == ["first", "second"]
    assert Counter(result["first"].output("doubled")) == Counter(range(0, 20, 2))
    assert Counter(result.output("upper")) == Counter(["A", "B"])
    with pytest.raises(KeyError, match="doubled"):
        result["second"].output("doubled")
    with pytest.raises(KeyError, match="nope"):
        result["nope"]
