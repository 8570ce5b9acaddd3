"""PostgresSink and PostgresSource on PostgreSQL and SQLite: records with different columns, sinks
sharing a table, records the table refuses, upsert keys, source columns and parallelism, rows
added to a tie group, and the one-line errors of `gyreflow run`, against plain SQL and Python."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest
import sqlalchemy as sa
from _recovery_jobs import _create_database

from gyreflow.api import Environment, PostgresSink, PostgresSource, SizeTumblingWindow
from gyreflow.state.stores.sql_urls import engine_url

ROOT = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.processes


@pytest.fixture(params=["postgresql", "sqlite"])
def database(request, tmp_path):
    """``(url, engine, dialect)``: a new database on the test PostgreSQL server, or an SQLite file."""
    if request.param == "sqlite":
        url, drop = f"sqlite:///{tmp_path / 'db.sqlite'}", lambda: None
    else:
        url, drop = _create_database(request.getfixturevalue("postgres_url"))
    engine = sa.create_engine(engine_url(url))
    yield url, engine, request.param
    engine.dispose()
    drop()


@pytest.fixture
def postgres(postgres_database):
    return postgres_database


def execute(engine, *statements: str) -> None:
    with engine.begin() as conn:
        for statement in statements:
            conn.execute(sa.text(statement))


def select(engine, query: str) -> list[tuple]:
    with engine.connect() as conn:
        return [tuple(row) for row in conn.execute(sa.text(query))]


def run_job(name: str, build, fresh: bool = True) -> None:
    pipeline = Environment.local(progress=False).pipeline(name)
    pipeline.task(build, name="job")
    pipeline.execute(fresh=fresh)


def gyreflow_run(tmp_path: Path, body: str, *flags: str,
                 args: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """``gyreflow run`` of a script made of ``body`` (``sys.argv[1]`` is the URL) with RocksDB
    state in ``tmp_path``."""
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(body), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    env.update({"GYREFLOW_ENVIRONMENT__TYPE": "local", "GYREFLOW_STATE__BACKEND": "rocksdb",
                "GYREFLOW_STATE__PATH": str(tmp_path / "state"), "COLUMNS": "400",
                "GYREFLOW_STATE__RETAINED_SNAPSHOTS": "20"})
    return subprocess.run([sys.executable, "-m", "gyreflow", "run", "--quiet", *flags, str(script),
                           "--", *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300, check=False)


def error_line(done: subprocess.CompletedProcess, status: int) -> str:
    """The one ``error:`` line of a run that exited with ``status``, without a traceback."""
    assert done.returncode == status, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr
    return errors[0]


# --- 1. every record's columns are written ----------------------------------------------------------

MIXED = [{"id": 1, "a": "x"}, {"id": 2, "a": "y", "b": "B2"}, {"id": 3, "b": "B3"}, {"id": 4}]


def test_records_with_different_columns_write_each_record_s_own_columns(database):
    url, engine, _ = database
    execute(engine, "create table log (id integer, a text, b text default 'dflt', window_id bigint)",
            "create table latest (id integer primary key, a text, b text)",
            "insert into latest values (3, 'kept', 'old'), (4, 'kept4', 'old4')")
    records = [*MIXED, {"id": 5, "b": "first"}, {"id": 5, "a": "second"}]  # one key twice
    run_job("mixed", lambda ctx: [
        ctx.source(records, SizeTumblingWindow(10)).sink(PostgresSink(url, "log")),
        ctx.source(records, SizeTumblingWindow(10)).sink(PostgresSink(url, "latest", key="id"))])
    appended = [(r["id"], r.get("a"), r.get("b", "dflt")) for r in records]  # a column's default
    assert Counter(select(engine, "select id, a, b from log")) == Counter(appended)
    latest = {3: ("kept", "old"), 4: ("kept4", "old4")}  # upserted rows keep what is left out
    for record in records:  # records applied one after the other
        a, b = latest.get(record["id"], (None, None))
        latest[record["id"]] = (record.get("a", a), record.get("b", b))
    assert {k: (a, b) for k, a, b in select(engine, "select id, a, b from latest")} == latest


# --- 2. sinks sharing a table -------------------------------------------------------------------------

def shared_job(url: str, who: str, sink_column: str | None):
    def build(ctx):
        ctx.source([{"who": who, "n": i} for i in range(6)], SizeTumblingWindow(2)).sink(
            PostgresSink(url, "shared", name=f"sink-{who}", sink_column=sink_column))
    return build


def test_fresh_of_one_sink_keeps_the_rows_another_sink_appended_to_the_table(database):
    url, engine, _ = database
    execute(engine, "create table shared (who text, n integer, window_id bigint, sink text)")
    for who in ("A", "B", "A", "A"):  # A starts over twice: B's rows stay
        run_job(f"shared-{who}", shared_job(url, who, "sink"))
    rows = select(engine, "select who, n, window_id, sink from shared")
    expected = [(who, n, n // 2 + 1, f"sink-{who}") for who in "AB" for n in range(6)]
    assert sorted(rows) == sorted(expected)


SHARED_SCRIPT = """
    import sys
    from gyreflow.api import Environment, PostgresSink, SizeTumblingWindow
    who = sys.argv[2]
    pipeline = Environment.from_config().pipeline("shared-" + who)

    @pipeline.task
    def job(ctx):
        ctx.source([{"who": who, "n": i} for i in range(6)], SizeTumblingWindow(2)).sink(
            PostgresSink(sys.argv[1], "shared", name="sink-" + who))

    pipeline.execute()
