"""Running a script: statements read and checked first, then run in order as one pipeline."""

from __future__ import annotations

import os
import re
import tempfile

import gyreflow.api.dsl.streaming as streaming
from gyreflow.api.dsl.catalog import Catalog
from gyreflow.api.dsl.gql import cut_matches, parse_create_graph, parse_gql
from gyreflow.api.dsl.graph_checks import check_gql, written
from gyreflow.api.dsl.incremental import refuse_windowed_negation
from gyreflow.api.dsl.lowering import shape_of
from gyreflow.api.dsl.parsing import DslError, Statement, parse_query, parse_script, place
from gyreflow.api.dsl.queries import QueryError
from gyreflow.api.dsl.select import dry_run, evaluate
from gyreflow.api.dsl.windowing import window_calls

PERSISTENT_ROOT = "geaflow.file.persistent.root"
STORED = ("rocksdb", "paimon")  # graph stores kept under the persistent root between runs


def substitute(text: str, settings: dict) -> str:
    """``${key}`` replaced by the setting ``key``; a missing one is an error naming it."""
    def value(match):
        key = match.group(1)
        if key not in settings:
            raise DslError(f"${{{key}}} has no value: set it with --set {key}=VALUE or in the script")
        return str(settings[key])
    return re.sub(r"\$\{([^}]+)\}", value, text)


def _graph_target(statement: Statement, catalog: Catalog):
    """``[(graph, element type, columns given or None, their positions in the query)]`` of ``INSERT
    INTO graph.label [(columns)]`` or ``INSERT INTO graph(label.column, ...)``; None for a table."""
    graph_name, _, label = statement.name.partition(".")
    graph = catalog.graphs.get(graph_name.lower())
    if graph is None:
        return None
    if label:
        element = graph.types.get(label.lower())
        if element is None:
            raise statement.error(f"graph {graph.name} has no vertex or edge type {label}")
        columns = statement.target_columns
        return [(graph, element, columns, list(range(len(columns))) if columns else None)]
    if not statement.target_columns or any("." not in c for c in statement.target_columns):
        raise statement.error(f"INSERT INTO {statement.name} needs a label: INSERT INTO "
                              f"{graph_name}.LABEL or INSERT INTO {graph_name}(label.column, ...)")
    by_label: dict[str, tuple[list, list]] = {}
    for position, column in enumerate(statement.target_columns):
        label, _, name = column.partition(".")
        by_label.setdefault(label.lower(), ([], []))
        by_label[label.lower()][0].append(name)
        by_label[label.lower()][1].append(position)
    targets = []
    for label, (columns, positions) in by_label.items():
        element = graph.types.get(label)
        if element is None:
            raise statement.error(f"graph {graph.name} has no vertex or edge type {label}")
        targets.append((graph, element, columns, positions))
    return targets


def _read_gql(statement: Statement, catalog: Catalog) -> None:
    """A statement's MATCH blocks cut out, parsed and kept in the catalogue under names of their own."""
    text, blocks, origin = cut_matches(statement.body, f"__gql_{statement.number}_")
    errors = []  # the first in the script is reported: an unclosed MATCH shows in both
    try:
        statement.query = parse_query(text, statement, statement.body_line, origin)
    except DslError as exc:
        errors.append(exc)
    for name, block, at in blocks:
        try:
            catalog.gql[name] = parse_gql(block, statement, catalog.current_graph, at)
        except DslError as exc:
            errors.append(exc)
    if errors:
        raise min(errors, key=lambda e: (e.line or 0, e.column or 0))


