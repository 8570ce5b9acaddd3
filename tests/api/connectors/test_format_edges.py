"""File formats at their edges: the two losses found outside (blank JSON lines read as the end of a
file; a bare CR written unquoted by CsvSink), CSV as the csv module reads it (a quote inside a cell,
a lone CR, headers), huge values, followed directories, damaged .gz files, and what the sinks refuse:
one line naming the sink, the window and the record, never a traceback."""

from __future__ import annotations

import csv
import datetime
import gzip
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

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
from gyreflow.api.config import ConfigError
from gyreflow.runtime.errors import DataError

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def run(folder: Path, build, parallelism: int = 1):
    env = Environment.local(parallelism, progress=False,
                            config={"state.path": str(folder / "state")})
    pipeline = env.pipeline("edges")
    pipeline.task(build, name="job")
    return pipeline.execute()["job"]


def read_dir(folder: Path, window: int = 1000, **options) -> list:
    """The records a DirectorySource over ``folder/in`` gives (one run, in order)."""
    source = DirectorySource(folder / "in", **options)
    return run(folder, lambda ctx: ctx.source(source, SizeTumblingWindow(window)).collect("o")) \
        .output("o")


def refusal(folder: Path, build) -> str:
    """The one-line DataError a run stops with (a sink's may come as a user function's cause)."""
    with pytest.raises(Exception) as caught:
        run(folder, build)
    error: BaseException | None = caught.value
    while error is not None and not isinstance(error, DataError):
        error = getattr(error, "cause", None) or error.__cause__
    assert error is not None, repr(caught.value)
    message = str(error)
    assert "\n" not in message and "Traceback" not in message, message
    return message


def csv_module_rows(data: bytes, **options) -> list[list[str]]:
    csv.field_size_limit(2**31 - 1)
    text = data.decode("utf-8")
    return [row for row in csv.reader(io.StringIO(text, newline=""), **options) if row]


# --- the two losses found outside: regressions ----------------------------------------------------


def test_blank_json_lines_do_not_end_the_file(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "events.jsonl").write_text(
        '{"i":1}\n{"i":2}\n\n{"i":3}\n\n{"i":4}\n{"i":5}\n', encoding="utf-8")
    source = DirectorySource(tmp_path / "in", format="jsonl")
    result = run(tmp_path, lambda ctx: ctx.source(source, SizeTumblingWindow(2)).collect("o"))
    assert result.by_window("o") == {1: [{"i": 1}, {"i": 2}], 2: [{"i": 3}, {"i": 4}],
                                     3: [{"i": 5}]}


def test_csv_sink_quotes_a_cell_holding_a_bare_carriage_return(tmp_path):
    records = [{"a": "x\ry", "b": "z"}, {"a": "\r", "b": "\r\r\n"}]
    run(tmp_path, lambda ctx: ctx.source(records, SizeTumblingWindow(2)).sink(CsvSink(tmp_path / "out")))
    data = (tmp_path / "out" / "window-000001.csv").read_bytes()
    with open(tmp_path / "out" / "window-000001.csv", encoding="utf-8", newline="") as handle:
        assert list(csv.reader(handle)) == [["a", "b"], ["x\ry", "z"], ["\r", "\r\r\n"]], data


# --- CSV read as the csv module reads it -----------------------------------------------------------


@pytest.mark.parametrize("data", [
    b'x,y\na"b,c\nd,e\n',            # a quote inside an unquoted cell opens nothing
    b'x,y\na,b\rc,d\r\ne,f\r',        # a lone CR ends a row
    b'\n\r\n"x\ny",z\n1,2\n',         # empty lines before a header whose name holds a line break
    b'x,y\n"1\r\n\r\n2",3\n\n\n4,5',  # empty lines inside a quoted cell are the cell's
    b'x\n \n\t\n""\n',                # a line of spaces is a cell; "" is an empty cell
], ids=["quote-in-cell", "lone-cr", "header-after-blank-lines", "blank-lines-in-a-cell",
        "whitespace-cells"])
def test_csv_rows_are_the_csv_module_rows(tmp_path, data):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "t.csv").write_bytes(data)
    header, *rows = csv_module_rows(data, strict=True)
    assert read_dir(tmp_path, 1, format="csv") == [dict(zip(header, r, strict=True)) for r in rows]


