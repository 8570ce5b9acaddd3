"""openCypher's MATCH ... RETURN read with the DSL's reader: sqlglot's tokens, the paths of GQL's
MATCH (``gql_paths``) and sqlglot's expressions, into the syntax tree graph queries compile."""

from __future__ import annotations

import re

import attrs
from sqlglot.errors import TokenError
from sqlglot.tokens import Token, TokenType

from gyreflow.api.graph.query.cypher_expressions import CypherDialect, parse_expression
from gyreflow.api.graph.query.gql_paths import Element, PathReader
from gyreflow.api.graph.query.syntax import (
    MAX_HOPS,
    UNSUPPORTED,
    NodePattern,
    PathPattern,
    QueryAst,
    QuerySyntaxError,
    RelPattern,
    ReturnItem,
    UnsupportedQueryError,
)

_TOKENIZER = CypherDialect().tokenizer_class()
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "\\": "\\", "'": "'", '"': '"'}
_RADIX = {"x": (re.compile(r"x[0-9A-Fa-f]+"), 16), "o": (re.compile(r"o[0-7]+"), 8)}
_CLAUSE_END = {"return", "match", "skip"}


@attrs.frozen
class Position:
    """A token's text and where it starts (1-based line and column)."""

    text: str
    line: int
    column: int


class CypherReader(PathReader):
    """The tokens of one query and the errors about them (``line:column`` of the token)."""

    max_hops = MAX_HOPS

    def fail(self, what: str, token=None) -> Exception:
        token = token if token is not None else self.peek()
        found = "end of query" if token is None else repr(self.text[token.start:token.end + 1])
        line, column = self.position(token)
        return QuerySyntaxError(f"expected {what}, found {found} at {line}:{column}")

    def unsupported(self, construct: str, token=None) -> Exception:
        """The refusal of ``construct`` (valid openCypher outside the supported subset)."""
        line, column = self.position(token if token is not None else self.peek())
        return UnsupportedQueryError(f"unsupported: {construct} at {line}:{column}")

    def clause(self, stops: set, words: set = frozenset()) -> tuple[int, int]:
        """The token range up to a token of a type in ``stops`` or a word in ``words`` at depth 0."""
        depth, start = 0, self.at
        while self.at < len(self.toks):
            token = self.toks[self.at]
            kind = token.token_type
            if depth == 0 and (kind in stops or token.text.lower() in words or self._order_by(0)):
                break
            if kind in (TokenType.L_PAREN, TokenType.L_BRACKET, TokenType.L_BRACE):
                depth += 1
            elif kind in (TokenType.R_PAREN, TokenType.R_BRACKET, TokenType.R_BRACE):
                if depth == 0:
                    break
                depth -= 1
            self.at += 1
        return start, self.at

    def _order_by(self, ahead: int) -> bool:
        if self.kind(ahead) == TokenType.ORDER_BY:
            return True
        return self.word(ahead) == "order" and self.word(ahead + 1) == "by"

    def expression(self, stops: set, words: set = frozenset()) -> tuple:
        return parse_expression(self, *self.clause(stops, words))


def _unescape(reader: CypherReader, token) -> str:
    body, out, i = reader.text[token.start + 1:token.end], [], 0
    while i < len(body):
        if body[i] != "\\":
            out.append(body[i])
            i += 1
            continue
        code = body[i + 1] if i + 1 < len(body) else ""
        if code in _ESCAPES and code:
            out.append(_ESCAPES[code])
            i += 2
        elif code == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", body[i + 2:i + 6]):
            out.append(chr(int(body[i + 2:i + 6], 16)))
            i += 6
        else:
            line, column = reader.position(token)
            shown = f"\\{code}" if code.isprintable() else repr(f"\\{code}")
            msg = f"bad string escape {shown} at {line}:{column}"
            raise QuerySyntaxError(msg)
    return "".join(out)


