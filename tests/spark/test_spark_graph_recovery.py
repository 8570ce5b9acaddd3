"""A growing graph on Spark survives a SIGKILL of the driver: ``--resume`` gives the uninterrupted output.

``examples/incremental_wcc.py`` runs as ``python -m gyreflow run`` on Spark (``local[2]``), where every
iteration step of a window is a Spark job of its own and the graph's state travels between them. A crash
point (``GYREFLOW_CRASH_AT=POINT:WINDOW``) SIGKILLs the driver; afterwards the visible output must be
whole files of the first windows, and after ``--resume`` (once with another graph parallelism: the
graph's state is stored by key group) it must equal an uninterrupted Spark run's, file names and lines.
The uninterrupted run is checked against a plain union-find over the edges so far
(``tests/graph_reference.py``), never against the engine.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import graph_reference as ref
import pytest
from _spark_master import ON_CLUSTER, cluster_state_env
from _spark_master import master as spark_master
from test_graph_recovery import (
    CHANGING_LINES,
    CHANGING_WINDOW,
    changing_oracle,
    make_edges,
    read_dir,
    write_changes,
)
from test_graph_recovery import fold as fold_windows

# One worker runs the tests that compare with the uninterrupted reference run, so that it is made
# once, not once per worker; the changing graph's test compares with union-find and runs anywhere.
REFERENCE_GROUP = pytest.mark.xdist_group("spark-graph-recovery")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "incremental_wcc.py"
EDGES = 300
WINDOW = 100  # 3 windows: on Spark each superstep is a job, so a window costs seconds
WINDOWS = EDGES // WINDOW
KILLED = -signal.SIGKILL
TIMEOUT = 900


def fold(files: dict[str, list[str]]) -> dict[int, dict[int, int]]:
    """The labelling after each of this test's windows (see ``test_graph_recovery.fold``)."""
    return fold_windows(files, WINDOWS)


def edges() -> list[tuple[int, int]]:
    return make_edges()[:EDGES]


def oracle() -> dict[int, dict[int, int]]:
    """For each window, the component (smallest id) of every vertex of the edges so far."""
    after = {}
    for window in range(1, WINDOWS + 1):
        so_far = edges()[:window * WINDOW]
        after[window] = ref.wcc(list(dict.fromkeys(v for edge in so_far for v in edge)), so_far)
    return after


def run_job(args: list[str], extra: dict[str, str], flags: tuple[str, ...] = ()):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    env.update({
        "COLUMNS": "400",
        "GYREFLOW_ENVIRONMENT__TYPE": "spark",
        "GYREFLOW_SPARK__MASTER": spark_master(),
        "GYREFLOW_SPARK__APP_NAME": f"gyreflow-graph-recovery-{uuid.uuid4().hex}",
        "GYREFLOW_SPARK__CONF": json.dumps({"spark.ui.enabled": "false"}),
        **extra,
    })
    command = [sys.executable, "-m", "gyreflow", "run", "--quiet", *flags, str(SCRIPT), "--", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=TIMEOUT,
                          check=False)