def apply(statement: Statement, catalog: Catalog, *, check: bool) -> None:
    """What a statement declares, added to ``catalog`` (and, with ``check``, its query checked)."""
    kind = statement.kind
    if kind == "set":
        catalog.settings[statement.name] = statement.value
    elif kind == "table":
        catalog.add_table(statement)
    elif kind == "function":
        catalog.add_function(statement)
    elif kind == "graph":
        definition = parse_create_graph(statement)
        if statement.value is None:  # where its rows are kept: chosen once, when the script is read
            if definition.store in STORED:
                root = catalog.settings.get(PERSISTENT_ROOT) or os.path.join(".gyreflow", "graphs")
                statement.value = os.path.abspath(os.path.join(root, definition.name))
            else:
                statement.value = tempfile.mkdtemp(prefix=f"gyreflow-graph-{definition.name}-")
        try:
            catalog.add_graph(definition, statement.value)
        except DslError as exc:
            raise statement.error(exc.message) from None
    elif kind == "use_graph":
        if statement.name.lower() not in catalog.graphs:
            raise statement.error(f"USE GRAPH {statement.name}: no such graph")
        catalog.current_graph = statement.name
    elif kind in ("insert", "query", "view"):
        if statement.value == "gql" and statement.query is None:
            _read_gql(statement, catalog)
        elif statement.value == "gql":
            for name, block, at in cut_matches(statement.body, f"__gql_{statement.number}_")[1]:
                catalog.gql[name] = parse_gql(block, statement, catalog.current_graph, at)
        if check:
            _check(statement, catalog)
        if kind == "view":
            catalog.add_view(statement)


def _check(statement: Statement, catalog: Catalog) -> None:
    """Refuses what cannot run, before any data moves: unknown tables, columns and functions, a
    column neither grouped nor aggregated, NOT IN (sub-query) over tables read in windows."""
    dry = catalog.bound({})
    if statement.value == "gql":
        for name, query in catalog.gql.items():
            if name.startswith(f"__gql_{statement.number}_"):
                check_gql(query, statement, catalog)
    try:
        with dry_run():  # compiled, not evaluated over rows: a value error depends on the data
            result = evaluate(statement.query, dry)
        refuse_windowed_negation(statement.query, catalog)
        # SESSION runs only on the plan's event-time windows (TUMBLE and HOP also over rows)
        calls = window_calls(statement.query) if statement.query is not None else []
        if any(c.kind == "session" for c in calls) and shape_of(statement.query, catalog) is None:
            raise QueryError("SESSION runs only as the one table of a GROUP BY window_start, "
                             "window_end query, not under a join or a sub-query")
    except QueryError as exc:
        if statement.value == "gql":  # the expression's place is in text cut from the script's
            line, column = written(statement, exc.message)
        else:
            line, column = place(statement, exc.line, exc.column)
        raise statement.error(exc.message, exc.hint, line=line, column=column) from None
    if statement.kind != "insert":
        return
    graph = _graph_target(statement, catalog)
    if graph is not None:
        width = len(statement.target_columns or graph[0][1].columns)
        if len(result.columns) != width:
            raise statement.error(f"INSERT INTO {statement.name}: the query gives {len(result.columns)} "
                                  f"columns for {width}")
        return
    table = catalog.table(statement.name)
    if table is None:
        raise statement.error(f"INSERT INTO {statement.name}: no such table or graph")
    if table.kind == "file" and len(result.columns) != len(table.columns):
        raise statement.error(f"INSERT INTO {statement.name}: the query gives "
                              f"{len(result.columns)} columns, the table has {len(table.columns)}")


def prepare(text: str, settings: dict | None = None, root: str | None = None):
    """``(statements, catalog)``: the script read, every statement checked in order."""
    settings = dict(settings or {})
    statements = parse_script(substitute(text, settings) if "${" in text else text)
    catalog = Catalog(settings, root or os.getcwd())
    for statement in statements:
        if statement.kind != "use":
            apply(statement, catalog, check=True)
    return statements, catalog


def build(env, text: str, settings: dict | None = None, root: str | None = None, name: str = "sql"):
    """A pipeline of ``env`` with one task per INSERT (and SELECT) of the script, in order."""
    from gyreflow.api.dsl.planning import plan_insert, sink_of

    statements, catalog = prepare(text, settings, root)
    pipeline = env.pipeline(name)
    state = Catalog(dict(settings or {}), catalog.root)
    planned = []  # (statement, the catalogue as it stood there, its graph targets) per INSERT/SELECT
    for statement in statements:  # each task sees the catalogue as it stood at its statement
        if statement.kind == "use":
            continue
        apply(statement, state, check=False)
        if statement.kind == "graph" and _first_using(statement, state):
            planned.append((statement, state.copy(), USING))
        if statement.kind in ("insert", "query"):
            snapshot = state.copy()
            snapshot.settings = dict(state.settings)
            target = _graph_target(statement, snapshot) if statement.kind == "insert" else None
            planned.append((statement, snapshot, target))
    job = streaming.job_name(name)
    for group in streaming.groups(planned):
        if planned[group[0]][2] is USING:
            _add_using(pipeline, *planned[group[0]][:2], job)
        elif len(group) == 1:
            statement, snapshot, target = planned[group[0]]
            sink = sink_of(statement, snapshot, target, job) if statement.kind == "insert" else None
            _add_task(pipeline, statement, snapshot, sink, plan_insert)
        else:  # INSERTs into a graph and the query over it, per window in one task
            _add_group(pipeline, [planned[i] for i in group], job)
    return pipeline


