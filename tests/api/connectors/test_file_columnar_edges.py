"""Columnar reading (``columnar=True``) at the edges where it used to part from the row reader: a
lone CR or a byte-order mark in a JSON line (read as JSON by pyarrow, refused by ``json.loads``),
and a CSV file without any row (an empty file, blank lines only), which stopped the job.

Oracle: ``json.loads`` of each line and the csv module, in plain loops written out here.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from _cli_runs import run_module
from hypothesis import given, settings
from hypothesis import strategies as st

from gyreflow.api import DirectorySource, SizeTumblingWindow
from gyreflow.api.connectors.column_formats import open_any_cursor
from gyreflow.api.connectors.file_formats import CsvOptions, MalformedRecordError
from gyreflow.runtime.errors import DataError

pa = pytest.importorskip("pyarrow")

BOM = b"\xef\xbb\xbf"
TEXT = st.one_of(st.text(max_size=6), st.sampled_from(["\ufeff", "x\ufeffy", "a\rb"]))
OBJECT = st.fixed_dictionaries({"a": st.integers(-1000, 1000)}, optional={"b": TEXT}).map(
    lambda d: json.dumps(d, ensure_ascii=False).encode())  # a BOM inside text is text


@st.composite
def json_line(draw) -> bytes:
    """A line of JSON lines: an object, maybe with CRs between its tokens or a BOM, two objects
    parted by a lone CR, a blank line, or no JSON."""
    kind = draw(st.sampled_from(["object", "cr-space", "two", "bom", "bom-later", "blank",
                                 "cr-only", "garbage"]))
    raw = draw(OBJECT)
    if kind == "cr-space":  # CRs as JSON whitespace: json.loads reads the line
        return raw.replace(b":", b":\r", 1).replace(b"{", b"{\r ", 1)
    if kind == "two":
        return raw + b"\r" + draw(OBJECT)
    if kind == "bom":
        return BOM + raw
    if kind == "bom-later":
        return b" " + BOM + raw
    if kind == "blank":
        return draw(st.sampled_from([b"", b"  ", b"\t"]))
    if kind == "cr-only":
        return b"\r \r"
    if kind == "garbage":
        return b"{nope"
    return raw


def oracle(data: bytes) -> tuple[list, list[int]]:
    """The records (JSON objects) and the numbers of the bad lines, line by line with json."""
    records, bad = [], []
    for number, raw in enumerate(data.split(b"\n"), 1):
        if raw.endswith(b"\r") and len(data.split(b"\n")) > number:  # a CRLF ending
            raw = raw[:-1]
        text = raw.decode("utf-8")
        if not text.strip(" \t\r\n"):
            continue
        try:
            value = json.loads(text)
        except ValueError:
            bad.append(number)
            continue
        if isinstance(value, dict):
            records.append(value)
        else:
            bad.append(number)
    return records, bad


def read_columns(path: Path, fmt: str, step: int, options: CsvOptions | None = None):
    """Rows and bad line numbers of a columnar cursor, ``step`` records a read, reopened at its
    position after every read."""
    options = options or CsvOptions()
    rows, bad, position = [], [], None
    while True:
        cursor = open_any_cursor(str(path), fmt, options, None, position, columnar=True)
        out = cursor.read(step)
        position = cursor.position
        cursor.close()
        if not out:
            return rows, bad
        for item in out:
            if isinstance(item, MalformedRecordError):
                bad.append(int(item.where.split()[-1]))
            else:
                rows += item.rows()


def without_nulls(value):
    """A column batch has every column in every row: compare without the keys that are None."""
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    return value


@settings(max_examples=80, deadline=None)
@given(lines=st.lists(json_line(), max_size=12), crlf=st.booleans(), last=st.booleans(),
       step=st.integers(1, 20))
def test_json_lines_as_columns_refuse_a_lone_cr_and_a_bom_as_json_loads_does(
        tmp_path_factory, lines, crlf, last, step):
    ending = b"\r\n" if crlf else b"\n"
    data = ending.join(lines) + (ending if last and lines else b"")
    path = tmp_path_factory.mktemp("jsonl") / "data.jsonl"
    path.write_bytes(data)
    records, bad = oracle(data)
    rows, refused = read_columns(path, "jsonl", step)
    assert [without_nulls(r) for r in rows] == [without_nulls(r) for r in records]
    assert refused == bad


@pytest.mark.parametrize("data", [b'{"a": 1}\r{"a": 2}\n', BOM + b'{"a": 1}\n',
                                  b'{"a": 0}\n' + BOM + b'{"a": 1}\r\n'])
def test_columnar_json_lines_report_the_bad_line_as_the_row_reader_does(make_env, tmp_path, data):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "f.jsonl").write_bytes(data)
    number = data.split(b"\n").index(next(line for line in data.split(b"\n")
                                          if b"\r{" in line or line.startswith(BOM))) + 1
    errors, letters, kept = {}, {}, {}
    for columnar in (False, True):
        pipeline = make_env(1).pipeline("bad")
        source = DirectorySource(tmp_path / "in", "*.jsonl", format="jsonl", columnar=columnar)
        pipeline.task(lambda ctx, s=source: ctx.source(s).collect("o"), name="job")
        with pytest.raises(DataError) as caught:
            pipeline.execute(fresh=True)
        errors[columnar] = str(caught.value).split(": ", 1)[1]  # after the task's name
        dead = tmp_path / f"dead-{columnar}"
        pipeline = make_env(1).pipeline("dead")
        source = DirectorySource(tmp_path / "in", "*.jsonl", format="jsonl", columnar=columnar,
                                 dead_letters=dead)
        pipeline.task(lambda ctx, s=source: ctx.source(s, SizeTumblingWindow(10)).collect("o"),
                      name="job")
        kept[columnar] = pipeline.execute(fresh=True)["job"].output("o")
        letters[columnar] = [{k: v for k, v in json.loads(line).items() if k != "after"}
                             for path in sorted(dead.glob("*.jsonl"))
                             for line in path.read_text(encoding="utf-8").splitlines()]
    assert f"f.jsonl, line {number}: not JSON" in errors[True], errors[True]
    assert errors[True] == errors[False]
    assert letters[True] == letters[False] and [d["where"] for d in letters[True]] == [
        f"line {number}"]
    records, _ = oracle(data)
    assert kept[True] == kept[False] == records


def test_a_columnar_json_line_with_a_bom_stops_the_command_with_one_line(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "f.jsonl").write_bytes(BOM + b'{"a": 0}\n{"a": 1}\n')  # at the start
    (tmp_path / "job.py").write_text(
        "from gyreflow.api import DirectorySource, Environment\n"
        "p = Environment.local(progress=False).pipeline('bom')\n"
        f"s = DirectorySource({str(tmp_path / 'in')!r}, format='jsonl', columnar=True)\n"
        "p.task(lambda ctx: ctx.source(s).collect('o'), name='job')\n"
        "p.execute()\n", encoding="utf-8")
    done = run_module(["run", "--quiet", "job.py"], cwd=tmp_path)
    assert done.returncode == 5, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr
    assert f"input file {tmp_path / 'in' / 'f.jsonl'}, line 1: not JSON" in errors[0], errors[0]


# CSV without rows --------------------------------------------------------------------------------


CSV_FILES = {"a.csv": b"city,n\nOslo,1\nRome,2\n", "b.csv": b"", "c.csv": b"\n\n",
             "d.csv": b"\r\n\r\n\r", "e.csv": b"city,n\n", "f.csv": b"\ncity,n\n\nBern,3"}


def csv_oracle(files: dict[str, bytes]) -> list[dict]:
    """The records of the files in name order: the first row that is not empty names the
    columns (an empty line is no row)."""
    records = []
    for name in sorted(files):
        rows = [row for row in csv.reader(io.StringIO(files[name].decode("utf-8"), newline=""))
                if row]
        records += [dict(zip(rows[0], row, strict=True)) for row in rows[1:]]
    return records


@pytest.mark.parametrize("columnar", [False, True])
def test_csv_files_without_rows_read_as_no_records(make_env, tmp_path, columnar):
    (tmp_path / "in").mkdir()
    for name, data in CSV_FILES.items():
        (tmp_path / "in" / name).write_bytes(data)
    pipeline = make_env(1).pipeline("empty")
    source = DirectorySource(tmp_path / "in", "*.csv", format="csv", columnar=columnar)
    pipeline.task(lambda ctx: ctx.source(source, SizeTumblingWindow(2)).collect("o"), name="job")
    assert pipeline.execute()["job"].output("o") == csv_oracle(CSV_FILES)


@pytest.mark.parametrize("data", [b"", b"\n", b"\n\r\n\r"])
def test_a_columnar_csv_cursor_over_a_file_without_rows_ends_where_it_ends(tmp_path, data):
    path = tmp_path / "empty.csv"
    path.write_bytes(data)
    cursor = open_any_cursor(str(path), "csv", CsvOptions(), None, None, columnar=True)
    assert cursor.read(10) == []
    position = cursor.position
    cursor.close()
    assert position[0] == len(data)  # read to the end: a resume there reads nothing again
    assert read_columns(path, "csv", 3) == ([], [])
