"""Keyed stream operators (reduce, count, aggregate, join) against plain-Python oracles, over windows.

The oracles compute each window's output from the operators' definitions.
"""

from __future__ import annotations

from collections import Counter

import pytest
from _operator_oracles import BATCH, LINES, PARALLELISM, as_multisets, chunks, expect, run

from gyreflow.api import AggregateFunction, SizeTumblingWindow

# --- reduce ------------------------------------------------------------------------------------


def reduce_oracle(windows: list[list], key_fn, fn) -> list[list]:
    """Running state per key across windows; each window emits its updated keys' new values."""
    state: dict = {}
    out = []
    for chunk in windows:
        updated = {}
        for record in chunk:
            key = key_fn(record)
            state[key] = fn(state[key], record) if key in state else record
            updated[key] = state[key]
        out.append(list(updated.values()))
    return out


@pytest.mark.parametrize("parallelism", PARALLELISM)
@pytest.mark.parametrize("batch_size", BATCH)
def test_word_count_reduce_is_cumulative_across_windows(make_env, parallelism, batch_size):
    def build(ctx):
        (ctx.source(LINES, SizeTumblingWindow(3), parallelism=1)
         .flat_map(str.split)
         .map(lambda w: (w, 1))
         .key_by(lambda kv: kv[0])
         .reduce(lambda a, b: (a[0], a[1] + b[1]))
         .collect("counts"))

    result = run(make_env(parallelism, **{"runtime.batch_size": batch_size}), build)
    running: Counter = Counter()
    oracle = []
    for chunk in chunks(LINES, 3):
        window_words = Counter(w for line in chunk for w in line.split())
        running.update(window_words)
        oracle.append([(w, running[w]) for w in window_words])
    assert as_multisets(result.by_window("counts")) == expect(oracle)


@pytest.mark.parametrize("parallelism", PARALLELISM)
def test_reduce_emits_the_reduced_record(make_env, parallelism):
    # (key, value, tag) records; keep the record with the largest value per key.
    data = [(f"k{i % 5}", (i * 37) % 23, i) for i in range(40)]

    def keep_max(a, b):
        return a if a[1] >= b[1] else b

    result = run(make_env(parallelism, **{"runtime.batch_size": 3}),
                 lambda ctx: ctx.source(data, SizeTumblingWindow(9), parallelism=1)
                 .key_by(lambda r: r[0]).reduce(keep_max).collect("out"))
    oracle = reduce_oracle(chunks(data, 9), lambda r: r[0], keep_max)
    assert as_multisets(result.by_window("out")) == expect(oracle)


def test_reduce_first_record_of_a_key_is_emitted_unchanged(make_env, environment_type):
    calls = []

    def concat(a, b):
        calls.append((a, b))
        return a + b

    data = ["a1", "b1", "a2"]
    result = run(make_env(1), lambda ctx: ctx.source(data, SizeTumblingWindow(2))
                 .key_by(lambda s: s[0]).reduce(concat).collect("out"))
    # window 1: a1, b1 are first of their keys; window 2: a1 + a2.
    assert as_multisets(result.by_window("out")) == expect([["a1", "b1"], ["a1a2"]])
    if environment_type == "local":  # on Spark the function runs in worker processes
        assert calls == [("a1", "a2")]


@pytest.mark.parametrize("parallelism", PARALLELISM)
def test_reduce_only_emits_keys_updated_in_the_window(make_env, parallelism):
    data = ["x", "y", "x", "x", "z", "z", "x", "x", "x"]
    result = run(make_env(parallelism),
                 lambda ctx: ctx.source(data, SizeTumblingWindow(3), parallelism=1)
                 .map(lambda k: (k, 1)).key_by(lambda kv: kv[0])
                 .reduce(lambda a, b: (a[0], a[1] + b[1])).collect("out"))
    # windows: [x y x] [x z z] [x x x]
    assert as_multisets(result.by_window("out")) == expect(
        [[("x", 2), ("y", 1)], [("x", 3), ("z", 2)], [("x", 6)]])


