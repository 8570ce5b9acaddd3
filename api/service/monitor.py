"""A running job seen from outside: Prometheus metrics and the JSON the live page reads.

``JobMonitor`` is a job listener. It keeps its metrics in a registry of its own (two monitors in one
process never mix their series) and a bounded view of the job (the plan, the last windows and
checkpoints, the trends of the whole run as ``Trend``s, the last rescales and restarts), so it costs
the same in the millionth window as in the first.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from collections import deque

import attrs
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString

from gyreflow.plan.execution import ExecutionGraph
from gyreflow.runtime.driver import CheckpointMetrics, JobListener
from gyreflow.runtime.metrics import (
    Restart,
    TaskResult,
    WindowMetrics,
    describe_restart,
    restart_kind,
)

RECENT = 60  # windows and checkpoints kept for the page
RECENT_POINTS = 256  # trend points kept as they came (one per window or checkpoint)
OLDER_POINTS = 256  # at most this many points for everything before them, each merging 2**k
POINT_SECONDS = 1.0  # a trend point gathers the windows (or checkpoints) of at least this long
EVENTS = 100  # rescales and restarts kept for the page (the counters count every one)
# Window and checkpoint times: from half a millisecond to ten minutes.
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
           30.0, 60.0, 120.0, 300.0, 600.0)


class JobMonitor(JobListener):
    """Counts what the jobs of a run do, for ``/metrics`` and ``/api/job``.

    A window costs a few dictionary updates: the counts are plain numbers under one lock, turned
    into Prometheus metric families only when ``/metrics`` is read (a collector of its own
    registry, so two monitors in one process never mix their series).
    """

    def __init__(self, stop=None, clock=time.monotonic, wall_clock=time.time,
                 recent_points: int = RECENT_POINTS, older_points: int = OLDER_POINTS,
                 point_seconds: float = POINT_SECONDS) -> None:
        self.stop = stop  # a StopRequest: once requested, the state is "stopping"
        self.clock = clock
        self.wall_clock = wall_clock  # the trends' time axis and the watermark lag
        self._lock = threading.Lock()
        self._state = "running"  # the port opens as the run starts
        self.job = ""
        self.task = ""
        self.error: str | None = None
        self.windows_completed = 0
        self.records = 0
        self.started = clock()
        self.ended: float | None = None  # when the run ended: its rate stops there
        # (pipeline, task, operator) -> [records in, out]; (pipeline, task, edge) -> bytes sent to
        # other processes. Two pipelines of a script may have tasks of the same name.
        self.operators: dict[tuple[str, str, str], list[int]] = {}
        self.sent: dict[tuple[str, str, str], int] = {}
        self.last_completed_window = 0
        self.checkpoint_bytes = 0
        self.watermark_lag: float | None = None
        self.window_seconds = _Histogram()
        self.checkpoint_seconds = _Histogram()
        self.pipeline_graph: dict = {"operators": [], "edges": []}
        self.execution_graph: dict = {"cycles": [], "vertices": [], "tasks": [], "edges": []}
        self.recent_windows: deque = deque(maxlen=RECENT)
        self.recent_checkpoints: deque = deque(maxlen=RECENT)
        # Each window (and each checkpoint) covers the wall time from the previous one's end (or
        # the task's start) to its own: a point's records make a rate over the time it covers.
        self.window_trend = Trend(("records", "duration_seconds", "watermark_lag_seconds"),
                                  recent_points, older_points, point_seconds)
        self.checkpoint_trend = Trend(("duration_seconds", "bytes"), recent_points, older_points,
                                      point_seconds)
        self._window_mark = self._checkpoint_mark = wall_clock()
        self.events: deque = deque(maxlen=EVENTS)
        self._graph = None  # the pipeline graph the run's tasks run now
        self.rescales = 0
        self.rebalances = 0
        self.restarts = 0
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(self))

    # JobListener ----------------------------------------------------------------------------

    def on_start(self, name: str, graph: ExecutionGraph) -> None:
        job, _, task = name.partition("/")
        pipeline_graph, execution_graph = describe_graphs(graph)
        with self._lock:
            self.job, self.task = job, task or job
            self.pipeline_graph, self.execution_graph = pipeline_graph, execution_graph
            self._graph = graph.pipeline
            self._state = "running"
            self.started = self.clock()
            self.ended = None
            self.records = 0
            self._window_mark = self._checkpoint_mark = self.wall_clock()

    def on_restart(self, name: str, graph: ExecutionGraph, window: int,
                   restart: Restart | None = None) -> None:
        """The run goes on after ``window`` with its tasks built again: counted and marked on the
        trends as ``restart`` says (a ``rescale``, a ``rebalance`` or a failover's ``restart``);
        without it, a ``rescale`` when an operator's parallelism changed, a ``rebalance`` when key
        groups moved between tasks, else a ``restart``."""
        job, _, task = name.partition("/")
        pipeline_graph, execution_graph = describe_graphs(graph)
        now = self.wall_clock()
        with self._lock:
            if restart is None:
                kind, detail = restart_kind(self._graph, graph.pipeline)
            else:
                kind, detail = restart.kind, describe_restart(restart)
            self._graph = graph.pipeline
            self.job, self.task = job, task or job
            self.pipeline_graph, self.execution_graph = pipeline_graph, execution_graph
            self._event(now, kind, window, detail)

    def _event(self, now: float, kind: str, window: int, detail: str) -> None:
        """Count a ``rescale`` or a ``restart`` and keep it for the page (the lock is held)."""
        if kind == "rescale":
            self.rescales += 1
        elif kind == "rebalance":
            self.rebalances += 1
        else:
            self.restarts += 1
        self.events.append({"time": round(now, 3), "kind": kind, "window": window,
                            "detail": detail})

    def on_window(self, metrics: WindowMetrics) -> None:
        records = metrics.source_records
        now = self.wall_clock()
        lag = None if metrics.watermark is None else max(0.0, now - metrics.watermark)
        with self._lock:
            job, task, operators, sent = self.job, self.task, self.operators, self.sent
            for operator, m in metrics.operators.items():
                pair = operators.get((job, task, operator))
                if pair is None:
                    pair = operators[(job, task, operator)] = [0, 0]
                pair[0] += m.records_in
                pair[1] += m.records_out
            for edge, size in metrics.sent.items():
                sent[(job, task, edge)] = sent.get((job, task, edge), 0) + size
            self.window_seconds.observe(metrics.seconds)
            if lag is not None:
                self.watermark_lag = lag
            self.windows_completed += 1
            self.records += records
            self.recent_windows.append({"window": metrics.window,
                                        "duration_seconds": round(metrics.seconds, 6),
                                        "records": records})
            self.window_trend.add(self._window_mark, now, records, metrics.seconds, lag)
            self._window_mark = now

    def on_checkpoint(self, checkpoint: CheckpointMetrics) -> None:
        now = self.wall_clock()
        with self._lock:
            self.last_completed_window = checkpoint.window
            self.checkpoint_bytes = checkpoint.bytes
            self.checkpoint_seconds.observe(checkpoint.seconds)
            self.recent_checkpoints.append({"window": checkpoint.window,
                                            "duration_seconds": round(checkpoint.seconds, 6),
                                            "bytes": checkpoint.bytes})
            self.checkpoint_trend.add(self._checkpoint_mark, now, checkpoint.seconds,
                                      checkpoint.bytes)
            self._checkpoint_mark = now

    def on_resumed(self, window: int) -> None:
        """The run resumes after ``window``, the last completed window of an earlier run."""
        with self._lock:
            self.last_completed_window = window

    def on_finish(self, result: TaskResult) -> None:
        with self._lock:
            self.last_completed_window = result.last_completed
            self.window_trend.flush(last=True)
            self.checkpoint_trend.flush(last=True)

    # The run as a whole ---------------------------------------------------------------------

    def finish(self, error: BaseException | str | None = None) -> None:
        """The run ended: ``finished`` (also after a graceful stop), or ``failed`` with ``error``'s
        message."""
        from gyreflow.runtime.stop import JobInterrupted, JobStopped

        with self._lock:
            self.window_trend.flush(last=True)
            self.checkpoint_trend.flush(last=True)
            self.ended = self.clock()
            if error is None or isinstance(error, JobStopped | JobInterrupted):
                self._state = "finished"
            else:
                self._state = "failed"
                self.error = str(error).strip() or type(error).__name__

    @property
    def state(self) -> str:
        """running, stopping (a stop signal came), finished or failed."""
        with self._lock:
            state = self._state
        if state == "running" and self.stop is not None and getattr(self.stop, "requested", False):
            return "stopping"
        return state

    def snapshot(self) -> dict:
        """The job as ``/api/job`` serves it."""
        state = self.state
        with self._lock:
            ended = self.clock() if self.ended is None else self.ended
            elapsed = max(ended - self.started, 1e-9)
            return {
                "job": self.job,
                "task": self.task,
                "state": state,
                "windows_completed": self.windows_completed,
                "records_per_second": round(self.records / elapsed, 1),
                "pipeline_graph": self.pipeline_graph,
                "execution_graph": self.execution_graph,
                "recent_windows": list(self.recent_windows),
                "recent_checkpoints": list(self.recent_checkpoints),
                "operators": [{"pipeline": job, "task": task, "operator": operator,
                               "records_in": pair[0], "records_out": pair[1]}
                              for (job, task, operator), pair in self.operators.items()],
                "edges": [{"pipeline": job, "task": task, "edge": edge, "bytes_sent": size}
                          for (job, task, edge), size in self.sent.items()],
                "trends": {"windows": _window_columns(self.window_trend.stretches()),
                           "checkpoints": _checkpoint_columns(self.checkpoint_trend.stretches())},
                "events": list(self.events),
                "rescales": self.rescales,
                "rebalances": self.rebalances,
                "restarts": self.restarts,
                "error": self.error,
            }


def describe_graphs(graph: ExecutionGraph) -> tuple[dict, dict]:
    """The plans as JSON-ready dicts: operators by the names ``gyreflow explain`` prints."""
    pipeline = graph.pipeline
    names = {v.id: v.name for v in pipeline.vertices}
    pipeline_graph = {
        "operators": [{"name": v.name, "kind": v.spec.op, "parallelism": v.parallelism,
                       **({"key_groups": [v.assignment.count(t) for t in range(v.parallelism)]}
                          if v.assignment is not None else {})}
                      for v in pipeline.topological_order()],
        "edges": [{"source": names[e.source], "target": names[e.target],
                   "partitioning": e.partitioning.value} for e in pipeline.edges],
    }
    cycles = graph.cycles()
    cycle_of = {t.vertex_id: c.id for c in cycles for t in c.tasks}
    execution_graph = {
        "cycles": [{"id": c.id, "kind": c.group.kind.value,
                    "vertices": sorted({t.vertex_id for t in c.tasks}),
                    "iterative": c.iterative} for c in cycles],
        "vertices": [{"id": v.id, "operators": [p.name for p in v.chain],
                      "parallelism": v.parallelism, "cycle": cycle_of.get(v.id)}
                     for v in graph.vertices],
        "tasks": [{"id": t.id, "vertex": t.vertex_id, "index": t.index, "name": t.name}
                  for t in graph.tasks()],
        "edges": [{"source": e.source, "target": e.target, "partitioning": e.partitioning.value}
                  for e in graph.edges],
    }
    return pipeline_graph, execution_graph


@attrs.define(eq=False)
class Stretch:
    """Observations of a trend merged into one: the wall time they cover (``start`` to ``end``), how
    many there were (``count``) and how many trend points they make (``points``: 0 while still a
    point in the making), and per field the sum, the number of observations that had a value and the
    largest value (None when none had one)."""

    start: float
    end: float
    count: int
    points: int
    sums: list[float]
    counts: list[int]
    maxes: list[float | None]

    @classmethod
    def observation(cls, start: float, end: float, values: tuple) -> Stretch:
        return cls(start, end, 1, 0, [v or 0 for v in values], [int(v is not None) for v in values],
                   list(values))

    def absorb(self, later: Stretch) -> None:
        """Merge ``later``, the stretch that follows this one, into this one."""
        self.end = later.end
        self.count += later.count
        self.points += later.points
        for i, value in enumerate(later.maxes):
            self.sums[i] += later.sums[i]
            self.counts[i] += later.counts[i]
            mine = self.maxes[i]
            if value is not None and (mine is None or value > mine):
                self.maxes[i] = value


class Trend:
    """A series over a whole run in bounded memory.

    Observations (one per window, or per checkpoint) are gathered into points of at least
    ``seconds`` of wall time each, so that a job finishing a thousand windows a second keeps minutes
    of points, not a second. The last ``recent`` points are kept as they are; every point before
    them is merged into fewer than ``older`` stretches of ``2**k`` points each (and one stretch still
    filling). When the older stretches reach ``older``, neighbours merge in pairs, so the series
    always reaches back to the run's start, coarser the older it is.

    >>> trend = Trend(("records",), recent=2, older=2)
    >>> for second in range(6): trend.add(second, second + 1, 10)
    >>> [(s.start, s.end, s.points, s.sums[0]) for s in trend.stretches()]
    [(0, 4, 4, 40), (4, 5, 1, 10), (5, 6, 1, 10)]
    """

    def __init__(self, fields: tuple[str, ...], recent: int = RECENT_POINTS,
                 older: int = OLDER_POINTS, seconds: float = 0.0) -> None:
        if recent < 1 or older < 2 or older % 2:
            msg = (f"a trend keeps at least 1 recent point and an even number (at least 2) of "
                   f"older ones, not {recent} and {older}")
            raise ValueError(msg)
        self.fields = fields
        self.seconds = seconds
        self.recent_limit = recent
        self.older_limit = older
        self.pending: Stretch | None = None  # observations of a point shorter than ``seconds``
        self.recent: deque[Stretch] = deque()
        self.older: list[Stretch] = []
        self.filling: Stretch | None = None  # older points not yet a whole stretch
        self.span = 1  # points per older stretch

    def add(self, start: float, end: float, *values: float | None) -> None:
        """One observation covering ``start`` to ``end``, with a value (or None) per field."""
        pending = self.pending
        if pending is None:
            self.pending = pending = Stretch.observation(start, end, values)
        else:  # in place: a window costs no new object until its point is complete
            pending.end = end
            pending.count += 1
            sums, counts, maxes = pending.sums, pending.counts, pending.maxes
            for i, value in enumerate(values):
                if value is not None:
                    sums[i] += value
                    counts[i] += 1
                    if maxes[i] is None or value > maxes[i]:
                        maxes[i] = value
        if end - pending.start >= self.seconds:
            self.flush()

    def flush(self, last: bool = False) -> None:
        """Make the observations not yet a point one. ``last``: the job ended, no more will come;
        observations spanning less than a point's time then join the point before them (a last
        window finished a millisecond after the one before is no rate of its own)."""
        if self.pending is None:
            return
        point, self.pending = self.pending, None
        if last and self.recent and point.end - point.start < self.seconds:
            self.recent[-1].absorb(point)
            return
        point.points = 1
        self.recent.append(point)
        if len(self.recent) > self.recent_limit:
            self._retire(self.recent.popleft())

    def _retire(self, point: Stretch) -> None:
        if self.filling is None:
            self.filling = point
        else:
            self.filling.absorb(point)
        if self.filling.points < self.span:
            return
        self.older.append(self.filling)
        self.filling = None
        if len(self.older) == self.older_limit:
            pairs = zip(self.older[0::2], self.older[1::2], strict=True)
            for first, second in pairs:
                first.absorb(second)
            self.older = self.older[0::2]
            self.span *= 2

    def stretches(self) -> list[Stretch]:
        """Every point so far, oldest first, merged as the bounds ask (observations not yet a
        point are left out until ``flush``)."""
        filling = [] if self.filling is None else [self.filling]
        return [*self.older, *filling, *self.recent]


def _mean(stretch: Stretch, field: int, digits: int) -> float | None:
    count = stretch.counts[field]
    return round(stretch.sums[field] / count, digits) if count else None


def _window_columns(stretches: list[Stretch]) -> dict[str, list]:
    """A window trend as the page's columns: rates over each stretch's wall time, mean and largest
    window time and watermark lag."""
    return {
        "time": [round(s.end, 3) for s in stretches],
        "windows": [s.count for s in stretches],
        "records": [s.sums[0] for s in stretches],
        "records_per_second": [round(s.sums[0] / max(s.end - s.start, 1e-9), 1) for s in stretches],
        "duration_seconds": [_mean(s, 1, 6) for s in stretches],
        "duration_max_seconds": [round(s.maxes[1], 6) for s in stretches],
        "watermark_lag_seconds": [_mean(s, 2, 3) for s in stretches],
    }


def _checkpoint_columns(stretches: list[Stretch]) -> dict[str, list]:
    """A checkpoint trend as the page's columns: mean and largest duration and size."""
    return {
        "time": [round(s.end, 3) for s in stretches],
        "checkpoints": [s.count for s in stretches],
        "duration_seconds": [_mean(s, 0, 6) for s in stretches],
        "duration_max_seconds": [round(s.maxes[0], 6) for s in stretches],
        "bytes": [round(s.sums[1] / s.count) for s in stretches],
        "bytes_max": [s.maxes[1] for s in stretches],
    }


