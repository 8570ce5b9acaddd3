"""The changing graph's logged store in a real run: a job of many small windows on 2 key groups fills
level 0 and merges it into level 1; SIGKILLed there and resumed, its output is
the uninterrupted run's, and the graph read back from its state at a retained window is that
version's graph (oracle: the input folded in plain Python)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import graph_reference as ref
import pytest
from test_graph_recovery import KILLED, environ, fold, read_dir, run_job

pytestmark = pytest.mark.processes

WINDOW = 200  # lines a window
WINDOWS = 80


def make_lines(seed: int = 31) -> list[tuple]:
    """Window 1: 200 edges over 150 ids; then per window one new edge and one removal of a present
    edge among removals of absent ones (which change nothing): the graph's two key groups each
    change by a few halves a window, so level 0 fills (window 34) and merges into level 1 before
    the changes weigh as much as the base."""
    rng = random.Random(seed)
    present: list[tuple[int, int]] = []
    lines: list[tuple] = []
    for _ in range(WINDOW):
        edge = (rng.randrange(150), rng.randrange(150))
        present.append(edge)
        lines.append(edge)
    for _ in range(WINDOWS - 1):
        edge = (rng.randrange(150), rng.randrange(150))
        present.append(edge)
        window = [edge, ("-", *present.pop(rng.randrange(len(present) - 1)))]
        window += [("-", 1000 + i, 2000 + i) for i in range(WINDOW - 2)]
        lines += window
    return lines


def versions(lines: list[tuple]) -> dict[int, tuple[list, list]]:
    """Each window's version as ``(vertices seen, edges)``: a removal takes every edge between its
    two ids."""
    edges: list = []
    seen: dict = {}
    found = {}
    for window in range(1, WINDOWS + 1):
        for line in lines[(window - 1) * WINDOW:window * WINDOW]:
            if line[0] == "-":
                pair = {line[1], line[2]}
                edges = [e for e in edges if {e[0], e[1]} != pair]
            else:
                edges.append(line)
                seen.update(dict.fromkeys(line))
        found[window] = (list(seen), list(edges))
    return found


@pytest.fixture(scope="module")
def small_windows(tmp_path_factory):
    lines = make_lines()
    path = tmp_path_factory.mktemp("store-input") / "changes.txt"
    path.write_text("".join(" ".join(map(str, line)) + "\n" for line in lines), encoding="utf-8")
    by_window = versions(lines)
    oracle = {w: ref.wcc(*version) for w, version in by_window.items()}
    return path, by_window, oracle


def store_env(tmp_path, **more) -> dict[str, str]:
    return {"GYREFLOW_STATE__BACKEND": "rocksdb", "GYREFLOW_STATE__PATH": str(tmp_path / "state"),
            "GYREFLOW_STATE__MAX_PARALLELISM": "2", "GYREFLOW_STATE__RETAINED_SNAPSHOTS": "100",
            **more}


@pytest.mark.parametrize("moment", ["window-finished:40", "before-commit:70"])
def test_killed_after_levels_merged_the_resumed_output_is_exact(small_windows, tmp_path, moment):
    path, _, oracle = small_windows
    out = tmp_path / "out"
    args = ["--edges", str(path), "--window", str(WINDOW), "--output", str(out),
            "--parallelism", "1"]
    crashed = run_job(args, store_env(tmp_path, GYREFLOW_CRASH_AT=moment))
    assert crashed.returncode == KILLED, crashed.stderr
    resumed = run_job(args, store_env(tmp_path), ("--resume",))
    assert resumed.returncode == 0, resumed.stderr
    assert fold(read_dir(out), WINDOWS) == oracle


def test_the_stored_graph_at_retained_windows_is_that_versions_graph(small_windows, tmp_path):
    path, by_window, _ = small_windows
    done = run_job(["--edges", str(path), "--window", str(WINDOW), "--output",
                    str(tmp_path / "out"), "--parallelism", "1"], store_env(tmp_path))
    assert done.returncode == 0, done.stderr
    for window in (3, 33, 34, 66, 67, WINDOWS):
        command = [sys.executable, "-m", "gyreflow", "query", "incremental-wcc/incremental_wcc",
                   "MATCH (a)-[]-(b) RETURN a AS v, b AS w", "--window", str(window)]
        found = subprocess.run(command, env=environ(store_env(tmp_path)), capture_output=True,
                               text=True, timeout=120, check=False)
        assert found.returncode == 0, found.stderr
        pairs = {(row["v"], row["w"]) for row in map(json.loads, found.stdout.splitlines())}
        edges = [(a, b) for a, b in by_window[window][1] if a != b]
        want = {(a, b) for a, b in edges} | {(b, a) for a, b in edges}
        pairs = {(v, w) for v, w in pairs if v != w}
        assert pairs == want, window
    # the versions read above were stored as a base and logged changes, level 1 included
    state = subprocess.run(
        [sys.executable, "-c", LEVELS, str(tmp_path / "state")], env=environ(store_env(tmp_path)),
        capture_output=True, text=True, timeout=120, check=False)
    assert state.returncode == 0, state.stderr
    assert json.loads(state.stdout) == {"level 0": True, "level 1": True}


LEVELS = """
import json, sys
from gyreflow.api.config.loading import Config
from gyreflow.state.backends import backend_from_config
from gyreflow.state.keys.logged import LEVEL, slot_keys

