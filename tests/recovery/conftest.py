"""Fixtures of the crash recovery tests: inputs, uninterrupted reference runs and fresh state stores."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from _postgres import POSTGRES_SECRET
from _recovery_data import (
    JOIN_CUSTOMERS,
    JOIN_ORDERS,
    JOIN_WINDOW,
    WC_LINES,
    WC_WINDOW,
    WC_WINDOWS,
    join_oracle,
    make_join_lines,
    make_word_lines,
    parse_join,
    parse_word_count,
    word_count_oracle,
    write_lines,
)
from _recovery_jobs import (
    KEYED_JOIN,
    WORD_COUNT,
    _create_database,
    assert_same_output,
    base_environ,
    command,
    run_job,
    word_args,
)
from _staged_output import read_dir

# The reference is an uninterrupted run on the memory backend, itself checked against a plain-Python
# oracle (``collections.Counter`` for the word count, a dict join and running sums for the join).
#
# Backends: RocksDB, JDBC on SQLite, JDBC on a real PostgreSQL (a fresh database per test). The
# PostgreSQL cases first need one uninterrupted run on a new database to finish in time
# (``postgres_canary``); while it does not, they fail at once with its diagnosis.


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
