"""Queries over tables read in windows planned onto stream operators that cost what each window
brought: an equi-join of two tables onto the regular stream join (``join(..., across_windows=True)``),
``SELECT DISTINCT`` onto a keyed operator that emits a row the first time it is seen, and
``UNION [ALL]`` onto a union of streams; the rest keeps the query operator (``QueryFunction``),
which evaluates the query again over every row so far each window.

Each window emits what the query operator's difference of two results emits: the rows the window
added to the result. For an inner join, DISTINCT and UNION that is exact (the result only grows).
An outer join emits a row without a match at its window's end, padded with NULLs, and its matches
as they come; the query operator's difference also drops the padded row once it matches but emits
nothing for that, so the two agree except where a padded row that found its match in a window is
equal, as an output row, to a row that window added: the difference then cancels the two, the
stream join emits the added row (docs/dsl.md, *Streams*).
"""

from __future__ import annotations

import operator

import attrs
from sqlglot import exp

from gyreflow.api.dsl.catalog import Catalog
from gyreflow.api.dsl.grouping import same_key
from gyreflow.api.dsl.lowering import Shape, plan_shape, shape_of
from gyreflow.api.dsl.queries import QueryError, Relation, Scope
from gyreflow.api.dsl.running import runs_as_running
from gyreflow.api.dsl.select import Joined, _expand, using_layout
from gyreflow.api.language.functions import ProcessFunction

_FAMILIES = {"int": "number", "integer": "number", "bigint": "number", "long": "number",
             "smallint": "number", "tinyint": "number", "double": "number", "float": "number",
             "decimal": "number", "varchar": "text", "string": "text", "char": "text",
             "boolean": "boolean", "timestamp": "timestamp", "date": "date"}


@attrs.frozen(eq=False)
class JoinPlan:
    """An equi-join of two tables as the stream join runs it: each side's key positions, how, the
    filters that run on one side before it, and the shape of what runs on the joined rows."""

    left: str
    right: str
    left_keys: tuple
    right_keys: tuple
    how: str
    using: tuple  # USING's (left, right) positions: each its COALESCE before the joined row
    left_where: exp.Expression | None
    right_where: exp.Expression | None
    left_columns: list
    right_columns: list
    shape: Shape


@attrs.frozen(eq=False)
class Plan:
    """A query as streams: ``kind`` is ``rows`` (a one-table shape), ``join``, ``distinct`` (of
    ``parts[0]``) or ``union`` (of ``parts``)."""

    kind: str
    shape: Shape | None = None
    join: JoinPlan | None = None
    parts: tuple = ()


def plan_stream_query(query, catalog: Catalog, source_of, where: str = ""):
    """The stream of a windowed query's result rows on stream operators, or None when the query
    operator runs it: ``source_of(table)`` gives a table's rows, ``where`` names the statement."""
    tables = catalog.base_tables(query)
    if not tables or not any(catalog.tables[n].window_size(catalog.settings) > 0 for n in tables):
        return None  # read whole: the query operator runs once
    plan = analyse(query, catalog, top=True)
    if plan is None:
        return None
    sources = _Sources(source_of)
    result = _build(plan, catalog, sources, where)
    _unique_names(result.builder, sources.first)
    return result


class _Sources:
    """``source_of`` that remembers the first operator the plan made."""

    def __init__(self, source_of) -> None:
        self.source_of, self.first = source_of, None

    def __call__(self, name: str, *args):
        stream = self.source_of(name, *args)
        if self.first is None:
            self.first = stream.node
        return stream


def _unique_names(builder, first: int) -> None:
    """Operators the plan named alike (the SELECTs of a UNION's branches, a table read twice)
    numbered from the second on: names are unique in a task."""
    seen = {d.name for d in builder.drafts[:first]}
    for draft in builder.drafts[first:]:
        if draft.name is None:
            continue
        name, n = draft.name, 1
        while name in seen:
            n += 1
            name = f"{draft.name} {n}"
        draft.name = name
        seen.add(name)


