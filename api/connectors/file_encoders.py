"""Record formats of files written by window: text lines, JSON lines, CSV and Parquet, each
window's records turned into the bytes of its file."""

from __future__ import annotations

import abc
import csv
import functools
import io
import json
from collections.abc import Callable, Iterable, Mapping

from gyreflow.api.connectors.file_formats import CsvOptions, require_pyarrow
from gyreflow.plan.words import plural


class UnwritableRecordError(Exception):
    """A record that a file format cannot hold so that it reads back the same; ``reason`` says why."""

    def __init__(self, record: object, reason: str) -> None:
        super().__init__(reason)
        self.record = record
        self.reason = reason


def _encoding_problem(exc: UnicodeEncodeError, what: str = "it") -> str:
    return f"{what} is not UTF-8 text ({exc.object[exc.start:exc.end]!r}: {exc.reason})"


class WindowEncoder(abc.ABC):
    """Turns one window's records into the bytes of its file: ``add`` as records come, ``end``
    once the window is complete (a Parquet file is written whole at the end). A record the format
    cannot hold raises :class:`UnwritableRecordError`."""

    @abc.abstractmethod
    def add(self, window: int, records: list) -> bytes:
        """The bytes of ``records`` in this format (what the file gets now)."""

    def end(self) -> bytes:
        return b""


def _json_encoder():
    """The C encoder ``json.dumps(record, ensure_ascii=False)`` makes for every call, made once (for
    a batch: a failed call may leave its circular-reference marks behind); None without the C
    accelerator."""
    try:
        from json.encoder import c_make_encoder, encode_basestring

        default = json.JSONEncoder(ensure_ascii=False).default
        return c_make_encoder({}, default, encode_basestring, None, ": ", ", ", False, False, True)
    except (ImportError, TypeError):
        return None


def json_lines(_window: int, records: list) -> str:
    """``json.dumps(record, ensure_ascii=False)`` of every record, each line ending in ``\n``: the
    same text, with one encoder for the batch instead of one per record."""
    encode = _json_encoder()
    if encode is None:
        return "".join([json.dumps(record, ensure_ascii=False) + "\n" for record in records])
    join = "".join
    text = "\n".join([join(encode(record, 0)) for record in records])
    return text + "\n" if records else text


class LineEncoder(WindowEncoder):
    """One line per record, ``line(window, record)`` and ``\\n``. A line that would not read back as
    itself is refused: one holding ``\\n`` (two lines), one ending in ``\\r`` (read as a ``\\r\\n``
    ending) or one that is not UTF-8 text (a lone surrogate).

    A window's batch is formatted in one pass (``lines(window, records)`` when given: the text of
    every line, each ending in ``\\n``); only a batch holding a record that cannot be written is
    formatted again record by record, to name it."""

    def __init__(self, line: Callable[[int, object], str],
                 lines: Callable[[int, list], str] | None = None) -> None:
        self.line = line
        self.lines = lines

    def add(self, window: int, records: list) -> bytes:
        data = self._all_at_once(window, records)
        if data is None:  # some record cannot be written: find it, and name it
            data = b"".join([self._encoded(window, record) for record in records])
        return data

    def _all_at_once(self, window: int, records: list) -> bytes | None:
        try:
            if self.lines is not None:
                text = self.lines(window, records)
            else:
                line = self.line
                text = "\n".join([line(window, r) for r in records])
                if records:
                    text += "\n"
            if text.count("\n") == len(records) and "\r\n" not in text:
                return text.encode("utf-8")
        except Exception:  # noqa: BLE001
            return None
        return None

    def _encoded(self, window: int, record: object) -> bytes:
        try:
            text = self.line(window, record)
        except Exception as exc:  # noqa: BLE001 - a record the format function cannot turn into text
            raise UnwritableRecordError(record, f"{type(exc).__name__}: {exc}") from None
        if not isinstance(text, str):
            raise UnwritableRecordError(record, f"the format returned {type(text).__name__}, not str")
        if "\n" in text or text.endswith("\r"):
            raise UnwritableRecordError(record, "its line holds a line break (\\n, or \\r at its end) "
                                                "and would read back as other lines")
        try:
            return (text + "\n").encode("utf-8")
        except UnicodeEncodeError as exc:
            raise UnwritableRecordError(record, _encoding_problem(exc)) from None


