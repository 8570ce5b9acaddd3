"""Map-side combiners (runtime/dataflow/combine.py): counts, aggregates and associative reduces
combined in the sending task and merged by the receiving operator equal a Counter / a plain fold of
the records, whatever the batches; barriers pass after the combined share of their window; on every
environment a pipeline's output equals a plain-Python oracle."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gyreflow.api import AggregateFunction, SizeTumblingWindow
from gyreflow.plan.execution import ExecutionEdge as Edge
from gyreflow.plan.graph import Partitioning
from gyreflow.plan.operators import AggregateSpec, CountSpec, MapSpec, ReduceSpec, identity
from gyreflow.runtime.dataflow.channels import Barrier
from gyreflow.runtime.dataflow.combine import (
    AGGREGATE,
    COUNT,
    REDUCE,
    AggregateCombiner,
    Combined,
    CountCombiner,
    ReduceCombiner,
    accept_combined,
    combine_kind,
)
from gyreflow.runtime.dataflow.operators import AggregateOperator, CountOperator, ReduceOperator
from gyreflow.state.keys.keygroups import key_group_of, task_of_key_group

MAX_PARALLELISM = 128


class _Table:
    def __init__(self) -> None:
        self.data: dict = {}

    def mark_changed(self, keys) -> None:
        pass


class _State:
    def __init__(self) -> None:
        self.tables: dict = {}

    def table(self, name):
        return self.tables.setdefault(name, _Table())


class _Ctx:
    def __init__(self) -> None:
        self.state = _State()


class Receiver:
    """A receiving task's head operator taking combined messages, and what it emitted per window."""

    def __init__(self, op) -> None:
        op.open(_Ctx())
        accept_combined(op)
        self.op = op
        self.emitted: dict[int, list] = {}
        op.out = lambda batch: self.emitted.setdefault(self.window, []).extend(batch)
        self.window = 1
        self.messages: list = []

    def deliver(self, message) -> None:
        self.messages.append(message)
        if type(message) is list:
            self.op.process_input(0, message)
        elif isinstance(message, Barrier):
            self.window = message.window
            self.op.finish(message.window)


def placement(key, parallelism: int) -> int:
    return task_of_key_group(key_group_of(key, MAX_PARALLELISM), parallelism, MAX_PARALLELISM)


words = st.lists(st.sampled_from(["a", "b", "c", "d", "e", "f", 1, 2, (3, 4)]), max_size=40)


@settings(max_examples=50, deadline=None)
@given(words, words, st.integers(1, 4), st.integers(1, 7))
def test_combined_counts_equal_a_counter_per_window(first, second, parallelism, batch):
    receivers = [Receiver(CountOperator("count", identity)) for _ in range(parallelism)]
    combiner = CountCombiner([r.deliver for r in receivers], identity, MAX_PARALLELISM, "count")
    delivers = [combiner.control(r.deliver) for r in receivers]
    for window, records in ((1, first), (2, second)):
        for start in range(0, len(records), batch):
            combiner.route(records[start:start + batch])
        for deliver in delivers:
            deliver(Barrier(window))
    totals = Counter()
    for window, records in ((1, first), (2, second)):
        totals.update(records)
        expected = {k: totals[k] for k in set(records)}
        got = {}
        for index, receiver in enumerate(receivers):
            for key, count in receiver.emitted.get(window, []):
                assert placement(key, parallelism) == index
                got[key] = count
        assert got == expected
    for receiver in receivers:
        # At most one combined message per window, always before that window's barrier.
        kinds = ["combined" if type(m) is list else m.window for m in receiver.messages]
        assert kinds.count(1) == kinds.count(2) == 1
        assert all(len(m) == 1 and type(m[0]) is Combined for m in receiver.messages if type(m) is list)
    assert sum(r.op.records_in for r in receivers) == len(first) + len(second)


class SumAndCount(AggregateFunction):
    def init(self):
        return [0, 0]

    def add(self, acc, record):
        return [acc[0] + record[1], acc[1] + 1]

    def merge(self, left, right):
        return [left[0] + right[0], left[1] + right[1]]

    def result(self, acc):
        return tuple(acc)