class _Histogram:
    """Counts per bucket (upper bounds ``BUCKETS``, then +Inf), their total and sum."""

    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(BUCKETS, value)] += 1
        self.sum += value

    def family(self, name: str, documentation: str) -> HistogramMetricFamily:
        cumulative, buckets = 0, []
        for bound, count in zip((*BUCKETS, float("inf")), self.counts, strict=True):
            cumulative += count
            buckets.append((floatToGoString(bound), cumulative))
        family = HistogramMetricFamily(name, documentation)
        family.add_metric([], buckets, self.sum)
        return family


class _Collector:
    """Turns a monitor's counts into Prometheus metric families when ``/metrics`` is read."""

    def __init__(self, monitor: JobMonitor) -> None:
        self.monitor = monitor

    def collect(self):
        m = self.monitor
        with m._lock:
            windows = CounterMetricFamily("gyreflow_windows_completed", "Windows completed.",
                                          value=m.windows_completed)
            rescales = CounterMetricFamily("gyreflow_rescales", "Rescales of the run.",
                                           value=m.rescales)
            rebalances = CounterMetricFamily("gyreflow_rebalances",
                                             "Rebalances of the run: key groups moved between an "
                                             "operator's tasks by load.", value=m.rebalances)
            restarts = CounterMetricFamily("gyreflow_restarts",
                                           "Restarts of the run's tasks with the same parallelism.",
                                           value=m.restarts)
            records_in = CounterMetricFamily("gyreflow_operator_records_in",
                                             "Records into an operator.",
                                             labels=("pipeline", "task", "operator"))
            records_out = CounterMetricFamily("gyreflow_operator_records_out",
                                              "Records out of an operator.",
                                              labels=("pipeline", "task", "operator"))
            for labels, (count_in, count_out) in m.operators.items():
                records_in.add_metric(labels, count_in)
                records_out.add_metric(labels, count_out)
            sent = CounterMetricFamily("gyreflow_edge_bytes_sent",
                                       "Bytes an edge sent to other processes (worker processes, "
                                       "Spark workers mode).", labels=("pipeline", "task", "edge"))
            for labels, size in m.sent.items():
                sent.add_metric(labels, size)
            families = [
                windows, records_in, records_out, sent, rescales, rebalances, restarts,
                GaugeMetricFamily("gyreflow_last_completed_window",
                                  "The job's last completed window id.",
                                  value=m.last_completed_window),
                GaugeMetricFamily("gyreflow_checkpoint_bytes", "Bytes written by the last checkpoint.",
                                  value=m.checkpoint_bytes),
                m.window_seconds.family("gyreflow_window_duration_seconds", "Wall time of a window."),
                m.checkpoint_seconds.family("gyreflow_checkpoint_duration_seconds",
                                            "From a window's end to its commit being durable."),
            ]
            if m.watermark_lag is not None:
                families.append(GaugeMetricFamily(
                    "gyreflow_watermark_lag_seconds",
                    "Wall-clock time minus the event-time watermark at the last window's end.",
                    value=m.watermark_lag))
        yield from families
