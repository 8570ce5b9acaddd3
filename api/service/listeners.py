"""Job listeners: hear windows, checkpoints and the end of a job, from code or ``gyreflow run``.

``Pipeline.execute(listener=...)`` takes a ``JobListener``; ``gyreflow run --listener MODULE:NAME``
loads one for every pipeline the script executes, and ``--events FILE`` writes every event as a
JSON line (``JsonLinesListener``).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import runpy
import threading
import warnings
from collections.abc import Callable

from gyreflow.runtime.job_listener import CheckpointMetrics, JobListener, Listeners
from gyreflow.runtime.metrics import Restart, TaskResult, WindowMetrics, restart_kind

__all__ = ["CheckpointMetrics", "JobListener", "JsonLinesListener", "Listeners", "TaskResult",
           "WindowMetrics", "combined", "load_listener"]


class ListenerSpecError(ValueError):
    """``--listener`` names something that is not a job listener."""


class JsonLinesListener(JobListener):
    """Appends one JSON object per event to ``path``, flushed as it happens:
    ``{"event": KIND, "task": ..., ...}``, ``KIND`` one of ``"start"``, ``"window"``,
    ``"checkpoint"``, ``"restart"``, ``"iteration_restored"`` and ``"finish"``; a restart says its
    ``kind``: ``rescale``, ``rebalance`` or ``restart`` (a failover, with its ``cause``,
    ``attempt`` and ``attempts``)."""

    def __init__(self, path: str, on_error: Callable[[str], None] | None = None) -> None:
        self.path = os.path.abspath(path)
        self._task = None
        self._graph = None
        self._lock = threading.Lock()
        self._handle = open(self.path, "a", encoding="utf-8")
        self._on_error = on_error
        self._failed = False

    def _write(self, event: dict) -> None:
        """Append ``event``. A file that can no longer be written (a full disk, a folder removed)
        does not stop the job: it is told once, to ``on_error`` (else as a warning), and the
        events after it are not written."""
        with self._lock:
            if self._failed:
                return
            try:
                self._handle.write(json.dumps(event, sort_keys=True) + "\n")
                self._handle.flush()
            except OSError as exc:
                self._failed = True
                with contextlib.suppress(OSError):  # the lines it still buffers fail the same way
                    self._handle.close()
                message = (f"events file {self.path}: cannot be written ({exc.strerror or exc}); "
                           f"the job goes on without writing its events")
                if self._on_error is None:
                    warnings.warn(message, RuntimeWarning, stacklevel=2)
                else:
                    self._on_error(message)

    def on_start(self, name: str, graph) -> None:
        self._task = name
        self._graph = graph.pipeline
        self._write({"event": "start", "task": name})

    def on_restart(self, name: str, graph, window: int, restart: Restart | None = None) -> None:
        if restart is None:
            kind, detail = restart_kind(self._graph, graph.pipeline)
        else:
            kind, detail = restart.kind, restart.detail
        self._graph = graph.pipeline
        event = {"event": "restart", "task": name, "kind": kind, "after_window": window,
                 "detail": detail}
        if restart is not None and kind == "restart":
            event.update(cause=restart.cause, attempt=restart.attempt, attempts=restart.attempts)
        self._write(event)

    def on_window(self, metrics: WindowMetrics) -> None:
        self._write({
            "event": "window", "task": metrics.task, "window": metrics.window,
            "seconds": round(metrics.seconds, 6), "records_read": metrics.source_records,
            "watermark": metrics.watermark,
            "operators": {name: {"records_in": m.records_in, "records_out": m.records_out}
                          for name, m in metrics.operators.items()},
            "bytes_sent": dict(metrics.sent),
        })

    def on_checkpoint(self, checkpoint: CheckpointMetrics) -> None:
        self._write({"event": "checkpoint", "task": self._task, "window": checkpoint.window,
                     "seconds": round(checkpoint.seconds, 6), "bytes": checkpoint.bytes})

    def on_iteration_restored(self, window: int, superstep: int) -> None:
        self._write({"event": "iteration_restored", "task": self._task, "window": window,
                     "superstep": superstep})

    def on_finish(self, result: TaskResult) -> None:
        records = result.records_read
        self._write({"event": "finish", "task": result.name, "windows": result.window_count,
                     "windows_recomputed": result.recomputed,
                     "last_completed_window": result.last_completed,
                     "seconds": round(result.seconds, 6), "records_read": records,
                     "records_per_second": round(records / result.seconds, 3)
                     if result.seconds > 0 else 0.0})

    def close(self) -> None:
        with self._lock, contextlib.suppress(OSError):  # told by ``_write`` when it failed
            self._handle.close()


class NoticeListener(JobListener):
    """What ``gyreflow run`` tells the user as it happens (unless ``--quiet``): a restart after a
    failure (what failed, the window the tasks go on from, the attempt), a resumed window that goes
    on from an iteration snapshot."""

    def __init__(self, console) -> None:
        self.console = console

    def on_restart(self, name: str, graph, window: int, restart: Restart | None = None) -> None:
        if restart is None or restart.kind != "restart":
            return  # a rescale or rebalance: the control command that asked for it answers
        attempt = f" (attempt {restart.attempt} of {restart.attempts})" if restart.attempts else ""
        self._print(f"restarted from window {window + 1}{attempt}: {restart.cause}")

    def on_iteration_restored(self, window: int, superstep: int) -> None:
        self._print(f"window {window} goes on after superstep {superstep} (its iteration snapshot)")

    def _print(self, line: str) -> None:
        """One line, above the progress display when one is shown (not glued to its line)."""
        from gyreflow.api.service.progress import shown_console

        (shown_console() or self.console).print(line, markup=False, highlight=False,
                                                soft_wrap=True)


def load_listener(spec: str) -> JobListener:
    """The listener ``spec`` names: ``package.module:NAME`` or ``path/to/file.py:NAME``, where NAME
    is a ``JobListener`` subclass (made with no arguments), an instance, or a function returning
    one. Fails with one line saying what is wrong."""
    where, sep, name = spec.rpartition(":")
    if not sep or not where or not name:
        msg = f"--listener {spec!r}: expected MODULE:NAME or FILE.py:NAME"
        raise ListenerSpecError(msg)
    try:
        if where.endswith(".py"):
            if not os.path.isfile(where):
                msg = f"--listener {spec!r}: no such file {where}"
                raise ListenerSpecError(msg)
            namespace = runpy.run_path(where, run_name="gyreflow_listener")
        else:
            namespace = vars(importlib.import_module(where))
    except ListenerSpecError:
        raise
    except Exception as exc:
        msg = f"--listener {spec!r}: {where} cannot be loaded ({type(exc).__name__}: {exc})"
        raise ListenerSpecError(msg) from exc
    if name not in namespace:
        msg = f"--listener {spec!r}: {where} has no {name!r}"
        raise ListenerSpecError(msg)
    found = namespace[name]
    listener = found
    if not isinstance(found, JobListener) and callable(found):
        try:
            listener = found()
        except Exception as exc:
            msg = f"--listener {spec!r}: {name}() failed ({type(exc).__name__}: {exc})"
            raise ListenerSpecError(msg) from exc
    if not isinstance(listener, JobListener):
        msg = (f"--listener {spec!r}: {name} is a {type(listener).__name__}, not a "
               "gyreflow.api.JobListener (subclass it and override on_window, on_checkpoint, "
               "on_finish)")
        raise ListenerSpecError(msg)
    return listener


def combined(*listeners: JobListener | None) -> JobListener | None:
    """One listener telling every given one, in order (None when none is given)."""
    present = [listener for listener in listeners if listener is not None]
    if not present:
        return None
    return present[0] if len(present) == 1 else Listeners(present)
