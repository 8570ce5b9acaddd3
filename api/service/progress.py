"""Progress display and the end-of-run summary, drawn with rich (switched off by --quiet), and the
final metrics as JSON (``--metrics-json``).

Rates are records read by the sources over wall time: windows in flight overlap, so adding up their
times would count the same seconds twice.
"""

from __future__ import annotations

import contextlib
import json
import math
import time

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from gyreflow.plan.words import plural
from gyreflow.runtime.driver import JobListener
from gyreflow.runtime.metrics import TaskResult, WindowMetrics

SUMMARY_WIDTH = 80
_SHOWN: list[Console] = []  # consoles whose progress display is on the terminal now


def shown_console() -> Console | None:
    """The console of the progress display shown now, if any: a line printed through it goes above
    the display (printed through another console, it would be glued to the display's line)."""
    return _SHOWN[-1] if _SHOWN else None


class ProgressListener(JobListener):
    """Shows windows done and records per second (over wall time) while a job runs."""

    def __init__(self, pipeline: str, console: Console | None = None, clock=time.monotonic) -> None:
        self.console = console or Console(stderr=True)
        self.progress: Progress | None = None
        self.records = 0
        self.windows = 0
        self.started = 0.0
        self.clock = clock
        self.pipeline = pipeline
        # Window -> [windows finished, records read] since the last checkpoint: a restart rolls
        # them back, and the display counts each window once, as the summary does.
        self.unsettled: dict[int, list[int]] = {}

    def on_start(self, name, graph) -> None:
        self.records = self.windows = 0
        self.started = self.clock()
        self.progress = Progress(
            SpinnerColumn(), TextColumn("[bold]{task.description}"), BarColumn(),
            TextColumn("{task.fields[windows]}"), TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(), console=self.console, transient=False,
        )
        self.progress.start()
        _SHOWN.append(self.console)
        self.task_id = self.progress.add_task(name, total=None, windows=plural(0, "window"),
                                              rate="")

    def on_window(self, metrics: WindowMetrics) -> None:
        self.windows += 1
        self.records += metrics.source_records
        counts = self.unsettled.setdefault(metrics.window, [0, 0])
        counts[0] += 1
        counts[1] += metrics.source_records
        self._show()

    def on_checkpoint(self, checkpoint) -> None:
        for window in [w for w in self.unsettled if w <= checkpoint.window]:
            del self.unsettled[window]

    def on_restart(self, name, graph, window, restart=None) -> None:
        for later in [w for w in self.unsettled if w > window]:
            windows, records = self.unsettled.pop(later)
            self.windows -= windows
            self.records -= records
        self._show()

    def _show(self) -> None:
        elapsed = self.clock() - self.started
        rate = f"{self.records / elapsed:,.0f} records/s" if elapsed > 0 else ""
        self.progress.update(self.task_id, windows=plural(self.windows, "window"), rate=rate)

    def on_finish(self, result: TaskResult) -> None:
        # A resume after the input's end ran no window: the summary says "nothing to do" instead.
        self.progress.update(self.task_id, total=1, completed=1, visible=self.windows > 0)
        self.progress.stop()
        if self.console in _SHOWN:
            _SHOWN.remove(self.console)


def source_records(result: TaskResult, sources: tuple[str, ...] = ()) -> int:
    """Records the sources read over every window of ``result`` (a window computed again after a
    restart counted once)."""
    if not sources:
        return result.records_read
    return sum(result.summary.operators.get(name, (0, 0))[1] for name in sources)


def _rate(records: int, seconds: float) -> float:
    return records / seconds if seconds > 0 else 0.0


def summary_tables(name: str, results: dict[str, TaskResult], max_windows: int = 8) -> list[Table]:
    """Each task of a pipeline in at most 80 columns: a title with windows, wall time and records/s;
    one row per operator (records in and out over every window); the first and last windows."""
    tables = []
    for task_name, result in results.items():
        summary = result.summary
        records = source_records(result)
        again = (f" ({result.recomputed:,} computed again after restarts)"
                 if result.recomputed else "")
        title = (f"{name}/{task_name}: {plural(result.window_count, 'window')}{again} in "
                 f"{result.seconds:.2f} s, {_rate(records, result.seconds):,.0f} records/s")
        table = Table(title=title, width=SUMMARY_WIDTH, title_justify="left")
        table.add_column("operator", overflow="fold", ratio=3)
        table.add_column("records in", justify="right", ratio=2)
        table.add_column("records out", justify="right", ratio=2)
        operators = list(summary.operators) or list(
            dict.fromkeys(op for w in result.windows for op in w.operators))
        for op in operators:
            records_in, records_out = summary.operators.get(op, (0, 0))
            table.add_row(op, "" if records_in == 0 else f"{records_in:,}", f"{records_out:,}")
        tables.append(table)
        tables.append(_windows_table(result, max_windows))
    return tables


