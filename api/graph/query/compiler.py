"""Graph queries compiled to a traversal program: partial matches travel from vertex to vertex."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gyreflow.api.graph.query.evaluate import (
    edge_label_and_properties,
    evaluate,
    has_aggregate,
    node_label_and_properties,
    project,
)
from gyreflow.api.graph.query.syntax import NodePattern, QueryAst, QuerySyntaxError
from gyreflow.api.graph.views import VertexCentricCompute
from gyreflow.plan.operators import EVERY_VERTEX


def _steps(ast: QueryAst) -> tuple:
    """The query's patterns as one list: ``("node", pattern, first_of_path)`` and ``("rel", pattern)``."""
    steps = []
    for path in ast.patterns:
        steps.append(("node", path.nodes[0], True))
        for rel, node in zip(path.rels, path.nodes[1:], strict=True):
            steps.append(("rel", rel))
            steps.append(("node", node, False))
    return tuple(steps)


def _properties_match(pattern_properties: tuple, properties: dict, params: dict) -> bool:
    return all(key in properties and properties[key] == evaluate(expr, {}, params)
               for key, expr in pattern_properties)


class MatchProgram(VertexCentricCompute):
    """The traversal that matches a query's patterns: a message is a partial match ``(request,
    params, step, bindings, used edges, path so far)``; a complete one is emitted as ``(request,
    bindings)``. Binding a node pattern that starts a path sends to every candidate vertex
    (``vertex_ids``; None: every vertex of the graph the request reads) or to the vertex its
    variable is already bound to."""

    def __init__(self, steps: tuple, vertex_ids: tuple | None, max_iterations: int,
                 directed: bool = True) -> None:
        self.steps = steps
        self.directed = directed
        self.vertex_ids = (EVERY_VERTEX,) if vertex_ids is None else vertex_ids
        self.starts_at_every_vertex = vertex_ids is None
        self.max_iterations = max_iterations

    def start(self, request: Any) -> Iterable[tuple[Any, Any]]:
        request_id, params = request[:2] if isinstance(request, tuple) else (request, {})
        return [(vertex, (request_id, params or {}, 0, {}, frozenset(), ()))
                for vertex in self._targets(0, {})]

    def _targets(self, step: int, bindings: dict) -> Iterable:
        variable = self.steps[step][1].variable
        if variable is not None and variable in bindings:
            return (bindings[variable][1],)
        return self.vertex_ids

    def compute(self, vertex, messages: list) -> None:
        for request_id, params, step, bindings, used, path in messages:
            if self.steps[step][0] == "node":
                self._node(vertex, request_id, params, step, bindings, used)
            else:
                self._relationship(vertex, request_id, params, step, bindings, used, path)

    def _node(self, vertex, request_id, params, step, bindings, used) -> None:
        pattern: NodePattern = self.steps[step][1]
        label, properties = node_label_and_properties(vertex.value)
        if any(name not in label for name in pattern.labels):
            return
        if not _properties_match(pattern.properties, properties, params):
            return
        if pattern.variable is not None:
            bound = bindings.get(pattern.variable)
            if bound is not None and (bound[0] != "node" or bound[1] != vertex.id):
                return
            bindings = {**bindings, pattern.variable: ("node", vertex.id, vertex.value)}
        self._advance(vertex, request_id, params, step + 1, bindings, used)

    def _advance(self, vertex, request_id, params, step, bindings, used) -> None:
        if step == len(self.steps):
            vertex.emit((request_id, bindings))
        elif self.steps[step][0] == "rel":
            self._relationship(vertex, request_id, params, step, bindings, used, ())
        else:  # a new path of the pattern
            message = (request_id, params, step, bindings, used, ())
            for target in self._targets(step, bindings):
                vertex.send(target, message)

    def _relationship(self, vertex, request_id, params, step, bindings, used, path) -> None:
        rel = self.steps[step][1]
        if rel.min_hops <= len(path):
            bound = bindings
            if rel.variable is not None:
                value = list(path) if rel.variable_length else path[0]
                if rel.variable in bindings and bindings[rel.variable] != ("rel", value):
                    bound = None
                else:
                    bound = {**bindings, rel.variable: ("rel", value)}
            if bound is not None:
                self._node(vertex, request_id, params, step + 1, bound, used)
        if len(path) >= rel.max_hops:
            return
        for other, value, key, edge in self._edges(vertex, rel.direction):
            if key in used:
                continue
            label, properties = edge_label_and_properties(value)
            if rel.types and label not in rel.types:
                continue
            if not _properties_match(rel.properties, properties, params):
                continue
            vertex.send(other, (request_id, params, step, bindings, used | {key}, (*path, edge)))

    def _edges(self, vertex, direction: str) -> list:
        """``(other end, value, identity, (src, dst, value))`` of the edges ``direction`` follows."""
        found = []
        undirected = not self.directed
        if undirected:  # every incident edge is an out-edge, whatever the pattern's direction
            sides = ("out",)
        else:
            sides = ("out", "in") if direction == "both" else (direction,)
        for side in sides:
            edges = vertex.out_edges if side == "out" else vertex.in_edges
            seen: dict = {}
            for other, value in edges:
                src, dst = (vertex.id, other) if side == "out" else (other, vertex.id)
                if side == "in" and src == dst and direction == "both":
                    continue  # a self-loop is followed once
                occurrence = seen[(src, dst, repr(value))] = seen.get((src, dst, repr(value)), -1) + 1
                key = (src, dst, repr(value), occurrence) if not undirected else \
                    (tuple(sorted((repr(src), repr(dst)))), repr(value), occurrence)
                found.append((other, value, key, (src, dst, value)))
        return found


