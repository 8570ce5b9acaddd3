"""Failures that are not crashes: a poisoned record, an unreachable database, a database that goes
away mid-run. Each stops the job cleanly; completed windows stay published and intact, and
``--resume`` after the cause is gone gives the output of a clean run.

The job is a word count script written into ``tmp_path`` whose ``parse`` map raises on a line
containing ``POISON`` when ``FAIL=1`` is set, and sleeps on lines starting with ``tick`` when
``SLOW=<seconds>`` is set (neither variable changes the plan, so the same job resumes).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from _postgres import POSTGRES_SECRET
from _recovery_data import parse_word_count, word_count_oracle, write_lines
from _recovery_jobs import (
    POSTGRES_SCRIPT,
    TIMEOUT,
    assert_same_output,
    assert_visible_prefix,
    base_environ,
    command,
    free_port,
    run_job,
    stored_meta,
)
from _staged_output import read_dir

from gyreflow.state.stores.jdbc import JdbcSnapshotStore

JOB = "poisoned-count/count"
WINDOW = 1000
LINES = 12_000  # 12 windows
POISONED_WINDOW = 7

SCRIPT = '''"""Word count failing on a poisoned line (FAIL=1), sleeping on tick lines (SLOW=s)."""

import argparse
import json
import os
import time

from gyreflow.api import Environment, FileSink, FileSource, SizeTumblingWindow


def parse(line):
    if os.environ.get("FAIL") == "1" and "POISON" in line:
        raise ValueError("poisoned input line")
    slow = os.environ.get("SLOW")
    if slow and line.startswith("tick"):
        time.sleep(float(slow))
    return line


def format_count(window, record):
    word, count = record
    return json.dumps({"window": window, "word": word, "count": count}, ensure_ascii=False)


parser = argparse.ArgumentParser()
parser.add_argument("--input")
parser.add_argument("--output")
parser.add_argument("--window", type=int)
args = parser.parse_args()
pipeline = Environment.from_config().pipeline("poisoned-count")


@pipeline.task(name="count")
def count(ctx):
    lines = ctx.source(FileSource(args.input), SizeTumblingWindow(args.window)).with_name("lines")
    (lines.map(parse).with_name("parse")
          .flat_map(str.split).with_name("split")
          .map(lambda word: (word, 1)).with_name("pair")
          .key_by(lambda pair: pair[0])
          .reduce(lambda a, b: (a[0], a[1] + b[1])).with_name("count")
          .sink(FileSink(args.output, format=format_count)).with_name("files"))


pipeline.execute()
'''


def make_lines(count: int, poison_at: int | None = None, ticks: bool = False) -> list[str]:
    """Deterministic lines over 50 words; ``tick`` opens every window when ``ticks``."""
    lines = []
    for index in range(count):
        words = [f"v{(index * 7 + j * 13) % 50:02d}" for j in range(index % 5 + 1)]
        if ticks and index % WINDOW == 0:
            words.insert(0, "tick")
        lines.append(" ".join(words))
    if poison_at is not None:
        lines[poison_at] = "POISON pill v01"
    return lines


@pytest.fixture
def job(tmp_path) -> Path:
    script = tmp_path / "poisoned_count.py"
    script.write_text(SCRIPT, encoding="utf-8")
    return script


def job_args(path: Path, out: Path) -> list[str]:
    return ["--input", str(path), "--output", str(out), "--window", str(WINDOW)]


def clean_reference(job: Path, path: Path, directory: Path) -> dict[str, list[str]]:
    """An uninterrupted run without FAIL on the memory backend."""
    done = run_job(job, job_args(path, directory), {"GYREFLOW_STATE__BACKEND": "memory"})
    assert done.returncode == 0, done.stderr
    return read_dir(directory)


def backend_env(kind: str, state: Path) -> dict[str, str]:
    return {"GYREFLOW_STATE__PATH": str(state),
            "GYREFLOW_STATE__BACKEND": "rocksdb" if kind == "rocksdb" else "jdbc"}


# A poisoned record ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["rocksdb", "sqlite"])
def test_poisoned_record_fails_the_job_and_resume_after_the_fix(kind, job, tmp_path):
    poison_at = (POISONED_WINDOW - 1) * WINDOW + 437
    lines = make_lines(LINES, poison_at=poison_at)
    path = write_lines(tmp_path / "input.txt", lines)
    reference = clean_reference(job, path, tmp_path / "reference")
    expected = word_count_oracle(lines, WINDOW)
    assert parse_word_count(reference) == expected

    env = backend_env(kind, tmp_path / "state")
    out = tmp_path / "out"
    done = run_job(job, job_args(path, out), {**env, "FAIL": "1"})
    assert done.returncode == 1, done.stderr
    message = done.stderr
    assert "operator 'parse'" in message
    assert f"window {POISONED_WINDOW}" in message
    assert "'POISON pill v01'" in message
    assert "ValueError: poisoned input line" in message
    assert "--resume" in message
    published = assert_visible_prefix(out, reference)  # whole files of windows 1..m only
    visible = {name: text for name, text in read_dir(out).items() if not name.startswith(".")}
    assert parse_word_count(visible) == {w: expected[w] for w in range(1, published + 1)}
    meta = stored_meta(env, JOB)
    completed = 0 if meta is None else meta.last_completed
    assert completed < POISONED_WINDOW, "the poisoned window was marked completed"

    done = run_job(job, job_args(path, out), env, ("--resume",))
    assert done.returncode == 0, done.stderr
    assert_same_output(out, reference)

    # Windows 1..k-1 were finished before the poisoned window: the failure must not lose them,
    # and a window recorded as completed has its output published.
    assert (published, completed) == (POISONED_WINDOW - 1, POISONED_WINDOW - 1), (
        f"after the failure in window {POISONED_WINDOW}: windows 1..{published} published, last "
        f"completed window {completed} in the store; expected {POISONED_WINDOW - 1} for both")


# An unreachable database ---------------------------------------------------------------------


def test_unreachable_postgresql_fails_before_any_data_moves(job, tmp_path):
    path = write_lines(tmp_path / "input.txt", make_lines(2 * WINDOW))
    out = tmp_path / "out"
    url = "postgresql+psycopg://gyreflow:pw-s3cret-42@127.0.0.1:1/gyreflow_test"
    started = time.monotonic()
    done = run_job(job, job_args(path, out),
                   {"GYREFLOW_STATE__BACKEND": "jdbc", "GYREFLOW_STATE__URL": url,
                    "GYREFLOW_STATE__PATH": str(tmp_path / "state")})
    assert time.monotonic() - started < 60
    assert done.returncode == 3, done.stderr
    assert "postgresql+psycopg://gyreflow:***@127.0.0.1:1/gyreflow_test" in done.stderr
    assert "pw-s3cret-42" not in done.stderr + done.stdout
    assert "Traceback" not in done.stderr
    assert not out.exists(), "the output directory was created although no data moved"


# The database goes away mid-run --------------------------------------------------------------


def _pg_bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if found:
        return found[-1]
    on_path = shutil.which(name)
    if on_path is None:
        pytest.fail(f"PostgreSQL server binary {name} not found")
    return on_path


def _as_postgres(argv: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


class ThrowawayPostgres:
    """A PostgreSQL server of this test only: started with scripts/postgres.sh, stopped with it,
    restarted on the same data directory with pg_ctl (postgres.sh start would run initdb again)."""

    def __init__(self) -> None:
        # Not under tmp_path: as root the server runs as postgres, which cannot enter pytest's
        # tmp_path tree (mode 0700, owned by root).
        self.directory = tempfile.mkdtemp(prefix="gyreflow-dbfail-pg-")
        self.port = free_port()
        out = subprocess.run(
            ["bash", str(POSTGRES_SCRIPT), "start", self.directory, str(self.port)],
            capture_output=True, text=True, check=False, timeout=TIMEOUT)
        if out.returncode != 0:
            shutil.rmtree(self.directory, ignore_errors=True)
            pytest.fail(f"could not start PostgreSQL:\n{out.stderr}")
        self.url = out.stdout.strip().split("=", 1)[1]

    def stop(self) -> None:
        subprocess.run(["bash", str(POSTGRES_SCRIPT), "stop", self.directory], check=True,
                       capture_output=True, timeout=TIMEOUT)

    def restart(self) -> None:
        options = f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1"
        argv = [_pg_bin("pg_ctl"), "-D", os.path.join(self.directory, "data"),
                "-l", os.path.join(self.directory, "server.log"), "-o", options, "-w", "start"]
        out = subprocess.run(_as_postgres(argv), capture_output=True, text=True, check=False,
                             timeout=TIMEOUT)
        assert out.returncode == 0, out.stderr + out.stdout

    def remove(self) -> None:
        subprocess.run(["bash", str(POSTGRES_SCRIPT), "stop", self.directory], check=False,
                       capture_output=True, timeout=TIMEOUT)
        shutil.rmtree(self.directory, ignore_errors=True)


@pytest.fixture
def throwaway_postgres():
    server = ThrowawayPostgres()
    yield server
    server.remove()


def _wait_for(path: Path, process: subprocess.Popen, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        if process.poll() is not None:
            pytest.fail(f"the job ended ({process.returncode}) before {path.name} appeared:\n"
                        f"{process.stderr.read()}")
        if time.monotonic() > deadline:
            pytest.fail(f"{path.name} did not appear within {seconds} s")
        time.sleep(0.02)


def test_database_failure_mid_run_never_completes_a_window(job, tmp_path, throwaway_postgres):
    lines = make_lines(30 * WINDOW, ticks=True)  # 30 windows, each opening with a slow line
    path = write_lines(tmp_path / "input.txt", lines)
    reference = clean_reference(job, path, tmp_path / "reference")
    assert parse_word_count(reference) == word_count_oracle(lines, WINDOW)

    server = throwaway_postgres
    env = {"GYREFLOW_STATE__BACKEND": "jdbc", "GYREFLOW_STATE__URL": server.url,
           "GYREFLOW_STATE__SECRET": POSTGRES_SECRET,
           "GYREFLOW_STATE__PATH": str(tmp_path / "state")}
    out = tmp_path / "out"
    process = subprocess.Popen(command(job, job_args(path, out)),
                               env=base_environ({**env, "SLOW": "0.2"}),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(out / "window-000003.jsonl", process, 60)
        server.stop()
        _, stderr = process.communicate(timeout=TIMEOUT)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode != 0, "the job went on without its database"
    published = assert_visible_prefix(out, reference)
    assert published < 30, "the job published every window without its database"
    assert f"127.0.0.1:{server.port}" in stderr, stderr  # names the database
    # a database that stays away is restarted under restart.attempts, then given up on, by name
    assert "cannot connect" in stderr or "snapshot" in stderr, stderr
    assert "the job stopped after 3 restarts" in stderr, stderr

    server.restart()
    store = JdbcSnapshotStore(server.url, secret=POSTGRES_SECRET)
    try:
        meta = store.read_meta(JOB)
    finally:
        store.close()
    assert meta is not None
    assert published <= meta.last_completed < 30
    done = run_job(job, job_args(path, out), env, ("--resume",))
    assert done.returncode == 0, done.stderr
    assert_same_output(out, reference)

    # A clear error is one line from the command, like an unreachable database at the start
    # (exit 3), not an uncaught Python traceback.
    assert "Traceback" not in stderr, f"the failure came out as a traceback:\n{stderr}"
    assert stderr.startswith("error: "), stderr
