"""Resume verifies what it uses: damaged or missing state stops it with exit 3 and one ``error:``
line before it publishes or deletes anything, and state left by a run that never committed (or by a
``--fresh`` cut short) is never read back. Real processes, real RocksDB and SQLite files, SIGKILL."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from _recovery_data import word_count_oracle

ROOT = Path(__file__).resolve().parents[2]
WORD_COUNT = ROOT / "examples" / "word_count.py"
WINDOW = 4
LINES = [f"w{i % 7} w{i % 5} w{i % 3}" for i in range(48)]  # 12 windows


def run(tmp_path: Path, backend: str, lines: list[str], *flags: str, crash_at: str | None = None):
    data = tmp_path / "in.txt"
    data.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    # tasks in the job's process (auto would fork a worker per core, with state of their own)
    env.update({"GYREFLOW_ENVIRONMENT__TYPE": "local", "GYREFLOW_ENVIRONMENT__WORKERS": "1",
                "GYREFLOW_STATE__BACKEND": backend,
                "GYREFLOW_STATE__PATH": str(tmp_path / "state"), "COLUMNS": "400"})
    if crash_at:
        env["GYREFLOW_CRASH_AT"] = crash_at
    return subprocess.run([sys.executable, "-m", "gyreflow", "run", "--quiet", *flags,
                           str(WORD_COUNT), "--", "--input", str(data), "--window", str(WINDOW),
                           "--output", str(tmp_path / "out")],
                          env=env, capture_output=True, text=True, timeout=120, check=False)


def published(tmp_path: Path) -> dict[str, bytes]:
    out = tmp_path / "out"
    return {n: (out / n).read_bytes() for n in sorted(os.listdir(out)) if not n.startswith(".")}


def parse(tmp_path: Path) -> dict[int, dict[str, int]]:
    import json

    by_window: dict[int, dict[str, int]] = {}
    for data in published(tmp_path).values():
        for line in data.decode().splitlines():
            record = json.loads(line)
            by_window.setdefault(record["window"], {})[record["word"]] = record["count"]
    return by_window


def assert_refused(done, *fragments: str) -> None:
    assert done.returncode == 3, (done.returncode, done.stderr)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr
    assert "Traceback" not in done.stderr
    message = " ".join(done.stderr.split())
    for fragment in fragments:
        assert fragment in message, message


def assert_untouched(tmp_path: Path, before: dict[str, bytes]) -> None:
    """Every window published before is as it was; a window staged and committed before the crash
    may have been published since, and then holds the oracle's counts."""
    after = published(tmp_path)
    assert all(after.get(name) == data for name, data in before.items()), "a published file changed"
    expected = word_count_oracle(LINES, WINDOW)
    shown = parse(tmp_path)
    assert all(shown[w] == expected[w] for w in shown), "a published window is not the oracle's"


def crashed(tmp_path: Path, backend: str) -> dict[str, bytes]:
    done = run(tmp_path, backend, LINES, crash_at="after-commit:6")
    assert done.returncode == -signal.SIGKILL, done.stderr
    return published(tmp_path)


@pytest.mark.parametrize("part", ["meta", "state", "records"])
def test_a_damaged_write_ahead_log_is_refused(part, tmp_path):
    before = crashed(tmp_path, "rocksdb")
    logs = [p for p in (tmp_path / "state").rglob("*.log")
            if f"/{part}/" in str(p) or str(p).endswith(f"/{part}/{p.name}")]
    logs = [p for p in logs if p.stat().st_size > 0]
    if logs:
        # Inside the first record (a 7-byte header, then its data): damage to the last record
        # alone looks like a write cut short by the kill, which RocksDB passes over.
        damaged, at = logs[0], slice(8, 24)
    else:
        # The database was closed since its last write (closing flushes the log into a table
        # file): its data is in that file, damaged instead.
        tables = sorted((p for p in (tmp_path / "state").rglob("*.sst") if f"/{part}/" in str(p)),
                        key=lambda p: p.stat().st_mtime)
        assert tables, f"neither a write-ahead log nor a table file under {part}/ after the kill"
        damaged, at = tables[-1], slice(0, 64)
    data = bytearray(damaged.read_bytes())
    data[at] = bytes(b ^ 0xFF for b in data[at])
    damaged.write_bytes(bytes(data))
    done = run(tmp_path, "rocksdb", LINES, "--resume")
    assert_refused(done, *(("cannot be read", "Corruption") if logs else ()))
    assert_untouched(tmp_path, before)


