"""A MATCH block of a script evaluated: on the array engine where the pattern allows
(``graph_arrays``), else by the row matcher (``graphs``), with sub-queries and CALL."""

from __future__ import annotations

from gyreflow.api.dsl.algorithms import call
from gyreflow.api.dsl.gql import GqlQuery
from gyreflow.api.dsl.graph_arrays import array_relation
from gyreflow.api.dsl.graph_subqueries import SubQueries
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


def evaluate_gql(query: GqlQuery, catalog) -> Relation:
    """The rows of a MATCH block: its bindings, filtered, then RETURNed."""
    if query.graph is None:
        raise QueryError("a MATCH needs a graph: USE GRAPH name first")
    graph = load_graph(query.graph, catalog)
    filters = _Filters(catalog)
    order = Variables(_variables(query))
    order.schema = _schema(query, order, catalog)
    if query.call is not None:
        name, args, columns = query.call
        values = [Scope(Relation([], []), catalog).compile(a)(((), None)) for a in args]
        rows = call(catalog.algorithm(name) or name, graph, values)
        relation = Relation([(None, c.lower()) for c in columns], [tuple(r[:len(columns)]) for r in rows])
        if query.returns is None:
            return relation
        return catalog.with_relation("__bindings", relation).evaluate(query.returns)
    if query.subqueries:
        catalog = catalog.copy()
        catalog.subquery_compiler = SubQueries(query, graph, filters).compile
    request = _request_table(query, order, catalog)
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
    if query.returns is None:
        result = Relation([c for c in relation.columns if c[0] is None],
                          [r[:len(order)] for r in relation.rows])
    else:
        result = catalog.with_relation("__bindings", relation).evaluate(query.returns)
    for condition in query.filters:
        test = Scope(result, catalog).compile(condition)
        result = Relation(result.columns, [r for r in result.rows if test((r, None)) is True])
    return result
