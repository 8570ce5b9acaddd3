"""EmitterService (runtime/dataflow/emitter.py): forward, key-group, broadcast and rebalance routing of
batches, barriers and the end of input to every channel after the records."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gyreflow.plan.graph import Partitioning
from gyreflow.plan.operators import identity
from gyreflow.runtime.dataflow.channels import END_OF_INPUT, Barrier
from gyreflow.runtime.dataflow.emitter import EmitterService, OutputEdge
from gyreflow.runtime.errors import RecordError
from gyreflow.state.keys.keygroups import key_group_of, task_of_key_group

MAX_PARALLELISM = 128


def channels(count: int) -> list[list]:
    return [[] for _ in range(count)]


def emitter(partitioning, outs, key_fn=None, task_index=0):
    edge = OutputEdge(partitioning, [out.append for out in outs], key_fn, "target", task_index)
    return EmitterService([edge], MAX_PARALLELISM)


def records(out: list) -> list:
    return [r for message in out if isinstance(message, list) for r in message]


def placement(key, parallelism: int) -> int:
    """The spec: key group = stable hash % max parallelism, owned by group * p // max parallelism."""
    return task_of_key_group(key_group_of(key, MAX_PARALLELISM), parallelism, MAX_PARALLELISM)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.one_of(st.integers(), st.text(max_size=5)), max_size=60), st.integers(1, 5))
def test_key_partitioning_follows_the_key_groups(keys, parallelism):
    outs = channels(parallelism)
    emit = emitter(Partitioning.KEY, outs, identity)
    emit.emit(list(keys))
    for index, out in enumerate(outs):
        assert all(placement(k, parallelism) == index for k in records(out))
        assert all(type(m) is list for m in out)  # batches, never records one by one
        if parallelism > 1:
            assert all(out)  # a target gets no empty batch
    assert Counter(r for out in outs for r in records(out)) == Counter(keys)


def test_key_partitioning_with_a_key_function_reaches_every_target_and_keeps_keys_together():
    outs = channels(4)
    emit = emitter(Partitioning.KEY, outs, lambda kv: kv[0])
    pairs = [(f"k{i % 50}", i) for i in range(1000)]
    for start in range(0, 1000, 100):
        emit.emit(pairs[start:start + 100])
    homes = {}
    for index, out in enumerate(outs):
        for key, _ in records(out):
            assert homes.setdefault(key, index) == index
    assert set(homes.values()) == {0, 1, 2, 3}
    assert sorted(r for out in outs for r in records(out)) == sorted(pairs)


def test_a_failing_key_function_names_the_record():
    emit = emitter(Partitioning.KEY, channels(2), lambda r: r["id"])
    with pytest.raises(RecordError) as info:
        emit.emit([{"id": 1}, {"name": "x"}])
    assert info.value.record == {"name": "x"}
    assert "key_by of target" in str(info.value)


def test_forward_broadcast_and_rebalance():
    forward = channels(1)
    emitter(Partitioning.FORWARD, forward).emit([1, 2])
    assert forward == [[[1, 2]]]

    broadcast = channels(3)
    emitter(Partitioning.BROADCAST, broadcast).emit([1, 2])
    assert broadcast == [[[1, 2]]] * 3

    rebalance = channels(3)
    emit = emitter(Partitioning.REBALANCE, rebalance, task_index=1)
    for batch in ([1], [2], [3], [4]):
        emit.emit(batch)
    assert rebalance == [[[3]], [[1], [4]], [[2]]]  # round robin from the task's own index


def test_barriers_and_the_end_go_to_every_channel_after_the_records():
    outs = channels(3)
    emit = emitter(Partitioning.KEY, outs, identity)
    emit.emit(list(range(30)))
    emit.barrier(1)
    emit.barrier(2, checkpoint=False)
    emit.end_of_input()
    for out in outs:
        assert out[-3:] == [Barrier(1), Barrier(2, checkpoint=False), END_OF_INPUT]
        assert all(type(m) is list for m in out[:-3])


def test_several_edges_each_get_the_batch():
    first, second = channels(1), channels(2)
    service = EmitterService([
        OutputEdge(Partitioning.FORWARD, [first[0].append]),
        OutputEdge(Partitioning.BROADCAST, [out.append for out in second]),
    ], MAX_PARALLELISM)
    service.emit(["x"])
    service.barrier(4)
    assert first[0] == [["x"], Barrier(4)]
    assert second == [[["x"], Barrier(4)]] * 2
