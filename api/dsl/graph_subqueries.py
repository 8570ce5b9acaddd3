"""Path sub-queries of a MATCH (``COUNT((a)->(b) => b.x)``, ``EXISTS (a)->(b)``): per binding, the
paths from its bound elements, aggregated."""

from __future__ import annotations

from sqlglot import exp

from gyreflow.api.dsl.gql import GqlQuery
from gyreflow.api.dsl.graphs import Edge, Graph, Vertex, _Filters, _match_path, bindings_relation
from gyreflow.api.dsl.queries import Relation, Scope


class SubQueries:
    """Path sub-queries: per binding, the paths from its bound elements, aggregated."""

    def __init__(self, query: GqlQuery, graph: Graph, filters: _Filters) -> None:
        self.query, self.graph, self.filters = query, graph, filters

    def compile(self, scope: Scope, key: int):
        kind, path, value = self.query.subqueries[key]
        # the match's elements: unqualified columns, or all of RETURN's (a SELECT over __bindings)
        elements = [(i, name) for i, (qualifier, name) in enumerate(scope.relation.columns)
                    if qualifier in (None, "__bindings")]
        variables = [item.var for item in path]
        catalog = scope.catalog
        aggregate = None if kind == "exists" else catalog.aggregate(kind)

        def run(ctx):
            row = ctx[0]
            seed = {}
            for i, name in elements:
                if isinstance(row[i], (Vertex, Edge)):
                    seed[_original(path, name)] = row[i]
            found = _match_path(self.graph, path, seed, self.filters)
            if kind == "exists":
                return bool(found)
            order = list(dict.fromkeys([*seed, *variables]))
            relation = bindings_relation(found, order)
            # the value reads the path's bindings, then the outer row's columns (a request's p.id)
            relation = Relation(relation.columns + scope.relation.columns, [r + row for r in relation.rows])
            fn = Scope(relation, catalog).compile(value)
            result = aggregate([fn((r, None)) for r in relation.rows])
            return 0.0 if result == 0 and kind == "sum" and doubles else result
        doubles = _double_valued(value, catalog, self.query)
        return run


def _double_valued(value, catalog, query: GqlQuery) -> bool:
    """Whether a sub-query's value is a property the graph declares as a double (its empty SUM is 0.0)."""
    definition = catalog.graphs.get((query.graph or "").lower())
    if value is None or definition is None or not isinstance(value, exp.Column):
        return False
    name = value.name.lower()
    return any(c.lower() == name and t.lower().split("(")[0] in ("double", "float", "decimal")
               for element in definition.types.values() for c, t in element.columns)


def _original(path: list, name: str) -> str:
    """The spelling a path uses for a variable (names are compared without case)."""
    for item in path:
        if item.var.lower() == name:
            return item.var
    return name


__all__ = ["SubQueries"]
