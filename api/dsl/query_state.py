"""What the query operator keeps of its streams from window to window: the rows so far and the
last result as a changelog (a snapshot writes what a window added and the result's difference,
``state.keys.logged``), the graphs those rows make, kept and grown by each window's rows instead
of loaded again, and the rows of a Top-N (``ORDER BY ... LIMIT n``) that can still be in it."""

from __future__ import annotations

import bisect
import pickle

from sqlglot import exp

from gyreflow.api.dsl.graphs import Graph


def new_value() -> dict:
    """The kept value: rows so far by table, the last result (row -> count), what CALLs keep."""
    return {"all": {}, "last": {}, "memory": {}}


def apply_change(value: dict | None, change: tuple) -> dict:
    """The kept value after one window's change ``(added, replaced, plus, minus, memory)``: rows
    ``added`` to tables (appended), tables' rows ``replaced`` (a Top-N's candidates), rows the
    result gained (``plus``) and lost (``minus``), and what CALLs keep (None: unchanged)."""
    value = new_value() if value is None else value
    added, replaced, plus, minus, memory = change
    kept = value["all"]
    for name, rows in added.items():
        kept.setdefault(name, []).extend(rows)
    for name, rows in replaced.items():
        kept[name] = list(rows)
    count_rows(value["last"], plus, minus)
    if memory is not None:
        value["memory"] = memory
    return value


def count_rows(last: dict, plus: list, minus: list) -> None:
    """``last`` (row -> count) after it gained the rows ``plus`` and lost ``minus``."""
    for row in minus:
        count = last[row] - 1
        if count:
            last[row] = count
        else:
            del last[row]
    for row in plus:
        last[row] = last.get(row, 0) + 1


def value_bytes(value: dict) -> int:
    """The bytes of the kept value written whole (the base a fold writes)."""
    return len(pickle.dumps(value, pickle.HIGHEST_PROTOCOL))


def difference(last: dict, result: list) -> tuple[list, list]:
    """``(plus, minus)``: the rows of ``result`` that ``last`` (row -> count) does not hold, in
    ``result``'s order (the rows a window emits), and those of ``last`` that ``result`` lost."""
    left = dict(last)
    plus = []
    for row in result:
        count = left.get(row, 0)
        if count:
            left[row] = count - 1
        else:
            plus.append(row)
    minus = [row for row, count in left.items() for _ in range(count)]
    return plus, minus


# ---- graphs kept across windows ------------------------------------------------------------------

class KeptGraphs:
    """The graphs a query reads, kept from window to window and grown by each window's rows, as
    ``graphs.load_graph`` builds them from the rows so far: vertices in the order of their first
    row (a type's tables in the graph's order, then their rows), a later row of an id replacing
    the vertex, edges by their ends in that order. Built again from the rows so far after a
    restore (``grown`` sees another kept value)."""

    def __init__(self, catalog, tables: frozenset) -> None:
        self.sources: dict[str, list] = {}  # graph -> [(table, element, names)] in load order
        if any(let[4] for query in catalog.gql.values() for let in query.lets):
            return  # LET GLOBAL changes the graph a query reads: loaded afresh per window
        for name, definition in catalog.graphs.items():
            sources = []
            for label, element in definition.types.items():
                names = [c for c, _ in element.columns]
                sources.append((catalog.graph_table(definition, label), element, names))
                if element.table:
                    using = catalog.tables[element.table.lower()]
                    sources.append((element.table.lower(), element, [c for c, _ in using.columns] or names))
            if all(table in tables for table, _, _ in sources):
                self.sources[name] = sources
        self.graphs: dict[str, Graph] = {}
        self.seen = None  # the kept value the graphs follow
        self.marks: dict = {}  # graph -> its Marks

    def grown(self, value: dict, added: dict) -> dict[str, Graph]:
        """The graphs after a window that ``added`` rows (already in ``value["all"]``)."""
        if not self.sources:
            return {}
        kept = value["all"]
        if value is not self.seen:  # a first window, or a restore: every row so far
            self.seen = value
            self.graphs, self.marks = {}, {}
            for name in self.sources:
                self.graphs[name], self.marks[name] = Graph(), Marks()
            rows_of, counts = kept, {}
        else:
            rows_of = added
            counts = {t: len(kept.get(t, ())) - len(added.get(t, ())) for t in added}
        for name, sources in self.sources.items():
            graph, marks = self.graphs[name], self.marks[name]
            for rank, (table, element, names) in enumerate(sources):
                rows = rows_of.get(table)
                if not rows:
                    continue
                at = counts.get(table, 0)
                for offset, row in enumerate(rows):
                    props = dict(zip(names, row, strict=False))
                    if element.kind == "vertex":
                        marks.vertex(graph, element, props, (rank, at + offset))
                    else:
                        marks.edge(graph, element, props, (rank, at + offset))
            marks.settle(graph)
        return self.graphs


