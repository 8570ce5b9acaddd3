"""A query over one table planned onto gyreflow's own operators: a filter, a projection, a keyed
aggregate, or an aggregate per event-time window (TUMBLE, HOP, SESSION) with its watermark.

A GROUP BY over a table read in windows of ``geaflow.dsl.window.size`` keeps running aggregates per
group (``running``). What does not fit (joins, sub-queries, ORDER BY, DISTINCT, LIMIT, graphs, other
aggregates over windows of rows) runs as one query operator instead (``planning.QueryFunction``).
"""

from __future__ import annotations

import operator

import attrs
from sqlglot import exp

from gyreflow.api.dsl.catalog import Catalog
from gyreflow.api.dsl.codegen import row_method, rows_method
from gyreflow.api.dsl.grouping import SameKeyOf, same_key
from gyreflow.api.dsl.queries import QueryError, Relation, Scope
from gyreflow.api.dsl.running import ChangedRows, CountRows, RunningGroups, WindowRows, runs_as_running
from gyreflow.api.dsl.select import _expand
from gyreflow.api.dsl.window_text import WATERMARK_COLUMN, WATERMARK_DELAY
from gyreflow.api.dsl.windowing import (
    WINDOW_COLUMNS,
    WindowCall,
    moment,
    seconds_of,
    window_call,
)


@attrs.frozen(eq=False)
class Shape:
    """A query as its operators need it: the table, WHERE, the output items, GROUP BY keys (without
    the window's columns), HAVING and the window table function, if any."""

    table: str
    columns: list
    where: exp.Expression | None
    items: list
    keys: list
    having: exp.Expression | None
    window: WindowCall | None
    running: bool = False  # a GROUP BY over a table read in windows, as running aggregates

    @property
    def grouped(self) -> bool:
        return bool(self.keys) or self.window is not None


def _nested(query: exp.Expression) -> bool:
    return any(isinstance(n, (exp.Subquery, exp.Select, exp.Exists, exp.Window, exp.Lateral, exp.Unnest))
               for n in query.walk() if n is not query)


def _is_window_column(node: exp.Expression) -> str | None:
    if isinstance(node, exp.Column) and node.name.lower() in WINDOW_COLUMNS:
        return node.name.lower()
    return None


def shape_of(query: exp.Expression, catalog: Catalog) -> Shape | None:
    """The query's shape if its own operators can run it; None for the query operator. A window
    table function that cannot run this way is an error: nothing else runs it."""
    from_ = query.args.get("from_") or query.args.get("from") if isinstance(query, exp.Select) else None
    call = window_call(from_.this) if from_ is not None else None
    refused = None
    if not isinstance(query, exp.Select) or from_ is None:
        refused = "it is not a SELECT ... FROM"
    elif query.args.get("joins") or _nested(query):
        refused = "the query has a join or a sub-query"
    elif any(query.args.get(k) for k in ("distinct", "order", "limit", "offset", "with_", "with")):
        refused = "the query has DISTINCT, ORDER BY, LIMIT or WITH"
    if call is None and (refused or not isinstance(from_.this, exp.Table)
                         or not isinstance(from_.this.this, exp.Identifier)):
        return None
    name = call.table if call is not None else from_.this.name.lower()
    table = catalog.tables.get(name)
    if table is None or name in catalog.views or name in catalog.gql or name in catalog.extra:
        refused = refused or f"{name} is not a table"
    elif table.kind == "graphdata" or name in catalog.graph_sources():
        refused = refused or f"{name} is a graph's table"
    if refused and (call is None or call.kind != "session"):
        return None  # the query operator runs it (TUMBLE and HOP over rows: windowing.window_rows)
    windowed = call is None and table.window_size(catalog.settings) > 0
    qualifier = (from_.this.alias or name).lower() if call is None else (from_.this.alias.lower() or None)
    columns = [(qualifier, c.lower()) for c, _ in table.columns] if table else []
    if call is not None:
        columns += [(None, c) for c in WINDOW_COLUMNS]
    relation = Relation(columns, [])
    items = _expand(query.expressions, relation)
    aliases = {i.alias.lower(): i.this for i in items if isinstance(i, exp.Alias)}
    scope = Scope(relation, catalog, aliases)
    group = query.args.get("group")
    keys = list(group.expressions) if group is not None else []
    having = query.args.get("having")
    aggregated = any(scope.has_aggregate(i) for i in items) or having is not None
    if windowed and not keys and not aggregated:  # each window's rows filtered and mapped
        return Shape(name, columns, _this(query.args.get("where")), items, keys, None, None)
    if windowed:  # over every row so far: its groups' running aggregates, or the query operator
        return Shape(name, columns, _this(query.args.get("where")), items, keys, _this(having), None,
                     running=True) if aggregated and runs_as_running(items, keys, _this(having), scope) \
            else None
    if call is None:
        return Shape(name, columns, _this(query.args.get("where")), items, keys, _this(having), None) \
            if (keys or not aggregated) else None
    windows = {_is_window_column(k) for k in keys} - {None}
    if refused is None and windows != set(WINDOW_COLUMNS):
        refused = "its GROUP BY does not name both window_start and window_end"
    where = _this(query.args.get("where"))
    if refused is None and where is not None and any(map(_is_window_column, where.find_all(exp.Column))):
        refused = "its WHERE reads window_start or window_end (filter them in HAVING)"
    if refused is not None and call.kind != "session":
        return None
    if refused is None and call.column not in [c.lower() for c, _ in table.columns]:
        refused = f"DESCRIPTOR({call.column}): {name} has no such column"
    if refused is None and table.options.get(WATERMARK_COLUMN, call.column) != call.column:
        refused = (f"the watermark of {name} is on {table.options[WATERMARK_COLUMN]}, the windows on "
                   f"{call.column}")
    if refused is not None:
        raise QueryError(f"{call.kind.upper()} runs as the one table of SELECT ... GROUP BY "
                         f"window_start, window_end[, ...]; here {refused}")
    return Shape(name, columns, where, items, [k for k in keys if not _is_window_column(k)],
                 _this(having), call)


