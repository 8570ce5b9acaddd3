"""One request of a graph query on a graph: array joins where the plan allows, else the per-path traversal."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gyreflow.api.graph.query.compiler import Query, query_graph


class MatchRun:
    """How ``query`` runs for ``params`` on a (``directed``) graph: ``stream`` adds its operator
    to a task, ``rows`` turns what the stream carried into the result rows.

    ``plan`` is the ``ArrayPlan`` when the query runs as array joins (``arrays`` and
    ``array_plan`` allow it), else None and ``fallback`` says why it runs per path.

    >>> from gyreflow.api import Environment
    >>> from gyreflow.api.graph import GraphView
    >>> run = MatchRun(Query("MATCH (a)-[]->(b)-[]->(c) RETURN count(*) AS n"), {})
    >>> p = Environment.local(progress=False).pipeline("paths")
    >>> @p.task
    ... def paths(ctx):
    ...     graph = GraphView(None, ctx.source([(1, 2), (2, 3), (2, 4)]))
    ...     run.stream(ctx, graph).collect("matches")
    >>> run.rows(p.execute().output("matches"))
    [{'n': 2}]
    """

    def __init__(self, query: Query | str, params: dict | None = None,
                 vertex_ids: Iterable | None = None, directed: bool = True,
                 arrays: bool = True) -> None:
        from gyreflow.api.graph.query.arrays import array_plan

        self.query = Query(query) if isinstance(query, str) else query
        self.params = params or {}
        self.vertex_ids = None if vertex_ids is None else list(vertex_ids)
        self.directed = directed
        found = array_plan(self.query, directed) if arrays else "the per-path engine was asked for"
        self.plan = None if isinstance(found, str) else found
        self.fallback = found if isinstance(found, str) else None
        self.seconds = None  # the query's own time, once ``rows`` ran on an array plan

    def stream(self, ctx, graph, name: str = "query"):
        """The stream of the query's matches on ``graph`` (in a task given ``ctx``)."""
        if self.plan is not None:
            return graph.compute(self.plan.program(self.params, self.vertex_ids), name=name)
        requests = ctx.source([(0, self.params)], name=f"{name}-request")
        return query_graph(graph, self.query, requests, self.vertex_ids, name=name)

    def rows(self, output: Iterable, vertex_values: Any = None) -> list[dict]:
        """The result rows from what ``stream`` carried; ``vertex_values`` maps vertex ids to
        their values (a dict; the array plan reads the properties of the vertices it bound from
        it, None: every value None)."""
        output = list(output)
        if self.plan is None:
            return self.query.rows([bindings for _, bindings in output], self.params)
        rows, self.seconds = self.plan.timed_rows(self.query, output, self.params,
                                                  vertex_values if vertex_values is not None else {})
        return rows

    def explain(self) -> str:
        """The engine that runs the query, and why when it is the per-path one."""
        if self.plan is not None:
            return self.plan.explain()
        return f"Per-path traversal ({self.fallback})"


__all__ = ["MatchRun"]
