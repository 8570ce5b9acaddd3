"""A FileSink's staged window carries its summary (window, records, bytes, CRC-32) as an extended
attribute of the staged file: one file created a window, not two. Where the file system has no
attributes, and for windows staged by earlier versions, a ``.sum`` file beside it holds it; either
way a resume publishes a staged window only if it matches its summary, and published output carries
no attribute. Oracles: the bytes written, ``zlib.crc32`` and ``json.dumps`` of the records."""

from __future__ import annotations

import json
import os
import zlib

import pytest

from gyreflow.api import FileSink
from gyreflow.api.connectors import file_sink
from gyreflow.state.shared.snapshot import SnapshotCorruptedError

RECORDS = [{"word": "a", "count": 1}, {"word": "é", "count": 2}]
ATTRIBUTE = "user.gyreflow.summary"


def expected_bytes() -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in RECORDS).encode()


def stage(directory, window: int = 1):
    writer = FileSink(str(directory)).create_writer(0, 1)
    writer.write(window, RECORDS)
    writer.finish_window(window)
    (staged,) = [p for p in (directory / ".staging").iterdir() if not p.name.endswith(".sum")]
    return writer, staged


def has_attributes(path) -> bool:
    try:
        os.getxattr(path, ATTRIBUTE)
    except OSError:
        return False
    return True


def require_attributes(directory) -> None:
    """Skip where the file system under ``directory`` keeps no extended attributes, found by
    setting one on a file of its own (not by the sink's output, whose missing attribute is what
    the tests check)."""
    probe = directory / "attribute-probe"
    probe.write_bytes(b"")
    try:
        os.setxattr(probe, ATTRIBUTE, b"1")
    except OSError:
        pytest.skip("the file system of the test's folder keeps no extended attributes "
                    "(the .sum fallback is tested below)")
    finally:
        probe.unlink()


def test_a_staged_window_carries_its_summary_and_its_published_file_none(tmp_path):
    require_attributes(tmp_path)
    writer, staged = stage(tmp_path)
    assert has_attributes(staged)
    data = expected_bytes()
    assert staged.read_bytes() == data
    assert json.loads(os.getxattr(staged, ATTRIBUTE)) == [
        1, len(RECORDS), len(data), zlib.crc32(data)]  # window, records, bytes, CRC-32
    assert sorted(p.name for p in (tmp_path / ".staging").iterdir()) == [staged.name]  # no .sum
    writer.publish(1)
    published = tmp_path / "window-000001.jsonl"
    assert published.read_bytes() == data
    assert not has_attributes(published)
    writer.close()  # a writer that stages windows keeps its staging folder until it closes
    assert not (tmp_path / ".staging").exists()


def test_the_summary_fits_in_the_inode_of_the_staged_file(tmp_path):
    """ext4's 256-byte inodes keep 92 bytes of extended attributes in the inode: an entry's
    16-byte header, its name without ``user.`` (rounded up to 4 bytes), its value (rounded up to
    4) and a 4-byte end mark. A longer summary goes to a block of its own, which removing the
    attribute from the published file frees again (1-3 ms of waiting a window on a file system
    mounted with discard)."""
    require_attributes(tmp_path)
    writer, staged = stage(tmp_path, window=123_456)
    assert has_attributes(staged)
    name = len(ATTRIBUTE.removeprefix("user."))
    value = len(os.getxattr(staged, ATTRIBUTE))
    assert 16 + -(-name // 4) * 4 + -(-value // 4) * 4 + 4 <= 92
    writer.close()


@pytest.mark.parametrize("damaged", [False, True])
def test_a_summary_in_a_sum_file_is_checked_on_resume(tmp_path, monkeypatch, damaged):
    """No attributes (the file system has none, or an earlier version staged the window): the
    summary is the ``.sum`` file, and a resume publishes the window only if it matches."""
    monkeypatch.setattr(file_sink, "_attach_summary", lambda fd, summary: False)
    _, staged = stage(tmp_path)
    assert not has_attributes(staged)
    summary = json.loads(staged.with_name(staged.name + ".sum").read_text(encoding="utf-8"))
    assert summary["crc32"] == zlib.crc32(expected_bytes())
    if damaged:
        staged.write_bytes(expected_bytes()[:-1])
    resumed = FileSink(str(tmp_path)).create_writer(0, 1)
    if damaged:
        with pytest.raises(SnapshotCorruptedError, match="does not match its summary"):
            resumed.recover(1)
        assert not (tmp_path / "window-000001.jsonl").exists()
    else:
        resumed.recover(1)
        assert (tmp_path / "window-000001.jsonl").read_bytes() == expected_bytes()
        assert not (tmp_path / ".staging").exists()


def test_a_staged_window_without_a_summary_is_refused(tmp_path):
    _, staged = stage(tmp_path)
    if has_attributes(staged):
        os.removexattr(staged, ATTRIBUTE)
    else:
        staged.with_name(staged.name + ".sum").unlink()
    with pytest.raises(SnapshotCorruptedError, match="has no summary"):
        FileSink(str(tmp_path)).create_writer(0, 1).recover(1)
    assert not (tmp_path / "window-000001.jsonl").exists()
