"""Graph queries read by the DSL's reader (sqlglot's tokens): literals, escapes, comments, and
one-line refusals."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gyreflow.api.graph.query import QuerySyntaxError, UnsupportedQueryError, parse_query
from gyreflow.api.graph.query.cypher import parse, tokenize
from gyreflow.api.graph.query.syntax import UNSUPPORTED


def _cypher_string(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n").replace("\t", "\\t")
    return f"'{escaped}'"


def _return_literal(source: str):
    ast = parse(f"MATCH (a) RETURN {source} AS x")
    expr = ast.items[0].expr
    assert expr[0] == "lit"
    return expr[1]


@given(st.integers(min_value=-(2 ** 63), max_value=2 ** 63))
def test_integers_round_trip(number):
    assert _return_literal(str(number)) == number


@given(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e300, max_value=1e300))
def test_floats_round_trip(number):
    text = repr(float(number))
    if "e" not in text and "." not in text:
        text += ".0"
    assert _return_literal(text) == number


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30))
def test_strings_round_trip_through_escapes(text):
    assert _return_literal(_cypher_string(text)) == text


@given(st.lists(st.one_of(st.integers(-1000, 1000), st.booleans(), st.none(),
                          st.text(alphabet="abc'\\\" ", max_size=5)), max_size=6))
def test_lists_round_trip(items):
    def show(item):
        if item is None:
            return "null"
        if isinstance(item, bool):
            return "true" if item else "false"
        if isinstance(item, str):
            return _cypher_string(item)
        return str(item)

    assert _return_literal("[" + ", ".join(show(i) for i in items) + "]") == items


SEPARATORS = st.sampled_from([" ", "\n", "\t", "  \n  ", " /* c */ ", " // line\n", "/**/"])


@given(st.lists(SEPARATORS, min_size=12, max_size=12), st.sampled_from(["MATCH", "match", "Match"]))
def test_whitespace_and_comments_do_not_change_the_query(gaps, keyword):
    parts = [keyword, "(a:Person)", "-[r:KNOWS*1..2]->", "(b)", "WHERE", "a.age", ">", "3",
             "RETURN", "b.name", "AS", "n"]
    spaced = "".join(part + gap for part, gap in zip(parts, gaps, strict=True))
    plain = parse("MATCH (a:Person)-[r:KNOWS*1..2]->(b) WHERE a.age > 3 RETURN b.name AS n")
    assert parse(spaced) == plain


@given(st.sampled_from(UNSUPPORTED), st.sampled_from(["", " (a) RETURN a", " x", "("]),
       st.sampled_from(["MATCH (a) ", "MATCH (a) WHERE a.x = 1 ", ""]))
def test_an_unsupported_keyword_is_one_line_naming_it(keyword, tail, head):
    text = head + keyword.lower() + tail
    with pytest.raises(UnsupportedQueryError) as info:
        parse(text)
    message = str(info.value)
    assert "\n" not in message
    assert keyword.split()[0] in message.upper().replace(" ", "")
    line, column = message.rsplit(" at ", 1)[1].split(":")
    assert (int(line), int(column)) == (1, len(head) + 1)


@given(st.text(max_size=40))
def test_any_text_parses_or_fails_with_one_line(text):
    try:
        parse(text)
    except QuerySyntaxError as exc:
        assert "\n" not in str(exc)


@pytest.mark.parametrize(("text", "where"), [
    ("MATCH (a)\nRETURN a\nUNION MATCH (b) RETURN b", "UNION at 3:1"),
    ("MATCH (a) OPTIONAL MATCH (b) RETURN a", "OPTIONAL MATCH at 1:11"),
    ("MATCH p = shortestPath((a)-[*]-(b)) RETURN p", "shortestPath at 1:11"),
    ("MATCH p = (a)-[:KNOWS]->(b) RETURN p", "named path (p = ...) at 1:7"),
    ("MATCH (a)\nRETURN *", "RETURN * at 2:8"),
    ("MATCH (a) WHERE a.name STARTS WITH 'A' RETURN a", "STARTS WITH at 1:24"),
    ("MATCH (a) WHERE a.name ENDS WITH 'A' RETURN a", "ENDS WITH at 1:24"),
    ("MATCH (a) WHERE a.name CONTAINS 'A' RETURN a", "CONTAINS at 1:24"),
    ("MATCH (a) WHERE a.name =~ 'A.*' RETURN a", "=~ (regular expression match) at 1:24"),
    ("MATCH (a) RETURN {x: 1}", "a map literal at 1:18"),
    ("MATCH (a) RETURN [x IN [1, 2] | x * 2]", "a list comprehension at 1:18"),
    ("MATCH (a) RETURN [x IN [1, 2] WHERE x > 1]", "a list comprehension at 1:18"),
    ("MATCH (a) WHERE (a)-->() RETURN a", "a pattern expression at 1:17"),
    ("MATCH (a) WHERE NOT (a)<-[:X]-(b) RETURN a", "a pattern expression at 1:21"),
    ("MATCH (a) RETURN size((a)--(b))", "a pattern expression at 1:23"),
    ("MATCH (a) RETURN 2 ^ 3", "^ (exponentiation) at 1:20"),
    ("MATCH (a) RETURN a.tags[0]", "a list index or slice at 1:24"),
    ("MATCH (a) RETURN a:Person", "a label predicate in an expression"),
    ("MATCH (a) WITH a RETURN a", "WITH at 1:11"),
    ("MATCH (a) MATCH (b) RETURN a", "a second MATCH clause at 1:11"),
    ("MATCH (a) RETURN foo(a)", "function foo() at 1:18"),
])
def test_refusals_name_the_construct_and_position(text, where):
    """Valid openCypher outside the subset: ``unsupported: CONSTRUCT at LINE:COLUMN``, never a
    generic syntax error."""
    with pytest.raises(UnsupportedQueryError, match=re.escape(f"unsupported: {where}")):
        parse(text)


def test_hexadecimal_and_octal_integers():
    items = parse("MATCH (a) RETURN 0x1F, -0x10, 0o17").items
    assert [item.expr for item in items] == [("lit", 31), ("lit", -16), ("lit", 15)]


def test_patterns_and_hops():
    ast = parse("MATCH (a:Person {name: $n})-[r:KNOWS*]->(b), (b)<-[:X*2]-(c)-[:Y*..3]-(d) RETURN a")
    first, second = ast.patterns
    assert first.nodes[0].labels == ("Person",) and first.nodes[0].properties == (("name", ("param", "n")),)
    assert (first.rels[0].direction, first.rels[0].min_hops, first.rels[0].max_hops) == ("out", 1, 10)
    assert [(r.direction, r.min_hops, r.max_hops) for r in second.rels] == [("in", 2, 2), ("both", 1, 3)]
    with pytest.raises(QuerySyntaxError, match="at most 10 hops"):
        parse("MATCH (a)-[*1..50]->(b) RETURN a")
    assert parse_query("MATCH (a)-[:K]->(b) WHERE a.x = $p RETURN b").parameters == {"p"}


def test_tokens_carry_line_and_column():
    tokens = tokenize("MATCH\n  (a)")
    assert [(t.text, t.line, t.column) for t in tokens[:2]] == [("MATCH", 1, 1), ("(", 2, 3)]


def _gyreflow(tmp_path, *args):
    return subprocess.run([sys.executable, "-m", "gyreflow", "query", *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False)


def test_the_command_prints_rows_as_json_lines(tmp_path):
    vertices = [{"id": 1, "label": "Person", "name": "Ann"}, {"id": 2, "label": "Person", "name": "Bo"},
                {"id": 3, "label": "City", "name": "Oslo"}]
    edges = [{"src": 1, "dst": 2, "label": "KNOWS"}, {"src": 2, "dst": 1, "label": "KNOWS"},
             {"src": 1, "dst": 3, "label": "LIVES_IN"}]
    (tmp_path / "v.jsonl").write_text("".join(json.dumps(v) + "\n" for v in vertices))
    (tmp_path / "e.jsonl").write_text("".join(json.dumps(e) + "\n" for e in edges))
    done = _gyreflow(tmp_path, "v.jsonl", "e.jsonl",
                     "MATCH (a:Person {name: $n})-[:KNOWS]-(b) RETURN DISTINCT b.name AS friend",
                     "--param", "n=Ann")
    assert done.returncode == 0, done.stderr
    assert [json.loads(line) for line in done.stdout.splitlines()] == [{"friend": "Bo"}]
    explained = _gyreflow(tmp_path, "v.jsonl", "e.jsonl", "MATCH (a)-[:K*2]->(b) RETURN b", "--explain")
    assert explained.returncode == 0 and "hops 2..2" in explained.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["MATCH (a) CREATE (b) RETURN a"], "error: unsupported: CREATE at 1:11"),
    (["MATCH (a {name: $n}) RETURN a"], "error: the query needs parameter $n"),
    (["MATCH (a RETURN a"], "error: expected ')'"),
    (["MATCH (a)\nRETURN 'abc"], "error: an unterminated string ('...) at 2:8"),
])
def test_the_command_fails_in_one_line(tmp_path, args, message):
    (tmp_path / "v.txt").write_text("1\n2\n")
    (tmp_path / "e.txt").write_text("1 2\n")
    done = _gyreflow(tmp_path, "v.txt", "e.txt", *args)
    assert done.returncode == 2
    assert done.stderr.startswith(message) and len(done.stderr.strip().splitlines()) == 1
    assert "Traceback" not in done.stderr and done.stdout == ""


@pytest.mark.parametrize("path", ["(a:Person)-[e:KNOWS]->(b)", "(a)<-[e:KNOWS]-(b)", "(a)-[e]-(b)",
                                  "(a)-[e:KNOWS|LIKES]->(b)-[f]->(c)"])
def test_a_query_and_a_gql_block_read_a_path_alike(path):
    """``gyreflow query`` and a script's MATCH share one reader of paths: same variables,
    directions and labels (GQL's lower-cased, as its catalogue's)."""
    from gyreflow.api.dsl.gql import parse_gql
    from gyreflow.api.dsl.parsing import Statement

    block = parse_gql(f"MATCH {path} RETURN a", Statement(1, "query", "", 1, 1), "g").matches[0]
    query = parse(f"MATCH {path} RETURN a").patterns[0]
    elements = [query.nodes[0]]
    for rel, node in zip(query.rels, query.nodes[1:], strict=True):
        elements.extend([rel, node])
    assert [p.var for p in block.patterns[0]] == [e.variable for e in elements]
    assert [p.direction for p in block.patterns[0][1::2]] == [r.direction for r in query.rels]
    assert [p.labels for p in block.patterns[0]] == \
        [[t.lower() for t in getattr(e, "labels", None) or getattr(e, "types", ())] for e in elements]


@pytest.mark.parametrize(("text", "message"), [
    ("MATCH (a) RETURN a.x + 1e", "'1e' is not a number (in the expression at 1:18)"),
    ("MATCH (a)-[*3..1]->(b) RETURN a", "expected a hop range with min <= max (got 3..1)"),
    ("MATCH (a RETURN a", "expected ')', found 'RETURN' at 1:10"),
    ("MATCH (a) RETURN a.x b", "expected an operator or the end of the expression, found 'b' at 1:22"),
    ("MATCH (a) WHERE a.x = = 1 RETURN a", "cannot read the expression 'a.x = = 1'"),
    ("MATCH (a) RETURN a +", "cannot read the expression 'a +': an operand is missing at 1:18"),
    ("MATCH (a) RETURN /* x", "an unterminated comment (/*...) at 1:18"),
    ("MATCH (a) RETURN `x", "an unterminated name (`...) at 1:18"),
    ("MATCH (a) RETURN 'a\\q'", "bad string escape \\q at 1:18"),
    ("MATCH (a) RETURN 'a\\\nb'", "bad string escape '\\\\\\n' at 1:18"),
])
def test_a_query_that_does_not_read_is_one_line(text, message):
    with pytest.raises(QuerySyntaxError) as info:
        parse(text)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_gqls_spellings_of_a_path_read_as_opencyphers():
    assert parse("MATCH (a)->(b) RETURN a") == parse("MATCH (a)-->(b) RETURN a")
    assert parse("MATCH (a)-[:X]->{1,3}(b) RETURN a") == parse("MATCH (a)-[:X*1..3]->(b) RETURN a")
