"""Files as a sink: one file per window, staged and published when the window completes, as text
lines, JSON lines, CSV or Parquet."""

from __future__ import annotations

import contextlib
import json
import os
import re
import uuid
import zlib
from collections.abc import Callable

import attrs

from gyreflow.api.config.loading import ConfigError
from gyreflow.api.connectors.folders import folder_problem
from gyreflow.api.connectors.sinks import Sink, SinkWriter
from gyreflow.api.connectors.staged_files import (
    SUMMARY_ATTRIBUTE,
    make_dirs,
    one_complete,
    publish_as,
    remove_if_empty,
    verify_staged,
)
from gyreflow.state.shared.private import user_umask
from gyreflow.state.shared.snapshot import SnapshotCorruptedError


def default_json_line(window: int, record: object) -> str:
    """Format a record as one JSON line."""
    return json.dumps(record, ensure_ascii=False)


_STAGING = ".staging"  # in-flight windows, in a folder of their own: listing it costs O(in flight)


class _FileWriter(SinkWriter):
    """Stages a window as ``.staging/<name>.<run>`` with its summary (window, records, bytes,
    CRC-32) as an extended attribute, or in a ``.sum`` file beside it where the file system has
    none, and publishes it by renaming it to ``<name>``. ``<run>`` is unique to this
    writer, so two writers never share a staged file; the publisher finds staged windows by listing
    the staging folder, which holds only windows in flight."""

    def __init__(self, sink: FileSink, task_index: int, parallelism: int) -> None:
        self.sink = sink
        self.task_index, self.parallelism = task_index, parallelism
        self.suffix = _part_suffix(task_index, parallelism)
        self.run = uuid.uuid4().hex[:16]
        self.open_files: dict[int, list] = {}  # window -> [handle, records, bytes, crc]
        self.published = 0
        self.staging = os.path.join(sink.directory, _STAGING)  # exists while windows are staged
        self.stages = False  # whether this writer staged a window (else it only publishes)
        with _output_problem(sink, None, sink.directory, "create"):
            make_dirs(sink.directory)
        self._final = re.compile(
            rf"^{re.escape(sink.prefix)}-(\d{{6,}}){re.escape(self.suffix)}{re.escape(sink.extension)}$")
        self._staged = re.compile(
            rf"^{re.escape(sink.prefix)}-(\d{{6,}}){re.escape(self.suffix)}{re.escape(sink.extension)}"
            rf"\.([0-9a-f]+)$")

    def final_path(self, window: int) -> str:
        name = f"{self.sink.prefix}-{window:06d}{self.suffix}{self.sink.extension}"
        return os.path.join(self.sink.directory, name)

    def staging_path(self, window: int) -> str:
        return os.path.join(self.staging, f"{os.path.basename(self.final_path(window))}.{self.run}")

    def _file(self, window: int) -> list:
        entry = self.open_files.get(window)
        if entry is None:
            path = self.staging_path(window)
            with _output_problem(self.sink, window, path, "write"):
                try:
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
                except FileNotFoundError:
                    make_dirs(self.staging)  # another writer removed it, empty, when it closed
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
                os.fchmod(fd, 0o666 & ~user_umask())
            self.stages = True
            entry = self.open_files[window] = [os.fdopen(fd, "wb"), 0, 0, 0, self.sink.encoder()]
        return entry

    def _append(self, window: int, entry: list, data: bytes) -> None:
        with _output_problem(self.sink, window, self.staging_path(window), "write"):
            entry[0].write(data)  # a full disk, a quota
        entry[2] += len(data)
        entry[3] = zlib.crc32(data, entry[3])

    def write(self, window: int, records: list) -> None:
        entry = self._file(window)
        try:
            data = entry[4].add(window, records)
        except Exception as exc:  # noqa: BLE001 - a record the format cannot hold
            raise _unwritable(self.sink, window, records, exc) from None
        self._append(window, entry, data)
        entry[1] += len(records)

    def finish_window(self, window: int) -> None:
        entry = self._file(window)  # an empty window still gets its file
        try:
            tail = entry[4].end()
        except Exception as exc:  # noqa: BLE001
            raise _unwritable(self.sink, window, [], exc) from None
        self._append(window, entry, tail)
        with _output_problem(self.sink, window, self.staging_path(window), "write"):
            self._stage(window, entry)

    def _stage(self, window: int, entry: list) -> None:
        """Make the staged file of ``window`` durable, with its summary."""
        handle, records, size, crc, _ = entry
        handle.flush()
        summary = json.dumps({"window": window, "records": records, "bytes": size, "crc32": crc})
        # The summary travels with the staged file as an extended attribute (synced with it): a
        # file of its own cost a second file creation every window (here 0.1-0.3 ms of system
        # time each, more than the rest of a small window's staging). A file system without
        # user attributes gets the ``.sum`` file beside it, as before.
        attached = _attach_summary(handle.fileno(),
                                   json.dumps([window, records, size, crc], separators=(",", ":")))
        if self.durable:
            os.fsync(handle.fileno())
        handle.close()
        del self.open_files[window]
        if attached:
            return
        path = self.staging_path(window) + ".sum"
        with open(path, "w", encoding="utf-8") as sums:
            sums.write(summary)
            if self.durable:
                sums.flush()
                os.fsync(sums.fileno())

    def _staged_on_disk(self) -> dict[int, list[str]]:
        """Window -> staged files of this writer's part (any run), from the staging folder."""
        found: dict[int, list[str]] = {}
        if not os.path.isdir(self.staging):
            return found
        for name in os.listdir(self.staging):
            match = self._staged.match(name)
            if match is not None:
                found.setdefault(int(match.group(1)), []).append(os.path.join(self.staging, name))
        return found

    def _staged_by_other_layouts(self) -> dict[tuple[int, str], list[str]]:
        """``(window, published name) -> staged files`` of parts no task of this layout writes:
        staged before a resume when the sink ran with another number of tasks (a rescale)."""
        found: dict[tuple[int, str], list[str]] = {}
        if not os.path.isdir(self.staging):
            return found
        ours = {_part_suffix(i, self.parallelism) for i in range(self.parallelism)}
        sink = self.sink
        any_staged = re.compile(rf"^({re.escape(sink.prefix)}-(\d{{6,}})(-part-\d{{4}})?"
                                rf"{re.escape(sink.extension)})\.[0-9a-f]+$")
        for name in os.listdir(self.staging):
            match = any_staged.match(name)
            if match is not None and (match.group(3) or "") not in ours:
                key = (int(match.group(2)), match.group(1))
                found.setdefault(key, []).append(os.path.join(self.staging, name))
        return found

    def _publish(self, window: int, staged: str) -> None:
        publish_as(staged, self.final_path(window))

    def publish(self, window: int) -> None:
        # Staged windows are looked up on disk: the writer that publishes (on the driver, with
        # Spark) need not be the one that staged them. A window that cannot be published (the
        # folder made read-only meanwhile) stays staged: a resume publishes it.
        if window <= self.published:
            return
        with _output_problem(self.sink, window, self.staging, "list"):
            staged_windows = sorted(self._staged_on_disk().items())
        for staged, paths in staged_windows:
            if self.published < staged <= window:
                with _output_problem(self.sink, staged, self.final_path(staged), "publish"):
                    self._publish(staged,
                                  one_complete(paths, staged) if len(paths) > 1 else paths[0])
        self.published = window
        if not self.stages:
            # A writer that stages windows keeps the folder until it closes: removed here, its next
            # window made it again (an rmdir, a mkdir and a chmod a window, about a millisecond).
            remove_if_empty(self.staging)

    def recover(self, window: int) -> None:
        """Publish the staged windows up to ``window`` once each checks against its summary; drop
        later ones; refuse, before changing anything, when a completed window's output is damaged
        or missing."""
        with _output_problem(self.sink, window, self.sink.directory, "publish"):
            self._recover(window)

    def _recover(self, window: int) -> None:
        self.published = window
        staged = self._staged_on_disk()
        for number, paths in staged.items():
            if number <= window:
                if len(paths) > 1:  # copies of a task that ran again: keep one complete copy
                    staged[number] = paths = [one_complete(paths, number)]
                verify_staged(paths[0], number)
        # Parts another layout of the sink staged (it had another number of tasks before the
        # resume) belong to no task of this one: the first task checks and publishes them under
        # the names they were staged for; every task counts their windows as present.
        foreign = self._staged_by_other_layouts()
        if self.task_index == 0:
            for (number, _), paths in foreign.items():
                if number <= window:
                    paths[:] = [one_complete(paths, number)] if len(paths) > 1 else paths
                    verify_staged(paths[0], number)
        any_part = re.compile(rf"^{re.escape(self.sink.prefix)}-(\d{{6,}})(-part-\d{{4}})?"
                              rf"{re.escape(self.sink.extension)}$")
        present = {number for number in staged if number <= window}
        present.update(number for number, _ in foreign if number <= window)
        later = []
        ours = {_part_suffix(i, self.parallelism) for i in range(self.parallelism)}
        for name in os.listdir(self.sink.directory):
            match = self._final.match(name)
            if match is not None and int(match.group(1)) > window:
                later.append(name)  # recomputed on purpose (--from-window, --fresh)
                continue
            match = any_part.match(name)
            if match is not None:
                if int(match.group(1)) <= window:
                    present.add(int(match.group(1)))
                elif self.task_index == 0 and (match.group(2) or "") not in ours:
                    # a later window published by another layout (before a rescale): this one
                    # computes it again, under its own names
                    later.append(name)
        missing = next((w for w in range(1, window + 1) if w not in present), None)
        if missing is not None and present:
            msg = (f"FileSink: the output of completed window {missing} "
                   f"({self.final_path(missing)}) is neither published nor staged in "
                   f"{self.staging}: it was deleted; restore it, or recompute with --from-window "
                   "or --fresh")
            raise SnapshotCorruptedError(msg)
        for number, paths in sorted(staged.items()):
            for path in paths:
                if number <= window:
                    self._publish(number, path)
                else:
                    os.unlink(path)
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path + ".sum")
        if self.task_index == 0:
            for (number, name), paths in sorted(foreign.items()):
                for path in paths:
                    if number <= window:
                        publish_as(path, os.path.join(self.sink.directory, name))
                    else:
                        for doomed in (path, path + ".sum"):
                            with contextlib.suppress(FileNotFoundError):
                                os.unlink(doomed)
        for name in os.listdir(self.staging) if os.path.isdir(self.staging) else ():
            # summaries left by a publish cut short
            if name.endswith(".sum") and not os.path.exists(os.path.join(self.staging, name[:-4])):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(self.staging, name))
        for name in later:
            os.unlink(os.path.join(self.sink.directory, name))
        remove_if_empty(self.staging)

    def close(self) -> None:
        for window, entry in list(self.open_files.items()):
            entry[0].close()
            os.unlink(self.staging_path(window))
        self.open_files.clear()
        remove_if_empty(self.staging)


