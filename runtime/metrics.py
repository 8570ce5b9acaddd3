"""Per-window metrics and the result of running one pipeline task, in bounded memory.

A stream job runs for months: its result keeps the first and the last windows' metrics (a bounded
number of each) and a summary of all of them (counts, totals per operator, a histogram of window
times), never one object per window.
"""

from __future__ import annotations

import math
from collections import deque

import attrs

from gyreflow.scheduler.events import Done, OperatorMetrics
from gyreflow.state.records import define, frozen


@frozen
class WindowMetrics:
    """What one completed window did: records in/out per operator and its wall time."""

    task: str
    cycle: int
    window: int
    seconds: float
    operators: dict[str, OperatorMetrics]

    @property
    def source_records(self) -> int:
        """Records read by the sources in this window."""
        return sum(m.records_out for name, m in self.operators.items() if name in self.sources)

    sources: tuple[str, ...] = ()
    watermark: float | None = None  # the lowest finite event-time watermark at the window's end
    # Bytes sent to other processes per edge ("source->target"), where the host measures them
    # (the worker host, and Spark in workers mode); empty when every channel stayed in process.
    sent: dict[str, int] = attrs.field(factory=dict)

    @classmethod
    def from_dones(cls, task: str, cycle: int, window: int, seconds: float,
                   dones: tuple[Done, ...], sources: tuple[str, ...]) -> WindowMetrics:
        """Sum the metrics every task of the window reported."""
        totals: dict[str, list[int]] = {}
        watermark = None
        sent: dict[str, int] = {}
        for done in dones:
            for edge, size in done.sent:
                sent[edge] = sent.get(edge, 0) + size
            for name, m in done.metrics:
                pair = totals.setdefault(name, [0, 0])
                pair[0] += m.records_in
                pair[1] += m.records_out
                mark = m.watermark
                if mark is not None and -math.inf < mark < math.inf and (
                        watermark is None or mark < watermark):
                    watermark = mark
        operators = {name: OperatorMetrics(i, o) for name, (i, o) in totals.items()}
        return cls(task, cycle, window, seconds, operators, sources, watermark, sent)


HISTOGRAM_BUCKETS = 40  # window times in powers of two from 1 microsecond to about 6 days


def _bucket(seconds: float) -> int:
    """The histogram bucket of a window time: bucket b holds times below 2**b microseconds."""
    if seconds <= 1e-6:
        return 0
    return min(HISTOGRAM_BUCKETS - 1, math.ceil(math.log2(seconds * 1e6)))


@define
class WindowSummary:
    """Every window of a run in constant space: how many, their total time, records per operator
    and a log2 histogram of window times (``percentile`` reads it)."""

    count: int = 0
    seconds: float = 0.0
    max_seconds: float = 0.0
    operators: dict[str, list[int]] = attrs.field(factory=dict)  # name -> [records in, out]
    sent: dict[str, int] = attrs.field(factory=dict)  # edge -> bytes sent to other processes
    histogram: list[int] = attrs.field(factory=lambda: [0] * HISTOGRAM_BUCKETS)

    def add(self, metrics: WindowMetrics) -> None:
        """Count one more window."""
        self.count += 1
        self.seconds += metrics.seconds
        self.max_seconds = max(self.max_seconds, metrics.seconds)
        self.histogram[_bucket(metrics.seconds)] += 1
        for name, m in metrics.operators.items():
            totals = self.operators.get(name)
            if totals is None:
                totals = self.operators[name] = [0, 0]
            totals[0] += m.records_in
            totals[1] += m.records_out
        for edge, size in metrics.sent.items():
            self.sent[edge] = self.sent.get(edge, 0) + size

    def percentile(self, fraction: float) -> float:
        """An upper bound (within a factor of two) of the window time below which ``fraction`` of
        the windows took.

        >>> summary = WindowSummary()
        >>> for s in (0.001, 0.001, 0.1): summary.add(WindowMetrics("t", 0, 1, s, {}))
        >>> summary.percentile(0.5) <= 0.002, summary.percentile(1.0) >= 0.1
        (True, True)
        """
        if not self.count:
            return 0.0
        wanted = max(1, math.ceil(fraction * self.count))
        seen = 0
        for bucket, count in enumerate(self.histogram):
            seen += count
            if seen >= wanted:
                return min(self.max_seconds, 2.0 ** bucket / 1e6)
        return self.max_seconds


