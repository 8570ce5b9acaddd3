"""A task's snapshots and restore: the state a window changed and the source offset handed to the
writer, and state, offset and sinks read back to a completed window on a rollback."""

from __future__ import annotations

import gc
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import attrs

from gyreflow.runtime.errors import RecordError
from gyreflow.state.keys.keygroups import contiguous_runs, key_group_of
from gyreflow.state.shared.snapshot import (
    SnapshotCorruptedError,
    TaskRecord,
    TaskSnapshot,
    chunks_by_key_group,
    dumps,
    loads,
)

if TYPE_CHECKING:
    from gyreflow.runtime.dataflow.task import Task


def write_snapshot(task: Task, version: int, on_durable: Callable, sized: bool = False) -> None:
    """Hand the state changed since the last snapshot, and the source offset, to the writer;
    ``sized``: ``on_durable`` takes the snapshot's size in bytes.

    Changes are pickled once per key group (``chunks_by_key_group``), not once per key: per-key
    pickling cost more than the rest of a snapshot together.
    """
    cp = task.checkpoints
    chunks = []
    groups = task.ctx.state.max_parallelism
    names = []
    for table in task.ctx.state.tables.values():
        names.extend(table.stored_names)
        for name, changed, removed in table.take_named_changes():
            if not changed and not removed:
                continue
            try:
                chunks.extend(chunks_by_key_group(name, changed, removed, groups, task._groups))
            except Exception as exc:
                raise unstorable(name, changed, removed, groups) from exc
    records = ()
    if task.source_reader is not None:
        offset = (task.source_offset, task.exhausted)
        records = (TaskRecord("source", task.vertex.head.name, task.spec.index, dumps(offset)),)
    snapshot = TaskSnapshot(cp.job, version, task.ctx.state.key_groups, (), records,
                            cp.horizon, tuple(chunks), tuple(names))
    task.last_snapshot = version
    parts = snapshot.by_runs()
    for part in parts[:-1]:  # the writer keeps order: durable once the last part is
        cp.writer.write(part, nothing)
    if sized:
        size = snapshot.size
        cp.writer.write(parts[-1], lambda: on_durable(size))
    else:
        cp.writer.write(parts[-1], on_durable)

def restore(task: Task, window: int, recover_sinks: bool = True, verify: bool = True) -> None:
    """Restore state, source offset and (unless the driver does it) sinks to ``window``; with
    ``verify`` (a resume), first check that the stored state reached ``window``."""
    cp = task.checkpoints
    state = task.ctx.state
    store = cp.store
    # A restore creates millions of objects at once, and every few hundred new objects the
    # cyclic collector would walk the growing state again: it is paused while they are made.
    # A cycle whose input ended before ``window`` wrote its last snapshot and output then.
    reached = min(window, cp.cycle_ends.get(task.cycle, window))
    # Key groups moved (another parallelism or a rebalance): every table of the chain is
    # written whole in the new layout's first snapshot, so that the older layout's storage is
    # needed by no later version and can go.
    relaid = any(v.name in cp.rescaled for v in task.vertex.chain)
    collecting = gc.isenabled()
    gc.disable()
    try:
        for table in state.tables.values():
            data = table.data
            data.clear()
            for name in table.stored_names:
                for run in contiguous_runs(state.key_groups):
                    if verify:
                        store.verify_reached(cp.job, name, run, reached)
                    store.read_into(cp.job, name, run, window, data)
            table.after_restore(relaid)
    finally:
        if collecting:
            gc.enable()
    if task.source_reader is not None:
        found = store.read_record(cp.job, "source", task.vertex.head.name, task.spec.index,
                                  window)
        if found is None and window > 0:
            msg = (f"the offset of source {task.vertex.head.name!r} task {task.spec.index} at "
                   f"window {window} is missing from {store.location()} (job {cp.job!r}): the "
                   "state was damaged or partly deleted; nothing was published or deleted")
            raise SnapshotCorruptedError(msg)
        if found is not None:
            version, blob = found
            offset, exhausted = loads(blob)
            if verify and version < window and not exhausted:
                # Every snapshot of a source still reading records its offset: an older one
                # means the offset of ``window`` was lost, and replaying from it would repeat
                # records of completed windows.
                msg = (f"the offset of source {task.vertex.head.name!r} task {task.spec.index} "
                       f"at window {window} is missing from {store.location()} (job {cp.job!r};"
                       f" the latest is of window {version}): the state was damaged or partly "
                       "deleted; nothing was published or deleted")
                raise SnapshotCorruptedError(msg)
            task.source_reader.seek(offset)
            task.source_offset = offset
            task.exhausted = exhausted
            task.exhausted_at = version if exhausted else 0
            task.lookahead, task.lookahead_error = [], None
    def read_whole(name: str) -> dict:
        """Table ``name`` over every key group: small tables of one entry per task, which a
        task of another layout merges (``restored_across``)."""
        entries: dict = {}
        store.read_into(cp.job, name, range(state.max_parallelism), window, entries)
        return entries

    for op in task.operators:
        op.restored()
        across = getattr(op, "restored_across", None)
        if across is not None:
            across(read_whole)
    start_window = getattr(task.emitter, "start_window", None)
    if start_window is not None:  # batches are dealt as the uninterrupted run dealt them
        start_window(window + 1)
    if recover_sinks:
        for op in task.sinks:
            op.recover(reached)


def nothing() -> None:
    """A snapshot nobody waits for."""


def unstorable(table: str, changed: dict, removed: set, groups: int) -> RecordError:
    """The error for the first key or value of a snapshot that cannot be hashed or pickled."""
    for key, value in [*changed.items(), *((k, None) for k in removed)]:
        try:
            key_group_of(key, groups)
            dumps(key)
            dumps(value)
        except Exception as exc:  # noqa: BLE001
            return RecordError(table, (key, value), exc)
    return RecordError(table, None, RuntimeError("snapshot failed"), located=False)


@attrs.frozen(eq=False)
class TaskCheckpoints:
    """What a task needs to snapshot and restore: the job, the store, the writer, the cadence."""

    job: str
    store: object
    writer: object
    every_window: bool = False  # the host persists every window (tasks that live one round)
    rescaled: frozenset[str] = frozenset()
    horizon: int | None = None  # the oldest retained version, when the caller knows it
    # cycle id -> the window of its last snapshot, for cycles whose input had ended (a resume)
    cycle_ends: Mapping[int, int] = attrs.field(factory=dict)
