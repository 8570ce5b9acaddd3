"""A source over the files of a directory, read once each across crashes, optionally followed."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import time
import zlib
from collections.abc import Callable, Mapping

import attrs

from gyreflow.api.config.loading import ConfigError
from gyreflow.api.connectors.column_formats import open_any_cursor
from gyreflow.api.connectors.file_formats import (
    COLUMNAR_FORMATS,
    FORMATS,
    CsvOptions,
    MalformedRecordError,
    check_delimiter,
)
from gyreflow.api.connectors.folders import folder_problem
from gyreflow.api.connectors.requirements import PYARROW, Requirement
from gyreflow.api.connectors.sources import GrowingInputReader, Source, SourceReader
from gyreflow.runtime.dataflow.columns.batch import ColumnBatch, concat
from gyreflow.runtime.errors import DataError

ORDERS = ("name", "mtime")
COLUMN_BATCH_ROWS = 65_536  # rows a columnar source task reads at a time

# What reading a file raises when it cannot be read through: a cut .gz stream raises EOFError and
# damaged compressed data zlib.error, neither of which is an OSError.
_DAMAGED = (OSError, EOFError, zlib.error)


def until_idle_default() -> float | None:
    """``gyreflow run --until-idle SECONDS`` sets this for the followed sources a script builds."""
    from gyreflow.api.config.session import current_settings

    return current_settings().until_idle


@attrs.frozen(eq=False)
class DirectorySource(Source):
    """Records of the files in ``directory`` that match ``pattern`` (a glob, ``**`` for sub-folders).

    Files are read in a stable order: by name (``order="name"``, the relative path) or by
    modification time, then name (``order="mtime"``). Files whose name starts with ``.`` or ``_``
    are skipped: write a file under such a name and rename it into place when it is complete.
    ``.gz`` files are read decompressed. With parallelism ``p`` each file belongs to one source
    task (by a hash of its name), so the tasks read different files at once.

    ``format``: ``"text"`` (lines, without line endings), ``"jsonl"`` (one JSON value a line),
    ``"csv"`` (dicts by the header, or ``columns``; ``types`` converts cells) or ``"parquet"``
    (dicts; ``columns`` selects columns; row groups are read as batches). ``columnar=True`` (JSON
    lines, CSV and Parquet) keeps the batches as Arrow columns (``ColumnBatch``): ``key_by("column")``,
    ``count()`` and the other column operations then work on arrays, and user functions still see
    each record as a dict.

    Each file is read exactly once across crashes and resumes: the files done and the position
    in the current one are the source task's offset, stored with every snapshot, with a
    fingerprint of the current file up to the position. A resume refuses a current file that was
    cut short or replaced since (it ends before the position, or its first bytes or those before
    the position differ: for Parquet, its schema or the row groups read), naming the file and the
    position, rather than lose or mix up records; a file that was only appended to is read on.

    ``follow=True`` keeps watching the directory for new files (every ``poll_interval`` seconds)
    until the job is stopped, or until no new record arrived for ``until_idle`` seconds
    (``gyreflow run --until-idle SECONDS`` sets it for every followed source).

    A record the format cannot read stops the job with an error naming the file and the line (or
    row group); with ``dead_letters=DIRECTORY`` it is written there instead, as a JSON line
    ``{"file", "where", "error", "text"}`` in ``dead-letters-<task>.jsonl``, exactly once; a
    folder that cannot be created or written is refused when the source is built.
    """

    directory: str = attrs.field(converter=lambda path: os.path.abspath(os.fspath(path)))
    pattern: str = "*"
    format: str = "text"
    order: str = "name"
    follow: bool = False
    poll_interval: float = 1.0
    until_idle: float | None = attrs.field(factory=until_idle_default)
    columns: tuple[str, ...] | None = attrs.field(
        default=None, converter=lambda c: tuple(c) if c is not None else None)
    delimiter: str = ","
    header: bool = True
    types: Mapping[str, Callable[[str], object]] = attrs.field(factory=dict, converter=dict)
    dead_letters: str | None = attrs.field(
        default=None, converter=lambda p: os.path.abspath(os.fspath(p)) if p is not None else None)
    columnar: bool = False

    def __attrs_post_init__(self) -> None:
        # Checked where the pipeline is built, before any data moves.
        if self.format not in FORMATS:
            msg = f"DirectorySource: format {self.format!r} is not one of {', '.join(FORMATS)}"
            raise ConfigError(msg)
        if self.order not in ORDERS:
            msg = f"DirectorySource: order {self.order!r} is not one of {', '.join(ORDERS)}"
            raise ConfigError(msg)
        if not os.path.isdir(self.directory):
            what = "is not a directory" if os.path.exists(self.directory) else "does not exist"
            msg = f"DirectorySource: input directory {self.directory!r} {what}"
            raise ConfigError(msg)
        if self.poll_interval <= 0 or (self.until_idle is not None and self.until_idle < 0):
            msg = "DirectorySource: poll_interval must be > 0 and until_idle >= 0"
            raise ConfigError(msg)
        if self.format == "csv":
            check_delimiter("DirectorySource", self.delimiter)
            if self.columnar and not self.header and self.columns is None:
                msg = ("DirectorySource: columnar=True reads CSV by column names: keep "
                       "header=True or give columns=")
                raise ConfigError(msg)
        if self.columnar and self.format not in COLUMNAR_FORMATS:
            msg = (f"DirectorySource: columnar=True reads {', '.join(COLUMNAR_FORMATS)}, not "
                   f"format {self.format!r}")
            raise ConfigError(msg)
        if self.dead_letters is not None:
            check_dead_letters(self.dead_letters)

    def requires(self) -> tuple[Requirement, ...]:
        """pyarrow for Parquet and for columns (checked before any data moves)."""
        return (PYARROW,) if self.format == "parquet" or self.columnar else ()

    @property
    def csv_options(self) -> CsvOptions:
        return CsvOptions(self.delimiter, self.header, self.columns, self.types)

    def files(self) -> list[str]:
        """The matching files now, as paths relative to ``directory``, in the source's order."""
        found = []
        for path in glob.glob(os.path.join(glob.escape(self.directory), self.pattern),
                              recursive=True):
            relative = os.path.relpath(path, self.directory)
            if any(part.startswith((".", "_")) for part in relative.split(os.sep)):
                continue
            try:
                stat = os.stat(path)
            except FileNotFoundError:
                continue
            if os.path.isfile(path):
                found.append((stat.st_mtime_ns if self.order == "mtime" else 0, relative))
        return [name for _, name in sorted(found)]

    def create_reader(self, task_index: int, parallelism: int) -> SourceReader:
        return _DirectoryReader(self, task_index, parallelism)

    def describe(self) -> str:
        follow = ", follow" if self.follow else ""
        return f"DirectorySource({os.path.basename(self.directory)}/{self.pattern}, {self.format}{follow})"


