"""SELECT over rows: FROM with joins and LATERAL table functions, WHERE, GROUP BY, HAVING, ORDER BY."""

from __future__ import annotations

import contextlib
import contextvars

from sqlglot import exp

from gyreflow.api.dsl.grouping import check_grouped, same_key
from gyreflow.api.dsl.over import over_values
from gyreflow.api.dsl.queries import (
    BINARY,
    QueryError,
    Relation,
    Scope,
    _order,
    function_args,
    function_name,
    own_nodes,
)
from gyreflow.api.dsl.row_errors import RowError, naming_rows, row_error
from gyreflow.api.dsl.windowing import WINDOW_COLUMNS, window_call, window_rows

# Set while a script is checked before it runs (``dry_run``): the tables are empty, so the one row
# an aggregate without GROUP BY gives over them (COUNT 0, SUM NULL) is not data the query will see,
# and no expression is evaluated over rows read from tables: a value error there (division by
# zero, a domain error) depends on the data, and is reported, naming the row, when it happens.
_DRY_RUN = contextvars.ContextVar("gyreflow_dsl_dry_run", default=False)


@contextlib.contextmanager
def dry_run():
    """Queries evaluated inside compile every expression but evaluate none over rows of tables."""
    token = _DRY_RUN.set(True)
    try:
        yield
    finally:
        _DRY_RUN.reset(token)


class Joined(Relation):
    """The rows of a join; ``star`` is the positions ``SELECT *`` lists (a USING column once)."""

    __slots__ = ("star",)

    def __init__(self, columns: list, rows: list, star: list) -> None:
        super().__init__(columns, rows)
        self.star = star


def _star(relation: Relation) -> list:
    return relation.star if isinstance(relation, Joined) else list(range(len(relation.columns)))


def _with_rows(relation: Relation, rows: list) -> Relation:
    if isinstance(relation, Joined):
        return Joined(relation.columns, rows, relation.star)
    return Relation(relation.columns, rows)


def _alias_of(node) -> tuple[str | None, list[str]]:
    alias = node.args.get("alias")
    if alias is None:
        return None, []
    if isinstance(alias, exp.TableAlias):
        return (alias.name.lower() or None), [c.name.lower() for c in alias.columns]
    return str(alias.name if hasattr(alias, "name") else alias).lower(), []


def source(node, catalog) -> Relation:
    """The relation a FROM item names: a table, a view, a sub-query or VALUES."""
    qualifier, columns = _alias_of(node)
    call = window_call(node)
    if call is not None:  # the table's rows once per window (a query of its own: event-time windows)
        base = catalog.relation(call.table)
        relation = Relation(base.columns + [(None, c) for c in WINDOW_COLUMNS],
                            window_rows(call, base, catalog))
    elif isinstance(node, exp.Table):
        relation = catalog.relation(node.name)
        qualifier = qualifier or node.name.lower()
    elif isinstance(node, (exp.Subquery, exp.Values)):
        relation = evaluate(node.this if isinstance(node, exp.Subquery) else node, catalog)
    else:
        raise QueryError(f"{node.sql()[:60]!r} is not a FROM item gyreflow's SQL knows")
    relation = relation.requalified(qualifier)
    if columns:
        relation = Relation([(qualifier, c) for c in columns], relation.rows)
    return relation


def _lateral(left: Relation, node: exp.Lateral, catalog) -> Relation:
    call = node.this
    if isinstance(call, exp.Anonymous) and call.name.lower() == "table":
        call = call.expressions[0]
    name = function_name(call)
    fn = catalog.table_function(name)
    if fn is None:
        raise QueryError(f"no table function {name.upper()}")
    qualifier, columns = _alias_of(node)
    scope = Scope(left, catalog)
    args = [scope.compile(a) for a in function_args(call)]
    rows = []
    for row in left.rows:
        for produced in fn(*(a((row, None)) for a in args)):
            produced = tuple(produced)[:len(columns)] if columns else tuple(produced)
            rows.append(row + produced + (None,) * (len(columns) - len(produced)))
    names = columns or [f"f{i}" for i in range(len(rows[0]) - len(left.columns))] if rows else columns
    width = len(left.columns)
    return Joined(left.columns + [(qualifier, c) for c in names], rows,
                  _star(left) + list(range(width, width + len(names))))


