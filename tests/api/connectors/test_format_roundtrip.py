"""Every file format, source and sink round-trips exactly (hypothesis): text lines (FileSource and
DirectorySource, plain and .gz), JSON lines, CSV and Parquet, read and written, against independent
oracles (plain Python string splitting, the json and csv modules, pyarrow). The inputs hold what
readers get wrong: CR, LF and CRLF inside values and as line endings, quotes, delimiters, NUL,
non-BMP characters, blank and whitespace-only lines, empty files, empty Parquet row groups, and
windows of every size from 1. Pipelines run in-process on the local environment."""

from __future__ import annotations

import csv
import datetime
import gzip
import io
import json
import math
import pickle
import struct
import tempfile
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gyreflow.api import (
    AllWindow,
    CsvSink,
    DirectorySource,
    Environment,
    FileSink,
    FileSource,
    ParquetSink,
    SizeTumblingWindow,
)

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

PROPERTY = settings(max_examples=30, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# Characters that readers and writers get wrong, mixed into arbitrary (valid) text.
SPECIAL = ["\r", "\n", "\r\n", '"', "'", ",", ";", "\t", " ", "\x00", "\x0b", "\x0c", "\x1c", "\x85",
           "\u2028", "\ufeff", "é", "\U0001f600", "\U0010ffff"]
TEXT = st.lists(st.one_of(st.sampled_from(SPECIAL), st.characters(codec="utf-8")),
                max_size=8).map("".join)
WINDOW = st.integers(1, 5)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=6)


class Folder:
    """A temporary folder per example (hypothesis runs many in one test function)."""

    def __enter__(self) -> Path:
        self._handle = tempfile.TemporaryDirectory(prefix="gyreflow-roundtrip-")
        return Path(self._handle.name)

    def __exit__(self, *exc) -> None:
        self._handle.cleanup()


def run(folder: Path, build, parallelism: int = 1):
    env = Environment.local(parallelism, progress=False,
                            config={"state.path": str(folder / "state")})
    pipeline = env.pipeline("roundtrip")
    pipeline.task(build, name="job")
    return pipeline.execute()["job"]


def windows_of(records: list, size: int) -> dict[int, list]:
    """What SizeTumblingWindow(size) makes of one task's records: windows 1, 2, ... of ``size``."""
    return {1 + i // size: records[i:i + size] for i in range(0, len(records), size)}


def by_window(result, name: str) -> dict[int, list]:
    return {w: list(records) for w, records in result.by_window(name).items() if records}


def canonical(value) -> str:
    """JSON text of a value with NaN, infinities and -0.0 kept apart (== would not)."""
    return json.dumps(value, sort_keys=True, ensure_ascii=True)


def write(path: Path, data: bytes, compressed: bool) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(data) if compressed else data)
    return path


def window_files(folder: Path, extension: str) -> dict[int, Path]:
    """The published files of a sink, by window (no staged file may remain)."""
    assert not (folder / ".staging").exists()
    return {int(p.name.split("-")[1].split(".")[0]): p for p in folder.glob(f"window-*{extension}")}


# --- text lines -----------------------------------------------------------------------------------


def text_lines(content: str) -> list[str]:
    """Plain Python: lines end at LF; one CR before it belongs to the ending, any other is text."""
    pieces = content.split("\n")
    last = pieces.pop()  # the text after the last LF: a line without an ending, or nothing
    lines = [piece[:-1] if piece.endswith("\r") else piece for piece in pieces]
    return [*lines, last] if last else lines


@PROPERTY
@given(content=st.lists(st.sampled_from(["a", "b c", "", " ", "\t", "\r", "\n", "\r\n", "\x00",
                                         "\U0001f600", "é"]) | TEXT, max_size=12).map("".join),
       window=WINDOW, compressed=st.booleans(), parallelism=st.integers(1, 3))
def test_text_lines_read_back_as_python_splits_them(content, window, compressed, parallelism):
    expected = text_lines(content)
    with Folder() as folder:
        path = write(folder / "in" / ("data.txt.gz" if compressed else "data.txt"),
                     content.encode("utf-8"), compressed)
        result = run(folder, lambda ctx: [
            ctx.source(FileSource(path), SizeTumblingWindow(window)).collect("file"),
            ctx.source(DirectorySource(folder / "in"), SizeTumblingWindow(window)).collect("dir"),
        ], parallelism)
    # One task reads the directory's only file: windows follow the file.
    assert by_window(result, "dir") == windows_of(expected, window)
    if parallelism == 1 or compressed:  # a .gz file is read whole by one task
        assert by_window(result, "file") == windows_of(expected, window)
    else:  # byte ranges: each line is read by the task in whose range it starts, once
        assert Counter(result.output("file")) == Counter(expected)


