"""Values at the edges of their types, against DuckDB, Java's documented semantics (as plain Python)
and plain loops: NaN in a double column (ORDER BY, LIMIT, RANK, MIN/MAX, running MIN/MAX), the
text of an int/bigint column of a file table (read as Java's parseInt/parseLong reads it, or the row
refused), and integer arithmetic and narrowing CASTs that leave the int/bigint range (refused)."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from collections import Counter

import duckdb
import pytest
import sqlglot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gyreflow.api.dsl.catalog import Catalog
from gyreflow.api.dsl.codegen import row_method
from gyreflow.api.dsl.errors import QueryError
from gyreflow.api.dsl.functions import AGGREGATE
from gyreflow.api.dsl.queries import Relation, Scope, ordering
from gyreflow.api.dsl.rows import RowFormatError, iter_text_chunks
from gyreflow.api.dsl.sql_types import Column
from gyreflow.api.graph.query.dialect import GeaFlowDialect

NAN, INF = math.nan, math.inf


def table(columns: str, path) -> str:
    return f"CREATE TABLE t ({columns}) WITH (type='file', geaflow.dsl.file.path='{path}');\n"


def same(value):
    """A value as compared: every NaN one marker (NaN is not equal to itself in Python)."""
    return "NaN" if isinstance(value, float) and value != value else value


def rows_of(rows) -> list[tuple]:
    return [tuple(same(v) for v in row) for row in rows]


def java_text(value) -> str:
    """A double as a text table holds it (Java's Double.toString for the special values)."""
    if value is None:
        return ""
    if value != value:
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return repr(value)


# ---- NaN: Java's Double.compareTo puts it above every other double, equal to itself (DuckDB too)

def java_compare_key(value):
    """Double.compareTo's order as a sort key, NULL last (Calcite's ascending default): a plain
    reading of its documentation, not gyreflow's code."""
    if value is None:
        return (2, 0.0)
    if value != value:
        return (1, 0.0)
    return (0, value)


DOUBLES = st.one_of(st.none(), st.just(NAN), st.just(INF), st.just(-INF),
                    st.floats(-1e6, 1e6, allow_nan=False).map(lambda f: f + 0.0))


@given(st.lists(DOUBLES, max_size=12))
def test_min_and_max_follow_double_compare_to(values):
    present = [v for v in values if v is not None]
    want_max = max(present, key=java_compare_key) if present else None
    want_min = min(present, key=java_compare_key) if present else None
    assert same(AGGREGATE["max"](values)) == same(want_max)
    assert same(AGGREGATE["min"](values)) == same(want_min)


@given(st.lists(DOUBLES, max_size=12), st.booleans())
def test_order_by_sorts_as_double_compare_to(values, descending):
    got = sorted(values, key=ordering([(lambda v: v, descending)]))
    # ascending: NULL last; descending reverses the order of values and puts NULL first (Calcite)
    want = sorted(values, key=java_compare_key, reverse=descending)
    assert [same(v) for v in got] == [same(v) for v in want]


NAN_ROWS = [(1, 3.0, "a"), (2, NAN, "a"), (3, 1.0, "b"), (4, 2.0, "b"), (5, 0.5, "a"), (6, NAN, "b"),
            (7, None, "a"), (8, INF, "b"), (9, -INF, "a"), (10, 0.5, "b")]
NAN_QUERIES = [  # (gyreflow's query, DuckDB's, ordered)
    ("SELECT id, x FROM t ORDER BY x, id", "SELECT id, x FROM t ORDER BY x NULLS LAST, id", True),
    ("SELECT id, x FROM t ORDER BY x DESC, id", "SELECT id, x FROM t ORDER BY x DESC NULLS FIRST, id", True),
    ("SELECT id FROM t ORDER BY x, id LIMIT 4", "SELECT id FROM t ORDER BY x NULLS LAST, id LIMIT 4", True),
    ("SELECT id, RANK() OVER (ORDER BY x) FROM t",
     "SELECT id, RANK() OVER (ORDER BY x NULLS LAST) FROM t", False),
    ("SELECT id, DENSE_RANK() OVER (PARTITION BY g ORDER BY x DESC) FROM t",
     "SELECT id, DENSE_RANK() OVER (PARTITION BY g ORDER BY x DESC NULLS FIRST) FROM t", False),
    ("SELECT MAX(x), MIN(x), COUNT(x) FROM t", None, False),
    ("SELECT MAX(x), MIN(x) FROM t WHERE id <> 8", None, False),
    ("SELECT MAX(x), MIN(x) FROM t WHERE id = 2 OR id = 6", None, False),
    ("SELECT g, MAX(x), MIN(x) FROM t GROUP BY g", None, False),
    ("SELECT COUNT(DISTINCT x) FROM t", None, False),  # every NaN one value
    ("SELECT g, COUNT(DISTINCT x), MAX(x) FROM t GROUP BY g", None, False),
]


def _write_nan_table(path, rows) -> str:
    path.write_text("".join(f"{i},{java_text(x)},{g}\n" for i, x, g in rows), encoding="utf-8")
    return table("id int, x double, g varchar", path)


def _duckdb_nan_table(rows):
    db = duckdb.connect()
    db.execute("CREATE TABLE t (id INTEGER, x DOUBLE, g VARCHAR)")
    db.executemany("INSERT INTO t VALUES (?, ?, ?)", rows)
    return db


def test_nan_in_a_double_column_sorts_ranks_and_aggregates_as_duckdb(make_env, environment_type,
                                                                     tmp_path):
    # every query on one host; on Spark, where each is a Spark job of the same operators, three
    queries = NAN_QUERIES[:3] if environment_type == "spark" else NAN_QUERIES
    script = _write_nan_table(tmp_path / "t.txt", NAN_ROWS)
    script += "".join(query + ";\n" for query, _, _ in queries)
    result = make_env(2).sql(script)
    db = _duckdb_nan_table(NAN_ROWS)
    for number, (query, duck, ordered) in enumerate(queries, 2):
        got = rows_of(result.output(f"rows-{number}"))
        want = rows_of(db.execute(duck or query).fetchall())
        assert (got if ordered else Counter(got)) == (want if ordered else Counter(want)), query


def test_running_min_and_max_over_windows_of_rows_treat_nan_as_the_largest(make_env, tmp_path):
    """GROUP BY over a table read in windows runs on accumulators (codegen's update): a group's last
    row is DuckDB's over every row."""
    script = _write_nan_table(tmp_path / "t.txt", NAN_ROWS).replace(
        ");\n", ", geaflow.dsl.window.size = 2);\n")
    query = "SELECT g, MAX(x), MIN(x), COUNT(*) FROM t GROUP BY g"
    windows = make_env(2).sql(script + query + ";\n").by_window("rows-2")
    last = {}
    for window in sorted(windows):
        for row in windows[window]:
            last[row[0]] = row
    want = _duckdb_nan_table(NAN_ROWS).execute(query).fetchall()
    assert Counter(rows_of(last.values())) == Counter(rows_of(want))


# ---- the text of an int/bigint column: Java's parseInt/parseLong, or the row is refused

JAVA_BLANKS = "".join(map(chr, range(33)))  # String.trim


def strict_integer(text: str, bits: int):
    """What a field's text is in an integer column of ``bits`` bits: None for NULL ('' or null), the
    integer of an optional sign and ASCII digits in range, else "refused"."""
    text = text.strip(JAVA_BLANKS)
    if text == "" or text.lower() == "null":
        return None
    if re.fullmatch(r"[+-]?[0-9]+", text) is None:
        return "refused"
    value = int(text)
    return value if -(1 << (bits - 1)) <= value < 1 << (bits - 1) else "refused"


FIELD_TEXTS = st.one_of(
    st.integers(-2**64, 2**64).map(str),
    st.integers(-2**31 - 3, 2**31 + 3).map(str),
    st.builds(lambda pad, n, end: f"{pad}{n}{end}", st.sampled_from(["", " ", "\t", "+", "0", "00"]),
              st.integers(-10**6, 10**6), st.sampled_from(["", " ", "\t"])),
    st.text(alphabet="0123456789+-_.eEx aZ\u0663\uff10\u00a0", max_size=8),
    st.sampled_from(["", "null", "NULL", "1.7", "1_000", "1e3", "abc", "\u0663", "\uff11", "0x1F", "--1",
                     "+-1", "1.0", "9223372036854775807", "9223372036854775808", "-9223372036854775808",
                     "2147483647", "2147483648", "-2147483648", "-2147483649"]),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(FIELD_TEXTS, min_size=1, max_size=40), st.sampled_from([("int", 32), ("bigint", 64)]),
       st.sampled_from([None, frozenset({1})]))
def test_an_integer_column_reads_each_text_as_java_does_or_refuses_its_row(tmp_path_factory, texts,
                                                                           kind, needed):
    sql_type, bits = kind
    path = tmp_path_factory.mktemp("ints") / "t.txt"
    path.write_text("".join(f"{line},{text}\n" for line, text in enumerate(texts, 1)), encoding="utf-8")
    want = [strict_integer(text, bits) for text in texts]
    read = lambda: [row for rows in iter_text_chunks(  # noqa: E731
        str(path), ["bigint", sql_type], ",", True, "UTC", needed, names=["k", "n"]) for row in rows]
    if "refused" not in want:
        got = read()
        assert [n for _, n in got] == want
        if needed is None:
            assert [k for k, _ in got] == list(range(1, len(texts) + 1))
        return
    first = want.index("refused") + 1
    with pytest.raises(RowFormatError) as refused:
        read()
    message = str(refused.value)
    assert message.startswith(f"{path}, line {first}, column n: "), message
    assert repr(texts[first - 1].strip(JAVA_BLANKS)) in message or "out of the range" in message, message


REPRO_6 = "1,a\n1.7,b\n1_000,c\n99999999999999999999,d\n"


@pytest.mark.parametrize(("lines", "line", "text"), [
    ("1,a\n1.7,b\n", 2, "'1.7' is not an integer (INT)"),
    ("1,a\n2,b\n1_000,c\n", 3, "'1_000' is not an integer (INT)"),
    ("99999999999999999999,d\n", 1, "99999999999999999999 is out of the range of INT"),
    ("1,a\nabc,b\n", 2, "'abc' is not an integer (INT)"),
])
def test_a_bad_value_in_an_int_column_stops_the_job_naming_file_line_column_and_text(
        make_env, tmp_path, lines, line, text):
    (tmp_path / "t.txt").write_text(lines, encoding="utf-8")
    script = table("id int, s varchar", tmp_path / "t.txt") + "SELECT id, s FROM t;\n"
    with pytest.raises(RowFormatError) as refused:
        make_env(2).sql(script)
    assert f"t.txt, line {line}, column id: {text}" in str(refused.value)


@pytest.mark.processes
def test_gyreflow_sql_exits_5_on_a_fraction_in_an_int_column(tmp_path):
    (tmp_path / "t.txt").write_text(REPRO_6, encoding="utf-8")
    (tmp_path / "q.sql").write_text(table("id int, s varchar", "t.txt") + "SELECT id, s FROM t;\n",
                                    encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "gyreflow", "sql", "q.sql", "--env", "local"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (5, "")
    assert done.stderr.splitlines() == ["error: t.txt, line 2, column id: '1.7' is not an integer (INT)"]


# ---- integer arithmetic and narrowing CASTs: DuckDB's answer or its refusal (Java would wrap)

INT_MIN, INT_MAX, LONG_MIN, LONG_MAX = -2**31, 2**31 - 1, -2**63, 2**63 - 1
DUCK_TYPES = {"int": "INTEGER", "bigint": "BIGINT"}


def _compiled(expression: str, types: tuple[str, str]):
    """``expression`` over a row ``(a, b)`` of columns declared ``types``: the closure and the
    compiled row function (codegen), each ``fn(row) -> value`` or QueryError."""
    scope = Scope(Relation([Column((None, "a"), types[0]), Column((None, "b"), types[1])], []), Catalog())
    node = sqlglot.parse_one(f"SELECT {expression}", dialect=GeaFlowDialect).expressions[0]
    closure = scope.compile(node)
    method = row_method(node, scope)

    class Holder:
        @staticmethod
        def failed(exc):
            return exc
    return (lambda row: closure((row, None))), (lambda row: method(Holder, row))


def _outcome(fn, row):
    try:
        return fn(row)
    except QueryError as exc:
        return ("refused", "overflow" in exc.message or "division by zero" in exc.message)


def _duckdb_outcome(db, expression: str, types, row):
    duck = expression.replace(" / ", " // ")
    try:
        return db.execute(f"SELECT {duck} FROM (SELECT ?::{DUCK_TYPES[types[0]]} AS a, "
                          f"?::{DUCK_TYPES[types[1]]} AS b)", list(row)).fetchone()[0]
    except (duckdb.OutOfRangeException, duckdb.InvalidInputException, duckdb.ConversionException):
        return ("refused", True)


def _edge_ints(low, high):
    return st.one_of(st.integers(low, high), st.sampled_from([low, high, low + 1, high - 1, 0, 1, -1, 2, -2]))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([("int", "int"), ("int", "bigint"), ("bigint", "bigint"), ("bigint", "int")]),
       st.sampled_from(["a + b", "a - b", "a * b", "a / b", "a % b", "a + 1", "a * 2 - b", "(a - b) * 3"]),
       st.data())
def test_integer_arithmetic_is_duckdbs_value_or_refused_as_duckdb_refuses_it(types, expression, data):
    ranges = {"int": (INT_MIN, INT_MAX), "bigint": (LONG_MIN, LONG_MAX)}
    row = (data.draw(_edge_ints(*ranges[types[0]])), data.draw(_edge_ints(*ranges[types[1]])))
    if "%" in expression and row[1] == 0:
        row = (row[0], 7)  # DuckDB's % by zero is NULL; gyreflow's, as Java's, an error (see below)
    want = _duckdb_outcome(duckdb.connect(), expression, types, row)
    closure, method = _compiled(expression, types)
    assert _outcome(closure, row) == want, (expression, types, row)
    assert _outcome(method, row) == want, (expression, types, row)


@pytest.mark.parametrize(("expression", "types", "row"), [
    ("-a", ("int", "int"), (INT_MIN, 0)),  # Java: -Integer.MIN_VALUE wraps to itself
    ("-a", ("bigint", "int"), (LONG_MIN, 0)),
    ("a / b", ("int", "int"), (INT_MIN, -1)),  # Java: Integer.MIN_VALUE / -1 wraps
    ("a % b", ("int", "int"), (5, 0)),  # Java: ArithmeticException
    ("CAST(a AS int)", ("bigint", "int"), (INT_MAX + 1, 0)),
    ("CAST(a AS int)", ("bigint", "int"), (LONG_MAX, 0)),
    ("CAST(a AS smallint)", ("int", "int"), (40_000, 0)),
    ("CAST(a AS bigint) * b", ("int", "bigint"), (INT_MAX, LONG_MAX)),
])
def test_what_java_would_wrap_or_throw_on_is_refused(expression, types, row):
    for fn in _compiled(expression, types):
        with pytest.raises(QueryError, match=r"overflow|out of the range|division by zero"):
            fn(row)


@pytest.mark.parametrize(("expression", "types", "row", "want"), [
    ("-a", ("int", "int"), (INT_MAX, 0), -INT_MAX),
    ("CAST(a AS int)", ("bigint", "int"), (INT_MIN, 0), INT_MIN),
    ("CAST(a AS bigint) + 1", ("int", "int"), (INT_MAX, 0), INT_MAX + 1),  # a BIGINT sum
    ("a + 1.5", ("int", "int"), (INT_MAX, 0), INT_MAX + 1.5),  # a double
    ("a + b", ("int", "bigint"), (INT_MAX, 1), INT_MAX + 1),  # widened to BIGINT
])
def test_what_fits_the_result_type_is_computed(expression, types, row, want):
    for fn in _compiled(expression, types):
        assert fn(row) == want


OVERFLOWS = [  # (query, the expression and the row the error names)
    ("SELECT i + 1 FROM t", "in i + 1 on row (i=2147483647)"),  # one table: a compiled row function
    ("SELECT i, n * n FROM t ORDER BY i", "in n * n on row (n=9223372036854775807)"),  # query op
    ("SELECT CAST(n AS int) FROM t", "in CAST(n AS INT) on row (n="),
]


@pytest.mark.parametrize(("query", "named"), OVERFLOWS)
def test_an_overflow_stops_the_job_naming_the_expression_the_window_and_the_row(make_env, tmp_path, query,
                                                                                named):
    (tmp_path / "t.txt").write_text("2147483647,9223372036854775807\n1,1099511627776\n", encoding="utf-8")
    script = table("i int, n bigint", tmp_path / "t.txt") + f"{query};\n"
    with pytest.raises(Exception) as failed:  # the job's error, whichever host ran it
        make_env(2).sql(script)
    message = str(failed.value)
    assert re.search(r"(INT|BIGINT) overflow|out of the range of INT", message), message
    assert named in message and "window 1" in message, message
    # DuckDB refuses the same query
    db = duckdb.connect()
    db.execute("CREATE TABLE t (i INTEGER, n BIGINT); INSERT INTO t VALUES (2147483647, 9223372036854775807)")
    with pytest.raises((duckdb.OutOfRangeException, duckdb.ConversionException)):
        db.execute(query).fetchall()


def test_arithmetic_in_range_gives_duckdbs_rows(make_env, tmp_path):
    rows = [(2147483647, 9223372036854775807), (-2147483648, -9223372036854775808), (5, -7), (None, 3)]
    (tmp_path / "t.txt").write_text("".join(f"{'' if i is None else i},{n}\n" for i, n in rows),
                                    encoding="utf-8")
    queries = ["SELECT i - 1, n - 1 FROM t WHERE i > 0", "SELECT i + 1, n + 1 FROM t WHERE i < 0",
               "SELECT i * 3 + n, i / 2, n % 5, -i FROM t WHERE i = 5", "SELECT i + n FROM t WHERE i = 5",
               "SELECT CAST(i AS bigint) * 4, CAST(n / 4294967296 AS int) FROM t"]
    script = table("i int, n bigint", tmp_path / "t.txt") + "".join(q + ";\n" for q in queries)
    result = make_env(2).sql(script)
    db = duckdb.connect()
    db.execute("CREATE TABLE t (i INTEGER, n BIGINT)")
    db.executemany("INSERT INTO t VALUES (?, ?)", rows)
    for number, query in enumerate(queries, 2):
        want = db.execute(query.replace(" / ", " // ")).fetchall()
        assert Counter(result.output(f"rows-{number}")) == Counter(want), query
