"""Progress display and the per-window summary, drawn with rich (switched off by --quiet)."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from gyreflow.runtime.driver import JobListener
from gyreflow.runtime.metrics import TaskResult, WindowMetrics


class ProgressListener(JobListener):
    """Shows windows done and records per second while a job runs."""

    def __init__(self, pipeline: str, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.progress: Progress | None = None
        self.records = 0
        self.windows = 0
        self.seconds = 0.0
        self.pipeline = pipeline

    def on_start(self, name, graph) -> None:
        self.records = self.windows = 0
        self.seconds = 0.0
        self.progress = Progress(
            SpinnerColumn(), TextColumn("[bold]{task.description}"), BarColumn(),
            TextColumn("{task.fields[windows]} windows"), TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(), console=self.console, transient=False,
        )
        self.progress.start()
        self.task_id = self.progress.add_task(name, total=None, windows=0, rate="")

    def on_window(self, metrics: WindowMetrics) -> None:
        self.windows += 1
        self.records += metrics.source_records
        self.seconds += metrics.seconds
        rate = f"{self.records / self.seconds:,.0f} records/s" if self.seconds > 0 else ""
        self.progress.update(self.task_id, windows=self.windows, rate=rate)

    def on_finish(self, result: TaskResult) -> None:
        self.progress.update(self.task_id, total=1, completed=1)
        self.progress.stop()


def summary_tables(name: str, results: dict[str, TaskResult], max_windows: int = 12) -> list[Table]:
    """Per-window metrics of a pipeline's tasks: time and records in/out per operator, for the first
    and last windows, and totals over every window."""
    tables = []
    for task_name, result in results.items():
        windows = result.windows
        summary = result.summary
        operators = list(summary.operators) or list(
            dict.fromkeys(op for w in windows for op in w.operators))
        table = Table(title=f"{name}/{task_name}: {summary.count} windows in {result.seconds:.2f} s")
        table.add_column("window", justify="right")
        table.add_column("seconds", justify="right")
        for op in operators:
            table.add_column(f"{op}\nin → out", justify="right")
        shown = windows if summary.count <= max_windows else (
            windows[: max_windows // 2] + [None] + windows[-max_windows // 2:])
        for w in shown:
            if w is None:
                table.add_row("...", "", *["" for _ in operators])
                continue
            cells = []
            for op in operators:
                m = w.operators.get(op)
                cells.append("" if m is None else _cell(m.records_in, m.records_out))
            table.add_row(str(w.window), f"{w.seconds:.3f}", *cells)
        totals = [_cell(*summary.operators.get(op, (0, 0))) for op in operators]
        table.add_row("total", f"{summary.seconds:.3f}", *totals, style="bold")
        tables.append(table)
    return tables


def _cell(records_in: int, records_out: int) -> str:
    if records_in == 0:
        return f"{records_out:,}"  # a source: records read
    return f"{records_in:,} → {records_out:,}"
