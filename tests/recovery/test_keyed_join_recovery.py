"""Keyed join crash recovery: crash points, worker processes, resuming with another parallelism."""

from __future__ import annotations

import pytest
from _recovery_data import JOIN_WINDOW, JOIN_WINDOWS, join_oracle, parse_join
from _recovery_jobs import KEYED_JOIN, assert_visible_prefix, crash, first_flags, resume


def test_keyed_join_reference_matches_the_oracle(join_input, join_reference):
    _, _, orders, customers = join_input
    expected = join_oracle(orders, customers, JOIN_WINDOW)
    assert len(expected) == JOIN_WINDOWS
    assert expected[JOIN_WINDOWS] == {}  # only customer records in the last window
    assert sorted(join_reference) == [f"window-{w:06d}.jsonl" for w in range(1, JOIN_WINDOWS + 1)]
    assert parse_join(join_reference) == expected


# The points of one backend and parallelism crash one run after another in window order, as the
# word count's chains do: every point is still taken, each after a resume from the crash before.
JOIN_CASES = [
    pytest.param("rocksdb", 1, ["window-finished:3", "before-commit:7",
                                "mid-publish:13"],  # the last, empty window
                 id="rocksdb-1-points"),
    pytest.param("rocksdb", 2, ["after-commit:6"], id="rocksdb-2-after-commit:6"),
    pytest.param("sqlite", 1, ["mid-window:4", "snapshot-written:5", "after-commit:9"],
                 id="sqlite-1-points"),
    pytest.param("sqlite", 2, ["kill@0.5"], id="sqlite-2-kill@0.5"),
    pytest.param("postgresql", 2, ["snapshot-written:4"], id="postgresql-2-snapshot-written:4"),
]


@pytest.mark.parametrize(("kind", "parallelism", "moments"), JOIN_CASES)
def test_keyed_join_crash_then_resume(kind, parallelism, moments, join_input, join_reference,
                                      state_env, tmp_path):
    orders, customers, _, _ = join_input
    env = state_env(kind)
    out = tmp_path / "out"
    args = ["--orders", str(orders), "--customers", str(customers), "--output", str(out),
            "--window", str(JOIN_WINDOW), "--parallelism", str(parallelism)]
    visible = 0
    for index, moment in enumerate(moments):
        flags = first_flags(kind) if index == 0 else ("--resume",)
        crash(KEYED_JOIN, args, env, moment, reference=join_reference, flags=flags)
        now = assert_visible_prefix(out, join_reference)
        assert now >= visible, f"{moment}: published windows went back from {visible} to {now}"
        visible = now
    resume(KEYED_JOIN, args, env, join_reference)


@pytest.mark.parametrize("moment", ["before-commit:8", "kill@0.5"])
def test_keyed_join_in_worker_processes_crash_then_resume(moment, join_input, join_reference,
                                                          state_env, tmp_path):
    # Two worker processes: each join task folds its window's amounts per city (an associative
    # reduce) before they cross to the city's task; resumed in process.
    orders, customers, _, _ = join_input
    env = state_env("rocksdb")
    out = tmp_path / "out"
    args = ["--orders", str(orders), "--customers", str(customers), "--output", str(out),
            "--window", str(JOIN_WINDOW), "--parallelism", "2"]
    crash(KEYED_JOIN, args, {**env, "GYREFLOW_ENVIRONMENT__WORKERS": "2"}, moment,
          reference=join_reference)
    assert_visible_prefix(out, join_reference)
    resume(KEYED_JOIN, args, env, join_reference)


def test_keyed_join_resume_with_other_parallelism(join_input, join_reference, state_env, tmp_path):
    orders, customers, _, _ = join_input
    env = state_env("rocksdb")
    out = tmp_path / "out"
    args = ["--orders", str(orders), "--customers", str(customers), "--output", str(out),
            "--window", str(JOIN_WINDOW)]
    crash(KEYED_JOIN, [*args, "--parallelism", "3"], env, "after-commit:5",
          reference=join_reference)
    resume(KEYED_JOIN, [*args, "--parallelism", "1"], env, join_reference)
