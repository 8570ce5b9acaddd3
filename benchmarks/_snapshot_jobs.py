"""Jobs and helpers of the snapshot benchmark (benchmarks/snapshots.py).

The windowed word count, the state-size pipeline and its direct store writes, and the recovery job
script."""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from _common import DEFAULT_SEED, ROOT

from gyreflow.api import Environment, GeneratorSource, SizeTumblingWindow
from gyreflow.api.connectors.sinks import Sink, SinkWriter
from gyreflow.state.keys.keygroups import key_group_range
from gyreflow.state.shared.snapshot import JobMeta, TaskSnapshot, chunks_by_key_group
from gyreflow.state.stores.jdbc import JdbcSnapshotStore, default_sqlite_url
from gyreflow.state.stores.rocksdb import RocksDBSnapshotStore

# Part 1: windowed word count -------------------------------------------------------------------
VOCABULARY_SIZE = 1000
WORDS_PER_LINE = 10
WINDOW_WORDS = 100_000
WINDOW_LINES = WINDOW_WORDS // WORDS_PER_LINE
DEFAULT_WORDS = 10_000_000  # 100 windows: start-up and the final flush are a small part of the job
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
PARTS = ("throughput", "sizes", "recovery")
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
    cpu: list[float] = field(default_factory=list)  # the job process's CPU seconds per run
    failure: str | None = None  # set when a guarded run failed; later repetitions are skipped

    def run(self, lines: list[str], job: str):
        """One run of the word count job, recording its process CPU time."""
        started = time.process_time()
        result = wordcount_run(lines, self.config(), job)
        self.cpu.append(time.process_time() - started)
        return result


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


def snapshot_chunks(table: str, changed: dict, groups: int) -> list:
    """The chunks of a snapshot, built as runtime/dataflow/task.py ``Task._snapshot`` builds them."""
    return chunks_by_key_group(table, changed, (), groups)


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
        chunks = snapshot_chunks(self.table, changed, 128)
        snapshot = TaskSnapshot(job, version, self.key_groups, chunks=tuple(chunks))
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