class CsvEncoder(WindowEncoder):
    """Dict records (columns from ``options.columns`` or the first record) or sequences.

    Every value reads back exactly through ``csv.reader`` (as text: ``str`` of the value; None is an
    empty cell): a cell holding a line break, a carriage return, the delimiter or a quote is quoted
    (Python's writer alone leaves a bare ``\\r`` unquoted when lines end in ``\\n``). Refused: a record
    with no cells (it would read back as no row), a dict with keys the header lacks when the first
    record chose the columns, a sequence whose length is not the header's, text that is not UTF-8.
    """

    def __init__(self, options: CsvOptions) -> None:
        self.options = options
        self.columns = options.columns
        self.known: frozenset | None = None  # the columns when the first record chose them
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

    def _row(self, record: object) -> list:
        if isinstance(record, Mapping):
            if self.columns is None:
                self.columns = tuple(record)
                self.known = frozenset(self.columns)
            elif self.known is not None and record.keys() != self.known:
                extra = [key for key in record if key not in self.known]
                if extra:
                    msg = (f"column {extra[0]!r} is not in the header, which the window's first "
                           "record chose (give CsvSink columns= to choose them)")
                    raise UnwritableRecordError(record, msg)
            row = [record.get(column) for column in self.columns]
        elif isinstance(record, str | bytes) or not isinstance(record, Iterable):
            msg = f"a CSV record is a dict or a sequence of cells, not {type(record).__name__}"
            raise UnwritableRecordError(record, msg)
        else:
            row = list(record)
            if self.columns is not None and len(row) != len(self.columns):
                msg = f"{plural(len(row), 'cell')}, the header has {len(self.columns)}"
                raise UnwritableRecordError(record, msg)
        if not row:
            raise UnwritableRecordError(record, "a row without cells would read back as no row")
        return ["" if cell is None else cell for cell in row]

    def add(self, window: int, records: list) -> bytes:
        rows = []
        for record in records:
            row = self._row(record)
            if not self.started:
                self.started = True
                if self.options.header and self.columns is not None:
                    rows.append(list(self.columns))
            rows.append(row)
        try:
            return self._rows(rows).encode("utf-8")
        except UnicodeEncodeError:
            pass
        header = len(rows) - len(records)
        for index, row in enumerate(rows):
            try:
                self._rows([row]).encode("utf-8")
            except UnicodeEncodeError as exc:
                culprit = records[max(0, index - header)]
                what = "a column name" if index < header else "it"
                raise UnwritableRecordError(culprit, _encoding_problem(exc, what)) from None
        msg = "it is not UTF-8 text"
        raise UnwritableRecordError(records[0] if records else None, msg)

    def end(self) -> bytes:
        if not self.started and self.options.header and self.columns is not None:
            self.started = True
            return self._rows([list(self.columns)]).encode("utf-8")
        return b""