def test_a_header_naming_a_column_twice_is_refused_not_merged(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "t.csv").write_text("id,id,city\n1,2,Oslo\n", encoding="utf-8")
    message = refusal(tmp_path, lambda ctx: ctx.source(
        DirectorySource(tmp_path / "in", format="csv"), SizeTumblingWindow(5)).collect("o"))
    assert "t.csv, line 1" in message and "column 'id' more than once" in message, message
    # Columns given by name read it, the header line skipped.
    assert read_dir(tmp_path, format="csv", columns=["a", "b", "city"]) == \
        [{"a": "1", "b": "2", "city": "Oslo"}]


def test_json_lines_skip_only_json_whitespace(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "e.jsonl").write_text('1\n \t\r\n\x0c\n2\n', encoding="utf-8")
    message = refusal(tmp_path, lambda ctx: ctx.source(
        DirectorySource(tmp_path / "in", format="jsonl"), SizeTumblingWindow(5)).collect("o"))
    assert "e.jsonl, line 3: not JSON" in message, message


# --- huge values ------------------------------------------------------------------------------------


def test_huge_values_round_trip_through_every_sink_and_source(tmp_path):
    cell = ('"quoted", \r\n\r\n' + "\U0001f600" * 50 + "\x00") * 3_000  # ~390 KB with CR and LF
    line = "l" * 2_000_000
    rows = [{"id": "1", "cell": cell}, {"id": "2", "cell": ""}]
    values = [{"cell": cell}, [line]]
    run(tmp_path, lambda ctx: [
        ctx.source(rows, AllWindow()).sink(CsvSink(tmp_path / "csv")),
        ctx.source(values, AllWindow()).sink(FileSink(tmp_path / "jsonl")),
        ctx.source([line, cell.replace("\n", "")], AllWindow())
        .sink(FileSink(tmp_path / "text", format=lambda _w, r: r, extension=".txt")),
        ctx.source(rows, AllWindow()).sink(ParquetSink(tmp_path / "parquet")),
    ])
    csv_data = (tmp_path / "csv" / "window-000001.csv").read_bytes()
    assert csv_module_rows(csv_data, strict=True) == [["id", "cell"], ["1", cell], ["2", ""]]
    back = run(tmp_path, lambda ctx: [
        ctx.source(DirectorySource(tmp_path / "csv", format="csv"), AllWindow()).collect("csv"),
        ctx.source(DirectorySource(tmp_path / "jsonl", format="jsonl"), AllWindow())
        .collect("jsonl"),
        ctx.source(FileSource(tmp_path / "text" / "window-000001.txt"), AllWindow()).collect("text"),
        ctx.source(DirectorySource(tmp_path / "parquet", format="parquet"), AllWindow())
        .collect("parquet"),
    ])
    assert back.output("csv") == rows
    jsonl = (tmp_path / "jsonl" / "window-000001.jsonl").read_text(encoding="utf-8")
    assert [json.loads(x) for x in jsonl.splitlines()] == values == back.output("jsonl")
    assert back.output("text") == [line, cell.replace("\n", "")]
    assert pq.read_table(tmp_path / "parquet" / "window-000001.parquet").to_pylist() == rows
    assert back.output("parquet") == rows


# --- what the sinks refuse ---------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "sink", "records", "shown", "reason"), [
    ("json-surrogate", lambda p: FileSink(p), ["ok", {"k": "a\ud800"}], "{'k': 'a\\ud800'}",
     "is not UTF-8 text ('\\ud800': surrogates not allowed)"),
    ("text-surrogate", lambda p: FileSink(p, format=lambda _w, r: r), ["ok", "\udfff"], "'\\udfff'",
     "is not UTF-8 text"),
    ("text-line-break", lambda p: FileSink(p, format=lambda _w, r: r), ["ok", "two\nlines"],
     "'two\\nlines'", "holds a line break"),
    ("text-final-cr", lambda p: FileSink(p, format=lambda _w, r: r), ["ok", "cr\r"], "'cr\\r'",
     "holds a line break"),
    ("json-not-json", lambda p: FileSink(p), [1, {2}], "{2}", "not JSON serializable"),
    ("csv-surrogate", lambda p: CsvSink(p), [["ok"], ["\ud800"]], "['\\ud800']",
     "is not UTF-8 text"),
    ("csv-column-surrogate", lambda p: CsvSink(p), [{"\ud800": 1}], "{'\\ud800': 1}",
     "a column name is not UTF-8 text"),
    ("csv-new-column", lambda p: CsvSink(p), [{"a": 1}, {"a": 2, "b": 3}], "{'a': 2, 'b': 3}",
     "column 'b' is not in the header"),
    ("csv-no-cells", lambda p: CsvSink(p), [["x"], []], "[]", "would read back as no row"),
    ("csv-text-record", lambda p: CsvSink(p), ["abc"], "'abc'", "not str"),
    ("csv-short-row", lambda p: CsvSink(p, columns=["a", "b"]), [[1]], "[1]", "1 cell,"),
    ("parquet-surrogate", lambda p: ParquetSink(p), [{"s": "ok"}, {"s": "\ud800"}],
     "{'s': '\\ud800'}", "column 's'"),
    ("parquet-mixed-types", lambda p: ParquetSink(p), [{"n": 1}, {"n": 2}, {"n": "three"}],
     "{'n': 'three'}", "column 'n'"),
    ("parquet-no-columns", lambda p: ParquetSink(p), [{}, {}], "{}", "without columns"),
    ("parquet-not-a-dict", lambda p: ParquetSink(p), [{"a": 1}, (1, 2)], "(1, 2)", "not tuple"),
])
def test_a_record_a_sink_cannot_write_back_is_refused_in_one_line(
        tmp_path, name, sink, records, shown, reason):
    built = sink(tmp_path / "out")
    message = refusal(tmp_path, lambda ctx: ctx.source(records, SizeTumblingWindow(5)).sink(built))
    assert f"{built.describe()}: window 1, record {shown}: cannot be written" in message, message
    assert reason in message, message
    assert not list((tmp_path / "out").glob("window-*")), "nothing of the window is published"


