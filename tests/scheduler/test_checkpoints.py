"""The checkpoint lifecycle (scheduler/checkpoints.py), without I/O: pending until every task
acknowledged, completed in window order once the window also finished, aborted with a reason."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gyreflow.scheduler.checkpoints import (
    AbortReason,
    Ack,
    CheckpointStatus,
    CheckpointTracker,
    PendingCheckpoint,
)


def test_every_nth_window_is_requested():
    tracker = CheckpointTracker((1,), snapshot_every=3)
    assert [w for w in range(1, 10) if tracker.requests(w)] == [3, 6, 9]
    assert all(CheckpointTracker((1,)).requests(w) for w in range(1, 5))


def test_acknowledgement_outcomes():
    tracker = CheckpointTracker((1, 2))
    tracker.open(4)
    assert tracker.acknowledge(1, 4) is Ack.SUCCESS
    assert tracker.acknowledge(1, 4) is Ack.DUPLICATE
    assert tracker.acknowledge(9, 4) is Ack.UNKNOWN  # not a task of this cycle
    assert tracker.acknowledge(1, 5) is Ack.UNKNOWN  # no checkpoint of window 5 pending
    aborted = tracker.abort_all(AbortReason.JOB_FAILED)
    assert [(c.window, c.status, c.reason) for c in aborted] == [
        (4, CheckpointStatus.ABORTED, AbortReason.JOB_FAILED)]
    assert aborted[0].acknowledge(2) is Ack.DISCARDED
    assert not tracker.pending


def test_completion_needs_every_acknowledgement_and_the_finished_window_in_order():
    tracker = CheckpointTracker((1, 2))
    for window in (1, 2):
        tracker.open(window)
    for task in (1, 2):
        tracker.acknowledge(task, 2)
    assert tracker.complete_ready(last_finished=2) == []  # window 1 still waits for acks
    tracker.acknowledge(1, 1)
    tracker.acknowledge(2, 1)
    assert [c.window for c in tracker.complete_ready(last_finished=1)] == [1]  # 2 not finished
    assert tracker.last_completed == 1
    done = tracker.complete_ready(last_finished=2)
    assert [(c.window, c.status) for c in done] == [(2, CheckpointStatus.COMPLETED)]
    assert tracker.last_completed == 2 and not tracker.pending


def test_a_task_whose_input_ended_stands_for_later_windows():
    tracker = CheckpointTracker((1, 2))
    tracker.open(3)
    tracker.task_ended(1, 2)  # ended after window 2: acknowledges 3 and every later checkpoint
    tracker.open(5)
    assert tracker.pending[3].acknowledged == {1}
    assert tracker.pending[5].acknowledged == {1}
    tracker.acknowledge(2, 3)
    tracker.acknowledge(2, 5)
    assert [c.window for c in tracker.complete_ready(5)] == [3, 5]


def test_launches_past_the_end_of_the_input_are_cancelled():
    tracker = CheckpointTracker((1,))
    for window in (3, 4, 5):
        tracker.open(window)
    aborted = tracker.cancel_after(3)
    assert [(c.window, c.reason) for c in aborted] == [(4, AbortReason.INPUT_ENDED),
                                                       (5, AbortReason.INPUT_ENDED)]
    assert list(tracker.pending) == [3]


def test_an_incomplete_checkpoint_cannot_complete():
    checkpoint = PendingCheckpoint(1, frozenset({1, 2}))
    checkpoint.acknowledge(1)
    with pytest.raises(ValueError, match=r"missing tasks \[2\]"):
        checkpoint.complete()


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4), st.integers(1, 6), st.data())
def test_random_acknowledgement_orders_complete_exactly_what_a_plain_model_says(tasks, windows, data):
    tracker = CheckpointTracker(range(tasks))
    for window in range(1, windows + 1):
        tracker.open(window)
    acks = [(t, w) for t in range(tasks) for w in range(1, windows + 1)]
    order = data.draw(st.permutations(acks))
    finished_after = data.draw(st.lists(st.integers(0, windows), min_size=len(order),
                                        max_size=len(order)))
    seen: set = set()
    completed: list[int] = []
    finished = 0
    for (task, window), finish in zip(order, finished_after, strict=True):
        tracker.acknowledge(task, window)
        seen.add((task, window))
        finished = max(finished, finish)
        completed.extend(c.window for c in tracker.complete_ready(finished))
        # Model: the longest prefix of windows, up to the finished one, acknowledged by every task.
        model = 0
        while model < min(finished, windows) and all((t, model + 1) in seen for t in range(tasks)):
            model += 1
        assert completed == list(range(1, model + 1))
        assert tracker.last_completed == model