def _unwritable(sink: FileSink, window: int, records: list, exc: BaseException):
    """One line naming the sink, the window and the record that its format cannot hold."""
    from gyreflow.api.connectors.file_encoders import UnwritableRecordError
    from gyreflow.runtime.errors import DataError

    if isinstance(exc, UnwritableRecordError):
        reason = " ".join(exc.reason.split())
        msg = (f"{sink.describe()}: window {window}, record {exc.record!r:.200}: cannot be written "
               f"as {sink.extension}: {reason}")
    else:
        shown = f" (records like {records[0]!r:.200})" if records else ""
        reason = " ".join(str(exc).split())
        msg = (f"{sink.describe()}: window {window} cannot be written as {sink.extension}: "
               f"{type(exc).__name__}: {reason}{shown}")
    return DataError(msg, window)


@contextlib.contextmanager
def _output_problem(sink: FileSink, window: int | None, path: str, what: str):
    """Turn an OSError of the file system (a folder made read-only while the job runs, a full
    disk) into one line naming the sink, the window and the path (exit status 5): what was
    completed stays staged or published, and a resume, once the folder is fixed, goes on from
    there. ``what``: what could not be done to ``path`` (``write``, ``publish``, ...)."""
    from gyreflow.runtime.errors import OutputError

    try:
        yield
    except OSError as exc:
        where = f"window {window}: " if window is not None else ""
        named = exc.filename2 or exc.filename or path  # os.replace names the published path second
        reason = exc.strerror or f"{type(exc).__name__}: {exc}"
        msg = (f"{sink.describe()}: {where}cannot {what} {named} ({reason}); make the output "
               "folder writable (or free space) and run again with --resume")
        raise OutputError(msg, window) from None


