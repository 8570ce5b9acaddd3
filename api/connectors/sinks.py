"""Sinks: the base classes for writing your own, and print (files, one a window, are in
``file_sink``)."""

from __future__ import annotations

import sys

import attrs


class SinkWriter:
    """Writes one sink task's records; one instance per task, opened where the task runs.

    Exactly-once output is two-phase: ``finish_window`` makes a window's output durable but not yet
    visible (staged); ``publish`` makes the staged windows up to a completed window visible, and must
    be idempotent; after a crash, ``recover`` publishes what was staged up to the last completed
    window and drops the rest, which the resumed job produces again. A writer that makes output
    visible in ``write`` (like ``PrintSink``) is at-least-once: replayed windows appear again.

    ``durable`` is False when the job's commits end with its process (the memory state backend):
    staged output then has to outlive a killed process, not a crash of the machine (no fsync).
    """

    durable = True

    def write(self, window: int, records: list) -> None:
        """Stage ``records`` of ``window``."""
        raise NotImplementedError

    def finish_window(self, window: int) -> None:
        """Every record of ``window`` was written: make the staged output durable."""

    def publish(self, window: int) -> None:
        """Windows up to ``window`` are completed: make their staged output visible."""

    def recover(self, window: int) -> None:
        """Resuming after completed window ``window``: publish staged windows up to it, drop later."""

    def close(self) -> None:
        """Release files and connections."""


class Sink:
    """Base of sinks: a light, picklable description that opens a writer per sink task."""

    #: Parallelism used when the stream does not set one (None: the environment's default).
    default_parallelism: int | None = None

    def create_writer(self, task_index: int, parallelism: int) -> SinkWriter:
        """Open the writer of task ``task_index`` of ``parallelism``."""
        raise NotImplementedError

    def published_after(self, window: int, parallelism: int) -> list[str]:
        """Published output of windows after ``window`` (what a resume to ``window`` would have
        to take back), for sinks that can tell; checked before anything moves."""
        return []

    def reset(self) -> None:
        """A run starts from nothing (no completed window): drop what earlier runs staged or
        published, for sinks that keep either."""

    def output_folder(self) -> str | None:
        """The folder this sink writes on this machine's file system, which one run at a time may
        write (the run locks it before any data moves); None for sinks that write none."""
        return None

    def describe(self) -> str:
        """A short text for ``explain``."""
        return type(self).__name__


class _PrintWriter(SinkWriter):
    def __init__(self, prefix: str, stream) -> None:
        self.prefix = prefix
        self.stream = stream

    def write(self, window: int, records: list) -> None:
        stream = self.stream or sys.stdout
        stream.write("".join(f"{self.prefix}[{window}] {r!r}\n" for r in records))


@attrs.frozen(eq=False)
class PrintSink(Sink):
    """Print every record as ``[window] record`` to standard output (or ``stream``)."""

    prefix: str = ""
    stream: object = None

    @property
    def in_process_only(self) -> bool:
        """An explicit stream lives in this process: executors elsewhere would write to a copy."""
        return self.stream is not None

    def create_writer(self, task_index: int, parallelism: int) -> SinkWriter:
        return _PrintWriter(self.prefix, self.stream)
