"""A script's MATCH run as array joins over the graph's edges, where its pattern allows.

A path of single edges (or several, comma-joined or in MATCH clauses one after the other, that
join end to start into one: ``arrays.chain``) whose filters (labels, ``WHERE`` on the element)
read only their own element runs as the array program of ``gyreflow query`` (``ArrayMatch``) in this process:
partial paths expand as arrays of vertex positions along compressed rows of the edges, walks as
GeaFlow matches them (an edge may repeat); a named edge is kept as the hop it took (source,
target, which of the parallel edges) and bound back to its edge, turned round where the path
follows it against its direction. Paths that differ only in unnamed elements are one, as
GeaFlow's traversal merges them. Everything else runs on the row matcher of ``graphs``;
``why_rows`` says why.
"""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import attrs
import numpy as np
from sqlglot import exp

from gyreflow.api.dsl.gql import GqlQuery
from gyreflow.api.dsl.queries import Relation
from gyreflow.api.graph.query.syntax import NodePattern, PathPattern, QueryAst, RelPattern, ReturnItem
from gyreflow.runtime.dataflow.columns.zipped import zipped_rows


def _reads_only_itself(pattern) -> bool:
    if pattern.where is None:
        return True
    if any(isinstance(node, (exp.Subquery, exp.Select)) for node in pattern.where.walk()):
        return False
    return all(not column.table or column.table.lower() == pattern.var.lower()
               for column in pattern.where.find_all(exp.Column))


def _paths(query: GqlQuery) -> list[list]:
    """Every path of the query's MATCH clauses, in order."""
    return [path for clause in query.matches for path in clause.patterns]


def _reads_only_bound(expression, bound: set) -> bool:
    """Whether a MATCH's WHERE reads only variables of its clause and the clauses before it."""
    if expression is None:
        return True
    for column in expression.find_all(exp.Column):
        name = (column.table or column.name).lower()
        if name not in bound:
            return False
    return True


def why_rows(query: GqlQuery) -> str | None:
    """Why ``query`` needs the row matcher; None when its MATCH runs as array joins (the paths
    must also join end to start into one: ``arrays.chain``)."""
    if query.call is not None:
        return "CALL of an algorithm"
    bound: set = set()
    for number, clause in enumerate(query.matches, 1):
        if any(len(paths) != 1 for paths, _ in clause.items):
            return "alternative paths (| |+|)"
        if clause.order is not None:
            return "ORDER BY or LIMIT before RETURN"
        if any(path[i].var.startswith("__") and path[i - 1].var.lower() in bound
               and path[i + 1].var.lower() in bound and not path[i - 1].var.startswith("__")
               and not path[i + 1].var.startswith("__")
               for path in clause.patterns for i in range(1, len(path) - 1, 2)):
            return "an unnamed edge between vertices earlier MATCH clauses bound (a row per direction)"
        bound |= {item.var.lower() for path in clause.patterns for item in path}
        if number < len(query.matches) and not _reads_only_bound(clause.where, bound):
            return "a MATCH's WHERE that reads a name no MATCH so far binds"
    if any(after != len(query.matches) or is_global for after, *_, is_global in query.lets):
        return "LET between MATCH clauses, or LET GLOBAL"
    if query.subqueries:
        return "a path sub-query (COUNT((a)->(b) => ...), EXISTS)"
    if query.returns is None or any(isinstance(e, exp.Star) for e in query.returns.expressions):
        return "no RETURN, or RETURN * (every element of the path is a column)"
    paths = _paths(query)
    if any(len(path) < 3 for path in paths):
        return "a path of no edge"
    for path in paths:
        if any(edge.hops is not None for edge in path[1::2]):
            return "a quantified edge ({low,high})"
        if not all(_reads_only_itself(item) for item in path):
            return "a filter that reads another variable or a table"
    if all(node.var.startswith("__") for path in paths for node in path[0::2]):
        return "no named vertex"
    return None


def _named_edges(paths: list[list]) -> list[tuple]:
    """``(edge, the variable of the node the path leaves it from)`` of each named edge."""
    return [(path[i], path[i - 1].var) for path in paths for i in range(1, len(path), 2)
            if not path[i].var.startswith("__")]


