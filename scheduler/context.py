"""Scheduler context: which window ids are next, in flight, finished, and where the input ends."""

from __future__ import annotations

import attrs

from gyreflow.state.records import define


@define
class WindowContext:
    """Window-id bookkeeping of one cycle; pure, no I/O.

    >>> ctx = WindowContext(max_flying_windows=2)
    >>> ctx.windows_to_launch()
    [1, 2]
    >>> ctx.finish(1); ctx.windows_to_launch()
    [3]
    >>> ctx.terminate_at(3); ctx.windows_to_launch(), ctx.all_finished()
    ([], False)
    """

    max_flying_windows: int = 1
    next_window: int = 1
    in_flight: set[int] = attrs.field(factory=set)
    last_finished: int = 0
    terminate: int | None = None

    def windows_to_launch(self) -> list[int]:
        """Mark and return the windows that may start now."""
        launched = []
        while len(self.in_flight) < self.max_flying_windows and (
            self.terminate is None or self.next_window <= self.terminate
        ):
            self.in_flight.add(self.next_window)
            launched.append(self.next_window)
            self.next_window += 1
        return launched

    def finish(self, window: int) -> None:
        """Record that ``window`` completed; windows complete in order."""
        if window != self.last_finished + 1:
            msg = f"window {window} completed out of order (last completed: {self.last_finished})"
            raise ValueError(msg)
        self.in_flight.discard(window)
        self.last_finished = window

    def terminate_at(self, window: int) -> None:
        """Every source is exhausted: ``window`` is the last window; later launches are cancelled."""
        self.terminate = window
        self.in_flight = {w for w in self.in_flight if w <= window}

    def resume_after(self, window: int) -> None:
        """Continue after the completed window ``window`` (recovery)."""
        self.last_finished = window
        self.next_window = window + 1
        self.in_flight = set()

    def all_finished(self) -> bool:
        """Whether the input ended and every window up to its end completed."""
        return self.terminate is not None and self.last_finished >= self.terminate
