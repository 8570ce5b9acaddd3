"""The syntax tree of graph queries (openCypher MATCH ... RETURN) that the compiler and array engine take."""

from __future__ import annotations

import attrs

MAX_HOPS = 10  # upper bound of an unbounded variable-length relationship (``*``, ``*2..``)

UNSUPPORTED = ("OPTIONAL", "CREATE", "MERGE", "WITH", "UNION", "CALL", "DELETE", "DETACH", "SET",
               "REMOVE", "UNWIND", "FOREACH", "LOAD", "CASE", "EXISTS", "SHORTESTPATH",
               "ALLSHORTESTPATHS")
AGGREGATES = ("count", "sum", "min", "max", "avg", "collect")
FUNCTIONS = ("id", "labels", "type", "size", "tolower", "toupper", "abs")


class QuerySyntaxError(ValueError):
    """A query that does not parse; the message is one line naming the line:column."""


class UnsupportedQueryError(QuerySyntaxError):
    """A query that uses a construct outside the supported subset (OPTIONAL MATCH, CREATE, ...)."""


@attrs.frozen
class NodePattern:
    variable: str | None
    labels: tuple  # every one of them
    properties: tuple  # ((key, expr), ...)


@attrs.frozen
class RelPattern:
    variable: str | None
    types: tuple  # any one of them
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
    """A query's patterns, WHERE and RETURN; expressions are tuples (``("prop", ("var", "a"),
    "name")``, ``("cmp", "=", left, right)``, ``("agg", "count", None, False)``, ...) that
    ``evaluate`` reads."""

    patterns: tuple
    where: tuple | None
    items: tuple
    distinct: bool
    order: tuple  # ((expr, descending), ...)
    skip: tuple | None
    limit: tuple | None