@PROPERTY
@given(lines=st.lists(TEXT.filter(lambda t: "\n" not in t and not t.endswith("\r")), max_size=10),
       window=WINDOW)
def test_file_sink_lines_read_back_through_both_text_sources(lines, window):
    with Folder() as folder:
        run(folder, lambda ctx: ctx.source(lines, SizeTumblingWindow(window))
            .sink(FileSink(folder / "out", format=lambda _w, line: line, extension=".txt")))
        files = window_files(folder / "out", ".txt")
        written = {w: text_lines(p.read_bytes().decode("utf-8")) for w, p in files.items()}
        assert {w: ls for w, ls in written.items() if ls} == windows_of(lines, window)
        result = run(folder, lambda ctx: [
            ctx.source(DirectorySource(folder / "out", "*.txt"), AllWindow()).collect("dir"),
            *[ctx.source(FileSource(p), AllWindow()).collect(f"file{w}")
              for w, p in sorted(files.items())],
        ])
    assert result.output("dir") == lines  # by name: window-000001.txt, window-000002.txt, ...
    assert [r for w in sorted(files) for r in result.output(f"file{w}")] == lines


# --- JSON lines -----------------------------------------------------------------------------------


@PROPERTY
@given(values=st.lists(st.tuples(JSON, st.sampled_from(["", " ", "\t", "\r", " \t\r"]),
                                 st.integers(0, 2), st.sampled_from(["\n", "\r\n"]), st.booleans()),
                       max_size=10),
       last_ending=st.booleans(), window=WINDOW, compressed=st.booleans())
def test_json_lines_with_blank_lines_read_back_as_the_json_module_reads_them(
        values, last_ending, window, compressed):
    text = ""
    for value, blank, blanks, ending, ascii_only in values:
        text += (blank + ending) * blanks + json.dumps(value, ensure_ascii=ascii_only) + ending
    if not last_ending and text.endswith("\n"):
        text = text.removesuffix("\r\n") if text.endswith("\r\n") else text[:-1]
    # The oracle: the json module on every line holding more than JSON whitespace.
    expected = [json.loads(line) for line in text.split("\n") if line.strip(" \t\r\n")]
    assert len(expected) == len(values)
    with Folder() as folder:
        write(folder / "in" / ("data.jsonl.gz" if compressed else "data.jsonl"),
              text.encode("utf-8"), compressed)
        result = run(folder, lambda ctx: ctx.source(
            DirectorySource(folder / "in", format="jsonl"), SizeTumblingWindow(window)).collect("o"))
    got = by_window(result, "o")
    assert {w: [canonical(v) for v in vs] for w, vs in got.items()} == \
        {w: [canonical(v) for v in vs] for w, vs in windows_of(expected, window).items()}


@PROPERTY
@given(records=st.lists(JSON, max_size=10), window=WINDOW)
def test_file_sink_json_lines_read_back_through_the_json_module_and_the_source(records, window):
    with Folder() as folder:
        run(folder, lambda ctx: ctx.source(records, SizeTumblingWindow(window))
            .sink(FileSink(folder / "out")))
        files = window_files(folder / "out", ".jsonl")
        written = {w: [json.loads(line) for line in p.read_text(encoding="utf-8").split("\n")[:-1]]
                   for w, p in files.items() if p.stat().st_size}
        back = run(folder, lambda ctx: ctx.source(
            DirectorySource(folder / "out", "*.jsonl", format="jsonl"), AllWindow()).collect("o"))
    assert {w: [canonical(v) for v in vs] for w, vs in written.items()} == \
        {w: [canonical(v) for v in vs] for w, vs in windows_of(records, window).items()}
    assert [canonical(v) for v in back.output("o")] == [canonical(v) for v in records]


# --- CSV --------------------------------------------------------------------------------------------


def csv_rows(text: str, delimiter: str) -> list[list[str]]:
    """The csv module's rows of a file opened with newline="", empty lines left out."""
    csv.field_size_limit(2**31 - 1)
    return [row for row in csv.reader(io.StringIO(text, newline=""), delimiter=delimiter,
                                      strict=True) if row]


@st.composite
def csv_tables(draw, unique_header: bool = True):
    width = draw(st.integers(1, 4))
    header = draw(st.lists(TEXT, min_size=width, max_size=width, unique=unique_header))
    rows = draw(st.lists(st.lists(TEXT, min_size=width, max_size=width), max_size=10))
    return header, rows


@PROPERTY
@given(table=csv_tables(), header=st.booleans(), delimiter=st.sampled_from([",", ";", "\t", "|"]),
       terminator=st.sampled_from(["\n", "\r\n", "\r"]),
       blank_lines=st.lists(st.sampled_from(["\n", "\r\n", "\r"]), max_size=12),
       window=WINDOW, compressed=st.booleans())
