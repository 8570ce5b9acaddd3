"""A graph the script's INSERTs change window by window while a MATCH or CALL of the same script
queries it: the inserts and the query planned into one task, the query run per window over the
graph so far (GeaFlow's dynamic graph), the incremental CALLs on the engine's changing graph."""

from __future__ import annotations

import functools
import re

import attrs

# CALLs that emit per window the vertices whose value changed, on the engine's incremental programs
ENGINE_CALLS = {"sssp": "bfs", "inc_wcc": "wcc"}


@attrs.frozen
class Changes:
    """Which rows of a query's input are a streamed graph's changes: table -> (graph, kind, the
    positions of the vertex id, or of an edge's ends)."""

    tables: dict
    calls: frozenset = frozenset()

    def touched(self, rows: dict) -> dict:
        found: dict = {}
        for table, (graph, _kind, positions) in self.tables.items():
            ids = found.setdefault(graph, set())
            for row in rows.get(table, ()):
                ids.update(row[p] for p in positions)
        return found


def job_name(name: str) -> str:
    """A pipeline's name as a part of file names."""
    return re.sub(r"[^\w.-]", "_", name)


def _graphs_read(statement, catalog) -> set[str]:
    """The graphs a statement's query reads (by their inserted rows' tables)."""
    tables = set(catalog.base_tables(statement.query)) if statement.query is not None else set()
    return {name for name, g in catalog.graphs.items()
            if any(catalog.graph_table(g, label) in tables for label in g.types)}


def _windowed(statement, catalog) -> bool:
    tables = catalog.base_tables(statement.query) if statement.query is not None else []
    return any(catalog.tables[t].kind != "graphdata" and catalog.tables[t].window_size(catalog.settings) > 0
               for t in tables)


def groups(planned: list) -> list[list[int]]:
    """The tasks of a script, each a list of indexes into ``planned`` (``(statement, catalogue,
    graph targets)`` per INSERT or SELECT, in order): one statement each, except that the INSERTs
    into a graph that read tables in windows join the first later statement that queries the graph,
    in its task, so that the query runs per window over the graph they grow."""
    pending: dict[str, list[int]] = {}
    merged: dict[int, list[int]] = {}
    for i, (statement, catalog, targets) in enumerate(planned):
        if isinstance(targets, str):  # a graph loading its `using` tables
            continue
        if targets is None:
            inserts = [j for g in sorted(_graphs_read(statement, catalog)) for j in pending.pop(g, [])]
            if inserts:
                merged[i] = sorted(set(inserts))
        elif _windowed(statement, catalog):
            for graph in {t[0].name.lower() for t in targets}:
                pending.setdefault(graph, []).append(i)
    joined = {j for inserts in merged.values() for j in inserts}
    return [[*merged.get(i, []), i] for i in range(len(planned)) if i not in joined]


@attrs.define
class Streamed:
    """What the task of a query over streamed graphs gives its query operator: the inserts' rows of
    each graph table, the files of the folder they write (not read again), the graph tables'
    changes, and the CALLs the engine's incremental programs answer (block name -> stream)."""

    tables: dict
    exclude: dict
    changes: Changes
    calls: dict
    made: dict = attrs.Factory(dict)  # graph table -> its stream, once made


