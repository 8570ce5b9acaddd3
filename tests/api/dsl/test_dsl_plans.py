"""gyreflow's SQL planned onto its own operators: ``gyreflow explain FILE.sql`` run as a process, and
Flink's window table functions (TUMBLE, HOP, SESSION) with a watermark, against DuckDB and plain loops
in every environment."""

from __future__ import annotations

import datetime as dt
import re
import subprocess
import sys
from collections import Counter

import duckdb
import pytest

from gyreflow.api.dsl import DslError, prepare

EPOCH = dt.datetime(2024, 1, 1)
# (id, key, seconds after EPOCH, value), in the table's order: out of order, and late beyond 5 s
EVENTS = [(1, "a", 1, 5), (2, "b", 4, 3), (3, "a", 12, 1), (4, "a", 7, 2), (5, "b", 31, 4),
          (6, "a", 2, 7), (7, "a", 25, 1), (8, "b", 27, 6), (9, "a", 19, 2), (10, "b", 33, 1),
          (11, "a", 8, 3), (12, "b", 47, 2), (13, "a", 44, 5)]
DELAY = 5


def write_events(tmp_path, delay=DELAY) -> str:
    text = "".join(f"{i},{k},{EPOCH + dt.timedelta(seconds=s)},{v}\n" for i, k, s, v in EVENTS)
    (tmp_path / "ev.txt").write_text(text, encoding="utf-8")
    watermark = f",\n  WATERMARK FOR ts AS ts - INTERVAL '{delay}' SECOND" if delay is not None else ""
    return (f"CREATE TABLE ev (id bigint, k varchar, ts timestamp, v int{watermark}\n"
            f") WITH (type='file', geaflow.dsl.file.path='{tmp_path / 'ev.txt'}');\n")


def at(seconds: float) -> dt.datetime:
    return EPOCH + dt.timedelta(seconds=seconds)


# ---- gyreflow explain FILE.sql

PLAN_LINE = re.compile(r"^  (.*?)\s+(\S+)\s+(source|one-input|two-input|sink)\s+p=\d+")


def operators(section: list[str]) -> list[str]:
    """The kinds of a plan's PipelineGraph vertices, in order."""
    logical = section[:next(i for i, line in enumerate(section) if line.startswith("ExecutionGraph:"))]
    return [m.group(2) for line in logical if (m := PLAN_LINE.match(line))]


