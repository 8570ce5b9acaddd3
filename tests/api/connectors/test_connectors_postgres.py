"""The PostgreSQL source and exactly-once sink on the real server the test command starts: in every
environment, after SIGKILL at every crash point, against Counter and plain-Python oracles."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import sqlalchemy as sa
from _recovery_data import word_count_oracle

from gyreflow.api import (
    PostgresSink,
    PostgresSource,
    SizeTumblingWindow,
    TimeTumblingWindow,
)
from gyreflow.api.config import ConfigError

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "postgres_sink.py"


@pytest.fixture
def database(postgres_database):
    """A new database on the test server, dropped afterwards."""
    return postgres_database


def run(env, build, name: str = "job"):
    pipeline = env.pipeline("postgres")
    pipeline.task(build, name=name)
    return pipeline.execute()[name]


def make_orders(engine, table: str, rows: list[tuple[int, str, int]]) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text(f"create table if not exists {table} "
                             "(id bigint primary key, customer text, amount integer)"))
        if rows:
            conn.execute(sa.text(f"insert into {table} values (:id, :customer, :amount)"),
                         [{"id": i, "customer": c, "amount": a} for i, c, a in rows])


ORDERS = [(i * 3 + 1, f"c{i % 5}", i % 17) for i in range(70)]  # ids rise, with gaps


def test_a_table_is_read_once_in_column_order_in_windows(make_env, database):
    url, engine = database
    make_orders(engine, "orders", ORDERS)
    source = PostgresSource(url, "orders", "id", columns=["id", "amount"])
    result = run(make_env(2), lambda ctx: ctx.source(source, SizeTumblingWindow(20)).collect("rows"))
    by_window = result.by_window("rows")
    expected = [{"id": i, "amount": a} for i, _, a in sorted(ORDERS)]
    assert [by_window[w] for w in sorted(by_window)] == [expected[n:n + 20]
                                                         for n in range(0, len(expected), 20)]


def test_rows_added_later_arrive_in_later_windows_until_idle(make_env, database, call_log):
    url, engine = database
    make_orders(engine, "orders", ORDERS[:10])

    def seen(predicate) -> None:
        """Wait until the job has processed a row whose id satisfies ``predicate``."""
        deadline = time.monotonic() + 180
        while not any(predicate(entry[0]) for entry in call_log.entries()):
            assert time.monotonic() < deadline, "the job read nothing"
            time.sleep(0.05)

    def add_later():
        # Each batch goes in once the job has read the one before, and more than a window later,
        # however long the environment takes to start: the later rows come in later windows.
        for start, before in ((10, ORDERS[0][0]), (30, ORDERS[10][0]), (50, ORDERS[30][0])):
            seen(lambda row_id, before=before: row_id >= before)
            time.sleep(0.7)
            with engine.begin() as conn:
                conn.execute(sa.text("insert into orders values (:id, :customer, :amount)"),
                             [{"id": i, "customer": c, "amount": a}
                              for i, c, a in ORDERS[start:start + 20]])

    def logged(row):
        call_log.append((row["id"],))
        return row

    adder = threading.Thread(target=add_later, daemon=True)
    adder.start()
    source = PostgresSource(url, "orders", "id", follow=True, poll_interval=0.1, until_idle=2.0)
    try:
        result = run(make_env(1), lambda ctx: ctx.source(source, TimeTumblingWindow(0.4))
                     .map(logged).collect("rows"))
    finally:
        adder.join(timeout=200)
    rows = result.output("rows")
    assert Counter(r["id"] for r in rows) == Counter(i for i, _, _ in ORDERS)
    windows_with_rows = [w for w, got in result.by_window("rows").items() if got]
    assert len(windows_with_rows) >= 4  # the first rows, then each later batch in a later window


def test_sink_upserts_totals_and_appends_windows_exactly_once(make_env, database):
    url, engine = database
    with engine.begin() as conn:
        conn.execute(sa.text("create table totals (customer text primary key, amount bigint)"))
        conn.execute(sa.text("create table log (window_id bigint, customer text, amount bigint)"))
    records = [{"customer": c, "amount": a} for _, c, a in ORDERS]
    result = run(make_env(2), lambda ctx: [
        ctx.source(records, SizeTumblingWindow(16)).key_by(lambda r: r["customer"])
        .reduce(lambda a, b: {"customer": a["customer"], "amount": a["amount"] + b["amount"]})
        .sink(PostgresSink(url, "totals", key="customer")),
        ctx.source(records, SizeTumblingWindow(16), parallelism=1)
        .sink(PostgresSink(url, "log")).with_parallelism(2),
    ])
    assert result is not None
    totals = Counter()
    for record in records:
        totals[record["customer"]] += record["amount"]
    with engine.connect() as conn:
        assert dict(conn.execute(sa.text("select customer, amount from totals")).all()) == totals
        logged = conn.execute(sa.text("select window_id, customer, amount from log")).all()
        staged = conn.execute(sa.text("select count(*) from gyreflow_sink_staged")).scalar()
    assert Counter((c, a) for _, c, a in logged) == Counter((r["customer"], r["amount"])
                                                            for r in records)
    assert Counter(w for w, _, _ in logged) == Counter(n // 16 + 1 for n in range(len(records)))
    assert staged == 0


def test_bad_records_and_tables_name_the_sink_and_window(make_env, database):
    url, engine = database
    with engine.begin() as conn:
        conn.execute(sa.text("create table narrow (word text)"))
    pipeline = make_env(1).pipeline("bad")
    pipeline.task(lambda ctx: ctx.source([{"word": "a", "extra": 1}])
                  .sink(PostgresSink(url, "narrow", window_column=None)), name="job")
    with pytest.raises(Exception, match=r"PostgresSink\(narrow, append\): window 1: table 'narrow' "
                                        r"has no column 'extra'"):
        pipeline.execute()
    pipeline = make_env(1).pipeline("missing")
    pipeline.task(lambda ctx: ctx.source([{"word": "a"}]).sink(PostgresSink(url, "nowhere")),
                  name="job")
    with pytest.raises(Exception, match="table 'nowhere' does not exist"):
        pipeline.execute()


# --- the example, killed and resumed -----------------------------------------------------------------

LINES = [" ".join(f"w{(i * 7 + j) % 11}" for j in range(i % 4 + 1)) for i in range(120)]
WINDOW = 10  # 12 windows


def example(tmp_path: Path, url: str, *flags: str, crash_at: str | None = None,
            environment: str = "local"):
    data = tmp_path / "in.txt"
    data.write_text("".join(line + "\n" for line in LINES), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    env.update({"GYREFLOW_ENVIRONMENT__TYPE": environment, "GYREFLOW_STATE__BACKEND": "rocksdb",
                "GYREFLOW_STATE__PATH": str(tmp_path / "state"), "COLUMNS": "400"})
    if environment == "spark":
        env["GYREFLOW_SPARK__MASTER"] = "local[2]"
    if crash_at:
        env["GYREFLOW_CRASH_AT"] = crash_at
    return subprocess.run([sys.executable, "-m", "gyreflow", "run", "--quiet", *flags,
                           str(EXAMPLE), "--", "--input", str(data), "--window", str(WINDOW),
                           "--url", url], env=env, capture_output=True, text=True, timeout=300,
                          check=False)


def assert_tables_match_the_oracle(engine) -> None:
    expected = word_count_oracle(LINES, WINDOW)  # window -> word -> count through that window
    with engine.connect() as conn:
        rows = conn.execute(sa.text("select window_id, word, count from word_counts")).all()
        totals = dict(conn.execute(sa.text("select word, count from word_totals")).all())
    assert len(rows) == sum(len(words) for words in expected.values()), "rows lost or repeated"
    got: dict[int, dict[str, int]] = {}
    for window, word, count in rows:
        got.setdefault(window, {})[word] = count
    assert got == expected
    assert totals == Counter(word for line in LINES for word in line.split())


@pytest.mark.parametrize("crash_at", ["window-finished:3", "before-commit:5", "after-commit:7",
                                      "mid-publish:9"])
def test_the_example_killed_at_a_crash_point_then_resumed_writes_each_row_once(
        tmp_path, database, crash_at):
    url, engine = database
    done = example(tmp_path, url, crash_at=crash_at)
    assert done.returncode == -signal.SIGKILL, done.stderr
    done = example(tmp_path, url, "--resume")
    assert done.returncode == 0, done.stderr
    assert_tables_match_the_oracle(engine)


def test_the_example_on_spark_matches_the_oracle(tmp_path, database):
    url, engine = database
    done = example(tmp_path, url, environment="spark")
    assert done.returncode == 0, done.stderr
    assert_tables_match_the_oracle(engine)


def test_a_state_older_than_the_table_is_refused_and_fresh_starts_over(tmp_path, database):
    url, engine = database
    assert example(tmp_path, url, crash_at="before-commit:4").returncode == -signal.SIGKILL
    kept = tmp_path / "kept"
    os.rename(tmp_path / "state", kept)
    assert example(tmp_path, url, "--fresh").returncode == 0
    os.rename(tmp_path / "state", tmp_path / "done")
    os.rename(kept, tmp_path / "state")
    done = example(tmp_path, url, "--resume")
    assert done.returncode == 3, done.stderr
    assert "word_counts (window 12" in done.stderr or "word_totals (window 12" in done.stderr
    assert_tables_match_the_oracle(engine)  # nothing changed
    done = example(tmp_path, url, "--fresh")
    assert done.returncode == 0, done.stderr
    assert_tables_match_the_oracle(engine)


def test_a_missing_driver_is_one_line_naming_the_extra(tmp_path):
    """Without psycopg, a PostgreSQL state URL or sink fails before any data moves (exit 2)."""
    script = tmp_path / "job.py"
    script.write_text(
        "from gyreflow.api import Environment, PostgresSink\n"
        "PostgresSink('postgresql://u@127.0.0.1:1/db', 'table')\n", encoding="utf-8")
    blocked = ("import sys; sys.modules['psycopg'] = None; from gyreflow.api.cli import main; "
               "main()")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    env["COLUMNS"] = "400"
    for extra, target in ((
            {"GYREFLOW_STATE__BACKEND": "jdbc",
             "GYREFLOW_STATE__URL": "postgresql://u@127.0.0.1:1/db"},
            str(ROOT / "examples" / "word_count.py")), ({}, str(script))):
        done = subprocess.run([sys.executable, "-c", blocked, "run", "--quiet", target, "--",
                               "--output", str(tmp_path / "out")],
                              env={**env, **extra}, capture_output=True, text=True, timeout=120,
                              check=False)
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "pip install 'gyreflow[postgres]'" in lines[0], done.stderr
        assert "Traceback" not in done.stderr
    saved = sys.modules.get("psycopg")
    sys.modules["psycopg"] = None
    try:
        with pytest.raises(ConfigError, match="is not installed"):
            PostgresSink("postgresql://u@127.0.0.1:1/db", "table")
    finally:
        if saved is None:
            del sys.modules["psycopg"]
        else:
            sys.modules["psycopg"] = saved
