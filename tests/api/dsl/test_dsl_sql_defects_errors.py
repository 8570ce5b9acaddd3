"""What a query may do wrong, and how gyreflow answers: doubles out of a function's domain as Java's
Math answers (NaN, infinities; a plain-Python reading of its documentation is the oracle), syntax
errors at their line and column in plain words, aggregates gyreflow has no implementation of and
arithmetic on text refused before anything runs, text met while running named with its row."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gyreflow.api.dsl.errors import DslError, QueryError
from gyreflow.api.dsl.functions import AGGREGATE, AGGREGATE_WITH_PARAMETER, SCALAR
from gyreflow.api.dsl.java_math import java_div, java_mod
from gyreflow.api.dsl.runner import prepare

NAN, INF = math.nan, math.inf
REPO = Path(__file__).resolve().parents[3]


def table(columns: str, path) -> str:
    return f"CREATE TABLE t ({columns}) WITH (type='file', geaflow.dsl.file.path='{path}');\n"


def same(value):
    return "NaN" if isinstance(value, float) and value != value else value


def _is_odd_integer(y: float) -> bool:
    return math.isfinite(y) and y == int(y) and int(y) % 2 == 1


def _is_even_integer(y: float) -> bool:
    return math.isfinite(y) and y == int(y) and int(y) % 2 == 0


def java_pow(x: float, y: float) -> float:
    """``Math.pow``'s special cases, in the order its documentation lists them; else the real power."""
    if y == 0:
        return 1.0
    if y == 1:
        return x
    if y != y:
        return NAN
    if x != x:
        return NAN
    if (abs(x) > 1 and y == INF) or (abs(x) < 1 and y == -INF):
        return INF
    if (abs(x) > 1 and y == -INF) or (abs(x) < 1 and y == INF):
        return 0.0
    if abs(x) == 1 and math.isinf(y):
        return NAN
    positive_zero = x == 0 and math.copysign(1, x) > 0
    negative_zero = x == 0 and math.copysign(1, x) < 0
    if (positive_zero and y > 0) or (x == INF and y < 0):
        return 0.0
    if (positive_zero and y < 0) or (x == INF and y > 0):
        return INF
    if negative_zero or x == -INF:
        odd = _is_odd_integer(y)
        if (negative_zero and y > 0) or (x == -INF and y < 0):
            return -0.0 if odd else 0.0
        return -INF if odd else INF
    if x < 0:
        if _is_even_integer(y):
            return java_pow(-x, y)
        if _is_odd_integer(y):
            return -java_pow(-x, y)
        return NAN
    try:
        return x ** y
    except OverflowError:
        return INF


def java_remainder(a: float, b: float) -> float:
    """Java's ``%`` on doubles (JLS 15.17.3)."""
    if a != a or b != b or math.isinf(a) or b == 0:
        return NAN
    if math.isinf(b) or a == 0:
        return a
    return math.fmod(a, b)  # the sign of the dividend, truncating division: C's fmod


def java_divide(a: float, b: float) -> float:
    """Java's ``/`` on doubles (IEEE 754, JLS 15.17.2)."""
    if a != a or b != b or (math.isinf(a) and math.isinf(b)) or (a == 0 and b == 0):
        return NAN
    sign = math.copysign(1, a) * math.copysign(1, b)
    if b == 0 or math.isinf(a):
        return math.copysign(INF, sign)
    return a / b


SPECIAL = [0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 0.5, -0.5, 3.0, -3.0, 1e308, -1e308, INF, -INF, NAN, 1 / 3]
DOUBLES = st.one_of(st.sampled_from(SPECIAL), st.floats(allow_nan=True, allow_infinity=True))


@given(DOUBLES, DOUBLES)
def test_power_remainder_and_division_of_doubles_are_javas(x, y):
    assert same(SCALAR["power"](x, y)) == same(java_pow(x, y))
    assert same(java_mod(x, y)) == same(java_remainder(x, y))
    got, want = java_div(x, y), java_divide(x, y)
    assert same(got) == same(want)
    if want == want:  # the sign of an infinity or a zero too
        assert math.copysign(1, got) == math.copysign(1, want)


