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

from gyreflow.api.connectors.file_formats import (
    CsvOptions,
    FileCursor,
    MalformedRecordError,
    open_binary,
    open_cursor,
    strip_line_ending,
)
from gyreflow.runtime.dataflow.columns import ColumnBatch
from gyreflow.runtime.errors import DataError

BLOCK_BYTES = 1 << 22  # read from the file at a time
_NEWLINE = 10
_LONG_INTEGER = re.compile(rb"\d{19,}")  # may not fit 64 bits: checked line by line


class _BlockCursor(FileCursor):
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
            self.file.seek(position[0])
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

    def close(self) -> None:
        self.file.close()


class JsonColumnsCursor(_BlockCursor):
    """JSON lines as column batches: one object a line (blank lines carry none)."""

    def read(self, max_records: int):
        while True:
            offset, line = self.position
            block, count, longest = self._take_lines(max_records)
            if not count:
                return []
            self.position = (offset + len(block), line + count)
            out = self._parse(block, line + 1, longest)
            if out:
                return out

    def _parse(self, block: memoryview, first: int, longest: int) -> list:
        """The records of ``block`` (lines from ``first``): ``[ColumnBatch]``, with a
        MalformedRecordError before it for each line that is no JSON object."""
        import pyarrow as pa

        try:
            table = _read_json(block, longest)
            if _may_hold_long_integers(table):
                _refuse_long_integers(bytes(block), first, self.path)
        except pa.ArrowInvalid as exc:
            block = bytes(block)
            bad, good = _json_lines(block, first)
            if not bad:
                self._refuse(first, block, exc)
            kept = b"\n".join(good)
            try:
                table = _read_json(kept, len(block)) if good else None
            except pa.ArrowInvalid as again:
                self._refuse(first, block, again)
            return bad + ([ColumnBatch.of(table)] if table is not None and table.num_rows else [])
        return [ColumnBatch.of(table)] if table.num_rows else []

    def _refuse(self, first: int, block: bytes, exc: Exception):
        last = first + max(0, block.count(b"\n") - (1 if block.endswith(b"\n") else 0))
        msg = (f"input file {self.path}, lines {first}-{last}: cannot be read as columns "
               f"({exc}); read it with columnar=False")
        raise DataError(msg) from None


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
    """The lines of ``block`` that are no JSON object (as MalformedRecordErrors) and the others."""
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
        good.append(raw)
    return bad, good


def _may_hold_long_integers(table) -> bool:
    """Whether a float column of ``table`` may hold an integer beyond 64 bits (pyarrow reads one
    as a float): a float of 2**63 or more, or floats nested in lists and structs."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for column in table.columns:
        kind = column.type
        if pa.types.is_floating(kind):
            bounds = pc.min_max(column)
            low, high = bounds["min"].as_py(), bounds["max"].as_py()
            if high is not None and max(abs(low), abs(high)) >= 2.0**63:
                return True
        elif pa.types.is_nested(kind) and _holds(kind, pa.types.is_floating):
            return True
    return False


def _refuse_long_integers(block: bytes, first: int, path: str) -> None:
    """Stop at an integer that 64 bits cannot hold (pyarrow would read it as a float)."""
    for number, raw in enumerate(block.split(b"\n"), first):
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


def open_any_cursor(path: str, fmt: str, csv_options: CsvOptions, columns, position,
                    columnar: bool = False) -> FileCursor:
    """A cursor over ``path`` in format ``fmt`` from ``position`` (None: the start): column
    batches of JSON lines here with ``columnar``, everything else through ``open_cursor``."""
    if columnar and fmt == "jsonl":
        return JsonColumnsCursor(path, position)
    return open_cursor(path, fmt, csv_options, columns, position, columnar)