def check_dead_letters(directory: str) -> None:
    """Refuse a dead-letter folder that cannot be created or written, as FileSink refuses its
    output: it is first written at the first bad record, which may come hours into a run."""
    if os.path.exists(directory) and not os.path.isdir(directory):
        msg = f"DirectorySource: dead_letters {directory!r} exists and is not a directory"
        raise ConfigError(msg)
    problem = folder_problem(directory)
    if problem is not None:
        msg = f"DirectorySource: dead_letters {directory!r} {problem}"
        raise ConfigError(msg)


def owner_task(name: str, parallelism: int) -> int:
    """The source task that reads file ``name`` (stable for a name and a parallelism)."""
    return zlib.crc32(name.encode("utf-8")) % parallelism


class _DirectoryReader(GrowingInputReader):
    """One task's files: the offset is ``{"done": names read whole, "file": current, "at": position,
    "check": the current file's fingerprint at the position}`` (``file_fingerprints``)."""

    def __init__(self, source: DirectorySource, task_index: int, parallelism: int) -> None:
        self.source = source
        self.task = task_index
        self.parallelism = parallelism
        self.rows_per_batch = COLUMN_BATCH_ROWS if source.columnar else 0
        self.done: set[str] = set()
        self.current: str | None = None
        self.cursor = None
        self.queue: list[str] = []
        self.scanned = float("-inf")
        self.last_data = time.time()  # wall clock: kept in the offset across processes
        self.ended = False
        self.trimmed = False
        self.letters = None
        if source.dead_letters is not None:
            self.letters = os.path.join(source.dead_letters, f"dead-letters-{task_index:04d}.jsonl")

    # Files ----------------------------------------------------------------------------------

    def _next_look(self) -> float:
        return self.scanned + self.source.poll_interval

    def _look_now(self) -> None:
        self.scanned = float("-inf")

    def _scan(self) -> None:
        self.scanned = time.monotonic()
        taken = set(self.queue)
        for name in self.source.files():
            if (name not in self.done and name != self.current and name not in taken
                    and owner_task(name, self.parallelism) == self.task):
                self.queue.append(name)

    def _next_file(self) -> bool:
        """Open the next file of this task; False when there is none now. A followed directory
        is listed again at most every ``poll_interval`` seconds."""
        if not self.queue and (not self.source.follow
                               or time.monotonic() - self.scanned >= self.source.poll_interval):
            if self.source.follow or self.scanned == float("-inf"):
                self._scan()
        if not self.queue:
            return False
        self._open(self.queue.pop(0), None)
        return True

    def _open(self, name: str, position, check=None) -> None:
        self.current = name
        path = os.path.join(self.source.directory, name)
        try:
            self.cursor = open_any_cursor(path, self.source.format, self.source.csv_options,
                                          self.source.columns, position, self.source.columnar,
                                          check)
        except MalformedRecordError as bad:
            self.cursor = None
            self._malformed(bad)
            self._finish_file()
        except _DAMAGED as exc:
            msg = f"input file {path}: cannot be read ({exc})"
            raise DataError(msg) from None

    def _finish_file(self) -> None:
        if self.cursor is not None:
            self.cursor.close()
        self.cursor = None
        if self.current is not None:
            self.done.add(self.current)
        self.current = None

    # Reading --------------------------------------------------------------------------------

    def _take(self, max_records: int) -> list:
        """Records available now, without waiting."""
        if not self.trimmed:  # a start from nothing: dead letters of earlier runs go
            self._trim_letters(None, None)
        out: list = []
        columns: list[ColumnBatch] = []  # what a columnar cursor read
        taken = 0
        while taken < max_records:
            if self.cursor is None and (self.current is not None or not self._next_file()):
                break
            if self.cursor is None:
                continue  # a file that could not be opened as its format went to dead letters
            try:
                batch = self.cursor.read(max_records - taken)
            except _DAMAGED as exc:  # a damaged or cut .gz stream, a file removed under us
                path = os.path.join(self.source.directory, self.current)
                msg = f"input file {path}: cannot be read ({exc})"
                raise DataError(msg) from None
            if not batch:
                self._finish_file()
                continue
            if type(batch) is ColumnBatch:
                columns.append(batch)
                taken += len(batch)
                continue
            for record in batch:
                if isinstance(record, MalformedRecordError):
                    self._malformed(record)
                elif type(record) is ColumnBatch:  # a columnar cursor's rows beside bad lines
                    columns.append(record)
                    taken += len(record)
                else:
                    out.append(record)
                    taken += 1
        if columns:  # a columnar source: its malformed row groups went to dead letters
            try:
                return concat(columns)
            except Exception as exc:  # noqa: BLE001 - pyarrow: columns of types that do not mix
                schemas = "; ".join(sorted({str(b.data.schema).replace("\n", ", ")
                                            for b in columns}))
                msg = (f"input files of {self.source.directory} (up to {self.current}): columns "
                       f"whose types do not mix in one batch ({exc}): {schemas}")
                raise DataError(msg) from None
        return out

    def _malformed(self, bad: MalformedRecordError) -> None:
        path = os.path.join(self.source.directory, self.current)
        if self.letters is None:
            shown = f": {bad.text[:200]!r}" if bad.text is not None else ""
            msg = (f"input file {path}, {bad.where}: {bad.reason}{shown} (pass dead_letters= to "
                   "DirectorySource to set such records aside)")
            raise DataError(msg)
        os.makedirs(os.path.dirname(self.letters), exist_ok=True)
        entry = {"file": self.current, "where": bad.where, "error": bad.reason, "text": bad.text,
                 "after": self.cursor.position if self.cursor is not None else None}
        with open(self.letters, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry, ensure_ascii=False) + "\n")

    def offset(self) -> dict:
        cursor = self.cursor
        return {"done": sorted(self.done), "file": self.current,
                "at": cursor.position if cursor is not None else None,
                "check": cursor.fingerprint() if cursor is not None else None,
                "idle_since": self.last_data}

    def seek(self, offset: object) -> None:
        self.close()
        offset = dict(offset) if offset else {}
        self.done = set(offset.get("done", ()))
        self.queue = []
        self.scanned = float("-inf")
        self.ended = False
        self.last_data = offset.get("idle_since", time.time())
        self._trim_letters(offset.get("file"), offset.get("at"))
        if offset.get("file") is not None:  # an offset stored without "check" is taken as it is
            self._open(offset["file"], offset["at"], offset.get("check"))

    def _trim_letters(self, current: str | None, position) -> None:
        """Dead letters of records after the offset are read again: drop them, so that each is
        written once (a line cut short by a crash is dropped too)."""
        self.trimmed = True
        if self.letters is None or not os.path.exists(self.letters):
            return
        kept = []
        at = list(position) if position is not None else None
        with open(self.letters, encoding="utf-8") as handle:
            for line in handle:
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if entry.get("file") in self.done or (
                        entry.get("file") == current and at is not None
                        and entry.get("after") is not None and entry["after"] <= at):
                    kept.append(line)
        temporary = f"{self.letters}.{os.getpid()}.tmp"
        with open(temporary, "w", encoding="utf-8") as handle:
            handle.writelines(kept)
        os.replace(temporary, self.letters)

    def close(self) -> None:
        if self.cursor is not None:
            with contextlib.suppress(OSError):
                self.cursor.close()
        self.cursor = None
        self.current = None