JAVA_MATH = {  # Math's documented answers outside the ordinary domain
    "sqrt": lambda x: NAN if x != x or x < 0 else (INF if x == INF else math.sqrt(x)),
    "ln": lambda x: NAN if x != x or x < 0 else (-INF if x == 0 else INF if x == INF else math.log(x)),
    "log10": lambda x: NAN if x != x or x < 0 else (-INF if x == 0 else INF if x == INF else math.log10(x)),
    "exp": lambda x: NAN if x != x else (0.0 if x == -INF else INF if x > 709.8 else math.exp(x)),
    "asin": lambda x: NAN if x != x or abs(x) > 1 else math.asin(x),
    "acos": lambda x: NAN if x != x or abs(x) > 1 else math.acos(x),
    "sin": lambda x: NAN if x != x or math.isinf(x) else math.sin(x),
    "cos": lambda x: NAN if x != x or math.isinf(x) else math.cos(x),
    "tan": lambda x: NAN if x != x or math.isinf(x) else math.tan(x),
    "ceil": lambda x: x if x != x or math.isinf(x) else float(math.ceil(x)),
    "floor": lambda x: x if x != x or math.isinf(x) else float(math.floor(x)),
    "sign": lambda x: NAN if x != x else float((x > 0) - (x < 0)),
    "cbrt": lambda x: x if x != x or math.isinf(x) else math.copysign(abs(x) ** (1 / 3), x),
}


@given(DOUBLES)
def test_math_functions_of_doubles_answer_as_javas_math_and_never_raise(x):
    for name, want in JAVA_MATH.items():
        got = SCALAR[name](x)
        expected = want(x)
        if name == "cbrt" and math.isfinite(x):  # gyreflow snaps exact cubes: compare closely
            assert math.isclose(got, expected, rel_tol=1e-12, abs_tol=1e-300), (name, x)
        else:
            assert same(got) == same(expected), (name, x)
    for name in ("cot", "atan", "degrees", "radians", "trunc", "round", "abs"):
        SCALAR[name](x)  # no Python error for any double
    assert same(SCALAR["cot"](0.0)) == INF


def test_double_maths_out_of_domain_in_a_query_is_javas_answer(make_env, tmp_path):
    xs = [2.5, 0.0, -2.5, NAN, INF, -0.0]
    (tmp_path / "t.txt").write_text("".join(f"{i},{x!r}\n".replace("nan", "NaN").replace("inf", "Infinity")
                                            for i, x in enumerate(xs)), encoding="utf-8")
    items = {"x % 0": lambda x: java_remainder(x, 0.0), "sqrt(x - 5)": lambda x: JAVA_MATH["sqrt"](x - 5),
             "ln(x)": JAVA_MATH["ln"], "log10(x)": JAVA_MATH["log10"],
             "power(x, -1)": lambda x: java_pow(x, -1.0), "x / -0.0": lambda x: java_divide(x, -0.0),
             "x / 0": lambda x: java_divide(x, 0.0), "asin(x)": JAVA_MATH["asin"],
             "exp(x * 1000)": lambda x: JAVA_MATH["exp"](x * 1000)}
    script = (table("id int, x double", tmp_path / "t.txt") + f"SELECT id, {', '.join(items)} FROM t;\n"
              f"SELECT id, {', '.join(items)} FROM t ORDER BY id;\n")
    result = make_env(2).sql(script)
    want = sorted((i, *(same(fn(x)) for fn in items.values())) for i, x in enumerate(xs))
    for name in ("rows-2", "rows-3"):  # a compiled row function; the query operator's closures
        got = sorted(tuple(same(v) for v in row) for row in result.output(name))
        assert got == want


def test_an_integer_remainder_by_zero_stays_an_error_as_javas():
    with pytest.raises(QueryError, match="division by zero"):
        java_mod(7, 0)
    with pytest.raises(QueryError, match="division by zero"):
        java_div(7, 0)


# ---- syntax errors: the line and column where they are, in plain words

def _refused(tmp_path, body: str) -> str:
    (tmp_path / "t.txt").write_text("1,a\n", encoding="utf-8")
    script = ("CREATE TABLE t (id int, s varchar)\n"
              f"  WITH (type='file', geaflow.dsl.file.path='{tmp_path / 't.txt'}');\n" + body)
    with pytest.raises(DslError) as refused:
        prepare(script)
    return str(refused.value)


@pytest.mark.parametrize(("body", "want"), [
    ("SELECT id FROM t WHERE s = 'oops;\n", "line 3, column 28: a string is not closed (a ' is missing)"),
    ("SELECT id,\n  name FROM t WHERE s = 'oops;\n", "line 4, column 25: a string is not closed"),
    ('SELECT "id FROM t;\n', "line 3, column 8: a quoted name is not closed"),
    ("SELECT id FROM t /* no end;\n", "line 3, column 18: a comment is not closed"),
    ("SELECT id FROM t WHERE;\n",
     "statement 2, line 3, column 18: cannot parse the query: WHERE needs a condition"),
    ("SELECT id FROM t WHERE id =;\n", "line 3, column 27: cannot parse the query: = needs a value after it"),
    ("SELECT id FROM t ORDER BY;\n", "cannot parse the query: ORDER BY needs what to sort by"),
    ("SELECT id FROM t HAVING;\n", "cannot parse the query: HAVING needs a condition"),
    ("SELECT id FROM;\n", "cannot parse the query: Expected table name but found the end of the query"),
])
def test_a_syntax_error_is_placed_where_it_is_in_plain_words(tmp_path, body, want):
    message = _refused(tmp_path, body)
    assert want in message
    assert not re.search(r"<class|Required keyword|Token|tokeniz", message), message