@pytest.mark.parametrize("parallelism", PARALLELISM)
@pytest.mark.parametrize("batch_size", [1, 1024])
def test_count_with_identity_and_explicit_keys(make_env, parallelism, batch_size):
    words = [w for line in LINES for w in line.split()]

    def build(ctx):
        stream = ctx.source(words, SizeTumblingWindow(5), parallelism=1)
        stream.key_by().count().with_name("by_word").collect("words")
        stream.key_by(len).count().with_name("by_length").collect("lengths")

    result = run(make_env(parallelism, **{"runtime.batch_size": batch_size}), build)
    for name, key in (("words", lambda w: w), ("lengths", len)):
        running: Counter = Counter()
        oracle = []
        for chunk in chunks(words, 5):
            keys = Counter(key(w) for w in chunk)
            running.update(keys)
            oracle.append([(k, running[k]) for k in keys])
        assert as_multisets(result.by_window(name)) == expect(oracle), name


# --- aggregate ---------------------------------------------------------------------------------


class Stats(AggregateFunction):
    """(count, sum, min, max) of integer values: exact, associative."""

    def init(self):
        return (0, 0, None, None)

    def add(self, acc, record):
        value = record[1]
        count, total, low, high = acc
        return (count + 1, total + value,
                value if low is None else min(low, value),
                value if high is None else max(high, value))

    def merge(self, left, right):
        if left[0] == 0:
            return right
        if right[0] == 0:
            return left
        return (left[0] + right[0], left[1] + right[1], min(left[2], right[2]),
                max(left[3], right[3]))

    def result(self, acc):
        return acc


@pytest.mark.parametrize("parallelism", PARALLELISM)
@pytest.mark.parametrize("batch_size", BATCH)
def test_aggregate_is_cumulative_and_emits_key_result_pairs(make_env, parallelism, batch_size):
    data = [(i % 7 * 11 % 5, (i * 13) % 17 - 8) for i in range(50)]

    result = run(make_env(parallelism, **{"runtime.batch_size": batch_size}),
                 lambda ctx: ctx.source(data, SizeTumblingWindow(8), parallelism=1)
                 .key_by(lambda r: r[0]).aggregate(Stats()).collect("out"))
    # Oracle: per key, the statistics of every value seen so far, emitted in windows touching it.
    seen: dict = {}
    oracle = []
    for chunk in chunks(data, 8):
        touched = []
        for key, value in chunk:
            seen.setdefault(key, []).append(value)
            if key not in touched:
                touched.append(key)
        oracle.append([(k, (len(seen[k]), sum(seen[k]), min(seen[k]), max(seen[k])))
                       for k in touched])
    assert as_multisets(result.by_window("out")) == expect(oracle)


class DistinctWords(AggregateFunction):
    def init(self):
        return frozenset()

    def add(self, acc, record):
        return acc | {record}

    def merge(self, left, right):
        return left | right

    def result(self, acc):
        return len(acc)


@pytest.mark.parametrize("parallelism", PARALLELISM)
def test_aggregate_result_is_applied_to_the_merged_accumulator(make_env, parallelism):
    words = [w for line in LINES for w in line.split()]

    result = run(make_env(parallelism, **{"runtime.batch_size": 2}),
                 lambda ctx: ctx.source(words, SizeTumblingWindow(6), parallelism=1)
                 .key_by(lambda w: w[0]).aggregate(DistinctWords()).collect("out"))
    distinct: dict = {}
    oracle = []
    for chunk in chunks(words, 6):
        touched = set()
        for w in chunk:
            distinct.setdefault(w[0], set()).add(w)
            touched.add(w[0])
        oracle.append([(k, len(distinct[k])) for k in touched])
    assert as_multisets(result.by_window("out")) == expect(oracle)


# --- join --------------------------------------------------------------------------------------


