"""openCypher expressions read by sqlglot's parser, refused where outside the subset, and turned
into the tuples that graph queries evaluate (``("cmp", "=", ("prop", ("var", "a"), "x"), ("lit", 1))``)."""

from __future__ import annotations

from sqlglot import exp, parser
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import Token, TokenType

from gyreflow.api.graph.query.dialect import GeaFlowDialect
from gyreflow.api.graph.query.syntax import AGGREGATES, FUNCTIONS, QuerySyntaxError


class CypherDialect(GeaFlowDialect):
    """GeaFlow's dialect with openCypher's comments (``//``, not ``--``, which is an edge) and
    ``XOR`` between ``OR`` and ``AND``."""

    class Tokenizer(GeaFlowDialect.Tokenizer):
        COMMENTS = ["//", ("/*", "*/")]

    class Parser(parser.Parser):
        def _parse_disjunction(self):
            this = self._parse_xor()
            while self._match(TokenType.OR):
                this = self.expression(exp.Or(this=this, expression=self._parse_xor()))
            return this

        def _parse_xor(self):
            this = self._parse_conjunction()
            while self._match(TokenType.XOR):
                this = self.expression(exp.Xor(this=this, expression=self._parse_conjunction()))
            return this


_OPERAND_END = {TokenType.VAR, TokenType.IDENTIFIER, TokenType.R_PAREN, TokenType.R_BRACKET,
                TokenType.STRING, TokenType.NUMBER, TokenType.NULL, TokenType.TRUE, TokenType.FALSE}
_COMPARISONS = {exp.EQ: "=", exp.NEQ: "<>", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">="}
_ARITHMETIC = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/", exp.Mod: "%"}
_LOGIC = {exp.And: "and", exp.Or: "or", exp.Xor: "xor"}


def _matching(toks: list, at: int, end: int) -> int:
    """The index of the bracket that closes the one at ``at`` (``end`` if none does)."""
    depth = 0
    for i in range(at, end):
        kind = toks[i].token_type
        if kind in (TokenType.L_PAREN, TokenType.L_BRACKET, TokenType.L_BRACE):
            depth += 1
        elif kind in (TokenType.R_PAREN, TokenType.R_BRACKET, TokenType.R_BRACE):
            depth -= 1
            if depth == 0:
                return i
    return end


def _pattern_follows(toks: list, at: int) -> bool:
    """Whether a relationship starts at ``toks[at]`` (``-->``, ``-[``, ``--(``, ``<-``)."""
    kinds = [t.token_type for t in toks[at:at + 3]] + [None] * 3
    if kinds[0] == TokenType.DASH:
        return kinds[1] in (TokenType.ARROW, TokenType.L_BRACKET) or \
            (kinds[1] == TokenType.DASH and kinds[2] == TokenType.L_PAREN)
    return kinds[0] == TokenType.LT and kinds[1] == TokenType.DASH and \
        kinds[2] in (TokenType.DASH, TokenType.L_BRACKET)


def refusal(toks: list, start: int, end: int) -> tuple[str, Token] | None:
    """The first construct outside the subset in the expression ``toks[start:end]`` and its token."""
    for i in range(start, end):
        token, kind = toks[i], toks[i].token_type
        before = toks[i - 1].token_type if i > start else None
        after = toks[i + 1] if i + 1 < end else None
        word = token.text.upper() if kind == TokenType.VAR and before != TokenType.DOT else ""
        if kind == TokenType.CARET:
            return "^ (exponentiation)", token
        if kind == TokenType.EQ and after is not None and after.token_type == TokenType.TILDE:
            return "=~ (regular expression match)", token
        if word in ("STARTS", "ENDS") and after is not None and after.token_type == TokenType.WITH:
            return f"{word} WITH", token
        if word == "CONTAINS" and before in _OPERAND_END:
            return "CONTAINS", token
        if kind == TokenType.L_BRACE:
            return "a map literal", token
        if kind == TokenType.COLON:
            return "a label predicate in an expression (name the label in the pattern)", token
        if kind == TokenType.L_BRACKET:
            if before in _OPERAND_END:
                return "a list index or slice", token
            close, depth = _matching(toks, i, end), 0
            for j in range(i + 1, close):
                inner = toks[j].token_type
                depth += 1 if inner in (TokenType.L_PAREN, TokenType.L_BRACKET) else \
                    -1 if inner in (TokenType.R_PAREN, TokenType.R_BRACKET) else 0
                if depth == 0 and (inner == TokenType.PIPE or toks[j].text.upper() == "WHERE"):
                    return "a list comprehension", token
        if word and after is not None and after.token_type == TokenType.L_PAREN and \
                word.lower() not in AGGREGATES + FUNCTIONS:
            return f"function {token.text}()", token
        if kind == TokenType.L_PAREN and before not in (TokenType.VAR,):
            if after is not None and after.token_type in (TokenType.R_PAREN, TokenType.COLON):
                return "a pattern expression", token
            if _pattern_follows(toks, _matching(toks, i, end) + 1):
                return "a pattern expression", token
    return None