def _join(left: Relation, node: exp.Join, catalog) -> Relation:
    if isinstance(node.this, exp.Lateral):
        return _lateral(left, node.this, catalog)
    side, kind = (node.side or "").upper(), (node.kind or "").upper()
    if kind not in ("", "INNER", "OUTER", "CROSS"):
        raise QueryError(f"{kind} JOIN is not supported")
    right = source(node.this, catalog)
    using = node.args.get("using")
    if using:
        return _join_using(left, right, using, side, catalog)
    width = len(left.columns)
    joined = Joined(left.columns + right.columns, [], _star(left) + [width + p for p in _star(right)])
    condition = node.args.get("on")
    test = Scope(joined, catalog).compile(condition) if condition is not None else None
    right_used = [False] * len(right.rows)
    blank_right = (None,) * len(right.columns)
    row = ()
    try:
        for lrow in left.rows:
            matched = False
            for j, rrow in enumerate(right.rows):
                row = lrow + rrow
                if test is None or test((row, None)) is True:
                    joined.rows.append(row)
                    matched = right_used[j] = True
            if not matched and side in ("LEFT", "FULL"):
                joined.rows.append(lrow + blank_right)
    except RowError:
        raise
    except Exception as exc:
        raise row_error(exc, condition, row, columns=[*left.columns, *right.columns]) from exc
    if side in ("RIGHT", "FULL"):
        blank_left = (None,) * len(left.columns)
        joined.rows.extend(blank_left + r for j, r in enumerate(right.rows) if not right_used[j])
    return joined


def using_layout(left: Relation, right: Relation, using: list, catalog) -> tuple[list, list, list]:
    """``(pairs, columns, star)`` of ``left JOIN right USING (c, ...)``: each USING column's position
    on each side; the joined columns, each USING column first (unqualified: the two sides'
    COALESCE, as SQL has it), then the left's and the right's columns (``a.k``, ``b.k`` too); the
    positions ``SELECT *`` lists: the USING columns, then each side's others (Calcite's order)."""
    lscope, rscope = Scope(left, catalog), Scope(right, catalog)
    names, pairs = [], []
    for identifier in using:
        name = identifier.name.lower()
        if name in names:
            continue
        i, j = lscope.index(name, None), rscope.index(name, None)
        if i is None or j is None:
            meta = identifier.meta
            at = meta["col"] - len(identifier.name) + 1 if "col" in meta else None
            raise QueryError(f"USING ({identifier.name}): the {'left' if i is None else 'right'} side of the "
                             f"join has no column {identifier.name}", line=meta.get("line"), column=at)
        names.append(name)
        pairs.append((i, j))
    n, width = len(names), len(left.columns)
    columns = [(None, name) for name in names] + left.columns + right.columns
    star = (list(range(n)) + [n + p for p in _star(left) if left.columns[p][1] not in names]
            + [n + width + p for p in _star(right) if right.columns[p][1] not in names])
    return pairs, columns, star


def _join_using(left: Relation, right: Relation, using: list, side: str, catalog) -> Relation:
    """``left JOIN right USING (c, ...)``: rows whose USING columns are equal (``=``: a NULL
    matches nothing), each USING column once as the COALESCE of the two sides (``using_layout``)."""
    pairs, columns, star = using_layout(left, right, using, catalog)
    equal = BINARY[exp.EQ]
    blank_left, blank_right = (None,) * len(left.columns), (None,) * len(right.columns)

    def joined(lrow, rrow):
        return tuple(lrow[i] if lrow[i] is not None else rrow[j] for i, j in pairs) + lrow + rrow
    rows = []
    right_used = [False] * len(right.rows)
    for lrow in left.rows:
        matched = False
        for j, rrow in enumerate(right.rows):
            if all(equal(lrow[a], rrow[b]) is True for a, b in pairs):
                rows.append(joined(lrow, rrow))
                matched = right_used[j] = True
        if not matched and side in ("LEFT", "FULL"):
            rows.append(joined(lrow, blank_right))
    if side in ("RIGHT", "FULL"):
        rows.extend(joined(blank_left, r) for j, r in enumerate(right.rows) if not right_used[j])
    return Joined(columns, rows, star)


def _output_name(node: exp.Expression, index: int) -> str:
    if isinstance(node, exp.Alias):
        return node.alias.lower()
    if isinstance(node, exp.Column):
        return node.name.lower()
    return f"expr${index}"


def _expand(items: list[exp.Expression], relation: Relation) -> list[exp.Expression]:
    """``*`` and ``t.*`` replaced by the columns they stand for (``*`` lists a USING column once)."""
    out = []
    for item in items:
        star_table = None
        if isinstance(item, exp.Column) and isinstance(item.this, exp.Star):
            star_table = item.table.lower()
        if isinstance(item, exp.Star) or star_table:
            positions = _star(relation) if star_table is None else [
                i for i, (qualifier, _) in enumerate(relation.columns) if qualifier == star_table]
            for i in positions:
                qualifier, name = relation.columns[i]
                out.append(exp.column(name, table=qualifier, quoted=False))
        else:
            out.append(item)
    return out


