"""Crash recovery, continued: ``--from-window`` after a complete run and after a crash, and the
refusals that leave state and output untouched (a corrupted snapshot, existing state without
``--resume``/``--fresh``, a changed plan). Jobs, crashes, references and stores are those of
tests/recovery/_recovery_jobs.py and tests/recovery/conftest.py: each reference is checked against a
plain-Python oracle."""

from __future__ import annotations

import re
import sqlite3
import urllib.parse
from pathlib import Path

import pytest
from _recovery_data import WC_WINDOWS
from _recovery_jobs import (
    WC_JOB,
    WORD_COUNT,
    assert_same_output,
    assert_visible_prefix,
    crash,
    first_flags,
    resume,
    run_job,
    stored_meta,
    word_args,
)
from _staged_output import read_dir

from gyreflow.state.shared.sealing import Seal, read_key_file
from gyreflow.state.shared.snapshot import JobMeta

# --from-window -------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["rocksdb"])
def test_from_window_after_a_complete_run_recomputes_the_later_windows(
        kind, word_input, word_reference, state_env, tmp_path):
    path, _ = word_input
    env = state_env(kind)
    out = tmp_path / "out"
    args = word_args(path, out)
    done = run_job(WORD_COUNT, args, env)
    assert done.returncode == 0, done.stderr
    assert_same_output(out, word_reference)
    # retained_snapshots = 2: windows 29 and 30. Damage the published file of window 30 to see
    # that it is replaced, and resume from window 29.
    last = out / f"window-{WC_WINDOWS:06d}.jsonl"
    last.write_text('{"window": 30, "word": "stale", "count": -1}\n', encoding="utf-8")
    done = run_job(WORD_COUNT, args, env, ("--resume", "--from-window", str(WC_WINDOWS - 1)))
    assert done.returncode == 0, done.stderr
    assert_same_output(out, word_reference)


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_from_window_after_a_crash(kind, word_input, word_reference, state_env, tmp_path):
    path, _ = word_input
    env = state_env(kind)
    out = tmp_path / "out"
    args = word_args(path, out)
    crash(WORD_COUNT, args, env, "mid-publish:20", reference=word_reference, flags=first_flags(kind))
    meta = stored_meta(env)
    assert meta.last_completed >= 20  # later commits may have become durable before the crash
    assert len(meta.retained) == 2
    earlier = meta.retained[0]
    assert earlier < meta.last_completed
    done = run_job(WORD_COUNT, args, env, ("--resume", "--from-window", str(earlier)))
    assert done.returncode == 0, done.stderr
    assert_same_output(out, word_reference)


@pytest.mark.parametrize("kind", ["sqlite"])
def test_from_window_that_is_not_retained_is_refused(kind, word_input, word_reference,
                                                     state_env, tmp_path):
    path, _ = word_input
    env = state_env(kind)
    out = tmp_path / "out"
    args = word_args(path, out)
    crash(WORD_COUNT, args, env, "after-commit:12", reference=word_reference)
    meta = stored_meta(env)
    before = read_dir(out)
    refused = run_job(WORD_COUNT, args, env, ("--resume", "--from-window", "3"))
    assert read_dir(out) == before
    assert stored_meta(env) == meta, "a refused resume changed the stored state"
    resume(WORD_COUNT, args, env, word_reference)  # the state still resumes
    retained = ", ".join(map(str, meta.retained))
    assert "window 3 is not a retained snapshot" in refused.stderr, refused.stderr
    assert f"retained: {retained}" in refused.stderr
    # Refused before any data moves, like the other refusals (exit 3), not a crash with a
    # traceback.
    assert refused.returncode == 3, refused.stderr
    assert "Traceback" not in refused.stderr


# Refusals: corrupted snapshot, state without --resume/--fresh, changed plan ------------------