def parse_expression(reader, start: int, end: int) -> tuple:
    """The expression of ``reader.toks[start:end]`` (a ``CypherReader``) as a tuple."""
    toks = reader.toks
    if start == end:
        raise reader.fail("an expression")
    refused = refusal(toks, start, end)
    if refused is not None:
        raise reader.unsupported(*refused)
    first = toks[start]
    select = Token(TokenType.SELECT, "SELECT", first.line, first.col, first.start, first.start)
    try:
        found = CypherDialect().parser().parse([select, *toks[start:end]], reader.text)
    except (ParseError, TokenError) as exc:
        errors = getattr(exc, "errors", None) or [{}]
        description = errors[0].get("description") or str(exc).splitlines()[0]
        if description.startswith("Required keyword"):  # ``a +``: an operator without operand
            description = "an operand is missing"
        line, column = reader.position(first)
        text = reader.text[first.start:toks[end - 1].end + 1]
        msg = f"cannot read the expression {text[:60]!r}: {description} at {line}:{column}"
        raise QuerySyntaxError(msg) from None
    select = found[0] if found else None
    if not isinstance(select, exp.Select) or len(select.expressions) != 1:
        raise reader.fail("one expression", first)
    if isinstance(select.expressions[0], exp.Alias):  # ``a.x b``: a name after an expression
        alias = select.expressions[0].alias
        after = next((t for t in reversed(toks[start:end]) if t.text == alias), first)
        raise reader.fail("an operator or the end of the expression", after)
    return _convert(select.expressions[0], reader, first)


def _name(identifier) -> str:
    return identifier.this if isinstance(identifier, exp.Identifier) else identifier.name


def _convert(node: exp.Expression, reader, first: Token) -> tuple:
    def convert(inner):
        return _convert(inner, reader, first)

    if isinstance(node, exp.Paren):
        return convert(node.this)
    if isinstance(node, exp.Column):
        parts = [_name(part) for part in node.parts]
        expr = ("param", parts[0][1:]) if parts[0].startswith("$") else ("var", parts[0])
        for part in parts[1:]:
            expr = ("prop", expr, part)
        return expr
    if isinstance(node, exp.Dot):
        return ("prop", convert(node.this), _name(node.expression))
    if isinstance(node, exp.Literal):
        if node.is_string:
            return ("lit", node.this)
        text = node.this
        try:
            return ("lit", int(text) if text.isdigit() else float(text))
        except ValueError:
            line, column = reader.position(first)
            msg = f"{text!r} is not a number (in the expression at {line}:{column})"
            raise QuerySyntaxError(msg) from None
    if isinstance(node, exp.Boolean):
        return ("lit", node.this)
    if isinstance(node, exp.Null):
        return ("lit", None)
    if isinstance(node, exp.Neg):
        operand = convert(node.this)
        if operand[0] == "lit" and isinstance(operand[1], (int, float)) and \
                not isinstance(operand[1], bool):
            return ("lit", -operand[1])
        return ("neg", operand)
    if isinstance(node, exp.Array):
        return _list([convert(item) for item in node.expressions])
    if type(node) in _COMPARISONS:
        return ("cmp", _COMPARISONS[type(node)], convert(node.this), convert(node.expression))
    if type(node) in _ARITHMETIC:
        return ("bin", _ARITHMETIC[type(node)], convert(node.this), convert(node.expression))
    if type(node) in _LOGIC:
        return (_LOGIC[type(node)], convert(node.this), convert(node.expression))
    if isinstance(node, exp.Not):
        if isinstance(node.this, exp.Is) and isinstance(node.this.expression, exp.Null):
            return ("isnull", convert(node.this.this), True)
        return ("not", convert(node.this))
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        return ("isnull", convert(node.this), False)
    if isinstance(node, exp.In) and not node.args.get("query"):
        field = node.args.get("field")
        items = convert(field) if field is not None else \
            _list([convert(item) for item in node.expressions])
        return ("in", convert(node.this), items)
    if isinstance(node, exp.Func):
        return _call(node, convert, reader, first)
    raise reader.fail(f"an expression of the subset, not {node.sql(dialect=CypherDialect)!r}", first)


def _list(items: list) -> tuple:
    if all(item[0] == "lit" for item in items):
        return ("lit", [item[1] for item in items])
    return ("list", tuple(items))


def _call(node: exp.Func, convert, reader, first: Token) -> tuple:
    if isinstance(node, exp.Anonymous):
        name, args = node.name.lower(), list(node.expressions)
    else:
        name = type(node).__name__.lower()
        args = [node.this, *node.expressions] if node.this is not None else list(node.expressions)
    if name not in AGGREGATES + FUNCTIONS:
        raise reader.unsupported(f"function {name}()", first)
    distinct = bool(args) and isinstance(args[0], exp.Distinct)
    if distinct:
        args = list(args[0].expressions) + args[1:]
    if name == "count" and len(args) == 1 and isinstance(args[0], exp.Star):
        return ("agg", "count", None, False)
    if not args or any(isinstance(arg, exp.Star) for arg in args):
        raise reader.fail(f"an argument of {name}()", first)
    converted = [convert(arg) for arg in args]
    if name in AGGREGATES:
        return ("agg", name, converted[0], distinct)
    if distinct:
        raise reader.fail(f"no DISTINCT in {name}()", first)
    return ("fn", name, tuple(converted))
