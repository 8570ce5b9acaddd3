"""Resuming a crashed word count with another parallelism than the crashed run had."""

from __future__ import annotations

import pytest
from _recovery_jobs import (
    KILLED,
    WORD_COUNT,
    assert_visible_prefix,
    crash,
    first_flags,
    resume,
    run_job,
    word_args,
)

# Each case on RocksDB and on one of the two JDBC databases: the key-group ranges a resume with
# another parallelism reads are the same SQL on SQLite and PostgreSQL (state/stores/jdbc.py differs
# by dialect only in its upsert, job lock and vacuum, which every PostgreSQL case here takes, and
# test_word_count_repeated_crashes_with_changing_parallelism changes the layout on both).
PARALLELISM_CASES = [
    (kind, *case)
    for case, jdbc in [
        ((4, 4, "window-finished:30"), "sqlite"),  # the last window: nothing left to compute on resume
        ((1, 4, "after-commit:1"), "postgresql"),  # the first commit, nothing published yet
        ((4, 1, "mid-publish:27"), "sqlite"),
        ((1, 4, "kill@0.5"), "postgresql"),
    ]
    for kind in ("rocksdb", jdbc)
]


@pytest.mark.parametrize(("kind", "crash_parallelism", "resume_parallelism", "moment"),
                         PARALLELISM_CASES)
def test_word_count_resume_with_parallelism(kind, crash_parallelism, resume_parallelism, moment,
                                            word_input, word_reference, state_env, tmp_path):
    path, _ = word_input
    env = state_env(kind)
    out = tmp_path / "out"
    crash(WORD_COUNT, word_args(path, out, crash_parallelism), env, moment,
          reference=word_reference, flags=first_flags(kind))
    assert_visible_prefix(out, word_reference)
    resume(WORD_COUNT, word_args(path, out, resume_parallelism), env, word_reference)


@pytest.mark.parametrize("kind", ["rocksdb", "sqlite", "postgresql"])
def test_word_count_repeated_crashes_with_changing_parallelism(kind, word_input, word_reference,
                                                               state_env, tmp_path):
    """Crash, resume with another parallelism and crash again, several times: the state written
    in one key-group layout is read back in the other, and the old layout is dropped on the way."""
    path, _ = word_input
    env = state_env(kind)
    out = tmp_path / "out"
    steps = [(1, "after-commit:4"), (4, "after-commit:9"), (2, "snapshot-written:15"),
             (1, "mid-publish:22"), (3, "before-commit:26")]
    visible = 0
    for index, (parallelism, moment) in enumerate(steps):
        flags = first_flags(kind) if index == 0 else ("--resume",)
        done = run_job(WORD_COUNT, word_args(path, out, parallelism),
                       {**env, "GYREFLOW_CRASH_AT": moment}, flags)
        assert done.returncode == KILLED, f"step {index} ({moment}): {done.stderr}"
        now = assert_visible_prefix(out, word_reference)
        assert now >= visible, f"published windows went back from {visible} to {now}"
        visible = now
    resume(WORD_COUNT, word_args(path, out, 4), env, word_reference)
