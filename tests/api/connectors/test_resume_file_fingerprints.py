"""A source's stored offset carries a fingerprint of the file it read: a reader resumed from it
refuses a file replaced since by one at least as long (as it refuses a shorter one), naming the
file and the offset, and reads on in a file that was only appended to; offsets stored without a
fingerprint are taken as they are.

Every format and mode of FileSource and DirectorySource: text (plain and .gz, one or two tasks),
JSON lines, CSV (rows and columns) and Parquet (rows and columns). Oracle: the records as Python's
json and csv modules, ``str.split`` and pyarrow read them from the files written here; the offset
a refusal names is computed from the bytes written (or the row groups and rows)."""

from __future__ import annotations

import csv
import gzip
import io
import json
import pickle
import re
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gyreflow.api import DirectorySource, FileSource
from gyreflow.api.connectors.file_fingerprints import PREFIX_BYTES, TAIL_BYTES
from gyreflow.runtime.dataflow.columns.batch import ColumnBatch
from gyreflow.runtime.errors import DataError

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

PROPERTY = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
WORDS = st.text(alphabet="abcdefgh", min_size=1, max_size=12)
CASES = [("text", False), ("jsonl", False), ("jsonl", True), ("csv", False), ("csv", True),
         ("parquet", False), ("parquet", True)]


def as_records(batch) -> list:
    """A reader's batch as a list of records (column batches as dicts)."""
    if type(batch) is ColumnBatch:
        return batch.rows()
    return list(batch)


def read_rest(reader, step: int = 7) -> list:
    out: list = []
    while True:
        batch = as_records(reader.read(step))
        out += batch
        if len(batch) < step:
            return out


# Line files: the bytes of the records -------------------------------------------------------------


def line_bytes(fmt: str, records: list[tuple[int, str]]) -> bytes:
    """The file of ``records`` in a line format (CSV with its header)."""
    if fmt == "text":
        text = "".join(f"{i} {word}\n" for i, word in records)
    elif fmt == "jsonl":
        text = "".join(json.dumps({"id": i, "word": word}) + "\n" for i, word in records)
    else:
        buffer = io.StringIO(newline="")
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(["id", "word"])
        writer.writerows(records)
        text = buffer.getvalue()
    return text.encode("utf-8")


def expected_records(fmt: str, data: bytes) -> list:
    """What a reader returns for ``data``, read by Python's own modules."""
    text = data.decode("utf-8")
    if fmt == "text":
        return text.splitlines()
    if fmt == "jsonl":
        return [json.loads(line) for line in text.splitlines()]
    return list(csv.DictReader(io.StringIO(text, newline="")))


def offset_of(fmt: str, data: bytes, records: int) -> int:
    """The byte offset after the first ``records`` records (and the CSV header)."""
    lines = data.split(b"\n")
    return sum(len(line) + 1 for line in lines[:records + (1 if fmt == "csv" else 0)])


def sampled_byte(offset: int, pick: int) -> int:
    """A byte the fingerprint of ``offset`` covers: in the file's first PREFIX_BYTES or among the
    TAIL_BYTES before the offset."""
    covered = sorted(set(range(min(PREFIX_BYTES, offset))) | set(range(max(0, offset - TAIL_BYTES),
                                                                       offset)))
    return covered[pick % len(covered)]


def changed(data: bytes, at: int) -> bytes:
    """``data`` with the byte at ``at`` replaced by another one (the same length)."""
    return data[:at] + (b"A" if data[at:at + 1] != b"A" else b"B") + data[at + 1:]


def directory_reader(folder: Path, fmt: str, columnar: bool):
    return DirectorySource(folder, format=fmt, columnar=columnar).create_reader(0, 1)


# Parquet: row groups ------------------------------------------------------------------------------


def write_parquet(path: Path, *parts: list[tuple[int, str]], group: int) -> None:
    """Each of ``parts`` as Parquet row groups of ``group`` rows, each group written on its own:
    a file of more parts has the same first row groups, byte for byte (rows appended to a
    Parquet file are further row groups)."""
    schema = pa.schema([("id", pa.int64()), ("word", pa.string())])
    with pq.ParquetWriter(path, schema) as writer:
        for records in parts:
            for start in range(0, len(records), group):
                rows = records[start:start + group]
                writer.write_table(pa.table({"id": [i for i, _ in rows],
                                             "word": [w for _, w in rows]}, schema=schema))


def parquet_position(records: int, group: int) -> str:
    """Where the reader stands after ``records`` rows, as a refusal names it."""
    number, row = divmod(records, group)
    return f"row group {number}, row {row}" if row else f"row group {number}"


# The properties ----------------------------------------------------------------------------------


@PROPERTY
@given(words=st.lists(WORDS, min_size=2, max_size=120), more=st.lists(WORDS, min_size=1,
                                                                       max_size=40),
       case=st.sampled_from(CASES), cut=st.integers(1, 200), group=st.integers(1, 30),
       compressed=st.booleans(), pick=st.integers(0, 10**6))
