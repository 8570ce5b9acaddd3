"""Errors of a query's expressions over its rows, naming the expression and the row it failed on."""

from __future__ import annotations

import contextlib

from gyreflow.api.dsl.errors import QueryError


class RowError(QueryError):
    """An expression of a query raised on one of its rows (division by zero, a domain error, a
    value of the wrong type): the message names the expression and the row (or the group)."""


@contextlib.contextmanager
def naming_rows(tried: list, contexts, grouped: bool = False, columns: list | None = None):
    """Runs its block, in which one of ``tried`` (``(expression, compiled function)``) is run over
    each of ``contexts`` (``(row, group rows, ...)``, or a function giving them): an error raised
    there becomes a ``RowError`` naming the expression and the row (``located``), whose
    ``columns`` are ``(table, name)`` pairs. Costs nothing until something fails."""
    try:
        yield
    except RowError:
        raise
    except Exception as exc:
        error = located(exc, tried, contexts() if callable(contexts) else contexts, grouped, columns)
        if error is None:
            raise
        raise error from exc


def located(exc: Exception, tried: list, contexts, grouped: bool = False,
            columns: list | None = None) -> RowError | None:
    """The error to raise for ``exc``, which one of ``tried`` raised over one of ``contexts``: each is
    run again over each context until one fails, so that the error names them (None if none
    fails again: the error was not one of theirs)."""
    for ctx in contexts:
        for node, fn in tried:
            try:
                fn(ctx)
            except Exception:  # noqa: BLE001 - the expression that fails, whatever it raises
                return row_error(exc, node, ctx[0], grouped, columns)
    return None


def row_error(exc: Exception, node, row: tuple, grouped: bool = False,
              columns: list | None = None) -> RowError:
    """``exc`` as raised by the expression ``node`` on ``row`` (the first row of a group), whose
    ``columns`` are ``(table, name)`` pairs: the row is shown as the columns ``node`` reads, by name
    (``shown_row``)."""
    cause = exc.message if isinstance(exc, QueryError) else f"{type(exc).__name__}: {exc}"
    shown = repr(tuple(row)) if columns is None else shown_row(node, row, columns, grouped)
    shown = shown if len(shown) <= 200 else shown[:200] + "..."
    text = node.sql() if hasattr(node, "sql") else str(node)
    text = text if len(text) <= 80 else text[:80] + "..."
    where = "" if not row or shown == "()" else f"the group of row {shown}" if grouped else f"row {shown}"
    hint = exc.hint if isinstance(exc, QueryError) else None
    line, column = (exc.line, exc.column) if isinstance(exc, QueryError) and exc.line else first_place(node)
    return RowError(f"{cause}, in {text}" + (f" on {where}" if where else ""), line=line, column=column,
                    hint=hint)


def first_place(node) -> tuple[int | None, int | None]:
    """The line and column of the first name an expression reads (sqlglot keeps no others)."""
    from sqlglot import exp

    for identifier in node.find_all(exp.Identifier) if hasattr(node, "find_all") else ():
        meta = identifier.meta
        if "line" in meta and "col" in meta:
            return meta["line"], meta["col"] - len(identifier.name) + 1
    return None, None


def shown_row(node, row: tuple, columns: list, grouped: bool = False) -> str:
    """``row`` as the columns that ``node`` reads, by name, in the row's order: ``(id=1, age=30)``.
    The columns a query does not read are not converted when its table is read (they hold None),
    so the whole row would mislead. Of a group (``grouped``), only the columns read outside an
    aggregate: the aggregate's read every row of the group, not this one.

    >>> from sqlglot import parse_one
    >>> shown_row(parse_one("id / (age - age)"), (1, None, 30), [("t", "id"), ("t", "name"), ("t", "age")])
    '(id=1, age=30)'
    """
    from sqlglot import exp

    names = [name for _, name in columns]
    read: dict[int, str] = {}
    for column in node.find_all(exp.Column) if hasattr(node, "find_all") else ():
        if isinstance(column.this, exp.Star):
            continue
        if grouped and column.find_ancestor(exp.AggFunc) is not None:
            continue
        name, table = column.name.lower(), column.table.lower() if column.table else None
        for at, (qualifier, known) in enumerate(columns):
            if known == name and (table is None or qualifier == table) and at < len(row):
                read.setdefault(at, f"{qualifier}.{known}" if names.count(known) > 1 else known)
                break
    return "(" + ", ".join(f"{read[at]}={row[at]!r}" for at in sorted(read)) + ")"