@pytest.mark.processes
def test_explain_prints_each_statements_operators_and_runs_nothing(tmp_path):
    (tmp_path / "people.txt").write_text("1,ann,30\n2,bob,25\n", encoding="utf-8")
    (tmp_path / "plan.sql").write_text(
        "CREATE TABLE people (id bigint, name varchar, age int) WITH (type='file', "
        "geaflow.dsl.file.path='people.txt');\n"
        "CREATE TABLE out (age int, n bigint) WITH (type='file', geaflow.dsl.file.path='out');\n"
        "SET geaflow.dsl.window.size = -1;\n"
        "INSERT INTO out SELECT age, count(id) FROM people WHERE id > 1 GROUP BY age;\n"
        "SELECT name FROM people;\n"
        "SELECT a.name FROM people a JOIN people b ON a.age = b.age;\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "gyreflow", "explain", "plan.sql"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stderr) == (0, "")
    sections: dict[str, list[str]] = {}
    for line in done.stdout.splitlines():
        if line.startswith("== "):
            sections[line.strip("= ")] = []
        else:
            sections[list(sections)[-1]].append(line)
    # one plan per statement that runs (4, 5, 6), each with its ExecutionGraph and cycle
    assert list(sections) == ["plan/statement-4", "plan/statement-5", "plan/statement-6"]
    for section in sections.values():
        assert any(line.startswith("ExecutionGraph:") for line in section)
        assert any("cycle" in line for line in section)
    # WHERE + GROUP BY into a table: a source, a filter, an aggregate fed by key, a sink
    kinds = operators(sections["plan/statement-4"])
    assert kinds[0] == "source" and kinds[1] == "filter" and kinds[-1] == "sink"
    assert "window_aggregate" in kinds
    assert any(re.match(r"\s+where -> group by\s+\[key", line) for line in sections["plan/statement-4"])
    # a projection only: a source, a map, its rows collected
    assert operators(sections["plan/statement-5"]) == ["source", "map", "collect"]
    # a join reads the table twice into one query operator
    kinds = operators(sections["plan/statement-6"])
    assert kinds.count("source") == 1 and "process" in kinds and kinds[-1] == "collect"
    assert not (tmp_path / "out").exists()  # nothing ran
    # ${KEY} of a script gets its value from --set, as under gyreflow sql
    script = (tmp_path / "plan.sql").read_text(encoding="utf-8").replace("path='out'", "path='${target}'")
    (tmp_path / "set.sql").write_text(script, encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "gyreflow", "explain", "set.sql", "--set",
                           "target=elsewhere"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stderr) == (0, "")
    assert "FileSink(elsewhere)" in done.stdout


@pytest.mark.processes
def test_explain_of_a_wrong_statement_is_one_error_line_and_exit_2(tmp_path):
    (tmp_path / "bad.sql").write_text(
        "CREATE TABLE people (id bigint, name varchar) WITH (type='file', "
        "geaflow.dsl.file.path='people.txt');\n\nSELECT id,\n  nope FROM people;\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "gyreflow", "explain", "bad.sql"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines() == [
        "error: bad.sql: statement 2, line 4, column 3: no column nope (columns: id, name)"]


# ---- window table functions: an oracle in DuckDB (tumble, hop) and a plain loop (sessions)


def duckdb_windows(size: int, slide: int, delay: float, where: str = "TRUE") -> Counter:
    """``(window_start, window_end, k, count, sum(v))`` of hopping windows (tumbling: slide = size),
    a record left out of each window that had fired when it came (the largest time before it minus
    ``delay`` reached the window's end), computed by DuckDB: ``time_bucket`` places a record in its
    latest window, the windows before it that still hold it follow at ``slide`` apart."""
    db = duckdb.connect()
    db.execute("CREATE TABLE ev (id INT, k TEXT, ts TIMESTAMP, v INT)")
    db.executemany("INSERT INTO ev VALUES (?, ?, ?, ?)", [(i, k, at(s), v) for i, k, s, v in EVENTS])
    rows = db.execute(f"""
        WITH marked AS (
          SELECT *, MAX(ts) OVER (ORDER BY id ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
            - INTERVAL ({delay}) SECOND AS wm FROM ev),
        placed AS (
          SELECT m.*, time_bucket(INTERVAL ({slide}) SECOND, m.ts) - INTERVAL ({slide} * o.n) SECOND AS ws
          FROM marked m, range({size // slide}) o(n))
        SELECT ws, ws + INTERVAL ({size}) SECOND, k, COUNT(*), SUM(v) FROM placed
        WHERE ts < ws + INTERVAL ({size}) SECOND AND (wm IS NULL OR ws + INTERVAL ({size}) SECOND > wm)
          AND ({where})
        GROUP BY ALL""").fetchall()
    return Counter(rows)


def loop_sessions(gap: float, delay: float) -> Counter:
    """``(k, window_start, window_end, count, sum(v))`` of sessions per key, by a plain loop: a
    record that touches no open session and whose own session would end at or before the watermark
    is late; sessions close once the watermark reaches their last time plus the gap."""
    open_sessions: dict[str, list[list]] = {}
    closed = []
    seen = None
    for _, k, ts, v in EVENTS:
        wm = seen - delay if seen is not None else float("-inf")
        still = []
        for s in open_sessions.get(k, []):
            if s[1] + gap <= wm:
                closed.append((k, s))
            else:
                still.append(s)
        touching = [s for s in still if ts <= s[1] + gap and s[0] <= ts + gap]
        if touching or ts + gap > wm:
            rest = [s for s in still if s not in touching]
            merged = [min([ts] + [s[0] for s in touching]), max([ts] + [s[1] for s in touching]),
                      1 + sum(s[2] for s in touching), v + sum(s[3] for s in touching)]
            still = [*rest, merged]
        open_sessions[k] = still
        seen = ts if seen is None else max(seen, ts)
    closed += [(k, s) for k, ss in open_sessions.items() for s in ss]
    return Counter((k, at(s[0]), at(s[1] + gap), s[2], s[3]) for k, s in closed)


def test_the_oracles_see_late_records(tmp_path):
    # record 6 (a, 2 s) comes after 31 s: its windows of 10 s fired at 31 - 5 = 26
    assert sum(n for *_, n, _ in duckdb_windows(10, 10, DELAY)) < len(EVENTS)
    assert sum(c for _, _, _, c, _ in loop_sessions(3, DELAY)) < len(EVENTS)


def test_tumble_with_a_watermark_against_duckdb(tmp_path, make_env):
    script = write_events(tmp_path) + (
        "SELECT window_start, window_end, k, count(*) AS n, sum(v) FROM "
        "TABLE(TUMBLE(TABLE ev, DESCRIPTOR(ts), INTERVAL '10' SECOND))\n"
        "WHERE v > 1 GROUP BY window_start, window_end, k;\n")
    got = make_env(2).sql(script).output("rows-2")
    assert Counter(got) == duckdb_windows(10, 10, DELAY, "v > 1")


def test_hop_and_session_with_a_watermark_against_duckdb_and_a_loop(tmp_path, make_env):
    script = write_events(tmp_path, delay=3) + (
        "SELECT window_start, window_end, k, count(*), sum(v) FROM "
        "TABLE(HOP(TABLE ev, DESCRIPTOR(ts), INTERVAL '5' SECOND, INTERVAL '15' SECONDS))\n"
        "GROUP BY window_start, window_end, k;\n"
        "SELECT k, window_start, window_end, count(*), sum(v) AS total FROM "
        "TABLE(SESSION(TABLE ev, DESCRIPTOR(ts), INTERVAL '4' SECOND))\n"
        "GROUP BY k, window_start, window_end HAVING sum(v) > 1;\n")
    result = make_env(2).sql(script)
    assert Counter(result.output("rows-2")) == duckdb_windows(15, 5, 3)
    want = loop_sessions(4, 3)
    assert Counter(result.output("rows-3")) == Counter({r: n for r, n in want.items() if r[4] > 1})


@pytest.mark.parametrize(("size", "slide", "query"), [
    (15, 5, "SELECT * FROM (SELECT window_start, window_end, k, count(*), sum(v) FROM TABLE(HOP("
     "TABLE ev, DESCRIPTOR(ts), INTERVAL '5' SECOND, INTERVAL '15' SECOND)) "
     "GROUP BY window_start, window_end, k) AS w"),
    (10, 10, "SELECT w.window_start, w.window_end, w.k, count(*), sum(e.v) FROM TABLE(TUMBLE(TABLE ev, "
     "DESCRIPTOR(ts), INTERVAL '10' SECOND)) AS w JOIN ev e ON w.id = e.id "
     "GROUP BY w.window_start, w.window_end, w.k"),
    (10, 10, "SELECT window_start, window_end, k, count(*), sum(v) FROM TABLE(TUMBLE(TABLE ev, "
     "DESCRIPTOR(ts), INTERVAL '10' SECOND)) GROUP BY window_start, window_end, k ORDER BY window_start"),
], ids=["hop-in-sub-query", "tumble-in-join", "tumble-order-by"])
def test_tumble_and_hop_under_a_sub_query_or_a_join_against_duckdb(tmp_path, size, slide, query):
    # the query operator runs them over the table's rows, late records judged as the windows judge them
    from gyreflow.api import Environment

    script = write_events(tmp_path, delay=3) + query + ";"
    got = Environment.local(progress=False).sql(script).output("rows-2")
    assert Counter(got) == duckdb_windows(size, slide, 3)


def test_without_a_watermark_clause_nothing_out_of_order_is_kept(tmp_path):
    from gyreflow.api import Environment

    script = write_events(tmp_path, delay=None) + (
        "SELECT window_start, window_end, k, count(*), sum(v) FROM "
        "TABLE(TUMBLE(TABLE ev, DESCRIPTOR(ts), INTERVAL '1' MINUTE))\n"
        "GROUP BY window_start, window_end, k;\n")
    got = Environment.local(progress=False).sql(script).output("rows-2")
    assert Counter(got) == duckdb_windows(60, 60, 0)


@pytest.mark.parametrize(("query", "message"), [
    ("SELECT k, count(*) FROM TABLE(SESSION(TABLE ev, DESCRIPTOR(ts), INTERVAL '10' SECOND)) GROUP BY k",
     "its GROUP BY does not name both window_start and window_end"),
    ("SELECT window_start, count(*) FROM TABLE(TUMBLE(TABLE ev, DESCRIPTOR(id), INTERVAL '10' SECOND)) "
     "GROUP BY window_start, window_end", "the watermark of ev is on ts, the windows on id"),
    ("SELECT window_start, count(*) FROM TABLE(HOP(TABLE ev, DESCRIPTOR(ts), INTERVAL '10' SECOND, "
     "INTERVAL '5' SECOND)) GROUP BY window_start, window_end", "the slide (10 s) is longer than the size"),
    ("SELECT window_start FROM TABLE(SESSION(TABLE ev, DESCRIPTOR(ts), INTERVAL '10' SECOND)) "
     "GROUP BY window_start, window_end ORDER BY window_start", "ORDER BY"),
    ("SELECT e.id, w.n FROM ev e JOIN (SELECT k, count(*) AS n FROM TABLE(SESSION(TABLE ev, "
     "DESCRIPTOR(ts), INTERVAL '10' SECOND)) GROUP BY k, window_start, window_end) w ON e.k = w.k",
     "SESSION runs only as the one table of a GROUP BY window_start, window_end query, not under a "
     "join or a sub-query"),
])
def test_window_functions_that_cannot_run_are_refused_before_anything_runs(tmp_path, query, message):
    with pytest.raises(DslError, match=re.escape(message)) as caught:
        prepare(write_events(tmp_path) + query + ";")
    assert caught.value.statement == 2
