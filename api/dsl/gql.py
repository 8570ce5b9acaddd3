"""GQL in a script: CREATE GRAPH read from sqlglot's tokens, MATCH blocks cut out of SQL and parsed."""

from __future__ import annotations

import re

import attrs
import sqlglot
from sqlglot import exp
from sqlglot.tokens import TokenType

from gyreflow.api.dsl.parsing import (
    GeaFlowDialect,
    Statement,
    _group,
    _options,
    _split_commas,
    _tokens,
    place_offset,
)
from gyreflow.api.graph.query.gql_paths import Element, PathReader


@attrs.define
class ElementType:
    """A vertex or edge type of a graph: its columns, which hold the ids, and the table it comes from."""

    kind: str  # "vertex" or "edge"
    label: str
    columns: list[tuple[str, str]]
    id_column: str | None = None  # vertices
    source_column: str | None = None  # edges
    target_column: str | None = None
    table: str | None = None  # `using` table


@attrs.define
class GraphDef:
    name: str
    types: dict[str, ElementType]
    options: dict[str, str]

    @property
    def store(self) -> str:
        return self.options.get("storeType", "memory").lower()


def parse_create_graph(statement: Statement) -> GraphDef:
    """``CREATE GRAPH name (Vertex l (cols) | Vertex l using t WITH ID(c), Edge ...) WITH (...)``."""
    toks = _tokens(statement.text, statement.line)
    at = 0
    while toks[at].text.lower() in ("create", "graph", "if", "not", "exists", "temporary"):
        at += 1
    name = toks[at].text
    at += 1
    if at >= len(toks) or toks[at].token_type != TokenType.L_PAREN:
        raise statement.error("CREATE GRAPH needs its vertex and edge types in parentheses")
    inner, at = _group(toks, at)
    options = {}
    if at < len(toks) and toks[at].text.lower() == "with":
        options = _options(_group(toks, at + 1)[0])
    types = {}
    for part in _split_commas(inner):
        kind = part[0].text.lower()
        if kind == "timestamp":  # `Edge e using t WITH ID(a, b), TIMESTAMP(ts)`: the edge's time column
            continue
        if kind not in ("vertex", "edge"):
            raise statement.error(f"a graph type starts with Vertex or Edge, not {part[0].text}",
                                  line=part[0].line)
        label = part[1].text
        element = ElementType(kind, label, [])
        if len(part) > 2 and part[2].token_type == TokenType.L_PAREN:
            columns, _ = _group(part, 2)
            for column in _split_commas(columns):
                words = [t.text for t in column]
                upper = [w.upper() for w in words]
                col = words[0]
                type_words = []
                for word in upper[1:]:
                    if word in ("ID", "SOURCE", "DESTINATION", "TIMESTAMP") and type_words:
                        break
                    type_words.append(word.lower())
                element.columns.append((col, " ".join(type_words) or "varchar"))
                marks = " ".join(upper[1 + len(type_words):])
                if marks == "ID":
                    element.id_column = col
                elif marks == "SOURCE ID":
                    element.source_column = col
                elif marks == "DESTINATION ID":
                    element.target_column = col
        else:
            words = [t.text for t in part]
            lower = [w.lower() for w in words]
            if "using" in lower:
                element.table = words[lower.index("using") + 1]
            if "id" in lower:
                ids_at = lower.index("id")
                ids, _ = _group(part, ids_at + 1)
                names = [t.text for t in ids if t.token_type != TokenType.COMMA]
                if kind == "vertex":
                    element.id_column = names[0]
                else:
                    element.source_column, element.target_column = names[0], names[1]
        types[label.lower()] = element
    return GraphDef(name, types, options)


# ---- MATCH blocks -------------------------------------------------------------------------------

@attrs.define
class NodePattern:
    var: str
    labels: list[str]
    where: exp.Expression | None
    # offsets in the statement's query text: each label, and the element's WHERE (or property map)
    label_at: list[int] = attrs.Factory(list)
    where_at: int | None = None


