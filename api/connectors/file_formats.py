"""Record formats of files: text lines, JSON lines, CSV and Parquet, read by cursor (Parquet's in
``file_parquet``; the writing side is ``file_encoders``)."""

from __future__ import annotations

import csv
import gzip
import json
import os
import zlib
from collections.abc import Callable, Mapping

import attrs

from gyreflow.api.config.loading import ConfigError
from gyreflow.api.connectors.file_fingerprints import byte_check_problem, byte_fingerprint
from gyreflow.plan.words import plural
from gyreflow.runtime.errors import DataError

FORMATS = ("text", "jsonl", "csv", "parquet")
COLUMNAR_FORMATS = ("csv", "jsonl", "parquet")  # formats read as column batches with columnar=True


class MalformedRecordError(Exception):
    """A record of a file that its format cannot read; ``where`` names the line or row group."""

    def __init__(self, where: str, reason: str, text: str | None = None) -> None:
        super().__init__(f"{where}: {reason}")
        self.where = where
        self.reason = reason
        self.text = text


def require_pyarrow(what: str):
    """``pyarrow.parquet``, or a one-line error naming the extra that installs it."""
    try:
        import pyarrow.parquet as pq
    except ModuleNotFoundError:
        from gyreflow.api.connectors.requirements import PYARROW

        msg = f"{what} needs the Python module pyarrow, which is not installed: {PYARROW.install}"
        raise ConfigError(msg) from None
    return pq


@attrs.frozen
class CsvOptions:
    """How CSV files are read and written.

    ``header``: the first line names the columns (else ``columns`` must, or records are lists).
    ``types``: column -> callable turning the text of a cell into its value (``int``, ``float``, ...);
    other columns stay text. An empty cell of a typed column is None.
    """

    delimiter: str = ","
    header: bool = True
    columns: tuple[str, ...] | None = attrs.field(
        default=None, converter=lambda c: tuple(c) if c is not None else None)
    types: Mapping[str, Callable[[str], object]] = attrs.field(
        factory=dict, converter=lambda types: dict(types))  # a lambda: see CollectionSource.items


def check_delimiter(what: str, delimiter: str) -> None:
    """Refuse, where a CSV source or sink is built, a delimiter that cannot separate cells."""
    if not isinstance(delimiter, str) or len(delimiter) != 1 or delimiter in '"\r\n':
        msg = (f"{what}: delimiter {delimiter!r} must be one character other than a quote, CR or "
               "LF (',', ';', '\\t', '|', ...)")
        raise ConfigError(msg)


# Reading -----------------------------------------------------------------------------------------


class FileCursor:
    """Reads the records of one file from a position; ``position`` is picklable and ``open``
    with it continues after the last record returned. ``fingerprint()`` says what was read up to
    there (``file_fingerprints``), stored with the position; ``refuse_if_changed`` refuses a file
    that no longer matches it."""

    position: object

    def read(self, max_records: int) -> list:
        """Up to ``max_records`` records (decoded, or :class:`MalformedRecordError` in their place);
        an empty list at the end of the file."""
        raise NotImplementedError

    def fingerprint(self) -> tuple | None:
        """The fingerprint of the file up to ``position``; None if the format has none."""
        return None

    def refuse_if_changed(self, check) -> None:
        """Raise a DataError naming the file and the position if the file is not the one
        ``check`` (a ``fingerprint()`` of it, at this cursor's position) was taken of."""

    def close(self) -> None:
        """Release the file."""


class ByteFileCursor(FileCursor):
    """A cursor whose position starts with a byte offset in ``file`` (from :func:`open_binary`)."""

    path: str
    file: object

    def fingerprint(self) -> tuple:
        return byte_fingerprint(self.file, self.position[0])

    def refuse_if_changed(self, check) -> None:
        offset = self.position[0]
        if not offset:
            return
        problem = byte_check_problem(self.file, check)
        if problem is not None:
            read = (f"byte {offset} of its uncompressed data"
                    if isinstance(self.file, gzip.GzipFile) else f"byte {offset}")
            raise changed_input(self.path, read, problem)


