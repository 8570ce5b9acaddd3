"""A DirectorySource's current file, replaced after a SIGKILL and before ``--resume`` by a file at
least as long that differs in what the job read: a real ``gyreflow run`` stops with one line naming
the file and the offset (exit 5), in every format and mode; put back, the job resumes and its
output is every record once. A file appended to (more lines; more row groups of Parquet) resumes,
its new records read once.

Oracle: the records as the csv and json modules, ``str.splitlines`` and pyarrow read them from the
files written here; the offsets a refusal may name are computed from the bytes (or row groups)
written."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest
from _killed_directory_job import WINDOW, gyreflow_run, published

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

pytestmark = pytest.mark.processes

RECORDS = 300
MORE = 90  # records appended
GROUP = 50  # Parquet rows per row group: windows end inside row groups


def rows(first: int, count: int, name: str = "n") -> list[tuple[int, str]]:
    return [(i, f"{name}{i}") for i in range(first, first + count)]


def line_bytes(fmt: str, records: list[tuple[int, str]], header: bool = True) -> bytes:
    if fmt == "jsonl":
        return "".join(json.dumps({"id": i, "name": n}) + "\n" for i, n in records).encode()
    head = "id,name\n" if fmt == "csv" and header else ""
    return (head + "".join(f"{i},{n}\n" for i, n in records)).encode()


def write_parquet(path: Path, *parts: list[tuple[int, str]]) -> None:
    """Row groups of ``GROUP`` rows per part, each written on its own (more parts: the same first
    row groups, byte for byte)."""
    schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
    with pq.ParquetWriter(path, schema) as writer:
        for records in parts:
            for start in range(0, len(records), GROUP):
                group = records[start:start + GROUP]
                writer.write_table(pa.table({"id": [i for i, _ in group],
                                             "name": [n for _, n in group]}, schema=schema))


def write_input(folder: Path, fmt: str, *parts: list[tuple[int, str]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"data.{fmt if fmt != 'text' else 'txt'}"
    if fmt == "parquet":
        write_parquet(path, *parts)
    else:
        path.write_bytes(b"".join(line_bytes(fmt, part, header=index == 0)
                                  for index, part in enumerate(parts)))
    return path


def expected_records(path: Path, fmt: str) -> list:
    if fmt == "parquet":
        return pq.read_table(path).to_pylist()
    text = path.read_text(encoding="utf-8")
    if fmt == "text":
        return text.splitlines()
    if fmt == "csv":
        return list(csv.DictReader(io.StringIO(text, newline="")))
    return [json.loads(line) for line in text.splitlines()]


def boundaries(path: Path, fmt: str) -> list[str]:
    """Where the job may have read the file up to at a kill after window 3, as a refusal names it."""
    found = []
    for records in range(3 * WINDOW, RECORDS, WINDOW):
        if fmt == "parquet":
            group, row = divmod(records, GROUP)
            found.append(f"row group {group}, row {row}" if row else f"row group {group}")
        else:
            lines = path.read_bytes().split(b"\n")
            skipped = 1 if fmt == "csv" else 0
            found.append(f"byte {sum(len(line) + 1 for line in lines[:records + skipped])}")
    return found


@pytest.mark.parametrize(("fmt", "columnar", "workers"), [
    ("text", False, "1"), ("csv", False, "2"), ("csv", True, "1"), ("jsonl", False, "1"),
    ("jsonl", True, "2"), ("parquet", False, "1"), ("parquet", True, "2")])
def test_a_current_file_replaced_by_one_as_long_is_refused_naming_it_and_the_offset(
        tmp_path, fmt, columnar, workers):
    path = write_input(tmp_path / "in", fmt, rows(0, RECORDS))
    original = path.read_bytes()
    expected = expected_records(path, fmt)
    places = boundaries(path, fmt)
    killed = gyreflow_run(tmp_path, fmt, columnar, workers, crash="after-commit:3")
    assert killed.returncode == -9, killed.stderr
    # Another file of the same records, one name in the first row (row group) changed: as long.
    other = rows(0, RECORDS)
    other[1] = (1, "m1")
    write_input(tmp_path / "in", fmt, other)
    assert len(path.read_bytes()) >= len(original) or fmt == "parquet"

    done = gyreflow_run(tmp_path, fmt, columnar, workers, "--resume")

    assert done.returncode == 5, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    [error] = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    found = re.search(rf"input file {re.escape(str(path))}: the job read it up to (.+?), but "
                      r"its (bytes|row groups) up to there are not the ones it read: it was cut "
                      r"or replaced since", error)
    assert found is not None, error
    assert found.group(1) in places, (found.group(1), places)
    assert published(tmp_path / "out") == expected[:len(published(tmp_path / "out"))]
    path.write_bytes(original)
    done = gyreflow_run(tmp_path, fmt, columnar, workers, "--resume")
    assert done.returncode == 0, done.stderr
    assert published(tmp_path / "out") == expected


@pytest.mark.parametrize(("fmt", "columnar"), [("csv", False), ("jsonl", True), ("parquet", False)])
def test_a_current_file_appended_to_resumes_with_every_record_once(tmp_path, fmt, columnar):
    path = write_input(tmp_path / "in", fmt, rows(0, RECORDS))
    killed = gyreflow_run(tmp_path, fmt, columnar, "1", crash="after-commit:4")
    assert killed.returncode == -9, killed.stderr
    write_input(tmp_path / "in", fmt, rows(0, RECORDS), rows(RECORDS, MORE))
    done = gyreflow_run(tmp_path, fmt, columnar, "1", "--resume")
    assert done.returncode == 0, done.stderr
    expected = expected_records(path, fmt)
    assert len(expected) == RECORDS + MORE
    assert published(tmp_path / "out") == expected