DEFAULT_KEPT_WINDOWS = 1000


@define
class TaskResult:
    """The outcome of one pipeline task: metrics of its windows and collected records by window.

    ``windows`` holds the metrics of the first ``kept`` windows and of the last ``kept`` ones, in
    window order; ``summary`` covers every window (``window_count`` of them). ``seconds`` is the
    wall time of the whole run, restarts and their waits included.
    """

    name: str
    kept: int = DEFAULT_KEPT_WINDOWS
    first_windows: list[WindowMetrics] = attrs.field(factory=list)
    last_windows: deque = attrs.field(factory=deque)
    summary: WindowSummary = attrs.field(factory=WindowSummary)
    collected: dict[str, dict[int, list]] = attrs.field(factory=dict)
    seconds: float = 0.0
    last_completed: int = 0
    recomputed: int = 0  # windows finished again after a restart rolled them back
    _highest: int = 0
    # The windows finished since the last completed one (a restart rolls them back): at most the
    # windows in flight and those waiting for a snapshot, whatever the length of the run.
    _unsettled: dict[int, list[WindowMetrics]] = attrs.field(factory=dict)

    def add_window(self, metrics: WindowMetrics) -> None:
        """Record one finished window's metrics (older ones beyond the bounds are dropped)."""
        self.summary.add(metrics)
        self._highest = max(self._highest, metrics.window)
        self._unsettled.setdefault(metrics.window, []).append(metrics)
        if len(self.first_windows) < self.kept:
            self.first_windows.append(metrics)
            return
        self.last_windows.append(metrics)
        if len(self.last_windows) > self.kept:
            self.last_windows.popleft()

    @property
    def windows(self) -> list[WindowMetrics]:
        """The kept windows' metrics in window order (every window of a run of up to ``2 * kept``)."""
        return [*self.first_windows, *self.last_windows]

    @property
    def window_count(self) -> int:
        """How many windows the run finished, each once: a window finished again after a restart
        is counted in ``recomputed`` (the summary's durations and totals include both runs)."""
        return self.summary.count - self.recomputed

    def settle(self, window: int) -> None:
        """Windows up to ``window`` are completed: no restart rolls them back."""
        for settled in [w for w in self._unsettled if w <= window]:
            del self._unsettled[settled]

    @property
    def records_read(self) -> int:
        """Records the sources read, each window counted once (as its completed run read them).

        >>> result = TaskResult("t")
        >>> result.add_window(WindowMetrics("t", 0, 1, 0.1, {"src": OperatorMetrics(0, 5)}, ("src",)))
        >>> result.add_window(WindowMetrics("t", 0, 2, 0.1, {"src": OperatorMetrics(0, 7)}, ("src",)))
        >>> result.settle(1)
        >>> result.keep_until(1).records_read  # window 2 is read again after a restart
        5
        """
        sources = dict.fromkeys(s for w in self.windows for s in w.sources)
        sources.update(dict.fromkeys(s for ws in self._unsettled.values() for w in ws
                                     for s in w.sources))
        return sum(self.summary.operators.get(name, (0, 0))[1] for name in sources)

    def keep_until(self, window: int) -> TaskResult:
        """This result without what windows after ``window`` added (a restart recomputes them):
        their records leave the operators' totals (the durations keep both runs' time)."""
        for later in sorted(w for w in self._unsettled if w > window):
            for metrics in self._unsettled.pop(later):
                self._take_back(metrics)
        if self._highest > window:
            self.recomputed += self._highest - window
            self._highest = window
        self.first_windows = [m for m in self.first_windows if m.window <= window]
        self.last_windows = deque(m for m in self.last_windows if m.window <= window)
        for by_window in self.collected.values():
            for later in [w for w in by_window if w > window]:
                del by_window[later]
        return self

    def _take_back(self, metrics: WindowMetrics) -> None:
        """Remove a rolled-back window's records from the totals (its duration, and the bytes
        it sent to other processes, stay counted: that work was done)."""
        operators = self.summary.operators
        for name, m in metrics.operators.items():
            totals = operators.get(name)
            if totals is not None:
                totals[0] -= m.records_in
                totals[1] -= m.records_out

    def add_collected(self, window: int, dones: tuple[Done, ...]) -> None:
        """Add the records the tasks of ``window`` collected."""
        for done in dones:
            for name, records in done.collected:
                self.collected.setdefault(name, {}).setdefault(window, []).extend(records)

    def output(self, name: str) -> list:
        """Every record collected under ``name``, in window order."""
        by_window = self._named(name)
        return [r for window in sorted(by_window) for r in by_window[window]]

    def by_window(self, name: str) -> dict[int, list]:
        """Records collected under ``name``, by window id."""
        return dict(sorted(self._named(name).items()))

    def _named(self, name: str) -> dict[int, list]:
        if name not in self.collected:
            known = sorted(self.collected)
            msg = f"no collected output named {name!r} in task {self.name!r}; known: {known}"
            raise KeyError(msg)
        return self.collected[name]


