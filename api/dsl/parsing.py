"""Reading a Hybrid-DSL script: statements split and classified, DDL read, queries parsed by sqlglot."""

from __future__ import annotations

import re

import attrs
import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import TokenType

from gyreflow.api.dsl.errors import DslError
from gyreflow.api.dsl.window_text import readable, watermark_options
from gyreflow.api.dsl.windowing import group_windows
from gyreflow.api.graph.query.dialect import GeaFlowDialect


@attrs.define
class Statement:
    """One statement of a script: its kind, its text and where it starts (1-based line and column)."""

    number: int
    kind: str
    text: str
    line: int
    column: int
    name: str | None = None
    columns: list[tuple[str, str]] = attrs.Factory(list)
    options: dict[str, str] = attrs.Factory(dict)
    query: exp.Expression | None = None
    target_columns: list[str] | None = None
    value: str | None = None
    body: str | None = None  # the query's text, when it holds GQL
    body_line: int = 0
    query_at: tuple[int, int] = (0, 0)  # (line, column) in the script where the query's text starts

    def error(self, message: str, hint: str | None = None, *, line: int | None = None,
              column: int | None = None) -> DslError:
        return DslError(message, statement=self.number, line=line or self.line,
                        column=column or self.column, hint=hint)


_TOKENIZER = GeaFlowDialect().tokenizer_class()


def _tokens(text: str, line: int = 1, column: int = 1) -> list:
    """The tokens of ``text``, which starts at ``line`` and ``column`` of the script; what the
    tokenizer cannot read (a string left open) is reported where it starts, in plain words."""
    try:
        return _TOKENIZER.tokenize(text)
    except TokenError as exc:
        offset, what = _unreadable(text, exc)
        at_line = line + text.count("\n", 0, offset)
        at_column = offset - text.rfind("\n", 0, offset)
        if at_line == line:
            at_column += column - 1
        raise DslError(what, line=at_line, column=at_column) from None


_OPEN = {"'": "a string is not closed (a ' is missing)", '"': 'a quoted name is not closed (a " is missing)',
         "`": "a quoted name is not closed (a ` is missing)"}


def _unreadable(text: str, exc: TokenError) -> tuple[int, str]:
    """``(offset, what)`` of what the tokenizer could not read in ``text`` (sqlglot names an
    unclosed quote and where it starts in the error it chains; an unclosed comment it does not)."""
    missing = re.fullmatch(r"Missing (.+) from \d+:(\d+)", str(exc.__cause__ or ""))
    if missing is not None:
        delimiter, offset = missing.group(1), min(int(missing.group(2)), max(len(text) - 1, 0))
        if text[offset:offset + len(delimiter)] != delimiter:  # sqlglot named where it stopped
            offset = max(text.rfind(delimiter, 0, offset), 0)
        return offset, _OPEN.get(delimiter, f"{delimiter} is missing")
    comment = text.rfind("/*")
    if comment >= 0 and text.find("*/", comment + 2) < 0:
        return comment, "a comment is not closed (*/ is missing)"
    offset = (exc.start or 0) + 50 if (exc.end or 0) < len(text) - 1 else (exc.end or 0)
    return min(offset, max(len(text) - 1, 0)), "cannot read the script here"


def split_statements(text: str) -> list[tuple[str, int, int]]:
    """``(text, line, column)`` of each statement, split on ``;`` outside strings and comments."""
    found, start, previous = [], None, None
    for token in _tokens(text):
        if token.token_type == TokenType.SEMICOLON:
            if start is not None:
                found.append((text[start.start:previous.end + 1], start.line, start.col))
            start = None
            continue
        if start is None:
            start = token
        previous = token
    if start is not None:
        found.append((text[start.start:previous.end + 1], start.line, start.col))
    # sqlglot's column is the token's last character; the statement's first word starts at col - len + 1
    return [(t, line, max(1, col - len(t.split(None, 1)[0]) + 1) if t.split() else col)
            for t, line, col in found]