def _arrays(graph):
    """The graph's vertices by position, its edges between them and the labels of each kind,
    made once per graph."""
    from gyreflow.api.graph.query.array_local import LocalPart

    found = getattr(graph, "arrays", None)
    if found is not None:
        return found
    vertices = list(graph.vertices.values())
    position = {vertex.id: index for index, vertex in enumerate(vertices)}
    lists = [graph.out_edges.get(vertex.id, ()) for vertex in vertices]
    values = list(itertools.chain.from_iterable(lists))
    sources = np.repeat(np.arange(len(vertices), dtype=np.int64),
                        np.fromiter(map(len, lists), dtype=np.int64, count=len(lists)))
    targets = np.fromiter((position.get(edge.dst, -1) for edge in values), dtype=np.int64,
                          count=len(values))
    if (targets < 0).any():  # an edge to no vertex is no edge of the match
        kept = targets >= 0
        values = list(itertools.compress(values, kept.tolist()))
        sources, targets = sources[kept], targets[kept]
    labels = ({v.label.lower() for v in vertices}, {label.lower() for label in {e.label for e in values}})
    parallel = _Parallel(sources, targets, values)
    graph.arrays = (vertices, LocalPart(vertices, sources, targets, values), labels, parallel)
    return graph.arrays


class _Parallel:
    """``(source, target)`` -> its edges, in the order of the compressed rows; made when a named
    edge first asks."""

    def __init__(self, sources, targets, values) -> None:
        self._given, self._found = (sources, targets, values), None

    def __getitem__(self, ends: tuple) -> list:
        if self._found is None:
            self._found = {}
            sources, targets, values = self._given
            for source, target, edge in zip(sources.tolist(), targets.tolist(), values, strict=True):
                self._found.setdefault((source, target), []).append(edge)
        return self._found[ends]


def _test(filters, pattern, element_at):
    def test(bound) -> bool:
        return filters.test(pattern, element_at(bound))
    return test


def _node_element(bound):
    return bound[2]  # ("node", position, vertex)


def _edge_element(bound):
    return bound[1][2]  # ("rel", (source, target, edge))


def _matches(query: GqlQuery, graph, filters) -> tuple | None:
    """``(plan, rows, arrays)``: per match, the positions of the named vertices of ``query``'s
    path, then ``(source, target, occurrence)`` of each named edge, before its WHERE; None when
    the path needs the row matcher."""
    from gyreflow.api.graph.query.array_match import ArrayMatch
    from gyreflow.api.graph.query.arrays import array_plan

    if why_rows(query) is not None:
        return None
    arrays = _arrays(graph)
    vertices, part, (vertex_labels, edge_labels) = arrays[:3]
    tests, seen, patterns = [], set(), []
    for path in _paths(query):
        nodes, rels = [], []
        for index, item in enumerate(path):
            if index % 2 == 0:
                nodes.append(NodePattern(item.var, (), ()))
                if item.var in seen and index:
                    continue  # bound again inside a path: the same vertex, no filter asked
                seen.add(item.var)  # (a path that starts at a bound vertex asks its filters)
                element_at, labels = _node_element, vertex_labels
            else:
                rels.append(RelPattern(item.var, (), (), item.direction))
                element_at, labels = _edge_element, edge_labels
            # labels every element of the graph has ask nothing
            if item.where is not None or (item.labels and not labels <= set(item.labels)):
                tests.append(("test", _test(filters, item, element_at), ("var", item.var)))
        patterns.append(PathPattern(tuple(nodes), tuple(rels)))
    where = None
    for test in tests:
        where = test if where is None else ("and", where, test)
    named = [node.var for path in _paths(query) for node in path[0::2]
             if not node.var.startswith("__")]
    edges = _named_edges(_paths(query))
    # a named edge followed either way: the vertex the path leaves it from says which way
    named += [left for edge, left in edges if edge.direction == "both"]
    ast = QueryAst(tuple(patterns), where,
                   tuple(ReturnItem(("var", name), name) for name in dict.fromkeys(named)), True,
                   (), None, None)
    plan = array_plan(SimpleNamespace(ast=ast, aggregated=False))
    if isinstance(plan, str):
        return None
    hop_of = {rel.variable: hop for hop, rel in enumerate(plan.rels)}
    # walks, as GeaFlow matches; the named edges' hops kept
    plan = attrs.evolve(plan, trails=False, keep_hops=tuple(hop_of[edge.var] for edge, _ in edges))
    values = part.run(ArrayMatch(plan, {}, None)) if vertices else []
    tables = [table for table in (values[0] or {}).get("rows", []) if len(table)] if len(values) else []
    width = len(plan.keep_names) + 3 * len(plan.keep_hops)
    rows = np.concatenate(tables).astype(np.int64) if tables else np.zeros((0, width), np.int64)
    return plan, rows, arrays


