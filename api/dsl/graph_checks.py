"""A MATCH block checked before it runs: its labels, the properties and variables it reads, its arithmetic."""

from __future__ import annotations

import re

from sqlglot import exp

from gyreflow.api.dsl.errors import DslError
from gyreflow.api.dsl.gql import GqlQuery, NodePattern
from gyreflow.api.dsl.parsing import Statement, place_offset


def check_gql(query: GqlQuery, statement: Statement, catalog) -> None:
    """Refuses a label the graph does not have, a property no type of a variable's labels has, and an
    element's condition that reads a variable bound only after it (which would fail while running)."""
    definition = catalog.graphs.get((query.graph or "").lower())
    if definition is None or query.call is not None:
        return
    elements = [item for clause in query.matches for path in clause.patterns for item in path]
    first: dict[str, int] = {}
    for number, item in enumerate(elements):
        first.setdefault(item.var.lower(), number)
    schema: dict[str, set[str]] = {}
    types: dict[tuple[str, str], set[str]] = {}  # (variable, property): the types it is declared as
    for item in elements:
        kind = "vertex" if isinstance(item, NodePattern) else "edge"
        known = [label for label, t in definition.types.items() if t.kind == kind]
        for label, at in zip(item.labels, item.label_at or [None] * len(item.labels), strict=False):
            if label not in known:
                raise _error(statement, at, f"graph {definition.name} has no {kind} type {label} "
                                            f"({kind} types: {', '.join(known) or 'none'})")
        columns = schema.setdefault(item.var.lower(), set())
        for label in item.labels or known:
            for name, kind_of in definition.types[label].columns:
                columns.add(name.lower())
                types.setdefault((item.var.lower(), name.lower()), set()).add(kind_of.split("(")[0].lower())
    for _, _, prop, _, _ in query.lets:  # LET [GLOBAL] a.p = ...: a property others may read too
        for columns in schema.values():
            columns.add(prop.lower())
    for number, item in enumerate(elements):
        if item.where is None:
            continue
        for column in item.where.find_all(exp.Column):
            ref = column.table.lower()
            if ref and ref != item.var.lower() and first.get(ref, -1) > number:
                raise _error(statement, _find(statement, item.where_at, column),
                             f"the condition of {item.var} reads {column.table}.{column.name}, bound only "
                             f"after {item.var} in the MATCH (a condition on both goes in the MATCH's WHERE)")
    for expression in _expressions(query, elements):
        for column in expression.find_all(exp.Column):
            ref, name = column.table.lower(), column.name.lower()
            if ref in schema and schema[ref] and not name.startswith("__") and name not in schema[ref]:
                raise _error(statement, _find(statement, query.at, column),
                             f"no column {column.table}.{column.name} (columns of {column.table}: "
                             f"{', '.join(sorted(schema[ref]))})")
        for node in expression.find_all(*_ARITHMETIC):
            _check_arithmetic(statement, query, node, types)


_ARITHMETIC = (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod)
_TEXT = {"varchar", "string", "char"}
_NUMBER = {"bigint", "int", "integer", "smallint", "tinyint", "long", "double", "float", "decimal", "real"}


def _kind(node: exp.Expression, types: dict) -> str | None:
    """"text" or "number" for a property declared so (all its types one kind) or a number literal."""
    if isinstance(node, exp.Literal):
        return "text" if node.is_string else "number"
    if isinstance(node, exp.Column) and node.table:
        declared = types.get((node.table.lower(), node.name.lower()))
        if declared and declared <= _TEXT:
            return "text"
        if declared and declared <= _NUMBER:
            return "number"
    return None


def _check_arithmetic(statement: Statement, query: GqlQuery, node: exp.Binary, types: dict) -> None:
    """Arithmetic of a text property and a number: refused (it fails, or repeats text, when it runs)."""
    kinds = [_kind(node.this, types), _kind(node.expression, types)]
    if sorted(kinds, key=str) != ["number", "text"]:
        return
    text = node.this if kinds[0] == "text" else node.expression
    if not isinstance(text, exp.Column):
        return
    operator = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/", exp.Mod: "%"}[type(node)]
    declared = "/".join(sorted(types[(text.table.lower(), text.name.lower())]))
    raise _error(statement, _find(statement, query.at, text),
                 f"{node.sql(dialect='')}: {operator} needs numbers, {text.sql(dialect='')} is {declared} "
                 f"(CAST it to a number, or use || to join text)")


def _expressions(query: GqlQuery, elements: list) -> list[exp.Expression]:
    found = [item.where for item in elements if item.where is not None]
    found += [clause.where for clause in query.matches if clause.where is not None]
    found += [clause.order for clause in query.matches if clause.order is not None]
    found += [value for _, _, _, value, _ in query.lets] + list(query.filters)
    if query.returns is not None:
        found.append(query.returns)
    return found


def written(statement: Statement, message: str) -> tuple[int | None, int | None]:
    """Where the column a ``no column [t.]c`` message names is first written in the statement."""
    named = re.match(r"no column (?:(\w+)\.)?(\w+) ", message)
    if named is None:
        return None, None
    offset = _find(statement, 0, exp.column(named.group(2), named.group(1)))
    return place_offset(statement, offset) if offset is not None else (None, None)


def _find(statement: Statement, start: int | None, column: exp.Column) -> int | None:
    """Where ``column`` (``a.b``) is first written in the statement's query text from ``start``."""
    text = statement.body if statement.body is not None else statement.text
    if start is None:
        return None
    table = rf"\b{re.escape(column.table)}\s*\.\s*`?" if column.table else r"(?<![.\w])"
    found = re.compile(rf"(?i){table}{re.escape(column.name)}\b").search(text, start)
    return found.start() if found else start


def _error(statement: Statement, offset: int | None, message: str, hint: str | None = None) -> DslError:
    line, column = place_offset(statement, offset) if offset is not None else (None, None)
    return statement.error(message, hint, line=line, column=column)
