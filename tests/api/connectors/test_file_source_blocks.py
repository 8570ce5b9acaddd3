"""FileSource reads its lines a block at a time: whatever the block size, the batch sizes, the
split and a resume from an offset, a task reads exactly the lines that start in its byte range, in
order, each without its ``\\n`` or ``\\r\\n`` ending (a ``\\r`` elsewhere, and at the end of a last
line without an ending, is data), as a plain-Python oracle cuts them out of the file's bytes; a line
that is not UTF-8 is named by its byte offsets as before."""

from __future__ import annotations

import gzip

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gyreflow.api import FileSource
from gyreflow.api.connectors import file_source
from gyreflow.runtime.errors import DataError


def oracle(data: bytes, start: int, stop: int) -> list[str]:
    """The lines of ``data`` that start at a byte offset in ``[start, stop)``, without endings."""
    out, pos = [], 0
    while pos < len(data):
        end = data.find(b"\n", pos)
        raw, after = (data[pos:], len(data)) if end < 0 else (data[pos:end], end + 1)
        if end >= 0 and raw.endswith(b"\r"):
            raw = raw[:-1]
        if start <= pos < stop:
            out.append(raw.decode("utf-8"))
        pos = after
    return out


PIECES = ["a", "bc", "é", "日本", "😀", " ", "\r", "\r\n", "\n", "\n", "\n\n"]


@given(pieces=st.lists(st.sampled_from(PIECES), max_size=40), parallelism=st.integers(1, 4),
       block=st.integers(1, 12), steps=st.lists(st.integers(1, 5), min_size=1, max_size=6),
       resume_after=st.integers(0, 4))
@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_block_reads_equal_the_lines_of_each_split(tmp_path, monkeypatch, pieces, parallelism,
                                                   block, steps, resume_after):
    check_reads(tmp_path, monkeypatch, pieces, parallelism, block, steps, resume_after)


# Mostly ASCII lines ending in "\n": a block's lines are decoded and cut at once, and such blocks
# alternate with blocks read the other way (a "\r", a non-ASCII line, a split's end, the last line).
ASCII_PIECES = ["a", "bc", " ", "\n", "\n", "word\n", "\n\n", "é", "\r\n"]


@given(pieces=st.lists(st.sampled_from(ASCII_PIECES), max_size=60), parallelism=st.integers(1, 3),
       block=st.integers(1, 40), steps=st.lists(st.integers(1, 7), min_size=1, max_size=6),
       resume_after=st.integers(0, 4))
@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_ascii_blocks_decoded_at_once_equal_the_lines_of_each_split(
        tmp_path, monkeypatch, pieces, parallelism, block, steps, resume_after):
    check_reads(tmp_path, monkeypatch, pieces, parallelism, block, steps, resume_after)


def check_reads(tmp_path, monkeypatch, pieces, parallelism, block, steps, resume_after):
    """Every task's reads, in batches of ``steps`` and resumed once from its offset, against the
    oracle's lines of its split."""
    monkeypatch.setattr(file_source._TextFileReader, "BLOCK", block)
    data = "".join(pieces).encode("utf-8")
    path = tmp_path / "lines.txt"
    path.write_bytes(data)
    source = FileSource(path)
    for task in range(parallelism):
        start = len(data) * task // parallelism
        stop = len(data) * (task + 1) // parallelism
        reader = source.create_reader(task, parallelism)
        got, calls = [], 0
        while True:
            step = steps[calls % len(steps)]
            batch = reader.read(step)
            calls += 1
            assert len(batch) <= step
            if not batch:
                break
            got.extend(batch)
            if calls == resume_after:  # a resumed task seeks a new reader to the offset
                offset = reader.offset()
                reader.close()
                reader = source.create_reader(task, parallelism)
                reader.seek(offset)
        reader.close()
        assert got == oracle(data, start if task else 0, stop)


def test_a_compressed_file_is_read_in_blocks_too(tmp_path, monkeypatch):
    monkeypatch.setattr(file_source._TextFileReader, "BLOCK", 5)
    data = "one\r\ntwo\n\nthree é\rfour\nlast\r".encode()
    path = tmp_path / "lines.txt.gz"
    path.write_bytes(gzip.compress(data))
    reader = FileSource(path).create_reader(0, 1)
    got = []
    while batch := reader.read(2):
        got.extend(batch)
    assert got == oracle(data, 0, len(data)) == ["one", "two", "", "three é\rfour", "last\r"]


@pytest.mark.parametrize("block", [4, 1 << 18])
def test_a_line_that_is_not_utf8_is_named_by_its_offsets(tmp_path, monkeypatch, block):
    monkeypatch.setattr(file_source._TextFileReader, "BLOCK", block)
    path = tmp_path / "bad.txt"
    path.write_bytes(b"ok\nfine\nbad \xff line\nafter\n")
    reader = FileSource(path).create_reader(0, 1)
    assert reader.read(2) == ["ok", "fine"]
    with pytest.raises(DataError) as failure:
        reader.read(10)
    assert str(failure.value) == (
        f"input file {path}: the line at byte offset 8 is not valid utf-8 "
        "(byte offset 12: invalid start byte)")
