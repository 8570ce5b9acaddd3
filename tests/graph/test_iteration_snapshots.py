"""Iteration snapshots (``state.iteration_checkpoint_interval``): a graph computation killed inside its
supersteps resumes from the last iteration snapshot, not from superstep 1, and gives the result of an
uninterrupted run. Oracles: the LDBC Graphalytics expected files (PageRank and SSSP on the example
graphs) and a plain PageRank loop; the kill is a real SIGKILL of the driver as it is about to start
a superstep (``GYREFLOW_CRASH_AT=superstep:WINDOW.STEP``), on the local and the Spark environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import graph_reference as ref
import pytest
from test_graphalytics import DATA, check, properties, read_output

from gyreflow.plan.execution import IterationLoop
from gyreflow.scheduler.events import Done, EventKind
from gyreflow.scheduler.iteration import SAVED, IterationScheduler

ROOT = Path(__file__).resolve().parents[2]
PAGERANK = ROOT / "examples" / "pagerank.py"
SSSP = ROOT / "examples" / "shortest_paths.py"
KILLED = -9


def run(tmp_path: Path, environment: str, script: Path, args: list[str], *, every: int,
        crash: str | None = None, resume: bool = False) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    env.update({"COLUMNS": "400", "GYREFLOW_ENVIRONMENT__TYPE": environment,
                "GYREFLOW_SPARK__MASTER": "local[2]",
                "GYREFLOW_STATE__BACKEND": "rocksdb",
                "GYREFLOW_STATE__PATH": str(tmp_path / "state"),
                "GYREFLOW_STATE__ITERATION_CHECKPOINT_INTERVAL": str(every),
                # local: in the job's process (auto would fork a worker per core, whose float
                # sums follow the order messages arrive in, not bit for bit the same each run)
                "GYREFLOW_ENVIRONMENT__WORKERS": "1"})
    if crash is not None:
        env["GYREFLOW_CRASH_AT"] = crash
    flags = ["--resume", "--events", str(tmp_path / "events.jsonl")] if resume else []
    return subprocess.run([sys.executable, "-m", "gyreflow", "run", "-q", *flags, str(script),
                           "--", *args], env=env, capture_output=True, text=True, timeout=300,
                          check=False)


def restored(tmp_path: Path) -> list[int]:
    """The supersteps the resumed run went on after, from its ``--events`` log."""
    lines = (tmp_path / "events.jsonl").read_text(encoding="utf-8").splitlines()
    return [e["superstep"] for e in map(json.loads, lines) if e["event"] == "iteration_restored"]


def killed_then_resumed(tmp_path: Path, environment: str, script: Path, args: list[str], *,
                        every: int, crash: str) -> Path:
    """Kill the job at ``crash``, resume it; returns its result file."""
    first = run(tmp_path, environment, script, args, every=every, crash=crash)
    assert first.returncode == KILLED, first.stderr[-3000:]
    second = run(tmp_path, environment, script, args, every=every, resume=True)
    assert second.returncode == 0, second.stderr[-3000:]
    (result,) = Path(args[args.index("--output") + 1]).glob("window-*.txt")
    return result


def sssp_args(graph: str, out: Path) -> list[str]:
    props = properties(graph)
    args = ["--vertices", str(DATA / f"{graph}.v"), "--edges", str(DATA / f"{graph}.e"),
            "--source", props["sssp.source-vertex"], "--output", str(out)]
    return args if props["directed"] == "true" else [*args, "--undirected"]


def pagerank_args(graph: str, out: Path) -> list[str]:
    props = properties(graph)
    args = ["--vertices", str(DATA / f"{graph}.v"), "--edges", str(DATA / f"{graph}.e"),
            "--damping", props["pr.damping-factor"], "--iterations", props["pr.num-iterations"],
            "--output", str(out)]
    return args if props["directed"] == "true" else [*args, "--undirected"]


# Both algorithms locally; on Spark one of them (a Spark process each, and the iteration snapshot
# it writes and restores is the same code whatever the vertex program).
@pytest.mark.parametrize(("algorithm", "graph", "environment"), [
    ("SSSP", "example-directed", "local"),
    ("PR", "example-undirected", "local"),
    ("PR", "example-undirected", "spark"),
], ids=["SSSP-example-directed-local", "PR-example-undirected-local",
        "PR-example-undirected-spark"])
def test_a_graphalytics_computation_killed_mid_iteration_resumes_from_its_snapshot(
        environment, algorithm, graph, tmp_path):
    script, make_args = (SSSP, sssp_args) if algorithm == "SSSP" else (PAGERANK, pagerank_args)
    result = killed_then_resumed(tmp_path, environment, script, make_args(graph, tmp_path / "out"),
                                 every=1, crash="superstep:1.3")
    # Superstep 2 started with the snapshot of superstep 1; the kill came before superstep 3.
    assert restored(tmp_path) == [1]
    check(algorithm, read_output(result), DATA / f"{graph}-{algorithm}")


def write_graph(tmp_path: Path, vertices: int = 400, edges: int = 2400) -> tuple[Path, Path]:
    import random

    rng = random.Random(17)
    pairs = set()
    while len(pairs) < edges:
        src, dst = rng.randrange(vertices - 20), int(vertices * rng.random() ** 2)
        if src != dst:
            pairs.add((src, dst))
    v, e = tmp_path / "g.v", tmp_path / "g.e"
    v.write_text("".join(f"{i}\n" for i in range(vertices)), encoding="utf-8")
    e.write_text("".join(f"{s} {d}\n" for s, d in sorted(pairs)), encoding="utf-8")
    return v, e


@pytest.mark.parametrize(("every", "crash", "expected"), [
    (5, "superstep:1.17", [15]),  # killed in the 17th of 21 supersteps: goes on after the 15th
    (4, "superstep:1.10", [8]),
    (0, "superstep:1.17", []),  # no iteration snapshots: the window starts over, still exact
])
def test_pagerank_resumes_from_the_last_snapshot_and_equals_the_uninterrupted_run(
        tmp_path, every, crash, expected):
    vertices, edges = write_graph(tmp_path)
    args = ["--vertices", str(vertices), "--edges", str(edges), "--iterations", "20",
            "--parallelism", "3"]
    whole = tmp_path / "whole"
    done = run(whole, "local", PAGERANK, [*args, "--output", str(whole / "out")], every=every)
    assert done.returncode == 0, done.stderr[-3000:]
    resumed = tmp_path / "resumed"
    result = killed_then_resumed(resumed, "local", PAGERANK,
                                 [*args, "--output", str(resumed / "out")], every=every,
                                 crash=crash)
    assert restored(resumed) == expected
    (uninterrupted,) = (whole / "out").glob("window-*.txt")
    got = read_output(result)
    assert got == read_output(uninterrupted)
    ids = list(range(400))
    pairs = [tuple(map(int, line.split())) for line in edges.read_text().splitlines()]
    oracle = ref.pagerank(ids, pairs, True, 0.85, 20)
    assert all(abs(float(got[v]) - oracle[v]) <= 1e-9 * max(1.0, oracle[v]) for v in ids)


def _done(task: int, phase: EventKind, partials=(), iteration: int = 0) -> Done:
    return Done(1, task, 1, phase, iteration, partials=partials)


def test_the_scheduler_restores_the_latest_superstep_every_task_holds():
    scheduler = IterationScheduler(1, IterationLoop(0, (10, 11), max_iterations=30), every=2)
    for task in (10, 11):
        out = scheduler.handle(_done(task, EventKind.INPUT_READY))
    assert [e.kind for e in out[0].events] == [EventKind.INIT_ITERATION] * 2
    scheduler.handle(_done(10, EventKind.INIT_ITERATION, (("__vertices__", 3), (SAVED, (4, 6)))))
    out = scheduler.handle(_done(11, EventKind.INIT_ITERATION, (("__vertices__", 3), (SAVED, (4,)))))
    (send,) = out
    assert {(e.kind, e.iteration) for e in send.events} == {(EventKind.RESTORE_ITERATION, 4)}
    payload = ((("rank", 1.0),), (("rank", 2.0),))
    scheduler.handle(_done(10, EventKind.RESTORE_ITERATION, payload, 4))
    (send,) = scheduler.handle(_done(11, EventKind.RESTORE_ITERATION, payload, 4))
    assert {(e.kind, e.iteration, e.payload) for e in send.events} == {
        (EventKind.EXECUTE_COMPUTE, 5, payload)}
    assert all(e.checkpoint is False for e in send.events)  # superstep 4's snapshot exists
    for step, snapshot in ((5, False), (6, True)):  # then every 2: after supersteps 6, 8, ...
        for task in (10, 11):
            out = scheduler.handle(Done(1, task, 1, EventKind.EXECUTE_COMPUTE, step, active=1))
        assert {(e.iteration, e.checkpoint) for e in out[0].events} == {(step + 1, snapshot)}


def test_without_a_common_superstep_the_window_starts_from_superstep_one():
    scheduler = IterationScheduler(1, IterationLoop(0, (10, 11), max_iterations=30), every=2)
    for task in (10, 11):
        scheduler.handle(_done(task, EventKind.INPUT_READY))
    scheduler.handle(_done(10, EventKind.INIT_ITERATION, (("__vertices__", 3), (SAVED, (6,)))))
    (send,) = scheduler.handle(_done(11, EventKind.INIT_ITERATION, (("__vertices__", 2),)))
    assert {(e.kind, e.iteration) for e in send.events} == {(EventKind.EXECUTE_FIRST_ITERATION, 1)}
    assert {e.payload for e in send.events} == {((("__vertices__", 3),), (("__vertices__", 2),))}
