"""FetchService and Worker: receive channel messages and align input by window barrier."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from gyreflow.runtime.dataflow.channels import Barrier, EndOfInput
from gyreflow.runtime.dataflow.columns.batch import ColumnBatch


class Worker:
    """Processes a task's input in window order: a window ends when its barrier arrived on every
    input channel that has not ended; until then, channels that already delivered the barrier are
    blocked and their later messages wait (barrier alignment, as in asynchronous barrier snapshots).
    ``finish_window(window, checkpoint)`` gets whether the window's barriers asked for a snapshot.
    """

    def __init__(self, ordinals: list[int], process: Callable[[int, list], None],
                 finish_window: Callable[[int, bool], None], end_of_input: Callable[[], None]) -> None:
        self.ordinals = ordinals
        self.process = process
        self.finish_window = finish_window
        self.end_of_input = end_of_input
        self.active = set(range(len(ordinals)))
        self.blocked: set[int] = set()
        self.barrier_window: int | None = None
        self.barrier_checkpoint = False
        self.barrier_last = True  # every barrier of the window being aligned said its input ended
        self.inputs_ended = False  # ... of the window last finished
        self.buffers: dict[int, deque] = {c: deque() for c in range(len(ordinals))}
        self.ended = not ordinals

    def on_message(self, channel: int, message: object) -> None:
        """Accept one message from input ``channel``."""
        if channel in self.blocked:
            self.buffers[channel].append(message)
            return
        self._handle(channel, message)
        self._advance()

    def _handle(self, channel: int, message: object) -> None:
        if type(message) is list or type(message) is ColumnBatch:
            self.process(self.ordinals[channel], message)
        elif isinstance(message, Barrier):
            if self.barrier_window is None:
                self.barrier_window = message.window
                self.barrier_checkpoint = message.checkpoint
                self.barrier_last = True
            self.barrier_last = self.barrier_last and message.last
            if message.window != self.barrier_window:
                msg = (f"channel {channel} sent the barrier of window {message.window} while "
                       f"window {self.barrier_window} is being aligned")
                raise RuntimeError(msg)
            self.blocked.add(channel)
        elif isinstance(message, EndOfInput):
            self.active.discard(channel)
        else:
            msg = f"unexpected message on channel {channel}: {message!r}"
            raise TypeError(msg)

    def _advance(self) -> None:
        while True:
            if self.active and self.active <= self.blocked:
                self._aligned()
                self._replay()
                continue
            if not self.active and not self.ended:
                if self.blocked:  # a barrier came from a channel that then ended
                    self._aligned()
                    continue
                self.ended = True
                self.end_of_input()
            return

    def queued(self) -> int:
        """Messages held back behind a barrier (the task's input queue depth)."""
        return sum(len(buffer) for buffer in self.buffers.values())

    def _aligned(self) -> None:
        window, checkpoint = self.barrier_window, self.barrier_checkpoint
        # Channels that ended before this window's barrier send nothing more either.
        self.inputs_ended = self.barrier_last
        self.barrier_window = None
        self.blocked.clear()
        self.finish_window(window, checkpoint)

    def _replay(self) -> None:
        progressed = True
        while progressed:
            progressed = False
            for channel, buffer in self.buffers.items():
                while buffer and channel not in self.blocked:
                    self._handle(channel, buffer.popleft())
                    progressed = True


class FetchService:
    """Pulls messages addressed to a task from its inbox and hands them to the task's worker."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.received_batches = 0

    def on_message(self, channel: int, message: object) -> None:
        """Deliver one message of input ``channel`` to the worker."""
        self.worker.on_message(channel, message)
