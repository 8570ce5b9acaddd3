"""Graphs of a script: vertices and edges loaded from tables and stored labels, and MATCH evaluated."""

from __future__ import annotations

from collections import defaultdict

from sqlglot import exp

from gyreflow.api.dsl.gql import EdgePattern, GqlQuery, NodePattern
from gyreflow.api.dsl.queries import QueryError, Relation, Scope


class Vertex(dict):
    """A vertex: its properties, with ``label`` and ``id`` as attributes."""

    __slots__ = ("id", "label")

    def __hash__(self):
        return hash(("v", self.id))

    def __eq__(self, other):
        return isinstance(other, Vertex) and other.id == self.id and other.label == self.label


class Edge(dict):
    """An edge: its properties, with ``label``, ``src`` and ``dst`` as attributes (and the columns
    that hold them)."""

    __slots__ = ("direction", "dst", "dst_col", "label", "src", "src_col")

    def turned(self) -> Edge:
        """The edge as GeaFlow shows one followed against its direction: its ends swapped."""
        other = Edge(self)
        other[self.src_col], other[self.dst_col] = self.get(self.dst_col), self.get(self.src_col)
        other.label, other.src, other.dst = self.label, self.dst, self.src
        other.src_col, other.dst_col = self.src_col, self.dst_col
        other.direction = "IN"
        return other

    def __hash__(self):
        return hash(("e", self.src, self.dst, self.label))

    def __eq__(self, other):
        return isinstance(other, Edge) and dict.__eq__(self, other) and other.label == self.label


class Graph:
    """Vertices by id and edges by their ends."""

    def __init__(self) -> None:
        self.vertices: dict = {}
        self.out_edges: dict = defaultdict(list)
        self.in_edges: dict = defaultdict(list)
        self.id_columns: dict[str, str] = {}  # label -> its ID column
        self.arrays = None  # (vertices, LocalPart) once a MATCH ran as array joins

    def add_vertex(self, label: str, props: dict, id_column: str) -> None:
        self.id_columns[label] = id_column
        vertex = Vertex(props)
        vertex.label, vertex.id = label, props.get(id_column)
        self.vertices[vertex.id] = vertex
        self.arrays = None

    def add_edge(self, label: str, props: dict, source: str, target: str) -> None:
        edge = Edge(props)
        edge.label, edge.src, edge.dst = label, props.get(source), props.get(target)
        edge.src_col, edge.dst_col = source, target
        edge.direction = "OUT"
        self.out_edges[edge.src].append(edge)
        self.in_edges[edge.dst].append(edge)
        self.arrays = None


def load_graph(name: str, catalog) -> Graph:
    """The graph ``name`` from its types' tables and the rows inserted into its labels."""
    cache = catalog.graph_cache
    if name.lower() in cache:
        return cache[name.lower()]
    definition = catalog.graphs.get(name.lower())
    if definition is None:
        raise QueryError(f"no graph {name}")
    graph = Graph()
    for label, element in definition.types.items():
        sources = [catalog.graph_table(definition, label)]
        if element.table:
            sources.append(element.table)
        for source in sources:
            relation = catalog.relation(source)
            names = [n for _, n in relation.columns]
            if element.table and source == element.table:
                names = [c for c, _ in catalog.tables[element.table.lower()].columns] or names
            else:
                names = [c for c, _ in element.columns]
            for row in relation.rows:
                props = dict(zip(names, row, strict=False))
                if element.kind == "vertex":
                    graph.add_vertex(element.label, props, element.id_column)
                else:
                    graph.add_edge(element.label, props, element.source_column, element.target_column)
    cache[name.lower()] = graph
    return graph


def _element_relation(var: str, element: dict) -> Relation:
    keys = list(element)
    return Relation([(var.lower(), k.lower()) for k in keys] + [(None, k.lower()) for k in keys]
                    + [(None, var.lower())], [])


def _row(element: dict, keys) -> tuple:
    values = tuple(element.values())
    return values + values + (element,)


