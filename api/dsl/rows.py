"""GeaFlow's row formats: reading file tables into typed rows and printing values as Java does."""

from __future__ import annotations

import datetime as _dt
import itertools
import math
import os
import re
from decimal import Decimal

from gyreflow.api.dsl.java_math import integer_range

# SQL type names as the scripts write them, by the Python type a value of it takes.
_INTEGERS = {"int", "integer", "bigint", "long", "smallint", "tinyint"}
_DOUBLES = {"double", "float", "real", "decimal"}
_STRINGS = {"varchar", "string", "char", "text", "binary_string"}


def base_type(sql_type: str) -> str:
    """The lower-case type name without a length or precision: ``VARCHAR(10)`` -> ``varchar``."""
    return sql_type.strip().lower().split("(")[0].strip()


def java_double(value: float) -> str:
    """``Double.toString``: ``1.0``, ``0.5``, ``NaN``, ``Infinity``, E notation below 1e-3 and from 1e7."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    if 1e-3 <= abs(value) < 1e7:
        text = repr(value)
        return text if "." in text else text + ".0"
    sign, digits, exponent = Decimal(repr(value)).as_tuple()
    text = "".join(map(str, digits)).rstrip("0") or "0"
    point = len(digits) + exponent - 1  # the power of ten of the first digit
    return f"{'-' if sign else ''}{text[0]}.{text[1:] or '0'}E{point}"


def java_string(value) -> str:
    """``String.valueOf(value)`` for the values a query produces."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, float):
        return java_double(value)
    if isinstance(value, _dt.datetime):  # java.sql.Timestamp: fraction without trailing zeros, at least .0
        fraction = f"{value.microsecond:06d}".rstrip("0") or "0"
        return f"{value.strftime('%Y-%m-%d %H:%M:%S')}.{fraction}"
    if isinstance(value, _dt.date):
        return value.isoformat()
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(java_string(v) for v in value) + "]"
    return str(value)


def cast_value(value, sql_type: str, zone: str | None = None):
    """``value`` (a field's text or a computed value) as ``sql_type``; ``None`` stays ``None``.
    Epoch milliseconds become timestamps in time zone ``zone`` (default: this machine's)."""
    if value is None:
        return None
    kind = base_type(sql_type)
    if kind in _INTEGERS:
        return _integer(value, kind)
    if kind in _DOUBLES:
        if isinstance(value, str):
            text = value.strip()
            if text == "" or text.lower() == "null":
                return None
            try:
                return float(text)
            except ValueError:
                raise ValueError(f"{text!r} is not a number ({kind.upper()})") from None
        return float(value)
    if kind == "boolean":
        if isinstance(value, str):
            return value.strip().lower() == "true"
        return bool(value)
    if kind == "timestamp":
        return to_timestamp(value, zone)
    if kind == "date":
        if isinstance(value, _dt.datetime):
            return value.date()
        if isinstance(value, _dt.date):
            return value
        return _dt.date.fromisoformat(str(value).strip()[:10])
    if isinstance(value, str):
        return value
    return java_string(value)


# what Java's Integer.parseInt and Long.parseLong read (after String.trim's blanks, every character up
# to ' '): a sign and ASCII digits
_INTEGER_TEXT = re.compile(r"[+-]?[0-9]+")
_JAVA_BLANKS = "".join(map(chr, range(33)))


def _integer(value, kind: str):
    """``value`` as an integer of type ``kind`` (int, bigint, ...): text as Java parses it (no
    fraction, no ``_``), a double towards zero; ValueError when it is not one or out of the type's
    range (GeaFlow's Integer is 32 bits, its Long 64)."""
    if isinstance(value, str):
        text = value.strip(_JAVA_BLANKS)
        if text == "" or text.lower() == "null":
            return None
        if _INTEGER_TEXT.fullmatch(text) is None:
            raise ValueError(f"{text!r} is not an integer ({kind.upper()})")
        number = int(text)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{java_double(value)} is not an integer ({kind.upper()})")
        number = int(value)  # Java's narrowing: towards zero
    elif isinstance(value, (int, Decimal)):
        number = int(value)
    else:
        return value
    low, high = integer_range(kind)
    if not low <= number <= high:
        raise ValueError(f"{number} is out of the range of {kind.upper()} ({low} to {high})")
    return number