def plan_group(ctx, planned: list, job: str, plan_stream, plan_insert, sink_of, graph_prefix) -> None:
    """The streams of one task that holds INSERTs into graphs and the query over them (the last)."""
    tables: dict[str, list] = {}
    exclude: dict[str, tuple] = {}
    changes: dict = {}
    for statement, catalog, targets in planned[:-1]:
        before = len(ctx.builder.drafts)
        rows = plan_stream(ctx, statement.query, catalog, _where(statement))
        sinks = sink_of(statement, catalog, targets, job)
        for (project, sink), (graph, element, _, _) in zip(sinks, targets, strict=True):
            number = len(tables) + 1
            projected = rows.map(project).with_name(f"columns {number}")
            projected.sink(sink).with_name(f"sink {number}")
            table = catalog.graph_table(graph, element.label)
            tables.setdefault(table, []).append(projected)
            exclude[table] = (*exclude.get(table, ()), graph_prefix(job, statement.number) + "-")
            names = [c.lower() for c, _ in element.columns]
            ends = [element.id_column] if element.kind == "vertex" else \
                [element.source_column, element.target_column]
            changes[table] = (graph.name.lower(), element.kind, tuple(names.index(c.lower()) for c in ends))
        _named(ctx, before, f"statement {statement.number}: ")
    before = len(ctx.builder.drafts)
    statement, catalog, target = planned[-1]
    streamed = Streamed(tables, exclude, Changes(changes), {})
    for name, query in catalog.gql.items():
        if name.startswith(f"__gql_{statement.number}_") and query.call is not None:
            calls = _engine_call(ctx, name, query, catalog, streamed)
            if calls is not None:
                streamed.calls[name] = calls
    streamed.changes = Changes(changes, frozenset(streamed.calls))
    sink = sink_of(statement, catalog, target, job) if statement.kind == "insert" else None
    plan_insert(ctx, statement.query, catalog, sink, statement.number, _where(statement), streamed)
    _named(ctx, before, f"statement {statement.number}: ")


def _named(ctx, before: int, prefix: str) -> None:
    """The operators a statement added to a task that holds several (from the ``before``-th on),
    named with its number."""
    for draft in ctx.builder.drafts[before:]:
        if draft.name and not draft.name.startswith("statement "):
            draft.name = prefix + draft.name


def _where(statement) -> str:
    return f"statement {statement.number}, line {statement.line}"


def _engine_call(ctx, name: str, query, catalog, streamed: Streamed):
    """The stream of ``(vertex, value)`` per window of an incremental CALL over a streamed graph, on
    the engine's changing graph (``incremental_bfs``: hops along edges; ``incremental_wcc``); None
    for a CALL the engine does not run (it runs per window in the query operator)."""
    from gyreflow.api.dsl.planning import graph_rows
    from gyreflow.api.dsl.queries import Relation, Scope

    algorithm = catalog.algorithm(query.call[0]) or query.call[0].lower()
    kind = ENGINE_CALLS.get(algorithm)
    graph = catalog.graphs.get((query.graph or "").lower())
    if kind is None or graph is None:
        return None
    args = [Scope(Relation([], []), catalog).compile(a)(((), None)) for a in query.call[1]]
    if (kind == "bfs" and len(args) != 1) or (kind == "wcc" and len(args) > 2):
        return None  # sssp along edges of one label, or of vertices of one label: in the operator
    vertices, edges = [], []
    for label, element in graph.types.items():
        table = catalog.graph_table(graph, label)
        names = [c.lower() for c, _ in element.columns]
        rows = graph_rows(ctx, catalog, table, streamed)
        if element.kind == "vertex":
            vertices.append(rows.map(functools.partial(_pick, names.index(element.id_column.lower()))))
        else:
            edges.append(rows.map(functools.partial(_ends, names.index(element.source_column.lower()),
                                                    names.index(element.target_column.lower()))))
    if not edges:
        return None
    from gyreflow.api.graph import GraphView
    from gyreflow.api.graph_algorithms import incremental_bfs, incremental_wcc

    view = GraphView(_union(vertices) if vertices else None, _union(edges), directed=kind == "bfs",
                     name=f"graph {graph.name}")
    if kind == "bfs":
        changed = incremental_bfs(view, args[0])
    else:
        changed = incremental_wcc(view)
    return changed.filter(_reached).with_name(f"{query.call[0]} changes")


def _union(streams: list):
    return streams[0].union(*streams[1:]) if len(streams) > 1 else streams[0]


def _pick(position: int, row: tuple):
    return row[position]


def _ends(source: int, target: int, row: tuple) -> tuple:
    return (row[source], row[target])


def _reached(record) -> bool:
    from gyreflow.api.graph_algorithms import UNREACHABLE

    return record[1] is not None and record[1] != UNREACHABLE