def _words(text: str, count: int) -> list[str]:
    return [w.lower() for w in re.findall(r"[A-Za-z_][A-Za-z_0-9]*", text)[:count]]


def _group(toks: list, at: int) -> tuple[list, int]:
    """The tokens inside the parenthesis at ``toks[at]`` and the index after its close."""
    depth, inner = 0, []
    for i in range(at, len(toks)):
        kind = toks[i].token_type
        if kind == TokenType.L_PAREN:
            depth += 1
            if depth == 1:
                continue
        elif kind == TokenType.R_PAREN:
            depth -= 1
            if depth == 0:
                return inner, i + 1
        inner.append(toks[i])
    raise DslError("a parenthesis is not closed", line=toks[at].line)


def _split_commas(toks: list) -> list[list]:
    parts, depth, current = [], 0, []
    for token in toks:
        if token.token_type == TokenType.L_PAREN:
            depth += 1
        elif token.token_type == TokenType.R_PAREN:
            depth -= 1
        if token.token_type == TokenType.COMMA and depth == 0:
            parts.append(current)
            current = []
        else:
            current.append(token)
    if current:
        parts.append(current)
    return parts


def _token_text(token) -> str:
    return token.text


def _options(toks: list) -> dict[str, str]:
    options = {}
    for part in _split_commas(toks):
        texts = [_token_text(t) for t in part]
        if "=" not in texts:
            continue
        at = texts.index("=")
        key = "".join(texts[:at]).strip()
        options[key] = "".join(texts[at + 1:])
    return options


def _name_and_rest(toks: list, skip_words: set[str]) -> tuple[str, int]:
    at = 0
    while at < len(toks) and toks[at].text.lower() in skip_words:
        at += 1
    name = toks[at].text
    at += 1
    while at + 1 < len(toks) and toks[at].token_type == TokenType.DOT:  # a qualified name
        name += "." + toks[at + 1].text
        at += 2
    return name, at


_CREATE_WORDS = {"create", "or", "replace", "temporary", "table", "view", "if", "not", "exists",
                 "function", "graph", "insert", "into", "overwrite"}


def parse_query(text: str, statement: Statement, offset_line: int = 0,
                origin: list[int] | None = None) -> exp.Expression:
    """A SELECT / VALUES / UNION query parsed by sqlglot, errors placed in the script; ``origin``:
    for text rewritten from the statement's query text, each character's offset in that text."""
    try:
        parsed = sqlglot.parse_one(readable(text), dialect=GeaFlowDialect)
    except ParseError as exc:
        detail = exc.errors[0] if exc.errors else {}
        line = statement.line + offset_line + (detail.get("line") or 1) - 1
        column = detail.get("col")
        if column and detail.get("highlight"):  # sqlglot's column is the token's last character
            column = max(column - len(detail["highlight"]) + 1, 1)
        message = plain_message((detail.get("description") or str(exc)).split("\n")[0], detail)
        if origin and detail.get("line"):  # the place in the rewritten text, mapped back
            lines = text.split("\n")
            offset = sum(len(t) + 1 for t in lines[:detail["line"] - 1]) + max((column or 1) - 1, 0)
            at = place_offset(statement, origin[min(offset, len(origin) - 1)])
            line, column = at if at[0] is not None else (line, column)
        raise statement.error(f"cannot parse the query: {message}", line=line, column=column) from None
    if not isinstance(parsed, (exp.Query, exp.Values)):
        raise statement.error(f"expected a query, found {parsed.key.upper()}")
    return group_windows(parsed)


