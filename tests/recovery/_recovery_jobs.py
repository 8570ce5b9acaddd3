"""The crash recovery tests' jobs: run, crash and resume them, and compare their output."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from _recovery_data import WC_WINDOW
from _staged_output import is_staged_window, read_dir

from gyreflow.state.shared.snapshot import JobMeta

# Every job runs as ``python -m gyreflow run`` in a subprocess. A crash is either a crash point
# (``GYREFLOW_CRASH_AT=POINT:WINDOW``: the job SIGKILLs itself there) or a SIGKILL sent from here
# as soon as a given fraction of the windows is published (a progress marker, not a guess at how long
# the run takes: on a loaded machine the kill still lands mid-run). After the crash, the visible
# output must be a prefix of the reference (whole files only); after ``--resume`` it must be exactly
# the reference: the same file names (hidden staged files included, so none may remain) and, per
# file, the same lines.

ROOT = Path(__file__).resolve().parents[2]
WORD_COUNT = ROOT / "examples" / "word_count.py"
KEYED_JOIN = ROOT / "examples" / "keyed_join.py"
WC_JOB = "word-count/word_count"
TIMEOUT = 180
KILLED = -signal.SIGKILL


def base_environ(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment without GYREFLOW_* variables, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    env["COLUMNS"] = "400"  # rich wraps stderr at the terminal width: keep messages on one line
    env["GYREFLOW_ENVIRONMENT__TYPE"] = "local"  # crash points are the local executor's
    # Tasks in the job's process (the default would be a worker process per core): a crash point
    # then kills the job, as the tests mean, not a worker the run restarts by itself.
    env["GYREFLOW_ENVIRONMENT__WORKERS"] = "1"
    env.update(extra or {})
    return env


def command(script: Path, args: list[str], flags: tuple[str, ...] = ()) -> list[str]:
    return [sys.executable, "-m", "gyreflow", "run", "--quiet", *flags, str(script), "--", *args]


def run_job(script: Path, args: list[str], env: dict[str, str], flags: tuple[str, ...] = (),
            cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(command(script, args, flags), env=base_environ(env), cwd=cwd,
                          capture_output=True, text=True, timeout=TIMEOUT, check=False)


def kill_at(script: Path, args: list[str], env: dict[str, str], published: int,
            flags: tuple[str, ...] = ()) -> int:
    """Start the job, SIGKILL it as soon as ``published`` window files are visible in its output
    directory and return its exit status (always SIGKILL: the job cannot end first)."""
    out = Path(args[args.index("--output") + 1])
    process = subprocess.Popen(command(script, args, flags), env=base_environ(env),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + TIMEOUT
    try:
        while visible_count(out) < published:
            if process.poll() is not None:
                pytest.fail(f"the job exited {process.returncode} before {published} windows were "
                            f"published:\n{process.stderr.read()}")
            if time.monotonic() > deadline:
                pytest.fail(f"{published} windows were not published within {TIMEOUT} s")
            time.sleep(0.005)
        os.kill(process.pid, signal.SIGKILL)
        _, stderr = process.communicate(timeout=TIMEOUT)
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == KILLED, stderr
    return process.returncode


def visible_count(directory: Path) -> int:
    try:
        return sum(1 for name in os.listdir(directory) if not name.startswith("."))
    except FileNotFoundError:
        return 0


def assert_same_output(directory: Path, reference: dict[str, list[str]]) -> None:
    """Exactly the reference files, no hidden staged file left, same lines in every file."""
    actual = read_dir(directory)
    assert sorted(actual) == sorted(reference), (
        f"file names differ: missing {sorted(set(reference) - set(actual))}, "
        f"extra {sorted(set(actual) - set(reference))}")
    different = [name for name in sorted(reference) if actual[name] != reference[name]]
    assert not different, f"files with other content than the reference: {different}"


def assert_visible_prefix(directory: Path, reference: dict[str, list[str]]) -> int:
    """After a crash: the visible files are windows 1..m, each complete; returns m."""
    actual = read_dir(directory)
    visible = sorted(name for name in actual if not name.startswith("."))
    count = len(visible)
    assert visible == [f"window-{w:06d}.jsonl" for w in range(1, count + 1)], visible
    for name in visible:
        assert actual[name] == reference[name], f"{name} is visible but differs from the reference"
    hidden = [name for name in actual if name.startswith(".")]
    assert all(is_staged_window(name) for name in hidden), hidden
    return count


POSTGRES_SCRIPT = ROOT / "scripts" / "postgres.sh"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _create_database(server_url: str) -> tuple[str, Callable[[], None]]:
    """A new database on the server of ``server_url`` and a function dropping it; the database
    of ``server_url`` itself when the user may not create databases (the crash tests' first run
    then uses --fresh: the job name is fixed by the example)."""
    import sqlalchemy as sa
    from sqlalchemy.engine import make_url

    url = make_url(server_url)
    admin = sa.create_engine(url.set(database="postgres"), isolation_level="AUTOCOMMIT")
    name = f"gyreflow_recovery_{uuid.uuid4().hex[:12]}"
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    except sa.exc.DBAPIError:
        admin.dispose()
        return server_url, lambda: None

    def drop() -> None:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()

    return url.set(database=name).render_as_string(hide_password=False), drop


def stored_meta(env: dict[str, str], job: str = WC_JOB) -> JobMeta | None:
    """The job meta in the store that the GYREFLOW_STATE__* variables ``env`` select."""
    from gyreflow.api.config import Config
    from gyreflow.state.backends import backend_from_config

    config = Config.load(None, environ={"GYREFLOW_ENVIRONMENT__TYPE": "local", **env})
    store = backend_from_config(config).open_store()
    try:
        return store.read_meta(job)
    finally:
        store.close()


def word_args(path: Path, out: Path, parallelism: int | None = None) -> list[str]:
    args = ["--input", str(path), "--output", str(out), "--window", str(WC_WINDOW)]
    if parallelism is not None:
        args += ["--parallelism", str(parallelism)]
    return args


def crash(script: Path, args: list[str], env: dict[str, str], moment: str, *,
          reference: dict[str, list[str]], flags: tuple[str, ...] = ()) -> int:
    """Crash the job at ``moment``: ``POINT:WINDOW`` (a crash point) or ``kill@FRACTION`` (SIGKILL
    once that fraction of the reference's windows is published); returns the exit status."""
    if moment.startswith("kill@"):
        published = max(1, round(float(moment[5:]) * len(reference)))
        assert published < len(reference), moment
        return kill_at(script, args, env, published, flags)
    done = run_job(script, args, {**env, "GYREFLOW_CRASH_AT": moment}, flags)
    assert done.returncode == KILLED, (
        f"crash point {moment} was armed but the job exited {done.returncode}:\n{done.stderr}")
    return done.returncode


def resume(script: Path, args: list[str], env: dict[str, str],
           reference: dict[str, list[str]], extra: tuple[str, ...] = ()) -> None:
    done = run_job(script, args, env, ("--resume", *extra))
    assert done.returncode == 0, done.stderr
    assert_same_output(Path(args[args.index("--output") + 1]), reference)


def first_flags(kind: str) -> tuple[str, ...]:
    """PostgreSQL is a shared server: the first run of a test starts from a clean job anyway."""
    return ("--fresh",) if kind == "postgresql" else ()
