"""Bad input read as columns (``DirectorySource(..., columnar=True)``) and dead-letter folders
that cannot be written.

Oracle for bytes: a plain ``raw.decode("utf-8")`` of each line decides which lines are bad.
Properties: random bytes, valid UTF-8 or not, placed in the string values of otherwise good JSON
lines and in CSV cells are reported by line as not UTF-8, in any read size and across resumes,
and every other line is read as ``json.loads`` (or the csv module) reads it. Real processes: a
line that is not UTF-8 stops the job naming the file and the line (exit 5) or goes to dead
letters; a dead-letter folder that cannot be written is refused before any data moves (exit 2).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from _cli_runs import clean_environ
from _permissions import without_write_permission
from hypothesis import given, settings
from hypothesis import strategies as st

from gyreflow.api import ConfigError, DirectorySource
from gyreflow.api.connectors.column_formats import open_any_cursor
from gyreflow.api.connectors.file_formats import CsvOptions, MalformedRecordError
from gyreflow.runtime.dataflow.columns.batch import ColumnBatch
from gyreflow.runtime.errors import DataError

pa = pytest.importorskip("pyarrow")

ROOT = Path(__file__).resolve().parents[3]
EVENT_TIME = ROOT / "examples" / "event_time.py"


def value_bytes(data: bytes, forbidden: bytes) -> bytes:
    """``data`` without control bytes (JSON and CSV lines keep none raw) and ``forbidden``."""
    return bytes(b for b in data if b >= 0x20 and b not in forbidden)


def pieces(forbidden: bytes):
    """Byte strings for a value: UTF-8 text (multi-byte characters included), random bytes (most
    of them no UTF-8: lone continuation bytes, cut sequences, surrogates, overlong forms) and
    sequences chosen to be almost UTF-8."""
    text = st.text(st.characters(exclude_categories=("Cs", "Cc")), max_size=6).map(
        lambda t: value_bytes(t.encode("utf-8"), forbidden))
    near = st.sampled_from([b"\xc3\xa9", b"\xe2\x98\x83", b"\xf0\x9f\x98\x80", b"\xc3",
                            b"\xe2\x98", b"\xed\xa0\x80", b"\xc0\xaf", b"\xf4\x90\x80\x80",
                            b"\xff", b"\x80"])
    raw = st.binary(max_size=4).map(lambda b: value_bytes(b, forbidden))
    return st.lists(st.one_of(text, near, raw), max_size=4).map(b"".join)


def is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def read_columns(path: Path, fmt: str, sizes: list[int], resume_every: int):
    """Rows, and ``(line, reason)`` of every malformed record, read through a columnar cursor
    ``sizes`` records at a time and reopened from its position every ``resume_every`` reads."""
    rows, bad, reads = [], [], 0
    cursor = open_any_cursor(str(path), fmt, CsvOptions(), None, None, columnar=True)
    while out := cursor.read(sizes[reads % len(sizes)]):
        reads += 1
        for item in out:
            if isinstance(item, MalformedRecordError):
                bad.append((int(item.where.split()[-1]), item.reason))
            else:
                assert type(item) is ColumnBatch
                rows += item.rows()
        if reads % resume_every == 0:
            position = cursor.position
            cursor.close()
            cursor = open_any_cursor(str(path), fmt, CsvOptions(), None, position, columnar=True)
    cursor.close()
    return rows, bad


@settings(max_examples=80)
@given(values=st.lists(pieces(b'"\\'), max_size=30),
       sizes=st.lists(st.integers(1, 13), min_size=1, max_size=3), resume_every=st.integers(1, 4))
def test_json_lines_whose_strings_are_not_utf8_are_reported_by_line(tmp_path_factory, values,
                                                                    sizes, resume_every):
    lines = [b'{"n": %d, "s": "%s"}' % (number, value) for number, value in enumerate(values)]
    path = tmp_path_factory.mktemp("jsonl") / "data.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    rows, bad = read_columns(path, "jsonl", sizes, resume_every)
    assert rows == [json.loads(line) for line in lines if is_utf8(line)]
    assert [number for number, _ in bad] == [
        number for number, line in enumerate(lines, 1) if not is_utf8(line)]
    assert all(reason.startswith("not valid UTF-8") for _, reason in bad)


@settings(max_examples=80)
@given(rows=st.lists(st.tuples(pieces(b'",\r\n'), st.sampled_from([0, 1, 2])), max_size=30),
       sizes=st.lists(st.integers(1, 13), min_size=1, max_size=3), resume_every=st.integers(1, 4))
def test_csv_cells_that_are_not_utf8_are_reported_by_line(tmp_path_factory, rows, sizes,
                                                          resume_every):
    # A row of 1, 2 or 3 cells under a header of 2: a row that is not UTF-8 is named as such
    # before its number of cells, as the row reader names it.
    lines = [b",".join([cell, b"%d" % number, b"x"][:width + 1])
             for number, (cell, width) in enumerate(rows)]
    path = tmp_path_factory.mktemp("csv") / "data.csv"
    path.write_bytes(b"word,n\n" + b"".join(line + b"\n" for line in lines))
    read, bad = read_columns(path, "csv", sizes, resume_every)
    expected_bad = [(number, "utf-8" if not is_utf8(line) else "cells")
                    for number, line in enumerate(lines, 2)
                    if line and (not is_utf8(line) or line.count(b",") != 1)]
    assert [(n, "utf-8" if r.startswith("not valid UTF-8") else "cells") for n, r in bad] == \
        expected_bad
    assert read == [dict(zip(["word", "n"], line.decode("utf-8").split(","), strict=True))
                    for line in lines if is_utf8(line) and line.count(b",") == 1]


def test_an_integer_beyond_64_bits_beside_a_line_that_is_not_utf8_is_refused(tmp_path):
    path = tmp_path / "big.jsonl"
    path.write_bytes(b'{"a": 1.5}\n{"a": "\xff"}\n{"a": 123456789012345678901234567890}\n')
    with pytest.raises(DataError, match=r"big\.jsonl, line 3: an integer beyond 64 bits"):
        read_columns(path, "jsonl", [10], 100)


# Real processes ---------------------------------------------------------------------------------

JOB = """\
import sys
from gyreflow.api import DirectorySource, Environment