"""


def test_a_fresh_start_that_would_delete_another_sink_s_rows_is_refused(tmp_path, database):
    url, engine, _ = database
    execute(engine, "create table shared (who text, n integer, window_id bigint)")
    for who in ("A", "B"):
        (tmp_path / who).mkdir()
        done = gyreflow_run(tmp_path / who, SHARED_SCRIPT, "--fresh", args=(url, who))
        assert done.returncode == 0, done.stderr
    before = Counter(select(engine, "select who, n, window_id from shared"))
    assert before == Counter((who, n, n // 2 + 1) for who in "AB" for n in range(6))
    line = error_line(gyreflow_run(tmp_path / "A", SHARED_SCRIPT, "--fresh", args=(url, "A")), 2)
    assert "PostgresSink(shared, append)" in line and "'sink-B'" in line, line
    assert "sink_column" in line and "nothing was deleted" in line, line
    assert Counter(select(engine, "select who, n, window_id from shared")) == before


# --- 3. a record the table refuses is found before its window is completed ---------------------------

STUCK_SCRIPT = """
    import sys
    from gyreflow.api import Environment, PostgresSink, SizeTumblingWindow
    fixed = "--fixed" in sys.argv
    pipeline = Environment.from_config().pipeline("stuck")

    @pipeline.task
    def job(ctx):
        ctx.source(range(12), SizeTumblingWindow(3)).map(
            lambda i: {"n": i, "t": "ok", **({} if fixed or i != 7 else BAD)}).sink(
            PostgresSink(sys.argv[1], "stuck"))

    pipeline.execute()
