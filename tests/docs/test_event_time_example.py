"""``examples/event_time.py`` as users and tests drive it: its command line, its output files, every
state backend, local (parallelism 1 and 3) and Spark, and SIGKILL then ``--resume``; compared with
the plain-Python oracle of the rules (``event_time_oracle``)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from _postgres import POSTGRES_SECRET
from _recovery_jobs import _create_database
from event_time_oracle import expected

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "event_time.py"


def write_events(path: Path, count: int = 1_400, seed: int = 9, keys: int = 6) -> list[dict]:
    rng = random.Random(seed)
    t = 0.0
    out = []
    for _ in range(count):
        t += rng.choice([0, 0.5, 1, 1.5])
        ts = t - rng.choice([0, 0, 1, 2.5]) if rng.random() < 0.4 else t
        if rng.random() < 0.03:
            ts = t - 30
        ts = int(ts) if rng.random() < 0.5 and float(ts).is_integer() else ts
        out.append({"ts": ts, "key": f"user-{rng.randrange(keys)}", "value": rng.randrange(1000)})
    path.write_text("".join(json.dumps(e) + "\n" for e in out), encoding="utf-8")
    return out


def run(tmp_path: Path, window: str, agg: str, delay: float, *flags: str, env_type="local",
        parallelism=1, backend="rocksdb", crash_at=None, url=None, settings=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    env.update({"GYREFLOW_ENVIRONMENT__PARALLELISM": str(parallelism),
                "GYREFLOW_STATE__BACKEND": "jdbc" if backend in ("sqlite", "postgresql") else backend,
                "GYREFLOW_STATE__PATH": str(tmp_path / "state"),
                "GYREFLOW_SPARK__MASTER": "local[2]", "COLUMNS": "400"})
    if url:
        env.update({"GYREFLOW_STATE__URL": url, "GYREFLOW_STATE__SECRET": POSTGRES_SECRET})
    env.update(settings or {})
    if crash_at:
        env["GYREFLOW_CRASH_AT"] = crash_at
    return subprocess.run(
        [sys.executable, "-m", "gyreflow", "run", "--quiet", "--env", env_type, *flags,
         str(EXAMPLE), "--", "--input", str(tmp_path / "events.jsonl"), "--window", window,
         "--agg", agg, "--max-delay", str(delay), "--lines-per-window", "200",
         "--output", str(tmp_path / "out")],
        env=env, capture_output=True, text=True, timeout=600, check=False)


def read_output(tmp_path: Path):
    out = tmp_path / "out"
    names = sorted(os.listdir(out))
    assert all(n.startswith(("results-", "late-")) and n.endswith(".jsonl") for n in names), names
    lines, late = [], []
    for name in names:
        for line in (out / name).read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            if name.startswith("results-"):
                assert sorted(record) == ["end", "key", "start", "value"], record
                assert isinstance(record["value"], int)
                lines.append((record["key"], float(record["start"]), float(record["end"]),
                              record["value"]))
            else:
                late.append(record)
    return sorted(lines), sorted(late, key=json.dumps)


def oracle(data, window, agg, delay):
    lines, late = expected(data, window, agg, delay)
    return lines, sorted(late, key=json.dumps)


@pytest.mark.parametrize(("window", "agg", "parallelism", "backend"), [
    ("tumbling:10", "count", 1, "memory"),
    ("sliding:10:5", "sum", 3, "rocksdb"),
    ("session:2", "max", 3, "sqlite"),
    ("tumbling:7", "min", 1, "postgresql"),
])
def test_the_example_matches_the_oracle_locally(tmp_path, window, agg, parallelism, backend,
                                                request):
    data = write_events(tmp_path / "events.jsonl")
    url = None
    if backend == "postgresql":
        url, drop = _create_database(request.getfixturevalue("postgres_url"))
        request.addfinalizer(drop)
    flags = ("--fresh",) if backend == "postgresql" else ()
    done = run(tmp_path, window, agg, 2.0, *flags, parallelism=parallelism, backend=backend,
               url=url)
    assert done.returncode == 0, done.stderr
    got = read_output(tmp_path)
    assert got == oracle(data, window, agg, 2.0)
    assert got[1], "the input has late records"


def test_the_example_matches_the_oracle_on_spark(tmp_path):
    data = write_events(tmp_path / "events.jsonl", count=900)
    done = run(tmp_path, "session:1.5", "sum", 1.0, env_type="spark", parallelism=2)
    assert done.returncode == 0, done.stderr
    assert read_output(tmp_path) == oracle(data, "session:1.5", "sum", 1.0)


@pytest.mark.parametrize("crash_at", ["mid-window:2", "after-commit:1", "before-commit:2"])
def test_a_killed_example_resumes_to_the_uninterrupted_output(tmp_path, crash_at):
    """Open windows, their partial sums and the watermark are state: a resumed run fires exactly
    the windows an uninterrupted one fires."""
    data = write_events(tmp_path / "events.jsonl")
    done = run(tmp_path, "sliding:6:2", "sum", 2.0, parallelism=2, crash_at=crash_at)
    assert done.returncode == -signal.SIGKILL, done.stderr
    done = run(tmp_path, "sliding:6:2", "sum", 2.0, "--resume", parallelism=2)
    assert done.returncode == 0, done.stderr
    assert read_output(tmp_path) == oracle(data, "sliding:6:2", "sum", 2.0)


@pytest.mark.parametrize(("window", "agg"), [("tumbling:4", "sum"), ("sliding:4:2", "count"),
                                           ("session:1", "max")])
def test_keys_that_close_and_open_again_between_snapshots_resume_exactly(tmp_path, window, agg):
    """With ``state.snapshot_every = 3`` a snapshot holds three windows' changes: a key whose
    windows all fired (deleted from the state) and that opened a window again before the snapshot
    is written, not removed, so the resumed run fires its windows as an uninterrupted one."""
    data = write_events(tmp_path / "events.jsonl", seed=4, keys=30)
    every = {"GYREFLOW_STATE__SNAPSHOT_EVERY": "3"}
    done = run(tmp_path, window, agg, 1.0, parallelism=2, crash_at="after-commit:3",
               settings=every)
    assert done.returncode == -signal.SIGKILL, done.stderr
    done = run(tmp_path, window, agg, 1.0, "--resume", parallelism=2, settings=every)
    assert done.returncode == 0, done.stderr
    assert read_output(tmp_path) == oracle(data, window, agg, 1.0)


def test_bad_window_arguments_are_refused_with_the_choices(tmp_path):
    write_events(tmp_path / "events.jsonl", count=10)
    for window in ("hopping:5", "sliding:5:10", "tumbling:x"):
        done = run(tmp_path, window, "count", 0)
        assert done.returncode == 2, (window, done.stderr)
        assert "--window" in done.stderr and "Traceback" not in done.stderr


def test_resumed_with_other_parallelism_and_back_the_example_fires_every_window_once(
        tmp_path, environment_type):
    """Killed with 2 tasks, resumed with 3 and killed again, resumed with 2: the ranges of the
    first layout are written again after the second one deleted fired windows in between; no
    window comes back and none is lost."""
    from _environments import environment_variables

    # 15 windows of 200 lines: the last run passes window 14, where the 5 retained snapshots
    # are all its own layout's again
    data = write_events(tmp_path / "events.jsonl", count=3_000)
    settings = {**environment_variables(environment_type),
                "GYREFLOW_STATE__RETAINED_SNAPSHOTS": "5"}

    def part(parallelism: int, *flags: str, crash_at: str | None = None):
        return run(tmp_path, "sliding:6:2", "sum", 2.0, *flags, parallelism=parallelism,
                   crash_at=crash_at, settings=settings,
                   env_type=settings["GYREFLOW_ENVIRONMENT__TYPE"])

    # before-commit: nothing of window 4 or later is committed when the first run dies, so the
    # second one has windows left to commit, whatever a commit covers (on Spark a round of
    # windows can end in one commit)
    assert part(2, crash_at="before-commit:4").returncode == -signal.SIGKILL
    done = part(3, "--resume", crash_at="after-commit:9")
    assert done.returncode == -signal.SIGKILL, done.stderr
    done = part(2, "--resume")
    assert done.returncode == 0, done.stderr
    assert read_output(tmp_path) == oracle(data, "sliding:6:2", "sum", 2.0)