def strip_line_ending(raw: bytes) -> bytes:
    """``raw`` without its line ending (``\\n`` or ``\\r\\n``); any other ``\\r`` is data."""
    if raw.endswith(b"\n"):
        raw = raw[:-2] if raw.endswith(b"\r\n") else raw[:-1]
    return raw


def open_binary(path: str):
    """``path`` opened for reading bytes, decompressed when it ends in ``.gz``."""
    return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")


def changed_input(path: str, read: str, now: str) -> DataError:
    """The error for a file that no longer holds what a resumed job read of it (``read``: up to
    where; ``now``: what it is now), the words of ``FileSource``'s: reading on from the offset
    would silently lose, or read wrongly, the records between."""
    msg = (f"input file {path}: the job read it up to {read}, but {now}: it was cut or replaced "
           "since; put the file back as it was to resume, or start over with --fresh")
    return DataError(msg)


def refuse_if_cut(file, path: str, offset: int) -> None:
    """Refuse a plain file now shorter than ``offset``, the byte a job read it up to (a .gz file's
    length is known only decompressed: :func:`seek_resumed` checks it)."""
    if isinstance(file, gzip.GzipFile):
        return
    size = os.fstat(file.fileno()).st_size
    if size < offset:
        raise changed_input(path, f"byte {offset}", f"it now has {size} bytes")


def seek_resumed(file, path: str, offset: int) -> None:
    """Seek ``file`` (from :func:`open_binary`) to ``offset``, the byte a job read it up to,
    refusing a file that ends before it."""
    if not isinstance(file, gzip.GzipFile):
        refuse_if_cut(file, path, offset)
        file.seek(offset)
        return
    try:
        file.seek(offset)  # decompresses up to it, or to the end of a shorter stream
    except (OSError, EOFError, zlib.error) as exc:  # a stream cut short, damaged or replaced
        raise changed_input(path, f"byte {offset} of its uncompressed data",
                            f"it cannot be read that far now ({exc})") from None
    if file.tell() < offset:
        raise changed_input(path, f"byte {offset} of its uncompressed data",
                            f"it now has {file.tell()} bytes")


def _allow_any_field_size() -> None:
    """Lift the csv module's limit on a cell (128 KiB by default), process-wide: a CsvSink writes
    cells of any size, and a reader must read them back."""
    if csv.field_size_limit() < _LARGEST_FIELD:
        csv.field_size_limit(_LARGEST_FIELD)


_LARGEST_FIELD = 2**31 - 1  # a C long on every platform


def _decoded(raw: bytes) -> tuple[str, UnicodeDecodeError | None]:
    """``raw`` as UTF-8 text, and the decoding error if it is not (undecodable bytes are then kept
    as lone surrogates, so that the line's shape is still known)."""
    try:
        return raw.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        return raw.decode("utf-8", "surrogateescape"), exc