class ParquetEncoder(WindowEncoder):
    """Dict records, kept until the window ends and then written as one Parquet file.

    The columns are ``columns``, else every key of the window's records in order of appearance (a
    record without a key has None there). A column holds one type, as pyarrow infers it from the
    values; a value that does not fit it, or would read back as another value (text in a column
    of bytes, a dict without another's keys, a tuple or a set as a list, a bool as a number), is
    refused, naming the record and the column.
    """

    def __init__(self, columns: tuple[str, ...] | None, compression: str) -> None:
        self.columns = columns
        self.compression = compression
        self.records: list = []

    def add(self, window: int, records: list) -> bytes:
        self.records.extend(records)
        return b""

    def end(self) -> bytes:
        pq = require_pyarrow("a Parquet sink")
        records, self.records = self.records, []
        for record in records:
            if not isinstance(record, Mapping):
                msg = f"a Parquet record is a dict of column values, not {type(record).__name__}"
                raise UnwritableRecordError(record, msg)
        names = self.columns
        if names is None:
            names = tuple(dict.fromkeys(key for record in records for key in record))
            strange = next((key for key in names if not isinstance(key, str)), None)
            if strange is not None:
                culprit = next(record for record in records if strange in record)
                msg = f"column names are text, not {type(strange).__name__} ({strange!r})"
                raise UnwritableRecordError(culprit, msg)
            if records and not names:
                raise UnwritableRecordError(records[0], "a row without columns cannot be stored")
        table = self._table(records, names)
        buffer = io.BytesIO()
        try:
            pq.write_table(table, buffer, compression=self.compression)
        except Exception as exc:  # noqa: BLE001 - pyarrow raises several types
            raise _unwritable_column(pq, table, records, exc) from None
        return buffer.getvalue()

    @staticmethod
    def _table(records: list, names: tuple[str, ...]):
        import pyarrow as pa

        arrays = {}
        for name in names:
            values = [record.get(name) for record in records]
            try:
                arrays[name] = pa.array(values)
            except Exception as exc:  # noqa: BLE001 - pyarrow raises several types
                first = next((value for value in values if value is not None), None)
                culprit = records[0]
                for record, value in zip(records, values, strict=True):
                    try:
                        pa.array([first, value])
                    except Exception:  # noqa: BLE001
                        culprit = record
                        break
                raise UnwritableRecordError(culprit, f"column {name!r}: {exc}") from None
            _refuse_other_values(name, arrays[name], values, records)
        return pa.table(arrays)


def _refuse_other_values(name: str, array, values: list, records: list) -> None:
    """Refuse the first record whose value in column ``name`` would read back from ``array``
    (what pyarrow made of ``values``) as another value. A column of one plain type (integers,
    text, ...) is known to read back as written from the types of its values alone (one pass
    over them); any other is compared value by value with what it reads back as."""
    import pyarrow as pa

    kind = array.type
    if _holds(kind, lambda t: pa.types.is_struct(t) and t.num_fields == 0):
        index = next((i for i, value in enumerate(values) if _has_empty_dict(value)), 0)
        raise UnwritableRecordError(records[index], f"column {name!r}: an empty dict (a struct "
                                    "without fields) cannot be stored in Parquet")
    found = set(map(type, values))
    found.discard(type(None))
    if any(test(kind) and found <= types for test, types in _plain_types()):
        return
    check = _checker(kind)
    if check is not None and all(map(check, values)):
        return
    for record, value, back in zip(records, values, array.to_pylist(), strict=True):
        if not _reads_back(value, back):
            hint = _NOT_LISTS.get(type(value).__name__, "")
            raise UnwritableRecordError(record, f"column {name!r}: {value!r:.100} would read back "
                                                f"as {back!r:.100} (the column is {kind}){hint}")


@functools.cache
def _plain_types() -> tuple:
    """(test of an Arrow type, the Python types whose values it holds as they are) pairs; an int
    in a column of floats is one of equal value (pyarrow refuses one a float cannot hold)."""
    import datetime

    import pyarrow as pa

    t = pa.types
    return ((t.is_integer, {int}), (t.is_floating, {float, int}), (t.is_boolean, {bool}),
            (t.is_string, {str}), (t.is_large_string, {str}), (t.is_binary, {bytes}),
            (t.is_large_binary, {bytes}), (t.is_null, set()), (t.is_date32, {datetime.date}),
            (t.is_time64, {datetime.time}), (t.is_duration, {datetime.timedelta}))


