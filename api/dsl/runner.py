"""Running a script: statements read and checked first, then run in order as one pipeline."""

from __future__ import annotations

import os
import re

from gyreflow.api.dsl.catalog import Catalog
from gyreflow.api.dsl.parsing import DslError, Statement, parse_script
from gyreflow.api.dsl.queries import QueryError
from gyreflow.api.dsl.select import evaluate

# Statements of the language that gyreflow's SQL does not run yet, by kind.
NOT_YET = {
    "graph": "CREATE GRAPH is not supported yet",
    "use_graph": "USE GRAPH is not supported yet",
    "gql": "graph queries (MATCH, CALL) are not supported yet",
}


def substitute(text: str, settings: dict) -> str:
    """``${key}`` replaced by the setting ``key``; a missing one is an error naming it."""
    def value(match):
        key = match.group(1)
        if key not in settings:
            raise DslError(f"${{{key}}} has no value: set it with --set {key}=VALUE or in the script")
        return str(settings[key])
    return re.sub(r"\$\{([^}]+)\}", value, text)


def _check(statement: Statement, catalog: Catalog) -> None:
    """Refuses what cannot run, before any data moves: unknown tables, columns and functions."""
    if statement.value == "gql" and statement.kind in ("insert", "query", "view"):
        raise statement.error(NOT_YET["gql"], hint="docs/dsl.md lists what runs")
    if statement.kind in NOT_YET:
        raise statement.error(NOT_YET[statement.kind], hint="docs/dsl.md lists what runs")
    if statement.kind in ("insert", "query", "view"):
        dry = catalog.bound({})
        try:
            result = evaluate(statement.query, dry)
        except QueryError as exc:
            raise statement.error(exc.message, exc.hint) from None
        if statement.kind == "insert":
            table = catalog.table(statement.name)
            if table is None:
                raise statement.error(f"INSERT INTO {statement.name}: no such table")
            if table.kind == "file" and len(result.columns) != len(table.columns):
                raise statement.error(f"INSERT INTO {statement.name}: the query gives "
                                      f"{len(result.columns)} columns, the table has {len(table.columns)}")


def prepare(text: str, settings: dict | None = None, root: str | None = None):
    """``(statements, catalog)``: the script read, every statement checked in order."""
    settings = dict(settings or {})
    statements = parse_script(substitute(text, settings) if "${" in text else text)
    catalog = Catalog(settings, root or os.getcwd())
    for statement in statements:
        if statement.kind == "set":
            catalog.settings[statement.name] = statement.value
        elif statement.kind == "table":
            catalog.add_table(statement)
        elif statement.kind == "view":
            _check(statement, catalog)
            catalog.add_view(statement)
        elif statement.kind == "function":
            catalog.add_function(statement)
        elif statement.kind in ("insert", "query"):
            _check(statement, catalog)
        elif statement.kind == "use":
            continue
        else:
            _check(statement, catalog)
    return statements, catalog


def build(env, text: str, settings: dict | None = None, root: str | None = None, name: str = "sql"):
    """A pipeline of ``env`` with one task per INSERT (and SELECT) of the script, in order."""
    from gyreflow.api.dsl.jdbc import jdbc_sink
    from gyreflow.api.dsl.planning import file_sink, plan_insert

    statements, catalog = prepare(text, settings, root)
    pipeline = env.pipeline(name)
    state = catalog.copy()
    state.tables, state.views, state.functions = {}, {}, {}
    for statement in statements:  # each task sees the catalogue as it stood at its statement
        if statement.kind == "set":
            state.settings[statement.name] = statement.value
        elif statement.kind == "table":
            state.add_table(statement)
        elif statement.kind == "view":
            state.add_view(statement)
        elif statement.kind == "function":
            state.add_function(statement)
        elif statement.kind in ("insert", "query"):
            snapshot = state.copy()
            snapshot.settings = dict(state.settings)
            sink = None
            if statement.kind == "insert":
                table = snapshot.table(statement.name)
                sink = (file_sink(table, snapshot) if table.kind == "file"
                        else jdbc_sink(table, snapshot.settings))
            _add_task(pipeline, statement, snapshot, sink, plan_insert)
    return pipeline


def _add_task(pipeline, statement, catalog, sink, plan_insert) -> None:
    label = f"statement-{statement.number}"

    def task(ctx):
        plan_insert(ctx, statement.query, catalog, sink, statement.number)
    task.__name__ = label
    pipeline.task(task, name=label)


def run(env, text: str, settings: dict | None = None, root: str | None = None, name: str = "sql", **kw):
    """Run a script in ``env``; returns the pipeline's result (a SELECT's rows under ``collect``)."""
    return build(env, text, settings, root, name).execute(**kw)


def selected_rows(result) -> list[tuple[int, list[tuple]]]:
    """``(statement number, rows)`` of each SELECT statement of a script's result, in order."""
    found = []
    for task in result.values():
        for name in task.collected:
            if name.startswith("rows-"):
                found.append((int(name[len("rows-"):]), task.output(name)))
    return sorted(found, key=lambda item: item[0])
