"""Map-side combiners of the Spark host (runtime/spark/combine.py): counts and aggregates combined in
the sending task, merged by the receiving operator, equal a Counter / a plain fold of the records,
whatever the batches; barriers pass after the combined share of their window."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from gyreflow.api import AggregateFunction
from gyreflow.plan.execution import ExecutionEdge as Edge
from gyreflow.plan.graph import Partitioning
from gyreflow.plan.operators import AggregateSpec, CountSpec, MapSpec, identity
from gyreflow.runtime.dataflow.channels import Barrier
from gyreflow.runtime.dataflow.operators import AggregateOperator, CountOperator
from gyreflow.runtime.spark.combine import (
    AGGREGATE,
    COUNT,
    AggregateCombiner,
    Combined,
    CountCombiner,
    accept_combined,
    combine_kind,
)
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


def test_only_keyed_counts_and_aggregates_with_the_same_key_function_combine():
    key = lambda r: r  # noqa: E731
    count = CountSpec(key)
    aggregate = AggregateSpec(key, SumAndCount())
    keyed = Edge(0, 1, Partitioning.KEY, 0, key)
    assert combine_kind(keyed, count) == COUNT
    assert combine_kind(keyed, aggregate) == AGGREGATE
    assert combine_kind(keyed, CountSpec(lambda r: r)) is None  # another key function
    assert combine_kind(keyed, MapSpec(str)) is None
    assert combine_kind(Edge(0, 1, Partitioning.FORWARD, 0, key), count) is None
