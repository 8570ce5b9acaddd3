"""A file a DirectorySource was reading, cut short or replaced before ``--resume``: refused with one
line naming the file and the offset (exit status 5), in every format and mode, as FileSource does.

Oracle: the byte offset (or Parquet row group and row) after the records of the completed windows,
computed here from the file as written; the records themselves through the csv and json modules and
pyarrow. After the refusal the file is put back and the job resumed: its output is then every
record once, in order (nothing lost by the refusal).
"""

from __future__ import annotations

import gzip
import json
import os
import re
from pathlib import Path

import pytest
from _killed_directory_job import WINDOW, gyreflow_run, published

from gyreflow.api import DirectorySource, FileSink, SizeTumblingWindow
from gyreflow.api.connectors.column_formats import open_any_cursor
from gyreflow.api.connectors.file_formats import CsvOptions
from gyreflow.runtime.errors import DataError, UserFunctionError

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

RECORDS = 300
GROUP = 50  # Parquet rows per row group: windows end inside row groups
CUT = 40  # records left in a cut file
CASES = [("text", False), ("csv", False), ("csv", True), ("jsonl", False), ("jsonl", True),
         ("parquet", False), ("parquet", True)]


def write_input(folder: Path, fmt: str) -> Path:
    """The input file of ``RECORDS`` records ``(id, name)`` in ``fmt``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"data.{fmt if fmt != 'text' else 'txt'}"
    if fmt == "parquet":
        table = pa.table({"id": list(range(RECORDS)), "name": [f"n{i}" for i in range(RECORDS)]})
        pq.write_table(table, path, row_group_size=GROUP)
        return path
    lines = [f"{i},n{i}" if fmt != "jsonl" else json.dumps({"id": i, "name": f"n{i}"})
             for i in range(RECORDS)]
    header = "id,name\n" if fmt == "csv" else ""
    path.write_text(header + "".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def expected_records(path: Path, fmt: str) -> list:
    """What the job writes for the file, read by Python's modules and pyarrow."""
    if fmt == "parquet":
        return pq.read_table(path).to_pylist()
    import csv

    text = path.read_text(encoding="utf-8")
    if fmt == "text":
        return text.splitlines()
    if fmt == "csv":
        return list(csv.DictReader(text.splitlines()))
    return [json.loads(line) for line in text.splitlines()]


def offset_after(path: Path, fmt: str, records: int) -> str:
    """Where the job read the file up to after ``records`` records, as the error names it."""
    if fmt == "parquet":
        group, row = divmod(records, GROUP)
        return f"row group {group}, row {row}" if row else f"row group {group}"
    lines = path.read_bytes().split(b"\n")
    skipped = 1 if fmt == "csv" else 0  # the header
    return f"byte {sum(len(line) + 1 for line in lines[:records + skipped])}"


def cut(path: Path, fmt: str) -> str:
    """Cut the file to its first ``CUT`` records; what the error says it is now."""
    if fmt == "parquet":
        pq.write_table(pq.read_table(path).slice(0, CUT), path, row_group_size=GROUP)
        return "it now has 1 row group"
    lines = path.read_bytes().split(b"\n")
    kept = b"".join(line + b"\n" for line in lines[:CUT + (1 if fmt == "csv" else 0)])
    path.write_bytes(kept)
    return f"it now has {len(kept)} bytes"


class StopAt:
    """A map that raises at record ``150`` while ``flag`` exists (the job stops in window 8)."""

    def __init__(self, flag: str) -> None:
        self.flag = flag

    def __call__(self, record):
        ident = int(record.split(",")[0]) if isinstance(record, str) else int(record["id"])
        if ident == 150 and os.path.exists(self.flag):
            msg = "stopped on purpose"
            raise RuntimeError(msg)
        return record


@pytest.mark.parametrize(("fmt", "columnar"), CASES)
def test_a_file_cut_before_a_resume_is_refused_naming_it_and_the_offset(make_env, tmp_path, fmt,
                                                                        columnar):
    path = write_input(tmp_path / "in", fmt)
    original = path.read_bytes()
    expected = expected_records(path, fmt)
    flag = tmp_path / "stop"
    flag.touch()
    env = make_env(1, **{"state.backend": "rocksdb"})

    def run(**flags):
        pipeline = env.pipeline("cut")
        source = DirectorySource(tmp_path / "in", format=fmt, columnar=columnar)
        pipeline.task(lambda ctx: ctx.source(source, SizeTumblingWindow(WINDOW))
                      .map(StopAt(str(flag))).sink(FileSink(tmp_path / "out")), name="job")
        return pipeline.execute(**flags)

    with pytest.raises(UserFunctionError):
        run()
    flag.unlink()
    read = offset_after(path, fmt, 7 * WINDOW)  # windows 1-7 completed; window 8 failed
    now = cut(path, fmt)
    with pytest.raises(DataError) as caught:
        run(resume=True)
    message = str(caught.value)
    assert f"input file {path}: the job read it up to {read}, but {now}: it was cut or " \
           "replaced since" in message, message
    assert "\n" not in message and "Traceback" not in message
    assert published(tmp_path / "out") == expected[:7 * WINDOW]
    path.write_bytes(original)  # put back as it was: the resume goes on from window 8
    run(resume=True)
    assert published(tmp_path / "out") == expected


@pytest.mark.parametrize(("fmt", "columnar", "workers"), [
    ("text", False, "1"), ("csv", True, "2"), ("jsonl", True, "1"), ("parquet", False, "2")])
