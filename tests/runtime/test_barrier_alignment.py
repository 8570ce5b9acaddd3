"""Barrier alignment (runtime/dataflow/fetch.py): a task finishes window w only after the barrier of w
arrived on every input channel that has not ended, and processes no record of a later window before."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gyreflow.runtime.dataflow.channels import END_OF_INPUT, Barrier
from gyreflow.runtime.dataflow.fetch import FetchService, Worker


class Log:
    """What a worker did, in order: ("records", ordinal, batch), ("finish", w, checkpoint), ("end",)."""

    def __init__(self, channels: int) -> None:
        self.events: list = []
        self.worker = Worker(list(range(10, 10 + channels)), self.process, self.finish, self.end)

    def process(self, ordinal, batch):
        self.events.append(("records", ordinal, list(batch)))

    def finish(self, window, checkpoint):
        self.events.append(("finish", window, checkpoint))

    def end(self):
        self.events.append(("end",))


def test_a_window_finishes_only_when_every_channel_sent_its_barrier():
    log = Log(2)
    w = log.worker
    w.on_message(0, ["a"])
    w.on_message(0, Barrier(1))
    w.on_message(0, ["next"])  # window 2 on channel 0: held back until window 1 is aligned
    assert log.events == [("records", 10, ["a"])]
    w.on_message(1, ["b"])
    assert log.events[-1] == ("records", 11, ["b"])
    w.on_message(1, Barrier(1))
    assert log.events[-2:] == [("finish", 1, True), ("records", 10, ["next"])]


def test_the_barrier_carries_whether_the_window_is_snapshotted():
    log = Log(2)
    for channel in (0, 1):
        log.worker.on_message(channel, Barrier(3, checkpoint=False))
    assert log.events == [("finish", 3, False)]


def test_an_ended_channel_is_not_waited_for_and_the_end_comes_once():
    log = Log(3)
    w = log.worker
    w.on_message(2, END_OF_INPUT)
    w.on_message(0, Barrier(1))
    w.on_message(1, Barrier(1))
    assert log.events == [("finish", 1, True)]
    w.on_message(0, END_OF_INPUT)
    w.on_message(1, ["late"])
    w.on_message(1, END_OF_INPUT)
    assert log.events[1:] == [("records", 11, ["late"]), ("end",)]
    assert w.ended


def test_a_barrier_of_another_window_during_alignment_is_refused():
    log = Log(2)
    log.worker.on_message(0, Barrier(1))
    with pytest.raises(RuntimeError, match="barrier of window 2"):
        log.worker.on_message(1, Barrier(2))


def test_the_fetch_service_hands_messages_to_its_worker():
    log = Log(1)
    FetchService(log.worker).on_message(0, [1, 2])
    assert log.events == [("records", 10, [1, 2])]


@st.composite
def interleavings(draw):
    """Per channel a sequence of windows of records, then the order in which channels send."""
    channels = draw(st.integers(1, 4))
    windows = draw(st.integers(1, 4))
    streams = []
    for c in range(channels):
        stream = []
        for w in range(1, windows + 1):
            count = draw(st.integers(0, 3))
            stream.extend([(c, w, i)] for i in range(count))
            stream.append(Barrier(w, checkpoint=w % 2 == 0))
        stream.append(END_OF_INPUT)
        streams.append(stream)
    order = draw(st.permutations([c for c, s in enumerate(streams) for _ in s]))
    return channels, windows, streams, order


@settings(max_examples=60, deadline=None)
@given(interleavings())
def test_records_of_a_window_are_processed_between_the_previous_finish_and_its_own(case):
    channels, windows, streams, order = case
    log = Log(channels)
    positions = [0] * channels
    for channel in order:
        log.worker.on_message(channel, streams[channel][positions[channel]])
        positions[channel] += 1
    finishes = [e for e in log.events if e[0] == "finish"]
    assert finishes == [("finish", w, w % 2 == 0) for w in range(1, windows + 1)]
    assert log.events[-1] == ("end",)
    current = 1
    seen = []
    for event in log.events:
        if event[0] == "finish":
            current = event[1] + 1
        elif event[0] == "records":
            (channel, window, index), = event[2]
            assert window == current, f"record of window {window} processed in window {current}"
            assert event[1] == 10 + channel
            seen.append((channel, window, index))
    expected = [r[0] for s in streams for r in s if isinstance(r, list)]
    assert sorted(seen) == sorted(expected)