pairs = st.lists(st.tuples(st.sampled_from("abcdef"), st.integers(-5, 5)), max_size=40)


@settings(max_examples=50, deadline=None)
@given(pairs, pairs, st.integers(1, 7))
def test_combined_aggregates_equal_a_plain_fold_per_window(first, second, batch):
    function = SumAndCount()
    key = lambda kv: kv[0]  # noqa: E731 - the key function of both sides
    receiver = Receiver(AggregateOperator("agg", key, function))
    combiner = AggregateCombiner(receiver.deliver, key, function, "agg")
    for window, records in ((1, first), (2, second)):
        for start in range(0, len(records), batch):
            combiner(records[start:start + batch])
        combiner(Barrier(window))
    sums: dict = {}
    for window, records in ((1, first), (2, second)):
        for k, v in records:
            total, n = sums.get(k, (0, 0))
            sums[k] = (total + v, n + 1)
        assert dict(receiver.emitted.get(window, [])) == {k: sums[k] for k in {k for k, _ in records}}
    assert receiver.op.records_in == len(first) + len(second)


def test_only_keyed_counts_aggregates_and_associative_reduces_with_the_same_key_function_combine():
    key = lambda r: r  # noqa: E731
    count = CountSpec(key)
    aggregate = AggregateSpec(key, SumAndCount())
    keyed = Edge(0, 1, Partitioning.KEY, 0, key)
    assert combine_kind(keyed, count) == COUNT
    assert combine_kind(keyed, aggregate) == AGGREGATE
    assert combine_kind(keyed, ReduceSpec(key, max, associative=True)) == REDUCE
    assert combine_kind(keyed, ReduceSpec(key, max)) is None  # not declared associative
    assert combine_kind(keyed, CountSpec(lambda r: r)) is None  # another key function
    assert combine_kind(keyed, MapSpec(str)) is None
    assert combine_kind(Edge(0, 1, Partitioning.FORWARD, 0, key), count) is None


def concatenate(left: tuple, right: tuple) -> tuple:
    """Associative, not commutative: the order of a key's records shows in the result."""
    return (left[0], left[1] + right[1])


texts = st.lists(st.tuples(st.sampled_from("abc"), st.text("xyz", max_size=2)), max_size=40)


@settings(max_examples=50, deadline=None)
@given(texts, texts, st.integers(1, 7))
def test_combined_reduces_equal_a_plain_fold_in_order_per_window(first, second, batch):
    key = lambda kv: kv[0]  # noqa: E731 - the key function of both sides
    receiver = Receiver(ReduceOperator("reduce", key, concatenate))
    combiner = ReduceCombiner(receiver.deliver, key, concatenate, "reduce")
    for window, records in ((1, first), (2, second)):
        for start in range(0, len(records), batch):
            combiner(records[start:start + batch])
        combiner(Barrier(window))
    folded: dict = {}  # the oracle: a plain left fold over the records in order
    for window, records in ((1, first), (2, second)):
        for k, text in records:
            folded[k] = folded.get(k, "") + text
        # reduce emits each updated key's value: a record (key, text)
        assert dict(receiver.emitted.get(window, [])) == {k: folded[k] for k, _ in records}
    kinds = ["combined" if type(m) is list else m.window for m in receiver.messages]
    assert kinds.count(1) == kinds.count(2) == 1  # one message a window, then its barrier
    assert receiver.op.records_in == len(first) + len(second)


def test_an_error_in_a_combined_reduce_names_the_operator_and_the_record():
    from gyreflow.runtime.errors import RecordError

    def fails_on_b(left, right):
        if right[1] == "b":
            raise ValueError("no b")
        return concatenate(left, right)

    combiner = ReduceCombiner(lambda message: None, lambda kv: kv[0], fails_on_b, "reduce")
    try:
        combiner([("k", "a"), ("k", "b")])
    except RecordError as error:
        assert (error.operator, error.record, str(error.cause)) == ("reduce", ("k", "b"), "no b")
    else:
        raise AssertionError("the failing record was not reported")