def _edge_column(triples: np.ndarray, turn: np.ndarray, arrays) -> np.ndarray:
    """The edges at the rows' ``(source, target, occurrence)``, turned round where ``turn`` says
    (the path follows them against their direction: the row matcher binds them so)."""
    parallel = arrays[3]
    found = [parallel[(source, target)][occurrence] for source, target, occurrence in triples.tolist()]
    if turn.any():
        turned: dict = {}
        found = [(turned.get(id(edge)) or turned.setdefault(id(edge), edge.turned())) if back else edge
                 for edge, back in zip(found, turn.tolist(), strict=True)]
    column = np.empty(len(found), dtype=object)
    column[:] = found
    return column


def _properties_read(query: GqlQuery, order: list[str]) -> dict[str, set] | None:
    """The properties the RETURN, the MATCH's WHERE and THEN FILTER read, per variable; None
    when one of them names a column without its variable (it could be any variable's)."""
    variables = {var.lower() for var in order}
    read: dict[str, set] = {}
    wheres = [clause.where for clause in query.matches]
    for expression in [query.returns, *wheres, *query.filters]:
        if expression is None:
            continue
        for column in expression.find_all(exp.Column):
            table, name = column.table.lower(), column.name.lower()
            if table in variables:
                read.setdefault(table, set()).add(name)
            elif table or name not in variables:
                return None
    return read


def array_relation(query: GqlQuery, graph, filters, order: list[str]) -> Relation | None:
    """The bindings relation of ``query`` (as ``graphs.bindings_relation`` makes it: each
    variable's element, then its properties) by array joins, before the MATCH's WHERE; None when
    the path needs the row matcher (``why_rows``)."""
    found = _matches(query, graph, filters)
    if found is None:
        return None
    plan, rows, arrays = found
    vertices = arrays[0]
    paths = _paths(query)
    vertex_elements = np.empty(len(vertices), dtype=object)
    vertex_elements[:] = vertices
    column_of = {name: index for index, name in enumerate(plan.keep_names)}
    named = [name for name in plan.keep_names if not name.startswith("__")]
    edges = _named_edges(paths)
    take, turns = _turns(edges, rows, column_of)
    rows = rows[take]
    elements: dict = {name: vertex_elements[rows[:, column_of[name]]] for name in named}
    for index, (edge, _) in enumerate(edges):
        at = len(plan.keep_names) + 3 * index
        elements[edge.var] = _edge_column(rows[:, at:at + 3], turns[edge.var], arrays)
    if any(item.var.startswith("__") for path in paths for item in path):
        # paths that differ only in unnamed elements are one (graphs._distinct_named)
        vertex_ids = rows[:, [column_of[name] for name in named]]
        keys = _first_rows(vertex_ids, len(vertices)) if not edges else \
            _distinct(vertex_ids, [elements[edge.var] for edge, _ in edges])
        keys = np.sort(keys)
        elements = {var: column[keys] for var, column in elements.items()}
    count = len(next(iter(elements.values()))) if elements else 0
    schema = getattr(order, "schema", {})
    props: dict[str, list[str]] = {var: list(schema.get(var, ())) for var in order}
    for var, column in elements.items():
        for element in {id(e): e for e in column.tolist()}.values():
            props[var].extend(key for key in element if key not in props[var])
    read = _properties_read(query, order)
    if read is not None:  # the properties nothing reads make no column
        props = {var: [key for key in keys if key.lower() in read.get(var.lower(), ())]
                 for var, keys in props.items()}
    columns = [(None, var.lower()) for var in order]
    columns += [(var.lower(), key.lower()) for var in order for key in props[var]]
    nothing = np.full(count, None, dtype=object)
    heads = [elements.get(var, nothing) for var in order]
    tails = [np.fromiter((e.get(key) for e in elements[var].tolist()), dtype=object, count=count)
             if var in elements else nothing for var in order for key in props[var]]
    out = zipped_rows(*(column.tolist() for column in heads + tails)) if count else []
    return Relation(columns, out)


