"""JSON lines and CSV read as column batches through pyarrow (``columnar=True``), block by block.

A cursor keeps the row readers' position, ``(byte offset, line)``, so that a resume continues where
either reader stopped. Each read takes whole lines (whole rows of CSV, whose quoted cells may hold
line breaks) and parses them in one call into an Arrow record batch. Values are the row readers'
values: JSON text that looks like a date stays text, CSV cells stay text unless ``types`` converts
them. A line the format cannot read is reported by line, as the row readers report it; lines whose
values do not fit one column type (a number, then text) stop the job with the file and lines.
"""

from __future__ import annotations

import json
import re
import struct
from abc import ABC, abstractmethod

from gyreflow.api.connectors.file_formats import (
    ByteFileCursor,
    CsvOptions,
    MalformedRecordError,
    _LineCursor,
    checked,
    open_binary,
    open_cursor,
    seek_resumed,
    strip_line_ending,
)
from gyreflow.plan.words import plural
from gyreflow.runtime.dataflow.columns.batch import ColumnBatch
from gyreflow.runtime.errors import DataError

BLOCK_BYTES = 1 << 22  # read from the file at a time
_NEWLINE = 10
_LONG_INTEGER = re.compile(rb"\d{19,}")  # may not fit 64 bits: checked line by line


class _BlockCursor(ByteFileCursor, ABC):
    """Whole lines of a file, ``max_records`` at most at a time, with the position after them.

    The line endings of what was read ahead are found once, as an array, when it is read.
    """

    def __init__(self, path: str, position) -> None:
        import numpy as np

        self.path = path
        self.file = open_binary(path)
        self.position = (0, 0)
        self.buffer = b""  # read from the file; returned up to ``start``
        self.start = 0
        self.ends = np.zeros(0, np.int64)  # positions of b"\n" in ``buffer``
        self.next = 0  # the first of ``ends`` at or after ``start``
        self.ended = False
        if position is not None and tuple(position) != self.position:
            try:  # a file cut or replaced since the job read it up to there is refused
                seek_resumed(self.file, path, position[0])
            except BaseException:
                self.file.close()
                raise
            self.position = tuple(position)

    def _fill(self, lines: int) -> None:
        import numpy as np

        while not self.ended and len(self.ends) - self.next < lines:
            more = self.file.read(BLOCK_BYTES)
            if not more:
                self.ended = True
                break
            rest = self.buffer[self.start:]
            found = np.flatnonzero(np.frombuffer(more, np.uint8) == _NEWLINE) + len(rest)
            self.ends = np.concatenate([self.ends[self.next:] - self.start, found])
            self.buffer, self.start, self.next = rest + more, 0, 0

    def _take_lines(self, lines: int) -> tuple[memoryview, int, int]:
        """Up to ``lines`` whole lines (the last one may lack its ending at the end of the file),
        how many there are, and the length of the longest."""
        import numpy as np

        self._fill(lines)
        start, first = self.start, self.next
        have = len(self.ends) - first
        if have >= lines:
            taken = self.ends[first:first + lines]
            cut = int(taken[-1]) + 1
        elif self.ended:
            taken = self.ends[first:]
            cut = len(self.buffer)
        else:
            taken, cut = self.ends[first:first], start
        self.next = first + len(taken)
        count = len(taken) + (1 if cut > (int(taken[-1]) + 1 if len(taken) else start) else 0)
        edges = np.concatenate([[start - 1], taken, [cut - 1]])
        longest = int(np.diff(edges).max()) if count else 0
        self.start = cut
        return memoryview(self.buffer)[start:cut], count, longest

    def read(self, max_records: int) -> list:
        """The records of the next lines, up to ``max_records`` (column batches, and
        MalformedRecordErrors for lines the format cannot read); lines without a record are read
        past; an empty list at the end of the file."""
        while True:
            offset, line = self.position
            block, count, longest = self._take_lines(max_records)
            if not count:
                return []
            out = self._records(block, (offset, line), count, longest, max_records)
            if out:
                return out

    @abstractmethod
    def _records(self, block: memoryview, start: tuple[int, int], count: int, longest: int,
                 max_records: int) -> list:
        """The records of ``count`` lines taken at position ``start``; sets the position after
        what was read."""

    def close(self) -> None:
        self.file.close()