@frozen
class Restart:
    """Why a run's tasks were built again, as ``JobListener.on_restart`` hears it.

    ``kind``: ``"rescale"`` (an operator's parallelism or the number of worker processes changed;
    ``detail`` says which, as ``count-2 1 → 3`` or ``worker processes 2 → 3``), ``"rebalance"``
    (key groups moved between tasks) or ``"restart"`` (a failover: ``cause`` is the failure, and
    this is restart ``attempt`` of the ``attempts`` the restart strategy allows in a row).
    """

    kind: str
    detail: str = ""
    cause: str = ""
    attempt: int = 0
    attempts: int = 0


def describe_restart(restart: Restart) -> str:
    """A restart in a few words: the rescale's or rebalance's detail, or a failover's cause and
    attempt.

    >>> describe_restart(Restart("restart", cause="worker 1 (pid 7) of job 'j' killed by SIGKILL",
    ...                          attempt=1, attempts=3))
    "worker 1 (pid 7) of job 'j' killed by SIGKILL (attempt 1 of 3)"
    """
    if restart.kind != "restart":
        return restart.detail
    attempt = f"attempt {restart.attempt} of {restart.attempts}" if restart.attempts else ""
    if not restart.cause:
        return attempt
    return f"{restart.cause} ({attempt})" if attempt else restart.cause


def restart_kind(before, after) -> tuple[str, str]:
    """What a restart of a run changed between pipeline graphs ``before`` and ``after``:
    ``("rescale", "op 2 → 3, ...")`` when a parallelism changed, ``("rebalance", "op key groups per
    task 1/127")`` when key groups moved between tasks, else ``("restart", "")`` (a failover)."""
    old = {v.name: v for v in before.vertices} if before is not None else {}
    rescaled, moved = [], []
    for vertex in after.vertices:
        was = old.get(vertex.name)
        if was is None:
            continue
        if was.parallelism != vertex.parallelism:
            rescaled.append(f"{vertex.name} {was.parallelism} \u2192 {vertex.parallelism}")
        elif vertex.assignment is not None and was.assignment != vertex.assignment:
            shares = "/".join(str(vertex.assignment.count(t)) for t in range(vertex.parallelism))
            moved.append(f"{vertex.name} key groups per task {shares}")
    if rescaled:
        return "rescale", ", ".join(rescaled)
    if moved:
        return "rebalance", ", ".join(moved)
    return "restart", ""
