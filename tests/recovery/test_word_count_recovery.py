"""Word count crash recovery: every crash point and timed kills on every backend, and snapshot_every."""

from __future__ import annotations

import pytest
from _recovery_data import WC_WINDOW, WC_WINDOWS, parse_word_count, word_count_oracle
from _recovery_jobs import (
    WORD_COUNT,
    assert_visible_prefix,
    crash,
    first_flags,
    resume,
    stored_meta,
    word_args,
)


def test_word_count_reference_matches_the_oracle(word_input, word_reference):
    _, lines = word_input
    expected = word_count_oracle(lines, WC_WINDOW)
    assert len(expected) == WC_WINDOWS
    assert sorted(word_reference) == [f"window-{w:06d}.jsonl" for w in range(1, WC_WINDOWS + 1)]
    assert parse_word_count(word_reference) == expected


def test_postgresql_uninterrupted_run_on_a_new_database(postgres_canary):
    assert postgres_canary is None, postgres_canary


# Word count: every crash point and timed kills, on every backend -----------------------------

# Each crash point once per backend, at windows that differ between backends, and two timed
# kills; the parallelism cases (test_resume_with_parallelism.py) add the first and the last window.
# ``after-commit`` and ``mid-publish`` fire at the first commit of their window or a later one, and
# a commit may cover several windows: a point of one window exactly (``mid-window``) comes right
# after a ``before-commit`` in the chain (nothing of its window or later is committed then), never a
# few windows after one of those two, which the commit they fired at may already have covered.
_POINTS = {
    "rocksdb": ["window-finished:9", "snapshot-written:12", "before-commit:15", "mid-window:16",
                "after-commit:18", "mid-publish:21"],
    "sqlite": ["window-finished:22", "snapshot-written:2", "before-commit:11", "after-commit:5",
               "mid-publish:14", "mid-window:12"],
    "postgresql": ["window-finished:4", "snapshot-written:19", "before-commit:26",
                   "after-commit:13", "mid-publish:8", "mid-window:1"],
}
# Two timed kills per backend: one in the fresh run, one in a run resumed from it (a kill after
# 6 windows and one after 18; kills after 12 and 24 took the same two paths again: a resumed run
# killed inside a window, with its state from a run that was killed itself).
_KILLS = ["kill@0.2", "kill@0.6"]


def _in_window_order(moments: list[str]) -> list[str]:
    return sorted(moments, key=lambda moment: int(moment.rsplit(":", 1)[1]))


# One run per backend crashes at each of its points in window order: the first crash ends a fresh
# run, every later one a run resumed from the crash before it, and a last --resume finishes. Every
# point is taken as in a run of its own (the crashed run's published files are a prefix of the
# reference), and each resume also starts from the state a crash left, as after a real outage.
WORD_COUNT_CHAINS = [pytest.param(kind, _in_window_order(_POINTS[kind]), id=f"{kind}-points")
                     for kind in ("rocksdb", "sqlite", "postgresql")]
WORD_COUNT_CHAINS += [pytest.param(kind, _KILLS, id=f"{kind}-kills")
                      for kind in ("rocksdb", "sqlite", "postgresql")]


@pytest.mark.parametrize(("kind", "moments"), WORD_COUNT_CHAINS)
def test_word_count_crashes_then_resume(kind, moments, word_input, word_reference, state_env,
                                        tmp_path):
    path, _ = word_input
    env = state_env(kind)
    out = tmp_path / "out"
    args = word_args(path, out)
    visible = 0
    for index, moment in enumerate(moments):
        flags = first_flags(kind) if index == 0 else ("--resume",)
        crash(WORD_COUNT, args, env, moment, reference=word_reference, flags=flags)
        now = assert_visible_prefix(out, word_reference)
        assert now >= visible, f"{moment}: published windows went back from {visible} to {now}"
        visible = now
    resume(WORD_COUNT, args, env, word_reference)


# snapshot_every ------------------------------------------------------------------------------

SNAPSHOT_EVERY_CASES = [
    ("rocksdb", 3, "snapshot-written:6"),
    ("rocksdb", 3, "after-commit:9"),
    ("rocksdb", 3, "mid-window:11"),
    ("rocksdb", 3, "kill@0.5"),
    ("sqlite", 3, "before-commit:12"),
    ("sqlite", 3, "mid-publish:15"),
    ("sqlite", 3, "window-finished:10"),
    # 30 windows, 30 % 7 != 0: the last window is a commit point of its own.
    ("rocksdb", 7, "after-commit:30"),
    ("sqlite", 7, "window-finished:29"),
    ("postgresql", 3, "after-commit:9"),
]


@pytest.mark.parametrize(("kind", "every", "moment"), SNAPSHOT_EVERY_CASES)
def test_word_count_snapshot_every(kind, every, moment, word_input, word_reference, state_env,
                                   tmp_path):
    path, _ = word_input
    env = {**state_env(kind), "GYREFLOW_STATE__SNAPSHOT_EVERY": str(every)}
    out = tmp_path / "out"
    args = word_args(path, out)
    crash(WORD_COUNT, args, env, moment, reference=word_reference, flags=first_flags(kind))
    visible = assert_visible_prefix(out, word_reference)
    meta = stored_meta(env)
    completed = meta.last_completed if meta is not None else 0
    assert completed % every == 0 or completed == WC_WINDOWS, (
        f"window {completed} was committed but is no commit point of snapshot_every={every}")
    assert visible <= completed, f"window {visible} was published, only {completed} committed"
    if not moment.startswith("kill@"):  # a timed kill may land between the windows of a commit
        assert visible % every == 0 or visible == WC_WINDOWS, (
            f"window {visible} was published but is no commit point of snapshot_every={every}")
    resume(WORD_COUNT, args, env, word_reference)
