"""The regular stream join (``join(..., across_windows=True)``) against a plain-Python oracle: every
``how``, with and without a ttl, in every environment; a failed run resumed from its last completed
window (at the same and at another parallelism); state that stays bounded with a ttl once keys stop;
and snapshots that write what a window brought, not the rows so far."""

from __future__ import annotations

import os
import pickle
import random
import statistics
from collections import Counter

import pytest

from gyreflow.api import JobListener, SizeTumblingWindow, UserFunctionError
from gyreflow.runtime.dataflow.stream_join import StreamJoinOperator
from gyreflow.runtime.dataflow.task import OperatorContext
from gyreflow.state.keys.keyed import KeyedStateStore

WINDOW = 20


def records(seed: int, windows: int, keys: int = 6) -> list[tuple]:
    """``(side, key, id)`` records, ``WINDOW`` a window, sides and keys at random (some keys on one
    side only, some windows without one side)."""
    rng = random.Random(seed)
    out = []
    for number in range(windows * WINDOW):
        side = "L" if rng.random() < (0.8 if number // WINDOW % 4 == 3 else 0.5) else "R"
        out.append((side, rng.randrange(keys + (2 if side == "L" else 0)), number))
    return out


def oracle(stream: list[tuple], how: str, ttl: int | None, size: int = WINDOW) -> dict[int, Counter]:
    """Per window: its new rows joined with every row so far (a row of window ``a`` alive through
    window ``a + ttl``), new with new once; outer rows for new rows without a match so far."""
    kept: list[tuple] = []  # (window, side, key, id)
    want = {}
    for window in range(1, len(stream) // size + 1):
        new = [(window, *r) for r in stream[(window - 1) * size:window * size]]
        old = [r for r in kept if ttl is None or window - r[0] <= ttl]
        out = Counter()
        for _, side, key, ident in new:
            others = [o for o in old + new if o[1] != side and o[2] == key]
            if side == "L":
                out.update((ident, o[3]) for o in others)
                if not others and how in ("left", "full"):
                    out[(ident, None)] += 1
            else:
                out.update((o[3], ident) for o in others if o in old)  # new x new counted once
                if not others and how in ("right", "full"):
                    out[(None, ident)] += 1
        kept = old + new
        want[window] = out
    return want


def ids(left, right) -> tuple:
    return (left and left[2], right and right[2])


def side_key(record) -> int:
    return record[1]


def join_job(stream, how, ttl, poison: str | None = None):
    def job(ctx):
        rows = ctx.source(stream, SizeTumblingWindow(WINDOW)).with_parallelism(1)
        if poison is not None:
            rows = rows.map(lambda r: fail_if(poison, r)).with_name("poison")
        left = rows.filter(lambda r: r[0] == "L").key_by(side_key)
        right = rows.filter(lambda r: r[0] == "R").key_by(side_key)
        (left.join(right, ids, how=how, across_windows=True, ttl=ttl).with_name("join")
         .collect("joined"))
    return job


def fail_if(flag: str, record):
    # a file, not a module flag: worker processes and Spark's Python workers see it too
    if record[2] == 7 * WINDOW + 3 and os.path.exists(flag):
        msg = "poisoned record"
        raise ValueError(msg)
    return record


def by_window(result) -> dict[int, Counter]:
    return {w: Counter(rows) for w, rows in result.by_window("joined").items()}


def nonempty(counters: dict[int, Counter]) -> dict[int, Counter]:
    return {w: c for w, c in counters.items() if c}


@pytest.mark.parametrize(("how", "ttl"), [("inner", None), ("left", None), ("right", 2),
                                          ("full", None), ("full", 1)])
def test_each_window_joins_its_rows_with_everything_so_far(make_env, how, ttl):
    stream = records(3, 10)
    pipeline = make_env(3).pipeline("stream-join")
    pipeline.task(join_job(stream, how, ttl), name="job")
    got = by_window(pipeline.execute()["job"])
    want = oracle(stream, how, ttl)
    assert nonempty(got) == nonempty(want)
    assert sum(map(len, want.values())) > 50


def test_the_api_refuses_what_it_cannot_run(make_env):
    pipeline = make_env(1).pipeline("refusals")
    errors = []

    @pipeline.task
    def job(ctx):
        left = ctx.source([1]).key_by()
        right = ctx.source([1]).key_by()
        for kwargs in ({"how": "outer", "across_windows": True}, {"how": "left"},
                       {"ttl": 0, "across_windows": True}, {"ttl": 2}):
            with pytest.raises(ValueError) as info:
                left.join(right, **kwargs)
            errors.append(str(info.value))
        left.join(right).collect()

    pipeline.execute()
    assert errors == ["join how='outer': one of 'inner', 'left', 'right', 'full'",
                      "join(how=..., ttl=...) joins across windows: add across_windows=True",
                      "ttl is a number of windows >= 1, got 0",
                      "join(how=..., ttl=...) joins across windows: add across_windows=True"]


def pair_or_fail(left, right) -> tuple:
    if left[2] == 3 * WINDOW:
        msg = "no pair for this one"
        raise ValueError(msg)
    return ids(left, right)


def test_a_join_function_that_raises_names_the_operator_window_and_pair(make_env):
    stream = [("L" if n % 2 == 0 else "R", 1, n) for n in range(4 * WINDOW)]
    pipeline = make_env(2).pipeline("join-fails")

    @pipeline.task
    def job(ctx):
        rows = ctx.source(stream, SizeTumblingWindow(WINDOW)).with_parallelism(1)
        left = rows.filter(lambda r: r[0] == "L").key_by(side_key)
        right = rows.filter(lambda r: r[0] == "R").key_by(side_key)
        left.join(right, pair_or_fail, across_windows=True).with_name("join").collect()

    with pytest.raises(UserFunctionError) as info:
        pipeline.execute()
    assert (info.value.operator, info.value.window) == ("join", 4)
    assert info.value.record[0] == ("L", 1, 3 * WINDOW)
    assert "no pair for this one" in str(info.value)


@pytest.mark.parametrize(("how", "ttl", "parallelism"), [("full", None, 2), ("left", 3, 3)])
def test_a_failed_run_resumes_from_its_last_completed_window(make_env, tmp_path, how, ttl,
                                                             parallelism):
    """A record of window 8 fails; the run resumed (at another parallelism too) emits windows 8
    to 12 as an uninterrupted run does: the rows of windows 1-7 came back from the snapshot."""
    stream = records(5, 12)
    flag = tmp_path / "poison"
    flag.write_text("on")
    env = make_env(2, **{"state.backend": "rocksdb"})
    pipeline = env.pipeline("resumed-join")
    pipeline.task(join_job(stream, how, ttl, str(flag)), name="job")
    with pytest.raises(UserFunctionError) as info:
        pipeline.execute()
    assert info.value.window == 8
    flag.unlink()
    resumed_env = make_env(parallelism, **{"state.backend": "rocksdb"})
    again = resumed_env.pipeline("resumed-join")
    again.task(join_job(stream, how, ttl, str(flag)), name="job")
    got = by_window(again.execute(resume=True)["job"])
    want = oracle(stream, how, ttl)
    assert nonempty(got) == nonempty({w: c for w, c in want.items() if w >= 8})


class Bytes(JobListener):
    def __init__(self) -> None:
        self.written: dict[int, int] = {}

    def on_checkpoint(self, checkpoint) -> None:
        self.written[checkpoint.window] = checkpoint.bytes


def test_snapshots_write_what_a_window_brought(make_env):
    """60 windows of 40 rows over 2,000 keys: the state grows 60-fold, the bytes a snapshot writes
    do not (a snapshot of the rows so far would write 30 times more at the end than at the
    start)."""
    rng = random.Random(9)
    stream = [("L" if rng.random() < 0.5 else "R", rng.randrange(2_000), n) for n in range(60 * 40)]
    pipeline = make_env(2, **{"state.backend": "rocksdb"}).pipeline("join-bytes")

    @pipeline.task
    def job(ctx):
        rows = ctx.source(stream, SizeTumblingWindow(40)).with_parallelism(1)
        left = rows.filter(lambda r: r[0] == "L").key_by(side_key)
        right = rows.filter(lambda r: r[0] == "R").key_by(side_key)
        left.join(right, ids, across_windows=True).with_name("join").collect("joined")

    heard = Bytes()
    result = pipeline.execute(listener=heard)["job"]
    assert nonempty(by_window(result)) == nonempty(oracle(stream, "inner", None, 40))
    sizes = [heard.written[w] for w in sorted(heard.written)]
    assert len(sizes) == 60
    early, late = sum(sizes[5:20]) / 15, sum(sizes[45:60]) / 15
    assert late < 2.5 * early, sizes


# --- the operator alone: state and snapshot bytes per window ------------------------------------


class Snapshots:
    """A store's view of one task's snapshots: what the latest version holds, and bytes per
    snapshot (the pickled keys and values written)."""

    def __init__(self) -> None:
        self.stored: dict = {}
        self.bytes: list[int] = []

    def take(self, state: KeyedStateStore) -> None:
        written_bytes = 0
        for table in state.tables.values():
            for name, written, removed in table.take_named_changes():
                for key in removed:
                    self.stored.pop((name, key), None)
                blob = pickle.dumps(written)  # what a store keeps: the values as they are now
                for key, value in pickle.loads(blob).items():
                    self.stored[(name, key)] = value
                written_bytes += len(blob) if written else 0
        self.bytes.append(written_bytes)

    def restore_into(self, state: KeyedStateStore) -> None:
        for table in state.tables.values():
            table.data.clear()
            for name in table.stored_names:
                table.data.update({k: pickle.loads(pickle.dumps(v)) for (n, k), v in self.stored.items()
                                   if n == name})
            table.after_restore(False)


def run_operator(op: StreamJoinOperator, ctx: OperatorContext, windows, snapshots=None,
                 held: list | None = None) -> dict[int, Counter]:
    out: dict[int, Counter] = {}
    for window, (lefts, rights) in windows:
        ctx.window = window
        emitted: list = []
        op.out = emitted.extend
        op.process_input(0, lefts)
        op.process_input(1, rights)
        op.finish(window)
        out[window] = Counter(emitted)
        if snapshots is not None:
            snapshots.take(ctx.state)
        if held is not None:
            held.append(sum(len(e[0]) + len(e[1]) for entries in op.table.data.values()
                            for e in entries.values()))
    return out


def operator_windows(count: int, keys_of, seed: int = 1):
    rng = random.Random(seed)
    windows = []
    ident = 0
    for window in range(1, count + 1):
        sides = ([], [])
        for _ in range(WINDOW):
            side = rng.randrange(2)
            sides[side].append(("LR"[side], rng.choice(keys_of(window)), ident))
            ident += 1
        windows.append((window, sides))
    return windows


def new_operator(how: str, ttl: int | None):
    op = StreamJoinOperator("join", side_key, side_key, ids, how, ttl)
    ctx = OperatorContext("join", 0, 1, KeyedStateStore(128))
    op.open(ctx)
    return op, ctx


def test_with_a_ttl_the_state_of_keys_that_stopped_goes():
    """Each window's keys are new (keys stop after their window): with ttl=2 the operator holds
    the rows of the last three windows at most, and snapshots stay the same size."""
    windows = operator_windows(80, lambda w: [f"k{w}-{i}" for i in range(5)])
    op, ctx = new_operator("full", 2)
    held: list = []
    snapshots = Snapshots()
    got = run_operator(op, ctx, windows, snapshots, held)
    stream = [r for _, (lefts, rights) in windows for r in sorted(lefts + rights, key=lambda r: r[2])]
    assert nonempty(got) == nonempty(oracle(stream, "full", 2))
    assert max(held) <= 3 * WINDOW and held[-1] <= 3 * WINDOW
    assert max(snapshots.bytes[40:]) < 2 * max(snapshots.bytes[5:40]), snapshots.bytes
    assert sum(1 for entries in op.table.data.values() for _ in entries) <= 15  # 3 windows' keys


def test_without_a_ttl_a_snapshot_writes_the_window_not_the_rows_so_far():
    """Ten hot keys on both sides: every window touches every key. Per-key values written whole
    would write each key's rows so far every window (growing 100-fold); the changes logged write
    the window's rows, and the bases written now and then add at most a few times that."""
    windows = operator_windows(100, lambda w: range(10))
    op, ctx = new_operator("inner", None)
    snapshots = Snapshots()
    run_operator(op, ctx, windows, snapshots)
    whole = len(pickle.dumps(dict(op.table.data)))
    assert sum(snapshots.bytes) < 5 * whole  # all snapshots together: a few times the final state
    # a window's snapshot: its own rows (a base folded now and then), not the rows so far
    assert statistics.median(snapshots.bytes[50:]) < 0.05 * whole, snapshots.bytes


@pytest.mark.parametrize(("how", "ttl"), [("full", None), ("left", 2)])
def test_restored_in_the_middle_the_operator_goes_on_as_if_never_stopped(how, ttl):
    windows = operator_windows(60, lambda w: range(8), seed=4)
    whole_op, whole_ctx = new_operator(how, ttl)
    whole = run_operator(whole_op, whole_ctx, windows)
    first_op, first_ctx = new_operator(how, ttl)
    snapshots = Snapshots()
    run_operator(first_op, first_ctx, windows[:37], snapshots)
    run_operator(first_op, first_ctx, windows[37:41])  # windows never snapshotted: lost
    op, ctx = new_operator(how, ttl)
    snapshots.restore_into(ctx.state)
    op.restored()
    resumed = run_operator(op, ctx, windows[37:])
    assert resumed == {w: whole[w] for w in range(38, 61)}