class _Filters:
    """Node and edge filters compiled once per shape of element (and of the request row, if any)."""

    def __init__(self, catalog) -> None:
        self.catalog, self.compiled = catalog, {}
        self.request: tuple[str, dict] | None = None
        self.refs: dict = {}

    def _outer(self, pattern) -> tuple:
        """The other variables a filter names (``(b WHERE b.age > a.age)``: a)."""
        refs = self.refs.get(id(pattern))
        if refs is None:
            refs = tuple(sorted({c.table.lower() for c in pattern.where.find_all(exp.Column) if c.table}
                                - {pattern.var.lower()}))
            self.refs[id(pattern)] = refs
        return refs

    def test(self, pattern, element, binding: dict | None = None, labels: bool = True) -> bool:
        if labels and pattern.labels and element.label.lower() not in pattern.labels:
            return False
        if pattern.where is None:
            return True
        request = self.request
        outer = []
        if binding:
            names = {k.lower(): k for k in binding}
            outer = [(ref, binding[names[ref]]) for ref in self._outer(pattern)
                     if ref in names and isinstance(binding[names[ref]], dict)]
        key = (id(pattern), tuple(element), tuple(request[1]) if request else None,
               tuple((ref, tuple(value)) for ref, value in outer))
        fn = self.compiled.get(key)
        if fn is None:
            relation = _element_relation(pattern.var, element)
            if request is not None:
                relation.columns += [(request[0].lower(), k.lower()) for k in request[1]]
            for ref, value in outer:
                relation.columns += [(ref, k.lower()) for k in value]
            fn = Scope(relation, self.catalog).compile(pattern.where)
            self.compiled[key] = fn
        row = _row(element, None)
        if request is not None:
            row += tuple(request[1].values())
        for _, value in outer:
            row += tuple(value.values())
        return fn((row, None)) is True


def _steps(graph: Graph, vertex, edge: EdgePattern, filters: _Filters, binding=None):
    if edge.direction in ("out", "both"):
        for e in graph.out_edges.get(vertex.id, ()):
            if filters.test(edge, e, binding) and e.dst in graph.vertices:
                yield e, graph.vertices[e.dst]
    if edge.direction in ("in", "both"):
        for e in graph.in_edges.get(vertex.id, ()):
            if filters.test(edge, e, binding) and e.src in graph.vertices:
                yield e.turned(), graph.vertices[e.src]


def _walks(graph, vertex, edge: EdgePattern, filters, node=None, binding=None):
    """``(edge, end)`` of walks of ``edge.hops`` steps (the last edge stands for the walk). As in
    GeaFlow, whose loop body is the edge and its end node, every vertex a walk steps on passes the
    end ``node``'s filters (``-[:replyOf]->{0,}(post:Post)`` goes on through posts only)."""
    if edge.hops is None:
        yield from _steps(graph, vertex, edge, filters, binding)
        return
    low, high = edge.hops
    frontier = [(None, vertex)]
    for length in range(1, high + 1):
        frontier = [(e, end) for _, start in frontier
                    for e, end in _steps(graph, start, edge, filters, binding)
                    if node is None or filters.test(node, end, binding)]
        if length >= low:
            yield from frontier
    if low == 0:
        yield None, vertex


def _match_path(graph, path: list, binding: dict, filters: _Filters, known=frozenset()) -> list[dict]:
    """The bindings of ``path`` extending ``binding``; a variable of ``known`` (an earlier item's)
    that ``binding`` leaves unbound (another alternative's) matches nothing."""
    first: NodePattern = path[0]
    if first.var in known and first.var not in binding:
        return []
    if first.var in binding:
        bound = binding[first.var]
        bindings = [binding] if isinstance(bound, Vertex) and filters.test(first, bound, binding) else []
    else:
        bindings = []
        for vertex in graph.vertices.values():
            if filters.test(first, vertex, binding):
                extended = dict(binding)
                extended[first.var] = vertex
                bindings.append(extended)
    for i in range(1, len(path), 2):
        edge, node = path[i], path[i + 1]
        after = []
        for current in bindings:
            start = current[path[i - 1].var]
            for e, end in _walks(graph, start, edge, filters, node, current):
                if node.var in known and node.var not in current:
                    continue
                if node.var in current:
                    if current[node.var] != end:
                        continue
                elif not filters.test(node, end, current, labels=e is not None):
                    continue  # a walk of no edge ends where it starts, whatever label it asks (as GeaFlow)
                extended = dict(current)
                extended[edge.var] = e
                extended[node.var] = end
                after.append(extended)
        bindings = after
    return bindings


