"""Crash recovery on Spark: SIGKILL the Spark *driver* mid-run, ``gyreflow run --resume``, and the
output equals an uninterrupted run's.

Every job is ``python -m gyreflow run --quiet examples/word_count.py`` in a subprocess with
``GYREFLOW_ENVIRONMENT__TYPE=spark``, ``local[2]`` and rounds mode (``spark.mode = "rounds"``: each
window a Spark job, so a window lasts long enough for a timed kill to land inside it; the driver code
the crash points arm is the same in workers mode, whose driver kill tests/spark/test_spark_workers.py
takes). The expected output is computed by a plain-Python
oracle (``collections.Counter``, cumulative counts per window of ``WINDOW`` input lines), never by the
engine; an uninterrupted Spark run is checked against it too. "Equal" means: exactly the same file
names (hidden entries included, so no ``.staged`` file may be left) and, per file, the same sorted lines;
each window's parsed content must also equal the oracle's window.

Crashes:

- crash points (``GYREFLOW_CRASH_AT=POINT:WINDOW``) that happen on the driver: ``window-finished``,
  ``after-commit``, ``mid-publish`` (``before-commit`` is the same driver code as on the local
  environment, where tests/recovery/test_word_count_recovery.py takes it). (``snapshot-written`` is
  the asynchronous writer's, which Spark tasks do not use; ``mid-window`` would kill a Python worker,
  not the driver.)
  The driver must die by its own SIGKILL at the armed point. If it runs on past the armed window
  instead, the test kills it itself (so the resume is still checked) and then fails on the crash point;
- a SIGKILL sent from the test in a late window (the resume changes the counting parallelism).

On RocksDB one store takes three drivers in a row: the first SIGKILLs itself at a crash point, the
test SIGKILLs its ``--resume`` in a late window, and a second ``--resume`` finishes the job (each
driver start is a JVM start: the chain checks both kinds of kill with one start fewer).

Resumes with another counting parallelism: RocksDB 2 -> 4 (after the timed kill), SQLite 3 -> 2
(crash point).

After every driver exits (killed or not), no process of its Spark application may remain: the JVM
(found with ``pgrep -f spark.app.name=<unique name>``) and the Python workers (found by a marker
variable they inherit through the JVM) must be gone within ``LINGER_SECONDS``.

Backends: RocksDB, JDBC on SQLite, JDBC on PostgreSQL (a new database per test).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from _postgres import POSTGRES_SECRET
from _recovery_data import word_count_oracle
from _spark_master import ON_CLUSTER, cluster_state_env
from _spark_master import master as spark_master
from _staged_output import is_staged_window
from _staged_output import read_dir as read_staged_dir

# Every test compares with the oracle, none with another test's run: they spread over every parallel
# worker.

ROOT = Path(__file__).resolve().parents[2]
WORD_COUNT = ROOT / "examples" / "word_count.py"
JOB = "word-count/word_count"

LINES = 1_150  # 6 windows of 200 lines, the last one short (150 lines)
WINDOW = 200
WINDOWS = 6
KILLED = -signal.SIGKILL
RUN_TIMEOUT = 900  # seconds for one Spark run (10-15 s on an idle machine)
LINGER_SECONDS = 20
MARKER = "SPARK_RECOVERY_TEST_RUN"  # inherited by the JVM and its Python workers


# Input and oracle ----------------------------------------------------------------------------------


def make_lines(count: int = LINES, seed: int = 20251121) -> list[str]:
    """Deterministic text: 150 words (some not ASCII), blank and whitespace-only lines."""
    rng = random.Random(seed)
    vocabulary = [f"w{i:03d}" for i in range(146)] + ["café", "naïve", "Ärger", "x"]
    lines = []
    for _ in range(count):
        roll = rng.random()
        if roll < 0.03:
            lines.append("")
        elif roll < 0.05:
            lines.append("  \t ")
        else:
            lines.append(" ".join(rng.choice(vocabulary) for _ in range(rng.randint(1, 8))))
    return lines


def oracle(lines: list[str], window: int) -> dict[int, dict[str, int]]:
    """Window w -> every word of its lines with its count over windows 1..w."""
    return word_count_oracle(lines, window)


def oracle_files(by_window: dict[int, dict[str, int]]) -> dict[str, list[str]]:
    """The files the word count should write for ``by_window``: name -> sorted lines."""
    return {
        f"window-{w:06d}.jsonl": sorted(
            json.dumps({"window": w, "word": word, "count": count}, ensure_ascii=False)
            for word, count in counts.items())
        for w, counts in by_window.items()
    }


# Output checks ------------------------------------------------------------------------------------


def read_dir(directory: Path) -> dict[str, list[str]]:
    """Every file of ``directory``, staged ones included (see ``_staged_output.read_dir``)."""
    return read_staged_dir(directory)


def parse_window(name: str, lines: list[str]) -> dict[str, int]:
    window = int(name[len("window-"):-len(".jsonl")])
    counts: dict[str, int] = {}
    for line in lines:
        record = json.loads(line)
        assert set(record) == {"window", "word", "count"}, f"{name}: unexpected line {line!r}"
        assert record["window"] == window, f"{name}: line of another window: {line!r}"
        assert record["word"] not in counts, f"{name}: word {record['word']!r} twice"
        counts[record["word"]] = record["count"]
    return counts


def assert_output_is_the_oracle(directory: Path, expected: dict[int, dict[str, int]]) -> None:
    """Exactly the oracle's files (no hidden staged file left), each window's content the oracle's,
    and the same lines, byte for byte, as an uninterrupted run writes."""
    actual = read_dir(directory)
    files = oracle_files(expected)
    assert sorted(actual) == sorted(files), (
        f"file names differ from the oracle's: missing {sorted(set(files) - set(actual))}, "
        f"extra {sorted(set(actual) - set(files))}")
    for name in sorted(files):
        window = int(name[len("window-"):-len(".jsonl")])
        counts = parse_window(name, actual[name])
        wrong = {w: (counts.get(w), c) for w, c in expected[window].items() if counts.get(w) != c}
        extra = sorted(set(counts) - set(expected[window]))
        assert not wrong and not extra, (
            f"{name}: words with other counts (actual, oracle): {dict(list(wrong.items())[:10])}; "
            f"words the oracle does not have in this window: {extra[:10]}")
        assert actual[name] == files[name], f"{name}: lines differ from the oracle's rendering"


def published_windows(directory: Path) -> list[int]:
    if not directory.exists():
        return []
    return sorted(int(name[len("window-"):-len(".jsonl")]) for name in os.listdir(directory)
                  if name.startswith("window-") and name.endswith(".jsonl"))


def assert_visible_prefix(directory: Path, expected: dict[int, dict[str, int]]) -> int:
    """After a crash: the visible files are windows 1..m, each complete and correct; returns m."""
    actual = read_dir(directory)
    files = oracle_files(expected)
    visible = sorted(name for name in actual if not name.startswith("."))
    count = len(visible)
    assert visible == [f"window-{w:06d}.jsonl" for w in range(1, count + 1)], (
        f"after the crash the visible files are not a prefix of the windows: {visible}")
    for name in visible:
        assert actual[name] == files[name], f"{name} is visible after the crash but differs"
    hidden = sorted(name for name in actual if name.startswith("."))
    assert all(is_staged_window(name) for name in hidden), hidden
    return count


# Spark processes ---------------------------------------------------------------------------------


def run_processes(app: str) -> dict[int, str]:
    """Processes of the Spark application ``app``: the JVM (its command line names the app) and every
    process that inherited the run's marker variable (the driver, the JVM, its Python workers)."""
    found: dict[int, str] = {}
    listed = subprocess.run(["pgrep", "-f", f"spark.app.name={app}"], capture_output=True,
                            text=True, check=False)
    pids = {int(pid) for pid in listed.stdout.split()}
    needle = f"{MARKER}={app}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                if needle in handle.read().split(b"\0"):
                    pids.add(int(entry))
        except OSError:  # gone, or a zombie
            continue
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as handle:
                state = handle.read().rsplit(")", 1)[1].split()[0]
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                cmdline = handle.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, IndexError):
            continue
        if state != "Z":
            found[pid] = f"[{state}] {cmdline[:160]}"
    return found


