"""SELECT over rows: FROM with joins and LATERAL table functions, WHERE, GROUP BY, HAVING, ORDER BY."""

from __future__ import annotations

from sqlglot import exp

from gyreflow.api.dsl.over import over_values
from gyreflow.api.dsl.queries import (
    QueryError,
    Relation,
    Scope,
    _order,
    function_args,
    function_name,
    own_nodes,
)
from gyreflow.api.dsl.windowing import WINDOW_COLUMNS, window_call, window_rows


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
    return Relation(left.columns + [(qualifier, c) for c in names], rows)


def _join(left: Relation, node: exp.Join, catalog) -> Relation:
    if isinstance(node.this, exp.Lateral):
        return _lateral(left, node.this, catalog)
    right = source(node.this, catalog)
    joined = Relation(left.columns + right.columns, [])
    side, kind = (node.side or "").upper(), (node.kind or "").upper()
    condition = node.args.get("on")
    test = Scope(joined, catalog).compile(condition) if condition is not None else None
    using = node.args.get("using")
    if using:
        lscope, rscope = Scope(left, catalog), Scope(right, catalog)
        pairs = [(lscope.index(c.name, None), rscope.index(c.name, None)) for c in using]
        width = len(left.columns)

        def test(ctx):
            return all(ctx[0][i] == ctx[0][width + j] for i, j in pairs)
    right_used = [False] * len(right.rows)
    blank_right = (None,) * len(right.columns)
    for lrow in left.rows:
        matched = False
        for j, rrow in enumerate(right.rows):
            row = lrow + rrow
            if test is None or test((row, None)) is True:
                joined.rows.append(row)
                matched = right_used[j] = True
        if not matched and side in ("LEFT", "FULL"):
            joined.rows.append(lrow + blank_right)
    if side in ("RIGHT", "FULL"):
        blank_left = (None,) * len(left.columns)
        joined.rows.extend(blank_left + r for j, r in enumerate(right.rows) if not right_used[j])
    if kind not in ("", "INNER", "OUTER", "CROSS"):
        raise QueryError(f"{kind} JOIN is not supported")
    return joined


def _output_name(node: exp.Expression, index: int) -> str:
    if isinstance(node, exp.Alias):
        return node.alias.lower()
    if isinstance(node, exp.Column):
        return node.name.lower()
    return f"expr${index}"


def _expand(items: list[exp.Expression], relation: Relation) -> list[exp.Expression]:
    """``*`` and ``t.*`` replaced by the columns they stand for."""
    out = []
    for item in items:
        star_table = None
        if isinstance(item, exp.Column) and isinstance(item.this, exp.Star):
            star_table = item.table.lower()
        if isinstance(item, exp.Star) or star_table:
            for qualifier, name in relation.columns:
                if star_table is None or qualifier == star_table:
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
    where = node.args.get("where")
    if where is not None:
        test = Scope(relation, catalog).compile(where.this)
        relation = Relation(relation.columns, [r for r in relation.rows if test((r, None)) is True])

    items = _expand(node.expressions, relation)
    aliases = {item.alias.lower(): item.this for item in items if isinstance(item, exp.Alias)}
    scope = Scope(relation, catalog, aliases)
    group = node.args.get("group")
    having = node.args.get("having")
    grouped = group is not None or any(scope.has_aggregate(i) for i in items) or having is not None
    if grouped:
        keys = [scope.compile(g) for g in (group.expressions if group is not None else [])]
        groups: dict[tuple, list] = {}
        for row in relation.rows:
            groups.setdefault(tuple(k((row, None)) for k in keys), []).append(row)
        if not groups and not keys:
            groups[()] = []
        contexts = [(rows[0] if rows else (None,) * len(relation.columns), rows)
                    for rows in groups.values()]
        if having is not None:
            test = scope.compile(having.this)
            contexts = [c for c in contexts if test(c) is True]
    else:
        contexts = [(row, None) for row in relation.rows]

    # a sub-query's window functions are its own: computed over its rows when it runs
    windows = [w for item in items for w in own_nodes(item) if isinstance(w, exp.Window)]
    if windows:  # f(...) OVER (...): computed over every row first, read back by position
        contexts = [(c[0], c[1], i) for i, c in enumerate(contexts)]
        scope.window_values = {id(w): over_values(w, contexts, scope, grouped) for w in windows}
    compiled = [scope.compile(item) for item in items]
    names = [_output_name(item, i) for i, item in enumerate(items)]
    pairs = [(tuple(fn(ctx) for fn in compiled), ctx) for ctx in contexts]
    if node.args.get("distinct"):
        pairs = list({out: (out, ctx) for out, ctx in reversed(pairs)}.values())[::-1]
    order = node.args.get("order")
    if order is not None:
        pairs = _order(pairs, [(_order_key(o.this, names, scope), bool(o.args.get("desc")))
                               for o in order.expressions])
    offset, limit = node.args.get("offset"), node.args.get("limit")
    start = int(offset.expression.this) if offset is not None else 0
    rows = [out for out, _ in pairs]
    rows = rows[start:start + int(limit.expression.this)] if limit is not None else rows[start:]
    return Relation([(None, n) for n in names], rows)


def _order_key(node: exp.Expression, names: list[str], scope: Scope):
    """An ORDER BY key: an output column by name or position, else an expression of the input."""
    if isinstance(node, exp.Column) and not node.table and node.name.lower() in names:
        at = names.index(node.name.lower())
        return lambda pair: pair[0][at]
    if isinstance(node, exp.Literal) and not node.is_string:
        at = int(node.this) - 1
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
        rows.append(tuple(scope.compile(c)(((), [])) for c in cells))
    width = len(rows[0]) if rows else 0
    alias = node.args.get("alias")
    names = [c.name for c in alias.columns] if alias is not None and alias.columns else [
        f"expr${i}" for i in range(width)]
    return Relation([(alias.name.lower() if alias is not None else None, n.lower()) for n in names], rows)


def _set_operation(node, catalog) -> Relation:
    left, right = evaluate(node.this, catalog), evaluate(node.expression, catalog)
    if len(left.columns) != len(right.columns):
        raise QueryError(f"{node.key.upper()} of {len(left.columns)} and {len(right.columns)} columns")
    if isinstance(node, exp.Union):
        rows = left.rows + right.rows
        if node.args.get("distinct"):
            rows = list(dict.fromkeys(rows))
    elif isinstance(node, exp.Except):
        drop = set(right.rows)
        rows = list(dict.fromkeys(r for r in left.rows if r not in drop))
    else:
        keep = set(right.rows)
        rows = list(dict.fromkeys(r for r in left.rows if r in keep))
    result = Relation([(None, n) for n in left.names()], rows)
    order = node.args.get("order")
    if order is not None:
        scope = Scope(result, catalog)
        keys = [((lambda fn: lambda pair: fn(pair[1]))(scope.compile(o.this)), bool(o.args.get("desc")))
                for o in order.expressions]
        result.rows = [out for out, _ in _order([(r, (r, None)) for r in result.rows], keys)]
    limit = node.args.get("limit")
    if limit is not None:
        result.rows = result.rows[:int(limit.expression.this)]
    return result