class Query:
    """A parsed query: ``program(vertex_ids)`` is its traversal, ``rows(bindings)`` the rows of
    one request's matches (WHERE, RETURN, DISTINCT, aggregation, ORDER BY, SKIP, LIMIT)."""

    def __init__(self, text: str) -> None:
        from gyreflow.api.graph.query.cypher import parse  # the DSL's reader of MATCH (sqlglot's tokens)

        self.text = text
        self.ast = parse(text)
        self.steps = _steps(self.ast)
        self.columns = tuple(item.alias for item in self.ast.items)
        self.aggregated = any(has_aggregate(item.expr) for item in self.ast.items)
        hops = sum(rel.max_hops for path in self.ast.patterns for rel in path.rels)
        self.max_iterations = hops + len(self.ast.patterns) + 2

    @property
    def parameters(self) -> set:
        """The names of the parameters the query uses (``$name``)."""
        return _parameters(self.ast)

    def check_parameters(self, params: dict) -> None:
        """Raise ``QuerySyntaxError`` naming a parameter the query uses and ``params`` lacks."""
        missing = sorted(self.parameters - set(params))
        if missing:
            msg = f"the query needs parameter ${missing[0]}"
            raise QuerySyntaxError(msg)

    def program(self, vertex_ids: Iterable | None = None, directed: bool = True) -> MatchProgram:
        """The traversal program; ``vertex_ids`` are the candidates of a path's first node (None:
        every vertex of the graph a request reads, for a query whose later patterns each share a
        variable with an earlier one)."""
        if vertex_ids is None:
            self._check_joined()
            return MatchProgram(self.steps, None, self.max_iterations, directed)
        return MatchProgram(self.steps, tuple(vertex_ids), self.max_iterations, directed)

    def _check_joined(self) -> None:
        """Refuse a later pattern whose first node is not bound yet: its candidates would be every
        vertex of every task, a message no superstep can address."""
        bound: set = set()
        for index, step in enumerate(self.steps):
            pattern = step[1]
            if step[0] == "node" and step[2] and index > 0 and pattern.variable not in bound:
                msg = (f"the pattern starting at ({pattern.variable or ''}) shares no variable with "
                       "the patterns before it: start it with a node they bind, or give "
                       "query_graph the vertex ids to start from")
                raise QuerySyntaxError(msg)
            if pattern.variable is not None:
                bound.add(pattern.variable)

    def rows(self, matches: Iterable[dict], params: dict | None = None) -> list[dict]:
        """The result rows (dicts keyed by column) of one request's ``bindings``."""
        params = params or {}
        if self.ast.where is not None:
            matches = [m for m in matches if evaluate(self.ast.where, m, params) is True]
        return project(self.ast, list(matches), params, self.aggregated)

    def explain(self) -> str:
        """A text plan: the traversal's steps, then what runs after collection."""
        from gyreflow.api.graph.query.arrays import array_plan

        plan = array_plan(self)  # a directed graph's
        if isinstance(plan, str):
            lines = [f"Traversal (one superstep per hop; partial matches travel as messages: "
                     f"{plan}):"]
        else:
            lines = [f"{plan.explain()}:"]
        for step in self.steps:
            pattern = step[1]
            if step[0] == "node":
                start = "start at every vertex" if step[2] and (
                    pattern.variable is None or step is self.steps[0]) else "continue"
                labels = "".join(f":{label}" for label in pattern.labels)
                lines.append(f"  Node ({pattern.variable or '_'}{labels}) "
                             f"props={[k for k, _ in pattern.properties]} [{start if step[2] else 'here'}]")
            else:
                lines.append(f"  Expand -[{pattern.variable or '_'}:{'|'.join(pattern.types)}]- "
                             f"{pattern.direction} hops {pattern.min_hops}..{pattern.max_hops} "
                             "(no edge repeated)")
        lines.append("After collection:")
        if self.ast.where is not None:
            lines.append("  Filter WHERE")
        kind = "Aggregate" if self.aggregated else "Project"
        lines.append(f"  {kind} {', '.join(self.columns)}" + (" DISTINCT" if self.ast.distinct else ""))
        if self.ast.order:
            lines.append(f"  Order by {len(self.ast.order)} key(s)")
        if self.ast.skip is not None or self.ast.limit is not None:
            lines.append("  Skip/Limit")
        return "\n".join(lines)