class Variables(list):
    """A match's variable names in order, with the properties each may have (from the graph's types)."""

    def __init__(self, names, schema: dict[str, list[str]] | None = None) -> None:
        super().__init__(names)
        self.schema = schema or {}


def _schema(query: GqlQuery, names: list[str], catalog) -> dict[str, list[str]]:
    """The properties of each variable: the columns of the types its labels allow."""
    definition = catalog.graphs.get((query.graph or "").lower())
    if definition is None:
        return {}
    schema: dict[str, list[str]] = {}
    for clause in query.matches:
        for path in clause.patterns:
            for item in path:
                kind = "vertex" if isinstance(item, NodePattern) else "edge"
                found = schema.setdefault(item.var, [])
                for label, element in definition.types.items():
                    if element.kind == kind and (not item.labels or label in item.labels):
                        found.extend(c for c, _ in element.columns if c not in found)
    return schema


def bindings_relation(bindings: list[dict], order: list[str]) -> Relation:
    """One row a binding: each variable's element, then its properties as ``var.property``."""
    schema = getattr(order, "schema", {})
    props: dict[str, list[str]] = {var: list(schema.get(var, ())) for var in order}
    for binding in bindings:
        for var in order:
            element = binding.get(var)
            if isinstance(element, dict):
                for key in element:
                    if key not in props[var]:
                        props[var].append(key)
    columns = [(None, var.lower()) for var in order]
    columns += [(var.lower(), key.lower()) for var in order for key in props[var]]
    rows = []
    for binding in bindings:
        row = [binding.get(var) for var in order]
        for var in order:
            element = binding.get(var)
            row.extend((element.get(k) if isinstance(element, dict) else None) for k in props[var])
        rows.append(tuple(row))
    return Relation(columns, rows)


def _variables(query: GqlQuery) -> list[str]:
    seen = []
    for clause in query.matches:
        for path in clause.patterns:
            for item in path:
                if item.var not in seen:
                    seen.append(item.var)
    return seen


def _request_table(query: GqlQuery, order: list[str], catalog) -> str | None:
    """The table a MATCH reads its requests from: a name its conditions use that is no variable."""
    variables = {v.lower() for v in order}
    expressions = [c.where for c in query.matches if c.where is not None]
    for clause in query.matches:
        expressions += [item.where for path in clause.patterns for item in path if item.where is not None]
    if query.returns is not None:
        expressions.append(query.returns)
    expressions += [let[3] for let in query.lets] + list(query.filters)
    for expression in expressions:
        for column in expression.find_all(exp.Column):
            name = column.table.lower() if column.table else ""
            if name and name not in variables and (name in catalog.views or name in catalog.tables):
                return name
    return None


def _between_named(query: GqlQuery) -> frozenset:
    """Unnamed edges of a given number of hops between two named nodes: paths that follow them in
    different directions stay apart (``(a)-[:knows]-{0,1}(b)`` over a pair that know each other both
    ways is two paths in GeaFlow's results, LDBC BI 8), while parallel edges followed the same way,
    and unnamed nodes, are merged. So are those of a later MATCH clause between two nodes earlier
    clauses bound (a triangle closed by ``MATCH (c)-[:knows]-(a)`` over people who know each other
    both ways is two paths each, LDBC BI 11)."""
    found, bound = set(), set()
    for clause in query.matches:
        for path in clause.patterns:
            for i in range(1, len(path) - 1, 2):
                ends = (path[i - 1].var, path[i + 1].var)
                if path[i].var.startswith("__") and not any(v.startswith("__") for v in ends) \
                        and (path[i].hops is not None or all(v in bound for v in ends)):
                    found.add(path[i].var)
        bound |= {item.var for path in clause.patterns for item in path[0::2]}
    return frozenset(found)


