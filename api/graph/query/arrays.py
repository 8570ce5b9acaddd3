"""Which MATCH queries run as array joins, their plan, and their rows from the tasks' results.

``array_plan(query, directed)`` gives an ``ArrayPlan`` (or the reason it cannot, for the per-path
traversal of ``compiler``): one path pattern whose relationship variables (if any) only WHERE
conjuncts of their own read (an edge mask). A directed graph's tasks hold the values of their
out-edges only: a path whose filtered relationships all follow in-edges is turned round, and
otherwise a filtered relationship's in-edges are checked where the row arrives (the edge's
source, whose task holds its value). ``ArrayMatch`` (``array_match``) runs the plan; ``ArrayPlan.rows`` turns
the tasks' results into the rows ``Query.rows`` gives for the same matches.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import attrs

from gyreflow.api.graph.query.evaluate import has_aggregate, project, variables_of
from gyreflow.api.graph.query.syntax import NodePattern, PathPattern, QueryAst, RelPattern

_FLIP = {"out": "in", "in": "out", "both": "both"}
# Expressions that cannot raise, so they may be evaluated for vertices no match reaches.
_SAFE = {"lit", "param", "var", "prop", "and", "or", "xor", "not", "cmp", "isnull", "in", "list",
         "fn", "test"}


def _safe(expr: Any) -> bool:
    if not isinstance(expr, tuple) or not expr or not isinstance(expr[0], str):
        return True
    if expr[0] not in _SAFE:
        return False
    return all(_safe(part) if isinstance(part, tuple) and part and isinstance(part[0], str)
               else all(_safe(p) for p in part) if isinstance(part, tuple) else True
               for part in expr[1:])


def _conjuncts(expr: tuple | None) -> list:
    if expr is None:
        return []
    if expr[0] == "and":
        return _conjuncts(expr[1]) + _conjuncts(expr[2])
    return [expr]


def _and(parts: list) -> tuple | None:
    if not parts:
        return None
    result = parts[0]
    for part in parts[1:]:
        result = ("and", result, part)
    return result


@attrs.frozen
class ArrayPlan:
    """A query's path as array joins.

    ``nodes`` and ``rels`` are the path in the order it is expanded (``reversed``: the query's
    path turned round); ``first`` holds the positions of the nodes the start vertex ids restrict
    (the first node of each of the query's path patterns that no earlier one binds); ``pushed``
    holds, per node position, the WHERE conjuncts that read only that node's variable (evaluated
    once per vertex, as a mask); ``where`` the rest; ``keep`` the
    node positions whose vertex ids the rows need (first position of each variable the rest of
    the query reads); ``count_only``: RETURN count(*) and nothing else, counted per task."""

    nodes: tuple
    rels: tuple
    first: tuple
    pushed: tuple
    where: tuple | None
    keep: tuple
    keep_names: tuple
    count_only: bool
    distinct_rows: bool
    directed: bool
    reversed: bool = False
    rel_pushed: tuple = ()  # per relationship: the WHERE conjuncts on its variable alone
    verify: tuple = ()  # per relationship: its in-edges' filter is checked on arrival
    trails: bool = True  # no edge twice in a match (openCypher); False: walks (GeaFlow's MATCH)
    keep_hops: tuple = ()  # the hops whose edge (src, dst, occurrence) the rows keep too

    @property
    def bound_at(self) -> tuple:
        """Per node position: the first position of its variable (itself when it is the first)."""
        first: dict = {}
        found = []
        for position, node in enumerate(self.nodes):
            if node.variable is None:
                found.append(position)
            else:
                found.append(first.setdefault(node.variable, position))
        return tuple(found)

    @property
    def max_hops(self) -> int:
        return sum(rel.max_hops for rel in self.rels)

    def program(self, params: dict, vertex_ids=None):
        """The array program that finds the matches of this plan for ``params``, starting the
        query's first node at ``vertex_ids`` (None: every vertex)."""
        from gyreflow.api.graph.query.array_match import ArrayMatch

        return ArrayMatch(self, params, None if vertex_ids is None else frozenset(vertex_ids))

    def rows(self, query, results, params: dict, vertex_values) -> list[dict]:
        """The rows of ``query`` from the program's output ``(vertex id, task result)`` records;
        ``vertex_values`` maps a vertex id to its value (``.get``; None for a vertex only edges
        name)."""
        rows, _ = self.timed_rows(query, results, params, vertex_values)
        return rows

    def timed_rows(self, query, results, params: dict, vertex_values) -> tuple[list[dict], float]:
        """``rows`` and the seconds the query took: the slowest task's matching plus this."""
        started = time.perf_counter()
        payloads = [value for _, value in results if value is not None]
        seconds = max((p["seconds"] for p in payloads), default=0.0)
        ast: QueryAst = query.ast
        if self.count_only:
            total = sum(p["count"] for p in payloads)
            rows = [{query.columns[0]: total}]
        else:
            from gyreflow.api.graph.query.array_rows import column_rows

            tables = [table for p in payloads for table in p["rows"] if len(table)]
            rows = column_rows(self, query, tables, params, vertex_values)
            if rows is None:
                rows = project(ast, self._matches(tables, params, vertex_values), params,
                               query.aggregated)
        return rows, seconds + time.perf_counter() - started

    def _matches(self, tables: list, params: dict, vertex_values) -> list[dict]:
        import numpy as np

        from gyreflow.api.graph.query.evaluate import evaluate

        counts: Counter = Counter()
        for table in tables:
            if table.dtype != object and table.shape[1]:
                unique, times = np.unique(table, axis=0, return_counts=True)
                counts.update(dict(zip(map(tuple, unique.tolist()), times.tolist(), strict=True)))
            else:
                counts.update(map(tuple, table.tolist()))
        matches = []
        names = self.keep_names
        for key, times in counts.items():
            binding = {name: ("node", vertex, vertex_values.get(vertex))
                       for name, vertex in zip(names, key, strict=True)}
            if self.where is not None and evaluate(self.where, binding, params) is not True:
                continue
            matches.extend([binding] * (1 if self.distinct_rows else times))
        return matches

    def explain(self) -> str:
        """How the plan runs, for ``Query.explain``."""
        turned = " (the path turned round: its filtered relationships follow in-edges)" \
            if self.reversed else ""
        done = "counted per task" if self.count_only else "vertex ids of " + (
            ", ".join(self.keep_names) or "no variable") + " collected"
        return (f"Array joins{turned}: per task a CSR of the edges; partial paths expand as arrays "
                f"of vertex ids, one hop per superstep; {done}")


