"""Graph benchmark clocks: a local run's supersteps, a Spark run's span in the driver, best search times."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from gyreflow.runtime.dataflow.graph.array_operator import ArrayGraphOperator
from gyreflow.runtime.driver import JobDriver
from gyreflow.scheduler.events import EventKind


class SuperstepClock:
    """The wall time of the supersteps of a local run: from the start of the first superstep to the
    end of the last one (scheduling between them included), measured around the graph operator."""

    def __init__(self) -> None:
        self.first: float | None = None
        self.last: float | None = None
        original = ArrayGraphOperator.superstep
        clock = self

        def timed(operator, *args, **kwargs):
            started = time.perf_counter()
            if clock.first is None:
                clock.first = started
            try:
                return original(operator, *args, **kwargs)
            finally:
                clock.last = time.perf_counter()

        ArrayGraphOperator.superstep = timed

    def take(self) -> float:
        """The supersteps' time since the last call."""
        seconds = (self.last - self.first) if self.first is not None else 0.0
        self.first = self.last = None
        return seconds


class DriverSpan:
    """The supersteps' span as the driver sees it: from its sending of a window's first superstep
    (ExecuteFirstIteration) to its sending of FinishIteration, and how many supersteps ran."""

    def __init__(self) -> None:
        self.first: float | None = None
        self.last: float | None = None
        self.steps: set[tuple[int, int]] = set()
        original = JobDriver._send
        span = self

        def send(driver, events) -> None:
            now = time.perf_counter()
            for event in events:
                if event.kind is EventKind.EXECUTE_FIRST_ITERATION:
                    span.steps.add((event.window, 1))
                    if span.first is None:
                        span.first = now
                elif event.kind is EventKind.EXECUTE_COMPUTE and event.iteration:
                    span.steps.add((event.window, event.iteration))
                elif event.kind is EventKind.FINISH_ITERATION:
                    span.last = now
            return original(driver, events)

        JobDriver._send = send

    def take(self) -> tuple[float, int]:
        """``(seconds, supersteps)`` since the last call."""
        if self.first is None or self.last is None:
            msg = "no superstep was seen"
            raise RuntimeError(msg)
        seconds, steps = self.last - self.first, len(self.steps)
        self.first = self.last = None
        self.steps = set()
        return seconds, steps


def searched(fn: Callable[[], object], seconds: Callable[[], float], into: dict, name: str):
    """``fn`` that records the search time ``seconds()`` of its best run under ``into[name]``."""
    def run():
        result = fn()
        into[name] = min(into.get(name, math.inf), seconds())
        return result
    return run