# sqlglot's "Required keyword: 'this' missing for <class '...Where'>" in words, by the node's class
_REQUIRED = re.compile(r"Required keyword: '(\w+)' missing for <class '[\w.]*?(\w+)'>")
_NEEDS = {"Where": "WHERE needs a condition", "Having": "HAVING needs a condition",
          "Order": "ORDER BY needs what to sort by", "Group": "GROUP BY needs what to group by",
          "Limit": "LIMIT needs a number", "Offset": "OFFSET needs a number",
          "Between": "BETWEEN needs a lower bound, AND and an upper bound", "Like": "LIKE needs a pattern",
          "ILike": "ILIKE needs a pattern", "Union": "UNION needs a query on each side",
          "Except": "EXCEPT needs a query on each side", "Intersect": "INTERSECT needs a query on each side",
          "Not": "NOT needs a condition after it", "Neg": "- needs a value after it",
          "In": "IN needs a list or a query", "Is": "IS needs NULL, NOT NULL, TRUE or FALSE"}
_OPERATORS = {"Add": "+", "Sub": "-", "Mul": "*", "Div": "/", "Mod": "%", "EQ": "=", "NEQ": "<>",
              "GT": ">", "GTE": ">=", "LT": "<", "LTE": "<=", "And": "AND", "Or": "OR", "DPipe": "||"}
_TOKEN = re.compile(r"<Token token_type: TokenType\.(\w+), text: (.*?), line: .*?>")


def plain_message(message: str, detail: dict | None = None) -> str:
    """A sqlglot parse error in plain words (no class or token objects).

    >>> plain_message("Required keyword: 'this' missing for <class 'sqlglot.expressions.query.Where'>")
    'WHERE needs a condition'
    """
    required = _REQUIRED.search(message)
    if required is not None:
        part, node = required.groups()
        if node in _NEEDS:
            return _NEEDS[node]
        if node in _OPERATORS:
            return f"{_OPERATORS[node]} needs a value {'after' if part == 'expression' else 'before'} it"
        return f"{node.upper()} is not complete (its {part} is missing)"
    token = _TOKEN.search(message)
    if token is not None:
        kind, text = token.groups()
        found = "the end of the query" if kind == "SENTINEL" else repr(text)
        return message[:token.start()].replace("but got", "but found").rstrip() + f" {found}"
    if message.startswith("Invalid expression / Unexpected token") and (detail or {}).get("highlight"):
        return f"unexpected {detail['highlight']!r}"
    return message


_GQL = re.compile(r"\b(match|call)\b\s*[(\w]", re.I)