USING = "using"  # a planned CREATE GRAPH that loads its `using` tables into its store


def _first_using(statement: Statement, catalog: Catalog) -> bool:
    """Whether a CREATE GRAPH declares a stored graph ``using`` tables whose folder holds nothing
    yet: GeaFlow loads the tables into a graph's store when the graph is first created, so that a
    later job that declares it again, without ``using``, finds the rows."""
    definition = parse_create_graph(statement)
    if definition.store not in STORED or not any(e.table for e in definition.types.values()):
        return False
    folder = catalog.graph_dirs[definition.name.lower()]
    return not any(files for _, _, files in os.walk(folder))


def _add_using(pipeline, statement, catalog, job: str) -> None:
    from gyreflow.api.connectors.file_sink import FileSink
    from gyreflow.api.dsl.catalog import USING_PREFIX
    from gyreflow.api.dsl.planning import table_rows
    from gyreflow.api.dsl.rows import json_row

    definition = catalog.graphs[parse_create_graph(statement).name.lower()]
    folder = catalog.graph_dirs[definition.name.lower()]
    label = f"statement-{statement.number}"

    def task(ctx):
        for number, element in enumerate(e for e in definition.types.values() if e.table):
            rows = table_rows(ctx, catalog, element.table.lower())
            rows.sink(FileSink(os.path.join(folder, element.label.lower()), format=json_row,
                               prefix=f"{USING_PREFIX}{job}", extension=".jsonl")).with_name(
                f"sink {number + 1}")
    task.__name__ = label
    pipeline.task(task, name=label)


def _add_task(pipeline, statement, catalog, sink, plan_insert) -> None:
    label = f"statement-{statement.number}"

    def task(ctx):
        plan_insert(ctx, statement.query, catalog, sink, statement.number,
                    f"statement {statement.number}, line {statement.line}")
    task.__name__ = label
    pipeline.task(task, name=label)


def _add_group(pipeline, planned: list, job: str) -> None:
    from gyreflow.api.dsl.planning import graph_prefix, plan_insert, plan_stream, sink_of

    label = "statements-" + "-".join(str(s.number) for s, _, _ in planned)

    def task(ctx):
        streaming.plan_group(ctx, planned, job, plan_stream, plan_insert, sink_of, graph_prefix)
    task.__name__ = label
    pipeline.task(task, name=label)


def run(env, text: str, settings: dict | None = None, root: str | None = None, name: str = "sql", **kw):
    """Run a script in ``env``; returns the pipeline's result (a SELECT's rows under ``rows-N``)."""
    pipeline = build(env, text, settings, root, name)
    if not pipeline.tasks:  # declarations only: nothing to run
        from gyreflow.api.language.pipeline import PipelineResult

        return PipelineResult({})
    try:
        return pipeline.execute(**kw)
    except Exception as exc:
        from gyreflow.api.dsl.rows import RowFormatError

        # a file table's row that does not fit its columns: its error names the file and line, the
        # task that read it adds nothing a user can act on. A task in another process sends its
        # error as text (no __cause__): "... failed in window 1: RowFormatError: <file>, line 2: ..."
        cause, marker = exc.__cause__, f"{RowFormatError.__name__}: "
        while cause is not None and not isinstance(cause, RowFormatError):
            cause = cause.__cause__
        if cause is not None:
            raise RowFormatError(str(cause)) from None
        if marker in str(exc) and not isinstance(exc, RowFormatError):
            raise RowFormatError(str(exc).split(marker, 1)[1].splitlines()[0]) from None
        raise


def selected_rows(result) -> list[tuple[int, list[tuple]]]:
    """``(statement number, rows)`` of each SELECT statement of a script's result, in order."""
    found = []
    for task in result.values():
        for name in task.collected:
            if name.startswith("rows-"):
                found.append((int(name[len("rows-"):]), task.output(name)))
    return sorted(found, key=lambda item: item[0])