def _reverse(path: PathPattern) -> PathPattern:
    rels = tuple(attrs.evolve(rel, direction=_FLIP[rel.direction]) for rel in reversed(path.rels))
    return PathPattern(tuple(reversed(path.nodes)), rels)


def _merged(end: NodePattern, start: NodePattern) -> NodePattern:
    labels = tuple(dict.fromkeys((*end.labels, *start.labels)))
    return NodePattern(end.variable, labels, end.properties + start.properties)


def chain(patterns: tuple) -> tuple[PathPattern, tuple] | None:
    """The comma-separated path patterns as one path, each joined (turned round where needed) at
    a node variable that ends (or, turned round, starts) the path so far, and the positions of
    the nodes that start a query pattern no earlier one binds; None when they do not join so.

    >>> from gyreflow.api.graph.query.cypher import parse
    >>> path, starts = chain(parse("MATCH (a)-->(c), (b)-->(c), (a)-->(b) RETURN a").patterns)
    >>> [n.variable for n in path.nodes], [r.direction for r in path.rels], starts
    (['a', 'c', 'b', 'a'], ['out', 'in', 'in'], (0, 2))
    """
    fresh, bound = [], set()
    for pattern in patterns:
        variable = pattern.nodes[0].variable
        fresh.append(variable is None or variable not in bound)
        bound |= {node.variable for node in pattern.nodes if node.variable is not None}
    path, starts = patterns[0], [0] if fresh[0] else []
    left = list(range(1, len(patterns)))
    while left:
        found = _next(path, patterns, left)
        if found is None:  # the path so far turned round: its start becomes its end
            path = _reverse(path)
            starts = [len(path.nodes) - 1 - position for position in starts]
            found = _next(path, patterns, left)
        if found is None:
            return None
        index, pattern, turned = found
        left.remove(index)
        offset = len(path.nodes) - 1
        if fresh[index]:
            starts.append(offset + (len(pattern.nodes) - 1 if turned else 0))
        nodes = (*path.nodes[:-1], _merged(path.nodes[-1], pattern.nodes[0]), *pattern.nodes[1:])
        path = PathPattern(nodes, path.rels + pattern.rels)
    return path, tuple(sorted(starts))