def _this(clause):
    return clause.this if clause is not None else None


class _Compiled:
    """Compiles a shape's expressions where it runs (compiled functions are closures: not picklable)."""

    def __init__(self, shape: Shape, catalog: Catalog, where: str = "") -> None:
        self.shape, self.catalog, self.where = shape, catalog, where  # where: "statement N, line L"
        self._fns = None

    def __reduce__(self):
        # made again where it is unpickled (compiled functions are not picklable), as its own
        # class even when it is a specialised one (``_specialised``)
        cls = type(self).__mro__[1] if type(self).__dict__.get("specialised") else type(self)
        return (cls, (self.shape, self.catalog, self.where))

    def _specialised(self, method) -> None:
        """From now on this instance is called through ``method`` (one compiled function of the
        row: one call per row, where a method calling a compiled function would be two)."""
        self.__class__ = type(type(self).__name__, (type(self),), {"__call__": method,
                                                                  "specialised": True})

    def scope(self) -> Scope:
        shape = self.shape
        aliases = {i.alias.lower(): i.this for i in shape.items if isinstance(i, exp.Alias)}
        return Scope(Relation(shape.columns, []), self.catalog, aliases)

    def __call__(self, *args):
        try:
            return self.run(*args)
        except QueryError as exc:
            raise QueryError(f"{self.where}: {exc.message}" if self.where else exc.message) from None

    def compiled(self):
        if self._fns is None:
            shape = self.shape
            relation = Relation(shape.columns, [])
            aliases = {i.alias.lower(): i.this for i in shape.items if isinstance(i, exp.Alias)}
            scope = Scope(relation, self.catalog, aliases)
            keys = [scope.compile(k) for k in shape.keys]
            items = [scope.compile(i) for i in shape.items]
            self._fns = (scope.compile(shape.where) if shape.where is not None else None, keys,
                         scope.compile(shape.having) if shape.having is not None else None,
                         items, _key_of(shape.keys, keys, scope),
                         _key_of([i.this if isinstance(i, exp.Alias) else i for i in shape.items], items,
                                 scope))
        return self._fns

    def failed(self, exc: QueryError) -> QueryError:
        return QueryError(f"{self.where}: {exc.message}" if self.where else exc.message)


def _key_of(nodes: list, compiled: list | None, scope: Scope):
    """A row's GROUP BY key (or SELECT list) as a tuple: picked by position where every one is a
    column of the row (no expression to evaluate per row), else each one's compiled expression
    (None if ``compiled`` is None)."""
    at = [scope.index(n.name, n.table or None) if isinstance(n, exp.Column) else None for n in nodes]
    if nodes and None not in at:
        if len(at) == 1:
            first = at[0]
            return lambda row: (row[first],)
        return operator.itemgetter(*at)
    if compiled is None:
        return None
    return lambda row: tuple([fn((row, None)) for fn in compiled])