def window_percentile(result: TaskResult, fraction: float) -> float:
    """Exact over the kept windows when every window is kept, else the histogram's upper bound."""
    windows = result.windows
    if windows and len(windows) == result.summary.count:
        times = sorted(w.seconds for w in windows)
        return times[min(len(times) - 1, max(0, math.ceil(fraction * len(times)) - 1))]
    return result.summary.percentile(fraction)


def _windows_table(result: TaskResult, max_windows: int) -> Table:
    summary = result.summary
    table = Table(width=SUMMARY_WIDTH, title_justify="left",
                  title=(f"windows: median {window_percentile(result, 0.5) * 1000:,.1f} ms, "
                         f"p99 {window_percentile(result, 0.99) * 1000:,.1f} ms, "
                         f"slowest {summary.max_seconds * 1000:,.1f} ms"))
    table.add_column("window", justify="right")
    table.add_column("seconds", justify="right")
    table.add_column("records read", justify="right")
    windows = result.windows
    shown = windows if summary.count <= max_windows else (
        windows[: max_windows // 2] + [None] + windows[-max_windows // 2:])
    for w in shown:
        if w is None:
            table.add_row("...", "", "")
        else:
            table.add_row(str(w.window), f"{w.seconds:.3f}", f"{w.source_records:,}")
    table.add_row("all", f"{result.seconds:.3f}", f"{source_records(result):,}", style="bold")
    return table


def metrics_document(summaries: list) -> dict:
    """The final metrics of a run as ``--metrics-json`` writes them."""
    pipelines = []
    for name, results in summaries:
        tasks = []
        for task_name, result in results.items():
            summary = result.summary
            records = source_records(result)
            tasks.append({
                "task": task_name,
                "windows": result.window_count,
                "windows_recomputed": result.recomputed,
                "last_completed_window": result.last_completed,
                "seconds": round(result.seconds, 6),
                "records_read": records,
                "records_per_second": round(_rate(records, result.seconds), 3),
                "window_seconds": {"median": window_percentile(result, 0.5),
                                   "p99": window_percentile(result, 0.99),
                                   "max": summary.max_seconds},
                "operators": {op: {"records_in": i, "records_out": o}
                              for op, (i, o) in summary.operators.items()},
                "bytes_sent": dict(summary.sent),
            })
        pipelines.append({"pipeline": name, "tasks": tasks})
    return {"pipelines": pipelines}


def check_metrics_json(path: str) -> None:
    """Raise the OSError that ``write_metrics_json(path, ...)`` would meet (a missing folder, no
    write permission, a symbolic link to nothing): checked before a run starts, so that a job does
    not do its work only to fail at its end. A file staged beside a regular target is made and
    removed; a target that is not a regular file (a pipe, ``/dev/stdout``) must be writable."""
    import errno
    import os

    if _written_in_place(path):
        if not os.access(path, os.W_OK):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
        return
    if os.path.islink(path) and not os.path.exists(path):
        raise FileNotFoundError(errno.ENOENT, "a symbolic link to nothing", path)
    fd, staged = _staged_metrics(path)
    os.close(fd)
    os.unlink(staged)


def _written_in_place(path: str) -> bool:
    """Whether ``path`` is written into as it is, not replaced: something other than a regular
    file (a named pipe, a device), or a descriptor of the process (``/dev/stdout``, a process
    substitution's ``/dev/fd/N``), whatever it leads to (``> log`` makes it the log file)."""
    import os
    import stat

    here = os.path.abspath(path)
    for _ in range(40):  # the links followed to what ``path`` names, as the kernel gives up too
        if here.startswith(("/proc/", "/dev/fd/")):
            return True
        if not os.path.islink(here):
            break
        here = os.path.normpath(os.path.join(os.path.dirname(here), os.readlink(here)))
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def _staged_metrics(path: str) -> tuple[int, str]:
    """A new file beside the file ``path`` names (a symbolic link's target: the link stays), renamed
    over it once written: its open descriptor and its path."""
    import os
    import tempfile

    return tempfile.mkstemp(prefix=".metrics-", dir=os.path.dirname(os.path.realpath(path)))


def write_metrics_json(path: str, summaries: list) -> None:
    """Write ``metrics_document`` to ``path``: a regular file (or a symbolic link's target) is
    replaced whole; a pipe or a device is written into."""
    import os

    text = json.dumps(metrics_document(summaries), indent=2) + "\n"
    if _written_in_place(path):  # appended: a log file behind ``/dev/stdout`` keeps its lines
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(text)
        return
    fd, staged = _staged_metrics(path)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(staged, os.path.realpath(path))
    except BaseException:
        with contextlib.suppress(OSError):  # gone with its folder: the first error tells why
            os.unlink(staged)
        raise