# Pipelines on every environment ---------------------------------------------------------------

LINES = [" ".join(f"w{(i * 7 + j * 13) % 23}" for j in range(i % 9)) for i in range(240)]
WINDOW = 40  # lines per window and source task


def sums(a: tuple, b: tuple) -> tuple:
    return (a[0], a[1] + b[1])


def test_an_associative_reduce_equals_a_plain_loop_on_every_environment(make_env):
    check_associative_word_count(make_env(2))


@pytest.mark.parametrize("environment_type", ["spark"])
def test_an_associative_reduce_equals_a_plain_loop_in_spark_rounds(make_env, environment_type):
    check_associative_word_count(make_env(2, **{"spark.mode": "rounds"}))


def check_associative_word_count(env) -> None:
    pipeline = env.pipeline("associative")

    @pipeline.task(name="job")
    def job(ctx):
        (ctx.source(LINES, SizeTumblingWindow(WINDOW)).with_parallelism(1).flat_map(str.split)
         .map(lambda w: (w, 1)).key_by(lambda kv: kv[0]).reduce(sums, associative=True)
         .with_name("sum").collect("totals"))

    result = pipeline.execute()
    totals: Counter = Counter()
    expected = {}
    for window, start in enumerate(range(0, len(LINES), WINDOW), start=1):
        words = [w for line in LINES[start:start + WINDOW] for w in line.split()]
        totals.update(words)
        expected[window] = {w: totals[w] for w in words}
    got = {w: dict(records) for w, records in result.by_window("totals").items()}
    assert got == expected
    windows = result["job"].windows  # records_in counts the records a combined value stands for
    seen = sum(w.operators["sum"].records_in for w in windows if "sum" in w.operators)
    assert seen == sum(len(line.split()) for line in LINES)


def test_an_associative_reduce_sees_each_sending_task_s_records_in_order(make_env):
    records = [(f"k{i % 5}", chr(97 + i % 26)) for i in range(300)]
    pipeline = make_env(3).pipeline("in-order")

    @pipeline.task(name="job")
    def job(ctx):
        (ctx.source(records, SizeTumblingWindow(70)).with_parallelism(1).map(tuple)
         .key_by(lambda kv: kv[0]).reduce(concatenate, associative=True).collect("texts"))

    final: dict = {}
    for _window, texts in sorted(pipeline.execute().by_window("texts").items()):
        final.update(dict(texts))
    expected: dict = {}  # one sending task: a left fold in the input's order
    for key, letter in records:
        expected[key] = expected.get(key, "") + letter
    assert final == expected


def pids_of_folds(a: tuple, b: tuple) -> tuple:
    """Counts, and the processes in which the folds ran."""
    import os

    return (a[0], a[1] + b[1], a[2] | b[2] | {os.getpid()})


@pytest.mark.parametrize("environment_type", ["workers", "spark"])
def test_records_fold_in_the_sending_process_before_they_cross(make_env, environment_type):
    # Two source tasks, one per worker process, each sending every key: each key's value was folded
    # in both processes (in the sender, then merged in the key's own task), where without a
    # combine only the key's own task folds.
    pipeline = make_env(2, **{"spark.mode": "workers"}).pipeline("fold-where")
    keys = [f"k{i}" for i in range(13)]  # every source task reads every key

    @pipeline.task(name="job")
    def job(ctx):
        (ctx.source([k for _ in range(30) for k in keys], SizeTumblingWindow(60))
         .map(lambda k: (k, 1, frozenset())).key_by(lambda r: r[0])
         .reduce(pids_of_folds, associative=True).collect("folds"))

    final: dict = {}
    for _window, values in sorted(pipeline.execute().by_window("folds").items()):
        final.update({key: (count, pids) for key, count, pids in values})
    assert {key: count for key, (count, _) in final.items()} == {k: 30 for k in keys}
    assert all(len(pids) == 2 for _, pids in final.values()), final
