"""Errors users see: failing user functions, bad keys, bad configuration and API misuse."""

from __future__ import annotations

import json
import os
import pickle
import re
import sqlite3
from collections import Counter

import pytest
from _spark_master import ON_CLUSTER

from gyreflow.api import (
    AggregateFunction,
    ConfigError,
    Environment,
    GeneratorSource,
    SizeTumblingWindow,
    UserFunctionError,
)
from gyreflow.api.config import ENVIRONMENT_TYPES, STATE_BACKENDS
from gyreflow.runtime.errors import SnapshotNotRetainedError, SnapshotWriteError
from gyreflow.state.backends import backend_from_config
from gyreflow.state.shared.snapshot import SnapshotCorruptedError


def run(env, build, name: str = "job"):
    pipeline = env.pipeline("errors")
    pipeline.task(build, name=name)
    return pipeline.execute()[name]


class BoomError(Exception):
    """The user's own exception type."""


WINDOW = 4
DATA = list(range(20))
BAD = 13
BAD_WINDOW = BAD // WINDOW + 1  # by definition of SizeTumblingWindow with one source task


def fail_on_bad(x):
    if x == BAD:
        raise BoomError(f"cannot handle {x}")
    return x


def check_error(error: UserFunctionError, operator: str, window: int, record: object,
                text: str, *, user_frames: bool = True) -> None:
    assert error.operator == operator
    assert error.window == window
    assert error.record == record
    assert isinstance(error.task, str) and error.task
    message = str(error)
    assert repr(operator) in message
    assert f"window {window}" in message
    assert error.task in message
    assert repr(record) in message
    assert text in message
    assert text in error.original_traceback
    # Only the user's own frames: none of gyreflow's (a function that returned a wrong value,
    # which gyreflow's code then stumbled on, has none to show).
    assert ("Traceback" in error.original_traceback) is user_frames
    assert "gyreflow" not in error.original_traceback and "/runtime/" not in error.original_traceback


# --- user functions ----------------------------------------------------------------------------


@pytest.mark.parametrize("parallelism", [1, 3])
@pytest.mark.parametrize("batch_size", [1, 3, 1024])
def test_failing_map_names_operator_window_task_and_record(make_env, parallelism, batch_size):
    env = make_env(parallelism, **{"runtime.batch_size": batch_size})
    with pytest.raises(UserFunctionError) as info:
        run(env, lambda ctx: ctx.source(DATA, SizeTumblingWindow(WINDOW), parallelism=1)
            .map(fail_on_bad).with_name("parse").collect("out"))
    error = info.value
    check_error(error, "parse", BAD_WINDOW, BAD, f"cannot handle {BAD}")
    assert "parse" in error.task
    # On a cluster the function's module travels by value, so its exception class comes back as
    # the text of the error, which still names it.
    assert isinstance(error.cause, BoomError) or (
        ON_CLUSTER and str(error.cause).startswith("BoomError: "))
    assert "fail_on_bad" in error.original_traceback
    assert re.search(rf"\[\d+/{parallelism}\]$", error.task)