def analyse(query, catalog: Catalog, top: bool = False) -> Plan | None:
    """How a query runs on stream operators; None when it does not (or only as it already does:
    a one-table query of its own operators is planned by ``lowering``)."""
    if isinstance(query, exp.Subquery):
        return analyse(query.this, catalog)
    if isinstance(query, exp.Union):
        if any(query.args.get(k) for k in ("order", "limit", "offset", "with_", "with")):
            return None
        parts = (analyse(query.this, catalog), analyse(query.expression, catalog))
        if None in parts or _width(parts[0]) != _width(parts[1]):
            return None  # the query operator reports a UNION of different widths
        union = Plan("union", parts=parts)
        return Plan("distinct", parts=(union,)) if query.args.get("distinct") else union
    if not isinstance(query, exp.Select):
        return None
    if any(query.args.get(k) for k in ("order", "limit", "offset", "with_", "with")) or _nested(query):
        return None
    if query.args.get("joins"):
        join = _join_plan(query, catalog)
        if join is None:
            return None
        if query.args.get("distinct"):
            if join.how != "inner" or join.shape.grouped:
                return None
            return Plan("distinct", parts=(Plan("join", join=join),))
        return Plan("join", join=join)
    if query.args.get("distinct"):
        plain = query.copy()
        plain.set("distinct", None)
        part = analyse(plain, catalog)
        return Plan("distinct", parts=(part,)) if part is not None else None
    shape = shape_of(query, catalog)
    if shape is None or shape.grouped or shape.running or shape.window is not None:
        return None  # an aggregate's rows change: only where they stand alone (lowering)
    return None if top else Plan("rows", shape=shape)


def _nested(query) -> bool:
    """Whether a SELECT has a sub-query, a window function or a LATERAL table function."""
    return any(isinstance(n, (exp.Window, exp.Subquery, exp.Exists, exp.Lateral, exp.Unnest))
               or (isinstance(n, exp.Select) and n is not query) for n in query.walk())


def _width(plan: Plan) -> int:
    if plan.kind == "rows":
        return len(plan.shape.items)
    if plan.kind == "join":
        return len(plan.join.shape.items)
    return _width(plan.parts[0])


def _table(node, catalog: Catalog):
    """A FROM item that is a file table read in rows: its name and qualifier, else None."""
    if not isinstance(node, exp.Table) or not isinstance(node.this, exp.Identifier):
        return None
    name = node.name.lower()
    table = catalog.tables.get(name)
    if (table is None or table.kind != "file" or name in catalog.views or name in catalog.gql
            or name in catalog.extra or name in catalog.graph_sources()):
        return None
    alias = node.args.get("alias")
    if isinstance(alias, exp.TableAlias) and alias.columns:
        return None
    return name, (node.alias or name).lower()


def _conjuncts(node) -> list:
    if node is None:
        return []
    if isinstance(node, exp.Paren):
        return _conjuncts(node.this)
    if isinstance(node, exp.And):
        return _conjuncts(node.this) + _conjuncts(node.expression)
    return [node]