"""


@pytest.mark.parametrize(("database", "n", "t", "bad", "says"), [
    ("postgresql", "integer", "text", '{"t": "bad\\x00"}', "NUL character"),
    ("postgresql", "smallint", "text", '{"n": 70000}', "70000 is out of the range of smallint"),
    ("postgresql", "integer", "varchar(3)", '{"t": "long"}', "3 characters at most"),
    ("postgresql", "integer", "text not null", '{"t": None}', "NOT NULL"),
    ("sqlite", "integer", "text not null", '{"t": None}', "NOT NULL"),
    ("sqlite", "integer", "text", '{"n": 2 ** 70}', "out of the range of an SQLite integer"),
], indirect=["database"])
def test_a_refused_value_stops_its_window_and_a_fixed_resume_writes_every_row(
        tmp_path, database, n, t, bad, says):
    url, engine, _ = database
    execute(engine, f"create table stuck (n {n}, t {t}, window_id bigint)")
    script = STUCK_SCRIPT.replace("BAD", bad)
    line = error_line(gyreflow_run(tmp_path, script, "--fresh", args=(url,)), 5)
    assert "PostgresSink(stuck, append): window 3: column " in line and says in line, line
    assert "(record {'n': " in line, line
    assert select(engine, "select count(*) from stuck") == [(6,)]  # windows 1 and 2
    done = gyreflow_run(tmp_path, script, "--resume", args=(url, "--fixed"))
    assert done.returncode == 0, done.stderr
    expected = [(i, "ok", i // 3 + 1) for i in range(12)]
    assert sorted(select(engine, "select n, t, window_id from stuck")) == expected


PUBLISH_SCRIPT = """
    import sys
    from gyreflow.api import Environment, PostgresSink, SizeTumblingWindow
    pipeline = Environment.from_config().pipeline("publish")

    @pipeline.task
    def job(ctx):
        ctx.source([{"n": "abc" if i == 4 else i} for i in range(9)], SizeTumblingWindow(3)).sink(
            PostgresSink(sys.argv[1], sys.argv[2]))

    pipeline.execute()
"""


def test_a_value_only_the_database_refuses_names_the_sink_window_and_url(tmp_path, postgres):
    url, engine = postgres
    execute(engine, "create table typed (n integer, window_id bigint)")
    line = error_line(gyreflow_run(tmp_path, PUBLISH_SCRIPT, "--fresh", args=(url, "typed")), 5)
    shown = sa.engine.make_url(url).render_as_string(hide_password=True)
    assert f"PostgresSink(typed, append): window 2: {shown}: " in line, line
    assert "invalid input syntax for type integer" in line, line
    line = error_line(gyreflow_run(tmp_path, PUBLISH_SCRIPT, "--fresh", args=(url, "nowhere")), 5)
    assert "PostgresSink(nowhere, append): table 'nowhere' does not exist" in line, line


# --- 4. upsert keys -------------------------------------------------------------------------------------

KEY_SCRIPT = """
    import sys
    from gyreflow.api import Environment, PostgresSink, SizeTumblingWindow
    records = [{"k": "a", "total": 1}, {"total": 2}]
    pipeline = Environment.from_config().pipeline("keys")

    @pipeline.task
    def job(ctx):
        ctx.source(records, SizeTumblingWindow(1)).sink(
            PostgresSink(sys.argv[1], "kt", key=sys.argv[2]))

    pipeline.execute()
"""


@pytest.mark.parametrize(("table", "key", "says"), [
    ("k text primary key, total bigint", "nokey", "key nokey: table 'kt' has no column 'nokey'; "
                                                  "its columns: k, total"),
    ("k text, total bigint", "k", "key k: table 'kt' has no primary key, unique constraint or "
                                  "unique index on exactly (k), which an upsert needs (ON CONFLICT)"),
])
def test_a_key_the_table_cannot_upsert_by_is_refused_before_any_data_moves(
        tmp_path, database, table, key, says):
    url, engine, _ = database
    execute(engine, f"create table kt ({table})")
    line = error_line(gyreflow_run(tmp_path, KEY_SCRIPT, "--fresh", args=(url, key)), 2)
    assert line == f"error: configuration: PostgresSink(kt, upsert by {key}): {says}", line
    assert select(engine, "select count(*) from kt") == [(0,)]


def test_a_record_without_the_key_names_the_sink_window_and_record(tmp_path, database):
    url, engine, _ = database
    execute(engine, "create table kt (k text primary key, total bigint)")
    line = error_line(gyreflow_run(tmp_path, KEY_SCRIPT, "--fresh", args=(url, "k")), 5)
    assert ("PostgresSink(kt, upsert by k): window 2: the record has no value of the key column "
            "'k' (record {'total': 2})") in line, line
    assert select(engine, "select k, total from kt") == [("a", 1)]


# --- 5, 6. source columns and parallelism ---------------------------------------------------------------

SOURCE_SCRIPT = """
    import sys
    from gyreflow.api import Environment, PostgresSource
    pipeline = Environment.from_config().pipeline("columns")

    @pipeline.task
    def job(ctx):
        ctx.source(PostgresSource(sys.argv[1], "src", column="id",
                                  columns=sys.argv[2].split(","))).collect("rows")

    pipeline.execute()