def test_a_directory_file_appended_to_resumes_and_one_replaced_is_refused(words, more, case, cut,
                                                                           group, compressed,
                                                                           pick):
    fmt, columnar = case
    compressed = compressed and fmt != "parquet"

    def stored(data: bytes) -> bytes:  # a .gz file, or a further gzip member of one
        return gzip.compress(data, mtime=0) if compressed else data

    records = list(enumerate(words))
    extra = [(len(words) + i, word) for i, word in enumerate(more)]
    cut = min(cut, len(records) - 1)
    with tempfile.TemporaryDirectory(prefix="gyreflow-fingerprints-") as name:
        folder = Path(name)
        path = folder / (f"data.{fmt}" + (".gz" if compressed else ""))
        if fmt == "parquet":
            write_parquet(path, records, group=group)
            expected = pq.read_table(path).to_pylist()
        else:
            data = line_bytes(fmt, records)
            path.write_bytes(stored(data))
            expected = expected_records(fmt, data)
        reader = directory_reader(folder, fmt, columnar)
        head = as_records(reader.read(cut))
        offset = pickle.loads(pickle.dumps(reader.offset()))  # snapshots pickle the offset
        reader.close()
        assert head == expected[:cut]

        # Appended to: read on from the offset, every further record once.
        if fmt == "parquet":
            write_parquet(path, records, extra, group=group)
            grown = pq.read_table(path).to_pylist()
        else:
            added = line_bytes(fmt, extra).removeprefix(b"id,word\n")
            path.write_bytes(path.read_bytes() + stored(added))
            grown = expected_records(fmt, data + added)
        resumed = directory_reader(folder, fmt, columnar)
        resumed.seek(offset)
        assert head + read_rest(resumed) == grown
        resumed.close()

        # An offset stored before fingerprints: the position alone, taken as it is.
        old = {key: value for key, value in offset.items() if key != "check"}
        resumed = directory_reader(folder, fmt, columnar)
        resumed.seek(old)
        assert head + read_rest(resumed) == grown
        resumed.close()

        # Replaced by a file as long or longer that differs in what the job read.
        if fmt == "parquet":
            victim = (pick % cut) if cut else 0
            swapped = [(i, word[:-1] + ("b" if word[-1] != "b" else "c")) if i == victim
                       else (i, word) for i, word in records + extra]
            write_parquet(path, swapped, group=group)
            where = parquet_position(cut, group)
        else:
            at = offset_of(fmt, data, cut)
            path.write_bytes(stored(changed(data, sampled_byte(at, pick)) + b"\n"))
            where = f"byte {at}" + (" of its uncompressed data" if compressed else "")
        resumed = directory_reader(folder, fmt, columnar)
        with pytest.raises(DataError) as refused:
            resumed.seek(offset)
        resumed.close()
    message = str(refused.value)
    assert message.startswith(f"input file {path}: the job read it up to {where}, but "), message
    assert "it was cut or replaced since" in message
    assert "\n" not in message


@PROPERTY
@given(words=st.lists(WORDS, min_size=2, max_size=150), more=st.lists(WORDS, min_size=1,
                                                                       max_size=40),
       compressed=st.booleans(), two_tasks=st.booleans(), cuts=st.tuples(st.integers(0, 100),
                                                                           st.integers(0, 100)),
       pick=st.integers(0, 10**6))
def test_a_file_source_appended_to_resumes_and_one_replaced_is_refused(words, more, compressed,
                                                                       two_tasks, cuts, pick):
    tasks = 2 if two_tasks and not compressed else 1  # a .gz file is read by one task
    records = list(enumerate(words))
    data = line_bytes("text", records)
    appended = line_bytes("text", [(len(words) + i, w) for i, w in enumerate(more)])
    with tempfile.TemporaryDirectory(prefix="gyreflow-fingerprints-") as name:
        path = Path(name) / ("in.txt.gz" if compressed else "in.txt")
        path.write_bytes(gzip.compress(data, mtime=0) if compressed else data)
        source = FileSource(path)
        heads, offsets = [], []
        for task in range(tasks):
            reader = source.create_reader(task, tasks)
            heads.append(reader.read(cuts[task]))
            offsets.append(pickle.loads(pickle.dumps(reader.offset())))
            reader.close()

        # Appended to (a .gz file: a further gzip member): every line once, the new ones too.
        path.write_bytes(path.read_bytes() + (gzip.compress(appended, mtime=0) if compressed
                                              else appended))
        every = []
        for task in range(tasks):
            resumed = source.create_reader(task, tasks)
            resumed.seek(offsets[task])
            every += heads[task] + read_rest(resumed)
            resumed.close()
        assert sorted(every) == sorted((data + appended).decode().splitlines())

        # An offset stored before fingerprints (the byte position alone) is taken as it is.
        if tasks == 1:
            resumed = source.create_reader(0, 1)
            resumed.seek(offsets[0]["at"])
            assert heads[0] + read_rest(resumed) == (data + appended).decode().splitlines()
            resumed.close()

        # Replaced: a byte the job read differs, the file as long or longer.
        task = max(range(tasks), key=lambda t: offsets[t]["at"])
        at = offsets[task]["at"]
        if at == 0:
            return  # nothing was read: any file is the one it read
        replaced = changed(data, sampled_byte(at, pick)) + appended
        path.write_bytes(gzip.compress(replaced, mtime=0) if compressed else replaced)
        resumed = source.create_reader(task, tasks)
        with pytest.raises(DataError) as refused:
            resumed.seek(offsets[task])
        resumed.close()
    where = f"byte {at} of its uncompressed data" if compressed else f"byte {at}"
    message = str(refused.value)
    assert message.startswith(f"input file {path}: the job read it up to {where}, but its "), message
    assert "it was cut or replaced since" in message


def test_a_refusal_names_the_file_and_offset_in_one_line(tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes(b"alpha\nbeta\ngamma\n")
    reader = FileSource(path).create_reader(0, 1)
    assert reader.read(2) == ["alpha", "beta"]
    offset = reader.offset()
    reader.close()
    path.write_bytes(b"alpha\nbetA\ngamma\n")
    resumed = FileSource(path).create_reader(0, 1)
    with pytest.raises(DataError, match=re.escape(
            f"input file {path}: the job read it up to byte 11, but its bytes up to there are "
            "not the ones it read: it was cut or replaced since; put the file back as it was to "
            "resume, or start over with --fresh")):
        resumed.seek(offset)
    resumed.close()
