"""Crash recovery: after a SIGKILL at any moment, ``gyreflow run --resume`` gives the output of an
uninterrupted run.

Every job runs as ``python -m gyreflow run`` in a subprocess. A crash is either a crash point
(``GYREFLOW_CRASH_AT=POINT:WINDOW``: the job SIGKILLs itself there) or a SIGKILL sent from here
as soon as a given fraction of the windows is published (a progress marker, not a guess at how long
the run takes: on a loaded machine the kill still lands mid-run). After the crash, the visible
output must be a prefix of the reference (whole files only); after ``--resume`` it must be exactly
the reference: the same file names (hidden staged files included, so none may remain) and, per
file, the same lines.
The reference is an uninterrupted run on the memory backend, itself checked against a plain-Python
oracle (``collections.Counter`` for the word count, a dict join and running sums for the join).

Backends: RocksDB, JDBC on SQLite, JDBC on a real PostgreSQL (a fresh database per test). The
PostgreSQL cases first need one uninterrupted run on a new database to finish in time
(``postgres_canary``); while it does not, they fail at once with its diagnosis.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest
from _postgres import POSTGRES_SECRET
from _staged_output import is_staged_window, read_dir

from gyreflow.state.shared.snapshot import JobMeta

ROOT = Path(__file__).resolve().parents[2]
WORD_COUNT = ROOT / "examples" / "word_count.py"
KEYED_JOIN = ROOT / "examples" / "keyed_join.py"
WC_JOB = "word-count/word_count"

# Small windows: what a crash test checks (which window a crash lands in, what is staged, committed
# and published) does not grow with a window's size, and the whole module runs a few hundred jobs.
WC_LINES = 5_950  # 30 windows of 200 lines, the last one short (150 lines)
WC_WINDOW = 200
WC_WINDOWS = 30
JOIN_ORDERS = 3_600  # 12 windows of orders
JOIN_CUSTOMERS = 3_750  # 13 windows of customer records: window 13 joins nothing (empty file)
JOIN_WINDOW = 300
JOIN_WINDOWS = 13
TIMEOUT = 180
KILLED = -signal.SIGKILL


# Input data and oracles ----------------------------------------------------------------------


def make_word_lines(count: int, seed: int = 20240601) -> list[str]:
    """Deterministic text: 400 words (one not ASCII), some blank and whitespace-only lines."""
    rng = random.Random(seed)
    vocabulary = [f"w{i:03d}" for i in range(399)] + ["café"]
    lines = []
    for _ in range(count):
        roll = rng.random()
        if roll < 0.03:
            lines.append("")
        elif roll < 0.04:
            lines.append("   ")
        else:
            lines.append(" ".join(rng.choice(vocabulary) for _ in range(rng.randint(1, 7))))
    return lines


def word_count_oracle(lines: list[str], window: int) -> dict[int, dict[str, int]]:
    """For each window: every word in its lines with its count over windows 1..w."""
    totals: Counter = Counter()
    expected = {}
    for number, start in enumerate(range(0, len(lines), window), start=1):
        words = [word for line in lines[start:start + window] for word in line.split()]
        totals.update(words)
        expected[number] = {word: totals[word] for word in set(words)}
    return expected


def parse_word_count(files: dict[str, list[str]]) -> dict[int, dict[str, int]]:
    windows = {}
    for name, lines in files.items():
        window = int(name.removeprefix("window-").removesuffix(".jsonl"))
        counts: dict[str, int] = {}
        for line in lines:
            record = json.loads(line)
            assert set(record) == {"window", "word", "count"}, line
            assert record["window"] == window, line
            assert record["word"] not in counts, f"{record['word']!r} twice in {name}"
            counts[record["word"]] = record["count"]
        windows[window] = counts
    return windows


def make_join_lines(orders: int, customer_records: int,
                    seed: int = 99) -> tuple[list[str], list[str]]:
    """Orders ``order_id,customer_id,amount`` and customer records ``customer_id,name,city``."""
    rng = random.Random(seed)
    cities = ["Oslo", "Rome", "Lima", "Pune", "Kyiv", "Accra", "Quito", "Hanoi", "Perth", "Zürich"]
    customers = [f"c{i:03d}" for i in range(300)]
    home = {c: rng.choice(cities) for c in customers}
    order_lines = []
    for number in range(orders):
        cents = rng.randint(1, 99_999)
        amount = f"{cents // 100}.{cents % 100:02d}"
        order_lines.append(f"o{number:06d},{rng.choice(customers)},{amount}")
    customer_lines = []
    for _ in range(customer_records):
        customer = rng.choice(customers)
        if rng.random() < 0.1:
            home[customer] = rng.choice(cities)
        customer_lines.append(f"{customer},{rng.choice(['Ann', 'Bo', 'Cy'])},{home[customer]}")
    return order_lines, customer_lines


def join_oracle(order_lines: list[str], customer_lines: list[str],
                window: int) -> dict[int, dict[str, int]]:
    """Per window: join orders and customer records of the window on customer id; the running
    total (cents) per city over windows 1..w, for the cities joined in window w."""
    count = max(-(-len(order_lines) // window), -(-len(customer_lines) // window))
    totals: dict[str, int] = {}
    expected = {}
    for number in range(1, count + 1):
        lo, hi = (number - 1) * window, number * window
        cities_of: dict[str, list[str]] = defaultdict(list)
        for line in customer_lines[lo:hi]:
            customer, _name, city = line.split(",")
            cities_of[customer].append(city)
        touched = set()
        for line in order_lines[lo:hi]:
            _order, customer, amount = line.split(",")
            euros, cents = amount.split(".")
            for city in cities_of.get(customer, ()):
                totals[city] = totals.get(city, 0) + int(euros) * 100 + int(cents)
                touched.add(city)
        expected[number] = {city: totals[city] for city in touched}
    return expected


def parse_join(files: dict[str, list[str]]) -> dict[int, dict[str, int]]:
    windows = {}
    for name, lines in files.items():
        window = int(name.removeprefix("window-").removesuffix(".jsonl"))
        totals: dict[str, int] = {}
        for line in lines:
            record = json.loads(line)
            assert set(record) == {"window", "city", "total"}, line
            assert record["window"] == window, line
            assert record["city"] not in totals, f"{record['city']!r} twice in {name}"
            euros, cents = record["total"].split(".")
            totals[record["city"]] = int(euros) * 100 + int(cents)
        windows[window] = totals
    return windows


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


# Running jobs --------------------------------------------------------------------------------


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


# Fixtures ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("recovery-data")


@pytest.fixture(scope="module")
def word_input(data_dir) -> tuple[Path, list[str]]:
    lines = make_word_lines(WC_LINES)
    return write_lines(data_dir / "words.txt", lines), lines


@pytest.fixture(scope="module")
def word_reference(word_input, data_dir) -> dict[str, list[str]]:
    """Output files of an uninterrupted word count on the memory backend (checked against the
    oracle here too, so that no crash test compares with a wrong reference)."""
    path, lines = word_input
    out = data_dir / "word-reference"
    done = run_job(WORD_COUNT, ["--input", str(path), "--output", str(out),
                                "--window", str(WC_WINDOW)], {"GYREFLOW_STATE__BACKEND": "memory"})
    assert done.returncode == 0, done.stderr
    reference = read_dir(out)
    assert parse_word_count(reference) == word_count_oracle(lines, WC_WINDOW)
    return reference


@pytest.fixture(scope="module")
def join_input(data_dir) -> tuple[Path, Path, list[str], list[str]]:
    orders, customers = make_join_lines(JOIN_ORDERS, JOIN_CUSTOMERS)
    return (write_lines(data_dir / "orders.csv", orders),
            write_lines(data_dir / "customers.csv", customers), orders, customers)


@pytest.fixture(scope="module")
def join_reference(join_input, data_dir) -> dict[str, list[str]]:
    """Output files of an uninterrupted keyed join on the memory backend, checked as above."""
    orders, customers, order_lines, customer_lines = join_input
    out = data_dir / "join-reference"
    done = run_job(KEYED_JOIN, ["--orders", str(orders), "--customers", str(customers),
                                "--output", str(out), "--window", str(JOIN_WINDOW)],
                   {"GYREFLOW_STATE__BACKEND": "memory"})
    assert done.returncode == 0, done.stderr
    reference = read_dir(out)
    assert parse_join(reference) == join_oracle(order_lines, customer_lines, JOIN_WINDOW)
    return reference


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


PG_CANARY_SECONDS = 60


def _pg_activity(url: str) -> str:
    """The statements other sessions are running in the database of ``url``."""
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.text(
                "SELECT state, round(extract(epoch FROM now() - query_start)), left(query, 300) "
                "FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid()")).all()
    finally:
        engine.dispose()
    return "; ".join(f"[{state}, {seconds} s] {query}" for state, seconds, query in rows) or "none"


@pytest.fixture(scope="module")
def postgres_canary(postgres_url, word_input, word_reference, tmp_path_factory):
    """One uninterrupted word count on a new PostgreSQL database: None when it gives the reference
    output within PG_CANARY_SECONDS (it takes about 2 s), else what went wrong. The PostgreSQL
    crash tests need a backend that can finish a run at all."""
    path, _ = word_input
    url, drop = _create_database(postgres_url)
    out = tmp_path_factory.mktemp("postgres-canary") / "out"
    env = {"GYREFLOW_STATE__BACKEND": "jdbc", "GYREFLOW_STATE__URL": url,
           "GYREFLOW_STATE__SECRET": POSTGRES_SECRET}
    process = subprocess.Popen(command(WORD_COUNT, word_args(path, out), ("--fresh",)),
                               env=base_environ(env), stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    problem = None
    try:
        _, stderr = process.communicate(timeout=PG_CANARY_SECONDS)
        if process.returncode != 0:
            problem = f"the run exited {process.returncode}: {stderr}"
        else:
            try:
                assert_same_output(out, word_reference)
            except AssertionError as exc:
                problem = f"the run gave other output than the reference: {exc}"
    except subprocess.TimeoutExpired:
        published = len([n for n in read_dir(out) if not n.startswith(".")])
        problem = (f"an uninterrupted word count ({WC_WINDOWS} windows, 400 distinct words) "
                   f"did not finish within {PG_CANARY_SECONDS} s on a new PostgreSQL database "
                   f"(about 2 s on RocksDB and SQLite); {published} windows published; statements "
                   f"running: {_pg_activity(url)}")
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
        drop()
    return problem


@pytest.fixture
def state_env(request, tmp_path):
    """``state_env(kind)``: GYREFLOW_STATE__* variables for a fresh, empty store of ``kind``
    (rocksdb, sqlite, postgresql: a new database on the test server, dropped afterwards)."""
    made = []

    def make(kind: str, label: str = "state") -> dict[str, str]:
        env = {"GYREFLOW_STATE__PATH": str(tmp_path / label)}
        if kind == "rocksdb":
            env["GYREFLOW_STATE__BACKEND"] = "rocksdb"
        elif kind == "sqlite":
            env["GYREFLOW_STATE__BACKEND"] = "jdbc"
        elif kind == "postgresql":
            problem = request.getfixturevalue("postgres_canary")
            if problem is not None:
                pytest.fail(f"the PostgreSQL backend cannot finish a run (see "
                            f"test_postgresql_uninterrupted_run_on_a_new_database): {problem}")
            url, drop = _create_database(request.getfixturevalue("postgres_url"))
            made.append(drop)
            env["GYREFLOW_STATE__BACKEND"] = "jdbc"
            env["GYREFLOW_STATE__URL"] = url
            env["GYREFLOW_STATE__SECRET"] = POSTGRES_SECRET
        else:
            raise ValueError(kind)
        return env

    yield make
    for drop in made:
        drop()


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


# The references against the oracles ---------------------------------------------------------


def test_word_count_reference_matches_the_oracle(word_input, word_reference):
    _, lines = word_input
    expected = word_count_oracle(lines, WC_WINDOW)
    assert len(expected) == WC_WINDOWS
    assert sorted(word_reference) == [f"window-{w:06d}.jsonl" for w in range(1, WC_WINDOWS + 1)]
    assert parse_word_count(word_reference) == expected


def test_keyed_join_reference_matches_the_oracle(join_input, join_reference):
    _, _, orders, customers = join_input
    expected = join_oracle(orders, customers, JOIN_WINDOW)
    assert len(expected) == JOIN_WINDOWS
    assert expected[JOIN_WINDOWS] == {}  # only customer records in the last window
    assert sorted(join_reference) == [f"window-{w:06d}.jsonl" for w in range(1, JOIN_WINDOWS + 1)]
    assert parse_join(join_reference) == expected


def test_postgresql_uninterrupted_run_on_a_new_database(postgres_canary):
    assert postgres_canary is None, postgres_canary


# Word count: every crash point and timed kills, on every backend -----------------------------

# Each crash point once per backend, at windows that differ between backends, and two timed
# kills; the parallelism cases below add the first and the last window. ``after-commit`` and
# ``mid-publish`` fire at the first commit of their window or a later one, and a commit may cover
# several windows: a point of one window exactly (``mid-window``) comes right after a
# ``before-commit`` in the chain (nothing of its window or later is committed then), never a few
# windows after one of those two, which the commit they fired at may already have covered.
_POINTS = {
    "rocksdb": ["window-finished:9", "snapshot-written:12", "before-commit:15", "mid-window:16",
                "after-commit:18", "mid-publish:21"],
    "sqlite": ["window-finished:22", "snapshot-written:2", "before-commit:11", "after-commit:5",
               "mid-publish:14", "mid-window:12"],
    "postgresql": ["window-finished:4", "snapshot-written:19", "before-commit:26",
                   "after-commit:13", "mid-publish:8", "mid-window:1"],
}
# Two timed kills per backend: one in the fresh run, one in a run resumed from it (a kill after
# 6 windows and one after 18; kills after 12 and 24 took the same two paths again: a resumed run
# killed inside a window, with its state from a run that was killed itself).
_KILLS = ["kill@0.2", "kill@0.6"]


def _in_window_order(moments: list[str]) -> list[str]:
    return sorted(moments, key=lambda moment: int(moment.rsplit(":", 1)[1]))


# One run per backend crashes at each of its points in window order: the first crash ends a fresh
# run, every later one a run resumed from the crash before it, and a last --resume finishes. Every
# point is taken as in a run of its own (the crashed run's published files are a prefix of the
# reference), and each resume also starts from the state a crash left, as after a real outage.
WORD_COUNT_CHAINS = [pytest.param(kind, _in_window_order(_POINTS[kind]), id=f"{kind}-points")
                     for kind in ("rocksdb", "sqlite", "postgresql")]
WORD_COUNT_CHAINS += [pytest.param(kind, _KILLS, id=f"{kind}-kills")
                      for kind in ("rocksdb", "sqlite", "postgresql")]


@pytest.mark.parametrize(("kind", "moments"), WORD_COUNT_CHAINS)
def test_word_count_crashes_then_resume(kind, moments, word_input, word_reference, state_env,
                                        tmp_path):
    path, _ = word_input
    env = state_env(kind)
    out = tmp_path / "out"
    args = word_args(path, out)
    visible = 0
    for index, moment in enumerate(moments):
        flags = first_flags(kind) if index == 0 else ("--resume",)
        crash(WORD_COUNT, args, env, moment, reference=word_reference, flags=flags)
        now = assert_visible_prefix(out, word_reference)
        assert now >= visible, f"{moment}: published windows went back from {visible} to {now}"
        visible = now
    resume(WORD_COUNT, args, env, word_reference)


# Parallelism 4, and resuming with another parallelism than the crashed run -------------------

# Each case on RocksDB and on one of the two JDBC databases: the key-group ranges a resume with
# another parallelism reads are the same SQL on SQLite and PostgreSQL (state/stores/jdbc.py differs
# by dialect only in its upsert, job lock and vacuum, which every PostgreSQL case here takes, and
# test_word_count_repeated_crashes_with_changing_parallelism changes the layout on both).
PARALLELISM_CASES = [
    (kind, *case)
    for case, jdbc in [
        ((4, 4, "window-finished:30"), "sqlite"),  # the last window: nothing left to compute on resume
        ((1, 4, "after-commit:1"), "postgresql"),  # the first commit, nothing published yet
        ((4, 1, "mid-publish:27"), "sqlite"),
        ((1, 4, "kill@0.5"), "postgresql"),
    ]
    for kind in ("rocksdb", jdbc)
]


@pytest.mark.parametrize(("kind", "crash_parallelism", "resume_parallelism", "moment"),
                         PARALLELISM_CASES)
def test_word_count_resume_with_parallelism(kind, crash_parallelism, resume_parallelism, moment,
                                            word_input, word_reference, state_env, tmp_path):
    path, _ = word_input
    env = state_env(kind)
    out = tmp_path / "out"
    crash(WORD_COUNT, word_args(path, out, crash_parallelism), env, moment,
          reference=word_reference, flags=first_flags(kind))
    assert_visible_prefix(out, word_reference)
    resume(WORD_COUNT, word_args(path, out, resume_parallelism), env, word_reference)


@pytest.mark.parametrize("kind", ["rocksdb", "sqlite", "postgresql"])
def test_word_count_repeated_crashes_with_changing_parallelism(kind, word_input, word_reference,
                                                               state_env, tmp_path):
    """Crash, resume with another parallelism and crash again, several times: the state written
    in one key-group layout is read back in the other, and the old layout is dropped on the way."""
    path, _ = word_input
    env = state_env(kind)
    out = tmp_path / "out"
    steps = [(1, "after-commit:4"), (4, "after-commit:9"), (2, "snapshot-written:15"),
             (1, "mid-publish:22"), (3, "before-commit:26")]
    visible = 0
    for index, (parallelism, moment) in enumerate(steps):
        flags = first_flags(kind) if index == 0 else ("--resume",)
        done = run_job(WORD_COUNT, word_args(path, out, parallelism),
                       {**env, "GYREFLOW_CRASH_AT": moment}, flags)
        assert done.returncode == KILLED, f"step {index} ({moment}): {done.stderr}"
        now = assert_visible_prefix(out, word_reference)
        assert now >= visible, f"published windows went back from {visible} to {now}"
        visible = now
    resume(WORD_COUNT, word_args(path, out, 4), env, word_reference)


# The keyed join example ----------------------------------------------------------------------

# The points of one backend and parallelism crash one run after another in window order, as the
# word count's chains do: every point is still taken, each after a resume from the crash before.
JOIN_CASES = [
    pytest.param("rocksdb", 1, ["window-finished:3", "before-commit:7",
                                "mid-publish:13"],  # the last, empty window
                 id="rocksdb-1-points"),
    pytest.param("rocksdb", 2, ["after-commit:6"], id="rocksdb-2-after-commit:6"),
    pytest.param("sqlite", 1, ["mid-window:4", "snapshot-written:5", "after-commit:9"],
                 id="sqlite-1-points"),
    pytest.param("sqlite", 2, ["kill@0.5"], id="sqlite-2-kill@0.5"),
    pytest.param("postgresql", 2, ["snapshot-written:4"], id="postgresql-2-snapshot-written:4"),
]


@pytest.mark.parametrize(("kind", "parallelism", "moments"), JOIN_CASES)
def test_keyed_join_crash_then_resume(kind, parallelism, moments, join_input, join_reference,
                                      state_env, tmp_path):
    orders, customers, _, _ = join_input
    env = state_env(kind)
    out = tmp_path / "out"
    args = ["--orders", str(orders), "--customers", str(customers), "--output", str(out),
            "--window", str(JOIN_WINDOW), "--parallelism", str(parallelism)]
    visible = 0
    for index, moment in enumerate(moments):
        flags = first_flags(kind) if index == 0 else ("--resume",)
        crash(KEYED_JOIN, args, env, moment, reference=join_reference, flags=flags)
        now = assert_visible_prefix(out, join_reference)
        assert now >= visible, f"{moment}: published windows went back from {visible} to {now}"
        visible = now
    resume(KEYED_JOIN, args, env, join_reference)


@pytest.mark.parametrize("moment", ["before-commit:8", "kill@0.5"])
def test_keyed_join_in_worker_processes_crash_then_resume(moment, join_input, join_reference,
                                                          state_env, tmp_path):
    # Two worker processes: each join task folds its window's amounts per city (an associative
    # reduce) before they cross to the city's task; resumed in process.
    orders, customers, _, _ = join_input
    env = state_env("rocksdb")
    out = tmp_path / "out"
    args = ["--orders", str(orders), "--customers", str(customers), "--output", str(out),
            "--window", str(JOIN_WINDOW), "--parallelism", "2"]
    crash(KEYED_JOIN, args, {**env, "GYREFLOW_ENVIRONMENT__WORKERS": "2"}, moment,
          reference=join_reference)
    assert_visible_prefix(out, join_reference)
    resume(KEYED_JOIN, args, env, join_reference)


def test_keyed_join_resume_with_other_parallelism(join_input, join_reference, state_env, tmp_path):
    orders, customers, _, _ = join_input
    env = state_env("rocksdb")
    out = tmp_path / "out"
    args = ["--orders", str(orders), "--customers", str(customers), "--output", str(out),
            "--window", str(JOIN_WINDOW)]
    crash(KEYED_JOIN, [*args, "--parallelism", "3"], env, "after-commit:5",
          reference=join_reference)
    resume(KEYED_JOIN, [*args, "--parallelism", "1"], env, join_reference)


# snapshot_every ------------------------------------------------------------------------------

SNAPSHOT_EVERY_CASES = [
    ("rocksdb", 3, "snapshot-written:6"),
    ("rocksdb", 3, "after-commit:9"),
    ("rocksdb", 3, "mid-window:11"),
    ("rocksdb", 3, "kill@0.5"),
    ("sqlite", 3, "before-commit:12"),
    ("sqlite", 3, "mid-publish:15"),
    ("sqlite", 3, "window-finished:10"),
    # 30 windows, 30 % 7 != 0: the last window is a commit point of its own.
    ("rocksdb", 7, "after-commit:30"),
    ("sqlite", 7, "window-finished:29"),
    ("postgresql", 3, "after-commit:9"),
]


@pytest.mark.parametrize(("kind", "every", "moment"), SNAPSHOT_EVERY_CASES)
def test_word_count_snapshot_every(kind, every, moment, word_input, word_reference, state_env,
                                   tmp_path):
    path, _ = word_input
    env = {**state_env(kind), "GYREFLOW_STATE__SNAPSHOT_EVERY": str(every)}
    out = tmp_path / "out"
    args = word_args(path, out)
    crash(WORD_COUNT, args, env, moment, reference=word_reference, flags=first_flags(kind))
    visible = assert_visible_prefix(out, word_reference)
    meta = stored_meta(env)
    completed = meta.last_completed if meta is not None else 0
    assert completed % every == 0 or completed == WC_WINDOWS, (
        f"window {completed} was committed but is no commit point of snapshot_every={every}")
    assert visible <= completed, f"window {visible} was published, only {completed} committed"
    if not moment.startswith("kill@"):  # a timed kill may land between the windows of a commit
        assert visible % every == 0 or visible == WC_WINDOWS, (
            f"window {visible} was published but is no commit point of snapshot_every={every}")
    resume(WORD_COUNT, args, env, word_reference)
