"""Values leave an operator as they are at that moment: a keyed aggregate or reduce whose accumulator
is mutable (a list, updated in place) emits, per window, exactly what a plain-Python fold over the
records up to that window gives, and later windows never change what an earlier one emitted."""

from __future__ import annotations

from gyreflow.api import AggregateFunction, SizeTumblingWindow

WORDS = ["a", "b", "a", "c", "a", "b", "d", "a", "c", "b", "a", "e"]
SIZE = 4  # records per window: 3 windows


class Collect(AggregateFunction):
    """Every record of a key in one list, appended in place."""

    def init(self):
        return []

    def add(self, accumulator, record):
        accumulator.append(record)
        return accumulator

    def merge(self, left, right):
        left.extend(right)
        return left


def run(env, build):
    pipeline = env.pipeline("values")
    pipeline.task(build, name="job")
    return pipeline.execute()["job"]


def fold_by_window(records: list, key, step, start) -> dict[int, dict]:
    """Oracle: for each window, each key it updated with the fold of its records up to that window."""
    out, state = {}, {}
    for window, first in enumerate(range(0, len(records), SIZE), start=1):
        touched = set()
        for record in records[first:first + SIZE]:
            k = key(record)
            state[k] = step(state[k], record) if k in state else start(record)
            touched.add(k)
        out[window] = {k: repr(state[k]) for k in touched}
    return out


def test_aggregate_with_a_list_accumulator_emits_each_window_as_it_was(make_env):
    result = run(make_env(1), lambda ctx: ctx.source(WORDS, SizeTumblingWindow(SIZE))
                 .key_by().aggregate(Collect()).collect("lists"))
    got = {window: {key: repr(value) for key, value in records}
           for window, records in result.by_window("lists").items()}
    expected = fold_by_window(WORDS, lambda w: w, lambda acc, w: [*acc, w], lambda w: [w])
    assert got == expected
    # An earlier window's value of "a" kept its length after later windows appended to "a".
    assert [len(dict(result.by_window("lists")[w])["a"]) for w in (1, 2, 3)] == [2, 4, 5]


def append_in_place(accumulated: list, record: list) -> list:
    accumulated[1].extend(record[1])
    return accumulated


def test_reduce_that_updates_its_value_in_place_emits_each_window_as_it_was(make_env):
    records = [[word, [index]] for index, word in enumerate(WORDS)]
    expected = fold_by_window(records, lambda r: r[0],
                              lambda acc, r: [acc[0], acc[1] + r[1]], lambda r: [r[0], list(r[1])])
    # The reduce function updates the first record of each key in place: the source gets its own copy.
    source = [[word, list(indexes)] for word, indexes in records]
    result = run(make_env(2), lambda ctx: ctx.source(source, SizeTumblingWindow(SIZE), parallelism=1)
                 .key_by(lambda r: r[0]).reduce(append_in_place).collect("lists"))
    got = {window: {value[0]: repr(value) for value in values}
           for window, values in result.by_window("lists").items()}
    assert got == expected
