"""Resume never replaces published output that nothing proves wrong, and never publishes a damaged
staged window: real processes, SIGKILL, a state restored from an old copy, damaged staged files.
Staged names are unique per writer, and output files follow the user's umask while state is private."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _recovery_data import word_count_oracle
from test_state_verification import LINES, WINDOW, assert_refused, parse, published, run

from gyreflow.api import FileSink

ROOT = Path(__file__).resolve().parents[2]


def killed(tmp_path: Path, backend: str, crash_at: str) -> None:
    done = run(tmp_path, backend, LINES, crash_at=crash_at)
    assert done.returncode == -signal.SIGKILL, done.stderr
    # The snapshot writer process finishes what the killed job had sent it (commits of later
    # windows may follow the crash point), then exits: let it, before the files are handled.
    time.sleep(1.0)


def staged_files(tmp_path: Path) -> list[Path]:
    staging = tmp_path / "out" / ".staging"
    return sorted(p for p in staging.iterdir() if not p.name.endswith(".sum"))


@pytest.mark.parametrize("backend", ["rocksdb", "jdbc"])
def test_a_state_older_than_the_published_output_is_refused(backend, tmp_path):
    """The state is put back from a copy taken before window 4 was committed; windows up to 12
    were published since. Resuming from 3 or earlier would replace published windows: refused,
    nothing changed. (A kill after the commit of window 3 is no such copy: commits of the windows
    already finished may follow it, up to the last one on a busy machine.)"""
    killed(tmp_path, backend, "before-commit:4")
    shutil.copytree(tmp_path / "state", tmp_path / "copy")
    done = run(tmp_path, backend, LINES, "--resume")
    assert done.returncode == 0, done.stderr
    before = published(tmp_path)
    assert len(before) == 12
    shutil.rmtree(tmp_path / "state")
    shutil.copytree(tmp_path / "copy", tmp_path / "state")
    done = run(tmp_path, backend, LINES, "--resume")
    message = " ".join(done.stderr.split())
    if "holds no completed window" in message:  # nothing was committed when the copy was taken
        assert_refused(done, "is published output, but")
        completed = 0
    else:
        assert_refused(done, "published output of a later window")
        shown = message.split("than the last completed one in ")[1].split("(")[1].split(")")[0]
        completed = int(shown)
    assert completed <= 3
    assert f"window-{completed + 1:06d}.jsonl is published" in message
    assert published(tmp_path) == before
    done = run(tmp_path, backend, LINES, "--fresh")  # recomputing on purpose is allowed
    assert done.returncode == 0, done.stderr
    assert parse(tmp_path) == word_count_oracle(LINES, WINDOW)


def test_a_resume_that_finds_no_state_at_all_says_so_and_offers_only_fresh(tmp_path):
    """The output of a finished run, and a state folder that holds nothing of it (deleted, or
    another state.path): refused, with no advice to resume from a window nothing retains."""
    done = run(tmp_path, "rocksdb", LINES)
    assert done.returncode == 0, done.stderr
    before = published(tmp_path)
    shutil.rmtree(tmp_path / "state")
    done = run(tmp_path, "rocksdb", LINES, "--resume")
    assert_refused(done, "window-000001.jsonl is published output, but",
                   "holds no completed window", "--fresh")
    assert "--from-window" not in done.stderr
    assert published(tmp_path) == before


@pytest.mark.parametrize("damage", ["flipped", "truncated", "summary-lost", "deleted"])
def test_a_damaged_staged_window_is_never_published(damage, tmp_path):
    """Killed after window 6 was committed and before it was published: its staged file must be
    published by the resume, and only if it is the file that was staged."""
    killed(tmp_path, "rocksdb", "after-commit:6")
    before = published(tmp_path)
    assert sorted(before) == [f"window-{w:06d}.jsonl" for w in range(1, 6)]
    (staged,) = [p for p in staged_files(tmp_path) if p.name.startswith("window-000006.jsonl.")]
    if damage == "flipped":
        data = bytearray(staged.read_bytes())
        data[len(data) // 2] ^= 0x01
        staged.write_bytes(bytes(data))
    elif damage == "truncated":
        staged.write_bytes(staged.read_bytes()[:-3])
    elif damage == "summary-lost":  # an extended attribute of the staged file, or a .sum beside it
        try:
            os.removexattr(staged, "user.gyreflow.summary")
        except OSError:
            Path(f"{staged}.sum").unlink()
    else:
        staged.unlink()
        Path(f"{staged}.sum").unlink(missing_ok=True)
    done = run(tmp_path, "rocksdb", LINES, "--resume")
    fragment = {"flipped": "does not match its summary", "truncated": "does not match its summary",
                "summary-lost": "has no summary", "deleted": "neither published nor staged"}
    assert_refused(done, "window 6", fragment[damage])
    assert published(tmp_path) == before


def test_an_intact_staged_window_is_published_on_resume(tmp_path):
    killed(tmp_path, "rocksdb", "after-commit:6")
    assert any(p.name.startswith("window-000006.jsonl.") for p in staged_files(tmp_path))
    done = run(tmp_path, "rocksdb", LINES, "--resume")
    assert done.returncode == 0, done.stderr
    assert parse(tmp_path) == word_count_oracle(LINES, WINDOW)
    assert not (tmp_path / "out" / ".staging").exists()


def test_two_writers_of_one_sink_never_share_a_staged_file(tmp_path):
    sink = FileSink(str(tmp_path / "out"))
    first, second = sink.create_writer(0, 1), sink.create_writer(0, 1)
    first.write(1, ["from the first"])
    second.write(1, ["from the second"])
    first.finish_window(1)
    second.finish_window(1)
    staged = sorted((tmp_path / "out" / ".staging").iterdir())
    contents = sorted(p.read_text() for p in staged if not p.name.endswith(".sum"))
    assert contents == ['"from the first"\n', '"from the second"\n']
    first.close()
    second.close()


@pytest.mark.parametrize("how", ["publish", "recover"])
def test_a_window_staged_again_by_a_task_run_again_is_published_once_and_whole(tmp_path, how):
    """A Spark task whose executor was lost left a half-written copy of its window (no summary);
    the task run again staged the whole window under a run of its own. The complete copy is
    published, once; the half-written one is removed."""
    records = [{"word": f"w{i}", "count": i} for i in range(50)]
    sink = FileSink(str(tmp_path / "out"))
    lost, again = sink.create_writer(0, 1), sink.create_writer(0, 1)
    lost.write(1, records[:20])
    lost.open_files[1][0].flush()  # the attempt died here: no summary, part of the records
    again.write(1, records)
    again.finish_window(1)
    publisher = sink.create_writer(0, 1)
    if how == "publish":
        publisher.publish(1)
    else:
        publisher.recover(1)
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["window-000001.jsonl"]
    expected = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    assert (out / "window-000001.jsonl").read_text(encoding="utf-8") == expected
    lost.open_files.clear()


@pytest.mark.parametrize(("before", "after"), [(3, 1), (1, 3), (2, 3)])
def test_a_resume_from_an_earlier_window_removes_later_windows_of_another_layout(
        tmp_path, before, after):
    """``--from-window 2`` after a rescale from ``before`` to ``after`` sink tasks: the later
    windows the old layout published are computed again under the new layout's names, so its own
    files of those windows go (they would double every row); the earlier windows stay as they are."""
    sink = FileSink(str(tmp_path / "out"))
    old = [sink.create_writer(i, before) for i in range(before)]
    for window in range(1, 5):
        for index, writer in enumerate(old):
            writer.write(window, [f"w{window} part {index}"])
            writer.finish_window(window)
        for writer in old:
            writer.publish(window)
    files = lambda: {p.name: p.read_text() for p in (tmp_path / "out").glob("window-*")}  # noqa: E731
    kept = {name: text for name, text in files().items() if int(name[7:13]) <= 2}
    new = [sink.create_writer(i, after) for i in range(after)]
    for writer in new:
        writer.recover(2)
    assert files() == kept  # windows 3 and 4 are recomputed; nothing of theirs is left behind
    for writer in [*old, *new]:
        writer.close()


def test_state_files_are_private_and_output_follows_the_umask(tmp_path):
    """With umask 022: every file of the RocksDB state (those its threads create later too) is
    0600 and every directory 0700, while the published output is 0644 in 0755 directories."""
    data = tmp_path / "in.txt"
    data.write_text("".join(line + "\n" for line in LINES * 20), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    env.update({"GYREFLOW_ENVIRONMENT__TYPE": "local", "GYREFLOW_STATE__BACKEND": "rocksdb",
                "GYREFLOW_STATE__PATH": str(tmp_path / "state")})
    done = subprocess.run(
        [sys.executable, "-c", "import os, runpy, sys; os.umask(0o022); sys.argv[0] = 'gyreflow';"
         " runpy.run_module('gyreflow', run_name='__main__')",
         "run", "--quiet", str(ROOT / "examples" / "word_count.py"), "--", "--input", str(data),
         "--window", "4", "--output", str(tmp_path / "out" / "counts")],
        env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    loose = [(str(p), oct(stat.S_IMODE(p.stat().st_mode))) for p in (tmp_path / "state").rglob("*")
             if stat.S_IMODE(p.stat().st_mode) != (0o700 if p.is_dir() else 0o600)]
    assert not loose, loose
    outputs = list((tmp_path / "out").rglob("*"))
    assert len(outputs) == 1 + len(LINES) * 20 // 4  # the folder and its windows
    wrong = [(str(p), oct(stat.S_IMODE(p.stat().st_mode))) for p in outputs
             if stat.S_IMODE(p.stat().st_mode) != (0o755 if p.is_dir() else 0o644)]
    assert not wrong, wrong