def test_csv_written_by_the_csv_module_reads_back_as_it_reads_it(
        table, header, delimiter, terminator, blank_lines, window, compressed):
    names, rows = table
    buffer = io.StringIO(newline="")
    # "\r\n" makes the writer quote cells holding either character; each row then ends as chosen.
    writer = csv.writer(buffer, delimiter=delimiter, lineterminator="\r\n")
    lines = []
    for row in ([names] if header else []) + rows:
        buffer.seek(0)
        buffer.truncate()
        writer.writerow(row)
        lines.append(buffer.getvalue().removesuffix("\r\n") + terminator)
    for index, blank in enumerate(blank_lines):  # empty lines between rows, never inside one
        lines.insert(index % (len(lines) + 1), blank)
    text = "".join(lines)
    parsed = csv_rows(text, delimiter)
    if header:
        assert parsed[0] == names
        expected = [dict(zip(parsed[0], row, strict=True)) for row in parsed[1:]]
    else:
        expected = parsed
    assert len(expected) == len(rows)
    with Folder() as folder:
        write(folder / "in" / ("t.csv.gz" if compressed else "t.csv"), text.encode("utf-8"),
              compressed)
        result = run(folder, lambda ctx: ctx.source(
            DirectorySource(folder / "in", format="csv", header=header, delimiter=delimiter),
            SizeTumblingWindow(window)).collect("o"))
    assert by_window(result, "o") == windows_of(expected, window)


@PROPERTY
@given(text=st.lists(st.sampled_from(["a", "b", ",", '"', "\r", "\n", " ", "é"]), max_size=30)
       .map("".join), window=WINDOW)
def test_any_csv_text_reads_as_the_csv_module_reads_it_or_is_reported(text, window):
    try:
        expected = csv_rows(text, ",")
    except csv.Error:
        expected = None
    with Folder() as folder:
        write(folder / "in" / "t.csv", text.encode("utf-8"), False)
        try:
            result = run(folder, lambda ctx: ctx.source(
                DirectorySource(folder / "in", format="csv", header=False),
                SizeTumblingWindow(window)).collect("o"))
        except Exception as exc:  # noqa: BLE001 - the one allowed outcome besides equality
            assert expected is None, f"rows the csv module reads were refused: {exc}"
            assert "not CSV" in str(exc)
            return
    assert expected is not None, "text the csv module refuses was read without a report"
    assert result.output("o") == expected


@PROPERTY
@given(table=csv_tables(), header=st.booleans(), as_dicts=st.booleans(),
       delimiter=st.sampled_from([",", ";", "\t"]), window=WINDOW)
def test_csv_sink_values_read_back_exactly(table, header, as_dicts, delimiter, window):
    names, rows = table
    records = [dict(zip(names, row, strict=True)) for row in rows] if as_dicts else rows
    with Folder() as folder:
        sink = CsvSink(folder / "out", columns=names if as_dicts or header else None,
                       header=header, delimiter=delimiter)
        run(folder, lambda ctx: ctx.source(records, SizeTumblingWindow(window)).sink(sink))
        files = window_files(folder / "out", ".csv")
        for number, chunk in windows_of(rows, window).items():
            parsed = csv_rows(files[number].read_bytes().decode("utf-8"), delimiter)
            assert parsed == ([names] if header else []) + chunk
        back = run(folder, lambda ctx: ctx.source(
            DirectorySource(folder / "out", "*.csv", format="csv", header=header,
                            delimiter=delimiter), AllWindow()).collect("o"))
    assert back.output("o") == (records if header and as_dicts else
                                [dict(zip(names, r, strict=True)) for r in rows] if header else rows)


# --- Parquet --------------------------------------------------------------------------------------


PARQUET_VALUES = {
    "int": st.integers(-2**63, 2**63 - 1),
    "float": st.floats(),  # NaN, infinities, -0.0
    "bool": st.booleans(),
    "str": TEXT,
    "bytes": st.binary(max_size=8),
    "timestamp": st.datetimes(datetime.datetime(1, 1, 1), datetime.datetime(9999, 12, 31)),
    "date": st.dates(),
    "decimal": st.decimals(-10**12, 10**12, places=3, allow_nan=False, allow_infinity=False),
    "list": st.lists(st.integers(-2**63, 2**63 - 1) | st.none(), max_size=3),
    "null": st.none(),
}


@st.composite
def parquet_records(draw):
    kinds = draw(st.lists(st.sampled_from(sorted(PARQUET_VALUES)), min_size=1, max_size=4))
    names = [f"{kind}_{i}" for i, kind in enumerate(kinds)]
    count = draw(st.integers(1, 10))
    records = []
    for _ in range(count):
        record = {}
        for name, kind in zip(names, kinds, strict=True):
            presence = draw(st.sampled_from(["value", "value", "value", "none", "missing"]))
            if presence == "value":
                record[name] = draw(PARQUET_VALUES[kind])
            elif presence == "none":
                record[name] = None
        records.append(record or {names[0]: None})  # no row has no columns (test_format_edges.py)
    return names, records