SURROGATE_JOB = """
import sys
from gyreflow.api import Environment, FileSink, SizeTumblingWindow

pipeline = Environment.from_config().pipeline("surrogates")

@pipeline.task
def job(ctx):
    ctx.source(["ok", "fine", "a\\ud800b"], SizeTumblingWindow(2)).sink(FileSink(sys.argv[1]))

pipeline.execute()
"""


def gyreflow(tmp_path: Path, script: str, *args: str) -> subprocess.CompletedProcess:
    path = tmp_path / "job.py"
    path.write_text(script, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    env.update({"COLUMNS": "400", "GYREFLOW_STATE__PATH": str(tmp_path / "state")})
    return subprocess.run([sys.executable, "-m", "gyreflow", "run", "--quiet", "--env", "local",
                           str(path), "--", *args], env=env, capture_output=True, text=True,
                          timeout=120, check=False)


def one_error_line(done: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr
    return errors[0]


def test_a_lone_surrogate_stops_gyreflow_run_with_one_line_and_exit_5(tmp_path):
    done = gyreflow(tmp_path, SURROGATE_JOB, str(tmp_path / "out"))
    line = one_error_line(done)
    assert done.returncode == 5, done.stderr
    assert "window 2, record 'a\\ud800b'" in line and "FileSink(" in line, line
    assert sorted(os.listdir(tmp_path / "out")) == ["window-000001.jsonl"]


# --- damaged or cut .gz files -----------------------------------------------------------------------


CUT_GZ_JOB = """
import sys
from gyreflow.api import DirectorySource, Environment, FileSink, SizeTumblingWindow

pipeline = Environment.from_config().pipeline("cut")

@pipeline.task
def job(ctx):
    ctx.source(DirectorySource(sys.argv[1]), SizeTumblingWindow(100)).sink(FileSink(sys.argv[2]))

pipeline.execute()
"""


def test_a_cut_gz_file_stops_the_run_with_one_line_naming_it(tmp_path):
    (tmp_path / "in").mkdir()
    whole = gzip.compress("".join(f"line {i}\n" for i in range(5000)).encode())
    (tmp_path / "in" / "part.txt.gz").write_bytes(whole[:len(whole) // 2])
    done = gyreflow(tmp_path, CUT_GZ_JOB, str(tmp_path / "in"), str(tmp_path / "out"))
    line = one_error_line(done)
    assert done.returncode == 5, done.stderr
    assert "part.txt.gz: cannot be read" in line, line
    (tmp_path / "single.txt.gz").write_bytes(whole[:-8])  # the trailer cut off
    message = refusal(tmp_path, lambda ctx: ctx.source(
        FileSource(tmp_path / "single.txt.gz"), SizeTumblingWindow(100)).collect("o"))
    assert "single.txt.gz: cannot be read" in message, message


# --- Parquet values Python cannot hold ----------------------------------------------------------------


def test_nanosecond_timestamps_are_refused_not_rounded(tmp_path):
    (tmp_path / "in").mkdir()
    exact = pa.array([1_600_000_000_000_000_000], pa.timestamp("ns"))
    pq.write_table(pa.table({"t": exact}), tmp_path / "in" / "a.parquet")
    pq.write_table(pa.table({"t": pa.array([1_600_000_000_000_000_001], pa.timestamp("ns"))}),
                   tmp_path / "in" / "b.parquet")
    message = refusal(tmp_path, lambda ctx: ctx.source(
        DirectorySource(tmp_path / "in", format="parquet"), SizeTumblingWindow(5)).collect("o"))
    assert "b.parquet, row group 0: cannot be read" in message, message
    letters = tmp_path / "letters"
    assert read_dir(tmp_path, format="parquet", dead_letters=letters) == \
        [{"t": datetime.datetime(2020, 9, 13, 12, 26, 40)}]
    (entry,) = [json.loads(x) for x in (letters / "dead-letters-0000.jsonl").read_text().splitlines()]
    assert entry["file"] == "b.parquet" and entry["where"] == "row group 0"


# --- followed directories -----------------------------------------------------------------------------


def test_a_followed_directory_looks_once_more_before_it_ends_idle(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text('{"n": 1}\n\n', encoding="utf-8")
    source = DirectorySource(tmp_path / "in", format="jsonl", follow=True, poll_interval=60.0,
                             until_idle=0.2)
    reader = source.create_reader(0, 1)
    try:
        assert reader.poll(10, 0.05) == [{"n": 1}]
        # A file arrives after the last listing; the next one is a minute away, but the source
        # is idle now: it must look before it ends.
        (tmp_path / "in" / "b.jsonl").write_text('\r\n{"n": 2}\r\n', encoding="utf-8")
        reader.last_data = time.time() - 1.0
        assert reader.poll(10, 0.05) == [{"n": 2}]
        assert not reader.exhausted
        reader.last_data = time.time() - 1.0
        assert reader.poll(10, 0.05) == []
        assert reader.exhausted
    finally:
        reader.close()


def test_a_followed_directory_reads_every_record_of_files_that_arrive_later(tmp_path):
    incoming = tmp_path / "in"
    incoming.mkdir()
    contents = {  # blank lines everywhere, CRLF, a file of nothing but blank lines, an empty file
        "1.jsonl": '\n\n{"n": 1}\r\n\r\n{"n": 2}\n',
        "2.jsonl": "\n \n\r\n\t\n",
        "3.jsonl": "",
        "4.jsonl": '{"n": 3}\n\n\n\n\n\n{"n": 4}',
    }

    def arrive():
        for name, text in contents.items():
            time.sleep(0.15)
            (incoming / f"_{name}").write_text(text, encoding="utf-8")
            os.replace(incoming / f"_{name}", incoming / name)  # complete when it appears

    import threading

    writer = threading.Thread(target=arrive)
    writer.start()
    try:
        source = DirectorySource(incoming, format="jsonl", follow=True, poll_interval=0.05,
                                 until_idle=2.0)
        result = run(tmp_path, lambda ctx: ctx.source(source, SizeTumblingWindow(1)).collect("o"))
    finally:
        writer.join()
    assert result.output("o") == [{"n": 1}, {"n": 2}, {"n": 3}, {"n": 4}]


def test_file_source_refuses_encodings_it_cannot_cut_into_lines(tmp_path):
    path = tmp_path / "wide.txt"
    path.write_text("a\nb\n", encoding="utf-16")
    for encoding, problem in [("utf-16", "cannot be read line by line"),
                              ("utf-32-le", "cannot be read line by line"),
                              ("no-such-codec", "unknown encoding")]:
        with pytest.raises(ConfigError, match=problem):
            FileSource(path, encoding=encoding)
    path.write_bytes("olá\rmañana\r\n\r\n".encode("cp1252"))
    result = run(tmp_path, lambda ctx: ctx.source(FileSource(path, encoding="cp1252"),
                                                  SizeTumblingWindow(1)).collect("o"))
    assert result.output("o") == ["olá\rmañana", ""]


@pytest.mark.parametrize("delimiter", ["||", "", '"', "\n", "\r"])
def test_a_delimiter_that_cannot_separate_cells_is_refused_where_it_is_built(tmp_path, delimiter):
    with pytest.raises(ConfigError, match="delimiter .* must be one character"):
        CsvSink(tmp_path / "out", delimiter=delimiter)
    with pytest.raises(ConfigError, match="delimiter .* must be one character"):
        DirectorySource(tmp_path, format="csv", delimiter=delimiter)