@attrs.define
class EdgePattern:
    var: str
    labels: list[str]
    where: exp.Expression | None
    direction: str  # "out", "in", "both"
    hops: tuple[int, int] | None = None
    label_at: list[int] = attrs.Factory(list)
    where_at: int | None = None


@attrs.define
class MatchClause:
    patterns: list[list]  # each: node, edge, node, ...
    where: exp.Expression | None
    # the comma-joined items, each ``(alternative paths, keep all)``: ``p1 | p2`` (distinct) or
    # ``p1 |+| p2`` (all); ``patterns`` lists every path of them
    items: list[tuple[list[list], list[bool]]] = attrs.Factory(list)
    order: exp.Select | None = None  # ORDER BY / LIMIT of the bindings, before RETURN


@attrs.define
class GqlQuery:
    """A MATCH block: match clauses, then an optional RETURN (a SELECT over the bindings) and filters."""

    graph: str | None
    matches: list[MatchClause]
    returns: exp.Expression | None  # SELECT ... FROM __bindings [ORDER BY/LIMIT]
    filters: list[exp.Expression]
    # (after the N-th MATCH, variable, property, value, GLOBAL: the vertex itself changes)
    lets: list[tuple[int, str, str, exp.Expression, bool]] = attrs.Factory(list)
    text: str = ""
    # path sub-queries, called __sub_K() in the expressions: K -> (aggregate or "exists", path, value)
    subqueries: dict = attrs.Factory(dict)
    call: tuple | None = None  # CALL name(args) YIELD (columns): (name, [args], [columns])
    at: int | None = None  # the block's offset in the statement's query text


_CLAUSES = {"match", "return", "then", "let", "where", "optional"}


def _expression(text: str, statement: Statement) -> exp.Expression:
    try:
        return sqlglot.parse_one("SELECT " + text, dialect=GeaFlowDialect).expressions[0]
    except sqlglot.errors.ParseError as exc:
        raise statement.error(f"cannot parse {text.strip()[:60]!r} in a MATCH: "
                              f"{str(exc).splitlines()[0]}") from None


class _Reader(PathReader):
    def __init__(self, text: str, statement: Statement, prefix: str = "",
                 origin: list[int] | None = None) -> None:
        super().__init__(text, _tokens(text, statement.line))
        self.statement, self.prefix = statement, prefix
        self.origin = origin  # each character's offset in the statement's query text
        self.anonymous = 0

    def error(self, message: str, token=None, hint: str | None = None) -> Exception:
        """An error at ``token`` (None: the end of the text), placed in the script."""
        line = column = None
        if self.origin:
            offset = token.start if token is not None else len(self.text.rstrip())
            line, column = place_offset(self.statement, self.origin[offset] if offset < len(self.origin)
                                        else self.origin[-1] + 1)
        return self.statement.error(message, hint, line=line, column=column)

    def offset(self, token) -> int | None:
        """Where ``token`` starts in the statement's query text."""
        return self.origin[token.start] if self.origin and token.start < len(self.origin) else None

    def fail(self, what: str, token=None) -> Exception:
        token = token if token is not None else self.peek()
        found = token.text if token is not None else "the end"
        return self.error(f"expected {what} in a MATCH, found {found!r}", token)

    def until(self, stop_words: set[str], stop_at_close: bool = True) -> str:
        """The text up to a stop word at depth 0 (or the close of the enclosing bracket)."""
        depth, start = 0, self.at
        while self.at < len(self.toks):
            token = self.toks[self.at]
            if token.token_type in (TokenType.L_PAREN, TokenType.L_BRACKET):
                depth += 1
            elif token.token_type in (TokenType.R_PAREN, TokenType.R_BRACKET):
                if depth == 0 and stop_at_close:
                    break
                depth -= 1
            elif depth == 0 and token.text.lower() in stop_words and not (
                    token.text.lower() == "then" and self.word(1) != "filter"):
                break  # THEN ends a clause only as THEN FILTER (not CASE WHEN ... THEN)
            self.at += 1
        return self.text_of(start, self.at)

    def text_of(self, start: int, end: int) -> str:
        if start == end:
            return ""
        return self.text[self.toks[start].start:self.toks[end - 1].end + 1]

    def fresh(self, kind: str) -> str:
        self.anonymous += 1
        return f"__{kind}{self.prefix}{self.anonymous}"


