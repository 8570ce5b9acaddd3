"""Window semantics (size, all, processing time), and the same per-window results for any
parallelism, batch size and number of windows in flight."""

from __future__ import annotations

import itertools
import time
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gyreflow.api import (
    AggregateFunction,
    AllWindow,
    GeneratorSource,
    SizeTumblingWindow,
    TimeTumblingWindow,
)

# --- helpers -----------------------------------------------------------------------------------


def run(env, build, name: str = "job"):
    pipeline = env.pipeline("windows")
    pipeline.task(build, name=name)
    return pipeline.execute()[name]


def collect_source(env, data, window, source_parallelism=None):
    result = run(env, lambda ctx: ctx.source(data, window, parallelism=source_parallelism)
                 .collect("out"))
    return result.by_window("out")


def size_window_oracle(data: list, size: int, parallelism: int) -> dict[int, Counter]:
    """By definition: source task i reads data[i::p] and cuts it into chunks of ``size``; window
    w holds chunk w of every task. No empty trailing window; an empty input is one empty window."""
    windows: dict[int, Counter] = {}
    for task in range(parallelism):
        share = data[task::parallelism]
        for start in range(0, len(share), size):
            windows.setdefault(start // size + 1, Counter()).update(share[start:start + size])
    return windows or {1: Counter()}


def as_multisets(by_window: dict[int, list]) -> dict[int, Counter]:
    return {window: Counter(records) for window, records in by_window.items()}


def chunks(items: list, size: int) -> list[list]:
    out = [items[i:i + size] for i in range(0, len(items), size)]
    return out or [[]]




# --- size windows ------------------------------------------------------------------------------


LENGTHS = [0, 1, 2, 3, 4, 5, 6, 7, 9, 10]


@pytest.mark.spark_subset(  # on Spark every length once, the sizes in turn
    lambda p: p["size"] == [1, 3, 5][LENGTHS.index(p["length"]) % 3])
@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("size", [1, 3, 5])
def test_size_window_single_task_exact(make_env, length, size):
    data = [f"r{i}" for i in range(length)]
    got = collect_source(make_env(1, **{"runtime.batch_size": 2}), data, SizeTumblingWindow(size))
    expected = {i + 1: chunk for i, chunk in enumerate(chunks(data, size))}
    assert got == expected


@pytest.mark.spark_subset(lambda p: [1, 2, 4].index(p["size"]) + 1 == p["flying"])  # a diagonal
@pytest.mark.parametrize("size", [1, 2, 4])
@pytest.mark.parametrize("flying", [1, 2, 3])
def test_no_empty_trailing_window_when_length_is_a_multiple(make_env, size, flying):
    data = list(range(size * 3))
    got = collect_source(make_env(1, **{"scheduler.max_flying_windows": flying}), data,
                         SizeTumblingWindow(size))
    assert sorted(got) == [1, 2, 3]
    assert all(len(records) == size for records in got.values())


@pytest.mark.parametrize("parallelism", [1, 3])
@pytest.mark.parametrize("window", [SizeTumblingWindow(1), SizeTumblingWindow(4), AllWindow()])
def test_empty_input_is_exactly_one_empty_window(make_env, parallelism, window):
    got = collect_source(make_env(parallelism), [], window)
    assert got == {1: []}


@pytest.mark.parametrize("parallelism", [1, 2, 4])
def test_all_window_is_one_window(make_env, parallelism):
    data = list(range(37))
    got = collect_source(make_env(parallelism, **{"runtime.batch_size": 5}), data, AllWindow())
    assert list(got) == [1]
    assert Counter(got[1]) == Counter(data)


def test_default_window_is_all_window(make_env):
    data = list(range(2500))  # more than one default batch
    result = run(make_env(1), lambda ctx: ctx.source(data).collect("out"))
    assert result.by_window("out") == {1: data}


@pytest.mark.parametrize(("length", "size", "parallelism"),
                         [(12, 2, 3), (24, 3, 4), (8, 4, 2), (30, 5, 3), (6, 1, 2)])
def test_size_window_counts_per_source_task(make_env, length, size, parallelism):
    # Every source task gets the same number of records: each window has size * p records.
    data = list(range(length))
    got = collect_source(make_env(parallelism, **{"runtime.batch_size": 2}), data,
                         SizeTumblingWindow(size))
    assert as_multisets(got) == size_window_oracle(data, size, parallelism)
    assert all(len(records) == size * parallelism for records in got.values())


@pytest.mark.parametrize(("length", "size", "parallelism"),
                         [(3, 1, 2), (5, 2, 2), (4, 1, 3), (7, 3, 2)])
def test_source_tasks_with_different_numbers_of_windows(make_env, length, size, parallelism):
    # Task 0 reads more records than the last task: it has more windows; the run must end cleanly
    # with window w holding chunk w of every task that has one.
    data = list(range(length))
    got = collect_source(make_env(parallelism), data, SizeTumblingWindow(size))
    assert as_multisets(got) == size_window_oracle(data, size, parallelism)


def test_sources_with_different_numbers_of_windows_in_a_union(make_env):
    short = ["s0", "s1", "s2"]
    long = list(range(10))

    def build(ctx):
        ctx.source(long, SizeTumblingWindow(2)).union(
            ctx.source(short, SizeTumblingWindow(2))).collect("out")

    got = run(make_env(1), build).by_window("out")
    oracle = {w: Counter(c) for w, c in enumerate(chunks(long, 2), start=1)}
    for w, c in enumerate(chunks(short, 2), start=1):
        oracle[w].update(c)
    assert as_multisets(got) == oracle


# Window cutting runs in the tasks both hosts share: the Spark host (about a second per run) gets
# fewer examples of the same properties than the in-process host.
EXAMPLES = {"local": 60, "workers": 12, "spark": 12}


def test_window_assignment_property(make_env, environment_type):
    @settings(max_examples=EXAMPLES[environment_type], deadline=None)
    @given(length=st.integers(0, 40), size=st.integers(1, 6), parallelism=st.integers(1, 4),
           batch_size=st.integers(1, 5), flying=st.integers(1, 3))
    def check(length, size, parallelism, batch_size, flying):
        data = [(i, "x" * (i % 3)) for i in range(length)]
        env = make_env(parallelism, **{"runtime.batch_size": batch_size,
                                       "scheduler.max_flying_windows": flying})
        got = collect_source(env, data, SizeTumblingWindow(size))
        assert as_multisets(got) == size_window_oracle(data, size, parallelism)

    check()


def test_window_assignment_property_equal_task_shares(make_env, environment_type):
    @settings(max_examples=EXAMPLES[environment_type], deadline=None)
    @given(windows=st.integers(0, 6), size=st.integers(1, 5), parallelism=st.integers(1, 4),
           batch_size=st.integers(1, 5), flying=st.integers(1, 3))
    def check(windows, size, parallelism, batch_size, flying):
        # Lengths that give every source task the same number of windows.
        data = list(range(windows * size * parallelism))
        env = make_env(parallelism, **{"runtime.batch_size": batch_size,
                                       "scheduler.max_flying_windows": flying})
        got = collect_source(env, data, SizeTumblingWindow(size))
        assert as_multisets(got) == size_window_oracle(data, size, parallelism)

    check()


# --- processing-time windows -------------------------------------------------------------------


@pytest.mark.parametrize("flying", [1, 3])
def test_time_windows_deliver_everything_in_consecutive_windows(make_env, flying):
    def slow():
        for i in range(20):
            if i % 5 == 4:
                time.sleep(0.02)  # longer than the window: the window must end here
            yield i

    env = make_env(1, **{"runtime.batch_size": 1, "scheduler.max_flying_windows": flying})
    got = run(env, lambda ctx: ctx.source(GeneratorSource(slow), TimeTumblingWindow(0.01))
              .collect("out")).by_window("out")
    assert Counter(r for records in got.values() for r in records) == Counter(range(20))
    assert list(got) == list(range(1, len(got) + 1))
    assert len(got) >= 2


# --- parallelism, batch size and windows in flight give the same windows -----------------------

WORDS = [f"w{(i * 7) % 11}" for i in range(48)]


class SumCount(AggregateFunction):
    def init(self):
        return (0, 0)

    def add(self, acc, record):
        return (acc[0] + record, acc[1] + 1)

    def merge(self, left, right):
        return (left[0] + right[0], left[1] + right[1])

    def result(self, acc):
        return acc


def _word_count(ctx):
    (ctx.source(WORDS, SizeTumblingWindow(6), parallelism=1)
     .flat_map(lambda w: [w, w + "x"] if w.endswith("1") else [w])
     .filter(lambda w: w != "w3")
     .map(lambda w: (w, 1)).key_by(lambda kv: kv[0])
     .reduce(lambda a, b: (a[0], a[1] + b[1])).collect("out"))


def _word_count_oracle():
    running: Counter = Counter()
    out = []
    for chunk in chunks(WORDS, 6):
        words = [y for w in chunk for y in ([w, w + "x"] if w.endswith("1") else [w])]
        words = [w for w in words if w != "w3"]
        running.update(words)
        out.append([(w, running[w]) for w in set(words)])
    return out


def _aggregate(ctx):
    (ctx.source(range(40), SizeTumblingWindow(7), parallelism=1)
     .map(lambda x: x * x).with_parallelism(2)
     .key_by(lambda x: x % 5).aggregate(SumCount()).collect("out"))


def _aggregate_oracle():
    totals: dict = {}
    out = []
    for chunk in chunks(list(range(40)), 7):
        touched = set()
        for x in chunk:
            y = x * x
            s, c = totals.get(y % 5, (0, 0))
            totals[y % 5] = (s + y, c + 1)
            touched.add(y % 5)
        out.append([(k, totals[k]) for k in touched])
    return out


def _union_reduce(ctx):
    left = ctx.source(range(30), SizeTumblingWindow(5), parallelism=1)
    right = ctx.source(range(100, 130), SizeTumblingWindow(5), parallelism=1).with_parallelism(1)
    (left.union(right.map(lambda x: x - 100)).key_by(lambda x: x % 4)
     .reduce(lambda a, b: a + b).collect("out"))


def _union_reduce_oracle():
    merged = [a + [x - 100 for x in b]
              for a, b in zip(chunks(list(range(30)), 5), chunks(list(range(100, 130)), 5),
                              strict=True)]
    state: dict = {}
    out = []
    for chunk in merged:
        touched = set()
        for x in chunk:
            state[x % 4] = state.get(x % 4, 0) + x
            touched.add(x % 4)
        out.append([state[k] for k in touched])
    return out


def _join(ctx):
    left = ctx.source([(i % 6, i) for i in range(24)], SizeTumblingWindow(4), parallelism=1)
    right = ctx.source([(i % 4, -i) for i in range(18)], SizeTumblingWindow(3), parallelism=1)
    (left.key_by(lambda r: r[0]).join(right.key_by(lambda r: r[0]),
                                      lambda lrec, rrec: (lrec[1], rrec[1]))
     .collect("out"))


def _join_oracle():
    lefts = chunks([(i % 6, i) for i in range(24)], 4)
    rights = chunks([(i % 4, -i) for i in range(18)], 3)
    return [[(lr[1], rr[1]) for lr in lw for rr in rw if lr[0] == rr[0]]
            for lw, rw in zip(lefts, rights, strict=True)]


def _broadcast_reduce(ctx):
    (ctx.source(range(20), SizeTumblingWindow(6), parallelism=1).broadcast()
     .map(lambda x: (x % 3, 1)).with_parallelism(3)
     .key_by(lambda kv: kv[0]).reduce(lambda a, b: (a[0], a[1] + b[1])).collect("out"))


def _broadcast_reduce_oracle():
    running: Counter = Counter()
    out = []
    for chunk in chunks(list(range(20)), 6):
        keys = Counter(x % 3 for x in chunk for _ in range(3))
        running.update(keys)
        out.append([(k, running[k]) for k in keys])
    return out


def _rebalance_chain(ctx):
    (ctx.source(range(50), SizeTumblingWindow(9), parallelism=1)
     .map(lambda x: x + 1).with_parallelism(2)
     .filter(lambda x: x % 3 != 0).with_parallelism(3)
     .flat_map(lambda x: [x] * (x % 2 + 1))
     .collect("out"))


def _rebalance_chain_oracle():
    return [[y for x in chunk for y in [x + 1] * ((x + 1) % 2 + 1) if (x + 1) % 3 != 0]
            for chunk in chunks(list(range(50)), 9)]


MIXES = {
    "word_count": (_word_count, _word_count_oracle),
    "aggregate": (_aggregate, _aggregate_oracle),
    "union_reduce": (_union_reduce, _union_reduce_oracle),
    "join": (_join, _join_oracle),
    "broadcast_reduce": (_broadcast_reduce, _broadcast_reduce_oracle),
    "rebalance_chain": (_rebalance_chain, _rebalance_chain_oracle),
}


AXES = {"mix": sorted(MIXES), "parallelism": [1, 4], "batch_size": [1, 3, 1024], "flying": [1, 3]}


def all_pairs(axes: dict[str, list]) -> list[tuple]:
    """A small set of combinations in which every pair of values of two axes occurs (greedy)."""
    names = list(axes)
    uncovered = {(i, a, j, b) for i, j in itertools.combinations(range(len(names)), 2)
                 for a in axes[names[i]] for b in axes[names[j]]}
    chosen = []
    candidates = list(itertools.product(*axes.values()))

    def gain(combo) -> int:
        return sum((i, combo[i], j, combo[j]) in uncovered
                   for i, j in itertools.combinations(range(len(names)), 2))

    while uncovered:
        best = max(candidates, key=gain)
        chosen.append(best)
        uncovered -= {(i, best[i], j, best[j])
                      for i, j in itertools.combinations(range(len(names)), 2)}
    return chosen


def test_all_pairs_covers_every_pair():
    chosen = all_pairs(AXES)
    values = list(AXES.values())
    for i, j in itertools.combinations(range(len(values)), 2):
        seen = {(combo[i], combo[j]) for combo in chosen}
        assert seen == set(itertools.product(values[i], values[j])), (i, j)
    assert len(chosen) < len(list(itertools.product(*values)))


# Every combination in process; on Spark, where each window is a Spark job, every pair of values
# (each mix with each parallelism, batch size and number of windows in flight, and so on).
WINDOW_CASES = (
    [pytest.param("local", *combo, id="local-" + "-".join(map(str, combo)))
     for combo in itertools.product(*AXES.values())]
    + [pytest.param("spark", *combo, id="spark-" + "-".join(map(str, combo)))
       for combo in all_pairs(AXES)])


@pytest.mark.parametrize(("environment_type", "mix", "parallelism", "batch_size", "flying"),
                         WINDOW_CASES)
def test_same_windows_for_any_parallelism(make_env, mix, parallelism, batch_size, flying):
    build, oracle = MIXES[mix]
    env = make_env(parallelism, **{"runtime.batch_size": batch_size,
                                   "scheduler.max_flying_windows": flying})
    got = run(env, build).by_window("out")
    expected = {i + 1: Counter(records) for i, records in enumerate(oracle())}
    assert as_multisets(got) == expected


@pytest.mark.parametrize("parallelism", [1, 2, 4])
@pytest.mark.parametrize("batch_size", [1, 3])
def test_parallel_sources_feeding_keyed_state(make_env, parallelism, batch_size):
    # Sources run with the environment's parallelism too: window w is chunk w of every task.
    size = 3
    data = [f"k{(i * 5) % 7}" for i in range(size * 4 * 3)]  # a multiple of size * p for p | 4
    env = make_env(parallelism, **{"runtime.batch_size": batch_size,
                                   "scheduler.max_flying_windows": 2})
    got = run(env, lambda ctx: ctx.source(data, SizeTumblingWindow(size))
              .map(lambda k: (k, 1)).key_by(lambda kv: kv[0])
              .reduce(lambda a, b: (a[0], a[1] + b[1])).collect("out")).by_window("out")
    running: Counter = Counter()
    expected = {}
    for window, records in sorted(size_window_oracle(data, size, parallelism).items()):
        running.update(records)
        expected[window] = Counter((k, running[k]) for k in records)
    assert as_multisets(got) == expected


def test_with_parallelism_on_the_source(make_env):
    data = list(range(16))
    got = collect_source(make_env(1, **{"runtime.batch_size": 1}), data, SizeTumblingWindow(2),
                         source_parallelism=4)
    assert as_multisets(got) == size_window_oracle(data, 2, 4)
