"""Snapshots: what per-window state snapshots cost in throughput, how snapshot time grows with the
size of the state, and how long a job with 1M keys of state takes to recover."""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import importlib.util
import math
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from _common import (
    DEFAULT_SEED,
    ROOT,
    command_line,
    format_rate,
    format_seconds,
    interleaved_best_of,
    machine_line,
    print_table,
    update_docs_section,
    word_lines,
)
from rich.console import Console

from gyreflow.api import Environment, GeneratorSource, SizeTumblingWindow
from gyreflow.api.sinks import Sink, SinkWriter
from gyreflow.state.jdbc_store import JdbcSnapshotStore, default_sqlite_url
from gyreflow.state.keygroups import key_group_of, key_group_range
from gyreflow.state.rocksdb_store import RocksDBSnapshotStore
from gyreflow.state.snapshot import JobMeta, StateRow, TaskSnapshot, dumps, loads

err = Console(stderr=True)
out = Console(width=None if sys.stdout.isatty() else 150)

# Part 1: windowed word count -------------------------------------------------------------------
VOCABULARY_SIZE = 1000
WORDS_PER_LINE = 10
WINDOW_WORDS = 100_000
WINDOW_LINES = WINDOW_WORDS // WORDS_PER_LINE
NEVER = 10**9  # state.snapshot_every larger than any window count: only the final flush happens

NONE = "no snapshots"
MEMORY = "memory"
ROCKSDB = "rocksdb"
ROCKSDB_FINAL = "rocksdb, final flush only"
SQLITE = "SQLite (jdbc)"
POSTGRES = "PostgreSQL (jdbc)"
PG_STATEMENT_TIMEOUT = 20  # seconds (3 with --quick)
THROUGHPUT_TARGET = (ROCKSDB, 0.10)  # snapshots every window may cost at most 10% of words/s

# Part 2: snapshot time vs state size -----------------------------------------------------------
STATE_SIZES = (10_000, 100_000, 1_000_000)
QUICK_STATE_SIZES = (10_000, 50_000)
CHANGE_SHARE = 0.01
FIXED_CHANGE = 1000
CHANGE_WINDOWS = 6  # per phase; the first window of each phase is not measured
DIRECT_WRITES = 9  # direct store.write calls per case (median; 5 with --quick)
SETTLE_SLEEP = 0.05
SETTLE_TIMEOUT = 300.0
SQLITE_MAX_KEYS = 100_000  # SQLite's 1M-key base write alone takes ~40 s here (10k with --quick)
SIZE_GROWTH_TARGET = 2.0  # fixed-change snapshot time from the smallest to the largest state

# Part 3: recovery ------------------------------------------------------------------------------
RECOVERY_KEYS = 1_000_000
QUICK_RECOVERY_KEYS = 50_000
RECOVERY_LOAD_WINDOWS = 4
RECOVERY_UPDATE_WINDOWS = 12  # enough that commits already queued at the kill never reach the end
RECOVERY_CRASH_WINDOW = 6  # killed once window 6's commit is durable (after-commit:6)
RECOVERY_TARGET = 3.0  # seconds from process start to the first new window completed


class CheckError(Exception):
    """A run's results differ from the oracle."""


# ---------------------------------------------------------------------------------------------
# Helpers


def fresh_dir(base: Path, prefix: str) -> str:
    """A new empty directory under ``base``."""
    return tempfile.mkdtemp(prefix=prefix, dir=base)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


def percent(share: float) -> str:
    text = f"{share * 100:.1f}%"
    return "0.0%" if text == "-0.0%" else text