"""


def test_source_columns_the_table_lacks_are_refused_before_any_data_moves(tmp_path, database):
    url, engine, _ = database
    execute(engine, "create table src (id integer, v text)", "insert into src values (1, 'a')")
    line = error_line(gyreflow_run(tmp_path, SOURCE_SCRIPT, args=(url, "id,nosuch")), 2)
    assert line == ("error: configuration: PostgresSource(src): table 'src' has no column "
                    "'nosuch'; its columns: id, v"), line


def test_a_source_with_parallelism_2_reads_each_row_once(database):
    url, engine, _ = database
    execute(engine, "create table src (id integer, v text)")
    execute(engine, "insert into src values " + ", ".join(f"({i}, 'v{i}')" for i in range(23)))
    pipeline = Environment.local(progress=False).pipeline("par")
    pipeline.task(lambda ctx: ctx.source(PostgresSource(url, "src", column="id"),
                                         SizeTumblingWindow(5), parallelism=2).collect("rows"),
                  name="job")
    rows = pipeline.execute()["job"].output("rows")
    assert Counter((r["id"], r["v"]) for r in rows) == Counter(select(engine, "select id, v from src"))


# --- 8. a row added to a tie group before a resume --------------------------------------------------------

TIE_SCRIPT = """
    import sys
    from gyreflow.api import Environment, PostgresSink, PostgresSource, SizeTumblingWindow
    pipeline = Environment.from_config().pipeline("ties")

    @pipeline.task
    def job(ctx):
        ctx.source(PostgresSource(sys.argv[1], "tt", column="ts", columns=["id"]),
                   SizeTumblingWindow(3)).sink(PostgresSink(sys.argv[1], "seen"))

    pipeline.execute()
"""


def test_a_resume_inside_a_tie_group_reads_a_row_added_to_it_and_none_twice(tmp_path, database):
    url, engine, _ = database
    execute(engine, "create table tt (id integer, ts integer)",
            "create table seen (id integer, window_id bigint)")
    ts = [1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 3, 3]  # ids 5..11 share 2: window 3 ends in them
    execute(engine, "insert into tt values " + ", ".join(f"({i}, {t})" for i, t in enumerate(ts)))
    done = gyreflow_run(tmp_path, TIE_SCRIPT, "--fresh", args=(url,))
    assert done.returncode == 0, done.stderr
    window_3 = select(engine, "select id from seen where window_id = 3")
    assert {ts[i] for (i,) in window_3} == {2} and len(window_3) == 3
    execute(engine, "insert into tt values (-1, 2), (100, 2)")  # sort before and among them
    done = gyreflow_run(tmp_path, TIE_SCRIPT, "--resume", "--from-window", "3", args=(url,))
    assert done.returncode == 0, done.stderr
    assert Counter(select(engine, "select id from seen")) == Counter(
        select(engine, "select id from tt"))


# --- 7. the example with a wrong password -----------------------------------------------------------------

def test_the_example_that_cannot_connect_is_one_line_with_the_password_masked(tmp_path, postgres):
    url, _ = postgres
    missing = sa.engine.make_url(url).set(password="Not-The-Password", database="no_such_db")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    env.update({"GYREFLOW_ENVIRONMENT__TYPE": "local", "COLUMNS": "400",
                "GYREFLOW_STATE__PATH": str(tmp_path / "state")})
    done = subprocess.run([sys.executable, "-m", "gyreflow", "run", "--quiet", "--fresh",
                           str(ROOT / "examples" / "postgres_sink.py"), "--", "--url",
                           missing.render_as_string(hide_password=False)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False)
    line = error_line(done, 2)
    assert "Not-The-Password" not in done.stderr and ":***@" in line, line
    assert line.startswith("error: configuration: --url: cannot connect to"), line
    assert "no_such_db" in line, line