store = backend_from_config(Config.load(None)).open_store()
data = {}
for table in ("incremental-wcc:chunks", "incremental-wcc:chunks:log"):
    store.read_into("incremental-wcc/incremental_wcc", table, range(2), 40, data)
slots = slot_keys(2)
print(json.dumps({"level 0": any(s[1] in data for s in slots),
                  "level 1": any(s[1 + LEVEL] in data for s in slots)}))
store.close()
"""


# Levels 0 and 1 of 4 slots and a level 2 of 1, in every process of the run (the job, its
# snapshot writer, ``gyreflow query`` and the reading script): a level-2 slot comes within about
# 30 windows and a fold by count about 30 later, so a run of 80 windows holds both.
SMALL_LEVELS = "import gyreflow.state.keys.logged as logged\nlogged.LEVEL, logged.LEVEL2 = 4, 1\n"

SLOTS_IN_USE = """
import json, sys
from gyreflow.api.config.loading import Config
from gyreflow.state.backends import backend_from_config
from gyreflow.state.keys.logged import LEVEL, LEVEL2, slot_keys

store = backend_from_config(Config.load(None)).open_store()
slots = slot_keys(2)
found = {}
for window in range(1, int(sys.argv[1]) + 1):
    data = {}
    for table in ("incremental-wcc:chunks", "incremental-wcc:chunks:log"):
        store.read_into("incremental-wcc/incremental_wcc", table, range(2), window, data)
    found[window] = [[sum(slot in data for slot in slots[group][first:last])
                      for first, last in ((1, 1 + LEVEL), (1 + LEVEL, 1 + 2 * LEVEL),
                                          (1 + 2 * LEVEL, 1 + 2 * LEVEL + LEVEL2))]
                     for group in range(2)]
print(json.dumps(found))
store.close()
"""
"""Prints, for windows 1 to argv[1], the logged slots of each of the job's 2 key groups by level
(0, 1, 2) in the version of that window."""


def small_levels_env(tmp_path, backend: str) -> dict[str, str]:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SMALL_LEVELS, encoding="utf-8")
    paths = [str(site), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = store_env(tmp_path, PYTHONPATH=os.pathsep.join(paths))
    if backend == "sqlite":
        env.update({"GYREFLOW_STATE__BACKEND": "jdbc",
                    "GYREFLOW_STATE__URL": f"sqlite:///{tmp_path / 'state.db'}"})
    return env


def stored_pairs(env: dict[str, str], window: int) -> set[tuple[int, int]]:
    command = [sys.executable, "-m", "gyreflow", "query", "incremental-wcc/incremental_wcc",
               "MATCH (a)-[]-(b) RETURN a AS v, b AS w", "--window", str(window)]
    found = subprocess.run(command, env=environ(env), capture_output=True, text=True,
                           timeout=120, check=False)
    assert found.returncode == 0, found.stderr
    pairs = {(row["v"], row["w"]) for row in map(json.loads, found.stdout.splitlines())}
    return {(v, w) for v, w in pairs if v != w}


@pytest.mark.parametrize("backend", ["rocksdb", "sqlite"])
def test_level_two_and_its_fold_read_back_every_version_after_a_kill(small_windows, tmp_path,
                                                                      backend):
    """A run killed after its level-1 slots moved up to level 2 resumes to the uninterrupted
    output, and the graph read back at windows holding level-2 slots, at the fold that removed
    them and at the end is that version's graph (oracle: the input folded in plain Python)."""
    path, by_window, oracle = small_windows
    env = small_levels_env(tmp_path, backend)
    out = tmp_path / "out"
    args = ["--edges", str(path), "--window", str(WINDOW), "--output", str(out),
            "--parallelism", "1"]
    crashed = run_job(args, {**env, "GYREFLOW_CRASH_AT": "window-finished:45"})
    assert crashed.returncode == KILLED, crashed.stderr
    resumed = run_job(args, env, ("--resume",))
    assert resumed.returncode == 0, resumed.stderr
    assert fold(read_dir(out), WINDOWS) == oracle
    used = subprocess.run([sys.executable, "-c", SLOTS_IN_USE, str(WINDOWS)], env=environ(env),
                          capture_output=True, text=True, timeout=120, check=False)
    assert used.returncode == 0, used.stderr
    levels = {int(w): [sum(level) for level in zip(*groups, strict=True)]
              for w, groups in json.loads(used.stdout).items()}
    with_level_two = [w for w, counts in levels.items() if counts[2]]
    folds = [w for w in range(2, WINDOWS + 1) if levels[w][2] < levels[w - 1][2]]
    assert with_level_two, levels
    assert folds, levels  # a group's level 2 was folded into a new base within the run
    for window in sorted({with_level_two[0], with_level_two[-1], folds[0] - 1, folds[0],
                          WINDOWS}):
        edges = [(a, b) for a, b in by_window[window][1] if a != b]
        assert stored_pairs(env, window) == {(a, b) for a, b in edges} | {
            (b, a) for a, b in edges}, window