def _part_suffix(task_index: int, parallelism: int) -> str:
    """What a sink task adds to its files' names: nothing when it is the only one."""
    return "" if parallelism == 1 else f"-part-{task_index + 1:04d}"


def _attach_summary(fd: int, summary: str) -> bool:
    """Store ``summary`` on the open staged file as an extended attribute; False where the file
    system (or the platform) has none, and the summary goes to a ``.sum`` file. The attribute is
    the list ``[window, records, bytes, crc32]``: short enough to live in the inode itself (ext4's
    256-byte inodes leave 56 bytes for its value), where the object ``.sum`` holds would need a
    block of its own, freed again when the published file drops the attribute (a discard on a
    file system mounted with one: 1-3 ms of waiting a window)."""
    try:
        os.setxattr(fd, SUMMARY_ATTRIBUTE, summary.encode())
    except (OSError, AttributeError):
        return False
    return True


def _shown(path: str) -> str:
    """``path`` relative to the working directory when it lies under it (as users usually give it)."""
    relative = os.path.relpath(path)
    return path if relative.startswith(os.pardir) else relative


@attrs.frozen(eq=False)
class FileSink(Sink):
    """One file per window in ``directory``: ``window-000001.jsonl``, ``window-000002.jsonl``, ...

    Each line is ``format(window, record)`` (JSON of the record by default). A window's file is written
    to a hidden staging file and renamed into place when the window ends, so readers never see a
    partial file. With parallelism ``p > 1`` every task writes ``window-000001-part-0001.jsonl`` etc.
    The default parallelism is 1: one file per window.
    """

    # Absolute from where the job starts: Spark executors resolve nothing in their own folders.
    directory: str = attrs.field(converter=lambda path: os.path.abspath(os.fspath(path)))
    format: Callable[[int, object], str] = default_json_line
    prefix: str = "window"
    extension: str = ".jsonl"
    default_parallelism = 1

    def __attrs_post_init__(self) -> None:
        # Checked where the pipeline is built, before any data moves.
        if os.path.exists(self.directory) and not os.path.isdir(self.directory):
            msg = f"FileSink: output {self.directory!r} exists and is not a directory"
            raise ConfigError(msg)
        problem = folder_problem(self.directory)
        if problem is not None:
            msg = f"FileSink: output {self.directory!r} {problem}"
            raise ConfigError(msg)

    def create_writer(self, task_index: int, parallelism: int) -> SinkWriter:
        return _FileWriter(self, task_index, parallelism)

    def output_folder(self) -> str:
        """``directory``: a second run writing it would remove the first one's staged windows."""
        return self.directory

    def encoder(self):
        """What turns a window's records into its file's bytes (one per window and task)."""
        from gyreflow.api.connectors.file_encoders import LineEncoder, json_lines

        # The default format's lines come out of one JSON encoder per batch: the same text.
        return LineEncoder(self.format, json_lines if self.format is default_json_line else None)

    def reset(self) -> None:
        if not os.path.isdir(self.directory):
            return
        ours = re.compile(rf"^{re.escape(self.prefix)}-\d{{6,}}(-part-\d{{4}})?"
                          rf"{re.escape(self.extension)}(\.[0-9a-f]+(\.sum)?)?$")
        staging = os.path.join(self.directory, _STAGING)
        for folder in (staging, self.directory):
            if os.path.isdir(folder):
                for name in os.listdir(folder):
                    if ours.match(name) and os.path.isfile(os.path.join(folder, name)):
                        os.unlink(os.path.join(folder, name))
        remove_if_empty(staging)

    def published_after(self, window: int, parallelism: int) -> list[str]:
        if not os.path.isdir(self.directory):
            return []
        name = re.compile(rf"^{re.escape(self.prefix)}-(\d{{6,}})(-part-\d{{4}})?"
                          rf"{re.escape(self.extension)}$")
        found = []
        for entry in os.listdir(self.directory):
            match = name.match(entry)
            if match is not None and int(match.group(1)) > window:
                found.append((int(match.group(1)), os.path.join(self.directory, entry)))
        return [path for _, path in sorted(found)]

    def describe(self) -> str:
        return f"FileSink({_shown(self.directory)})"


