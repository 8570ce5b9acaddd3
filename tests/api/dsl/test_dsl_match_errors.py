"""A MATCH block's mistakes refused by ``gyreflow sql`` before anything runs: one ``error:`` line with
the statement, and the line and column in the script, exit status 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

GRAPH = """CREATE GRAPH g (
  Vertex person (id bigint ID, name varchar, age int),
  Edge knows (srcId bigint SOURCE ID, targetId bigint DESTINATION ID, w int)
) WITH (storeType='memory');
INSERT INTO g.person SELECT * FROM (VALUES (CAST(1 AS bigint), 'Ann', 31),
  (CAST(2 AS bigint), 'Bo', CAST(NULL AS int)), (CAST(3 AS bigint), 'Cy', 25)) AS t(id, name, age);
INSERT INTO g.knows SELECT * FROM (VALUES (CAST(1 AS bigint), CAST(2 AS bigint), 5),
  (CAST(2 AS bigint), CAST(3 AS bigint), 6)) AS t(s, d, w);
USE GRAPH g;
"""  # the query is statement 5, on line 10


def sql(tmp_path, query: str) -> subprocess.CompletedProcess:
    (tmp_path / "q.sql").write_text(GRAPH + query + "\n", encoding="utf-8")
    return subprocess.run([sys.executable, "-m", "gyreflow", "sql", "q.sql", "--env", "local"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)


def refused(done: subprocess.CompletedProcess) -> str:
    """The one ``error:`` line of a run refused with exit status 2, without the script's name."""
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and done.stdout == ""
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr
    return errors[0].removeprefix("error: q.sql: ")


REFUSED = {
    "syntax error at SHORTEST": (
        "SELECT a_id FROM (MATCH SHORTEST (a:person)-[e:knows]->(b) RETURN a.id AS a_id);",
        "statement 5, line 10, column 25: expected '(' of a node pattern in a MATCH, found 'SHORTEST'"),
    "syntax error on a later line of the statement": (
        "SELECT a_id\nFROM (MATCH (a:person)-[e:knows]->\n  (b:) RETURN a.id AS a_id);",
        "statement 5, line 12, column 6: expected a label in a MATCH, found ')'"),
    "unknown name in a RETURN": (
        "SELECT a_id FROM (MATCH (a:person)\n  RETURN a.id AS a_id, SHORTEST);",
        "statement 5, line 11, column 24: no column SHORTEST (columns: a, id, name, age)"),
    "node pattern left open": (
        "SELECT a_id FROM (MATCH (a:person)-[e:knows]->(b RETURN a.id AS a_id);",
        "statement 5, line 10, column 50: expected ')' in a MATCH, found 'RETURN'"),
    "SQL after the MATCH": (
        "SELECT a_id FROM (MATCH (a:person) RETURN a.id AS a_id) WHERE a_id >;",
        "statement 5, line 10, column 68: cannot parse the query: > needs a value after it"),
    "edge condition reads a later vertex": (
        "SELECT a_id FROM (MATCH (a:person)-[e:knows WHERE e.w = b.age]->(b) RETURN a.id AS a_id);",
        "statement 5, line 10, column 57: the condition of e reads b.age, bound only after e in the MATCH "
        "(a condition on both goes in the MATCH's WHERE)"),
    "MATCH's WHERE reads no variable": (
        "SELECT a_id FROM (MATCH (a:person)-[e:knows]->(b) WHERE c.age > 1 RETURN a.id AS a_id);",
        "statement 5, line 10, column 57: no column c.age (columns: a, e, b, id, name, age, srcid, "
        "targetid, w, id, name, age)"),
    "unknown vertex label": (
        "SELECT a_id FROM (MATCH (a:nolabel)-[e:knows]->(b) RETURN a.id AS a_id);",
        "statement 5, line 10, column 28: graph g has no vertex type nolabel (vertex types: person)"),
    "unknown edge label": (
        "SELECT a_id FROM (MATCH (a:person)-[e:nolabel]->(b) RETURN a.id AS a_id);",
        "statement 5, line 10, column 39: graph g has no edge type nolabel (edge types: knows)"),
    "unknown property in RETURN": (
        "SELECT a_id FROM (MATCH (a:person)-[e:knows]->(b) RETURN a.nope AS a_id);",
        "statement 5, line 10, column 58: no column a.nope (columns of a: age, id, name)"),
    "unknown edge property in a condition": (
        "SELECT a_id FROM (MATCH (a:person)-[e:knows WHERE e.weight > 1]->(b) RETURN a.id AS a_id);",
        "statement 5, line 10, column 51: no column e.weight (columns of e: srcid, targetid, w)"),
    "text plus a number": (
        "SELECT a_id FROM (MATCH (a:person)-[e:knows]->(b) WHERE a.name + 1 > 3 RETURN a.id AS a_id);",
        "statement 5, line 10, column 57: a.name + 1: + needs numbers, a.name is varchar (CAST it to a "
        "number, or use || to join text)"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_mistake_in_a_match_is_one_error_line_at_its_place_in_the_script(tmp_path, case):
    query, expected = REFUSED[case]
    assert refused(sql(tmp_path, query)) == expected


def test_what_a_match_may_read_still_runs(tmp_path):
    """An edge condition on an earlier vertex, a LET's property, ~label and a number's arithmetic."""
    done = sql(tmp_path, "SELECT a_id, b_id, x, l FROM (MATCH (a:person)-[e:knows WHERE e.w < a.age]->(b) "
                         "LET a.x = a.age + 1 RETURN a.id AS a_id, b.id AS b_id, a.x AS x, a.~label AS l);")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1,2,32,person"]
