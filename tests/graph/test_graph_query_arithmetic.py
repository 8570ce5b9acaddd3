"""Query arithmetic follows openCypher: integer ``/`` truncates toward zero and ``%`` takes the
dividend's sign, float operands stay float (IEEE: infinity and NaN by zero), an integer ``/`` or
``%`` by zero and an integer outside 64 bits raise. Oracles: exact fractions and ``math.fmod`` for
every pair Hypothesis makes, and kuzu (an embedded Cypher database) on the same expressions and on
a MATCH query over the same graph."""

from __future__ import annotations

import math
import os
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gyreflow.api.graph import GraphView
from gyreflow.api.graph.query import Query, query_graph
from gyreflow.api.graph.query.cypher import parse
from gyreflow.api.graph.query.evaluate import QueryArithmeticError

INT64 = st.integers(-(2**63), 2**63 - 1)
FLOATS = st.floats(allow_nan=False, allow_infinity=False, width=64)


def value(text: str):
    """What the query language gives for the expression ``text``."""
    return Query(f"MATCH (a) RETURN {text} AS v").rows([{"a": ("node", 0, None)}])[0]["v"]


def literal(number) -> str:
    """``number`` as query text: an int's digits, a float's repr (``1e+300``, ``-0.0``)."""
    if isinstance(number, int) and number == -(2**63):
        return f"({number + 1} - 1)"  # the literal 2**63 is out of range before the minus
    return f"({number!r})"


def truncated(a: int, b: int) -> int:
    return math.trunc(Fraction(a, b))


@given(INT64, INT64.filter(lambda b: b != 0))
def test_integer_division_truncates_and_modulo_takes_the_dividends_sign(a, b):
    quotient = truncated(a, b)
    if -(2**63) <= quotient < 2**63:
        assert value(f"{literal(a)} / {literal(b)}") == quotient
    else:  # only MIN / -1
        with pytest.raises(QueryArithmeticError, match="integer overflow"):
            value(f"{literal(a)} / {literal(b)}")
    remainder = value(f"{literal(a)} % {literal(b)}")
    assert remainder == a - b * quotient
    assert remainder == 0 or (remainder < 0) == (a < 0)


@given(FLOATS, FLOATS)
def test_float_operands_divide_as_floats(a, b):
    for left, right in ((a, b), (int(a) if abs(a) < 2**62 else a, b)):
        got_quotient = value(f"{literal(left)} / {literal(right)}")
        got_remainder = value(f"{literal(left)} % {literal(right)}")
        if b != 0:
            assert got_quotient == left / right
            assert got_remainder == math.fmod(left, right)
        else:
            assert math.isnan(got_remainder)
            if left == 0:
                assert math.isnan(got_quotient)
            else:
                assert got_quotient == math.copysign(math.inf, left) * math.copysign(1.0, right)


@pytest.mark.parametrize(("text", "message"), [
    ("7 / 0", "integer division by zero in a query: 7 / 0"),
    ("-7 % 0", "integer modulo by zero in a query: -7 % 0"),
    ("9223372036854775807 + 1", "integer overflow in a query"),
    ("-9223372036854775807 - 2", "integer overflow in a query"),
    ("4611686018427387904 * 2", "integer overflow in a query"),
])
def test_integer_errors_are_named(text, message):
    with pytest.raises(QueryArithmeticError, match=message):
        value(text)


@pytest.mark.parametrize(("text", "expected"), [
    ("'ab' * 3", None), ("'%d' % 5", None), ("true + 1", None), ("2 - 'a'", None),
    ("'a' + 'b'", "ab"), ("[1] + [2]", [1, 2]), ("[1] + 2", [1, 2]), ("0 + [1]", [0, 1]),
    ("-(-7) / 2", 3), ("-7 / 2 * 2 + -7 % 2", -7), ("-true", None),
])
def test_other_operands_follow_opencypher_not_python(text, expected):
    assert value(text) == expected


# --- kuzu ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def kuzu_connection(tmp_path_factory):
    kuzu = pytest.importorskip("kuzu")
    database = kuzu.Database(os.fspath(tmp_path_factory.mktemp("kuzu") / "db"))
    return kuzu.Connection(database)


def kuzu_value(connection, text: str):
    try:
        return connection.execute(f"RETURN {text}").get_next()[0]
    except RuntimeError as exc:
        return ("error", "zero" if "by zero" in str(exc) else "overflow" if "Overflow" in str(exc)
                else str(exc))


def ours(text: str):
    try:
        return value(text)
    except QueryArithmeticError as exc:
        return ("error", "zero" if "by zero" in str(exc) else "overflow")


SMALL = st.integers(-50, 50)
NUMBER = st.one_of(SMALL, INT64, st.floats(-100, 100).map(lambda x: round(x, 2)))


@given(st.lists(st.tuples(NUMBER, st.sampled_from(["/", "%"]), NUMBER), min_size=20, max_size=20))
def test_arithmetic_equals_kuzu(kuzu_connection, triples):
    for left, op, right in triples:
        text = f"{literal(left)} {op} {literal(right)}"
        want, got = kuzu_value(kuzu_connection, text), ours(text)
        if isinstance(want, float) and math.isnan(want):
            assert isinstance(got, float) and math.isnan(got), text
        else:
            assert got == want and type(got) is type(want), (text, got, want)


def test_a_match_query_equals_kuzu(make_env, tmp_path):
    """One graph in both: numbers -20..20 as vertices, each linked to the next; WHERE and RETURN
    divide and take remainders of negative and positive properties."""
    kuzu = pytest.importorskip("kuzu")
    numbers = list(range(-20, 21))
    connection = kuzu.Connection(kuzu.Database(os.fspath(tmp_path / "kuzu")))
    connection.execute("CREATE NODE TABLE N(id INT64, x INT64, y DOUBLE, PRIMARY KEY (id))")
    connection.execute("CREATE REL TABLE NEXT(FROM N TO N)")
    for n in numbers:
        connection.execute(f"CREATE (:N {{id: {n}, x: {n}, y: {n / 4}}})")
    for n in numbers[:-1]:
        connection.execute(f"MATCH (a:N {{id: {n}}}), (b:N {{id: {n + 1}}}) CREATE (a)-[:NEXT]->(b)")
    text = ("MATCH (a:N)-[:NEXT]->(b:N) WHERE a.x % 3 <> 0 AND b.x / 4 >= -3 "
            "RETURN a.x AS x, a.x / 3 AS q, a.x % 3 AS r, b.x % -4 AS s, a.y % 2 AS f, "
            "b.y / 3 AS g ORDER BY x")
    result = connection.execute(text)
    want = []
    while result.has_next():
        want.append(result.get_next())
    assert len(want) > 10 and any(row[2] < 0 for row in want)
    vertices = [(n, {"label": "N", "x": n, "y": n / 4}) for n in numbers]
    edges = [(n, n + 1, {"label": "NEXT"}) for n in numbers[:-1]]
    query = Query(text)
    pipeline = make_env().pipeline("arithmetic")

    @pipeline.task
    def run(ctx):
        graph = GraphView(ctx.source(vertices), ctx.source(edges), directed=True)
        query_graph(graph, query, ctx.source([(1, {})])).collect("matches")

    matches = [bindings for _, bindings in pipeline.execute().output("matches")]
    got = [list(row.values()) for row in query.rows(matches, {})]
    assert got == want


def test_the_parser_keeps_negative_literals_exact():
    assert parse("MATCH (a) RETURN -9223372036854775807 - 1").items[0].expr == (
        "bin", "-", ("lit", -9223372036854775807), ("lit", 1))