def _match(query: GqlQuery, graph, bindings: list[dict], order, filters, catalog) -> list[dict]:
    """The bindings of a query's MATCH clauses, starting from ``bindings``."""
    apart = _between_named(query)
    for number, clause in enumerate(query.matches, 1):
        known: set = set()
        for paths, keep in clause.items:
            seeds = bindings
            bindings = [b for seed in seeds for b in _match_path(graph, paths[0], seed, filters, known)]
            for number, (path, keep_all) in enumerate(zip(paths[1:], keep, strict=True), 1):
                more = [b for seed in seeds for b in _match_path(graph, path, seed, filters, known)]
                if keep_all:  # |+|: these rows stay apart from the same rows of other alternatives
                    more = [{**b, "__alternative": (b.get("__alternative"), number)} for b in more]
                bindings += more
                if not keep_all:
                    bindings = _distinct_named(bindings, order, everything=True, apart=apart)
            known |= {item.var for path in paths for item in path}
        if clause.where is not None:
            relation = bindings_relation(bindings, order)
            test = Scope(relation, catalog).compile(clause.where)
            bindings = [b for b, row in zip(bindings, relation.rows, strict=True)
                        if test((row, None)) is True]
        bindings = _let(query, bindings, order, catalog, number, graph)
        if clause.order is not None:
            bindings = _ordered(clause.order, bindings, order, catalog)
    return _distinct_named(bindings, order, apart=apart)


def _key(element):
    if type(element) is dict:  # a request row
        return tuple(sorted(map(str, element.items())))
    if isinstance(element, Vertex):
        return ("v", element.id)
    if isinstance(element, Edge):
        return ("e", element.label, element.src, element.dst, tuple(sorted(map(str, element.items()))))
    return element


def _ordered(select, bindings: list[dict], order: list[str], catalog) -> list[dict]:
    """``MATCH ... ORDER BY ... LIMIT n``: the bindings sorted and cut before RETURN."""
    from gyreflow.api.dsl.queries import _order

    relation = bindings_relation(bindings, order)
    scope = Scope(relation, catalog)
    pairs = list(zip(bindings, ((row, None) for row in relation.rows), strict=True))
    ordering = select.args.get("order")
    if ordering is not None:
        keys = [((lambda fn: lambda pair: fn(pair[1]))(scope.compile(o.this)), bool(o.args.get("desc")))
                for o in ordering.expressions]
        pairs = _order(pairs, keys)
    limit = select.args.get("limit")
    if limit is not None:
        pairs = pairs[:int(limit.expression.this)]
    return [binding for binding, _ in pairs]


def _distinct_named(bindings: list[dict], order: list[str], everything: bool = False,
                    apart: frozenset = frozenset()) -> list[dict]:
    """Paths that differ only in anonymous nodes and edges are one path, as GeaFlow's traversal
    merges them (it keeps no unnamed element of a path); of the unnamed edges ``apart``, the
    direction followed tells paths apart."""
    named = [var for var in order if not var.startswith("__")]
    if len(named) == len(order) and not everything:
        return bindings
    seen, kept = set(), []
    for binding in bindings:
        key = (*(_key(binding.get(var)) for var in named), binding.get("__alternative"),
               *(getattr(binding.get(var), "direction", None) for var in apart))
        if key not in seen:
            seen.add(key)
            kept.append(binding)
    return kept


def _let(query: GqlQuery, bindings: list[dict], order: list[str], catalog, clause: int,
         graph: Graph | None = None) -> list[dict]:
    for after, var, prop, value, is_global in query.lets:
        if after != clause:
            continue
        relation = bindings_relation(bindings, order)
        fn = Scope(relation, catalog).compile(value)
        updated = []
        for binding, row in zip(bindings, relation.rows, strict=True):
            element = binding.get(var)
            if isinstance(element, Vertex):
                changed = Vertex(element)
                changed.id, changed.label = element.id, element.label
            elif isinstance(element, Edge):
                changed = Edge(element)
                changed.src, changed.dst, changed.label = element.src, element.dst, element.label
                changed.src_col, changed.dst_col = element.src_col, element.dst_col
                changed.direction = element.direction
            else:
                raise QueryError(f"LET {var}.{prop}: {var} is not a vertex or edge of the match")
            changed[prop] = fn((row, None))
            if is_global and isinstance(element, Vertex) and graph is not None:
                graph.vertices[element.id][prop] = changed[prop]  # later matches see it
            binding = dict(binding)
            binding[var] = changed
            updated.append(binding)
        bindings = updated
    return bindings


__all__ = ["Edge", "Graph", "Vertex", "exp", "load_graph"]