class Marks:
    """Where each vertex and edge of a kept graph stands in ``load_graph``'s order: ``(the rank of
    its table, its row)`` (vertices: of the first row of its id; the row its value came from)."""

    def __init__(self) -> None:
        self.first: dict = {}  # vertex id -> mark of its first row
        self.valued: dict = {}  # vertex id -> rank of the table its value came from
        self.last = (-1, -1)  # the largest first mark: a vertex after it is appended in order
        self.unordered = False
        self.out: dict = {}  # source id -> marks of its out-edges, in their order
        self.into: dict = {}  # target id -> marks of its in-edges

    def vertex(self, graph: Graph, element, props: dict, mark: tuple) -> None:
        vid = props.get(element.id_column)
        first = self.first.get(vid)
        if first is None or mark < first:
            self.first[vid] = mark
            if mark < self.last:
                self.unordered = True
            else:
                self.last = mark
        if mark[0] >= self.valued.get(vid, -1):  # load order: a later table's row wins
            self.valued[vid] = mark[0]
            graph.add_vertex(element.label, props, element.id_column)

    def edge(self, graph: Graph, element, props: dict, mark: tuple) -> None:
        graph.add_edge(element.label, props, element.source_column, element.target_column)
        edge = graph.out_edges[props.get(element.source_column)][-1]
        for edges, marks, end in ((graph.out_edges, self.out, edge.src),
                                  (graph.in_edges, self.into, edge.dst)):
            held = marks.setdefault(end, [])
            if held and mark < held[-1]:  # a row of an earlier table: before that table's edges
                at = bisect.bisect_right(held, mark)
                listed = edges[end]
                listed.insert(at, listed.pop())
                held.insert(at, mark)
            else:
                held.append(mark)

    def settle(self, graph: Graph) -> None:
        """Put the vertices back in the order of their first rows, when a window broke it."""
        if self.unordered:
            first = self.first
            graph.vertices = dict(sorted(graph.vertices.items(), key=lambda item: first[item[0]]))
            self.unordered = False
            self.last = max(first.values(), default=(-1, -1))


# ---- Top-N over a stream --------------------------------------------------------------------------

def top_n(query, catalog, tables: list[str]):
    """``(table, the query of the rows that can still be in the result)`` for ``SELECT ... FROM t
    [WHERE ...] ORDER BY ... LIMIT n [OFFSET m]`` over one table (Flink's Top-N): the result over
    every row so far is the result over the ``n + m`` first rows so far in the query's order, so
    only those are kept. None for other queries (aggregates, joins, DISTINCT, window functions,
    sub-queries, an ORDER BY of a SELECT's alias or position)."""
    if not isinstance(query, exp.Select) or len(tables) != 1 or query.args.get("order") is None:
        return None
    limit, offset = query.args.get("limit"), query.args.get("offset")
    count = _literal(limit.expression if limit is not None else None)
    skip = _literal(offset.expression if offset is not None else None) if offset is not None else 0
    if count is None or skip is None:
        return None
    if query.args.get("joins") or query.args.get("group") or query.args.get("distinct") \
            or query.args.get("having") or query.args.get("with"):
        return None
    source = query.args.get("from_") or query.args.get("from")  # the key's name by sqlglot's version
    if source is None or not isinstance(source.this, exp.Table) or source.this.name.lower() != tables[0]:
        return None
    for node in query.walk():
        if isinstance(node, (exp.AggFunc, exp.Window, exp.Anonymous, exp.Subquery, exp.Union)) \
                or (isinstance(node, exp.Select) and node is not query):
            return None
    columns = {c.lower() for c, _ in catalog.tables[tables[0]].columns}
    aliases = {item.alias_or_name.lower(): item for item in query.expressions}
    for ordered in query.args["order"].expressions:
        used = list(ordered.find_all(exp.Column))
        if not used:
            return None  # a position or a constant
        for column in used:
            name = column.name.lower()
            item = aliases.get(name)
            if name not in columns or (item is not None and not _is_column(item, name)):
                return None
    candidates = query.copy()
    candidates.set("expressions", [exp.Star()])
    candidates.set("offset", None)
    candidates.set("limit", exp.Limit(expression=exp.Literal.number(count + skip)))
    return tables[0], candidates


def _literal(node) -> int | None:
    if isinstance(node, exp.Literal) and not node.is_string:
        try:
            value = int(node.this)
        except ValueError:
            return None
        return value if value >= 0 else None
    return None


def _is_column(item, name: str) -> bool:
    inner = item.this if isinstance(item, exp.Alias) else item
    return isinstance(inner, exp.Column) and inner.name.lower() == name