class JsonColumnsCursor(_BlockCursor):
    """JSON lines as column batches: one object a line (blank lines carry none)."""

    def _records(self, block, start, count, longest, max_records) -> list:
        self.position = (start[0] + len(block), start[1] + count)
        return self._parse(block, start[1] + 1, longest)

    def _parse(self, block: memoryview, first: int, longest: int) -> list:
        """The records of ``block`` (lines from ``first``): ``[ColumnBatch]``, with a
        MalformedRecordError before it for each line that is no JSON object or no UTF-8."""
        import pyarrow as pa

        if _read_otherwise(block):  # pyarrow would cut or skip what json.loads refuses
            return self._parse_lines(bytes(block), first, None)
        try:
            _check_utf8(block)
            table = _read_json(block, longest)
        except pa.ArrowInvalid as exc:
            return self._parse_lines(bytes(block), first, exc)
        if _may_hold_long_integers(table):
            _refuse_long_integers(enumerate(bytes(block).split(b"\n"), first), self.path)
        return [ColumnBatch.of(table)] if table.num_rows else []

    def _parse_lines(self, block: bytes, first: int, failure: Exception | None) -> list:
        """The records of ``block`` read line by line, when pyarrow cannot read it whole
        (``failure``) or would read it otherwise than ``json.loads`` (None): the lines that are no
        JSON object or no UTF-8 as MalformedRecordErrors, the others as columns."""
        import pyarrow as pa

        bad, good = _json_lines(block, first)
        if not bad and failure is not None:
            self._refuse(first, block, failure)
        if not good:
            return bad
        # A CR in a line json.loads read is whitespace between its tokens (a JSON string holds no
        # raw CR), where pyarrow would end the line: a space is the same JSON to both.
        kept = b"\n".join(raw.replace(b"\r", b" ") for _, raw in good)
        try:
            table = _read_json(kept, len(block))
        except pa.ArrowInvalid as again:
            self._refuse(first, block, again)
        if _may_hold_long_integers(table):
            _refuse_long_integers(good, self.path)
        return bad + ([ColumnBatch.of(table)] if table.num_rows else [])

    def _refuse(self, first: int, block: bytes, exc: Exception):
        last = first + max(0, block.count(b"\n") - (1 if block.endswith(b"\n") else 0))
        msg = (f"input file {self.path}, lines {first}-{last}: cannot be read as columns "
               f"({exc}); read it with columnar=False")
        raise DataError(msg) from None


_BOM = b"\xef\xbb\xbf"


def _read_otherwise(block) -> bool:
    """Whether pyarrow may read ``block`` otherwise than ``json.loads`` reads its lines: a CR
    not followed by LF (pyarrow ends a line there, the row reader takes it for part of the
    line) or a UTF-8 byte-order mark (pyarrow skips one at the start, ``json.loads`` refuses
    it). Such a block is read line by line. Two passes of numpy over the block: about 1 ms for
    4 MB, where pyarrow parses it in tens."""
    import numpy as np

    data = np.frombuffer(block, np.uint8)
    returns = np.flatnonzero(data == 13)
    if len(returns):
        after = returns + 1
        if after[-1] == len(data) or (data[after] != _NEWLINE).any():
            return True
    return bool((data == _BOM[0]).any()) and _BOM in bytes(block)


def _check_utf8(block) -> None:
    """Raise pyarrow.ArrowInvalid unless ``block`` is UTF-8 throughout: pyarrow.json takes the
    bytes of a string value as they are, so a bad byte would only fail where a value is used.
    Arrow's validator checks 4 MB of non-ASCII text in 1-2 ms; decoding it into a Python str
    takes about 10 ms."""
    import pyarrow as pa

    offsets = pa.py_buffer(struct.pack("<qq", 0, len(block)))
    pa.LargeStringArray.from_buffers(1, offsets, pa.py_buffer(block)).validate(full=True)


