"""Queries over tables read in windows that run over every row so far (``is_incremental``), and
the ones no window can answer (``refuse_windowed_negation``)."""

from __future__ import annotations

from sqlglot import exp

from gyreflow.api.dsl.catalog import Catalog
from gyreflow.api.dsl.errors import QueryError
from gyreflow.api.dsl.row_errors import first_place


def is_incremental(query) -> bool:
    """Whether a query's result over a stream is recomputed over everything so far (aggregates,
    DISTINCT, ORDER BY, joins, sub-queries in expressions) rather than computed over each window's
    rows alone. ``k IN (SELECT ...)`` is thereby a semi-join: an outer row comes out once, in the
    window where it first has a match, whichever side brought the match."""
    if isinstance(query, (exp.Union, exp.Except, exp.Intersect)):
        return True
    return any(isinstance(n, (exp.AggFunc, exp.Group, exp.Distinct, exp.Order, exp.Join, exp.Anonymous,
                              exp.Window)) or _expression_subquery(n)
               for n in query.walk())


def _expression_subquery(node) -> bool:
    """Whether ``node`` is a sub-query read as a value (``IN (SELECT ...)``, EXISTS, a scalar
    sub-query, ANY/ALL), not as the rows of a FROM item or a branch of a set operation."""
    if isinstance(node, exp.Exists):
        return True
    return isinstance(node, exp.Subquery) and not isinstance(
        node.parent, (exp.From, exp.Join, exp.Union, exp.Except, exp.Intersect, exp.Lateral))


def refuse_windowed_negation(query, catalog: Catalog) -> None:
    """Refuses ``x NOT IN (SELECT ...)`` and ``NOT EXISTS (SELECT ...)`` whose sub-query reads a table
    in windows: a stream never takes back a row it emitted, and the answer for an outer row turns
    from TRUE to FALSE when a later window brings a match (or, for NOT IN, a NULL) into the
    sub-query, so no window could emit it without emitting a row the whole tables do not give."""
    def windowed(sub) -> bool:
        tables = [catalog.tables[n] for n in catalog.base_tables(sub)]
        return any(t.kind != "graphdata" and t.window_size(catalog.settings) > 0 for t in tables)

    for node in _with_views(query, catalog):
        if not isinstance(node, exp.Not):
            continue
        inner = node.this.unnest() if isinstance(node.this, exp.Paren) else node.this
        sub = inner.args.get("query") if isinstance(inner, exp.In) else (
            inner.this if isinstance(inner, exp.Exists) else None)
        if sub is None or not windowed(sub):
            continue
        what = "NOT IN (sub-query)" if isinstance(inner, exp.In) else "NOT EXISTS (sub-query)"
        line, column = first_place(inner)
        raise QueryError(
            f"{what} over a table read in windows (geaflow.dsl.window.size): a row it lets through "
            "in one window may have a match (or a NULL) in a later window of the sub-query's table, and a "
            "stream does not take back a row it emitted", line=line, column=column,
            hint="read the tables whole (SET geaflow.dsl.window.size = -1), or write the anti-join as "
                 "LEFT JOIN ... WHERE <right key> IS NULL (a row comes out at the end of its window if "
                 "nothing matched it by then)")


def _with_views(query, catalog: Catalog, seen: frozenset = frozenset()):
    """The nodes of ``query`` and of the views it reads (followed once each)."""
    for node in query.walk():
        yield node
        if isinstance(node, exp.Table) and isinstance(node.this, exp.Identifier):
            name = node.name.lower()
            if name in catalog.views and name not in seen:
                yield from _with_views(catalog.views[name].query, catalog, seen | {name})