def _plain_key(shape: Shape, catalog: Catalog):
    """GROUP BY columns by ``operator.itemgetter`` (picklable), each NaN made one value
    (``grouping.SameKeyOf``), else None."""
    scope = Scope(Relation(shape.columns, []), catalog)
    at = [scope.index(k.name, k.table or None) if isinstance(k, exp.Column) else None for k in shape.keys]
    return SameKeyOf(operator.itemgetter(*at), len(at) > 1) if at and None not in at else None


class RowFilter(_Compiled):
    """WHERE: keeps the rows for which the condition is true (not false, not null)."""

    def __call__(self, row) -> bool:
        self._specialised(row_method(self.shape.where, self.scope(), test=True))
        return self(row)


class Projection(_Compiled):
    """SELECT's items over one row."""

    def __call__(self, row) -> tuple:
        self._specialised(rows_method(self.shape.items, self.scope()))
        return self(row)


class GroupKey(_Compiled):
    """GROUP BY's keys of a row, as one tuple (each NaN made one value: ``grouping.same_key``)."""

    def __call__(self, row) -> tuple:
        key = (self._fns or self.compiled())[4]
        try:
            return same_key(key(row))
        except QueryError as exc:
            raise self.failed(exc) from None


class GroupRows(_Compiled):
    """One group's output row (none if HAVING drops it), from the group's rows; with a window,
    ``window_start`` and ``window_end`` are added to its rows and the WHERE applied here, so that
    every record, kept or not, moves the watermark, as at Flink's source."""

    def run(self, key, records, window=None) -> list[tuple]:
        where, _, having, items, _, _ = self.compiled()
        if self.shape.window is not None:
            bounds = (moment(window.start), moment(window.end))
            records = [r + bounds for r in records]
            if where is not None:
                records = [r for r in records if where((r, None)) is True]
            if not records:
                return []
        context = (records[0], records)
        if having is not None and having(context) is not True:
            return []
        return [tuple(fn(context) for fn in items)]


class EventSeconds:
    """The event time of a row, in seconds: its DESCRIPTOR column."""

    def __init__(self, index: int) -> None:
        self.index = index

    def __call__(self, row) -> float:
        value = row[self.index]
        if type(value) is int:  # epoch milliseconds (a column read only as the event time)
            return value / 1000
        return seconds_of(value)


def _group_of(pair):
    return pair[0]


def _values(pair):
    return pair[1]


def _window_values(result):
    return result.value


def plan_shape(shape: Shape, catalog: Catalog, source_of, where: str = ""):
    """The stream of a shape's output rows, from ``source_of(table name)`` (a stream of its rows);
    ``where`` ("statement N, line L") names the statement in errors while it runs."""
    needed = _needed(shape, catalog)
    rows = source_of(shape.table, needed, _event_only(shape, needed))
    frozen = catalog.copy()
    parts = {name: cls(shape, frozen, where) for name, cls in (
        ("filter", RowFilter), ("project", Projection), ("key", GroupKey), ("group", GroupRows))}
    if shape.window is not None:
        call = shape.window
        table = catalog.tables[shape.table]
        delay = float(table.options.get(WATERMARK_DELAY, "0"))
        at = [c.lower() for c, _ in table.columns].index(call.column)
        # The watermark runs beside the source (parallelism 1): the table's order decides what is
        # late, as a watermark made at Flink's source does, whatever the parallelism after it.
        windowed = (rows.with_timestamps(EventSeconds(at), max_delay=delay).with_parallelism(1)
                    .with_name(f"watermark {call.column} - {delay:g}s")
                    .key_by(_plain_key(shape, catalog) or parts["key"]).window(call.assigner()))
        relation = Relation(shape.columns, [])
        aliases = {i.alias.lower(): i.this for i in shape.items if isinstance(i, exp.Alias)}
        slots = _count_slots(shape, catalog)
        if slots is not None:  # COUNT(*) by columns: the window operator's own count
            windows, finish = windowed.count(), CountRows(slots)
        elif runs_as_running(shape.items, None, shape.having, Scope(relation, frozen, aliases)):
            groups = RunningGroups(shape, frozen, where, per_window=True)
            windows = windowed.aggregate(groups)
            finish = WindowRows(groups)
        else:  # an aggregate that needs the window's rows
            windows, finish = windowed.apply(parts["group"]), _window_values
        windows._node.with_name(f"{call.kind} {_seconds(call)}")  # the window operator itself
        return windows.flat_map(finish).with_name("rows")
    plain = _plain_key(shape, catalog)
    if shape.running and plain is not None:  # WHERE inside the aggregate's one compiled function
        groups = (rows.key_by(plain).aggregate(RunningGroups(shape, frozen, where, filters=True))
                  .with_name("where, group by (running)" if shape.where is not None
                             else "group by (running)"))
        return groups.key_by(_group_of).process(ChangedRows()).with_name(
            "changed groups" + (", having" if shape.having is not None else ""))
    if shape.where is not None:
        rows = rows.filter(parts["filter"]).with_name("where")
    if not shape.grouped:
        if _identity(shape):  # SELECT of every column in order: the rows as they are
            return rows
        return rows.map(parts["project"]).with_name("select")
    if shape.running:
        groups = (rows.key_by(parts["key"]).aggregate(RunningGroups(shape, frozen, where))
                  .with_name("group by (running)"))
        return groups.key_by(_group_of).process(ChangedRows()).with_name(
            "changed groups" + (", having" if shape.having is not None else ""))
    grouped = (rows.key_by(plain or parts["key"]).window().apply(parts["group"])
               .with_name("group by"))
    return grouped.flat_map(_values).with_name("having and select" if shape.having is not None
                                              else "select")