@attrs.frozen(eq=False)
class CsvSink(FileSink):
    """One CSV file per window (and task): ``window-000001.csv``, published like ``FileSink``.

    Records are dicts (columns from ``columns``, else the first record's keys) or sequences; the
    header line is written unless ``header=False``.
    """

    extension: str = ".csv"
    columns: tuple[str, ...] | None = attrs.field(
        default=None, converter=lambda c: tuple(c) if c is not None else None)
    delimiter: str = ","
    header: bool = True

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        from gyreflow.api.connectors.file_formats import check_delimiter

        check_delimiter("CsvSink", self.delimiter)

    def encoder(self):
        from gyreflow.api.connectors.file_encoders import CsvEncoder
        from gyreflow.api.connectors.file_formats import CsvOptions

        return CsvEncoder(CsvOptions(self.delimiter, self.header, self.columns))

    def describe(self) -> str:
        return f"CsvSink({_shown(self.directory)})"


@attrs.frozen(eq=False)
class ParquetSink(FileSink):
    """One Parquet file per window (and task): ``window-000001.parquet``, published like
    ``FileSink``. Records are dicts; ``columns`` selects and orders the columns. A value that would
    not read back as itself (text in a column of bytes, dicts without the same keys, a set) is
    refused, naming the record and the column. Needs pyarrow."""

    extension: str = ".parquet"
    columns: tuple[str, ...] | None = attrs.field(
        default=None, converter=lambda c: tuple(c) if c is not None else None)
    compression: str = "snappy"

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        from gyreflow.api.connectors.file_formats import require_pyarrow

        require_pyarrow("ParquetSink")

    def encoder(self):
        from gyreflow.api.connectors.file_encoders import ParquetEncoder

        return ParquetEncoder(self.columns, self.compression)

    def describe(self) -> str:
        return f"ParquetSink({_shown(self.directory)})"