def same(a, b) -> bool:
    """Equal values of equal types; NaN equals NaN and -0.0 is not 0.0."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b) or (math.isnan(a) and math.isnan(b))
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


@PROPERTY
@given(table=parquet_records(), window=WINDOW)
def test_parquet_sink_values_of_every_type_read_back_through_pyarrow_and_the_source(table, window):
    names, records = table
    # Every key of the window is a column; a record without one holds None there.
    expected = [{name: record.get(name) for name in names if any(name in r for r in chunk)}
                for chunk in windows_of(records, window).values() for record in chunk]
    with Folder() as folder:
        run(folder, lambda ctx: ctx.source(records, SizeTumblingWindow(window))
            .sink(ParquetSink(folder / "out")))
        files = window_files(folder / "out", ".parquet")
        written = [row for w in sorted(files) for row in pq.read_table(files[w]).to_pylist()]
        back = run(folder, lambda ctx: ctx.source(
            DirectorySource(folder / "out", "*.parquet", format="parquet"),
            SizeTumblingWindow(window)).collect("o"))
    assert len(files) == len(windows_of(records, window))
    assert same(written, expected), (written, expected)
    assert same(back.output("o"), expected)


@PROPERTY
@given(groups=st.lists(st.integers(0, 4), max_size=6), window=WINDOW,
       chosen=st.sampled_from([None, ("n",), ("text", "n")]))
def test_parquet_row_groups_of_any_size_even_empty_are_read_whole(groups, window, chosen):
    total = sum(groups)
    table = pa.table({"n": list(range(total)), "text": [f"r{i}\r\n\"" for i in range(total)],
                      "f": [float("nan") if i % 3 else i / 2 for i in range(total)]})
    with Folder() as folder:
        (folder / "in").mkdir()
        with pq.ParquetWriter(folder / "in" / "t.parquet", table.schema) as writer:
            start = 0
            for size in groups:  # an empty slice writes an empty row group
                writer.write_table(table.slice(start, size))
                start += size
        expected = pq.read_table(folder / "in" / "t.parquet",
                                 columns=list(chosen) if chosen else None).to_pylist()
        result = run(folder, lambda ctx: ctx.source(
            DirectorySource(folder / "in", format="parquet", columns=chosen),
            SizeTumblingWindow(window)).collect("o"))
    assert same(by_window(result, "o"), windows_of(expected, window))


# --- resuming a reader at any offset ----------------------------------------------------------------


def json_or_blank(line: str) -> bool:
    try:
        json.loads(line.strip(" \t\r\n") or "0")
    except ValueError:
        return False
    return True


def read_all(reader, step: int) -> list:
    out = []
    while batch := reader.read(step):
        out += batch
    return out


@PROPERTY
@given(content=st.lists(st.sampled_from(["a", "b", ",", '"', "\r", "\n", "\r\n", " ", "{}", "1",
                                         "\U0001f600"]), max_size=30).map("".join),
       fmt=st.sampled_from(["text", "jsonl", "csv", "parquet"]), compressed=st.booleans(),
       first=st.integers(1, 6), step=st.integers(1, 4))
def test_a_reader_resumed_at_its_offset_continues_exactly(content, fmt, compressed, first, step):
    with Folder() as folder:
        name = "data" + (".gz" if compressed and fmt != "parquet" else "")
        if fmt == "parquet":
            lines = content.split("\n")
            table = pa.table({"line": lines, "n": list(range(len(lines)))})
            (folder / "in").mkdir()
            pq.write_table(table, folder / "in" / name, row_group_size=max(1, step + 1))
        else:
            write(folder / "in" / name, content.encode("utf-8"), compressed)
        if fmt == "jsonl" and not all(json_or_blank(line) for line in content.split("\n")):
            return  # only JSON lines here: a bad record stops the reader (test_format_edges.py)
        source = DirectorySource(folder / "in", format=fmt, header=False)
        whole = source.create_reader(0, 1)
        try:
            expected = read_all(whole, step)
        except Exception:  # noqa: BLE001 - a CSV the csv module refuses: read in the edge tests
            return
        finally:
            whole.close()
        reader = source.create_reader(0, 1)
        head = reader.read(first)
        offset = pickle.loads(pickle.dumps(reader.offset()))  # snapshots pickle the offset
        reader.close()
        resumed = source.create_reader(0, 1)
        resumed.seek(offset)
        tail = read_all(resumed, step)
        resumed.close()
    assert head + tail == expected
    assert len(head) == min(first, len(expected))  # a short batch only at the end
