"""A MATCH block of a script evaluated: on the array engine where the pattern allows
(``graph_arrays``), else by the row matcher (``graphs``), with sub-queries and CALL."""

from __future__ import annotations

from gyreflow.api.dsl.algorithms import call
from gyreflow.api.dsl.gql import GqlQuery
from gyreflow.api.dsl.graph_arrays import array_relation, vertex_positions, why_rows
from gyreflow.api.dsl.graph_returns import array_return, why_not
from gyreflow.api.dsl.graph_subqueries import SubQueries
from gyreflow.api.dsl.graph_windows import assp, match_starts
from gyreflow.api.dsl.graphs import (
    Variables,
    _Filters,
    _let,
    _match,
    _request_table,
    _schema,
    _variables,
    bindings_relation,
    load_graph,
)
from gyreflow.api.dsl.queries import QueryError, Relation, Scope


def evaluate_gql(query: GqlQuery, catalog, block: str = "") -> Relation:
    """The rows of a MATCH block: its bindings, filtered, then RETURNed. Over a graph the script's
    inserts stream in (``catalog.window``), a CALL gives what its window changed, and a MATCH
    starts where GeaFlow's dynamic traversal starts (``graph_windows.match_starts``)."""
    if query.graph is None:
        raise QueryError("a MATCH needs a graph: USE GRAPH name first")
    if query.call is not None:
        return _called(query, catalog, block)
    graph = load_graph(query.graph, catalog)
    filters = _Filters(catalog)
    order = Variables(_variables(query))
    order.schema = _schema(query, order, catalog)
    request = _request_table(query, order, catalog)
    starts = match_starts(query, graph, catalog.window, catalog.settings) if request is None else None
    if starts is not None:  # the row matcher from those vertices
        first = query.matches[0].patterns[0][0].var
        seeds = [{first: graph.vertices[v]} for v in sorted(starts, key=str) if v in graph.vertices]
        relation = bindings_relation(_match(query, graph, seeds, order, filters, catalog), order)
        return _returned(query, relation, order, catalog)
    if query.subqueries:
        catalog = catalog.copy()
        catalog.subquery_compiler = SubQueries(query, graph, filters).compile
    result = _returned_on_arrays(query, graph, filters, catalog) if request is None else None
    if result is not None:  # the RETURN computed on the bindings' arrays (graph_returns)
        return _filtered(query, result, catalog)
    # array joins over the edges where the pattern allows (graph_arrays.why_rows: when not)
    relation = array_relation(query, graph, filters, order) if request is None else None
    if relation is not None:
        for clause in query.matches:  # each reads only what its clause and those before bind
            if clause.where is not None:
                test = Scope(relation, catalog).compile(clause.where)
                relation = Relation(relation.columns,
                                    [r for r in relation.rows if test((r, None)) is True])
        if query.lets:  # after the last clause: on the bindings, as the row matcher's
            bindings = [dict(zip(order, row, strict=False)) for row in relation.rows]
            bindings = _let(query, bindings, order, catalog, len(query.matches), graph)
            relation = bindings_relation(bindings, order)
    elif request is None:
        relation = bindings_relation(_match(query, graph, [{}], order, filters, catalog), order)
    else:  # a query per row of the request table, its row bound to the table's name
        requests = catalog.relation(request)
        bindings, order = [], Variables([*order, request], order.schema)
        for row in requests.rows:
            values = {name: value for (_, name), value in zip(requests.columns, row, strict=True)}
            filters.request = (request, values)
            bindings.extend(_match(query, graph, [{request: values}], order, filters, catalog))
        relation = bindings_relation(bindings, order)
    return _returned(query, relation, order, catalog)


def _returned(query: GqlQuery, relation: Relation, order, catalog) -> Relation:
    """The RETURN of a block's bindings (or the bindings), then its THEN FILTERs."""
    if query.returns is None:
        result = Relation([c for c in relation.columns if c[0] is None],
                          [r[:len(order)] for r in relation.rows])
    else:
        result = catalog.with_relation("__bindings", relation).evaluate(query.returns)
    return _filtered(query, result, catalog)


def _called(query: GqlQuery, catalog, block: str) -> Relation:
    """The rows of a CALL block: over a streamed graph, the rows the engine's incremental program
    gave this window (``streaming.ENGINE_CALLS``), or ``assp`` from this window's changes."""
    name, args, columns = query.call
    algorithm = catalog.algorithm(name) or name
    window = catalog.window
    if window is not None and block in window.calls:
        rows = sorted((catalog.rows or {}).get(block, ()), key=lambda r: (str(type(r[0])), r[0]))
    else:
        graph = load_graph(query.graph, catalog)
        values = [Scope(Relation([], []), catalog).compile(a)(((), None)) for a in args]
        if algorithm.lower() == "assp":
            streamed = window is not None and query.graph.lower() in window.changed
            rows = assp(graph, window.changed[query.graph.lower()] if streamed else None,
                        window.memory.setdefault(block, {}) if streamed else {})
        else:
            rows = call(algorithm, graph, values)
    relation = Relation([(None, c.lower()) for c in columns], [tuple(r[:len(columns)]) for r in rows])
    if query.returns is None:
        return relation
    return catalog.with_relation("__bindings", relation).evaluate(query.returns)


def _filtered(query: GqlQuery, result: Relation, catalog) -> Relation:
    """``result`` after the block's THEN FILTERs."""
    for condition in query.filters:
        test = Scope(result, catalog).compile(condition)
        result = Relation(result.columns, [r for r in result.rows if test((r, None)) is True])
    return result


def why_rows_return(query: GqlQuery, catalog) -> str | None:
    """Why ``query``'s RETURN runs over rows of its bindings; None when it runs on their arrays
    (``graph_returns``)."""
    if any(clause.where is not None for clause in query.matches):
        return "a MATCH's WHERE"
    if query.lets or query.returns is None or query.call is not None:
        return "LET, no RETURN, or CALL"
    reason = why_rows(query)
    if reason is not None:
        return reason
    paths = [path for clause in query.matches for path in clause.patterns]
    if any(not path[i].var.startswith("__") for path in paths for i in range(1, len(path), 2)):
        return "a named edge"
    named = {node.var.lower() for path in paths for node in path[0::2] if not node.var.startswith("__")}
    return why_not(query.returns, named, catalog)


def _returned_on_arrays(query: GqlQuery, graph, filters, catalog) -> Relation | None:
    if why_rows_return(query, catalog) is not None:
        return None
    found = vertex_positions(query, graph, filters)
    return array_return(query.returns, *found) if found is not None else None
