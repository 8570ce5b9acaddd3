"""A changing graph SIGKILLed while a window folds its logged changes into a new base resumes to the
uninterrupted run's output.

examples/incremental_wcc.py runs on RocksDB with 2 key groups; window 1 brings 12 edges and every
later window 10 more and 2 removals, so a key group's logged changes soon weigh as much as its base
and the group folds (its chunk is written whole as the new base and its slots are removed, in the
window's snapshot). An uninterrupted run finds the first fold in the stored versions (a group with
slots at version F - 1 and none at F); then a run is killed at points of window F: in the snapshot
writer before it writes the fold's first chunk table, between the base table and the log table
(the base written, the slots not yet removed), after the snapshot is written, before and after the
meta commit. ``gyreflow run --resume`` must then give the uninterrupted run's output, which is itself
checked against the components of each window's edges computed in plain Python."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import graph_reference as ref
import pytest
from test_graph_recovery import KILLED, assert_visible_prefix, environ, fold, read_dir, run_job
from test_graph_store import SLOTS_IN_USE

pytestmark = pytest.mark.processes

WINDOW = 12  # lines a window
WINDOWS = 20

# In the snapshot writer process only: at version GYREFLOW_TEST_FOLD_VERSION, SIGKILL the job (and
# this process) just before the GYREFLOW_TEST_FOLD_WRITE-th write to a chunk table of that version.
KILLER = """
import os, signal, sys

class _After:
    def find_spec(self, name, path=None, target=None):
        if name != "gyreflow.state.stores.rocksdb" or "snapshot_writers" not in str(sys.orig_argv):
            return None
        sys.meta_path.remove(self)
        import importlib.util
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _patch(module.RocksDBSnapshotStore)

        spec.loader.exec_module = exec_module
        return spec


def _patch(store_class):
    version = int(os.environ["GYREFLOW_TEST_FOLD_VERSION"])
    kill_at = int(os.environ["GYREFLOW_TEST_FOLD_WRITE"])
    write, table_dir, open_db = store_class.write, store_class._table_dir, store_class._open
    seen = {"table": "", "writes": 0}

    class Db:
        def __init__(self, db):
            self.db = db

        def __getattr__(self, name):
            return getattr(self.db, name)

        def write(self, *args):
            if ":chunks" in seen["table"]:
                seen["writes"] += 1
                if seen["writes"] == kill_at:
                    os.kill(os.getppid(), signal.SIGKILL)
                    os._exit(1)
            return self.db.write(*args)

    def patched_write(self, snapshot):
        if snapshot.version != version:
            return write(self, snapshot)

        def watching_table_dir(job, table):
            seen["table"] = table
            return table_dir(self, job, table)

        self._table_dir = watching_table_dir
        self._open = lambda path, write=True: Db(open_db(self, path, write))
        try:
            return write(self, snapshot)
        finally:
            del self._table_dir, self._open

    store_class.write = patched_write


sys.meta_path.insert(0, _After())
"""


def make_lines(seed: int = 5) -> list[tuple]:
    """Window 1: 12 distinct edges over 60 ids; then per window 2 removals of present edges and 10
    new ones."""
    rng = random.Random(seed)
    present: list[tuple[int, int]] = []
    lines: list[tuple] = []
    for window in range(WINDOWS):
        here: list[tuple] = []
        if window:
            here += [("-", *present.pop(rng.randrange(len(present)))) for _ in range(2)]
        while len(here) < WINDOW:
            a, b = rng.randrange(60), rng.randrange(60)
            if a != b and (a, b) not in present and (b, a) not in present:
                present.append((a, b))
                here.append((a, b))
        lines += here
    return lines


def oracle(lines: list[tuple]) -> dict[int, dict[int, int]]:
    """Each window's components (smallest id) of every vertex seen so far."""
    edges: set = set()
    seen: dict = {}
    after = {}
    for window in range(1, WINDOWS + 1):
        for line in lines[(window - 1) * WINDOW:window * WINDOW]:
            if line[0] == "-":
                edges.discard((line[1], line[2]))
            else:
                edges.add(line)
                seen.update(dict.fromkeys(line))
        after[window] = ref.wcc(list(seen), sorted(edges))
    return after


def store_env(tmp_path, **more) -> dict[str, str]:
    return {"GYREFLOW_STATE__BACKEND": "rocksdb", "GYREFLOW_STATE__PATH": str(tmp_path / "state"),
            "GYREFLOW_STATE__MAX_PARALLELISM": "2", "GYREFLOW_STATE__RETAINED_SNAPSHOTS": "100",
            **more}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The input, the uninterrupted run's output (checked against the oracle) and the first
    window whose snapshot folds a key group."""
    lines = make_lines()
    folder = tmp_path_factory.mktemp("fold-kills")
    path = folder / "changes.txt"
    path.write_text("".join(" ".join(map(str, line)) + "\n" for line in lines), encoding="utf-8")
    out = folder / "out"
    done = run_job(["--edges", str(path), "--window", str(WINDOW), "--output", str(out),
                    "--parallelism", "1"], store_env(folder))
    assert done.returncode == 0, done.stderr
    output = read_dir(out)
    assert fold(output, WINDOWS) == oracle(lines)
    slots = subprocess.run([sys.executable, "-c", SLOTS_IN_USE, str(WINDOWS)],
                           env=environ(store_env(folder)), capture_output=True, text=True,
                           timeout=120, check=False)
    assert slots.returncode == 0, slots.stderr
    # slots in use per key group (the three levels together)
    by_window = {int(w): [sum(levels) for levels in groups]
                 for w, groups in json.loads(slots.stdout).items()}
    folds = [w for w in range(2, WINDOWS) for group in range(2)
             if by_window[w - 1][group] >= 2 and by_window[w][group] == 0]
    assert folds, by_window  # the input is made to fold within the run
    return path, output, folds[0]


@pytest.mark.parametrize("point", ["before-first-table", "between-tables", "snapshot-written",
                                   "before-commit", "after-commit"])
def test_killed_while_a_window_folds_the_resumed_output_is_the_uninterrupted_runs(
        uninterrupted, tmp_path, point):
    path, output, folding = uninterrupted
    out = tmp_path / "out"
    args = ["--edges", str(path), "--window", str(WINDOW), "--output", str(out),
            "--parallelism", "1"]
    if point in ("before-first-table", "between-tables"):
        killer = tmp_path / "killer"
        killer.mkdir()
        (killer / "sitecustomize.py").write_text(KILLER, encoding="utf-8")
        path_now = os.environ.get("PYTHONPATH")
        crash = {"PYTHONPATH": os.pathsep.join(filter(None, [str(killer), path_now])),
                 "GYREFLOW_TEST_FOLD_VERSION": str(folding),
                 "GYREFLOW_TEST_FOLD_WRITE": "1" if point == "before-first-table" else "2"}
    else:
        crash = {"GYREFLOW_CRASH_AT": f"{point}:{folding}"}
    crashed = run_job(args, store_env(tmp_path, **crash))
    assert crashed.returncode == KILLED, crashed.stderr
    assert_visible_prefix(out, output)
    assert len([name for name in read_dir(out) if not name.startswith(".")]) < folding
    resumed = run_job(args, store_env(tmp_path), ("--resume",))
    assert resumed.returncode == 0, resumed.stderr
    assert read_dir(out) == output
