"""Record formats of files: text lines, JSON lines, CSV and Parquet, read by cursor (the writing
side is ``file_encoders``)."""

from __future__ import annotations

import csv
import gzip
import json
import os
import zlib
from collections.abc import Callable, Mapping

import attrs

from gyreflow.api.config.loading import ConfigError
from gyreflow.plan.words import plural
from gyreflow.runtime.dataflow.columns.batch import ColumnBatch
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
    with it continues after the last record returned."""

    position: object

    def read(self, max_records: int) -> list:
        """Up to ``max_records`` records (decoded, or :class:`MalformedRecordError` in their place);
        an empty list at the end of the file."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the file."""


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


class _LineCursor(FileCursor):
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


class _ParquetCursor(FileCursor):
    """Parquet: row groups are read one at a time as batches; the position is (row group, row)."""

    def __init__(self, path: str, columns: tuple[str, ...] | None, position,
                 columnar: bool = False) -> None:
        pq = require_pyarrow("a Parquet source")
        self.path = path
        self.columnar = columnar  # batches as column batches (ColumnBatch), not lists of dicts
        self.columns = list(columns) if columns is not None else None
        resumed = position is not None and tuple(position) != (0, 0)
        try:
            self.file = pq.ParquetFile(path)
            if columnar:  # text columns as dictionaries: counted and routed by their codes
                self.file = pq.ParquetFile(path, read_dictionary=_text_columns(self.file))
        except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a bad file
            if resumed:  # it was a Parquet file when the job read it: cut short, or replaced
                raise changed_input(path, _row_named(position),
                                    f"it is no Parquet file now ({exc})") from None
            raise MalformedRecordError("file footer", f"not a Parquet file ({exc})") from None
        self.position = tuple(position) if position is not None else (0, 0)
        self._group: list | None = None
        if resumed:
            self._refuse_if_cut()

    def _refuse_if_cut(self) -> None:
        """Refuse a file that no longer has the row the position is at (a file rewritten with
        fewer row groups or rows): reading on would silently skip the rows between."""
        group, row = self.position
        groups = self.file.num_row_groups
        if group > groups or (group == groups and row > 0):
            self.close()
            raise changed_input(self.path, _row_named(self.position),
                                f"it now has {plural(groups, 'row group')}")
        if group < groups and row > 0:
            rows = self.file.metadata.row_group(group).num_rows
            if row >= rows:
                self.close()
                raise changed_input(self.path, _row_named(self.position),
                                    f"row group {group} now has {plural(rows, 'row')}")

    def read(self, max_records: int) -> list:
        # A row group without rows is skipped: an empty list means the end of the file.
        while True:
            group = self.position[0]
            batch = self._read_group(max_records)
            if batch or self.position[0] == group:
                return batch

    def _read_group(self, max_records: int) -> list:
        group, row = self.position
        if group >= self.file.num_row_groups:
            return []
        if self._group is None:
            try:
                # Values Python cannot hold exactly (nanoseconds in a timestamp) are refused here,
                # with the row group, rather than rounded.
                table = self.file.read_row_group(group, columns=self.columns)
                self._group = ColumnBatch.of(table) if self.columnar else table.to_pylist()
            except Exception as exc:  # noqa: BLE001
                self.position = (group + 1, 0)
                return [MalformedRecordError(f"row group {group}", f"cannot be read ({exc})")]
        batch = self._group[row:row + max_records]
        row += len(batch)
        if row >= len(self._group):
            self._group = None
            self.position = (group + 1, 0)
        else:
            self.position = (group, row)
        return batch

    def close(self) -> None:
        self._group = None
        close = getattr(self.file, "close", None)
        if close is not None:
            close()


def _row_named(position) -> str:
    group, row = position
    return f"row group {group}, row {row}" if row else f"row group {group}"


def _text_columns(file) -> list[str]:
    """The string and binary columns of a Parquet file (read as dictionary arrays: most such
    columns repeat their values, and the file often stores them as dictionaries already)."""
    import pyarrow as pa

    kinds = (pa.types.is_string, pa.types.is_large_string, pa.types.is_binary,
             pa.types.is_large_binary)
    return [field.name for field in file.schema_arrow if any(kind(field.type) for kind in kinds)]


def open_cursor(path: str, fmt: str, csv_options: CsvOptions, columns, position,
                columnar: bool = False) -> FileCursor:
    """A cursor over ``path`` in format ``fmt`` from ``position`` (None: the start); ``columnar``
    reads column batches (Parquet; ``column_formats`` reads the other ``COLUMNAR_FORMATS``)."""
    if fmt == "parquet":
        return _ParquetCursor(path, columns, position, columnar)
    if columnar:
        msg = f"columnar=True of format {fmt!r} is read by column_formats.open_column_cursor"
        raise ValueError(msg)
    return _LineCursor(path, fmt, csv_options, position)