def to_timestamp(value, zone: str | None = None):
    """A timestamp from epoch milliseconds (shown in ``zone``, else local time, as the JVM shows them)
    or from ``yyyy-MM-dd HH:mm:ss[.SSS]`` text."""
    if isinstance(value, _dt.datetime):
        return value
    text = str(value).strip()
    if isinstance(value, (int, float)) and not isinstance(value, bool) or text.lstrip("-").isdigit():
        millis = int(value) if not isinstance(value, str) else int(text)
        if zone:
            from zoneinfo import ZoneInfo

            moment = _dt.datetime.fromtimestamp(millis // 1000, ZoneInfo(zone)).replace(tzinfo=None)
            return moment + _dt.timedelta(milliseconds=millis % 1000)
        return _dt.datetime.fromtimestamp(millis // 1000) + _dt.timedelta(milliseconds=millis % 1000)
    return _dt.datetime.fromisoformat(text)


def resolve_path(path: str, root: str) -> str:
    """``resource:///x`` against ``root`` (GeaFlow's class path), ``file://`` stripped, others as given."""
    if path.startswith("resource:///"):
        return os.path.join(root, path[len("resource:///"):])
    if path.startswith("file://"):
        return path[len("file://"):]
    return path


class RowFormatError(ValueError):
    """A line of a file table that does not fit the table's columns."""


# Text converted at a time (some 650 lines, about a batch): the whole file is never held as rows at
# once, and rows die young (what lives through a batch is what the garbage collector walks again).
CHUNK_CHARS = 1 << 14


def read_text_rows(path: str, types: list[str], separator: str = ",", trim: bool = True,
                   zone: str | None = None) -> list[tuple]:
    """The rows of a text file table (or of every file in a folder), one row a non-empty line."""
    return list(iter_text_rows(path, types, separator, trim, zone))


def iter_text_rows(path: str, types: list[str], separator: str = ",", trim: bool = True,
                   zone: str | None = None, needed: frozenset | None = None):
    """``read_text_rows`` as an iterator, converting ``CHUNK_CHARS`` of text at a time; only the
    columns at positions ``needed`` (all when None) are converted, the others are None."""
    for rows in iter_text_chunks(path, types, separator, trim, zone, needed):
        yield from rows


def iter_text_chunks(path: str, types: list[str], separator: str = ",", trim: bool = True,
                     zone: str | None = None, needed: frozenset | None = None,
                     millis: frozenset = frozenset(), names: list[str] | None = None):
    """The rows of ``iter_text_rows``, a list of the lines of some ``CHUNK_CHARS`` characters at a
    time; a line that does not fit is a RowFormatError naming its file, line and column (``names``)."""
    files = [path]
    if os.path.isdir(path):
        files = sorted(os.path.join(path, n) for n in os.listdir(path) if not n.startswith("."))
    readers = [field_reader(t, trim, zone) for t in types]
    columns = [_column_reader(t, trim, read, zone) if needed is None or at in needed else _nones
               for at, (t, read) in enumerate(zip(types, readers, strict=True))]
    for at in millis:  # only windows read them: in UTC, epoch milliseconds are as good
        if base_type(types[at]) == "timestamp" and _utc(zone):
            columns[at] = _plain_millis(readers[at])
    plain = [getattr(read, "plain", read) for read in columns]  # for a chunk of ASCII without _
    checked = [read if needed is None or at in needed else None for at, read in enumerate(readers)]
    names = names or [f"{at + 1}" for at in range(len(types))]
    for name in files:
        with open(name, encoding="utf-8") as file:
            carry = ""  # the start of a line the last block cut
            while True:
                block = file.read(CHUNK_CHARS)
                text = carry + block
                if block:  # whole lines only
                    cut = text.rfind("\n") + 1
                    text, carry = text[:cut], text[cut:]
                try:
                    chosen = plain if text.isascii() and "_" not in text else columns
                    rows = _read_columns(text, separator, chosen) if text else []
                except ValueError:  # a line that does not fit: read line by line, to name it
                    _refuse(name, names, separator, checked)
                    raise
                if rows:
                    yield rows
                if not block:
                    break


def _refuse(name: str, names: list[str], separator: str, readers: list) -> None:
    """Raises RowFormatError naming the first line of file ``name`` that does not fit: its field
    count, or a field a reader of ``readers`` (None: a column not read) does not take."""
    with open(name, encoding="utf-8") as file:
        for number, line in enumerate(file, 1):
            line = line.rstrip("\n").rstrip("\r")
            if not line.strip():
                continue
            fields = line.split(separator)
            if len(fields) != len(names):
                raise RowFormatError(f"{name}, line {number}: {len(fields)} fields for "
                                     f"{len(names)} columns")
            for column, read, field in zip(names, readers, fields, strict=True):
                try:
                    if read is not None:
                        read(field)
                except ValueError as exc:
                    raise RowFormatError(f"{name}, line {number}, column {column}: {exc}") from None


def _read_columns(text: str, separator: str, columns: list) -> list[tuple]:
    """A file's rows converted a column at a time (``int``, ``float`` over a whole column run in C);
    ValueError when a line does not fit, for the caller to find it line by line."""
    lines = text.split("\n")
    if "\r" in text:
        lines = [line.rstrip("\r") for line in lines]
    if lines and not lines[-1]:
        lines.pop()  # after the last line's ending
    width = len(columns)
    if width == 1 or set(map(str.count, lines, itertools.repeat(separator))) != {width - 1}:
        lines = list(filter(str.strip, lines))  # blank lines are no rows
        if not lines:
            return []
        if set(map(str.count, lines, itertools.repeat(separator))) != {width - 1}:
            raise ValueError("fields")
    if len(separator) == 1:  # one split of all lines, each column a slice: no list per line
        fields = separator.join(lines).split(separator)
        values = [read(fields[at::width]) for at, read in enumerate(columns)]
    else:  # a longer separator could straddle two joined lines
        per_line = zip(*map(str.split, lines, itertools.repeat(separator)), strict=True)
        values = [read(column) for read, column in zip(columns, per_line, strict=True)]
    return list(zip(*values, strict=True))


def _nones(texts: list) -> list:
    """A column no query reads: not converted."""
    return [None] * len(texts)


def _utc(zone: str | None) -> bool:
    """Whether epoch milliseconds are shown in UTC (the zone named, else this machine's)."""
    if zone is None:
        import time

        return time.timezone == 0 and not time.daylight
    return zone.upper() in ("UTC", "ETC/UTC", "GMT", "ETC/GMT", "Z", "ZULU", "UCT")


def _utc_timestamps(field):
    """Epoch milliseconds to UTC timestamps a whole column at once (numpy's datetime64 made into
    Python datetimes in C); ``field`` per text where a text is no plain integer in range."""
    def stamps(texts):
        joined = "".join(texts)
        if "_" not in joined and "+" not in joined:  # int() takes them, to_timestamp does not
            import numpy as np

            try:
                millis = np.array(list(map(int, texts)), dtype=np.int64)
            except (ValueError, OverflowError):
                millis = None
            if millis is not None and len(millis) and -62_135_596_800_000 <= millis.min() \
                    and millis.max() < 253_402_300_800_000:  # years 1 to 9999
                return millis.astype("datetime64[ms]").tolist()
        return list(map(field, texts))
    return stamps


def _plain_millis(field):
    """A timestamp column's epoch milliseconds as ints; ``field`` per text where one is no plain
    integer (text timestamps become timestamps)."""
    def millis(texts):
        joined = "".join(texts)
        if "_" not in joined and "+" not in joined:
            try:
                return list(map(int, texts))
            except ValueError:
                pass
        return list(map(field, texts))
    return millis


def _column_reader(sql_type: str, trim: bool, field, zone: str | None = None):
    """A function from a column's texts to their values: ``field`` (``field_reader``) per text,
    or one conversion over the whole column where the type allows it and every text fits."""
    kind = base_type(sql_type)
    if kind == "timestamp" and _utc(zone):
        return _utc_timestamps(field)
    if kind in _INTEGERS:
        low, high = integer_range(kind)

        def plain_integers(texts):
            """The integers of texts known to be ASCII without ``_`` (the chunk's text is)."""
            try:
                values = list(map(int, texts))
            except ValueError:  # blanks, "null", "1.5": field by field
                return list(map(field, texts))
            if values and (min(values) < low or max(values) > high):  # int: 32 bits, bigint: 64
                return list(map(field, texts))
            return values

        def integers(texts):
            # int() also takes 1_000 and digits of other scripts: Java's parseInt does not
            joined = "".join(texts)
            if "_" in joined or not joined.isascii():
                return list(map(field, texts))
            return plain_integers(texts)
        integers.plain = plain_integers
        return integers
    if kind in _DOUBLES:
        def numbers(texts):
            try:
                return list(map(float, texts))
            except ValueError:  # blanks, "null": field by field
                return list(map(field, texts))
        return numbers
    return lambda texts: list(map(field, texts))


def field_reader(sql_type: str, trim: bool = True, zone: str | None = None):
    """A function from a field's text to its value as ``sql_type``, as ``cast_value`` gives it: the
    type looked at once per column, not once per field, the common case first."""
    kind = base_type(sql_type)

    def slow(text):
        return cast_value(text.strip() if trim else text, sql_type, zone)

    if kind in _INTEGERS:
        low, high = integer_range(kind)

        def read_integer(text):
            try:
                value = int(text)  # blanks around a number are ignored, as cast_value strips them
            except ValueError:
                return _integer(text, kind)  # NULL, or refused naming the text
            if low <= value <= high and "_" not in text and text.isascii():
                return value
            return _integer(text, kind)  # as Java's parseInt reads it (its blanks only): refused
        return read_integer
    if kind in _DOUBLES:
        def read_double(text):
            try:
                return float(text)  # blanks around a number are ignored, as cast_value strips them
            except ValueError:
                return slow(text)
        return read_double
    if kind in _STRINGS:
        return str.strip if trim else str
    if kind == "timestamp":
        return _timestamp_reader(zone, slow)
    return slow


def _timestamp_reader(zone: str | None, slow):
    """Epoch milliseconds to timestamps, the conversion of each whole second cached (a table's
    times come close together): a time zone's rules are looked up once a second, not once a row."""
    seconds: dict[int, _dt.datetime] = {}

    def read(text):
        try:
            second, millis = divmod(int(text), 1000)
        except ValueError:
            return slow(text)
        if "_" in text or "+" in text:  # int() takes them, to_timestamp does not
            return slow(text)
        moment = seconds.get(second)
        if moment is None:
            if len(seconds) >= 4096:
                seconds.clear()
            moment = seconds[second] = to_timestamp(second * 1000, zone)
        return moment + _MILLIS[millis] if millis else moment
    return read


_MILLIS = [_dt.timedelta(milliseconds=n) for n in range(1000)]


def format_row(row: tuple, separator: str = ",") -> str:
    """One output line (without its newline) in GeaFlow's file sink format."""
    return separator.join(java_string(v) for v in row)


def read_json_rows(folder: str, types: list[str], exclude: tuple = ()) -> list[tuple]:
    """Rows kept as JSON arrays, one a line, in the files of ``folder`` (none when it is missing),
    but those of files whose names start with one of ``exclude``."""
    import json

    if not os.path.isdir(folder):
        return []
    rows = []
    for name in sorted(os.listdir(folder)):
        if name.startswith(".") or name.startswith(tuple(exclude)):
            continue
        with open(os.path.join(folder, name), encoding="utf-8") as file:
            for line in file:
                if line.strip():
                    values = json.loads(line)
                    rows.append(tuple(cast_value(v, t) for v, t in zip(values, types, strict=False)))
    return rows


def json_row(window: int, row: tuple) -> str:
    """A row kept by a graph store: a JSON array (timestamps and dates as text)."""
    import json

    return json.dumps(list(row), default=java_string, ensure_ascii=False)