def _pattern(reader: _Reader, element: Element) -> NodePattern | EdgePattern:
    """GQL's node or edge of a path element: lower-case labels (any one of them), the property
    map and WHERE as one condition."""
    conditions = [f"{key.text} = {reader.text_of(*values)}" for key, values in element.properties]
    if element.where is not None:
        conditions.append(f"({reader.text_of(*element.where)})")
    where = _expression(" AND ".join(conditions), reader.statement) if conditions else None
    labels = [token.text.lower() for token in element.labels]
    var = element.var.text if element.var is not None else None
    if element.kind == "node":
        pattern = NodePattern(var or reader.fresh("v"), labels, where)
    else:
        pattern = EdgePattern(var or reader.fresh("e"), labels, where, element.direction, element.hops)
    pattern.label_at = [reader.offset(token) for token in element.labels]
    starts = [values[0] for _, values in element.properties] + (
        [element.where[0]] if element.where is not None else [])
    if starts and min(starts) < len(reader.toks):
        pattern.where_at = reader.offset(reader.toks[min(starts)])
    return pattern


def _path(reader: _Reader) -> list:
    return [_pattern(reader, element) for element in reader.path()]


def _alternatives(reader: _Reader) -> tuple[list[list], list[bool]]:
    """``path | path |+| path ...``: the paths, and for each after the first whether it joins what
    comes before it keeping every row (``|+|``) or only distinct ones (``|``)."""
    paths, keep = [_path(reader)], []
    while reader.peek() is not None and reader.peek().token_type == TokenType.PIPE:
        reader.take()
        keep_all = False
        if reader.peek() is not None and reader.peek().text == "+":
            reader.take()
            reader.expect("|")
            keep_all = True
        keep.append(keep_all)
        paths.append(_path(reader))
    return paths, keep


def _sub(pattern: re.Pattern, replace: str, text: str, origin: list[int]) -> tuple[str, list[int]]:
    """``pattern.sub(replace, text)``, and where each character of the result came from."""
    out, where, last = [], [], 0
    for match in pattern.finditer(text):
        new = match.expand(replace)
        out += [text[last:match.start()], new]
        where += origin[last:match.start()] + [origin[match.start()]] * len(new)
        last = match.end()
    return "".join(out) + text[last:], where + origin[last:]


_TILDE = re.compile(r"\.\s*~(label|id)\b")