def join_oracle(left_windows, right_windows, left_key, right_key, fn=None) -> list[list]:
    """Nested loops per window over the left and right records of that window."""
    out = []
    for index in range(max(len(left_windows), len(right_windows))):
        lefts = left_windows[index] if index < len(left_windows) else []
        rights = right_windows[index] if index < len(right_windows) else []
        pairs = []
        for lrec in lefts:
            for rrec in rights:
                if left_key(lrec) == right_key(rrec):
                    pairs.append((left_key(lrec), lrec, rrec) if fn is None else fn(lrec, rrec))
        out.append(pairs)
    return out


@pytest.mark.parametrize("parallelism", [1, 3])
@pytest.mark.parametrize("batch_size", BATCH)
def test_join_default_emits_key_left_right_per_window(make_env, parallelism, batch_size):
    left = [(f"u{i % 4}", f"order{i}") for i in range(20)]
    right = [(f"u{(i * 3) % 5}", f"click{i}") for i in range(15)]

    def build(ctx):
        lstream = ctx.source(left, SizeTumblingWindow(4), parallelism=1)
        rstream = ctx.source(right, SizeTumblingWindow(3), parallelism=1)
        lstream.key_by(lambda r: r[0]).join(rstream.key_by(lambda r: r[0])).collect("out")

    result = run(make_env(parallelism, **{"runtime.batch_size": batch_size}), build)
    oracle = join_oracle(chunks(left, 4), chunks(right, 3), lambda r: r[0], lambda r: r[0])
    assert len(oracle) == 5
    assert as_multisets(result.by_window("out")) == expect(oracle)


@pytest.mark.parametrize("parallelism", [1, 3])
def test_join_with_function_and_different_key_functions(make_env, parallelism):
    left = list(range(30))  # key: x % 6
    right = [f"r{i}" for i in range(30)]  # key: int(suffix) % 6 for multiples of 2 only

    def right_key(s):
        return int(s[1:]) % 6

    def build(ctx):
        lstream = ctx.source(left, SizeTumblingWindow(10), parallelism=1).key_by(lambda x: x % 6)
        rstream = (ctx.source(right, SizeTumblingWindow(10), parallelism=1)
                   .filter(lambda s: int(s[1:]) % 2 == 0).key_by(right_key))
        lstream.join(rstream, lambda lrec, rrec: f"{lrec}+{rrec}").collect("out")

    result = run(make_env(parallelism, **{"runtime.batch_size": 4}), build)
    rights = [[s for s in chunk if int(s[1:]) % 2 == 0] for chunk in chunks(right, 10)]
    oracle = join_oracle(chunks(left, 10), rights, lambda x: x % 6, right_key,
                         lambda lrec, rrec: f"{lrec}+{rrec}")
    assert as_multisets(result.by_window("out")) == expect(oracle)


@pytest.mark.parametrize("parallelism", [1, 2])
def test_join_never_matches_across_windows(make_env, parallelism):
    left = ["a", "b", "c", "d"]
    right = ["c", "d", "a", "b"]  # every key meets its partner one window apart

    def build(ctx):
        (ctx.source(left, SizeTumblingWindow(2), parallelism=1).key_by(lambda s: s)
         .join(ctx.source(right, SizeTumblingWindow(2), parallelism=1).key_by(lambda s: s))
         .collect("out"))

    result = run(make_env(parallelism), build)
    assert result.by_window("out") == {1: [], 2: []}


@pytest.mark.parametrize("parallelism", [1, 4])
def test_join_duplicate_keys_give_the_cartesian_product(make_env, parallelism):
    left = [("k", i) for i in range(4)] + [("j", 9)]
    right = [("k", c) for c in "xyz"] + [("m", "w")]

    def build(ctx):
        (ctx.source(left, parallelism=1).key_by(lambda r: r[0])
         .join(ctx.source(right, parallelism=1).key_by(lambda r: r[0]),
               lambda lrec, rrec: (lrec[1], rrec[1]))
         .collect("out"))

    result = run(make_env(parallelism), build)
    assert Counter(result.output("out")) == Counter((i, c) for i in range(4) for c in "xyz")
    assert list(result.by_window("out")) == [1]