def test_corrupted_snapshot_is_reported_with_its_location(word_input, word_reference, state_env,
                                                          tmp_path):
    path, _ = word_input
    env = state_env("sqlite")
    out = tmp_path / "out"
    args = word_args(path, out)
    crash(WORD_COUNT, args, env, "after-commit:10", reference=word_reference)
    database = tmp_path / "state" / "snapshots.db"
    with sqlite3.connect(database) as conn:
        body = conn.execute("SELECT body FROM gyreflow_meta WHERE job = ?", (WC_JOB,)).fetchone()
        key = read_key_file(f"{database}-keys/{urllib.parse.quote(WC_JOB, safe='')}.key")
        last = JobMeta.from_bytes(body[0], "gyreflow_meta", Seal(key), WC_JOB).last_completed
        assert last >= 10
        # A row of the last completed window: the latest of its key, so resuming reads it.
        row = conn.execute(
            "SELECT rowid, tbl, kg, version FROM gyreflow_state WHERE job = ? AND version = ? "
            "ORDER BY kg, k LIMIT 1", (WC_JOB, last)).fetchone()
        assert row is not None, f"no state row written at version {last}"
        rowid, table, key_group, version = row
        conn.execute("UPDATE gyreflow_state SET v = substr(v, 1, 3) WHERE rowid = ?", (rowid,))
    refused = run_job(WORD_COUNT, args, env, ("--resume",))
    # The remedy the message should suggest: the earlier retained snapshot does not need the row.
    resume(WORD_COUNT, args, env, word_reference, ("--from-window", str(last - 1)))
    message = refused.stderr
    assert "gyreflow_state" in message
    assert f"tbl={table}" in message
    assert f"kg={key_group}" in message
    assert f"version={version}" in message
    assert refused.returncode == 3, message
    assert "Traceback" not in message
    assert "--from-window" in message


@pytest.mark.parametrize("kind", ["rocksdb"])
def test_existing_state_needs_resume_or_fresh(kind, word_input, word_reference, state_env,
                                              tmp_path):
    path, _ = word_input
    env = state_env(kind)
    out = tmp_path / "out"
    args = word_args(path, out)
    crash(WORD_COUNT, args, env, "after-commit:10", reference=word_reference)
    before = read_dir(out)
    done = run_job(WORD_COUNT, args, env)
    assert done.returncode == 3, done.stderr
    # The crash came after window 10's commit: a later commit may have become durable meanwhile.
    found = re.search(r"last completed window (\d+)\b.*\bfrom window (\d+)\b", done.stderr)
    assert found is not None, done.stderr
    last, then = int(found.group(1)), int(found.group(2))
    assert last >= 10
    assert then == last + 1
    assert assert_visible_prefix(out, word_reference) <= last
    assert "--resume" in done.stderr
    assert "--fresh" in done.stderr
    assert read_dir(out) == before, "a refused run changed the output directory"
    done = run_job(WORD_COUNT, args, env, ("--fresh",))
    assert done.returncode == 0, done.stderr
    assert_same_output(out, word_reference)


def _variant(tmp_path: Path, name: str, old: str, new: str) -> Path:
    source = WORD_COUNT.read_text(encoding="utf-8")
    assert old in source
    script = tmp_path / name
    script.write_text(source.replace(old, new, 1).replace(
        'Path(__file__).parent / "data"', f'Path({str(WORD_COUNT.parent)!r}) / "data"'),
        encoding="utf-8")
    return script


PLAN_CHANGES = {
    "renamed-operator": ('.with_name("count")', '.with_name("tally")'),
    "extra-operator": ('.with_name("split")',
                       '.with_name("split").filter(lambda word: True).with_name("keep")'),
}


@pytest.mark.parametrize("change", sorted(PLAN_CHANGES))
def test_resume_with_a_changed_plan_is_refused(change, word_input, word_reference, state_env,
                                               tmp_path):
    path, _ = word_input
    env = state_env("rocksdb")
    out = tmp_path / "out"
    args = word_args(path, out)
    crash(WORD_COUNT, args, env, "after-commit:8", reference=word_reference)
    before = read_dir(out)
    variant = _variant(tmp_path, f"word_count_{change.replace('-', '_')}.py", *PLAN_CHANGES[change])
    done = run_job(variant, args, env, ("--resume",))
    assert done.returncode == 3, done.stderr
    assert "plan changed" in done.stderr
    assert "--fresh" in done.stderr
    assert "Traceback" not in done.stderr
    assert read_dir(out) == before
    # The state is untouched: the original pipeline still resumes.
    resume(WORD_COUNT, args, env, word_reference)