def classify(number: int, text: str, line: int, column: int) -> Statement:
    """One statement read: ``kind`` is set, create, view, function, insert, query, use or graph."""
    words = _words(text, 6)
    statement = Statement(number, "", text, line, column)
    toks = _tokens(text, line, column)
    if not words:
        raise statement.error("an empty statement")
    head = words[0]
    if head == "set":
        body = text.split(None, 1)[1]
        key, sep, value = body.partition("=")
        if not sep:
            raise statement.error("SET needs key = value")
        statement.kind, statement.name = "set", key.strip().replace("`", "")
        statement.value = value.strip().strip("'\"")
        return statement
    if head == "use":
        statement.kind = "use_graph" if words[1:2] == ["graph"] else "use"
        statement.name = toks[-1].text
        return statement
    if head == "create" and "function" in words:
        name, at = _name_and_rest(toks, _CREATE_WORDS)
        statement.kind, statement.name = "function", name
        statement.value = next((t.text for t in toks[at:] if t.token_type == TokenType.STRING), None)
        return statement
    if head == "create" and "table" in words[:4]:
        name, at = _name_and_rest(toks, _CREATE_WORDS)
        statement.kind, statement.name = "table", name
        watermark: dict[str, str] = {}
        if at < len(toks) and toks[at].token_type == TokenType.L_PAREN:
            inner, at = _group(toks, at)
            for part in _split_commas(inner):
                if part and part[0].text.lower() == "watermark":
                    watermark = _watermark(statement, " ".join(t.text for t in part))
                elif part and part[0].text.lower().split()[0] not in ("primary", "constraint"):
                    statement.columns.append((part[0].text, " ".join(t.text for t in part[1:])))
        if at < len(toks) and toks[at].text.lower() == "with":
            inner, at = _group(toks, at + 1)
            statement.options = _options(inner)
        statement.options.update(watermark)
        return statement
    if head == "create" and "view" in words[:4]:
        name, at = _name_and_rest(toks, _CREATE_WORDS)
        statement.kind, statement.name = "view", name
        if at < len(toks) and toks[at].token_type == TokenType.L_PAREN:
            inner, at = _group(toks, at)
            statement.target_columns = [t.text for t in inner if t.token_type != TokenType.COMMA]
        body = text[toks[at + 1].start:] if at < len(toks) and toks[at].text.lower() == "as" else None
        if body is None:
            raise statement.error("CREATE VIEW needs AS followed by a query")
        statement.query_at = _start(statement, toks[at + 1])
        statement.query = _query_or_gql(body, statement, toks[at + 1].line - 1)
        return statement
    if head == "create" and "graph" in words[:4]:
        statement.kind = "graph"
        return statement
    if head == "insert":
        name, at = _name_and_rest(toks, _CREATE_WORDS)
        statement.kind, statement.name = "insert", name
        if at < len(toks) and toks[at].token_type == TokenType.L_PAREN and not (
                at + 1 < len(toks) and toks[at + 1].text.lower() in ("select", "with", "values")):
            inner, at = _group(toks, at)
            statement.target_columns = ["".join(t.text for t in part) for part in _split_commas(inner)]
        if at >= len(toks):
            raise statement.error("INSERT INTO needs a query")
        statement.query_at = _start(statement, toks[at])
        statement.query = _query_or_gql(text[toks[at].start:], statement, toks[at].line - 1)
        return statement
    if head in ("select", "with", "values", "match", "call") or text.lstrip().startswith("("):
        statement.kind = "query"
        statement.query_at = (statement.line, statement.column)
        statement.query = _query_or_gql(text, statement, 0)
        return statement
    raise statement.error(f"{' '.join(words[:2]).upper()} is not a statement gyreflow's SQL knows",
                          hint="statements: SET, CREATE TABLE/VIEW/FUNCTION/GRAPH, USE, INSERT INTO, "
                               "SELECT")


def _watermark(statement: Statement, text: str) -> dict[str, str]:
    try:
        return watermark_options(text)
    except DslError as exc:
        raise statement.error(exc.message) from None


def _start(statement: Statement, token) -> tuple[int, int]:
    """Where ``token`` of a statement's text starts in the script."""
    column = token.col - len(token.text) + 1
    if token.line == 1:
        return statement.line, statement.column + column - 1
    return statement.line + token.line - 1, column


def place(statement: Statement, line: int | None, column: int | None) -> tuple[int | None, int | None]:
    """A (line, column) of a statement's query text as a place in the script."""
    if line is None or statement.query_at == (0, 0):
        return None, None
    start_line, start_column = statement.query_at
    if line == 1:
        return start_line, start_column + (column or 1) - 1
    return start_line + line - 1, column


def place_offset(statement: Statement, offset: int) -> tuple[int | None, int | None]:
    """Where the character at ``offset`` of a statement's query text (its ``body``) is in the script."""
    text = statement.body if statement.body is not None else statement.text
    line = text.count("\n", 0, offset) + 1
    return place(statement, line, offset - text.rfind("\n", 0, offset))


def _query_or_gql(text: str, statement: Statement, offset_line: int) -> exp.Expression:
    if _GQL.search(re.sub(r"'[^']*'", "", text)):
        statement.kind = statement.kind or "query"
        statement.value = "gql"
        statement.body, statement.body_line = text, offset_line
        return None
    return parse_query(text, statement, offset_line)


def parse_script(text: str) -> list[Statement]:
    """Every statement of ``text``, read and checked before anything runs."""
    return [classify(number, body, line, column)
            for number, (body, line, column) in enumerate(split_statements(text), 1)]