letters = sys.argv[1] if len(sys.argv) > 1 else None
pipeline = Environment.from_config().pipeline("bad-input")

@pipeline.task
def job(ctx):
    source = DirectorySource("in", "*.jsonl", format="jsonl", columnar=True, dead_letters=letters)
    ctx.source(source).key_by("key").count().collect("counts")

print(sorted(pipeline.execute()["job"].output("counts")))
"""

# Good lines of keys a, b, a between two lines whose strings are no UTF-8.
NOT_UTF8 = b'{"key": "a"}\n{"key": "\xffb"}\n{"key": "b"}\n{"key": "a\xc3"}\n{"key": "a"}\n'
NOT_UTF8_LINES = [2, 4]


def run_job(folder: Path, *args: str, prefix: tuple[str, ...] = ()):
    env = clean_environ()
    env.update({"GYREFLOW_ENVIRONMENT__TYPE": "local", "GYREFLOW_STATE__BACKEND": "memory"})
    return subprocess.run([*prefix, sys.executable, "-m", "gyreflow", "run", "--quiet", *args],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=300,
                          check=False)


def one_error(done) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr
    return errors[0]


def job_folder(tmp_path: Path, data: bytes) -> Path:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "data.jsonl").write_bytes(data)
    (tmp_path / "job.py").write_text(JOB, encoding="utf-8")
    return tmp_path


def test_a_line_that_is_not_utf8_stops_the_job_naming_the_file_and_line(tmp_path):
    folder = job_folder(tmp_path, NOT_UTF8)
    done = run_job(folder, "job.py")
    assert done.returncode == 5, done.stderr
    error = one_error(done)
    assert f"input file {folder / 'in' / 'data.jsonl'}, line 2: not valid UTF-8" in error, error
    assert "__gyreflow" not in done.stderr, done.stderr


def test_lines_that_are_not_utf8_go_to_dead_letters(tmp_path):
    folder = job_folder(tmp_path, NOT_UTF8)
    done = run_job(folder, "job.py", "dead")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[('a', 2), ('b', 1)]"
    letters = [json.loads(line) for path in sorted((folder / "dead").glob("*.jsonl"))
               for line in path.read_text(encoding="utf-8").splitlines()]
    lines = NOT_UTF8.split(b"\n")
    assert [(letter["file"], letter["where"], letter["text"]) for letter in letters] == [
        ("data.jsonl", f"line {number}", lines[number - 1].decode("utf-8", "replace"))
        for number in NOT_UTF8_LINES]
    assert all(letter["error"].startswith("not valid UTF-8") for letter in letters)


def test_the_event_time_example_names_a_line_that_is_not_utf8(tmp_path):
    data = tmp_path / "events.jsonl"
    data.write_bytes(b'{"ts": 1, "key": "a", "value": 1}\n{"ts": 2, "key": "b\xff", "value": 2}\n')
    done = run_job(tmp_path, str(EVENT_TIME), "--", "--input", str(data), "--window",
                   "tumbling:60", "--output", str(tmp_path / "out"))
    assert done.returncode == 5, done.stderr
    error = one_error(done)
    assert f"input file {data}, line 2: not valid UTF-8" in error, error
    assert "__gyreflow" not in done.stderr, done.stderr


@pytest.mark.parametrize("case", ["read-only parent", "parent is a file", "is a file"])
def test_a_dead_letter_folder_that_cannot_be_written_is_refused_before_any_data_moves(
        tmp_path, case):
    folder = job_folder(tmp_path, b'{"key": "a"}\n{broken\n')  # a record for dead letters
    prefix: tuple[str, ...] = ()
    if case == "read-only parent":
        (folder / "locked").mkdir(mode=0o555)
        letters, expected = "locked/dead", f"no write permission on '{folder / 'locked'}'"
        prefix = without_write_permission()
    elif case == "parent is a file":
        (folder / "notes").write_text("", encoding="utf-8")
        letters, expected = "notes/dead", f"cannot be created: '{folder / 'notes'}' is a file"
    else:
        (folder / "dead").write_text("", encoding="utf-8")
        letters, expected = "dead", "exists and is not a directory"
    try:
        done = run_job(folder, "job.py", letters, prefix=prefix)
    finally:
        if case == "read-only parent":
            (folder / "locked").chmod(0o755)
    assert done.returncode == 2, done.stderr
    error = one_error(done)
    assert f"DirectorySource: dead_letters '{folder / letters}'" in error, error
    assert expected in error, error
    assert done.stdout.strip() == "", done.stdout  # the job never ran
    assert not (folder / "locked" / "dead").exists()


def test_a_dead_letter_folder_under_a_file_is_refused_where_the_source_is_built(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "notes").write_text("", encoding="utf-8")
    with pytest.raises(ConfigError, match="dead_letters .* cannot be created: .*notes' is a file"):
        DirectorySource(tmp_path / "in", format="jsonl", dead_letters=tmp_path / "notes" / "dead")
