"""One writer per job: while a run holds a job's state, a second run on the same state is refused at
once (exit 4, one ``error:`` line naming the holder's pid, host and start time), with or without
``--fresh``/``--resume``; the holder's output is untouched. Once the holder dies by SIGKILL the lock is
gone with it, and ``--resume`` finishes with the plain-Python oracle's output.

Real processes (``python -m gyreflow run``), real RocksDB directories, SQLite files and a PostgreSQL
server; the holder runs locally or on Spark (the lock is the job driver's, whatever the host).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _postgres import POSTGRES_SECRET
from _recovery_data import word_count_oracle
from _recovery_jobs import _create_database as create_database

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = """
import sys, time
from gyreflow.api import Environment, FileSink, FileSource, SizeTumblingWindow

DELAY = float(sys.argv[3])  # read here: on Spark the function runs where sys.argv is another's

def slow(line, ctx):
    if ctx.window > 1:  # window 1 at once: the test waits for it, then tries while these sleep
        time.sleep(DELAY)
    return line

pipeline = Environment.from_config().pipeline("locked")

@pipeline.task(name="count")
def count(ctx):
    (ctx.source(FileSource(sys.argv[1]), SizeTumblingWindow(5)).map_with_context(slow).flat_map(str.split)
     .map(lambda w: (w, 1)).key_by(lambda kv: kv[0]).reduce(lambda a, b: (a[0], a[1] + b[1]))
     .sink(FileSink(sys.argv[2], format=lambda w, r: f"{w} {r[0]} {r[1]}")))

pipeline.execute()
"""
LINES = [f"w{i % 7} w{i % 3} w{i % 11}" for i in range(60)]  # 12 windows of 5 lines
REFUSE_SECONDS = 30.0  # a refusal, not a run: interpreter start and imports on a busy CI machine included


@pytest.fixture
def store(request, tmp_path):
    kind = request.param
    env = {"GYREFLOW_STATE__PATH": str(tmp_path / "state"),
           "GYREFLOW_STATE__BACKEND": "rocksdb" if kind == "rocksdb" else "jdbc"}
    if kind == "postgresql":
        env["GYREFLOW_STATE__URL"], drop = create_database(request.getfixturevalue("postgres_url"))
        env["GYREFLOW_STATE__SECRET"] = POSTGRES_SECRET
        yield env
        drop()
        return
    yield env


def environ(store: dict, environment: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    env.update(store)
    env.update({"COLUMNS": "400", "GYREFLOW_ENVIRONMENT__TYPE": environment,
                "GYREFLOW_SPARK__MASTER": "local[2]",
                "GYREFLOW_SPARK__CONF": json.dumps({"spark.ui.enabled": "false"})})
    return env


def command(tmp_path: Path, out: Path, delay: float, *flags: str) -> list[str]:
    script = tmp_path / "locked.py"
    script.write_text(SCRIPT, encoding="utf-8")
    data = tmp_path / "lines.txt"
    data.write_text("".join(line + "\n" for line in LINES), encoding="utf-8")
    return [sys.executable, "-m", "gyreflow", "run", "--quiet", *flags, str(script), "--",
            str(data), str(out), str(delay)]


def published(out: Path) -> list[str]:
    return sorted(n for n in os.listdir(out) if not n.startswith(".")) if out.exists() else []


def read_output(out: Path) -> dict[int, dict[str, int]]:
    by_window: dict[int, dict[str, int]] = {}
    for name in published(out):
        for line in (out / name).read_text(encoding="utf-8").splitlines():
            window, word, count = line.split()
            by_window.setdefault(int(window), {})[word] = int(count)
    return by_window


@pytest.mark.parametrize(("store", "holder_environment"), [
    pytest.param("rocksdb", "local", id="rocksdb-local"),
    pytest.param("sqlite", "local", id="sqlite-local"),
    pytest.param("postgresql", "local", id="postgresql-local"),
    pytest.param("rocksdb", "spark", id="rocksdb-spark"),
], indirect=["store"])
def test_a_second_run_is_refused_while_the_first_holds_the_job(store, holder_environment, tmp_path):
    out = tmp_path / "out"
    holder = subprocess.Popen(command(tmp_path, out, 1.0), env=environ(store, holder_environment),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while len(published(out)) < 1:  # the holder has run a window: it holds the job
            assert holder.poll() is None, f"the holder ended early:\n{holder.stderr.read()}"
            assert time.monotonic() < deadline, "the holder published nothing"
            time.sleep(0.05)
        before = {name: (out / name).read_bytes() for name in published(out)}
        for flags in ((), ("--fresh",), ("--resume",)):
            assert holder.poll() is None, "the holder ended before the second run could be tried"
            started = time.monotonic()
            second = subprocess.run(command(tmp_path, out, 0.0, *flags),
                                    env=environ(store, "local"), capture_output=True, text=True,
                                    timeout=120, check=False)
            lines = second.stderr.strip().splitlines()
            assert second.returncode == 4, (flags, second.returncode, second.stderr)
            assert len(lines) == 1 and lines[0].startswith("error: "), second.stderr
            message = lines[0]
            assert f"pid {holder.pid} " in message and socket.gethostname() in message, message
            assert "since 20" in message, message  # the holder's start time
            assert "Traceback" not in second.stderr
            # Refused before any work: the interpreter's start and import are the rest.
            assert time.monotonic() - started < REFUSE_SECONDS
        for name, data in before.items():
            assert (out / name).read_bytes() == data, f"{name} changed under the holder"
        assert holder.poll() is None, "the holder did not survive the refused runs"
    finally:
        if holder.poll() is None:
            os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    assert holder.returncode == -signal.SIGKILL
    resumed = subprocess.run(command(tmp_path, out, 0.0, "--resume"), env=environ(store, "local"),
                             capture_output=True, text=True, timeout=300, check=False)
    assert resumed.returncode == 0, resumed.stderr
    assert read_output(out) == word_count_oracle(LINES, 5)