def _join_plan(query: exp.Select, catalog: Catalog) -> JoinPlan | None:
    joins = query.args["joins"]
    from_ = query.args.get("from_") or query.args.get("from")
    if len(joins) != 1 or from_ is None:
        return None
    join = joins[0]
    left, right = _table(from_.this, catalog), _table(join.this, catalog)
    side, kind = (join.side or "").upper(), (join.kind or "").upper()
    if left is None or right is None or kind not in ("", "INNER", "OUTER"):
        return None
    how = {"": "inner", "LEFT": "left", "RIGHT": "right", "FULL": "full"}.get(side)
    if how is None or (how == "inner" and kind == "OUTER"):
        return None
    (lname, lq), (rname, rq) = left, right
    if lq == rq:
        return None
    ltable, rtable = catalog.tables[lname], catalog.tables[rname]
    lcols = [(lq, c.lower()) for c, _ in ltable.columns]
    rcols = [(rq, c.lower()) for c, _ in rtable.columns]
    types = [t.lower() for _, t in ltable.columns] + [t.lower() for _, t in rtable.columns]
    width = len(lcols)
    scope = Scope(Relation(lcols + rcols, []), catalog)
    lkeys, rkeys, extra = [], [], []
    using = join.args.get("using")
    pairs: tuple = ()
    joined = Relation(lcols + rcols, [])
    if using:  # a.k = b.k for each, and k their COALESCE (``select.using_layout``)
        if join.args.get("on") is not None:
            return None
        try:
            found, columns, star = using_layout(Relation(lcols, []), Relation(rcols, []), using, catalog)
        except QueryError:
            return None  # the query operator reports it
        pairs = tuple(found)
        lkeys, rkeys = [i for i, _ in pairs], [j for _, j in pairs]
        joined = Joined(columns, [], star)
    for node in _conjuncts(join.args.get("on")):
        sides = _sides(node, scope, width)
        if sides is None:
            return None
        if isinstance(node, exp.EQ) and all(isinstance(n, exp.Column) for n in (node.this, node.expression)):
            a, b = (scope.index(n.name, n.table or None) for n in (node.this, node.expression))
            if a < width <= b or b < width <= a:
                i, j = (a, b - width) if a < width else (b, a - width)
                lkeys.append(i)
                rkeys.append(j)
                continue
        extra.append((node, sides))
    if not lkeys or any(_FAMILIES.get(types[i].split("(")[0]) is None
                        or _FAMILIES.get(types[i].split("(")[0])
                        != _FAMILIES.get(types[width + j].split("(")[0])
                        for i, j in zip(lkeys, rkeys, strict=True)):
        return None  # no equi-key, or keys the query operator compares after a cast
    before = {"left": [], "right": []}
    after = []
    for node, sides in extra:
        if how == "inner":
            after.append(node)
        elif how == "left" and sides == {"right"}:
            before["right"].append(node)  # an ON condition of the side that may be NULL
        elif how == "right" and sides == {"left"}:
            before["left"].append(node)
        else:
            return None  # it decides which rows match: the query operator runs it
    condition = query.args.get("where")
    conditions = after + ([condition.this] if condition is not None else [])
    items = _expand(query.expressions, joined)
    aliases = {i.alias.lower(): i.this for i in items if isinstance(i, exp.Alias)}
    item_scope = Scope(Relation(joined.columns, []), catalog, aliases)
    group, having = query.args.get("group"), query.args.get("having")
    keys = list(group.expressions) if group is not None else []
    having = having.this if having is not None else None
    aggregated = any(item_scope.has_aggregate(i) for i in items) or having is not None
    if not all(_resolves(n, item_scope, aliases) for n in [*items, *keys, *conditions]
               + ([having] if having is not None else [])):
        return None
    if aggregated or keys:
        if how != "inner" or not runs_as_running(items, keys, having, item_scope):
            return None  # an outer join's padded rows go: an aggregate over them would not
    shape = Shape(f"{lname} join {rname}", joined.columns, _all(conditions), items, keys, having,
                  None, running=bool(aggregated or keys))
    return JoinPlan(lname, rname, tuple(lkeys), tuple(rkeys), how, pairs,
                    _all(before["left"]), _all(before["right"]), lcols, rcols, shape)


def _sides(node, scope: Scope, width: int) -> set | None:
    """The sides (``left``, ``right``) whose columns ``node`` reads; None if one does not resolve."""
    sides = set()
    for column in node.find_all(exp.Column):
        at = scope.index(column.name, column.table or None)
        if at is None:
            return None
        sides.add("left" if at < width else "right")
    return sides


def _resolves(node, scope: Scope, aliases: dict) -> bool:
    for column in node.find_all(exp.Column):
        if isinstance(column.this, exp.Star):
            return False
        if scope.index(column.name, column.table or None) is None and not (
                not column.table and column.name.lower() in aliases):
            return False
    return True


def _all(conditions: list):
    if not conditions:
        return None
    return exp.and_(*[exp.paren(c, copy=True) for c in conditions], copy=False)


# --- building the streams -------------------------------------------------------------------------


