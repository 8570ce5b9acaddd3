"""Snapshot benchmark, recovery: a job script killed after a commit, restored and resumed."""

from __future__ import annotations

import gc
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from _common import DEFAULT_SEED, format_seconds, print_table
from _snapshot_jobs import (
    RECOVERY_CRASH_WINDOW,
    RECOVERY_LOAD_WINDOWS,
    RECOVERY_UPDATE_WINDOWS,
    CheckError,
    err,
    fresh_dir,
    out,
)

from gyreflow.state.stores.rocksdb import RocksDBSnapshotStore

RECOVERY_SCRIPT = '''\
"""Recovery benchmark job, written by benchmarks/snapshots.py: builds KEYS keys of rocksdb state
over a few windows, then updates 1% of them per window. Prints `event window monotonic-time`."""

import time

STARTED = time.monotonic()

import random  # noqa: E402
import sys  # noqa: E402

from gyreflow.api import Environment, SizeTumblingWindow  # noqa: E402
from gyreflow.api.connectors.sinks import Sink, SinkWriter  # noqa: E402

LOAD_WINDOWS = {load_windows}
UPDATE_WINDOWS = {update_windows}
SEED = {seed}


def key_name(i):
    return f"key-{{i:07d}}"


def items(keys):
    per = -(-keys // LOAD_WINDOWS)
    out = [("load", lo, min(lo + per, keys)) for lo in range(0, keys, per)]
    out += [("update", keys, len(out) + w + 1) for w in range(UPDATE_WINDOWS)]
    return out


def expand(item):
    if item[0] == "load":
        return [(key_name(i), 0) for i in range(item[1], item[2])]
    _, keys, window = item
    rng = random.Random(SEED + window)
    return [(key_name(i), window) for i in rng.sample(range(keys), max(1, keys // 100))]


def report(event, value=0, at=None):
    print(f"{{event}} {{value}} {{time.monotonic() if at is None else at:.6f}}", flush=True)


class _Writer(SinkWriter):
    def write(self, window, records):
        pass

    def finish_window(self, window):
        report("finished", window)

    def publish(self, window):
        report("committed", window)


class ReportSink(Sink):
    default_parallelism = 1

    def create_writer(self, task_index, parallelism):
        return _Writer()


def main(state_path, keys):
    report("started", 0, STARTED)
    report("imported", 0)
    first = []

    def timed_expand(item):
        if not first:
            first.append(True)
            report("first-record", 0)
        return expand(item)

    env = Environment.local(config={{"state.backend": "rocksdb", "state.path": state_path,
                                     "progress.enabled": False}})
    pipeline = env.pipeline("recovery")

    @pipeline.task
    def build(ctx):
        (ctx.source(items(keys), SizeTumblingWindow(1))
            .flat_map(timed_expand)
            .key_by(lambda kv: kv[0])
            .reduce(lambda old, new: new)
            .sink(ReportSink()))

    (_, graph, _), = pipeline.plans()
    print("table", [v.name for v in graph.vertices if v.spec.keyed][0], flush=True)
    result = pipeline.execute(resume=True)
    report("done", result["build"].last_completed)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
'''

RECOVERY_JOB = "recovery/build"