def _read_json(block, longest: int):
    """``block`` (lines of which the longest has ``longest`` bytes) parsed by pyarrow; text that
    pyarrow would read as a timestamp stays text."""
    import pyarrow as pa
    import pyarrow.json as pj

    block = pa.py_buffer(block)
    options = pj.ReadOptions(block_size=max(1 << 20, 2 * longest + 2))
    table = pj.read_json(pa.BufferReader(block), read_options=options)
    if any(_holds(field.type, pa.types.is_timestamp) for field in table.schema):
        schema = pa.schema([pa.field(f.name, _timestamps_as_text(f.type)) for f in table.schema])
        parse = pj.ParseOptions(explicit_schema=schema)
        table = pj.read_json(pa.BufferReader(block), read_options=options, parse_options=parse)
    return table


def _holds(kind, test) -> bool:
    """Whether the Arrow type ``kind``, or a type nested in it (structs, lists), passes ``test``."""
    import pyarrow as pa

    if test(kind):
        return True
    if pa.types.is_struct(kind):
        return any(_holds(kind.field(i).type, test) for i in range(kind.num_fields))
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return _holds(kind.value_type, test)
    return False


def _timestamps_as_text(kind):
    import pyarrow as pa

    if pa.types.is_timestamp(kind):
        return pa.string()
    if pa.types.is_struct(kind):
        return pa.struct([pa.field(kind.field(i).name, _timestamps_as_text(kind.field(i).type))
                          for i in range(kind.num_fields)])
    if pa.types.is_list(kind):
        return pa.list_(_timestamps_as_text(kind.value_type))
    if pa.types.is_large_list(kind):
        return pa.large_list(_timestamps_as_text(kind.value_type))
    return kind


def _json_lines(block: bytes, first: int) -> tuple[list, list]:
    """The lines of ``block`` that are no JSON object or no UTF-8 (as MalformedRecordErrors) and
    the others, as ``(line number, bytes)``."""
    bad, good = [], []
    for number, raw in enumerate(block.split(b"\n"), first):
        raw = strip_line_ending(raw + b"\n")
        where = f"line {number}"
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            bad.append(MalformedRecordError(where, f"not valid UTF-8 ({exc.reason})",
                                            raw.decode("utf-8", "replace")))
            continue
        if not text.strip(" \t\r\n"):
            continue
        try:
            value = json.loads(text)
        except ValueError as exc:
            bad.append(MalformedRecordError(where, f"not JSON ({exc})", text))
            continue
        if not isinstance(value, dict):
            bad.append(MalformedRecordError(
                where, "not a JSON object (columnar=True reads one object a line)", text))
            continue
        good.append((number, raw))
    return bad, good


def _may_hold_long_integers(table) -> bool:
    """Whether a float column of ``table`` may hold an integer beyond 64 bits (pyarrow reads one
    as a float): a float of 2**63 or more in magnitude, or floats nested in lists and structs.
    The floats are looked at in numpy (a null is NaN there, which no bound passes): importing
    pyarrow.compute for a minimum and a maximum costs more than the check of a whole file."""
    import numpy as np
    import pyarrow as pa

    for column in table.columns:
        kind = column.type
        if pa.types.is_floating(kind):
            for chunk in column.chunks:
                values = chunk.to_numpy(zero_copy_only=False)
                if len(values) and np.fmax.reduce(np.abs(values)) >= 2.0**63:
                    return True
        elif pa.types.is_nested(kind) and _holds(kind, pa.types.is_floating):
            return True
    return False


def _refuse_long_integers(lines, path: str) -> None:
    """Stop at an integer that 64 bits cannot hold (pyarrow would read it as a float) in
    ``lines``, ``(line number, bytes)`` pairs."""
    for number, raw in lines:
        if not _LONG_INTEGER.search(raw):
            continue
        try:
            value = json.loads(raw)
        except ValueError:
            continue  # reported as not JSON
        if _has_long_integer(value):
            msg = (f"input file {path}, line {number}: an integer beyond 64 bits cannot be read "
                   "as columns; read it with columnar=False")
            raise DataError(msg)


