"""Checkpoint lifecycle: a window's snapshot is pending until every task acknowledged it, then
completed or aborted with a reason. Pure bookkeeping, no I/O.

A cycle opens a ``PendingCheckpoint`` when it launches a window that is to be snapshotted; tasks
acknowledge it once their snapshot of that window is durable; a task whose input ended at window
``e`` (its last state durable) stands for every later window. A checkpoint completes when it is fully
acknowledged *and* its window finished (every tail reported it), in window order.

>>> tracker = CheckpointTracker(tasks=(1, 2), snapshot_every=2)
>>> tracker.requests(1), tracker.requests(2)
(False, True)
>>> _ = tracker.open(2)
>>> tracker.acknowledge(1, 2), tracker.acknowledge(1, 2), tracker.acknowledge(1, 3)
(<Ack.SUCCESS: 'success'>, <Ack.DUPLICATE: 'duplicate'>, <Ack.UNKNOWN: 'unknown'>)
>>> tracker.complete_ready(last_finished=2)
[]
>>> _ = tracker.acknowledge(2, 2); [c.window for c in tracker.complete_ready(last_finished=2)]
[2]
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

import attrs

from gyreflow.state.records import define


class Ack(enum.Enum):
    """How an acknowledgement was taken (as Flink classifies them)."""

    SUCCESS = "success"  # counted towards a pending checkpoint
    DUPLICATE = "duplicate"  # this task already acknowledged that checkpoint
    UNKNOWN = "unknown"  # no checkpoint of that window is pending (not requested, or already completed)
    DISCARDED = "discarded"  # the checkpoint was aborted


class CheckpointStatus(enum.Enum):
    """Where a checkpoint is in its lifecycle."""

    PENDING = "pending"
    COMPLETED = "completed"
    ABORTED = "aborted"


class AbortReason(enum.Enum):
    """Why a pending checkpoint will never complete."""

    JOB_FAILED = "a task of the job failed"
    JOB_STOPPED = "the job stopped before the window was durable"
    INPUT_ENDED = "the input ended before the window"  # a launch cancelled past the last window


@define(eq=False)
class PendingCheckpoint:
    """The snapshot of one window, until every task of its cycle acknowledged it."""

    window: int
    tasks: frozenset[int]
    acknowledged: set[int] = attrs.field(factory=set)
    status: CheckpointStatus = CheckpointStatus.PENDING
    reason: AbortReason | None = None

    def acknowledge(self, task: int) -> Ack:
        """Count ``task``'s acknowledgement."""
        if self.status is CheckpointStatus.ABORTED:
            return Ack.DISCARDED
        if task not in self.tasks:
            return Ack.UNKNOWN
        if task in self.acknowledged:
            return Ack.DUPLICATE
        self.acknowledged.add(task)
        return Ack.SUCCESS

    @property
    def fully_acknowledged(self) -> bool:
        """Whether every task acknowledged."""
        return len(self.acknowledged) == len(self.tasks)

    def complete(self) -> None:
        """Mark the checkpoint completed (every acknowledgement in, its window finished)."""
        if self.status is not CheckpointStatus.PENDING or not self.fully_acknowledged:
            msg = f"checkpoint of window {self.window} cannot complete: {self.status.value}, " \
                  f"missing tasks {sorted(self.tasks - self.acknowledged)}"
            raise ValueError(msg)
        self.status = CheckpointStatus.COMPLETED

    def abort(self, reason: AbortReason) -> None:
        """Give the checkpoint up."""
        if self.status is CheckpointStatus.PENDING:
            self.status = CheckpointStatus.ABORTED
            self.reason = reason


class CheckpointTracker:
    """The checkpoints of one cycle: which windows are snapshotted, which are pending, which
    completed (and the last completed window)."""

    def __init__(self, tasks: Iterable[int], snapshot_every: int = 1, last_completed: int = 0) -> None:
        self.tasks = frozenset(tasks)
        self.snapshot_every = snapshot_every
        self.last_completed = last_completed
        self.pending: dict[int, PendingCheckpoint] = {}
        self.ended: dict[int, int] = {}  # task -> the window after which its input ended, state durable

    def requests(self, window: int) -> bool:
        """Whether window ``window`` is to be snapshotted when it is launched (every
        ``snapshot_every``-th window; the last window of the input is snapshotted when it ends)."""
        return window % self.snapshot_every == 0

    def open(self, window: int) -> PendingCheckpoint:
        """A window to snapshot was launched (or turned out to be the last one): its checkpoint is pending."""
        checkpoint = self.pending.get(window)
        if checkpoint is None:
            checkpoint = self.pending[window] = PendingCheckpoint(window, self.tasks)
            for task, end in self.ended.items():
                if end <= window:
                    checkpoint.acknowledge(task)
        return checkpoint

    def acknowledge(self, task: int, window: int) -> Ack:
        """``task``'s snapshot of ``window`` is durable."""
        checkpoint = self.pending.get(window)
        if checkpoint is None:
            return Ack.UNKNOWN
        return checkpoint.acknowledge(task)

    def task_ended(self, task: int, window: int) -> None:
        """``task``'s input ended after ``window`` and its last state is durable: it acknowledges
        every checkpoint from ``window`` on."""
        self.ended.setdefault(task, window)
        for checkpoint in self.pending.values():
            if checkpoint.window >= window:
                checkpoint.acknowledge(task)

    def complete_ready(self, last_finished: int) -> list[PendingCheckpoint]:
        """Complete, in window order, every pending checkpoint whose window finished and that every
        task acknowledged; returns them. A checkpoint waits for the ones before it."""
        done = []
        for window in sorted(self.pending):
            checkpoint = self.pending[window]
            if window > last_finished or not checkpoint.fully_acknowledged:
                break
            checkpoint.complete()
            del self.pending[window]
            self.last_completed = window
            done.append(checkpoint)
        return done

    def cancel_after(self, window: int) -> list[PendingCheckpoint]:
        """The input ended at ``window``: launches past it were cancelled, and so are their checkpoints."""
        return self._abort([w for w in self.pending if w > window], AbortReason.INPUT_ENDED)

    def abort_all(self, reason: AbortReason) -> list[PendingCheckpoint]:
        """Abort every pending checkpoint (the job failed or stopped); returns them."""
        return self._abort(list(self.pending), reason)

    def _abort(self, windows: list[int], reason: AbortReason) -> list[PendingCheckpoint]:
        aborted = []
        for window in sorted(windows):
            checkpoint = self.pending.pop(window)
            checkpoint.abort(reason)
            aborted.append(checkpoint)
        return aborted