def load_recovery_module(path: Path):
    spec = importlib.util.spec_from_file_location("gyreflow_bench_recovery_job", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def recovery_oracle(module, keys: int, windows: int) -> dict:
    state: dict = {}
    for item in module.items(keys)[:windows]:
        state.update(module.expand(item))
    return {k: (k, v) for k, v in state.items()}


@dataclass
class Timeline:
    """What the job script printed: event -> (window, monotonic time) of its first occurrence."""

    start: float
    events: dict[str, tuple[int, float]]
    table: str
    returncode: int

    def at(self, event: str) -> float:
        return self.events[event][1] - self.start

    def window(self, event: str) -> int:
        return self.events[event][0]


def run_job(script: Path, state: str, keys: int, crash: str | None = None) -> Timeline:
    env = dict(os.environ)
    env.pop("GYREFLOW_CRASH_AT", None)
    if crash:
        env["GYREFLOW_CRASH_AT"] = crash
    start = time.monotonic()
    proc = subprocess.run([sys.executable, str(script), state, str(keys)], env=env,
                          capture_output=True, text=True, check=False)
    events: dict[str, tuple[int, float]] = {}
    table = ""
    for line in proc.stdout.splitlines():
        parts = line.split()
        if parts[:1] == ["table"]:
            table = parts[1]
        elif len(parts) == 3:
            events.setdefault(parts[0], (int(parts[1]), float(parts[2])))
    if crash is None and proc.returncode != 0:
        msg = f"recovery job failed ({proc.returncode}):\n{proc.stderr[-2000:]}"
        raise CheckError(msg)
    return Timeline(start, events, table, proc.returncode)


def restore(state: str, table: str, version: int) -> tuple[float, float, dict]:
    """Read ``table`` back as the resumed job's rollback does. Returns (seconds to open the
    database and read key group 0, ``read_into`` seconds for every key group, the restored dict).
    The first open of a killed job's database replays its write-ahead log."""
    store = RocksDBSnapshotStore(state)
    data: dict = {}
    collecting = gc.isenabled()
    gc.disable()  # as Task.rollback does
    try:
        start = time.perf_counter()
        store.read_into(RECOVERY_JOB, table, range(1), version, {})  # opens the database
        opened = time.perf_counter()
        store.read_into(RECOVERY_JOB, table, range(128), version, data)
        done = time.perf_counter()
    finally:
        store.close()
        if collecting:
            gc.enable()
    return opened - start, done - opened, data


def run_recovery(args, work: Path, keys: int) -> tuple[str, list[str], float]:
    script = work / "recovery_job.py"
    script.write_text(RECOVERY_SCRIPT.format(load_windows=RECOVERY_LOAD_WINDOWS,
                                             update_windows=RECOVERY_UPDATE_WINDOWS,
                                             seed=DEFAULT_SEED), encoding="utf-8")
    module = load_recovery_module(script)
    windows = RECOVERY_LOAD_WINDOWS + RECOVERY_UPDATE_WINDOWS
    crashed = fresh_dir(work, "recovery-crashed-")
    crash = f"after-commit:{RECOVERY_CRASH_WINDOW}"
    err.print(f"[dim]recovery: building {keys:,} keys with rocksdb, killed at {crash}...[/dim]")
    build = run_job(script, crashed, keys, crash)
    if build.returncode != -signal.SIGKILL:
        msg = f"the job was not killed at {crash} (exit code {build.returncode})"
        raise CheckError(msg)
    # Everything below works on copies: each restore and each resumed job starts from the state
    # exactly as the kill left it (the first open of a RocksDB database replays its write-ahead
    # log and flushes it).
    def copy_of_crashed(prefix: str) -> str:
        path = fresh_dir(work, prefix)
        shutil.copytree(crashed, path, dirs_exist_ok=True)
        return path

    inspected = copy_of_crashed("recovery-inspected-")
    store = RocksDBSnapshotStore(inspected)
    try:
        meta = store.read_meta(RECOVERY_JOB)
    finally:
        store.close()
        shutil.rmtree(inspected, ignore_errors=True)
    # Commits the writer process had already been sent may land before it dies with the job,
    # so the state can be committed past the crash window; the resume continues after it.
    if meta is None or not RECOVERY_CRASH_WINDOW <= meta.last_completed < windows:
        msg = (f"expected windows {RECOVERY_CRASH_WINDOW}..{windows - 1} committed before the "
               f"kill, meta: {meta}")
        raise CheckError(msg)
    committed = meta.last_completed
    table = build.table
    at_crash = recovery_oracle(module, keys, committed)

    opens, reads = [], []
    for rep in range(args.repeat):
        inspected = copy_of_crashed("recovery-inspected-")
        opened, read, data = restore(inspected, table, committed)
        shutil.rmtree(inspected, ignore_errors=True)
        if data != at_crash:
            msg = "restored state differs from the oracle at the crash window"
            raise CheckError(msg)
        del data
        opens.append(opened)
        reads.append(read)
        err.print(f"[dim]recovery, repetition {rep + 1}/{args.repeat}: pure restore "
                  f"{opened + read:.3f} s[/dim]")
    totals = [sum(t) for t in zip(opens, reads, strict=True)]
    best_restore = totals.index(min(totals))

    resumed: list[Timeline] = []
    final = recovery_oracle(module, keys, windows)
    for rep in range(args.repeat):
        state = copy_of_crashed("recovery-resumed-")
        timeline = run_job(script, state, keys)
        first = committed + 1
        # A commit covers every window up to it: the first may be committed with the next.
        if timeline.window("finished") != first or timeline.window("committed") < first:
            msg = f"resumed job's first window was not {first}: {timeline.events}"
            raise CheckError(msg)
        if timeline.window("done") != windows:
            msg = f"resumed job ended at window {timeline.window('done')}, expected {windows}"
            raise CheckError(msg)
        if rep == 0:
            *_, data = restore(state, table, windows)
            if data != final:
                msg = "the resumed job's final state differs from the oracle"
                raise CheckError(msg)
            del data
        resumed.append(timeline)
        err.print(f"[dim]recovery, repetition {rep + 1}/{args.repeat}: first new window "
                  f"completed after {timeline.at('committed'):.3f} s[/dim]")
        shutil.rmtree(state, ignore_errors=True)
    best = min(resumed, key=lambda t: t.at("committed"))
    total = best.at("committed")

    rows = [
        ["start the Python process (to the script's first line)",
         format_seconds(best.at("started"))],
        ["import gyreflow", format_seconds(best.at("imported") - best.at("started"))],
        ["open store, restore state, seek source (to the first record of the window)",
         format_seconds(best.at("first-record") - best.at("imported"))],
        [f"compute window {committed + 1} (the first after the resume point)",
         format_seconds(best.at("finished") - best.at("first-record"))],
        ["snapshot and commit it (starts the writer process)",
         format_seconds(best.at("committed") - best.at("finished"))],
        ["total: process start to first new window completed", format_seconds(total)],
        ["pure restore: open the killed job's database (replays its write-ahead log)",
         format_seconds(opens[best_restore])],
        ["pure restore: store.read_into of every key group (read and unpickle into a dict)",
         format_seconds(reads[best_restore])],
        ["pure restore: total", format_seconds(totals[best_restore])],
    ]
    table_md = print_table(f"Recovery of {keys:,} keys from rocksdb",
                           ["phase", "seconds"], rows, justify=["left", "right"], console=out)
    notes = [
        f"A job script (flat_map, key_by, keyed reduce, a sink printing timestamps) builds "
        f"{keys:,} keys of rocksdb state in {RECOVERY_LOAD_WINDOWS} windows, then changes 1% of "
        f"the keys per window for {RECOVERY_UPDATE_WINDOWS} more windows. It runs in a "
        f"subprocess with GYREFLOW_CRASH_AT={crash}: it is killed (SIGKILL) as soon as window "
        f"{RECOVERY_CRASH_WINDOW}'s commit is durable; later windows may have been computed, "
        "and commits already sent to the writer process may still land before it dies with "
        f"the job: this run's state was committed up to window {committed}, so the resumed "
        f"job continues with window {committed + 1}.",
        "The resumed process runs the same script with `execute(resume=True)`; times are "
        "from just before starting it (subprocess) to events it prints with time.monotonic(). "
        f"\"Completed\" = window {committed + 1}'s snapshot committed (its sink "
        f"published). Best of {args.repeat} resumes, each on a fresh copy of the killed job's "
        "state directory (warm page cache); the first resume's final state was checked "
        "against an oracle. Its restore phase covers opening the store (replaying the killed "
        "writer's write-ahead log), discarding the uncommitted windows and `Task.rollback` "
        "reading and decoding every key.",
        "Pure restore: in this process, on a fresh copy of the killed job's state: open its "
        "range database (time to restore key group 0), then `RocksDBSnapshotStore.read_into` "
        f"of all key groups at window {committed} into a dict, with the cyclic garbage "
        f"collector paused, as `Task.rollback` does; best of {args.repeat}, checked against the "
        f"oracle: {reads[best_restore] / keys * 1e6:.2f} µs per key. The state is stored as one "
        "chunk per key group and version (keys pickled in one list, values in another), so a "
        "key group is read with a few `loads` calls, not two per key.",
    ]
    return table_md, notes, total
