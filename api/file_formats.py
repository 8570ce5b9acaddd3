"""Record formats of files: text lines, JSON lines, CSV and Parquet, read by cursor and written by window."""

from __future__ import annotations

import csv
import gzip
import io
import json
from collections.abc import Callable, Mapping

import attrs

from gyreflow.api.config import ConfigError

FORMATS = ("text", "jsonl", "csv", "parquet")


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
        msg = (f"{what} needs pyarrow, which is not installed: pip install 'gyreflow[parquet]' "
               "(or pip install pyarrow)")
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
    types: Mapping[str, Callable[[str], object]] = attrs.field(factory=dict, converter=dict)


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


def _open_binary(path: str):
    return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")


class _LineCursor(FileCursor):
    """Text, JSON lines and CSV: the position is (byte offset in the uncompressed data, line)."""

    def __init__(self, path: str, fmt: str, csv_options: CsvOptions, position) -> None:
        self.path = path
        self.fmt = fmt
        self.options = csv_options
        self.file = _open_binary(path)
        self.columns = csv_options.columns
        offset, line = position if position is not None else (0, 0)
        if fmt == "csv" and csv_options.header:
            header_line = self.file.readline()
            if offset == 0:
                offset, line = self.file.tell(), 1
            if self.columns is None:
                try:
                    self.columns = tuple(next(csv.reader([header_line.decode("utf-8")],
                                                         delimiter=csv_options.delimiter)))
                except (UnicodeDecodeError, StopIteration, csv.Error):
                    self.columns = ()
        if offset:
            self.file.seek(offset)
        self.position = (offset, line)

    def _lines(self, max_records: int):
        """(raw line, line number) pairs, at most ``max_records`` records' worth for one-line records."""
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
        # Blank lines carry no JSON record: read on until there is one or the file ends, since an
        # empty list means the end of the file.
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
            if not text.strip():
                continue  # JSON lines: blank lines carry no record
            try:
                out.append(json.loads(text))
            except ValueError as exc:
                out.append(MalformedRecordError(where, f"not JSON ({exc})", text))
        return out

    def _read_csv(self, max_records: int) -> list:
        out = []
        options = self.options
        while len(out) < max_records:
            start_line = self.position[1] + 1
            raw = self.file.readline()
            if not raw:
                break
            offset, line = self.position[0] + len(raw), self.position[1] + 1
            chunk = raw
            # A quoted cell may hold line breaks: read on until the row parses whole.
            while chunk.count(b'"') % 2 == 1:
                more = self.file.readline()
                if not more:
                    break
                chunk += more
                offset += len(more)
                line += 1
            self.position = (offset, line)
            where = f"line {start_line}" if line == start_line else f"lines {start_line}-{line}"
            try:
                text = chunk.decode("utf-8")
            except UnicodeDecodeError as exc:
                out.append(MalformedRecordError(where, f"not valid UTF-8 ({exc.reason})",
                                           chunk.decode("utf-8", "replace").rstrip("\r\n")))
                continue
            if not text.strip("\r\n"):
                continue  # an empty line is no row (as csv.reader reads it); "  " is a cell
            row = text[:-2] if text.endswith("\r\n") else text[:-1] if text.endswith("\n") else text
            if '"' not in row and "\r" not in row:  # no quoting: the cells lie between delimiters
                cells = row.split(options.delimiter)
            else:
                try:
                    cells = next(csv.reader(io.StringIO(text), delimiter=options.delimiter,
                                            strict=True))
                except (csv.Error, StopIteration) as exc:
                    out.append(MalformedRecordError(where, f"not CSV ({exc})",
                                                    text.rstrip("\r\n")))
                    continue
            record = self._typed(cells, where, text)
            out.append(record)
        return out

    def _typed(self, cells: list[str], where: str, text: str):
        columns = self.columns
        if not columns:
            return cells
        if len(cells) != len(columns):
            return MalformedRecordError(where, f"{len(cells)} cells, the header has {len(columns)}",
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
                return MalformedRecordError(where, f"column {column!r}: {cell!r} is not "
                                       f"{getattr(convert, '__name__', convert)} ({exc})",
                                       text.rstrip("\r\n"))
        return record

    def close(self) -> None:
        self.file.close()


class _ParquetCursor(FileCursor):
    """Parquet: row groups are read one at a time as batches; the position is (row group, row)."""

    def __init__(self, path: str, columns: tuple[str, ...] | None, position) -> None:
        pq = require_pyarrow("a Parquet source")
        self.path = path
        self.columns = list(columns) if columns is not None else None
        try:
            self.file = pq.ParquetFile(path)
        except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a bad file
            raise MalformedRecordError("file footer", f"not a Parquet file ({exc})") from None
        self.position = position if position is not None else (0, 0)
        self._group: list | None = None

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
                table = self.file.read_row_group(group, columns=self.columns)
            except Exception as exc:  # noqa: BLE001
                self.position = (group + 1, 0)
                return [MalformedRecordError(f"row group {group}", f"cannot be read ({exc})")]
            self._group = table.to_pylist()
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


def open_cursor(path: str, fmt: str, csv_options: CsvOptions, columns, position) -> FileCursor:
    """A cursor over ``path`` in format ``fmt`` from ``position`` (None: the start)."""
    if fmt == "parquet":
        return _ParquetCursor(path, columns, position)
    return _LineCursor(path, fmt, csv_options, position)


# Writing -----------------------------------------------------------------------------------------


class WindowEncoder:
    """Turns one window's records into the bytes of its file: ``add`` as records come, ``end``
    once the window is complete (a Parquet file is written whole at the end)."""

    def add(self, window: int, records: list) -> bytes:
        raise NotImplementedError

    def end(self) -> bytes:
        return b""


class LineEncoder(WindowEncoder):
    def __init__(self, line: Callable[[int, object], str]) -> None:
        self.line = line

    def add(self, window: int, records: list) -> bytes:
        line = self.line
        return "".join(line(window, r) + "\n" for r in records).encode("utf-8")


class CsvEncoder(WindowEncoder):
    """Dict records (columns from ``options.columns`` or the first record) or sequences.

    Every value reads back exactly through ``csv.reader``: a cell holding a line break, a carriage
    return, the delimiter or a quote is quoted (Python's writer alone leaves a bare ``\\r`` unquoted
    when lines end in ``\\n``).
    """

    def __init__(self, options: CsvOptions) -> None:
        self.options = options
        self.columns = options.columns
        self.started = False

    def _rows(self, rows: list[list]) -> str:
        buffer = io.StringIO()
        plain = csv.writer(buffer, delimiter=self.options.delimiter, lineterminator="\n")
        # "\r" in the line terminator makes the writer quote every cell that holds one; the row's
        # own terminator is then written as "\n" like every other row's.
        quoting_cr = csv.writer(buffer, delimiter=self.options.delimiter, lineterminator="\r\n")
        for row in rows:
            if any(isinstance(cell, str) and "\r" in cell for cell in row):
                quoting_cr.writerow(row)
                buffer.seek(buffer.tell() - 2)
                buffer.truncate()
                buffer.write("\n")
            else:
                plain.writerow(row)
        return buffer.getvalue()

    def add(self, window: int, records: list) -> bytes:
        rows = []
        for record in records:
            if isinstance(record, Mapping):
                if self.columns is None:
                    self.columns = tuple(record)
                row = [record.get(column) for column in self.columns]
            else:
                row = list(record)
            if not self.started:
                self.started = True
                if self.options.header and self.columns is not None:
                    rows.append(list(self.columns))
            rows.append(["" if cell is None else cell for cell in row])
        return self._rows(rows).encode("utf-8")

    def end(self) -> bytes:
        if not self.started and self.options.header and self.columns is not None:
            self.started = True
            return self._rows([list(self.columns)]).encode("utf-8")
        return b""


class ParquetEncoder(WindowEncoder):
    """Dict records, kept until the window ends and then written as one Parquet file."""

    def __init__(self, columns: tuple[str, ...] | None, compression: str) -> None:
        self.columns = columns
        self.compression = compression
        self.records: list = []

    def add(self, window: int, records: list) -> bytes:
        self.records.extend(records)
        return b""

    def end(self) -> bytes:
        import pyarrow as pa

        pq = require_pyarrow("a Parquet sink")
        records = self.records
        if self.columns is not None:
            records = [{c: r.get(c) for c in self.columns} for r in records]
            table = pa.Table.from_pylist(records) if records else pa.table(
                {c: pa.array([], pa.null()) for c in self.columns})
        else:
            table = pa.Table.from_pylist(records)
        buffer = io.BytesIO()
        pq.write_table(table, buffer, compression=self.compression)
        self.records = []
        return buffer.getvalue()
