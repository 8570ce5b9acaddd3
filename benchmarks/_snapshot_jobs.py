"""Settings, shared helpers and the windowed word count of the snapshot benchmark (snapshots.py)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from _common import ROOT
from rich.console import Console

from gyreflow.api import Environment, SizeTumblingWindow

err = Console(stderr=True)
out = Console(width=None if sys.stdout.isatty() else 150)

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