def _checker(kind):
    """A test of a value telling from its type (and a dict's keys) alone that it reads back as
    itself from a column of Arrow type ``kind``: plain values, lists and dicts of them; None for
    other types (timestamps, decimals), which only a comparison tells. A value it fails may still
    read back the same (a dict subclass): the values are then compared one by one."""
    import pyarrow as pa

    for test, types in _plain_types():
        if test(kind):
            return lambda value: value is None or type(value) in types
    if pa.types.is_struct(kind):
        names = frozenset(kind.field(i).name for i in range(kind.num_fields))
        fields = [(kind.field(i).name, _checker(kind.field(i).type)) for i in range(kind.num_fields)]
        if any(check is None for _, check in fields):
            return None
        return lambda value: value is None or (type(value) is dict and value.keys() == names
                                               and all(check(value[name])
                                                       for name, check in fields))
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        inner = _checker(kind.value_type)
        if inner is None:
            return None
        return lambda value: value is None or (type(value) is list and all(map(inner, value)))
    return None


_NOT_LISTS = {"tuple": ": give a list", "set": ": give a sorted list",
              "frozenset": ": give a sorted list", "ndarray": ": give .tolist()"}


def _reads_back(written, back) -> bool:
    """Whether ``back`` (read from Parquet) is ``written``: equal values of the same kind (text
    stays text, a bool a bool, a list a list, a dict has the same keys); an int may come back as
    the float of its value, NaN as NaN."""
    if written is None or back is None:
        return written is back
    if isinstance(back, bool):  # a column of booleans takes nothing else (a numpy bool at most)
        return (isinstance(written, bool) or not isinstance(written, int | float)) \
            and bool(written == back)
    if isinstance(written, bool):  # a bool among numbers would read back as a number
        return False
    if isinstance(written, str) or isinstance(back, str):
        return isinstance(written, str) and isinstance(back, str) and written == back
    if isinstance(written, bytes | bytearray | memoryview) or isinstance(back, bytes):
        return isinstance(back, bytes) and isinstance(written, bytes | bytearray | memoryview) \
            and written == back
    if isinstance(written, Mapping) or isinstance(back, dict):
        return (isinstance(written, Mapping) and isinstance(back, dict)
                and written.keys() == back.keys()
                and all(_reads_back(written[key], back[key]) for key in written))
    if isinstance(written, list) or isinstance(back, list):
        return (isinstance(written, list) and isinstance(back, list) and len(written) == len(back)
                and all(_reads_back(w, b) for w, b in zip(written, back, strict=True)))
    if isinstance(written, float) and written != written:  # NaN
        return isinstance(back, float) and back != back
    try:
        return bool(written == back)
    except Exception:  # noqa: BLE001 - a value whose equality is no bool (an array)
        return False


def _has_empty_dict(value) -> bool:
    if isinstance(value, Mapping):
        return not value or any(_has_empty_dict(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_has_empty_dict(v) for v in value)
    return False


def _holds(kind, test) -> bool:
    """Whether the Arrow type ``kind``, or a type nested in it, passes ``test``."""
    if test(kind):
        return True
    return any(_holds(kind.field(i).type, test) for i in range(kind.num_fields))


def _unwritable_column(pq, table, records: list, exc: Exception) -> UnwritableRecordError:
    """The error for a table pyarrow cannot write: the first column that cannot be written alone,
    and its first record that cannot."""
    import pyarrow as pa

    for name in table.column_names:
        column = table.column(name)
        if _writes(pq, pa.table({name: column})):
            continue
        culprit = next((record for index, record in enumerate(records)
                        if not _writes(pq, pa.table({name: column.slice(index, 1)}))), records[0])
        return UnwritableRecordError(culprit, f"column {name!r}: {exc}")
    return UnwritableRecordError(records[0] if records else None, f"{type(exc).__name__}: {exc}")


def _writes(pq, table) -> bool:
    try:
        pq.write_table(table, io.BytesIO())
    except Exception:  # noqa: BLE001
        return False
    return True