def _count_slots(shape: Shape, catalog: Catalog) -> tuple | None:
    """The SELECT list of a per-window ``COUNT(*)`` GROUP BY of columns, without WHERE or HAVING,
    as ``CountRows`` slots: ``("key", i)`` (i None: the key is one column), ``("start",)``,
    ``("end",)``, ``("count",)``; None for any other query."""
    if shape.window is None or shape.where is not None or shape.having is not None:
        return None
    scope = Scope(Relation(shape.columns, []), catalog)
    keys = [scope.index(k.name, k.table or None) if isinstance(k, exp.Column) else None for k in shape.keys]
    if not keys or None in keys:
        return None
    slots = []
    for item in shape.items:
        node = item.this if isinstance(item, exp.Alias) else item
        window = _is_window_column(node)
        at = scope.index(node.name, node.table or None) if isinstance(node, exp.Column) else None
        if window is not None:
            slots.append(("start",) if window == "window_start" else ("end",))
        elif at is not None and at in keys:
            slots.append(("key", keys.index(at) if len(keys) > 1 else None))
        elif (isinstance(node, exp.Count) and isinstance(node.this, exp.Star)
              and not node.args.get("distinct")):
            slots.append(("count",))
        else:
            return None
    return tuple(slots)


def _needed(shape: Shape, catalog: Catalog) -> frozenset | None:
    """The positions of the table's columns a shape reads (None: all of them): the others are
    not converted when the table is read."""
    relation = Relation(shape.columns, [])
    scope = Scope(relation, catalog)
    aliases = {i.alias.lower() for i in shape.items if isinstance(i, exp.Alias)}
    needed = set()
    for node in [shape.where, *shape.items, *shape.keys, shape.having]:
        for column in node.find_all(exp.Column) if node is not None else ():
            at = scope.index(column.name, column.table or None)
            if at is None and not column.table and column.name.lower() in aliases:
                continue  # an output alias: its expression is read where it stands
            if at is None:
                return None
            needed.add(at)
    if shape.window is not None:
        needed.add([c for _, c in shape.columns].index(shape.window.column))
    return frozenset(needed)


def _event_only(shape: Shape, needed: frozenset | None) -> frozenset:
    """The position of the DESCRIPTOR column when nothing but the windows reads it: it may stay
    epoch milliseconds (``EventSeconds`` takes them), not become timestamps."""
    if shape.window is None or needed is None:
        return frozenset()
    at = [c for _, c in shape.columns].index(shape.window.column)
    others = Shape(shape.table, shape.columns, shape.where, shape.items, shape.keys, shape.having, None)
    return frozenset({at}) if at not in (_needed(others, None) or {at}) else frozenset()


def _identity(shape: Shape) -> bool:
    """Whether a shape's SELECT list is every column of its table, in order."""
    table = [c for _, c in shape.columns]
    items = [i.this if isinstance(i, exp.Alias) else i for i in shape.items]
    return len(items) == len(table) and all(
        isinstance(i, exp.Column) and i.name.lower() == c for i, c in zip(items, table, strict=True))


def _seconds(call: WindowCall) -> str:
    if call.kind == "hop":
        return f"slide {call.slide:g}s size {call.size:g}s"
    return f"{'gap' if call.kind == 'session' else 'size'} {call.size:g}s"