def _has_long_integer(value) -> bool:
    if type(value) is int:
        return not -(1 << 63) <= value < 1 << 63
    if isinstance(value, dict):
        return any(_has_long_integer(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_long_integer(v) for v in value)
    return False


class CsvColumnsCursor(_BlockCursor):
    """CSV as column batches, by the header's (or ``columns``') names; cells are text unless
    ``types`` converts them (in Python, as the row reader does: ``int``, ``float``, any callable).

    A block of lines without a quote and without a lone CR is cut by pyarrow (every line is one
    row, its cells lie between the delimiters); a block with either is read by the row reader
    itself (a quoted cell may hold delimiters and line breaks) and turned into columns, so that
    both give what the csv module gives.
    """

    def __init__(self, path: str, options: CsvOptions, position) -> None:
        if not options.header and not options.columns:  # DirectorySource refuses it when built
            raise MalformedRecordError("the header", "no column names: columnar=True reads CSV "
                                       "by names (a header, or columns=)")
        self.rows = _LineCursor(path, "csv", options, position)  # the header, and quoted blocks
        self.options = options
        # No header: the file has no row that is not empty (an empty file, blank lines only),
        # so no records, as the row reader reads it.
        self.columns = list(self.rows.columns or ())
        single = options.delimiter.encode("utf-8")
        self.delimiter = single[0] if len(single) == 1 else None
        super().__init__(path, self.rows.position)
        self.position = self.rows.position

    def read(self, max_records: int) -> list:
        if not self.columns:  # the header was looked for to the end: nothing is left to read
            return []
        return super().read(max_records)

    def _records(self, block, start, count, longest, max_records) -> list:
        offset, line = start
        raw = bytes(block)
        if b'"' not in raw and raw.count(b"\r") == raw.count(b"\r\n") and self.delimiter:
            self.position = (offset + len(raw), line + count)
            out = self._read_block(raw, line + 1, longest)
            if out is not None:
                return out
        return self._read_rows(offset, line, max_records)

    def close(self) -> None:
        super().close()
        self.rows.close()

    def _read_rows(self, offset: int, line: int, max_records: int) -> list:
        """Rows from ``(offset, line)`` read by the row reader, as columns."""
        rows = self.rows
        rows.file.seek(offset)
        rows.pending = b""
        rows.position = (offset, line)
        records = rows.read(max_records)
        self.position = rows.position
        self.file.seek(self.position[0])  # what was read ahead is read again from here
        self.buffer, self.start, self.next, self.ended = b"", 0, 0, False
        self.ends = self.ends[:0]
        bad = [r for r in records if isinstance(r, MalformedRecordError)]
        good = [r for r in records if not isinstance(r, MalformedRecordError)]
        if not good:
            return bad
        return [*bad, self._columns({name: [r[name] for r in good] for name in self.columns})]

    def _read_block(self, raw: bytes, first: int, longest: int) -> list | None:
        """Lines without quotes or lone CRs (from line ``first``): every line a row, cut by
        pyarrow; None when pyarrow cannot (no UTF-8): the row reader then reads them."""
        import numpy as np

        data = np.frombuffer(raw, np.uint8)
        ends = np.flatnonzero(data == _NEWLINE)
        if raw[-1:] != b"\n":
            ends = np.append(ends, len(raw))  # the last line, without its ending
        starts = np.concatenate([[0], ends[:-1] + 1]).astype(np.int64)
        before_end = data[np.clip(ends - 1, 0, len(raw) - 1)]
        lengths = ends - starts - ((ends > starts) & (ends < len(raw)) & (before_end == 13))
        cells = np.bincount(np.searchsorted(ends, np.flatnonzero(data == self.delimiter)),
                            minlength=len(ends))[:len(ends)] + 1
        empty = lengths <= 0
        wrong = ~empty & (cells != len(self.columns))
        bad = []
        for index in np.flatnonzero(wrong).tolist():
            line = raw[starts[index]:starts[index] + lengths[index]]
            try:  # bad UTF-8 is named first, as the row reader names it
                text = line.decode("utf-8")
                reason = f"{plural(int(cells[index]), 'cell')}, the header has {len(self.columns)}"
            except UnicodeDecodeError as exc:
                text, reason = line.decode("utf-8", "replace"), f"not valid UTF-8 ({exc.reason})"
            bad.append(MalformedRecordError(f"line {first + index}", reason, text))
        if bad:
            raw = b"".join(raw[starts[i]:ends[i] + 1] for i in np.flatnonzero(~wrong).tolist())
        numbers = (np.flatnonzero(~empty & ~wrong) + first).tolist()
        if not numbers:
            return bad
        try:
            table = _read_csv(raw, self.columns, self.options.delimiter, longest)
        except Exception:  # noqa: BLE001 - pyarrow: no UTF-8, say; the row reader names the line
            return None
        return self._typed(table, numbers, bad)

    def _typed(self, table, numbers: list[int], bad: list) -> list:
        """Convert the typed columns cell by cell, as the row reader does: an empty cell is None,
        a cell the type refuses makes its row malformed."""
        types = self.options.types
        if not types:
            return [*bad, ColumnBatch.of(table)]
        columns = {name: table.column(name).to_pylist() for name in self.columns}
        texts = columns.copy()
        failed: dict[int, MalformedRecordError] = {}
        for column, convert in types.items():
            if column not in columns:
                continue
            values = []
            for index, cell in enumerate(columns[column]):
                if cell == "":
                    values.append(None)
                    continue
                try:
                    values.append(convert(cell))
                except (TypeError, ValueError) as exc:
                    values.append(None)
                    if index not in failed:
                        row = self.options.delimiter.join(texts[n][index] for n in self.columns)
                        failed[index] = MalformedRecordError(
                            f"line {numbers[index]}", f"column {column!r}: {cell!r} is not "
                            f"{getattr(convert, '__name__', convert)} ({exc})", row)
            columns[column] = values
        if failed:
            keep = [i for i in range(len(numbers)) if i not in failed]
            columns = {name: [values[i] for i in keep] for name, values in columns.items()}
            bad = sorted([*bad, *failed.values()], key=lambda m: int(m.where.split()[-1]))
            if not keep:
                return bad
        return [*bad, self._columns(columns)]

    def _columns(self, columns: dict[str, list]) -> ColumnBatch:
        import pyarrow as pa

        try:
            return ColumnBatch(pa.record_batch(
                {name: pa.array(values, None if name in self.options.types else pa.string())
                 for name, values in columns.items()}))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as exc:
            msg = (f"input file {self.path}: the values of a typed column cannot make one Arrow "
                   f"column ({exc}); read it with columnar=False")
            raise DataError(msg) from None


def _read_csv(raw: bytes, names: list[str], delimiter: str, longest: int):
    """Lines of cells without quotes, every cell as text."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    return pcsv.read_csv(
        pa.BufferReader(raw),
        read_options=pcsv.ReadOptions(column_names=names,
                                      block_size=max(1 << 20, 2 * longest + 2)),
        parse_options=pcsv.ParseOptions(delimiter=delimiter, quote_char=False, escape_char=False,
                                        newlines_in_values=False, ignore_empty_lines=True),
        convert_options=pcsv.ConvertOptions(column_types=dict.fromkeys(names, pa.string()),
                                            strings_can_be_null=False, null_values=[],
                                            check_utf8=True))


def open_any_cursor(path: str, fmt: str, csv_options: CsvOptions, columns, position,
                    columnar: bool = False, check=None):
    """A cursor over ``path`` in format ``fmt`` from ``position`` (None: the start): column
    batches of JSON lines and CSV here with ``columnar``, everything else through
    ``open_cursor``; ``check``: the fingerprint stored with ``position`` (``FileCursor``)."""
    if columnar and fmt == "jsonl":
        return checked(JsonColumnsCursor(path, position), check)
    if columnar and fmt == "csv":
        return checked(CsvColumnsCursor(path, csv_options, position), check)
    if fmt == "parquet":
        from gyreflow.api.connectors.file_parquet import ParquetCursor

        return checked(ParquetCursor(path, columns, position, columnar), check)
    return open_cursor(path, fmt, csv_options, columns, position, columnar, check)