def parse_gql(text: str, statement: Statement, graph: str | None, at: int = 0) -> GqlQuery:
    """A MATCH block (``MATCH ... [WHERE] [RETURN ... [ORDER BY] [LIMIT]] [THEN FILTER ...]``),
    at offset ``at`` of the statement's query text."""
    text, origin = _sub(_TILDE, r".__\1", text, list(range(at, at + len(text))))
    query = GqlQuery(graph, [], None, [], text=text, at=at)
    text, origin = _cut_subqueries(text, statement, query, origin)
    reader = _Reader(text, statement, origin=origin)
    while reader.peek() is not None:
        word = reader.word()
        if word == "match":
            reader.take()
            items = [_alternatives(reader)]
            while reader.peek() is not None and reader.peek().token_type == TokenType.COMMA:
                reader.take()
                items.append(_alternatives(reader))
            where = None
            if reader.word() == "where":
                reader.take()
                where = _expression(reader.until(_CLAUSES - {"where"} | {"order", "order by", "limit"}),
                                    statement)
            clause = MatchClause([path for paths, _ in items for path in paths], where, items)
            if reader.word() in ("order", "order by", "limit"):
                text = reader.until({"return", "then", "match", "let"})
                clause.order = sqlglot.parse_one(f"SELECT * FROM __bindings {text}", dialect=GeaFlowDialect)
            query.matches.append(clause)
        elif word == "call":
            reader.take()
            name = reader.take().text.lower()
            reader.expect("(")
            inside = reader.until(set())
            reader.expect(")")
            args = [_expression(part, statement) for part in _top_level_commas(inside)]
            columns = []
            if reader.word() == "yield":
                reader.take()
                reader.expect("(")
                columns = [c.strip() for c in reader.until(set()).split(",") if c.strip()]
                reader.expect(")")
            query.call = (name, args, columns)
        elif word == "return":
            reader.take()
            body = reader.until({"then", "match", "let"})
            try:
                query.returns = sqlglot.parse_one(_return_select(body), dialect=GeaFlowDialect)
            except sqlglot.errors.ParseError as exc:
                raise statement.error(f"cannot parse the RETURN: {str(exc).splitlines()[0]}") from None
        elif word == "then":
            reader.take()
            reader.expect("filter")
            query.filters.append(_expression(reader.until({"then", "match", "let", "return"}), statement))
        elif word == "let":
            reader.take()
            while True:
                target = reader.until({"="})
                reader.expect("=")
                value = _expression(reader.until({"let", "match", "return", "then", ","}), statement)
                named = re.sub(r"(?i)^\s*(let\s+)?", "", target).strip()
                is_global = named.lower().startswith("global ")
                var, _, prop = re.sub(r"(?i)^global\s+", "", named).partition(".")
                query.lets.append((len(query.matches), var.strip(), prop.strip(), value, is_global))
                if reader.peek() is None or reader.peek().token_type != TokenType.COMMA:
                    break
                reader.take()
        else:
            raise reader.error(f"{reader.peek().text!r} is not a GQL clause gyreflow knows", reader.peek(),
                               hint="clauses: MATCH, WHERE, LET, RETURN, ORDER BY, LIMIT, THEN FILTER")
    if not query.matches and query.call is None:
        raise statement.error("a graph query starts with MATCH or CALL")
    return query


_AGGREGATE_PATH = re.compile(r"(?i)\b(count|sum|max|min|avg)\s*\(\s*\(")
_EXISTS_PATH = re.compile(r"(?i)\bexists\s*(?=\()")


def _close(text: str, at: int) -> int:
    """The index of the parenthesis that closes the one at ``at`` (strings skipped)."""
    depth, quote = 0, None
    for i in range(at, len(text)):
        c = text[i]
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i
    return len(text) - 1


