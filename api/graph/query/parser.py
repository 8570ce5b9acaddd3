"""The lexer and recursive-descent parser of graph queries (openCypher MATCH ... RETURN subset)."""

from __future__ import annotations

import re

import attrs

MAX_HOPS = 10  # upper bound of an unbounded variable-length relationship (``*``, ``*2..``)

UNSUPPORTED = ("OPTIONAL", "CREATE", "MERGE", "WITH", "UNION", "CALL", "DELETE", "DETACH", "SET",
               "REMOVE", "UNWIND", "FOREACH", "LOAD", "CASE", "EXISTS", "SHORTESTPATH",
               "ALLSHORTESTPATHS")
KEYWORDS = {"MATCH", "WHERE", "RETURN", "DISTINCT", "ORDER", "BY", "ASC", "ASCENDING", "DESC",
            "DESCENDING", "SKIP", "LIMIT", "AND", "OR", "NOT", "XOR", "IS", "NULL", "TRUE", "FALSE",
            "AS", "IN", *UNSUPPORTED}
AGGREGATES = ("count", "sum", "min", "max", "avg", "collect")


class QuerySyntaxError(ValueError):
    """A query that does not parse; the message is one line naming the line:column."""


class UnsupportedQueryError(QuerySyntaxError):
    """A query that uses a construct outside the supported subset (OPTIONAL MATCH, CREATE, ...)."""


_TOKEN = re.compile(r"""
    (?P<ws>\s+|//[^\n]*|/\*.*?\*/)
  | (?P<float>\d+\.\d+(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)
  | (?P<hex>0x[0-9A-Fa-f]+)
  | (?P<octal>0o[0-7]+)
  | (?P<int>\d+)
  | (?P<string>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
  | (?P<param>\$[A-Za-z_][A-Za-z_0-9]*)
  | (?P<name>[A-Za-z_][A-Za-z_0-9]*|`[^`]+`)
  | (?P<op><>|!=|<=|>=|=~|->|<-|\.\.|[-=<>()\[\]{}:,.*+/%|^])
""", re.VERBOSE | re.DOTALL)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "\\": "\\", "'": "'", '"': '"'}


@attrs.frozen
class Token:
    kind: str  # int float string param name keyword op end
    text: str
    value: object
    line: int
    column: int


def _unescape(body: str, line: int, column: int) -> str:
    out, i = [], 0
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        code = body[i + 1]
        if code in _ESCAPES:
            out.append(_ESCAPES[code])
            i += 2
        elif code == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", body[i + 2:i + 6]):
            out.append(chr(int(body[i + 2:i + 6], 16)))
            i += 6
        else:
            msg = f"bad string escape \\{code} at {line}:{column}"
            raise QuerySyntaxError(msg)
    return "".join(out)


def tokenize(text: str) -> list[Token]:
    """The tokens of ``text``, comments and white space dropped, ending with an ``end`` token."""
    tokens, pos, line, line_start = [], 0, 1, 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        column = pos - line_start + 1
        if match is None:
            msg = f"unexpected character {text[pos]!r} at {line}:{column}"
            raise QuerySyntaxError(msg)
        kind, raw = match.lastgroup, match.group()
        if kind == "int":
            tokens.append(Token("int", raw, int(raw), line, column))
        elif kind in ("hex", "octal"):
            tokens.append(Token("int", raw, int(raw[2:], 16 if kind == "hex" else 8), line, column))
        elif kind == "float":
            tokens.append(Token("float", raw, float(raw), line, column))
        elif kind == "string":
            tokens.append(Token("string", raw, _unescape(raw[1:-1], line, column), line, column))
        elif kind == "param":
            tokens.append(Token("param", raw, raw[1:], line, column))
        elif kind == "name":
            if raw.startswith("`"):
                tokens.append(Token("name", raw, raw[1:-1], line, column))
            elif raw.upper() in KEYWORDS:
                tokens.append(Token("keyword", raw, raw.upper(), line, column))
            else:
                tokens.append(Token("name", raw, raw, line, column))
        elif kind == "op":
            tokens.append(Token("op", raw, raw, line, column))
        newlines = raw.count("\n")
        if newlines:
            line += newlines
            line_start = pos + raw.rindex("\n") + 1
        pos = match.end()
    tokens.append(Token("end", "", None, line, pos - line_start + 1))
    return tokens


@attrs.frozen
class NodePattern:
    variable: str | None
    labels: tuple
    properties: tuple  # ((key, expr), ...)


@attrs.frozen
class RelPattern:
    variable: str | None
    types: tuple
    properties: tuple
    direction: str  # "out", "in", "both"
    min_hops: int = 1
    max_hops: int = 1
    variable_length: bool = False