def select(node: exp.Select, catalog) -> Relation:
    """The rows of one SELECT."""
    with_ = node.args.get("with_") or node.args.get("with")
    if with_ is not None:
        catalog = catalog.child({cte.alias.lower(): cte.this for cte in with_.expressions})
    from_ = node.args.get("from_") or node.args.get("from")
    relation = source(from_.this, catalog) if from_ is not None else Relation([], [()])
    for join in node.args.get("joins") or []:
        relation = _join(relation, join, catalog)
    dry = from_ is not None and _DRY_RUN.get()
    if dry:  # checked before it runs: every expression compiled, none evaluated over rows
        relation = _with_rows(relation, [])
    where = node.args.get("where")
    if where is not None:
        test = Scope(relation, catalog).compile(where.this)
        rows = relation.rows
        with naming_rows([(where.this, test)], lambda: ((r, None) for r in rows), columns=relation.columns):
            relation = _with_rows(relation, [r for r in rows if test((r, None)) is True])

    items = _expand(node.expressions, relation)
    aliases = {item.alias.lower(): item.this for item in items if isinstance(item, exp.Alias)}
    scope = Scope(relation, catalog, aliases)
    group = node.args.get("group")
    having = node.args.get("having")
    order = node.args.get("order")
    names = [_output_name(item, i) for i, item in enumerate(items)]
    grouped = group is not None or any(scope.has_aggregate(i) for i in items) or having is not None
    if grouped:
        key_nodes = list(group.expressions) if group is not None else []
        check_grouped(items + ([having.this] if having is not None else []) + _input_keys(order, names),
                      key_nodes, scope, dict(zip(names, items, strict=True)))
        keys = [scope.compile(g) for g in key_nodes]
        groups: dict[tuple, list] = {}
        with naming_rows(list(zip(key_nodes, keys, strict=True)), lambda: ((r, None) for r in relation.rows),
                         columns=relation.columns):
            for row in relation.rows:
                groups.setdefault(same_key(tuple(k((row, None)) for k in keys)), []).append(row)
        if not groups and not keys and not dry:
            groups[()] = []
        contexts = [(rows[0] if rows else (None,) * len(relation.columns), rows)
                    for rows in groups.values()]
        if having is not None:
            test = scope.compile(having.this)
            every = contexts
            with naming_rows([(having.this, test)], every, grouped=True, columns=relation.columns):
                contexts = [c for c in every if test(c) is True]
    else:
        contexts = [(row, None) for row in relation.rows]

    # a sub-query's window functions are its own: computed over its rows when it runs
    windows = [w for item in items for w in own_nodes(item) if isinstance(w, exp.Window)]
    if windows:  # f(...) OVER (...): computed over every row first, read back by position
        contexts = [(c[0], c[1], i) for i, c in enumerate(contexts)]
        scope.window_values = {id(w): over_values(w, contexts, scope, grouped) for w in windows}
    compiled = [scope.compile(item) for item in items]
    with naming_rows(list(zip(items, compiled, strict=True)), contexts, grouped, relation.columns):
        pairs = [(tuple(fn(ctx) for fn in compiled), ctx) for ctx in contexts]
    if node.args.get("distinct"):
        pairs = list({same_key(out): (out, ctx) for out, ctx in reversed(pairs)}.values())[::-1]
    if order is not None:
        keys = [(_order_key(o.this, names, scope), bool(o.args.get("desc"))) for o in order.expressions]
        with naming_rows([(o.this, fn) for o, (fn, _) in zip(order.expressions, keys, strict=True)], pairs,
                         columns=[(None, n) for n in names]):
            pairs = _order(pairs, keys)
    rows = _limited([out for out, _ in pairs], node)
    return Relation([(None, n) for n in names], rows)


def _input_keys(order, names: list[str]) -> list:
    """The ORDER BY expressions that read the SELECT's input (not an output column or position)."""
    if order is None:
        return []
    return [o.this for o in order.expressions
            if not (isinstance(o.this, exp.Column) and not o.this.table and o.this.name.lower() in names)
            and not (isinstance(o.this, exp.Literal) and not o.this.is_string)]


def _limited(rows: list, node) -> list:
    """``rows`` after OFFSET and LIMIT."""
    offset, limit = node.args.get("offset"), node.args.get("limit")
    start = int(offset.expression.this) if offset is not None else 0
    return rows[start:start + int(limit.expression.this)] if limit is not None else rows[start:]