def vertex_positions(query: GqlQuery, graph, filters) -> tuple[dict, list] | None:
    """``({named vertex: its position per binding}, the graph's vertices)``: the bindings
    ``array_relation`` makes rows of, as arrays, for a path that names no edge; None when the
    path needs the row matcher or names an edge."""
    if why_rows(query) is not None or _named_edges(_paths(query)):
        return None
    found = _matches(query, graph, filters)
    if found is None:
        return None
    plan, rows, arrays = found
    column_of = {name: index for index, name in enumerate(plan.keep_names)}
    named = [name for name in plan.keep_names if not name.startswith("__")]
    positions = rows[:, [column_of[name] for name in named]]
    if any(item.var.startswith("__") for path in _paths(query) for item in path):
        positions = positions[np.sort(_first_rows(positions, len(arrays[0])))]
    return {name.lower(): positions[:, at] for at, name in enumerate(named)}, arrays[0]


def _first_rows(positions: np.ndarray, size: int) -> np.ndarray:
    """The first row of each distinct row of vertex positions (each below ``size``)."""
    if len(positions) and size ** positions.shape[1] < 2 ** 62:
        key = np.zeros(len(positions), dtype=np.int64)
        for at in range(positions.shape[1]):
            key = key * size + positions[:, at]
        return np.unique(key, return_index=True)[1]
    return np.unique(positions, axis=0, return_index=True)[1]


def _turns(edges: list, rows: np.ndarray, column_of: dict) -> tuple:
    """``(take, turns)``: the rows to take (a self-loop a named edge follows either way twice, as
    itself and turned round, as the row matcher binds it) and, per named edge, whether each taken
    row binds it turned round."""
    take = np.arange(len(rows))
    turns: dict = {}
    base = len(column_of)
    for index, (edge, left) in enumerate(edges):
        if edge.direction != "both":
            turns[edge.var] = np.full(len(take), edge.direction == "in")
            continue
        at = base + 3 * index
        source, target = rows[take, at], rows[take, at + 1]
        turn = source != rows[take, column_of[left]]
        loops = np.flatnonzero(source == target)
        if len(loops):
            take = np.concatenate([take, take[loops]])
            turn = np.concatenate([turn, np.ones(len(loops), dtype=bool)])
            turns = {var: np.concatenate([found, found[loops]]) for var, found in turns.items()}
        turns[edge.var] = turn
    return take, turns


def _distinct(positions: np.ndarray, edge_columns: list) -> np.ndarray:
    """The first row of each distinct (named vertices, named edges' contents), as
    ``graphs._key`` tells edges apart."""
    from gyreflow.api.dsl.graphs import _key

    seen: set = set()
    kept: list[int] = []
    cached: dict = {}
    columns = [column.tolist() for column in edge_columns]
    for index, vertex_ids in enumerate(map(tuple, positions.tolist())):
        key = (vertex_ids, *(cached.get(id(edge)) or cached.setdefault(id(edge), _key(edge))
                             for edge in (column[index] for column in columns)))
        if key not in seen:
            seen.add(key)
            kept.append(index)
    return np.asarray(kept, dtype=np.int64)


__all__ = ["array_relation", "vertex_positions", "why_rows"]