class _LineCursor(ByteFileCursor):
    """Text, JSON lines and CSV: the position is (byte offset in the uncompressed data, line).

    Text and JSON lines end at ``\\n`` (a ``\\r`` before it is part of the ending). CSV lines end
    where the csv module ends them in a file opened with ``newline=""``: at ``\\n``, ``\\r\\n`` or
    a lone ``\\r``; a quoted cell may hold any of them.
    """

    def __init__(self, path: str, fmt: str, csv_options: CsvOptions, position) -> None:
        self.path = path
        self.fmt = fmt
        self.options = csv_options
        self.file = open_binary(path)
        self.columns = csv_options.columns
        self.pending = b""  # CSV: the rest of a line read past a lone CR
        self.position = (0, 0)
        try:
            if position is not None:  # resumed: before the header, which a cut may have cut
                refuse_if_cut(self.file, path, position[0])
            if fmt == "csv":
                _allow_any_field_size()
                if csv_options.header:
                    self._read_header()
            if position is not None and tuple(position) != self.position:
                seek_resumed(self.file, path, position[0])
                self.pending = b""
                self.position = tuple(position)
        except BaseException:
            self.file.close()
            raise

    def _lines(self, max_records: int):
        """(raw line, line number, offset after it) for up to ``max_records`` lines."""
        offset, line = self.position
        for _ in range(max_records):
            raw = self.file.readline()
            if not raw:
                return
            line += 1
            offset += len(raw)
            yield raw, line, offset

    def read(self, max_records: int) -> list:
        if self.fmt == "csv":
            return self._read_csv(max_records)
        out: list = []
        # Blank lines carry no JSON record: read on until there is one or the file ends, since a
        # short list means the end of the file.
        while len(out) < max_records:
            before = self.position
            out += self._read_lines(max_records - len(out))
            if self.position == before:
                break
        return out

    def _read_lines(self, max_records: int) -> list:
        out = []
        for raw, line, offset in self._lines(max_records):
            self.position = (offset, line)
            where = f"line {line}"
            try:
                text = strip_line_ending(raw).decode("utf-8")
            except UnicodeDecodeError as exc:
                out.append(MalformedRecordError(where, f"not valid UTF-8 ({exc.reason})",
                                                raw.decode("utf-8", "replace").rstrip("\r\n")))
                continue
            if self.fmt == "text":
                out.append(text)
                continue
            if not text.strip(_JSON_WHITESPACE):
                continue  # JSON lines: blank lines carry no record
            try:
                out.append(json.loads(text))
            except ValueError as exc:
                out.append(MalformedRecordError(where, f"not JSON ({exc})", text))
        return out

    # CSV ------------------------------------------------------------------------------------

    def _physical_line(self) -> bytes:
        """The next line with its ending, cut where ``open(newline="")`` cuts it; b"" at the end."""
        raw = self.pending or self.file.readline()
        self.pending = b""
        cr = raw.find(b"\r")
        if cr == -1 or cr == len(raw) - 1 or raw[cr + 1:] == b"\n":
            return raw
        self.pending = raw[cr + 1:]
        return raw[:cr + 1]

    def _csv_row(self):
        """(cells or MalformedRecordError, first line, last line, text) of the next row, or None at
        the end of the file; an empty line is a row without cells, as the csv module reads it."""
        offset, first = self.position
        raw = self._physical_line()
        if not raw:
            return None
        self.position = (offset + len(raw), first + 1)
        text, bad = _decoded(raw)
        if b'"' not in raw:  # no quote: one line, whose cells lie between the delimiters
            row = text.rstrip("\r\n")
            cells = row.split(self.options.delimiter) if row else []
        else:
            texts = [text]
            problems = [bad]

            def lines():  # the csv module asks for the next line only inside a quoted cell
                yield text
                while raw := self._physical_line():
                    more, problem = _decoded(raw)
                    at, number = self.position
                    self.position = (at + len(raw), number + 1)
                    texts.append(more)
                    problems.append(problem)
                    yield more

            try:
                cells = next(csv.reader(lines(), delimiter=self.options.delimiter, strict=True))
            except csv.Error as exc:
                cells = exc
            text = "".join(texts)
            bad = next((problem for problem in problems if problem is not None), None)
        last = self.position[1]
        if bad is not None:
            shown = text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
            cells = MalformedRecordError(_lines_named(first + 1, last),
                                         f"not valid UTF-8 ({bad.reason})", shown.rstrip("\r\n"))
        elif isinstance(cells, csv.Error):
            cells = MalformedRecordError(_lines_named(first + 1, last), f"not CSV ({cells})",
                                         text.rstrip("\r\n"))
        return cells, first + 1, last, text

    def _read_header(self) -> None:
        """The first row that is not empty names the columns (unless ``columns`` does)."""
        while True:
            row = self._csv_row()
            if row is None:  # no row at all: the file has no records either
                return
            cells, first, last, text = row
            if isinstance(cells, MalformedRecordError):
                msg = f"the header is unreadable ({cells.reason})"
                raise MalformedRecordError(cells.where, msg, cells.text)
            if cells:
                break
        if self.columns is not None:
            return
        repeated = sorted({name for name in cells if cells.count(name) > 1})
        if repeated:
            msg = (f"the header names column {repeated[0]!r} more than once (a row would keep only "
                   "the last of its cells); rename the columns, or give columns= and header=True")
            raise MalformedRecordError(_lines_named(first, last), msg, text.rstrip("\r\n"))
        self.columns = tuple(cells)

    def _read_csv(self, max_records: int) -> list:
        out: list = []
        readline, delimiter, typed = self.file.readline, self.options.delimiter, self._typed
        while len(out) < max_records:
            if not self.pending:
                # The common line, inline: no quote, no CR but the one of a CRLF ending, UTF-8.
                raw = readline()
                cr = raw.find(b"\r")
                if raw and b'"' not in raw and (cr == -1 or raw[cr + 1:] == b"\n"):
                    try:
                        text = raw.decode("utf-8")
                    except UnicodeDecodeError:
                        text = None
                    if text is not None:
                        offset, line = self.position
                        self.position = (offset + len(raw), line + 1)
                        row = text.rstrip("\r\n")
                        if row:  # an empty line is no row; a line of spaces is a row of one cell
                            out.append(typed(row.split(delimiter), line + 1, line + 1, text))
                        continue
                self.pending = raw
            found = self._csv_row()
            if found is None:
                break
            cells, first, last, text = found
            if isinstance(cells, MalformedRecordError):
                out.append(cells)
            elif cells:
                out.append(typed(cells, first, last, text))
        return out

    def _typed(self, cells: list[str], first: int, last: int, text: str):
        columns = self.columns
        if not columns:
            return cells
        if len(cells) != len(columns):
            return MalformedRecordError(_lines_named(first, last),
                                        f"{plural(len(cells), 'cell')}, the header has "
                                        f"{len(columns)}",
                                        text.rstrip("\r\n"))
        record = dict(zip(columns, cells, strict=True))
        for column, convert in self.options.types.items():
            cell = record.get(column)
            if cell is None:
                continue
            if cell == "":
                record[column] = None
                continue
            try:
                record[column] = convert(cell)
            except (TypeError, ValueError) as exc:
                return MalformedRecordError(_lines_named(first, last), f"column {column!r}: {cell!r} "
                                            f"is not {getattr(convert, '__name__', convert)} ({exc})",
                                            text.rstrip("\r\n"))
        return record

    def close(self) -> None:
        self.file.close()


def _lines_named(first: int, last: int) -> str:
    return f"line {first}" if first == last else f"lines {first}-{last}"


_JSON_WHITESPACE = " \t\r\n"  # what JSON itself skips; other blank-looking text is no JSON


def open_cursor(path: str, fmt: str, csv_options: CsvOptions, columns, position,
                columnar: bool = False, check=None) -> FileCursor:
    """A cursor over ``path`` in a line format ``fmt`` from ``position`` (None: the start);
    ``check``: the fingerprint stored with ``position``, refused if the file no longer matches.
    ``column_formats.open_any_cursor`` opens every format: Parquet (``file_parquet``) and column
    batches there."""
    if fmt == "parquet" or columnar:
        msg = f"format {fmt!r} (columnar={columnar}) is read by column_formats.open_any_cursor"
        raise ValueError(msg)
    return checked(_LineCursor(path, fmt, csv_options, position), check)


def checked(cursor: FileCursor, check) -> FileCursor:
    """``cursor``, once its file is found to match ``check`` (None: an offset stored without a
    fingerprint, which is taken as it is); closed before a refusal."""
    if check is not None:
        try:
            cursor.refuse_if_changed(check)
        except BaseException:
            cursor.close()
            raise
    return cursor
