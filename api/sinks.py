"""Sinks: print, one file per window, and the base classes for writing your own."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable

import attrs

from gyreflow.api.config import ConfigError


class SinkWriter:
    """Writes one sink task's records; one instance per task, opened where the task runs.

    Exactly-once output is two-phase: ``finish_window`` makes a window's output durable but not yet
    visible (staged); ``publish`` makes the staged windows up to a completed window visible, and must
    be idempotent; after a crash, ``recover`` publishes what was staged up to the last completed
    window and drops the rest, which the resumed job produces again. A writer that makes output
    visible in ``write`` (like ``PrintSink``) is at-least-once: replayed windows appear again.
    """

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


def default_json_line(window: int, record: object) -> str:
    """Format a record as one JSON line."""
    return json.dumps(record, ensure_ascii=False)


class _FileWriter(SinkWriter):
    def __init__(self, sink: FileSink, task_index: int, parallelism: int) -> None:
        self.sink = sink
        self.suffix = "" if parallelism == 1 else f"-part-{task_index + 1:04d}"
        self.open_files: dict[int, object] = {}
        self.staged: set[int] = set()
        self.published = 0
        os.makedirs(sink.directory, exist_ok=True)

    def final_path(self, window: int) -> str:
        name = f"{self.sink.prefix}-{window:06d}{self.suffix}{self.sink.extension}"
        return os.path.join(self.sink.directory, name)

    def staging_path(self, window: int) -> str:
        head, tail = os.path.split(self.final_path(window))
        return os.path.join(head, f".{tail}.staged")

    def _file(self, window: int):
        handle = self.open_files.get(window)
        if handle is None:
            handle = self.open_files[window] = open(
                self.staging_path(window), "w", encoding="utf-8"
            )
        return handle

    def write(self, window: int, records: list) -> None:
        fmt = self.sink.format
        self._file(window).write("".join(fmt(window, r) + "\n" for r in records))

    def finish_window(self, window: int) -> None:
        handle = self._file(window)  # an empty window still gets its (empty) file
        handle.flush()
        os.fsync(handle.fileno())
        handle.close()
        del self.open_files[window]
        self.staged.add(window)

    def publish(self, window: int) -> None:
        # Staged windows are looked up on disk: the writer that publishes (on the driver, with
        # Spark) need not be the one that staged them. Only windows since the last publish are
        # checked, so a long stream costs O(1) per window.
        for staged in range(self.published + 1, window + 1):
            path = self.staging_path(staged)
            if os.path.exists(path):
                os.replace(path, self.final_path(staged))
        self.published = max(self.published, window)
        self.staged = {w for w in self.staged if w > window}

    def _staged_on_disk(self) -> list[int]:
        pattern = re.compile(
            rf"^\.{re.escape(self.sink.prefix)}-(\d{{6}}){re.escape(self.suffix)}"
            rf"{re.escape(self.sink.extension)}\.staged$")
        found = []
        for name in os.listdir(self.sink.directory):
            match = pattern.match(name)
            if match is not None:
                found.append(int(match.group(1)))
        return sorted(found)

    def recover(self, window: int) -> None:
        self.published = window
        for staged in self._staged_on_disk():
            if staged <= window:
                os.replace(self.staging_path(staged), self.final_path(staged))
            else:
                os.unlink(self.staging_path(staged))
        for name in os.listdir(self.sink.directory):  # published files of uncompleted windows
            if self._window_of_final(name) is not None and self._window_of_final(name) > window:
                os.unlink(os.path.join(self.sink.directory, name))

    def _window_of_final(self, name: str) -> int | None:
        match = re.match(rf"^{re.escape(self.sink.prefix)}-(\d{{6}}){re.escape(self.suffix)}"
                         rf"{re.escape(self.sink.extension)}$", name)
        return None if match is None else int(match.group(1))

    def close(self) -> None:
        for window, handle in list(self.open_files.items()):
            handle.close()
            os.unlink(self.staging_path(window))
        self.open_files.clear()


@attrs.frozen(eq=False)
class FileSink(Sink):
    """One file per window in ``directory``: ``window-000001.jsonl``, ``window-000002.jsonl``, ...

    Each line is ``format(window, record)`` (JSON of the record by default). A window's file is written
    to a hidden staging file and renamed into place when the window ends, so readers never see a
    partial file. With parallelism ``p > 1`` every task writes ``window-000001-part-0001.jsonl`` etc.
    The default parallelism is 1: one file per window.
    """

    directory: str = attrs.field(converter=os.fspath)
    format: Callable[[int, object], str] = default_json_line
    prefix: str = "window"
    extension: str = ".jsonl"
    default_parallelism = 1

    def __attrs_post_init__(self) -> None:
        # Checked where the pipeline is built, before any data moves.
        if os.path.exists(self.directory) and not os.path.isdir(self.directory):
            msg = f"FileSink: output {self.directory!r} exists and is not a directory"
            raise ConfigError(msg)
        existing = os.path.abspath(self.directory)
        while not os.path.exists(existing):
            existing = os.path.dirname(existing)
        if not os.path.isdir(existing):
            msg = f"FileSink: output {self.directory!r} cannot be created: {existing!r} is a file"
            raise ConfigError(msg)
        if not os.access(existing, os.W_OK | os.X_OK):
            msg = (f"FileSink: output {self.directory!r} cannot be written: no write permission "
                   f"on {existing!r}")
            raise ConfigError(msg)

    def create_writer(self, task_index: int, parallelism: int) -> SinkWriter:
        return _FileWriter(self, task_index, parallelism)

    def describe(self) -> str:
        return f"FileSink({self.directory})"