def _order_key(node: exp.Expression, names: list[str], scope: Scope):
    """An ORDER BY key: an output column by name or position, else an expression of the input."""
    if isinstance(node, exp.Column) and not node.table and node.name.lower() in names:
        at = names.index(node.name.lower())
        return lambda pair: pair[0][at]
    if isinstance(node, exp.Literal) and not node.is_string:
        at = int(node.this) - 1
        if not 0 <= at < len(names):
            raise QueryError(f"ORDER BY {node.this}: the query has {len(names)} column"
                             f"{'s' if len(names) != 1 else ''}")
        return lambda pair: pair[0][at]
    if isinstance(node, exp.Column) and node.table and node.table.lower() in names and \
            scope.index(node.name, node.table) is None:  # a property of an output vertex or edge
        from gyreflow.api.dsl.queries import _property

        at, key = names.index(node.table.lower()), node.name.lower()
        return lambda pair: _property(pair[0][at], key)
    try:
        fn = scope.compile(node)
    except QueryError:  # an expression of the output's columns (of a returned vertex's property)
        out = Scope(Relation([(None, n) for n in names], []), scope.catalog).compile(node)
        return lambda pair: out((pair[0], None))
    return lambda pair: fn(pair[1])


def evaluate(node: exp.Expression, catalog) -> Relation:
    """The rows of a query."""
    if isinstance(node, exp.Subquery):
        return evaluate(node.this, catalog)
    if isinstance(node, exp.Values):
        return _values(node, catalog)
    if isinstance(node, (exp.Union, exp.Except, exp.Intersect)):
        return _set_operation(node, catalog)
    if isinstance(node, exp.Select):
        return select(node, catalog)
    raise QueryError(f"{node.key.upper()} is not a query gyreflow's SQL runs")


def _values(node: exp.Values, catalog) -> Relation:
    scope = Scope(Relation([], []), catalog)
    rows = []
    for item in node.expressions:
        cells = item.expressions if isinstance(item, exp.Tuple) else [item]
        compiled = [scope.compile(c) for c in cells]
        with naming_rows(list(zip(cells, compiled, strict=True)), [((), [])]):
            rows.append(tuple(fn(((), [])) for fn in compiled))
    width = len(rows[0]) if rows else 0
    alias = node.args.get("alias")
    names = [c.name for c in alias.columns] if alias is not None and alias.columns else [
        f"expr${i}" for i in range(width)]
    return Relation([(alias.name.lower() if alias is not None else None, n.lower()) for n in names], rows)


def _distinct(rows) -> list:
    """``rows`` without repeats, in their order (NaN equal to NaN)."""
    seen, out = set(), []
    for row in rows:
        key = same_key(row)
        if key not in seen:
            seen.add(key)
            out.append(row)
    return out


def _set_operation(node, catalog) -> Relation:
    """UNION, EXCEPT and INTERSECT, DISTINCT or ALL (multisets: EXCEPT ALL keeps a row as many
    times as the left has it more than the right, INTERSECT ALL as many times as both have it),
    then ORDER BY (output columns by name or position), OFFSET and LIMIT."""
    left, right = evaluate(node.this, catalog), evaluate(node.expression, catalog)
    if len(left.columns) != len(right.columns):
        raise QueryError(f"{node.key.upper()} of {len(left.columns)} and {len(right.columns)} columns")
    distinct = node.args.get("distinct", True) is not False
    if isinstance(node, exp.Union):
        rows = left.rows + right.rows
        if distinct:
            rows = _distinct(rows)
    elif distinct:
        found = {same_key(r) for r in right.rows}
        keep = isinstance(node, exp.Intersect)
        rows = _distinct(r for r in left.rows if (same_key(r) in found) is keep)
    else:
        counts: dict = {}
        for row in right.rows:
            key = same_key(row)
            counts[key] = counts.get(key, 0) + 1
        rows = []
        for row in left.rows:
            key = same_key(row)
            matched = counts.get(key, 0) > 0
            if matched:
                counts[key] -= 1
            if matched is isinstance(node, exp.Intersect):
                rows.append(row)
    names = left.names()
    result = Relation([(None, n) for n in names], rows)
    order = node.args.get("order")
    if order is not None:
        scope = Scope(result, catalog)
        keys = [(_order_key(o.this, names, scope), bool(o.args.get("desc"))) for o in order.expressions]
        result.rows = [out for out, _ in _order([(r, (r, None)) for r in result.rows], keys)]
    result.rows = _limited(result.rows, node)
    return result