def _next(path: PathPattern, patterns: tuple, left: list) -> tuple | None:
    """``(index, pattern, turned)`` of a pattern of ``left`` that begins (or, turned round, ends)
    at the node variable ending ``path``."""
    end = path.nodes[-1].variable
    if end is None:
        return None
    for index in left:
        pattern = patterns[index]
        if pattern.nodes[0].variable == end:
            return index, pattern, False
        if pattern.nodes[-1].variable == end:
            return index, _reverse(pattern), True
    return None


def _filtered(rel: RelPattern) -> bool:
    return bool(rel.types or rel.properties)


def array_plan(query, directed: bool = True) -> ArrayPlan | str:
    """The array plan of ``query`` on a (``directed``) graph, or why it runs per path."""
    ast: QueryAst = query.ast
    chained = chain(ast.patterns)
    if chained is None:
        return "path patterns that do not join end to start into one path"
    path, starts = chained
    rel_names = [rel.variable for rel in path.rels if rel.variable is not None]
    variables = {node.variable for node in path.nodes if node.variable is not None}
    if len(set(rel_names)) < len(rel_names) or set(rel_names) & variables:
        return "a relationship variable bound twice"
    single = {rel.variable: index for index, rel in enumerate(path.rels)
              if rel.variable is not None and not rel.variable_length}
    pushed_rels: list[list] = [[] for _ in path.rels]
    rest = []
    conjuncts = []
    for conjunct in _conjuncts(ast.where):
        names = variables_of(conjunct)
        if len(names) == 1 and next(iter(names)) in single and _safe(conjunct) and \
                not has_aggregate(conjunct):
            pushed_rels[single[next(iter(names))]].append(conjunct)
        else:
            conjuncts.append(conjunct)
    read_anywhere = set().union(*(variables_of(c) for c in conjuncts),
                                *(variables_of(item.expr) for item in ast.items),
                                *(variables_of(expr) for expr, _ in ast.order))
    if read_anywhere & set(rel_names):
        return "a relationship variable the query returns, orders by or compares with another"
    rel_filters = tuple(tuple(p) for p in pushed_rels)
    reversed_ = False
    if directed:
        filtered = [_filtered(rel) or bool(pushed) for rel, pushed in
                    zip(path.rels, rel_filters, strict=True)]
        backwards = [rel for rel, f in zip(path.rels, filtered, strict=True)
                     if f and rel.direction != "out"]
        if backwards and not any(rel.direction == "both" for rel in backwards) and not any(
                f and rel.direction == "out" for rel, f in zip(path.rels, filtered, strict=True)):
            path, reversed_ = _reverse(path), True  # every filter is checked where it is sent
            rel_filters = tuple(reversed(rel_filters))
    # a filtered relationship that follows in-edges is checked where the row arrives: at the
    # edge's source, whose task holds its value
    verify = tuple(directed and rel.direction != "out" and (_filtered(rel) or bool(pushed))
                   for rel, pushed in zip(path.rels, rel_filters, strict=True))
    nodes: tuple[NodePattern, ...] = path.nodes
    first = tuple(sorted(len(nodes) - 1 - p for p in starts)) if reversed_ else starts
    positions = {}
    for position, node in enumerate(nodes):
        if node.variable is not None:
            positions.setdefault(node.variable, position)
    pushed: list[list] = [[] for _ in nodes]
    for conjunct in conjuncts:
        names = variables_of(conjunct)
        if len(names) == 1 and names <= variables and not has_aggregate(conjunct) and _safe(conjunct):
            pushed[positions[next(iter(names))]].append(conjunct)
        else:
            rest.append(conjunct)
    where = _and(rest)
    read = set().union(variables_of(where), *(variables_of(item.expr) for item in ast.items),
                       *(variables_of(expr) for expr, _ in ast.order)) & variables
    keep_names = tuple(sorted(read, key=lambda name: positions[name]))
    items = ast.items
    count_only = (where is None and len(items) == 1 and items[0].expr == ("agg", "count", None, False)
                  and ast.skip is None and ast.limit is None)
    distinct_rows = ast.distinct and not query.aggregated
    return ArrayPlan(nodes, path.rels, first, tuple(tuple(p) for p in pushed), where,
                     tuple(positions[name] for name in keep_names), keep_names, count_only,
                     distinct_rows, directed, reversed_, rel_filters, verify)


__all__ = ["ArrayPlan", "array_plan", "chain"]
