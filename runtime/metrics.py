"""Per-window metrics and the result of running one pipeline task."""

from __future__ import annotations

import attrs

from gyreflow.scheduler.events import Done, OperatorMetrics


@attrs.frozen
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

    @classmethod
    def from_dones(cls, task: str, cycle: int, window: int, seconds: float,
                   dones: tuple[Done, ...], sources: tuple[str, ...]) -> WindowMetrics:
        """Sum the metrics every task of the window reported."""
        totals: dict[str, list[int]] = {}
        for done in dones:
            for name, m in done.metrics:
                pair = totals.setdefault(name, [0, 0])
                pair[0] += m.records_in
                pair[1] += m.records_out
        operators = {name: OperatorMetrics(i, o) for name, (i, o) in totals.items()}
        return cls(task, cycle, window, seconds, operators, sources)


@attrs.define
class TaskResult:
    """The outcome of one pipeline task: per-window metrics and collected records by window."""

    name: str
    windows: list[WindowMetrics] = attrs.field(factory=list)
    collected: dict[str, dict[int, list]] = attrs.field(factory=dict)
    seconds: float = 0.0
    last_completed: int = 0

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