@pytest.fixture(scope="module")
def edge_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("spark-graph-input") / "edges.txt"
    path.write_text("".join(f"{s} {d}\n" for s, d in edges()), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def reference(edge_file, tmp_path_factory) -> dict[str, list[str]]:
    """An uninterrupted Spark run on the memory backend."""
    out = tmp_path_factory.mktemp("spark-graph-reference") / "out"
    state = {"GYREFLOW_STATE__BACKEND": "memory"}
    if ON_CLUSTER:
        state = cluster_state_env({"GYREFLOW_STATE__BACKEND": "rocksdb"}, out.parent)
    done = run_job(["--edges", str(edge_file), "--window", str(WINDOW), "--output", str(out),
                    "--parallelism", "2"], state)
    assert done.returncode == 0, done.stderr[-4000:]
    return read_dir(out)


@REFERENCE_GROUP
def test_uninterrupted_run_matches_union_find(reference):
    assert sorted(reference) == [f"window-{w:06d}.jsonl" for w in range(1, WINDOWS + 1)]
    assert fold(reference) == oracle()


@REFERENCE_GROUP
def test_the_oracle_check_can_fail(reference):
    broken = dict(reference)
    name = "window-000002.jsonl"
    broken[name] = broken[name][1:]
    with pytest.raises(AssertionError):
        assert fold(broken) == oracle()


# (backend, crash point, graph parallelism of the crashed run, of the resumed run); one worker runs
# them all, so the reference run is made once. (window-finished and before-commit are covered on
# Spark by test_spark_recovery and for graphs by test_graph_recovery.)
CASES = [
    ("rocksdb", "after-commit:2", 2, 3),  # another parallelism
    ("sqlite", "mid-publish:1", 1, 1),
]


@REFERENCE_GROUP
@pytest.mark.parametrize(("backend", "moment", "parallelism", "resume_parallelism"), CASES)
def test_driver_killed_then_resumed_equals_the_uninterrupted_run(edge_file, reference, tmp_path,
                                                                 backend, moment, parallelism,
                                                                 resume_parallelism):
    store = {"GYREFLOW_STATE__BACKEND": "rocksdb" if backend == "rocksdb" else "jdbc",
             "GYREFLOW_STATE__PATH": str(tmp_path / "state")}
    store = cluster_state_env(store, tmp_path)
    if store is None:
        pytest.skip(f"a cluster refuses {backend} state (tests/spark/test_spark_cluster.py)")
    out = tmp_path / "out"
    args = ["--edges", str(edge_file), "--window", str(WINDOW), "--output", str(out)]
    crashed = run_job([*args, "--parallelism", str(parallelism)],
                      {**store, "GYREFLOW_CRASH_AT": moment})
    assert crashed.returncode == KILLED, (
        f"crash point {moment} was armed but the driver exited {crashed.returncode}:\n"
        f"{crashed.stderr[-4000:]}")
    actual = read_dir(out)
    visible = sorted(name for name in actual if not name.startswith("."))
    assert visible == [f"window-{w:06d}.jsonl" for w in range(1, len(visible) + 1)], visible
    assert all(actual[name] == reference[name] for name in visible), "a visible file differs"
    resumed = run_job([*args, "--parallelism", str(resume_parallelism)], store, ("--resume",))
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    actual = read_dir(out)
    assert sorted(actual) == sorted(reference), "file names differ (a staged file left?)"
    different = [name for name in sorted(reference) if actual[name] != reference[name]]
    assert not different, f"files with other content than the uninterrupted run: {different}"


def test_a_changing_graph_killed_inside_a_window_resumes_to_union_find(tmp_path):
    """Edges added and removed (``- src dst`` lines): the driver SIGKILLs itself inside window 4's
    supersteps (workers mode, RocksDB, iteration snapshots every superstep); ``--resume`` with
    another graph parallelism gives, window by window, the components union-find finds on each
    version."""
    changes = write_changes(tmp_path / "changes.txt")
    store = cluster_state_env({"GYREFLOW_STATE__BACKEND": "rocksdb",
                               "GYREFLOW_STATE__PATH": str(tmp_path / "state"),
                               "GYREFLOW_STATE__ITERATION_CHECKPOINT_INTERVAL": "1"}, tmp_path)
    out = tmp_path / "out"
    args = ["--edges", str(changes), "--window", str(CHANGING_WINDOW), "--output", str(out)]
    crashed = run_job([*args, "--parallelism", "2"], {**store, "GYREFLOW_CRASH_AT": "superstep:4.2"})
    assert crashed.returncode == KILLED, crashed.stderr[-4000:]
    visible = sorted(name for name in read_dir(out) if not name.startswith("."))
    # window 3 may still be in flight beside window 4: whole files of the first windows only
    assert visible == [f"window-{w:06d}.jsonl" for w in range(1, len(visible) + 1)], visible
    assert len(visible) <= 3, visible
    resumed = run_job([*args, "--parallelism", "3"], store, ("--resume",))
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert fold_windows(read_dir(out), CHANGING_LINES // CHANGING_WINDOW) == changing_oracle()