def assert_no_leftovers(app: str, what: str) -> None:
    """No process of ``app`` may outlive its driver by more than LINGER_SECONDS."""
    deadline = time.monotonic() + LINGER_SECONDS
    left = run_processes(app)
    while left and time.monotonic() < deadline:
        time.sleep(0.25)
        left = run_processes(app)
    if left:
        for pid in left:  # processes this test's driver started: clean up, then report
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        details = "\n".join(f"  pid {pid}: {line}" for pid, line in sorted(left.items()))
        pytest.fail(f"{what}: {len(left)} process(es) of Spark application {app} still ran "
                    f"{LINGER_SECONDS} s after the driver exited:\n{details}")


# Running jobs ------------------------------------------------------------------------------------


class Job:
    """One ``gyreflow run`` of the word count on Spark, in its own Spark application."""

    def __init__(self, label: str, workdir: Path, input_path: Path, out: Path, state: dict[str, str],
                 parallelism: int, flags: tuple[str, ...] = (), crash_at: str | None = None,
                 master: str | None = None, spark_conf: dict[str, str] | None = None) -> None:
        self.label = label
        self.app = f"gyreflow-recovery-{uuid.uuid4().hex}"
        self.log = workdir / f"{label}.log"
        self.out = out
        env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
        env.update(state)
        env.update({
            "COLUMNS": "400",
            "GYREFLOW_ENVIRONMENT__TYPE": "spark",
            "GYREFLOW_SPARK__MASTER": master or spark_master(),
            "GYREFLOW_SPARK__MODE": state.get("GYREFLOW_SPARK__MODE", "rounds"),
            "GYREFLOW_SPARK__APP_NAME": self.app,
            "GYREFLOW_SPARK__CONF": json.dumps(spark_conf or {"spark.ui.enabled": "false"}),
            MARKER: self.app,
        })
        if crash_at is not None:
            env["GYREFLOW_CRASH_AT"] = crash_at
        args = ["--input", str(input_path), "--output", str(out), "--window", str(WINDOW),
                "--parallelism", str(parallelism)]
        command = [sys.executable, "-m", "gyreflow", "run", "--quiet", *flags, str(WORD_COUNT),
                   "--", *args]
        self.started = time.monotonic()
        self.published_at: dict[int, float] = {}  # window -> when ``kill_when`` first saw its file
        # Output to a file, not a pipe: a JVM that outlived the driver would hold a pipe open.
        with open(self.log, "w", encoding="utf-8") as log:
            self.process = subprocess.Popen(command, env=env, cwd=workdir, stdin=subprocess.DEVNULL,
                                            stdout=log, stderr=subprocess.STDOUT)
        self.killed_by_test = False

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")[-4000:]

    def kill_when(self, condition: Callable[[], bool], delay: float = 0.0) -> bool:
        """SIGKILL the driver once ``condition()`` holds (after ``delay`` s); False if it exited first."""
        deadline = self.started + RUN_TIMEOUT
        while self.process.poll() is None and not condition():
            if time.monotonic() > deadline:
                return False  # wait() reports the time-out
            self.note_published()
            time.sleep(0.05)
        if delay and self.process.poll() is None:
            time.sleep(delay)
        if self.process.poll() is not None:
            return False
        os.kill(self.process.pid, signal.SIGKILL)
        self.killed_by_test = True
        return True

    def note_published(self) -> None:
        now = time.monotonic()
        for window in published_windows(self.out):
            self.published_at.setdefault(window, now)

    def wait(self) -> int:
        """Wait for the driver, then check that its Spark processes went away with it."""
        try:
            self.process.wait(timeout=max(1.0, self.started + RUN_TIMEOUT - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()
            assert_no_leftovers(self.app, f"{self.label} (timed out)")
            pytest.fail(f"{self.label}: no result within {RUN_TIMEOUT} s\n{self.output()}")
        assert_no_leftovers(self.app, f"{self.label} (exit status {self.process.returncode})")
        return self.process.returncode


def resume(tmp_path: Path, input_path: Path, out: Path, state: dict[str, str], parallelism: int,
           expected: dict[int, dict[str, int]], master: str | None = None,
           spark_conf: dict[str, str] | None = None) -> None:
    """``--resume`` without any crash point: it must finish and give exactly the oracle's output."""
    label = "resume"
    job = Job(label, tmp_path, input_path, out, state, parallelism, flags=("--resume",), master=master,
              spark_conf=spark_conf)
    status = job.wait()
    assert status == 0, f"{label} exited {status}:\n{job.output()}"
    assert_output_is_the_oracle(out, expected)


def last_completed(state: dict[str, str], job: str = JOB) -> int | None:
    """The last completed window of ``job`` in the store ``state`` selects (None: no meta)."""
    from gyreflow.api.config import Config
    from gyreflow.state.backends import backend_from_config

    config = Config.load(None, environ={"GYREFLOW_ENVIRONMENT__TYPE": "local", **state})
    store = backend_from_config(config).open_store()
    try:
        meta = store.read_meta(job)
    finally:
        store.close()
    return None if meta is None else meta.last_completed


# Fixtures ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def word_input(tmp_path_factory) -> tuple[Path, dict[int, dict[str, int]]]:
    lines = make_lines()
    path = tmp_path_factory.mktemp("spark-recovery-input") / "words.txt"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    expected = oracle(lines, WINDOW)
    assert len(expected) == WINDOWS and all(expected.values())
    return path, expected


@pytest.fixture
def state_env(request, tmp_path):
    """``state_env(kind)``: GYREFLOW_STATE__* variables of a new, empty store of ``kind`` (rocksdb,
    sqlite, postgresql: a new database on the test server, dropped after the test)."""
    drops = []

    def make(kind: str) -> dict[str, str]:
        env = {"GYREFLOW_STATE__PATH": str(tmp_path / "state")}
        if kind == "rocksdb":
            env["GYREFLOW_STATE__BACKEND"] = "rocksdb"
        elif kind == "sqlite":
            env["GYREFLOW_STATE__BACKEND"] = "jdbc"
        elif kind == "postgresql":
            import sqlalchemy as sa
            from sqlalchemy.engine import make_url

            server = make_url(request.getfixturevalue("postgres_url"))
            admin = sa.create_engine(server.set(database="postgres"), isolation_level="AUTOCOMMIT")
            name = f"gyreflow_spark_recovery_{uuid.uuid4().hex[:12]}"
            with admin.connect() as conn:
                conn.execute(sa.text(f'CREATE DATABASE "{name}"'))

            def drop() -> None:
                with admin.connect() as conn:
                    conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
                admin.dispose()

            drops.append(drop)
            env["GYREFLOW_STATE__BACKEND"] = "jdbc"
            env["GYREFLOW_STATE__URL"] = server.set(database=name).render_as_string(hide_password=False)
            env["GYREFLOW_STATE__SECRET"] = POSTGRES_SECRET
        else:
            raise ValueError(kind)
        safe = cluster_state_env(env, tmp_path)
        if safe is None:
            pytest.skip(f"a cluster refuses {kind} state (tests/spark/test_spark_cluster.py)")
        return safe

    yield make
    for drop in drops:
        drop()


# Tests -------------------------------------------------------------------------------------------


def test_uninterrupted_spark_run_matches_the_oracle(word_input, tmp_path):
    """One Spark run (RocksDB, parallelism 2) gives the oracle's output, and while it runs the
    leftover check sees every kind of process of its application."""
    path, expected = word_input
    out = tmp_path / "out"
    state = cluster_state_env({"GYREFLOW_STATE__BACKEND": "rocksdb",
                               "GYREFLOW_STATE__PATH": str(tmp_path / "state")}, tmp_path)
    job = Job("uninterrupted", tmp_path, path, out, state, 2)
    seen: set[str] = set()  # which kinds of the run's processes the leftover check can see
    while job.process.poll() is None and time.monotonic() - job.started < RUN_TIMEOUT:
        for line in run_processes(job.app).values():
            seen.update(kind for kind in ("java", "pyspark.daemon", "gyreflow run") if kind in line)
        time.sleep(0.5)
    status = job.wait()
    assert status == 0, job.output()
    assert_output_is_the_oracle(out, expected)
    # (On a cluster the Python workers belong to the executors, not to the job's process tree.)
    expected_kinds = {"java", "gyreflow run"} | (set() if ON_CLUSTER else {"pyspark.daemon"})
    assert seen == expected_kinds, seen


def crash_at_point(workdir: Path, input_path: Path, out: Path, state: dict[str, str], point: str,
                   window: int, parallelism: int,
                   expected: dict[int, dict[str, int]]) -> tuple[Job, int, int | None]:
    """Run a driver armed to SIGKILL itself at ``point`` of ``window``; returns the job, how many
    windows are visible after it ended (checked: whole files of the first windows) and the last
    completed window in the store. The armed point lies before window + 1 is published: if that
    file appears, the point was missed, and the test kills the driver itself (so that what follows
    still starts from a crash near the point); ``assert_crashed_at`` then fails."""
    job = Job("crash", workdir, input_path, out, state, parallelism, crash_at=f"{point}:{window}")
    job.kill_when(lambda: window + 1 in published_windows(out))
    status = job.wait()
    assert status in (KILLED, 0), f"crash run exited {status}:\n{job.output()}"
    return job, assert_visible_prefix(out, expected), last_completed(state)


def assert_crashed_at(job: Job, point: str, window: int, visible: int, committed: int | None) -> None:
    """The driver of ``crash_at_point`` killed itself at the armed point: what it published and
    committed before is what that point allows."""
    crash_at = f"{point}:{window}"
    status = job.process.returncode
    outcome = ("the test killed it after it published window "
               f"{window + 1}" if job.killed_by_test else f"it exited {status}")
    assert status == KILLED and not job.killed_by_test, (
        f"GYREFLOW_CRASH_AT={crash_at} did not make the Spark driver kill itself: {outcome}. "
        "The crash points of the job driver (runtime/driver.py) are not reached on the Spark host")
    if point in ("window-finished", "before-commit", "after-commit"):
        assert visible <= window - 1, f"{crash_at}: window {window} or later was published"
    else:
        assert window - 1 <= visible <= window, f"{crash_at}: {visible} windows published"
    if point == "window-finished":
        assert committed is None or committed < window, f"{crash_at}: window {committed} committed"
    elif point == "before-commit":
        assert committed == window - 1, f"{crash_at}: last completed window {committed}"
    else:
        assert committed == window, f"{crash_at}: last completed window {committed}"


# point, window, backend, parallelism of the crashed run, of the resume (the driver-side points are
# one code for both environments: tests/recovery/test_word_count_recovery.py takes every point on
# the local one). window-finished on RocksDB starts the chain of the test after this one.
ARMED = [
    pytest.param("after-commit", 4, "postgresql", 2, 2, id="after-commit-4-postgresql"),
    pytest.param("mid-publish", 5, "sqlite", 3, 2, id="mid-publish-5-sqlite-resume-p2"),
]


@pytest.mark.parametrize(("point", "window", "kind", "parallelism", "resume_parallelism"), ARMED)
def test_driver_crash_point_then_resume(point, window, kind, parallelism, resume_parallelism,
                                        word_input, state_env, tmp_path):
    """The driver SIGKILLs itself at ``point`` of ``window``; ``--resume`` gives the oracle's output
    (the resume checks run first, so a missed crash point still exercises a crash near it)."""
    path, expected = word_input
    out = tmp_path / "out"
    state = state_env(kind)
    crashed, visible, committed = crash_at_point(tmp_path, path, out, state, point, window,
                                                 parallelism, expected)
    resume(tmp_path, path, out, state, resume_parallelism, expected)
    assert_crashed_at(crashed, point, window, visible, committed)


def test_crash_point_then_a_resume_killed_in_a_late_window_then_resume_with_other_parallelism(
        word_input, state_env, tmp_path):
    """RocksDB, three drivers on one store. The first SIGKILLs itself at ``window-finished:3``. The
    test SIGKILLs its ``--resume`` (2 counting tasks) about half a window after window 3 of 6 was
    published, so inside window 4 or 5. The second ``--resume`` runs 4 counting tasks instead of 2
    (state is read back by key group, the new tasks merge the old layout's ranges), on ``local[4]``
    so that the four run at once, as on a cluster: two of them read the same old-layout range. Its
    output is the oracle's (the resume checks run first, as in the test above)."""
    path, expected = word_input
    out = tmp_path / "out"
    state = state_env("rocksdb")
    crashed, visible, committed = crash_at_point(tmp_path, path, out, state, "window-finished", 3,
                                                 2, expected)
    # One window's seconds, from the first driver's publications (to time the kill inside a window).
    seen = sorted(crashed.published_at.values())
    per_window = (seen[-1] - seen[0]) / (len(seen) - 1) if len(seen) > 1 else 1.0
    killed_resume = Job("killed-resume", tmp_path, path, out, state, 2, flags=("--resume",))
    killed = killed_resume.kill_when(lambda: 3 in published_windows(out), 0.5 * per_window)
    status = killed_resume.wait()
    assert killed and status == KILLED, (
        f"the resumed run ended (status {status}) before the kill:\n{killed_resume.output()}")
    assert 3 <= assert_visible_prefix(out, expected) < WINDOWS
    resume(tmp_path, path, out, state, 4, expected, master=spark_master(4))
    assert_crashed_at(crashed, "window-finished", 3, visible, committed)