def _cut_subqueries(text: str, statement: Statement, query: GqlQuery,
                    origin: list[int]) -> tuple[str, list[int]]:
    """``COUNT((b)->(c) => c.id)`` and ``EXISTS (b)->(c)`` replaced by ``__sub_K()``, kept in ``query``;
    ``origin`` (and the list returned): where each character came from."""
    out, where, at = [], [], 0
    while True:
        found = [m for m in (_AGGREGATE_PATH.search(text, at), _EXISTS_PATH.search(text, at)) if m]
        if not found:
            break
        match = min(found, key=lambda m: m.start())
        key = len(query.subqueries)
        if match.re is _AGGREGATE_PATH:
            opening = text.index("(", match.start())
            closing = _close(text, opening)
            inner = text[opening + 1:closing]
            if "=>" not in inner:
                out.append(text[at:match.end()])
                where += origin[at:match.end()]
                at = match.end()
                continue
            path_text, _, value_text = inner.partition("=>")
            lead = opening + 1 + len(path_text) - len(path_text.lstrip())
            path = _path(_Reader(path_text.strip(), statement, f"s{key}_", origin[lead:]))
            value_at = opening + 1 + len(path_text) + 2
            value_text, _ = _cut_subqueries(value_text, statement, query, origin[value_at:])
            value = _expression(value_text, statement)
            query.subqueries[key] = (match.group(1).lower(), path, value)
            end = closing + 1
        elif text[match.end() + 1:].lstrip().startswith("("):  # EXISTS((b)->(c)): the path in parentheses
            closing = _close(text, match.end())
            path = _path(_Reader(text[match.end() + 1:closing], statement, f"s{key}_",
                                 origin[match.end() + 1:]))
            query.subqueries[key] = ("exists", path, None)
            end = closing + 1
        else:
            reader = _Reader(text[match.end():], statement, f"s{key}_", origin[match.end():])
            path = _path(reader)
            end = match.end() + reader.toks[reader.at - 1].end + 1
            query.subqueries[key] = ("exists", path, None)
        out += [text[at:match.start()], f"__sub_{key}()"]
        where += origin[at:match.start()] + [origin[match.start()]] * len(out[-1])
        at = end
    return "".join(out) + text[at:], where + origin[at:]


def _top_level_commas(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for c in text:
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        if c == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += c
    return [p for p in [*parts, current] if p.strip()]


def _return_select(body: str) -> str:
    """``RETURN items [GROUP BY ..] [ORDER BY ..] [LIMIT n]`` as a SELECT over the bindings."""
    # GeaFlow's runtime does not apply an OFFSET of a RETURN (its tests expect the first rows): nor here
    body = re.sub(r"(?i)\boffset\s+\d+", "", body)
    lowered = body.lower()
    cut = len(body)
    for word in (" group by", "\ngroup by", " order by", "\norder by", "\torder by", " limit", "\nlimit"):
        at = lowered.find(word)
        if at != -1 and _depth_zero(body, at):
            cut = min(cut, at)
    return f"SELECT {body[:cut]} FROM __bindings {body[cut:]}"


def _depth_zero(text: str, at: int) -> bool:
    return text[:at].count("(") == text[:at].count(")")


def cut_matches(text: str, prefix: str = "__gql_") -> tuple[str, list[tuple[str, str, int]], list[int]]:
    """``text`` with each MATCH block replaced by a table name ``{prefix}k``, the blocks (name, text,
    offset in ``text``) and, for each character of the new text, its offset in ``text``."""
    toks = _tokens(text)
    blocks, pieces, origin, last = [], [], [], 0
    i = 0
    while i < len(toks):
        token = toks[i]
        if token.text.lower() in ("match", "call") and (i == 0 or toks[i - 1].text.lower() not in (".",)):
            depth, j = 0, i
            while j < len(toks):
                kind = toks[j].token_type
                if kind in (TokenType.L_PAREN, TokenType.L_BRACKET, TokenType.L_BRACE):
                    depth += 1
                elif kind in (TokenType.R_PAREN, TokenType.R_BRACKET, TokenType.R_BRACE):
                    if depth == 0:
                        break
                    depth -= 1
                elif kind == TokenType.SEMICOLON and depth == 0:
                    break
                j += 1
            name = f"{prefix}{len(blocks)}"
            end = toks[j - 1].end + 1
            blocks.append((name, text[token.start:end], token.start))
            enclosed = i > 0 and toks[i - 1].token_type == TokenType.L_PAREN
            pieces.append(text[last:token.start])
            origin.extend(range(last, token.start))
            pieces.append(f"SELECT * FROM {name}" if enclosed or i == 0 or
                          toks[i - 1].text.lower() not in ("from", "join") else name)
            origin.extend([end - 1] * len(pieces[-1]))  # the block's place: its last character
            last = end
            i = j
            continue
        i += 1
    pieces.append(text[last:])
    origin.extend(range(last, len(text)))
    return "".join(pieces), blocks, origin