def state_table(pipeline) -> tuple[str, str]:
    """(job name, keyed state table name) of a pipeline with one task and one keyed operator."""
    (name, graph, _), = pipeline.plans()
    tables = [v.name for v in graph.vertices if v.spec.keyed]
    if len(tables) != 1:
        msg = f"expected one keyed operator in {pipeline.name!r}, found {tables}"
        raise CheckError(msg)
    return f"{pipeline.name}/{name}", tables[0]


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """A throwaway PostgreSQL started with scripts/postgres.sh (or GYREFLOW_TEST_POSTGRES_URL)."""
    url = os.environ.get("GYREFLOW_TEST_POSTGRES_URL")
    if url:
        yield url
        return
    # Directly under /tmp: the postgres user must reach it (the work directory is private).
    directory = tempfile.mkdtemp(prefix="gyreflow-bench-pg.")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    script = ROOT / "scripts" / "postgres.sh"
    started = subprocess.run(["bash", str(script), "start", directory, str(port)],
                             capture_output=True, text=True, check=False)
    if started.returncode != 0:
        shutil.rmtree(directory, ignore_errors=True)
        msg = f"scripts/postgres.sh start failed: {started.stderr.strip()[-500:]}"
        raise RuntimeError(msg)
    try:
        yield started.stdout.strip().split("=", 1)[1]
    finally:
        subprocess.run(["bash", str(script), "stop", directory], capture_output=True, check=False)
        shutil.rmtree(directory, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# Part 1: word count throughput with snapshots every window


@dataclass
class WordCountCase:
    name: str
    config: Callable[[], dict]
    window_medians: list[float] = field(default_factory=list)
    failure: str | None = None  # set when a guarded run failed; later repetitions are skipped


@dataclass
class Failed:
    """What a guarded run returns instead of a result when the job raised."""

    seconds: float


def wordcount_run(lines: list[str], config: dict, job: str):
    env = Environment.local(config={"progress.enabled": False, **config})
    pipeline = env.pipeline(job)

    @pipeline.task
    def wordcount(ctx):
        (ctx.source(lines, SizeTumblingWindow(WINDOW_LINES))
            .flat_map(str.split)
            .map(lambda w: (w, 1))
            .key_by(lambda kv: kv[0])
            .reduce(lambda a, b: (a[0], a[1] + b[1]))
            .collect("counts"))

    return pipeline.execute(fresh=True)


def with_options(url: str, *options: str) -> str:
    """``url`` with libpq ``options`` (``-c name=value`` session settings) added."""
    query = urllib.parse.quote(" ".join(f"-c {o}" for o in options))
    return f"{url}{'&' if '?' in url else '?'}options={query}"


def short_error(exc: BaseException, timeout: int) -> str:
    text = str(exc)
    if "statement timeout" in text:
        statement = "a snapshot prune" if "prune failed" in text else "a snapshot statement"
        return f"{statement} exceeded the {timeout} s statement_timeout"
    return f"{type(exc).__name__}: {text.splitlines()[0][:200] if text else ''}"


def run_throughput(args, lines: list[str], expected: dict[str, int], work: Path,
                   postgres_url: str | None) -> tuple[str, list[str], dict[str, float]]:
    windows = math.ceil(len(lines) / WINDOW_LINES)
    jobs = iter(range(1, 1 << 30))

    def path_config(backend: str, **extra) -> Callable[[], dict]:
        return lambda: {"state.backend": backend, "state.path": fresh_dir(work, "wc-"), **extra}

    cases = [
        WordCountCase(NONE, path_config("memory", **{"state.snapshot_every": NEVER})),
        WordCountCase(MEMORY, path_config("memory")),
        WordCountCase(ROCKSDB, path_config("rocksdb")),
        WordCountCase(ROCKSDB_FINAL, path_config("rocksdb", **{"state.snapshot_every": NEVER})),
        WordCountCase(SQLITE, path_config("jdbc")),
    ]
    guarded = set()
    if postgres_url:
        timeout = f"statement_timeout={args.pg_timeout}s"
        url = with_options(postgres_url, timeout)
        cases.append(WordCountCase(POSTGRES, path_config("jdbc", **{"state.url": url})))
        guarded = {POSTGRES}

    def runner(case: WordCountCase) -> Callable[[], object]:
        # A new job name per run: no earlier state to find or delete (PostgreSQL is shared).
        def run():
            if case.name not in guarded:
                return wordcount_run(lines, case.config(), f"wc-{next(jobs)}")
            if case.failure is not None:
                return Failed(0.0)
            start = time.perf_counter()
            try:
                return wordcount_run(lines, case.config(), f"wc-{next(jobs)}")
            except Exception as exc:  # noqa: BLE001 - reported in the table, the others go on
                case.failure = short_error(exc, args.pg_timeout)
                return Failed(time.perf_counter() - start)
        return run

    def checker(case: WordCountCase) -> Callable[[object], None]:
        def check(result) -> None:
            if isinstance(result, Failed):
                if result.seconds:
                    err.print(f"[yellow]{case.name} failed after {result.seconds:.1f} s: "
                              f"{case.failure}[/yellow]")
                    case.failure += f" (the job failed after {result.seconds:.0f} s)"
                return
            task = result["wordcount"]
            if len(task.windows) != windows:
                msg = f"{case.name}: ran {len(task.windows)} windows, expected {windows}"
                raise CheckError(msg)
            got = dict(result.output("counts"))
            if got != expected:
                wrong = sorted(w for w in expected.keys() | got.keys()
                               if got.get(w) != expected.get(w))
                msg = (f"{case.name}: {len(wrong)} word counts differ from the Counter oracle, "
                       f"e.g. {wrong[:5]}")
                raise CheckError(msg)
            case.window_medians.append(statistics.median(w.seconds for w in task.windows))
        return check

    def progress(rep: int, name: str, seconds: float) -> None:
        err.print(f"[dim]throughput, repetition {rep}/{args.repeat}: {name}: {seconds:.3f} s[/dim]")

    timings = interleaved_best_of({c.name: runner(c) for c in cases}, args.repeat,
                                  check={c.name: checker(c) for c in cases}, on_run=progress)
    base = timings[NONE].best
    rows = []
    costs = {}
    for case in cases:
        if case.failure is not None:
            rows.append([case.name, "failed", "-", "-", "-"])
            continue
        timing = timings[case.name]
        best = timing.best
        median_window = case.window_medians[timing.runs.index(best)]
        costs[case.name] = 1 - base / best
        rows.append([case.name, format_seconds(best), format_rate(args.words / best),
                     "-" if case.name == NONE else percent(costs[case.name]), ms(median_window)])
    if not postgres_url:
        rows.append([POSTGRES, "skipped", "-", "-", "-"])
    table = print_table(
        f"Windowed word count, {args.words:,} words, snapshots every window",
        ["backend", "seconds", "words/s", "cost vs no snapshots", "median window ms"], rows,
        console=out)
    notes = [
        f"Input: {args.words:,} words in {len(lines):,} lines of {WORDS_PER_LINE} (vocabulary "
        f"{VOCABULARY_SIZE:,} words, Zipf frequencies, seed {DEFAULT_SEED}); {windows} "
        f"SizeTumblingWindow({WINDOW_LINES:,}) windows of {WINDOW_WORDS:,} words; split, key "
        f"by word, keyed reduce, collect; local environment, parallelism 1. Every window "
        f"updates ~{len(expected):,} keys, all of which are snapshotted.",
        f"\"{NONE}\": there is no snapshot-free backend, so this is the memory backend with "
        f"state.snapshot_every={NEVER:,} (larger than the window count): only the final flush "
        "at the end of the input is written. "
        f"\"{ROCKSDB_FINAL}\" (a diagnostic row) does the same with rocksdb: it shows the fixed "
        "cost of starting and stopping the snapshot writer process.",
        "Every other row snapshots every window (state.snapshot_every=1, 2 retained). memory "
        "writes inline; rocksdb and jdbc (SQLite file under state.path, or PostgreSQL) are "
        "written by a child process while the next windows compute.",
        "cost vs no snapshots = 1 - (words/s with snapshots) / (words/s without): the share "
        "of throughput lost. median window ms: launch-to-finish time of the median window of "
        "the best run (TaskResult.windows); it leaves out fixed start-up and end costs, and "
        "counts time shared with the other window in flight (scheduler.max_flying_windows=2).",
        f"Best of {args.repeat} interleaved repetitions per backend; every run's final counts "
        "and window count were checked against a Counter oracle.",
    ]
    if ROCKSDB in costs and ROCKSDB_FINAL in costs:
        every, final = timings[ROCKSDB].best, timings[ROCKSDB_FINAL].best
        if final > base:
            fixed = (f"starting and stopping the writer process and the final flush cost "
                     f"{final - base:.2f} s ({costs[ROCKSDB_FINAL]:.1%}, the final-flush-only row)")
        else:
            fixed = (f"starting and stopping the writer process and the final flush cost nothing "
                     f"measurable (the final-flush-only row took {final:.2f} s, no snapshots "
                     f"{base:.2f} s: within the noise)")
        notes.append(
            f"Where rocksdb's {costs[ROCKSDB]:.1%} goes: {fixed}; snapshotting every window "
            f"adds {every - final:.2f} s, {(every - final) / windows * 1000:.0f} ms per window "
            f"of ~{len(expected):,} changed keys.")
    if postgres_url:
        notes.append(
            "PostgreSQL: a throwaway PostgreSQL server on this machine (scripts/postgres.sh), "
            f"every job's connections with statement_timeout={args.pg_timeout}s so that a "
            "stalled statement fails the run instead of hanging it.")
        for case in cases:
            if case.failure is not None:
                notes.append(f"{case.name} FAILED: {case.failure}.")
    else:
        notes.append("PostgreSQL skipped (--no-postgres, or the server did not start).")
    return table, notes, costs


# ---------------------------------------------------------------------------------------------
# Part 2: snapshot time vs state size


def key_name(i: int) -> str:
    return f"key-{i:07d}"


def changed_keys(keys: int, count: int, seed: int) -> list[int]:
    """``count`` distinct key indexes out of ``keys``, the same for the same seed."""
    return random.Random(DEFAULT_SEED * 1000 + seed).sample(range(keys), count)


def expand(item: tuple) -> list:
    """Turn a source item into (key, value) records: load all keys, update some, or settle."""
    kind = item[0]
    if kind == "load":
        return [(key_name(i), 0) for i in range(item[1])]
    if kind == "update":
        _, keys, count, seed = item
        return [(key_name(i), seed) for i in changed_keys(keys, count, seed)]
    time.sleep(item[1])  # "settle": an empty window that waits for the writer to catch up
    return []


class WindowClock(Sink):
    """A sink that records when each window finished and was committed, and keeps the latest
    record per key (the reduce's output) for the check."""

    default_parallelism = 1

    def __init__(self) -> None:
        self.finished: dict[int, float] = {}
        self.committed: dict[int, float] = {}
        self.latest: dict = {}
        self.first_update_window = 0

    def create_writer(self, task_index: int, parallelism: int) -> SinkWriter:
        return _ClockWriter(self)


class _ClockWriter(SinkWriter):
    def __init__(self, clock: WindowClock) -> None:
        self.clock = clock

    def write(self, window: int, records: list) -> None:
        self.clock.latest.update(records)

    def finish_window(self, window: int) -> None:
        self.clock.finished[window] = time.perf_counter()

    def publish(self, window: int) -> None:
        now = time.perf_counter()
        committed = self.clock.committed
        for w in self.clock.finished:
            if w <= window and w not in committed:
                committed[w] = now


@dataclass
class SizeCase:
    keys: int
    one_percent: int
    fixed: int = FIXED_CHANGE

    @property
    def phases(self) -> tuple[tuple[str, int], ...]:
        return (("1%", self.one_percent), ("fixed", self.fixed))


def update_items(case: SizeCase) -> list[tuple]:
    items = []
    seed = 1
    for _, count in case.phases:
        for _ in range(CHANGE_WINDOWS):
            items.append(("update", case.keys, count, seed))
            seed += 1
    return items


def size_source(case: SizeCase, clock: WindowClock, wait_for_base: bool):
    """Window 1 loads every key; with ``wait_for_base``, empty windows follow until window 1's
    snapshot is committed (so the base write does not spill into the measured windows); then
    CHANGE_WINDOWS windows change 1% of the keys and CHANGE_WINDOWS windows a fixed count."""

    def items():
        yield ("load", case.keys)
        produced = 1
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while wait_for_base and 1 not in clock.committed:
            if time.monotonic() > deadline:
                msg = f"window 1 ({case.keys:,} keys) not committed after {SETTLE_TIMEOUT:.0f} s"
                raise CheckError(msg)
            yield ("settle", SETTLE_SLEEP)
            produced += 1
        clock.first_update_window = produced + 1
        yield from update_items(case)

    return GeneratorSource(items)


def size_oracle(case: SizeCase) -> dict:
    state = dict.fromkeys(map(key_name, range(case.keys)), 0)
    for item in update_items(case):
        state.update(expand(item))
    return state


@dataclass
class PipelineWindows:
    """Per-phase medians of one size run: window interval and commit lag, in seconds."""

    interval: dict[str, float]
    lag: dict[str, float]
    job: str
    table: str
    settle_windows: int


def size_run(case: SizeCase, config: dict, job: str, oracle: dict) -> PipelineWindows:
    clock = WindowClock()
    snapshots = config.get("state.snapshot_every", 1) == 1
    env = Environment.local(config={"progress.enabled": False, **config})
    pipeline = env.pipeline(job)

    @pipeline.task
    def state(ctx):
        (ctx.source(size_source(case, clock, wait_for_base=snapshots), SizeTumblingWindow(1))
            .flat_map(expand)
            .key_by(lambda kv: kv[0])
            .reduce(lambda old, new: new)
            .sink(clock))

    job_name, table = state_table(pipeline)
    pipeline.execute(fresh=True)
    if clock.latest != oracle:
        wrong = sum(1 for k, v in oracle.items() if clock.latest.get(k) != v)
        msg = f"{job}: {wrong:,} of {len(oracle):,} keys differ from the oracle"
        raise CheckError(msg)
    intervals: dict[str, float] = {}
    lags: dict[str, float] = {}
    first = clock.first_update_window
    for index, (phase, _) in enumerate(case.phases):
        start = first + index * CHANGE_WINDOWS
        measured = range(start + 1, start + CHANGE_WINDOWS)  # the phase's first window is not
        intervals[phase] = statistics.median(clock.finished[w] - clock.finished[w - 1]
                                             for w in measured)
        if snapshots:
            lags[phase] = statistics.median(clock.committed[w] - clock.finished[w]
                                            for w in measured)
    if env.state_backend.name == "memory":
        store = env.state_backend.open_store()
        store.delete_job(job_name)  # free the process-memory copy of the state
    return PipelineWindows(intervals, lags, job_name, table, first - 2)


def snapshot_rows(table: str, changed: dict, groups: int) -> list:
    """The rows of a snapshot, built as runtime/task.py ``Task._snapshot`` builds them."""
    return [StateRow(table, key_group_of(key, groups), dumps(key), dumps(value))
            for key, value in changed.items()]


class DirectWriter:
    """Times ``store.write`` of snapshots on a store that holds a pipeline's N-key state, and the
    commit and prune the runtime does after each write (timed separately).

    The prune after writing version v drops what version v - 1 (the new horizon) superseded, so
    its cost follows v - 1's change: it is counted for v - 1's phase."""

    def __init__(self, backend: str, path: str, job: str, table: str, case: SizeCase) -> None:
        self.backend, self.path, self.job, self.table, self.case = backend, path, job, table, case
        if backend == ROCKSDB:
            self.store = RocksDBSnapshotStore(path)
        else:
            self.store = JdbcSnapshotStore(default_sqlite_url(path))
        self.meta = self.store.read_meta(job)
        if self.meta is None:
            msg = f"no committed state for {job}"
            raise CheckError(msg)
        self.version = self.meta.last_completed
        self.phase_of: dict[int, str] = {}  # phase of each version written here
        self.seed = 10_000
        self.key_groups = key_group_range(0, 1, 128)  # the one reduce task's (parallelism 1)
        self.timings: dict[str, tuple[list[float], list[float], list[float]]] = {
            phase: ([], [], []) for phase, _ in case.phases}

    def write_once(self, phase: str, count: int) -> None:
        self.version += 1
        self.seed += 1
        version, job = self.version, self.job
        changed = {k: (k, version)
                   for k in map(key_name, changed_keys(self.case.keys, count, self.seed))}
        gc.collect()
        start = time.perf_counter()
        rows = snapshot_rows(self.table, changed, 128)
        snapshot = TaskSnapshot(job, version, self.key_groups, tuple(rows), ())
        built = time.perf_counter()
        self.store.write(snapshot)
        written = time.perf_counter()
        self.store.commit(JobMeta(job, self.meta.fingerprint, version, (version - 1, version),
                                  dict(self.meta.parallelism)))
        self.store.prune(job, [version - 1], version - 1)
        done = time.perf_counter()
        self.phase_of[version] = phase
        builds, writes, _ = self.timings[phase]
        builds.append(built - start)
        writes.append(written - built)
        crossing = self.phase_of.get(version - 1)
        if crossing is not None:  # not the first write: the pipeline wrote version - 1
            self.timings[crossing][2].append(done - written)

    def medians(self, phase: str) -> tuple[float, float, float]:
        return tuple(statistics.median(runs) for runs in self.timings[phase])

    def close(self) -> None:
        self.store.close()
        shutil.rmtree(self.path, ignore_errors=True)


@dataclass
class SizeResult:
    backend: str
    case: SizeCase
    phase: str
    changed: int
    interval: float
    baseline: float
    lag: float
    build: float
    write: float
    prune: float


def run_sizes(args, work: Path, sizes: tuple[int, ...],
              backends: tuple[str, ...]) -> tuple[str, list[str], list[SizeResult]]:
    results: list[SizeResult] = []
    settle: dict[tuple[str, int], int] = {}
    pipelines: list[tuple[DirectWriter, PipelineWindows, PipelineWindows]] = []
    writers: list[DirectWriter] = []
    try:
        for keys in sizes:
            case = SizeCase(keys, max(1, int(keys * CHANGE_SHARE)))
            oracle = size_oracle(case)
            err.print(f"[dim]state size {keys:,}: no-snapshot baseline...[/dim]")
            base = size_run(case, {"state.backend": "memory", "state.snapshot_every": NEVER},
                            f"size-{keys}-none", oracle)
            for backend in backends:
                if backend != ROCKSDB and keys > args.sqlite_max_keys:
                    continue
                err.print(f"[dim]state size {keys:,}: {backend} pipeline...[/dim]")
                slug = backend.split()[0].lower()
                path = fresh_dir(work, f"size-{slug}-")
                config = {"state.backend": "rocksdb" if backend == ROCKSDB else "jdbc",
                          "state.path": path}
                run = size_run(case, config, f"size-{keys}-{slug}", oracle)
                settle[(backend, keys)] = run.settle_windows
                writer = DirectWriter(backend, path, run.job, run.table, case)
                writers.append(writer)
                pipelines.append((writer, run, base))
            del oracle
        # Direct writes round-robin over every prepared store, so that a burst of load on the
        # shared machine hits every state size alike.
        err.print(f"[dim]direct writes: {args.direct_writes} rounds over {len(writers)} "
                  "stores...[/dim]")
        for _ in range(args.direct_writes):
            for writer in writers:
                for phase, count in writer.case.phases:
                    writer.write_once(phase, count)
        for writer, run, base in pipelines:
            for phase, changed in writer.case.phases:
                results.append(SizeResult(writer.backend, writer.case, phase, changed,
                                          run.interval[phase],
                                          base.interval[phase], run.lag[phase],
                                          *writer.medians(phase)))
    finally:
        for writer in writers:
            writer.close()

    rows = []
    for r in sorted(results, key=lambda r: (r.phase != "1%", r.backend != ROCKSDB, r.case.keys)):
        rows.append([r.backend, f"{r.case.keys:,}", f"{r.changed:,}" + (" (1%)" if r.phase == "1%"
                                                                       else " (fixed)"),
                     ms(r.interval), ms(r.baseline), ms(r.interval - r.baseline), ms(r.lag),
                     ms(r.build), ms(r.write), f"{r.write / r.changed * 1e6:.1f}", ms(r.prune)])
    table = print_table(
        "Snapshot time vs state size (per window, ms)",
        ["backend", "state keys", "changed keys", "window", "window, no snapshots", "extra",
         "commit lag", "build rows", "store.write", "write µs / changed key", "commit + prune"],
        rows, console=out)
    settle_text = ", ".join(f"{b} {k:,}: {n}" for (b, k), n in settle.items())
    notes = [
        "Pipeline: window 1 loads N keys (`(key, value)` records, keys `key-0000000`...), then "
        f"{CHANGE_WINDOWS} windows each change a random 1% of the keys and {CHANGE_WINDOWS} "
        f"windows each change a fixed {FIXED_CHANGE:,} keys; flat_map, key_by, keyed reduce "
        "(last value wins), a sink that timestamps each window; local environment, "
        "parallelism 1, snapshots every window. Every run's final state (the sink's latest "
        "record per key) was checked against an oracle dict.",
        "Empty windows (50 ms each) run after window 1 until its N-key snapshot is committed, "
        "so the base write does not spill into the measured windows (settle windows: "
        f"{settle_text}). The no-snapshot baseline (memory backend, state.snapshot_every="
        f"{NEVER:,}) has none.",
        "window: median wall time between the sink finishing consecutive windows, over the "
        f"last {CHANGE_WINDOWS - 1} windows of each phase (the first of a phase carries the "
        "previous phase's snapshot). extra = window - window, no snapshots: the snapshot cost "
        "the pipeline sees (building rows and handing them to the writer process, plus waiting "
        "when the writer falls behind). commit lag: median time from a window finishing to "
        "its snapshot being committed (written by the child process and the job meta "
        "updated).",
        "build rows and store.write: timed directly after the pipeline runs, on their stores "
        f"(which hold the N-key state), median of {args.direct_writes} snapshots per row, each "
        "changing fresh random keys, taken round-robin over all the stores. build rows = "
        "StateRow(table, key_group_of(key), dumps(key), dumps(value)) per changed key, "
        "exactly as runtime/task.py `Task._snapshot` builds them (done in the job process); "
        "store.write = `store.write(TaskSnapshot(...))` in this process (what the writer "
        "process does). "
        "Each write is followed by the commit of the job meta and the prune of what the new "
        "horizon version superseded, as the runtime does after every window (commit + prune, "
        "timed separately and counted for the phase of the version it prunes by: the writer "
        "process does this work too).",
        "How to read the target: \"incremental\" means a snapshot costs what changed, not what "
        "is stored. At 1% the change itself grows 100x from 10k to 1M keys (100 vs 10,000 "
        "changed keys), so the target is read on the fixed-change rows "
        f"({FIXED_CHANGE:,} changed keys per window at every state size): their store.write "
        f"time must stay within {SIZE_GROWTH_TARGET:g}x. The 1% rows are shown as measured; "
        "their µs per changed key is the comparable number.",
    ]
    sqlite_fixed = sorted((r.case.keys, r.prune) for r in results
                          if r.backend == SQLITE and r.phase == "fixed")
    if len(sqlite_fixed) > 1 and sqlite_fixed[-1][1] > 3 * sqlite_fixed[0][1]:
        (small, small_prune), (large, large_prune) = sqlite_fixed[0], sqlite_fixed[-1]
        notes.append(
            f"SQLite's commit + prune grows with the state, not the change: {ms(small_prune)} ms "
            f"at {small:,} keys, {ms(large_prune)} ms at {large:,} keys for the same "
            f"{FIXED_CHANGE:,} changed keys.")
    if any(k > args.sqlite_max_keys for k in sizes) and SQLITE in backends:
        notes.append(f"SQLite runs only up to {args.sqlite_max_keys:,} keys, to keep the "
                     "benchmark short (a 1M-key SQLite base snapshot alone took ~40 s here).")
    return table, notes, results


# ---------------------------------------------------------------------------------------------
# Part 3: recovery

RECOVERY_SCRIPT = '''\
"""Recovery benchmark job, written by benchmarks/snapshots.py: builds KEYS keys of rocksdb state
over a few windows, then updates 1% of them per window. Prints `event window monotonic-time`."""

import time

STARTED = time.monotonic()

import random  # noqa: E402
import sys  # noqa: E402

from gyreflow.api import Environment, SizeTumblingWindow  # noqa: E402
from gyreflow.api.sinks import Sink, SinkWriter  # noqa: E402

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


def restore(state: str, table: str, version: int) -> tuple[float, float, float, dict]:
    """Read ``table`` back as the resumed job's rollback does. Returns (seconds to open the
    database and read its first row, read_rows seconds for every key, loads seconds, the
    restored dict). The first open of a killed job's database replays its write-ahead log."""
    store = RocksDBSnapshotStore(state)
    try:
        start = time.perf_counter()
        next(store.read_rows(RECOVERY_JOB, table, range(1), version), None)  # opens the database
        opened = time.perf_counter()
        raw = list(store.read_rows(RECOVERY_JOB, table, range(128), version))
        read = time.perf_counter()
        data = {loads(k): loads(v) for k, v in raw}
        done = time.perf_counter()
    finally:
        store.close()
    return opened - start, read - opened, done - read, data


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

    opens, reads, decodes = [], [], []
    for rep in range(args.repeat):
        inspected = copy_of_crashed("recovery-inspected-")
        opened, read, decode, data = restore(inspected, table, committed)
        shutil.rmtree(inspected, ignore_errors=True)
        if data != at_crash:
            msg = "restored state differs from the oracle at the crash window"
            raise CheckError(msg)
        del data
        opens.append(opened)
        reads.append(read)
        decodes.append(decode)
        err.print(f"[dim]recovery, repetition {rep + 1}/{args.repeat}: pure restore "
                  f"{opened + read + decode:.3f} s[/dim]")
    totals = [sum(t) for t in zip(opens, reads, decodes, strict=True)]
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
        ["pure restore: store.read_rows of all keys", format_seconds(reads[best_restore])],
        ["pure restore: loads() into a dict", format_seconds(decodes[best_restore])],
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
        "range database (time to the first row of key group 0), then "
        "`RocksDBSnapshotStore.read_rows` over all key groups "
        f"at window {committed}, then `loads` of every key and value into a dict "
        f"as `Task.rollback` does; best of {args.repeat}, checked against the oracle: "
        f"{reads[best_restore] / keys * 1e6:.1f} µs per key to read, "
        f"{decodes[best_restore] / keys * 1e6:.1f} µs per key to decode.",
    ]
    return table_md, notes, total


# ---------------------------------------------------------------------------------------------
# Report


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--words", type=int, default=None,
                        help="word count input words (default 2,000,000; 300,000 with --quick)")
    parser.add_argument("--repeat", type=int, default=None,
                        help="repetitions; the best run counts (default 3; 1 with --quick)")
    parser.add_argument("--no-postgres", action="store_true",
                        help="skip the PostgreSQL row (no server is started)")
    parser.add_argument("--quick", action="store_true",
                        help="a small smoke run: fewer words, 10k/50k state sizes, recovery of "
                             f"{QUICK_RECOVERY_KEYS:,} keys, one repetition")
    parser.add_argument("--write-docs", action="store_true",
                        help="update the 'snapshots' section of docs/benchmarks.md")
    args = parser.parse_args(argv)
    if args.words is None:
        args.words = 300_000 if args.quick else 2_000_000
    if args.repeat is None:
        args.repeat = 1 if args.quick else 3
    args.pg_timeout = 3 if args.quick else PG_STATEMENT_TIMEOUT
    args.sqlite_max_keys = 10_000 if args.quick else SQLITE_MAX_KEYS
    args.direct_writes = 5 if args.quick else DIRECT_WRITES
    for flag in ("words", "repeat"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag} must be >= 1")
    return args


def verdict(met: bool) -> str:
    return "met" if met else "NOT met"


def target_lines(costs: dict[str, float], sizes: list[SizeResult], smallest: int, largest: int,
                 recovery: float, recovery_keys: int) -> list[str]:
    lines = []
    name, limit = THROUGHPUT_TARGET
    cost = costs[name]
    lines.append(f"{name} snapshots every window cost <= {limit:.0%} of word count throughput: "
                 f"{cost:.1%} -> {verdict(cost <= limit)}")
    fixed = {r.case.keys: r for r in sizes if r.backend == ROCKSDB and r.phase == "fixed"}
    if smallest in fixed and largest in fixed:
        ratio = fixed[largest].write / fixed[smallest].write
        extra_small, extra_large = fixed[smallest].interval - fixed[smallest].baseline, \
            fixed[largest].interval - fixed[largest].baseline
        lines.append(
            f"rocksdb incremental snapshot time within {SIZE_GROWTH_TARGET:g}x from {smallest:,} "
            f"to {largest:,} keys ({FIXED_CHANGE:,} changed keys per window): store.write "
            f"{ms(fixed[smallest].write)} -> {ms(fixed[largest].write)} ms = {ratio:.2f}x -> "
            f"{verdict(ratio <= SIZE_GROWTH_TARGET)} (pipeline extra per window: "
            f"{ms(extra_small)} -> {ms(extra_large)} ms)")
    pct = {r.case.keys: r for r in sizes if r.backend == ROCKSDB and r.phase == "1%"}
    if smallest in pct and largest in pct:
        ratio = pct[largest].write / pct[smallest].write
        per_key = [pct[k].write / pct[k].changed * 1e6 for k in (smallest, largest)]
        lines.append(
            f"for reference, at 1% change ({pct[smallest].changed:,} -> {pct[largest].changed:,} "
            f"changed keys) rocksdb store.write grows {ratio:.1f}x, "
            f"{per_key[0]:.1f} -> {per_key[1]:.1f} µs per changed key (not a target: the change "
            "grows 100x)")
    lines.append(f"recovery of {recovery_keys:,} keys (rocksdb), process start to first new "
                 f"window completed <= {RECOVERY_TARGET:g} s: {recovery:.2f} s -> "
                 f"{verdict(recovery <= RECOVERY_TARGET)}"
                 + ("" if recovery_keys == RECOVERY_KEYS else " (quick run: fewer keys)"))
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = QUICK_STATE_SIZES if args.quick else STATE_SIZES
    recovery_keys = QUICK_RECOVERY_KEYS if args.quick else RECOVERY_KEYS
    lines = word_lines(args.words, vocabulary_size=VOCABULARY_SIZE,
                       words_per_line=WORDS_PER_LINE, seed=DEFAULT_SEED)
    expected = dict(Counter(w for line in lines for w in line.split()))
    started = time.perf_counter()
    load_start = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="gyreflow-bench-snapshots."))
    try:
        with contextlib.ExitStack() as stack:
            postgres_url = None
            if not args.no_postgres:
                err.print("[dim]starting a throwaway PostgreSQL server...[/dim]")
                try:
                    postgres_url = stack.enter_context(postgres_server())
                except RuntimeError as exc:
                    err.print(f"[yellow]PostgreSQL skipped: {exc}[/yellow]")
            throughput_md, throughput_notes, costs = run_throughput(args, lines, expected, work,
                                                                    postgres_url)
        print()
        err.print(f"[dim]throughput done after {time.perf_counter() - started:.0f} s[/dim]")
        sizes_md, sizes_notes, size_results = run_sizes(args, work, sizes, (ROCKSDB, SQLITE))
        err.print(f"[dim]state sizes done after {time.perf_counter() - started:.0f} s[/dim]")
        print()
        recovery_md, recovery_notes, recovery = run_recovery(args, work, recovery_keys)
    except CheckError as exc:
        err.print(f"[bold red]error:[/bold red] {exc} (aborting the benchmark)")
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    elapsed = time.perf_counter() - started

    machine = (f"{machine_line()}; 1-minute load average {load_start:.1f} at the start and "
               f"{os.getloadavg()[0]:.1f} at the end (the CPUs were shared with other work "
               "when above the CPU count)")
    targets = target_lines(costs, size_results, sizes[0], sizes[-1], recovery, recovery_keys)
    print()
    print(f"Machine: {machine}. Benchmark wall time: {elapsed:.0f} s.")
    for title, notes in (("Throughput", throughput_notes), ("State size", sizes_notes),
                         ("Recovery", recovery_notes)):
        print(f"\n{title}:")
        for note in notes:
            print(f"  - {note}")
    print("\nTargets:")
    for line in targets:
        print(f"  {line}")

    if args.write_docs:
        today = datetime.datetime.now(datetime.UTC).date().isoformat()
        section = "\n".join([
            "## Snapshots",
            "",
            "What per-window state snapshots cost: word count throughput with snapshots every "
            "window on each backend, snapshot time as the keyed state grows, and how long a job "
            "with 1M keys of rocksdb state takes to recover after being killed.",
            "",
            f"Run on {today} with `{command_line()}` ({elapsed:.0f} s in all).  ",
            f"Machine: {machine}.",
            "",
            "### Throughput with snapshots every window",
            "",
            throughput_md,
            "",
            *(f"- {note}" for note in throughput_notes),
            "",
            "### Snapshot time vs state size",
            "",
            sizes_md,
            "",
            *(f"- {note}" for note in sizes_notes),
            "",
            "### Recovery",
            "",
            recovery_md,
            "",
            *(f"- {note}" for note in recovery_notes),
            "",
            "### Targets",
            "",
            *(f"- {line}" for line in targets),
        ])
        path = update_docs_section("snapshots", section)
        print(f"\nUpdated the 'snapshots' section of {path}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
