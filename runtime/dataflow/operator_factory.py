"""Builds the running operator of a plan's operator spec (stream operators and the graph operator)."""

from __future__ import annotations

from gyreflow.plan import operators as specs
from gyreflow.runtime.dataflow import notifications
from gyreflow.runtime.dataflow.operators import (
    AggregateOperator,
    CollectOperator,
    CountOperator,
    FilterOperator,
    FlatMapOperator,
    JoinOperator,
    MapOperator,
    Operator,
    ReduceOperator,
    SinkOperator,
    UnionOperator,
)
from gyreflow.runtime.dataflow.time import event_time, event_windows, windows


def build_operator(name: str, spec: specs.OperatorSpec) -> Operator:
    """Create the running operator for ``spec``."""
    if isinstance(spec, specs.MapSpec):
        return MapOperator(name, spec.fn)
    if isinstance(spec, specs.FlatMapSpec):
        return FlatMapOperator(name, spec.fn)
    if isinstance(spec, specs.FilterSpec):
        return FilterOperator(name, spec.fn)
    if isinstance(spec, specs.ReduceSpec):
        return ReduceOperator(name, spec.key_fn, spec.fn)
    if isinstance(spec, specs.AggregateSpec):
        return AggregateOperator(name, spec.key_fn, spec.function)
    if isinstance(spec, specs.CountSpec):
        return CountOperator(name, spec.key_fn)
    if isinstance(spec, specs.UnionSpec):
        return UnionOperator(name)
    if isinstance(spec, specs.JoinSpec):
        return JoinOperator(name, spec.left_key, spec.right_key, spec.fn)
    if isinstance(spec, specs.StreamJoinSpec):
        from gyreflow.runtime.dataflow.stream_join import StreamJoinOperator

        return StreamJoinOperator(name, spec.left_key, spec.right_key, spec.fn, spec.how, spec.ttl)
    if isinstance(spec, specs.SinkSpec):
        return SinkOperator(name, spec.sink)
    if isinstance(spec, specs.CollectSpec):
        return CollectOperator(name, spec.name)
    if isinstance(spec, specs.GraphComputeSpec):
        if spec.arrays and spec.versioned:
            from gyreflow.runtime.dataflow.graph.array_versioned_operator import (
                VersionedArrayGraphOperator,
            )

            return VersionedArrayGraphOperator(name, spec)
        if spec.arrays:  # numpy and scipy are imported by the jobs that compute on arrays only
            from gyreflow.runtime.dataflow.graph.array_operator import ArrayGraphOperator

            return ArrayGraphOperator(name, spec)
        if spec.versioned:
            from gyreflow.runtime.dataflow.graph.versioned_operator import VersionedGraphOperator

            return VersionedGraphOperator(name, spec)
        from gyreflow.runtime.dataflow.graph.operator import GraphOperator  # graph jobs only

        return GraphOperator(name, spec)
    if isinstance(spec, specs.ContextMapSpec):
        return windows.ContextMapOperator(name, spec.fn)
    if isinstance(spec, specs.TimestampSpec):
        return event_time.TimestampOperator(name, spec.ts_fn, spec.max_delay, spec.idle_timeout)
    if isinstance(spec, specs.EventWindowSpec):
        return event_windows.EventWindowOperator(name, spec.key_fn, spec.assigner, spec.aggregation)
    if isinstance(spec, specs.WindowAggregateSpec):
        if spec.aggregation is None:
            key_fn = None if spec.key_fn is specs.identity else spec.key_fn
            return windows.WindowCountOperator(name, key_fn)
        return windows.WindowAggregateOperator(name, spec.key_fn, spec.aggregation)
    if isinstance(spec, specs.TableJoinSpec):
        return windows.TableJoinOperator(name, spec.stream_key, spec.table_key, spec.value_fn,
                                           spec.fn, spec.inner, spec.ttl, spec.merged)
    if isinstance(spec, specs.ProcessSpec):
        return notifications.ProcessOperator(name, spec.key_fn, spec.function)
    msg = f"no running operator for {type(spec).__name__}"
    raise TypeError(msg)
