"""A running job seen from outside: Prometheus metrics and the JSON the live page reads.

``JobMonitor`` is a job listener. It keeps its metrics in a registry of its own (two monitors in one
process never mix their series) and a bounded view of the job (the plan, the last windows and
checkpoints), so it costs the same in the millionth window as in the first.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from collections import deque

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString

from gyreflow.plan.execution import ExecutionGraph
from gyreflow.runtime.driver import CheckpointMetrics, JobListener
from gyreflow.runtime.metrics import TaskResult, WindowMetrics

RECENT = 60  # windows and checkpoints kept for the page
# Window and checkpoint times: from half a millisecond to ten minutes.
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
           30.0, 60.0, 120.0, 300.0, 600.0)


class JobMonitor(JobListener):
    """Counts what the jobs of a run do, for ``/metrics`` and ``/api/job``.

    A window costs a few dictionary updates: the counts are plain numbers under one lock, turned
    into Prometheus metric families only when ``/metrics`` is read (a collector of its own
    registry, so two monitors in one process never mix their series).
    """

    def __init__(self, stop=None, clock=time.monotonic) -> None:
        self.stop = stop  # a StopRequest: once requested, the state is "stopping"
        self.clock = clock
        self._lock = threading.Lock()
        self._state = "running"  # the port opens as the run starts
        self.job = ""
        self.task = ""
        self.error: str | None = None
        self.windows_completed = 0
        self.records = 0
        self.started = clock()
        self.operators: dict[tuple[str, str], list[int]] = {}  # (task, operator) -> [in, out]
        self.last_completed_window = 0
        self.checkpoint_bytes = 0
        self.watermark_lag: float | None = None
        self.window_seconds = _Histogram()
        self.checkpoint_seconds = _Histogram()
        self.pipeline_graph: dict = {"operators": [], "edges": []}
        self.execution_graph: dict = {"cycles": [], "vertices": [], "tasks": [], "edges": []}
        self.recent_windows: deque = deque(maxlen=RECENT)
        self.recent_checkpoints: deque = deque(maxlen=RECENT)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(self))

    # JobListener ----------------------------------------------------------------------------

    def on_start(self, name: str, graph: ExecutionGraph) -> None:
        job, _, task = name.partition("/")
        pipeline_graph, execution_graph = describe_graphs(graph)
        with self._lock:
            self.job, self.task = job, task or job
            self.pipeline_graph, self.execution_graph = pipeline_graph, execution_graph
            self._state = "running"
            self.started = self.clock()
            self.records = 0

    def on_window(self, metrics: WindowMetrics) -> None:
        records = metrics.source_records
        lag = None if metrics.watermark is None else max(0.0, time.time() - metrics.watermark)
        with self._lock:
            task, operators = self.task, self.operators
            for operator, m in metrics.operators.items():
                pair = operators.get((task, operator))
                if pair is None:
                    pair = operators[(task, operator)] = [0, 0]
                pair[0] += m.records_in
                pair[1] += m.records_out
            self.window_seconds.observe(metrics.seconds)
            if lag is not None:
                self.watermark_lag = lag
            self.windows_completed += 1
            self.records += records
            self.recent_windows.append({"window": metrics.window,
                                        "duration_seconds": round(metrics.seconds, 6),
                                        "records": records})

    def on_checkpoint(self, checkpoint: CheckpointMetrics) -> None:
        with self._lock:
            self.last_completed_window = checkpoint.window
            self.checkpoint_bytes = checkpoint.bytes
            self.checkpoint_seconds.observe(checkpoint.seconds)
            self.recent_checkpoints.append({"window": checkpoint.window,
                                            "duration_seconds": round(checkpoint.seconds, 6),
                                            "bytes": checkpoint.bytes})

    def on_finish(self, result: TaskResult) -> None:
        with self._lock:
            self.last_completed_window = result.last_completed

    # The run as a whole ---------------------------------------------------------------------

    def finish(self, error: BaseException | str | None = None) -> None:
        """The run ended: ``finished`` (also after a graceful stop), or ``failed`` with ``error``'s
        message."""
        from gyreflow.runtime.stop import JobInterrupted, JobStopped

        with self._lock:
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
            elapsed = max(self.clock() - self.started, 1e-9)
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
                "error": self.error,
            }


def describe_graphs(graph: ExecutionGraph) -> tuple[dict, dict]:
    """The plans as JSON-ready dicts: operators by the names ``gyreflow explain`` prints."""
    pipeline = graph.pipeline
    names = {v.id: v.name for v in pipeline.vertices}
    pipeline_graph = {
        "operators": [{"name": v.name, "kind": v.spec.op, "parallelism": v.parallelism}
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
            records_in = CounterMetricFamily("gyreflow_operator_records_in",
                                             "Records into an operator.", labels=("task", "operator"))
            records_out = CounterMetricFamily("gyreflow_operator_records_out",
                                              "Records out of an operator.",
                                              labels=("task", "operator"))
            for (task, operator), (count_in, count_out) in m.operators.items():
                records_in.add_metric((task, operator), count_in)
                records_out.add_metric((task, operator), count_out)
            families = [
                windows, records_in, records_out,
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