@pytest.mark.parametrize("backend", ["rocksdb", "jdbc"])
def test_missing_source_offsets_are_refused(backend, tmp_path):
    before = crashed(tmp_path, backend)
    if backend == "rocksdb":
        job = (tmp_path / "state" / "word-count%2Fword_count")
        shutil.rmtree(job / "records")
    else:
        with sqlite3.connect(tmp_path / "state" / "snapshots.db") as db:
            db.execute("delete from gyreflow_records")
    done = run(tmp_path, backend, LINES, "--resume")
    assert_refused(done, "offset of source", "missing")
    assert_untouched(tmp_path, before)


@pytest.mark.parametrize("backend", ["rocksdb", "jdbc"])
def test_state_of_a_run_without_meta_is_never_read_back(backend, tmp_path):
    """A run on other input killed after window 2, then its meta is lost (a --fresh killed after
    its first step): the next run starts over, is killed, resumes, and must not see the old keys."""
    other = [f"x{i % 9} w1" for i in range(48)]
    assert run(tmp_path, backend, other, crash_at="after-commit:2").returncode == -signal.SIGKILL
    if backend == "rocksdb":
        shutil.rmtree((tmp_path / "state" / "word-count%2Fword_count") / "meta")
    else:
        with sqlite3.connect(tmp_path / "state" / "snapshots.db") as db:
            db.execute("delete from gyreflow_meta")
    shutil.rmtree(tmp_path / "out")
    lines = [f"w{i % 4}" if i < 24 else f"x{i % 9} w{i % 4}" for i in range(48)]
    done = run(tmp_path, backend, lines, crash_at="after-commit:3")
    assert done.returncode == -signal.SIGKILL, done.stderr
    done = run(tmp_path, backend, lines, "--resume")
    assert done.returncode == 0, done.stderr
    assert parse(tmp_path) == word_count_oracle(lines, WINDOW)


@pytest.mark.parametrize("what", ["log", "database"])
def test_state_that_lost_writes_is_refused(what, tmp_path):
    """After a kill, the state database's log (what was written since its last flush) or the whole
    database is deleted: restoring would silently give less state; it is refused instead."""
    before = crashed(tmp_path, "rocksdb")
    database = tmp_path / "state" / "word-count%2Fword_count" / "state" / "count" / "kg-0-128"
    if what == "log":
        logs = [p for p in database.glob("*.log") if p.stat().st_size > 0]
        assert logs, "no write-ahead log with data after the kill"
        logs[0].unlink()
    else:
        shutil.rmtree(database)
    done = run(tmp_path, "rocksdb", LINES, "--resume")
    assert_refused(done, "table=count", "is missing")
    assert_untouched(tmp_path, before)


def test_stray_files_in_records_are_ignored(tmp_path):
    """Files someone left among the records databases are not records of the job."""
    crashed(tmp_path, "rocksdb")
    records = tmp_path / "state" / "word-count%2Fword_count" / "records"
    (records / "notes.txt").write_text("left here by someone\n", encoding="utf-8")
    (records / "backup").mkdir()
    done = run(tmp_path, "rocksdb", LINES, "--resume")
    assert done.returncode == 0, done.stderr
    assert parse(tmp_path) == word_count_oracle(LINES, WINDOW)