def test_a_job_killed_then_resumed_on_a_cut_file_stops_with_exit_5(tmp_path, fmt, columnar,
                                                                   workers):
    path = write_input(tmp_path / "in", fmt)
    original = path.read_bytes()
    expected = expected_records(path, fmt)
    # A commit may cover several windows: the kill came after window 3 or a later one.
    boundaries = [offset_after(path, fmt, w * WINDOW) for w in range(3, RECORDS // WINDOW + 1)]
    killed = gyreflow_run(tmp_path, fmt, columnar, workers, crash="after-commit:3")
    assert killed.returncode == -9, killed.stderr
    now = cut(path, fmt)
    done = gyreflow_run(tmp_path, fmt, columnar, workers, "--resume")
    assert done.returncode == 5, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr
    found = re.search(rf"input file {re.escape(str(path))}: the job read it up to (.+?), but "
                      rf"{now}: it was cut or replaced since", errors[0])
    assert found is not None, errors[0]
    assert found.group(1) in boundaries, (found.group(1), boundaries)
    path.write_bytes(original)
    done = gyreflow_run(tmp_path, fmt, columnar, workers, "--resume")
    assert done.returncode == 0, done.stderr
    assert published(tmp_path / "out") == expected


# Cursors: the other ways a file changes -----------------------------------------------------------


def resumed_cursor(path: Path, fmt: str, position, columnar: bool = False):
    return open_any_cursor(str(path), fmt, CsvOptions(), None, position, columnar)


@pytest.mark.parametrize("columnar", [False, True])
def test_a_gz_file_replaced_by_a_shorter_or_cut_one_is_refused(tmp_path, columnar):
    path = tmp_path / "data.jsonl.gz"
    data = b"".join(json.dumps({"i": i}).encode() + b"\n" for i in range(100))
    path.write_bytes(gzip.compress(data))
    position = (len(data) // 2, 50)
    path.write_bytes(gzip.compress(data[:100]))
    with pytest.raises(DataError, match=rf"input file {re.escape(str(path))}: the job read it up "
                                        rf"to byte {position[0]} of its uncompressed data, but "
                                        r"it now has 100 bytes: it was cut or replaced since"):
        resumed_cursor(path, "jsonl", position, columnar)
    path.write_bytes(gzip.compress(data)[:40])  # the compressed stream itself cut short
    with pytest.raises(DataError, match=rf"up to byte {position[0]} of its uncompressed data, but "
                                        "it cannot be read that far now"):
        resumed_cursor(path, "jsonl", position, columnar)


@pytest.mark.parametrize("columnar", [False, True])
def test_a_csv_file_cut_inside_its_quoted_header_is_refused_as_cut(tmp_path, columnar):
    path = tmp_path / "data.csv"
    data = b'"id","a long name"\n' + b"".join(b"%d,x\n" % i for i in range(50))
    path.write_bytes(data[:8])  # inside the header's second quoted cell
    with pytest.raises(DataError, match=f"up to byte {len(data) - 10}, but it now has 8 bytes"):
        resumed_cursor(path, "csv", (len(data) - 10, 45), columnar)


@pytest.mark.parametrize("columnar", [False, True])
def test_parquet_with_fewer_rows_in_the_current_group_or_no_parquet_at_all_is_refused(
        tmp_path, columnar):
    path = tmp_path / "data.parquet"
    pq.write_table(pa.table({"i": list(range(120))}), path, row_group_size=50)
    pq.write_table(pa.table({"i": list(range(110))}), path, row_group_size=50)
    with pytest.raises(DataError, match=r"up to row group 2, row 15, but row group 2 now has "
                                        r"10 rows: it was cut or replaced"):
        resumed_cursor(path, "parquet", (2, 15), columnar)
    cursor = resumed_cursor(path, "parquet", (3, 0), columnar)  # every group read: not refused
    assert cursor.read(10) == []
    cursor.close()
    with pytest.raises(DataError, match=r"up to row group 4, but it now has 3 row groups"):
        resumed_cursor(path, "parquet", (4, 0), columnar)
    with pytest.raises(DataError, match=r"up to row group 3, row 5, but it now has 3 row groups"):
        resumed_cursor(path, "parquet", (3, 5), columnar)
    path.write_bytes(path.read_bytes()[:30])  # cut: no footer
    with pytest.raises(DataError, match=r"up to row group 1, row 3, but it is no Parquet file "
                                        r"now \("):
        resumed_cursor(path, "parquet", (1, 3), columnar)


@pytest.mark.parametrize(("fmt", "columnar"), [c for c in CASES if c[0] != "parquet"])
def test_a_file_cut_at_the_offset_or_grown_since_reads_on(tmp_path, fmt, columnar):
    path = write_input(tmp_path, fmt)
    records = expected_records(path, fmt)
    offset = int(offset_after(path, fmt, CUT).split()[-1])
    data = path.read_bytes()
    header = 1 if fmt == "csv" else 0
    path.write_bytes(data[:offset])  # exactly what the job had read: nothing more to read
    cursor = resumed_cursor(path, fmt, (offset, CUT + header), columnar)
    assert cursor.read(10) == []
    cursor.close()
    path.write_bytes(data)  # grown since: the records after the offset are read
    cursor = resumed_cursor(path, fmt, (offset, CUT + header), columnar)
    rows = []
    while batch := cursor.read(1000):
        rows += [row for item in batch
                 for row in (item.rows() if hasattr(item, "rows") else [item])]
    cursor.close()
    assert rows == records[CUT:]