def _tokens(text: str) -> CypherReader:
    """A reader of ``text``'s tokens: strings unescaped as openCypher does, ``0x1F`` and ``0o17``
    as numbers."""
    reader = CypherReader(text, [])
    try:
        raw = _TOKENIZER.tokenize(text)
    except TokenError:
        raise QuerySyntaxError(_unread(reader)) from None
    toks: list = []
    for token in raw:
        if token.token_type == TokenType.STRING:
            token = Token(TokenType.STRING, _unescape(reader, token), token.line, token.col,
                          token.start, token.end)
        elif token.token_type == TokenType.VAR and toks and toks[-1].text == "0" and \
                toks[-1].token_type == TokenType.NUMBER and toks[-1].end + 1 == token.start and \
                token.text[:1] in _RADIX and _RADIX[token.text[:1]][0].fullmatch(token.text):
            digits = int(token.text[1:], _RADIX[token.text[:1]][1])
            token = Token(TokenType.NUMBER, str(digits), token.line, token.col, toks[-1].start,
                          token.end)
            toks.pop()
        toks.append(token)
    reader.toks = toks
    return reader


def _unread(reader: CypherReader) -> str:
    """What the tokenizer could not read: an unterminated string, name or comment and where it
    starts."""
    text, at, opened = reader.text, 0, None
    while at < len(text):
        char = text[at]
        if opened is None:
            if char in "'\"`":
                opened = (char, at)
            elif text.startswith("//", at):
                end = text.find("\n", at)
                at = len(text) if end < 0 else end
            elif text.startswith("/*", at):
                end = text.find("*/", at + 2)
                if end < 0:
                    opened = ("/*", at)
                    break
                at = end + 1
        elif char == "\\" and opened[0] != "`":
            at += 1
        elif char == opened[0]:
            opened = None
        at += 1
    if opened is None:
        return "cannot read the query"
    start = opened[1]
    line, column = text.count("\n", 0, start) + 1, start - text.rfind("\n", 0, start)
    what = {"/*": "comment", "`": "name"}.get(opened[0], "string")
    return f"an unterminated {what} ({opened[0]}...) at {line}:{column}"


def tokenize(text: str) -> list[Position]:
    """The tokens of ``text`` (comments and white space dropped) and where each starts.

    >>> [(t.text, t.line, t.column) for t in tokenize("MATCH\\n  (a)")]
    [('MATCH', 1, 1), ('(', 2, 3), ('a', 2, 4), (')', 2, 5)]
    """
    reader = _tokens(text)
    return [Position(reader.text[t.start:t.end + 1], *reader.position(t)) for t in reader.toks]


def _refuse_keywords(reader: CypherReader) -> None:
    """The first clause or keyword outside the subset (CREATE, OPTIONAL MATCH, UNION, ...)."""
    for i, token in enumerate(reader.toks):
        if token.token_type in (TokenType.STRING, TokenType.IDENTIFIER):
            continue
        word = token.text.upper()
        before = reader.toks[i - 1] if i else None
        if word not in UNSUPPORTED or (before is not None and before.token_type == TokenType.DOT):
            continue
        if word == "WITH" and before is not None and before.text.upper() in ("STARTS", "ENDS"):
            continue  # STARTS WITH: refused as an expression
        construct = {"OPTIONAL": "OPTIONAL MATCH", "SHORTESTPATH": token.text,
                     "ALLSHORTESTPATHS": token.text}.get(word, word)
        raise reader.unsupported(construct, token)


def _path(reader: CypherReader, conditions: list) -> PathPattern:
    first = reader.peek()
    if reader.is_name() and reader.kind(1) == TokenType.EQ:
        raise reader.unsupported(f"named path ({first.text} = ...)", first)
    elements = reader.path()
    nodes, rels = [], []
    for element in elements:
        properties = tuple((key.text, parse_expression(reader, *values))
                           for key, values in element.properties)
        if element.where is not None:
            conditions.append(parse_expression(reader, *element.where))
        var = element.var.text if element.var is not None else None
        labels = tuple(token.text for token in element.labels)
        if element.kind == "node":
            if element.any_label:
                raise reader.fail("a node's labels joined by ':' (every one of them)", element.token)
            nodes.append(NodePattern(var, labels, properties))
            continue
        rels.append(_relationship(reader, element, var, labels, properties))
    return PathPattern(tuple(nodes), tuple(rels))