def test_failing_function_in_a_parallel_source_task(make_env):
    # With p source tasks, record x is read by task x % p, in window (x // p) // size + 1.
    env = make_env(2)
    with pytest.raises(UserFunctionError) as info:
        run(env, lambda ctx: ctx.source(DATA, SizeTumblingWindow(3))
            .map(fail_on_bad).with_name("parse").collect("out"))
    error = info.value
    check_error(error, "parse", (BAD // 2) // 3 + 1, BAD, f"cannot handle {BAD}")
    assert error.task.endswith(f"[{BAD % 2 + 1}/2]")


@pytest.mark.parametrize("operation", ["filter", "flat_map"])
@pytest.mark.parametrize("parallelism", [1, 2])
def test_failing_filter_and_flat_map(make_env, operation, parallelism):
    def fn(x):
        fail_on_bad(x)
        return [x] if operation == "flat_map" else True

    def build(ctx):
        stream = ctx.source(DATA, SizeTumblingWindow(WINDOW), parallelism=1)
        getattr(stream, operation)(fn).with_name("step").collect("out")

    with pytest.raises(UserFunctionError) as info:
        run(make_env(parallelism, **{"runtime.batch_size": 2}), build)
    check_error(info.value, "step", BAD_WINDOW, BAD, f"cannot handle {BAD}")


def test_flat_map_returning_a_non_iterable(make_env):
    with pytest.raises(UserFunctionError) as info:
        run(make_env(1), lambda ctx: ctx.source(DATA, SizeTumblingWindow(WINDOW))
            .flat_map(lambda x: None if x == BAD else [x]).with_name("explode").collect())
    check_error(info.value, "explode", BAD_WINDOW, BAD, "not iterable", user_frames=False)


@pytest.mark.parametrize("parallelism", [1, 3])
def test_failing_reduce_function(make_env, parallelism):
    def add(a, b):
        fail_on_bad(b)
        return a + b

    with pytest.raises(UserFunctionError) as info:
        run(make_env(parallelism), lambda ctx: ctx.source(DATA, SizeTumblingWindow(WINDOW),
                                                          parallelism=1)
            .key_by(lambda x: x % 2).reduce(add).with_name("total").collect())
    check_error(info.value, "total", BAD_WINDOW, BAD, f"cannot handle {BAD}")


@pytest.mark.parametrize("parallelism", [1, 3])
def test_failing_key_function(make_env, parallelism):
    def key(x):
        fail_on_bad(x)
        return x % 2

    with pytest.raises(UserFunctionError) as info:
        run(make_env(parallelism), lambda ctx: ctx.source(DATA, SizeTumblingWindow(WINDOW),
                                                          parallelism=1)
            .key_by(key).reduce(lambda a, b: a + b).with_name("total").collect())
    error = info.value
    assert "total" in error.operator
    assert error.window == BAD_WINDOW
    assert error.record == BAD
    assert f"cannot handle {BAD}" in str(error)


class FragileSum(AggregateFunction):
    def init(self):
        return 0

    def add(self, acc, record):
        fail_on_bad(record)
        return acc + record

    def merge(self, left, right):
        return left + right

    def result(self, acc):
        return acc


@pytest.mark.parametrize("parallelism", [1, 2])
def test_failing_aggregate_add(make_env, parallelism):
    with pytest.raises(UserFunctionError) as info:
        run(make_env(parallelism), lambda ctx: ctx.source(DATA, SizeTumblingWindow(WINDOW),
                                                          parallelism=1)
            .key_by(lambda x: x % 3).aggregate(FragileSum()).with_name("agg").collect())
    check_error(info.value, "agg", BAD_WINDOW, BAD, f"cannot handle {BAD}")


@pytest.mark.parametrize("parallelism", [1, 2])
def test_failing_join_function(make_env, parallelism):
    def pair(lrec, rrec):
        fail_on_bad(lrec)
        return (lrec, rrec)

    def build(ctx):
        left = ctx.source(DATA, SizeTumblingWindow(WINDOW), parallelism=1).key_by(lambda x: x)
        right = ctx.source(DATA, SizeTumblingWindow(WINDOW), parallelism=1).key_by(lambda x: x)
        left.join(right, pair).with_name("match").collect()

    with pytest.raises(UserFunctionError) as info:
        run(make_env(parallelism), build)
    error = info.value
    assert error.operator == "match"
    assert error.window == BAD_WINDOW
    assert error.record == (BAD, BAD)  # the failing (left, right) pair
    assert f"cannot handle {BAD}" in str(error)


def test_user_function_error_survives_pickling(make_env):
    with pytest.raises(UserFunctionError) as info:
        run(make_env(1), lambda ctx: ctx.source(DATA, SizeTumblingWindow(WINDOW))
            .map(fail_on_bad).with_name("parse").collect())
    copy = pickle.loads(pickle.dumps(info.value))
    assert isinstance(copy, UserFunctionError)
    assert (copy.operator, copy.window, copy.task, copy.record) == (
        "parse", BAD_WINDOW, info.value.task, BAD)
    assert copy.original_traceback == info.value.original_traceback
    assert f"cannot handle {BAD}" in str(copy)


# --- keys --------------------------------------------------------------------------------------


@pytest.mark.parametrize("parallelism", [1, 2, 4])
def test_list_key_is_rejected_naming_the_key_type(make_env, parallelism):
    with pytest.raises(Exception) as info:
        run(make_env(parallelism), lambda ctx: ctx.source(DATA, parallelism=1)
            .key_by(lambda x: [x, x]).reduce(lambda a, b: a).with_name("total").collect())
    assert re.search(r"\blist\b", str(info.value)), str(info.value)


@pytest.mark.parametrize("parallelism", [2, 4])
@pytest.mark.parametrize(("make_key", "type_name"),
                         [(lambda x: frozenset([x]), "frozenset"), (lambda x: object(), "object")])
def test_unsupported_key_type_is_rejected_when_partitioning(make_env, parallelism, make_key,
                                                            type_name):
    with pytest.raises(Exception) as info:
        run(make_env(parallelism), lambda ctx: ctx.source(DATA, parallelism=1)
            .key_by(make_key).reduce(lambda a, b: a).collect())
    assert f"of type {type_name}" in str(info.value)


# --- configuration -----------------------------------------------------------------------------


class CallLog:
    """Records generator calls in a file, so calls made in Spark worker processes are seen too."""

    def __init__(self, path) -> None:
        self.path = str(path)

    def append(self, call) -> None:
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(call) + "\n")

    def entries(self) -> list:
        if not os.path.exists(self.path):
            return []
        with open(self.path, encoding="utf-8") as handle:
            return [tuple(json.loads(line)) for line in handle]

    def __eq__(self, other) -> bool:
        return self.entries() == list(other)


def tracked_generator(tmp_path):
    calls = CallLog(tmp_path / "generator-calls.jsonl")

    def factory(task_index, parallelism):
        calls.append((task_index, parallelism))
        yield from range(5)

    return GeneratorSource(factory), calls


@pytest.mark.parametrize(("overrides", "expected"), [
    ({"runtime.batchsize": 3}, ["runtime.batchsize", "batch_size"]),
    ({"nosection.key": 1}, ["nosection", "runtime", "state", "environment"]),
    ({"state.backend": "no-such-backend"}, ["no-such-backend", "valid choices", *STATE_BACKENDS]),
    ({"environment.type": "no-such-env"}, ["no-such-env", "valid choices", *ENVIRONMENT_TYPES]),
    ({"scheduler.max_flying_windows": 0}, ["max_flying_windows", "at least 1"]),
    ({"runtime.batch_size": "ten"}, ["batch_size", "int"]),
])
def test_bad_config_raises_config_error_before_any_data_moves(make_env, overrides, expected,
                                                             tmp_path):
    source, calls = tracked_generator(tmp_path)
    with pytest.raises(ConfigError) as info:
        env = make_env(2, **overrides)
        run(env, lambda ctx: ctx.source(source).collect())
    message = str(info.value)
    for text in expected:
        assert text in message, message
    assert calls == []


def test_bad_config_from_environment_variable(make_env, monkeypatch, tmp_path):
    monkeypatch.setenv("GYREFLOW_STATE__BACKEND", "nowhere")
    source, calls = tracked_generator(tmp_path)
    with pytest.raises(ConfigError) as info:
        run(make_env(1), lambda ctx: ctx.source(source).collect())
    for text in ("GYREFLOW_STATE__BACKEND", "nowhere", "valid choices", *STATE_BACKENDS):
        assert text in str(info.value)
    assert calls == []


def test_good_config_does_run_the_tracked_generator(make_env, tmp_path, environment_type):
    # The counterpart of the tests above: the tracking really observes a run.
    source, calls = tracked_generator(tmp_path)
    result = run(make_env(2), lambda ctx: ctx.source(source).collect())
    if environment_type == "local":
        assert sorted(calls.entries()) == [(0, 2), (1, 2)]
    else:  # a Spark task may be built on more than one worker (its control job's, its round's)
        assert set(calls.entries()) == {(0, 2), (1, 2)}
    assert sorted(result.output("collect")) == sorted(list(range(5)) * 2)


# --- API misuse --------------------------------------------------------------------------------


def test_api_misuse_is_reported_when_building(make_env):
    env = make_env(1)

    def attempt(build):
        pipeline = env.pipeline("misuse")
        pipeline.task(build, name="job")
        return pipeline.execute

    with pytest.raises(TypeError, match="map needs a function"):
        attempt(lambda ctx: ctx.source([1]).map(3).collect())()
    with pytest.raises(ValueError, match=r"from 1 to state.max_parallelism \(128\), got 0"):
        attempt(lambda ctx: ctx.source([1]).map(str).with_parallelism(0).collect())()
    with pytest.raises(TypeError, match="keyed stream"):
        attempt(lambda ctx: ctx.source([1]).key_by(str).join(ctx.source([2])).collect())()
    with pytest.raises(TypeError, match="missing"):
        attempt(lambda ctx: ctx.source([1]).key_by(str).aggregate(object()).collect())()
    with pytest.raises(ValueError, match="no sink"):
        attempt(lambda ctx: ctx.source([1]).map(str))()
    with pytest.raises(ValueError, match="at least one other"):
        attempt(lambda ctx: ctx.source([1]).union().collect())()
    with pytest.raises(ValueError, match="unique"):
        attempt(lambda ctx: ctx.source([1]).map(str).with_name("x").map(str).with_name("x")
                .collect())()
    with pytest.raises(ValueError, match="no tasks"):
        env.pipeline("empty").execute()

    pipeline = env.pipeline("dupe")
    pipeline.task(lambda ctx: None, name="same")
    with pytest.raises(ValueError, match="already has a task"):
        pipeline.task(lambda ctx: None, name="same")


def test_window_size_must_be_positive():
    with pytest.raises(ValueError):
        SizeTumblingWindow(0)


# --- failures keep completed windows -----------------------------------------------------------

LINES_PER_WINDOW = 5
POISON_WINDOW = 6
WORD_LINES = [f"w{(i * 7) % 11} w{(i * 3) % 5}" for i in range(8 * LINES_PER_WINDOW)]
WORD_LINES[(POISON_WINDOW - 1) * LINES_PER_WINDOW + 2] = "w1 poison w2"
POISON_ON = {"on": True}


def pair_or_fail(word):
    if POISON_ON["on"] and word == "poison":
        raise BoomError("poisoned word")
    return word, 1


def count_words(ctx):
    (ctx.source(WORD_LINES, SizeTumblingWindow(LINES_PER_WINDOW), parallelism=1)
        .flat_map(str.split).map(pair_or_fail).with_name("pair")
        .key_by(lambda kv: kv[0]).reduce(lambda a, b: (a[0], a[1] + b[1])).with_name("count")
        .collect("counts"))


def running_counts() -> dict[int, dict[str, int]]:
    """Oracle: per window, the words of the window with their counts over windows 1..w."""
    totals: Counter = Counter()
    expected = {}
    for window, start in enumerate(range(0, len(WORD_LINES), LINES_PER_WINDOW), start=1):
        words = [w for line in WORD_LINES[start:start + LINES_PER_WINDOW] for w in line.split()]
        totals.update(words)
        expected[window] = {w: totals[w] for w in set(words)}
    return expected


def durable_env(tmp_path, parallelism: int, backend: str = "rocksdb"):
    return Environment.local(parallelism, progress=False, config={
        "state.backend": backend, "state.path": str(tmp_path / "state")})


def stored_last_completed(env, job: str) -> int:
    store = backend_from_config(env.config).open_store()
    try:
        meta = store.read_meta(job)
    finally:
        store.close()
    return 0 if meta is None else meta.last_completed


@pytest.mark.parametrize("parallelism", [1, 3])
def test_failure_keeps_the_windows_finished_before_it_and_resumes(tmp_path, monkeypatch,
                                                                  parallelism):
    monkeypatch.setitem(POISON_ON, "on", True)
    env = durable_env(tmp_path, parallelism)
    with pytest.raises(UserFunctionError) as info:
        run(env, count_words)
    assert info.value.window == POISON_WINDOW
    # Every window before the failing one had all its input: it completes before the job stops.
    assert stored_last_completed(env, "errors/job") == POISON_WINDOW - 1
    monkeypatch.setitem(POISON_ON, "on", False)
    pipeline = env.pipeline("errors")
    pipeline.task(count_words, name="job")
    resumed = pipeline.execute(resume=True)["job"].by_window("counts")
    expected = running_counts()
    assert {w: dict(records) for w, records in resumed.items()} == {
        w: expected[w] for w in range(POISON_WINDOW, len(expected) + 1)}


def test_from_window_that_is_not_retained_lists_the_retained_ones(tmp_path, monkeypatch):
    monkeypatch.setitem(POISON_ON, "on", False)
    env = durable_env(tmp_path, 1)
    run(env, count_words)
    pipeline = env.pipeline("errors")
    pipeline.task(count_words, name="job")
    with pytest.raises(SnapshotNotRetainedError) as info:
        pipeline.execute(resume=True, from_window=2)
    assert isinstance(info.value, ValueError)
    assert "window 2 is not a retained snapshot" in str(info.value)
    assert "retained: 7, 8" in str(info.value)  # state.retained_snapshots = 2, 8 windows
    assert stored_last_completed(env, "errors/job") == 8


def test_damaged_snapshot_names_the_window_being_restored_and_the_row(tmp_path, monkeypatch):
    monkeypatch.setitem(POISON_ON, "on", True)
    env = durable_env(tmp_path, 1, backend="jdbc")
    with pytest.raises(UserFunctionError):
        run(env, count_words)
    last = POISON_WINDOW - 1
    with sqlite3.connect(tmp_path / "state" / "snapshots.db") as conn:
        rowid, table, key_group = conn.execute(
            "SELECT rowid, tbl, kg FROM gyreflow_state WHERE version = ? ORDER BY kg, k LIMIT 1",
            (last,)).fetchone()
        conn.execute("UPDATE gyreflow_state SET v = substr(v, 1, 3) WHERE rowid = ?", (rowid,))
    pipeline = env.pipeline("errors")
    pipeline.task(count_words, name="job")
    with pytest.raises(SnapshotCorruptedError) as info:
        pipeline.execute(resume=True)
    message = str(info.value)
    assert f"could not restore window {last}" in message
    for part in ("gyreflow_state", f"tbl={table}", f"kg={key_group}", f"version={last}"):
        assert part in message, message
    assert "window 1:" not in message


def test_snapshot_write_error_names_backend_window_and_how_to_resume():
    cause = RuntimeError("write failed in jdbc:sqlite:///x.db: OperationalError: disk I/O error\n"
                         "[SQL: INSERT INTO gyreflow_state ...]")
    error = SnapshotWriteError("jdbc at sqlite:///x.db", 9, 7, cause)
    message = str(error)
    assert "writing the snapshot of window 9 (jdbc at sqlite:///x.db)" in message
    assert "disk I/O error" in message
    assert "[SQL:" not in message
    assert "last completed window is 7" in message
    assert "--resume to continue from window 8" in message
    committing = str(SnapshotWriteError("rocksdb at /s", 4, 3, OSError("no space"), True))
    assert "committing window 4 (rocksdb at /s): no space" in committing