def _parameters(node: Any) -> set:
    if isinstance(node, tuple) and len(node) == 2 and node[0] == "param":
        return {node[1]}
    if isinstance(node, (tuple, list)):
        return set().union(*(_parameters(part) for part in node)) if node else set()
    if hasattr(node, "__attrs_attrs__"):
        return set().union(*(_parameters(getattr(node, a.name)) for a in node.__attrs_attrs__))
    return set()


def parse_query(text: str) -> Query:
    """A ``Query`` of ``text`` (``QuerySyntaxError`` / ``UnsupportedQueryError`` if it is not one)."""
    return Query(text)


def query_graph(graph, query: Query | str, requests, vertex_ids: Iterable | None = None,
                name: str | None = None, versions: bool = False):
    """The stream of ``(request_id, bindings)`` matches of ``query`` for each request ``(request_id,
    params)`` on ``graph``; ``Query.rows`` turns one request's bindings into rows.

    ``vertex_ids`` are the candidates of a path's first node (those a version lacks are skipped);
    None (the default) starts at every vertex of the version each request reads, so a changing
    graph needs no list of its vertices.
    With ``versions``, a request ``(request_id, params, version)`` is answered on the version it
    names (a window id, None: the current one, ``"completed"``: the window before; see
    ``GraphView.retained_versions``)."""
    if isinstance(query, str):
        query = Query(query)
    program = query.program(vertex_ids, graph.directed)
    if not versions:
        return graph.traversal(requests, program, name=name or "query")
    return graph.traversal(requests, program, name=name or "query", version=request_version)


def request_version(request: Any) -> Any:
    """The version a query request ``(request_id, params, version)`` names (None: the current)."""
    return request[2] if isinstance(request, tuple) and len(request) > 2 else None


__all__ = ["MatchProgram", "Query", "QuerySyntaxError", "parse_query", "query_graph"]
