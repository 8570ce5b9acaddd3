"""Run settings that the ``gyreflow`` command line hands to the pipelines a script defines."""

from __future__ import annotations

import contextlib
import contextvars

import attrs


@attrs.frozen
class RunSettings:
    """How ``gyreflow run``/``explain`` wants pipelines run: the config file and the display."""

    config_path: str | None = None
    environment: str | None = None
    quiet: bool = False
    show_progress: bool = False
    explain_format: str | None = None
    resume: bool = False
    fresh: bool = False
    from_window: int | None = None
    until_idle: float | None = None  # followed sources end after this many seconds without data
    summaries: list | None = attrs.field(default=None, eq=False)  # the CLI collects results here
    stop: object = attrs.field(default=None, eq=False)  # a runtime.stop.StopRequest the CLI sets
    explained: list | None = attrs.field(default=None, eq=False)  # gyreflow explain collects plans
    monitor: object = attrs.field(default=None, eq=False)  # the run's api.monitor.JobMonitor (--ui)
    listener: object = attrs.field(default=None, eq=False)  # --listener / --events, every pipeline
    ran: list | None = attrs.field(default=None, eq=False)  # (task, where it ran, its outputs)


_current: contextvars.ContextVar[RunSettings] = contextvars.ContextVar(
    "gyreflow_run_settings", default=RunSettings()  # noqa: B039 - frozen; no list by default
)


def current_settings() -> RunSettings:
    """The settings in force (defaults outside ``gyreflow run``)."""
    return _current.get()


@contextlib.contextmanager
def using_settings(settings: RunSettings):
    """Apply ``settings`` to the pipelines run inside the block."""
    token = _current.set(settings)
    try:
        yield settings
    finally:
        _current.reset(token)