@attrs.frozen
class PathPattern:
    nodes: tuple  # NodePattern, one more than rels
    rels: tuple


@attrs.frozen
class ReturnItem:
    expr: tuple
    alias: str


@attrs.frozen
class QueryAst:
    patterns: tuple
    where: tuple | None
    items: tuple
    distinct: bool
    order: tuple  # ((expr, descending), ...)
    skip: tuple | None
    limit: tuple | None


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = tokenize(text)
        self.pos = 0

    @property
    def token(self) -> Token:
        return self.tokens[self.pos]

    def fail(self, what: str, token: Token | None = None):
        token = token or self.token
        found = "end of query" if token.kind == "end" else repr(token.text)
        msg = f"expected {what}, found {found} at {token.line}:{token.column}"
        raise QuerySyntaxError(msg)

    def unsupported(self, construct: str, token: Token | None = None):
        """Refuse ``construct`` (valid openCypher outside the supported subset) at ``token``."""
        token = token or self.token
        msg = f"unsupported: {construct} at {token.line}:{token.column}"
        raise UnsupportedQueryError(msg)

    def peek(self, ahead: int = 1) -> Token:
        return self.tokens[min(self.pos + ahead, len(self.tokens) - 1)]

    def refuse_unsupported(self) -> None:
        token = self.token
        if token.kind == "keyword" and token.value in UNSUPPORTED:
            construct = token.value
            if construct == "OPTIONAL":
                construct = "OPTIONAL MATCH"
            msg = f"unsupported: {construct} at {token.line}:{token.column}"
            raise UnsupportedQueryError(msg)
        if token.kind == "name" and token.value.upper() in ("SHORTESTPATH", "ALLSHORTESTPATHS"):
            msg = f"unsupported: {token.value} at {token.line}:{token.column}"
            raise UnsupportedQueryError(msg)
        if token.kind == "op" and token.text == "{" and self.pos and \
                self.tokens[self.pos - 1].kind == "name" and \
                self.tokens[self.pos - 1].value.upper() == "EXISTS":
            msg = f"unsupported: subquery at {token.line}:{token.column}"
            raise UnsupportedQueryError(msg)

    def at(self, kind: str, value=None) -> bool:
        self.refuse_unsupported()
        token = self.token
        return token.kind == kind and (value is None or token.value == value)

    def accept(self, kind: str, value=None) -> Token | None:
        if self.at(kind, value):
            self.pos += 1
            return self.tokens[self.pos - 1]
        return None

    def expect(self, kind: str, value=None, what: str | None = None) -> Token:
        token = self.accept(kind, value)
        if token is None:
            self.fail(what or repr(value) if value else kind)
        return token

    # query
    def query(self) -> QueryAst:
        self.expect("keyword", "MATCH", "MATCH")
        patterns = [self.path()]
        while self.accept("op", ","):
            patterns.append(self.path())
        where = self.expression() if self.accept("keyword", "WHERE") else None
        if self.at("keyword", "MATCH"):
            token = self.token
            msg = f"unsupported: a second MATCH clause at {token.line}:{token.column}"
            raise UnsupportedQueryError(msg)
        self.expect("keyword", "RETURN", "WHERE or RETURN")
        distinct = self.accept("keyword", "DISTINCT") is not None
        items = [self.return_item(0)]
        while self.accept("op", ","):
            items.append(self.return_item(len(items)))
        order = []
        if self.accept("keyword", "ORDER"):
            self.expect("keyword", "BY", "BY")
            while True:
                expr = self.expression()
                descending = False
                if self.accept("keyword", "DESC") or self.accept("keyword", "DESCENDING"):
                    descending = True
                elif not self.accept("keyword", "ASC"):
                    self.accept("keyword", "ASCENDING")
                order.append((expr, descending))
                if not self.accept("op", ","):
                    break
        skip = self.expression() if self.accept("keyword", "SKIP") else None
        limit = self.expression() if self.accept("keyword", "LIMIT") else None
        if not self.at("end"):
            self.fail("end of query")
        return QueryAst(tuple(patterns), where, tuple(items), distinct, tuple(order), skip, limit)

    def return_item(self, index: int) -> ReturnItem:
        start = self.token
        if start.kind == "op" and start.text == "*":
            self.unsupported("RETURN *")
        expr = self.expression()
        if self.accept("keyword", "AS"):
            alias = self.expect("name", what="an alias").value
        else:
            end = self.tokens[self.pos - 1]
            alias = self.text_between(start, end) or f"_{index}"
        return ReturnItem(expr, alias)

    def text_between(self, first: Token, last: Token) -> str:
        lines = self.text.split("\n")
        if first.line != last.line:
            return ""
        return lines[first.line - 1][first.column - 1:last.column - 1 + len(last.text)]

    # patterns
    def path(self) -> PathPattern:
        if self.token.kind == "name" and self.peek().kind == "op" and self.peek().text == "=":
            function = self.peek(2)
            if function.kind == "keyword" and function.value in UNSUPPORTED:  # p = shortestPath(
                self.unsupported(function.text, function)
            self.unsupported(f"named path ({self.token.text} = ...)")
        nodes, rels = [self.node()], []
        while self.at("op", "-") or self.at("op", "<-"):
            rels.append(self.relationship())
            nodes.append(self.node())
        return PathPattern(tuple(nodes), tuple(rels))

    def node(self) -> NodePattern:
        self.expect("op", "(", "'(' of a node pattern")
        variable = self.accept("name")
        labels = []
        while self.accept("op", ":"):
            labels.append(self.expect("name", what="a label").value)
        properties = self.properties()
        self.expect("op", ")", "')'")
        return NodePattern(variable and variable.value, tuple(labels), properties)

    def properties(self) -> tuple:
        if not self.accept("op", "{"):
            return ()
        pairs = []
        if not self.at("op", "}"):
            while True:
                key = self.expect("name", what="a property name").value
                self.expect("op", ":", "':'")
                pairs.append((key, self.expression()))
                if not self.accept("op", ","):
                    break
        self.expect("op", "}", "'}'")
        return tuple(pairs)

    def relationship(self) -> RelPattern:
        left_arrow = self.accept("op", "<-") is not None
        if not left_arrow:
            self.expect("op", "-")
        variable, types, properties = None, [], ()
        min_hops = max_hops = 1
        variable_length = False
        if self.accept("op", "["):
            token = self.accept("name")
            variable = token and token.value
            if self.accept("op", ":"):
                types.append(self.expect("name", what="a relationship type").value)
                while self.accept("op", "|"):
                    self.accept("op", ":")
                    types.append(self.expect("name", what="a relationship type").value)
            if self.accept("op", "*"):
                variable_length = True
                min_hops, max_hops = self.hops()
            properties = self.properties()
            self.expect("op", "]", "']'")
        right_arrow = self.accept("op", "->") is not None
        if not right_arrow:
            self.expect("op", "-", "'-' or '->'")
        if left_arrow and right_arrow:
            self.fail("one arrow direction")
        direction = "out" if right_arrow else "in" if left_arrow else "both"
        return RelPattern(variable, tuple(types), properties, direction, min_hops, max_hops,
                          variable_length)

    def hops(self) -> tuple[int, int]:
        low = self.accept("int")
        if self.accept("op", ".."):
            high = self.accept("int")
            low_value = low.value if low else 1
            high_value = high.value if high else max(MAX_HOPS, low_value)
        elif low:
            low_value = high_value = low.value
        else:
            low_value, high_value = 1, MAX_HOPS
        if high_value < low_value:
            self.fail(f"a hop range with min <= max (got {low_value}..{high_value})")
        if high_value > MAX_HOPS:
            msg = f"a variable-length relationship goes at most {MAX_HOPS} hops, not {high_value}"
            raise QuerySyntaxError(msg)
        return low_value, high_value

    # expressions: or > xor > and > not > comparison > additive > multiplicative > unary > postfix
    def expression(self) -> tuple:
        left = self.xor_expr()
        while self.accept("keyword", "OR"):
            left = ("or", left, self.xor_expr())
        return left

    def xor_expr(self) -> tuple:
        left = self.and_expr()
        while self.accept("keyword", "XOR"):
            left = ("xor", left, self.and_expr())
        return left

    def and_expr(self) -> tuple:
        left = self.not_expr()
        while self.accept("keyword", "AND"):
            left = ("and", left, self.not_expr())
        return left

    def not_expr(self) -> tuple:
        if self.accept("keyword", "NOT"):
            return ("not", self.not_expr())
        return self.comparison()

    def comparison(self) -> tuple:
        left = self.additive()
        while True:
            token = self.token
            if token.kind == "op" and token.text in ("=", "<>", "!=", "<", "<=", ">", ">="):
                self.pos += 1
                op = "<>" if token.text == "!=" else token.text
                left = ("cmp", op, left, self.additive())
            elif self.accept("keyword", "IN"):
                left = ("in", left, self.additive())
            elif self.accept("keyword", "IS"):
                negated = self.accept("keyword", "NOT") is not None
                self.expect("keyword", "NULL", "NULL")
                left = ("isnull", left, negated)
            elif token.kind == "op" and token.text == "=~":
                self.unsupported("=~ (regular expression match)")
            elif token.kind == "name" and token.value.upper() in ("STARTS", "ENDS", "CONTAINS"):
                word = token.value.upper()
                self.unsupported(word if word == "CONTAINS" else f"{word} WITH")
            else:
                return left

    def additive(self) -> tuple:
        left = self.multiplicative()
        while self.token.kind == "op" and self.token.text in ("+", "-"):
            op = self.token.text
            self.pos += 1
            left = ("bin", op, left, self.multiplicative())
        return left

    def multiplicative(self) -> tuple:
        left = self.unary()
        while self.token.kind == "op" and self.token.text in ("*", "/", "%"):
            op = self.token.text
            self.pos += 1
            left = ("bin", op, left, self.unary())
        return left

    def unary(self) -> tuple:
        if self.accept("op", "-"):
            operand = self.unary()
            if operand[0] == "lit" and isinstance(operand[1], (int, float)) and \
                    not isinstance(operand[1], bool):
                return ("lit", -operand[1])
            return ("neg", operand)
        return self.postfix()

    def postfix(self) -> tuple:
        expr = self.primary()
        while self.accept("op", "."):
            expr = ("prop", expr, self.expect("name", what="a property name").value)
        token = self.token
        if token.kind == "op" and token.text in ("^", "[", ":"):
            self.unsupported({"^": "^ (exponentiation)", "[": "a list index or slice",
                              ":": "a label predicate in an expression (name the label in the "
                                   "pattern)"}[token.text])
        return expr

    def primary(self) -> tuple:
        token = self.token
        if token.kind in ("int", "float", "string"):
            self.pos += 1
            return ("lit", token.value)
        if self.accept("keyword", "TRUE"):
            return ("lit", True)
        if self.accept("keyword", "FALSE"):
            return ("lit", False)
        if self.accept("keyword", "NULL"):
            return ("lit", None)
        if token.kind == "param":
            self.pos += 1
            return ("param", token.value)
        if self.accept("op", "("):
            if self.at("op", ")") or self.at("op", ":"):  # ``()``, ``(:Label)``
                self.unsupported("a pattern expression", token)
            expr = self.expression()
            self.expect("op", ")", "')'")
            if self._pattern_follows():
                self.unsupported("a pattern expression", token)
            return expr
        if token.kind == "op" and token.text == "{":
            self.unsupported("a map literal")
        if self.accept("op", "["):
            items = []
            if not self.at("op", "]"):
                items.append(self.expression())
                if self.at("op", "|") or self.at("keyword", "WHERE"):
                    self.unsupported("a list comprehension", token)
                while self.accept("op", ","):
                    items.append(self.expression())
            self.expect("op", "]", "']'")
            if all(item[0] == "lit" for item in items):
                return ("lit", [item[1] for item in items])
            return ("list", tuple(items))
        if token.kind == "name":
            self.pos += 1
            if self.accept("op", "("):
                return self.call(token)
            return ("var", token.value)
        self.fail("an expression")
        return None

    def _pattern_follows(self) -> bool:
        """Whether a relationship follows (``)-->``, ``)-[``, ``)<--``, ``)--(``): a closed
        parenthesis then starts a pattern, not an expression."""
        first, second = self.token, self.peek()
        if first.kind != "op" or second.kind != "op":
            return False
        if first.text == "-":
            return second.text in ("->", "[") or (second.text == "-" and self.peek(2).text == "(")
        return first.text == "<-" and second.text in ("-", "[")

    def call(self, name: Token) -> tuple:
        function = name.value.lower()
        if function not in AGGREGATES and function not in ("id", "labels", "type", "size",
                                                           "tolower", "toupper", "abs"):
            msg = f"unsupported: function {name.value}() at {name.line}:{name.column}"
            raise UnsupportedQueryError(msg)
        if function == "count" and self.accept("op", "*"):
            self.expect("op", ")", "')'")
            return ("agg", "count", None, False)
        distinct = self.accept("keyword", "DISTINCT") is not None
        args = [self.expression()]
        while self.accept("op", ","):
            args.append(self.expression())
        self.expect("op", ")", "')'")
        if function in AGGREGATES:
            return ("agg", function, args[0], distinct)
        return ("fn", function, tuple(args))


def parse(text: str) -> QueryAst:
    """The syntax tree of ``text``; a ``QuerySyntaxError`` (one line with line:column) otherwise."""
    if not isinstance(text, str):
        msg = f"a query is a string, not {type(text).__name__}"
        raise QuerySyntaxError(msg)
    return _Parser(text).query()