def _relationship(reader: CypherReader, element: Element, var, types, properties) -> RelPattern:
    if not element.closed:
        raise reader.fail("'-' or '->'")
    if len(types) > 1 and not element.any_label:
        raise reader.fail("relationship types joined by '|' (any one of them)", element.token)
    low, high = element.hops or (1, 1)
    if high < low:
        raise reader.fail(f"a hop range with min <= max (got {low}..{high})", element.hops_token)
    if high > MAX_HOPS:
        line, column = reader.position(element.hops_token)
        msg = (f"a variable-length relationship goes at most {MAX_HOPS} hops, not {high} "
               f"at {line}:{column}")
        raise QuerySyntaxError(msg)
    return RelPattern(var, types, properties, element.direction, low, high,
                      element.hops is not None)


def parse(text: str) -> QueryAst:
    """The syntax tree of ``text``; a ``QuerySyntaxError`` (one line with line:column) otherwise.

    >>> ast = parse("MATCH (a:Person)-[:KNOWS*1..2]->(b) WHERE a.age > 3 RETURN b.name AS n")
    >>> ast.patterns[0].rels[0].max_hops, ast.where
    (2, ('cmp', '>', ('prop', ('var', 'a'), 'age'), ('lit', 3)))
    >>> ast.items[0]
    ReturnItem(expr=('prop', ('var', 'b'), 'name'), alias='n')
    """
    if not isinstance(text, str):
        msg = f"a query is a string, not {type(text).__name__}"
        raise QuerySyntaxError(msg)
    reader = _tokens(text)
    _refuse_keywords(reader)
    reader.expect("match", "MATCH")
    conditions: list = []
    patterns = [_path(reader, conditions)]
    while reader.kind() == TokenType.COMMA:
        reader.take()
        patterns.append(_path(reader, conditions))
    if reader.word() == "where":
        reader.take()
        conditions.append(reader.expression(set(), _CLAUSE_END))
    if reader.word() == "match":
        raise reader.unsupported("a second MATCH clause")
    reader.expect("return", "WHERE or RETURN")
    distinct = reader.kind() == TokenType.DISTINCT
    if distinct:
        reader.take()
    items = [_return_item(reader, 0)]
    while reader.kind() == TokenType.COMMA:
        reader.take()
        items.append(_return_item(reader, len(items)))
    order = []
    if reader._order_by(0):
        reader.at += 1 if reader.kind() == TokenType.ORDER_BY else 2
        while True:
            expr = reader.expression({TokenType.COMMA, TokenType.ASC, TokenType.DESC, TokenType.LIMIT},
                                     _CLAUSE_END | {"ascending", "descending"})
            descending = reader.word() in ("desc", "descending")
            if reader.word() in ("asc", "ascending", "desc", "descending"):
                reader.take()
            order.append((expr, descending))
            if reader.kind() != TokenType.COMMA:
                break
            reader.take()
    skip = limit = None
    if reader.word() == "skip":
        reader.take()
        skip = reader.expression({TokenType.LIMIT}, _CLAUSE_END)
    if reader.kind() == TokenType.LIMIT:
        reader.take()
        limit = reader.expression({TokenType.LIMIT}, _CLAUSE_END)
    if reader.peek() is not None:
        raise reader.fail("end of query")
    where = None
    for condition in conditions:
        where = condition if where is None else ("and", where, condition)
    return QueryAst(tuple(patterns), where, tuple(items), distinct, tuple(order), skip, limit)


def _return_item(reader: CypherReader, index: int) -> ReturnItem:
    first = reader.peek()
    if first is not None and first.token_type == TokenType.STAR:
        raise reader.unsupported("RETURN *", first)
    start, end = reader.clause({TokenType.COMMA, TokenType.ALIAS, TokenType.LIMIT}, _CLAUSE_END)
    expr = parse_expression(reader, start, end)
    if reader.kind() == TokenType.ALIAS:
        reader.take()
        if not reader.is_name():
            raise reader.fail("an alias")
        return ReturnItem(expr, reader.take().text)
    last = reader.toks[end - 1]
    text = reader.text[first.start:last.end + 1]
    return ReturnItem(expr, text if "\n" not in text else f"_{index}")


__all__ = ["CypherReader", "QuerySyntaxError", "UnsupportedQueryError", "parse", "tokenize"]
