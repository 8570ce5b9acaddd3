"""Graph queries: a subset of openCypher MATCH compiled to a traversal vertex program."""

from gyreflow.api.graph.query.compiler import Query, parse_query, query_graph
from gyreflow.api.graph.query.syntax import QuerySyntaxError, UnsupportedQueryError

__all__ = ["Query", "QuerySyntaxError", "UnsupportedQueryError", "parse_query", "query_graph"]