@pytest.mark.parametrize("query", ["SELECT id +", "SELECT id FROM t WHERE id BETWEEN 1",
                                   "SELECT id FROM t LIMIT", "SELECT id FROM t WHERE s LIKE",
                                   "SELECT id FROM t UNION",
                                   "SELECT id FROM t WHERE id > 1 AND", "SELECT id FROM t WHERE NOT"])
def test_no_parse_error_shows_sqlglots_internal_names(tmp_path, query):
    message = _refused(tmp_path, query + ";\n")
    assert "line 3" in message and "cannot parse the query: " in message
    assert not re.search(r"<class|Required keyword|sqlglot|Token", message), message


# ---- aggregates gyreflow has no implementation of: refused before anything runs

@pytest.mark.parametrize("item", ["median(id)", "string_agg(s, ',')", "listagg(s)", "array_agg(id)",
                                  "mode(id)", "any_value(s)", "corr(id, id)", "approx_count_distinct(s)",
                                  "first(s)"])
@pytest.mark.parametrize("group", ["", " GROUP BY s"])
def test_an_aggregate_without_an_implementation_is_refused_before_anything_runs(tmp_path, item, group):
    message = _refused(tmp_path, f"SELECT {item} FROM t{group};\n")
    assert re.search(r"statement 2, line 3, column \d+: no function [A-Z_]+$", message), message


def test_every_aggregate_the_docs_list_has_an_implementation():
    text = (REPO / "docs" / "dsl.md").read_text(encoding="utf-8")
    listed = re.search(r"- Functions: aggregates (.*?); scalars", text, re.S).group(1)
    names = [n.lower() for n in re.findall(r"`([A-Z_]+)`", listed) if n != "DISTINCT"]
    assert names and all(n in AGGREGATE or n in AGGREGATE_WITH_PARAMETER for n in names), names


@pytest.mark.processes
def test_gyreflow_sql_refuses_median_in_one_line_with_exit_2(tmp_path):
    (tmp_path / "t.txt").write_text("1,a\n2,b\n", encoding="utf-8")
    (tmp_path / "q.sql").write_text(table("id int, s varchar", "t.txt") + "SELECT median(id) FROM t;\n",
                                    encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "gyreflow", "sql", "q.sql", "--env", "local"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines()[0] == "error: q.sql: statement 2, line 2, column 8: no function MEDIAN"


# ---- text where a number belongs

@pytest.mark.parametrize(("body", "want"), [
    ("SELECT s + 1 FROM t;\n", "line 3, column 8: s + 1: + needs numbers, s is VARCHAR"),
    ("SELECT id FROM t WHERE 2 * t.s > 1;\n", "line 3, column 30: 2 * t.s: * needs numbers, t.s is VARCHAR"),
    ("SELECT sum(s) FROM t;\n", "line 3, column 12: SUM(s): SUM needs numbers, s is VARCHAR"),
    ("SELECT id, avg(s) FROM t GROUP BY id;\n", "line 3, column 16: AVG(s): AVG needs numbers, s is VARCHAR"),
    ("SELECT -s FROM t;\n", "- needs numbers, s is VARCHAR"),
])
def test_arithmetic_on_a_text_column_is_refused_at_its_place(tmp_path, body, want):
    assert want in _refused(tmp_path, body)


@pytest.mark.parametrize(("query", "named"), [
    ("SELECT COALESCE(s, s) + 1 FROM t", "needs numbers, got 'a' and 1, in COALESCE(s, s) + 1"),  # codegen
    ("SELECT id, COALESCE(s, s) * 2 FROM t ORDER BY id",  # the query operator
     "needs numbers, got 'a' and 2, in COALESCE(s, s) * 2"),
    # a GROUP BY over a table read in windows: running aggregates (codegen's update)
    ("SET geaflow.dsl.window.size = 1;\nSELECT s, SUM(COALESCE(s, s)) FROM t GROUP BY s",
     "SUM cannot take 'a', in SUM(COALESCE(s, s))"),
])
def test_text_met_while_running_names_the_expression_and_the_row(make_env, tmp_path, query, named):
    (tmp_path / "t.txt").write_text("1,a\n", encoding="utf-8")
    script = table("id int, s varchar", tmp_path / "t.txt") + f"{query};\n"
    with pytest.raises(Exception) as failed:  # the job's error, whichever host ran it
        make_env(1).sql(script)
    message = str(failed.value)
    assert named in message, message
    assert "on row (s='a')" in message, message  # the columns read, by name (id is not read)
    assert "TypeError" not in message.split("Original traceback")[0], message