class JoinedRow:
    """A joined row: the left row then the right one, a missing side as NULLs; with USING
    (``using``: the key's positions on each side) each key's COALESCE of the two sides first."""

    def __init__(self, left_width: int, right_width: int, using: tuple = ()) -> None:
        self.widths, self.using = (left_width, right_width), using

    def __reduce__(self):
        return (JoinedRow, (*self.widths, self.using))

    def __call__(self, left, right) -> tuple:
        left = left if left is not None else (None,) * self.widths[0]
        right = right if right is not None else (None,) * self.widths[1]
        if self.using:
            return tuple(left[i] if left[i] is not None else right[j] for i, j in self.using) + left + right
        return left + right


class HasNullKey:
    """Whether a row has a NULL in one of its key columns (such a row matches nothing under ON)."""

    def __init__(self, positions: tuple, null: bool = True) -> None:
        self.positions, self.null = positions, null

    def __reduce__(self):
        return (HasNullKey, (self.positions, self.null))

    def __call__(self, row) -> bool:
        return any(row[i] is None for i in self.positions) is self.null


class Padded:
    """A row of one side with the other side's columns NULL."""

    def __init__(self, joined: JoinedRow, left: bool) -> None:
        self.joined, self.left = joined, left

    def __reduce__(self):
        return (Padded, (self.joined, self.left))

    def __call__(self, row) -> tuple:
        return self.joined(row, None) if self.left else self.joined(None, row)


class FirstSeen(ProcessFunction):
    """DISTINCT over a stream: a row the first time it is seen (one flag per distinct row)."""

    def process(self, record, ctx) -> None:
        if ctx.get_state() is None:
            ctx.set_state(True)
            ctx.emit(record)

    def on_notify(self, window, ctx) -> None:
        """No notification is asked for."""


def _key_getter(positions: tuple):
    return operator.itemgetter(*positions)


def _build(plan: Plan, catalog: Catalog, source_of, where: str):
    if plan.kind == "rows":
        return plan_shape(plan.shape, catalog, source_of, where)
    if plan.kind == "distinct":
        inner = _build(plan.parts[0], catalog, source_of, where)
        return inner.key_by(same_key).process(FirstSeen()).with_name("distinct")  # NaN is one value
    if plan.kind == "union":
        first, *rest = (_build(p, catalog, source_of, where) for p in plan.parts)
        return first.union(*rest).with_name("union all")
    join = plan.join
    joined = _join_stream(join, catalog, source_of, where)
    return plan_shape(join.shape, catalog, lambda *_: joined, where)


def _join_stream(join: JoinPlan, catalog: Catalog, source_of, where: str):
    """The joined rows (left columns, then right ones) of a join plan."""
    from gyreflow.api.dsl.lowering import RowFilter

    frozen = catalog.copy()
    joined_row = JoinedRow(len(join.left_columns), len(join.right_columns), join.using)
    sides = []
    padded = []
    for is_left, name, columns, keys, condition in (
            (True, join.left, join.left_columns, join.left_keys, join.left_where),
            (False, join.right, join.right_columns, join.right_keys, join.right_where)):
        preserved = join.how in (("left", "full") if is_left else ("right", "full"))
        rows = source_of(name)
        if condition is not None:
            shape = Shape(name, columns, condition, [], [], None, None)
            rows = rows.filter(RowFilter(shape, frozen, where)).with_name(f"on {name}")
        # a NULL key matches nothing (USING's too: a.k = b.k): such rows go round the join
        if preserved:
            padded.append(rows.filter(HasNullKey(keys)).with_name(f"{name} with a NULL key")
                          .map(Padded(joined_row, is_left))
                          .with_name("padded"))
        rows = rows.filter(HasNullKey(keys, null=False)).with_name(f"{name} keys")
        sides.append(rows.key_by(_key_getter(keys)))
    out = sides[0].join(sides[1], joined_row, how=join.how, across_windows=True).with_name(
        f"{join.how} join")
    return out.union(*padded).with_name("joined") if padded else out
