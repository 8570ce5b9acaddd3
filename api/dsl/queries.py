"""Relational evaluation of one parsed query (SELECT, JOIN, GROUP BY, UNION, VALUES) over rows."""

from __future__ import annotations

import datetime as dt
import math
import operator

from sqlglot import exp

import gyreflow.api.dsl.functions as fns
from gyreflow.api.dsl.arithmetic import (
    OPERATORS,
    compile_arithmetic,
    compile_negation,
    refuse_text_aggregate,
)
from gyreflow.api.dsl.errors import QueryError
from gyreflow.api.dsl.java_math import java_div, java_mod
from gyreflow.api.dsl.row_errors import row_error
from gyreflow.api.dsl.rows import cast_value
from gyreflow.api.dsl.sorting import _order as _order  # ORDER BY's order: select, over and graphs
from gyreflow.api.dsl.sorting import _sort_key as _sort_key  # read these names from here
from gyreflow.api.dsl.sorting import ordering as ordering
from gyreflow.api.dsl.sql_types import requalified
from gyreflow.api.dsl.windowing import interval_seconds


class Relation:
    """Rows and the ``(qualifier, name)`` of each column (names in lower case)."""

    __slots__ = ("columns", "rows")

    def __init__(self, columns: list[tuple[str | None, str]], rows: list[tuple]) -> None:
        self.columns, self.rows = columns, rows

    def requalified(self, qualifier: str | None) -> Relation:
        return Relation([requalified(c, qualifier) for c in self.columns], self.rows)

    def names(self) -> list[str]:
        return [n for _, n in self.columns]


def _lower(name) -> str:
    return str(name).lower()


def _strict2(fn):
    def apply(a, b):
        return None if a is None or b is None else fn(a, b)
    return apply


def _comparable(a, b):
    """Values compared as Java compares them after Calcite's implicit casts (numbers vs text)."""
    if isinstance(a, str) and isinstance(b, (int, float)) and not isinstance(b, bool):
        try:
            return float(a), b
        except ValueError:
            return a, str(b)
    if isinstance(b, str) and isinstance(a, (int, float)) and not isinstance(a, bool):
        try:
            return a, float(b)
        except ValueError:
            return str(a), b
    return a, b


def _cmp(fn):
    def apply(a, b):
        if a is None or b is None:
            return None
        return fn(*_comparable(a, b))
    return apply


BINARY = {
    exp.Add: _strict2(lambda a, b: a + b), exp.Sub: _strict2(lambda a, b: a - b),
    exp.Mul: _strict2(lambda a, b: a * b), exp.Div: _strict2(java_div),
    exp.Mod: _strict2(java_mod), exp.EQ: _cmp(lambda a, b: a == b),
    exp.NEQ: _cmp(lambda a, b: a != b), exp.GT: _cmp(lambda a, b: a > b),
    exp.GTE: _cmp(lambda a, b: a >= b), exp.LT: _cmp(lambda a, b: a < b),
    exp.LTE: _cmp(lambda a, b: a <= b), exp.DPipe: fns._concat,
}


_ORDERING = {exp.EQ: operator.eq, exp.NEQ: operator.ne, exp.GT: operator.gt, exp.GTE: operator.ge,
             exp.LT: operator.lt, exp.LTE: operator.le}


def _against_number(left, op, compare, number):
    """``left <op> number``: a number compared at once, anything else (NULL, text) as ``op`` does."""
    def apply(ctx):
        value = left(ctx)
        kind = type(value)
        if kind is int or kind is float:
            return compare(value, number)
        return op(value, number)
    return apply


def _and(a, b):
    if a is False or b is False:
        return False
    if a is None or b is None:
        return None
    return True


def _or(a, b):
    if a is True or b is True:
        return True
    if a is None or b is None:
        return None
    return False


def function_name(node: exp.Expression) -> str:
    if isinstance(node, exp.Anonymous):
        return _lower(node.name)
    return _lower(node.sql_name())


def function_args(node: exp.Expression) -> list[exp.Expression]:
    """A function's arguments in order (sqlglot keeps them under named keys)."""
    found = []
    for key in node.arg_types:
        value = node.args.get(key)
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, exp.Expression):
                found.append(item)
    return found


class Scope:
    """Names a query's expressions can use: the input's columns, then the output's aliases."""

    def __init__(self, relation: Relation, catalog, aliases: dict[str, exp.Expression] | None = None):
        self.relation, self.catalog, self.aliases = relation, catalog, aliases or {}

    def index(self, name: str, table: str | None) -> int | None:
        name = _lower(name)
        table = _lower(table) if table else None
        for i, (qualifier, column) in enumerate(self.relation.columns):
            if column == name and (table is None or qualifier == table):
                return i
        return None

    def is_aggregate(self, node: exp.Expression) -> bool:
        if isinstance(node, exp.AggFunc) and not isinstance(node, exp.Anonymous):
            return True
        if isinstance(node, exp.Anonymous):
            name = function_name(node)
            return (self.catalog.aggregate(name) is not None
                    or self.catalog.aggregate_parameter(name) is not None)
        return False

    def has_aggregate(self, node: exp.Expression) -> bool:
        """Whether ``node`` aggregates its group (an aggregate OVER a window does not, nor one in a
        sub-query: ``(SELECT COUNT(*) FROM t)`` is one value of every row)."""
        return any(self.is_aggregate(n) and not _over(n) for n in own_nodes(node)
                   if isinstance(n, exp.Func)) if node else False

    # ---- compiling: an expression becomes a function of ``(row, group)``
    def compile(self, node: exp.Expression):
        if isinstance(node, (exp.Paren, exp.Alias)):
            return self.compile(node.this)
        if isinstance(node, exp.Literal):
            value = node.this if node.is_string else _number(node.this)
            return lambda ctx: value
        if isinstance(node, exp.Null):
            return lambda ctx: None
        if isinstance(node, exp.Boolean):
            value = bool(node.this)
            return lambda ctx: value
        if isinstance(node, exp.Column):
            return self._column(node)
        if isinstance(node, exp.Neg):
            return compile_negation(self, node)
        if isinstance(node, exp.Not):
            inner = self.compile(node.this)
            return lambda ctx: None if (v := inner(ctx)) is None else not v
        if isinstance(node, exp.And):
            left, right = self.compile(node.this), self.compile(node.expression)
            return lambda ctx: _and(left(ctx), right(ctx))
        if isinstance(node, exp.Or):
            left, right = self.compile(node.this), self.compile(node.expression)
            return lambda ctx: _or(left(ctx), right(ctx))
        if type(node) in OPERATORS:  # + - * / %: Java's, integers checked (arithmetic.py)
            return compile_arithmetic(self, node)
        if type(node) in BINARY:
            op = BINARY[type(node)]
            left, right = self.compile(node.this), self.compile(node.expression)
            if type(node) in _ORDERING and isinstance(node.expression, exp.Literal) \
                    and not node.expression.is_string:
                return _against_number(left, op, _ORDERING[type(node)], _number(node.expression.this))
            return lambda ctx: op(left(ctx), right(ctx))
        if isinstance(node, exp.Is):
            return self._is(node)
        if isinstance(node, (exp.Like, exp.ILike)):
            return self._like(node)
        if isinstance(node, exp.Escape) and isinstance(node.this, (exp.Like, exp.ILike)):
            return self._like(node.this, node.expression)
        if isinstance(node, exp.Escape):
            return self.compile(node.this)
        if isinstance(node, exp.In):
            return self._in(node)
        if isinstance(node, exp.Between):
            value, low, high = (self.compile(node.this), self.compile(node.args["low"]),
                                self.compile(node.args["high"]))
            ge, le = BINARY[exp.GTE], BINARY[exp.LTE]
            return lambda ctx: _and(ge(value(ctx), low(ctx)), le(value(ctx), high(ctx)))
        if isinstance(node, exp.Case):
            return self._case(node)
        if isinstance(node, exp.If):
            cond, yes = self.compile(node.this), self.compile(node.args["true"])
            no = self.compile(node.args["false"]) if node.args.get("false") else (lambda ctx: None)
            return lambda ctx: yes(ctx) if cond(ctx) else no(ctx)
        if isinstance(node, (exp.Cast, exp.TryCast)):
            return self._cast(node)
        if isinstance(node, exp.Subquery) or isinstance(node, exp.Select):
            return self._scalar_subquery(node)
        if isinstance(node, exp.Filter) and self.has_aggregate(node.this):
            return self._filtered(node)  # COUNT(*) FILTER (WHERE price < 10)
        if isinstance(node, exp.Interval):  # ts - INTERVAL '10' SECOND
            value = dt.timedelta(seconds=interval_seconds(node))
            return lambda ctx: value
        if isinstance(node, exp.Window):
            return self.over(node)
        if isinstance(node, exp.Func):
            return self._function(node)
        raise QueryError(f"{node.sql(dialect='')[:60]!r} ({node.key}) is not supported in an expression")

    def _column(self, node: exp.Column):
        name, table = node.name, node.table or None
        index = self.index(name, table)
        if index is not None:
            return lambda ctx: ctx[0][index]
        if table is not None:  # a property of a vertex or edge column: a.id
            holder = self.index(table, None)
            if holder is not None:
                key = _lower(name)
                return lambda ctx: _property(ctx[0][holder], key)
        if table is None and _lower(name) in self.aliases:
            return self.compile(self.aliases[_lower(name)])
        if table is None and _lower(name) in fns.CONSTANTS:
            value = fns.CONSTANTS[_lower(name)]
            return lambda ctx: value
        known = ", ".join(n for _, n in self.relation.columns)
        full = f"{table}.{name}" if table else name
        meta = node.this.meta if isinstance(node.this, exp.Identifier) else {}
        column = meta["col"] - len(node.name) + 1 if "col" in meta else None
        raise QueryError(f"no column {full} (columns: {known})", line=meta.get("line"), column=column)

    def _is(self, node: exp.Is):
        """``x IS [NOT] NULL/TRUE/FALSE``: never NULL. sqlglot may write ``IS NOT`` as the
        ``negate`` flag rather than a ``Not`` around it."""
        inner, other = self.compile(node.this), node.expression
        want = bool(other.this) if isinstance(other, exp.Boolean) else None
        if node.args.get("negate"):
            return lambda ctx: inner(ctx) is not want
        return lambda ctx: inner(ctx) is want

    def _like(self, node: exp.Like | exp.ILike, escape: exp.Expression | None = None):
        """``x [NOT] [I]LIKE pattern [ESCAPE c]``: NULL when ``x`` or the pattern is; sqlglot writes
        ``NOT LIKE`` as the ``negate`` flag, not as a ``Not`` around the LIKE."""
        left, right = self.compile(node.this), self.compile(node.expression)
        marker = self.compile(escape) if escape is not None else (lambda ctx: "\\")
        lower, negate = isinstance(node, exp.ILike), bool(node.args.get("negate"))

        def like(ctx):
            value, pattern, escape_char = left(ctx), right(ctx), marker(ctx)
            if value is None or pattern is None or escape_char is None:
                return None
            if lower:
                value = value.lower() if isinstance(value, str) else value
                pattern = pattern.lower() if isinstance(pattern, str) else pattern
            return fns.SCALAR["like"](value, pattern, escape_char) is not negate
        return like

    def _in(self, node: exp.In):
        """``x IN (...)`` with SQL's three values: TRUE when ``x`` equals a member, else NULL when ``x``
        or a member is NULL, else FALSE; FALSE over a sub-query of no rows, whatever ``x`` is."""
        value = self.compile(node.this)
        query = node.args.get("query")
        if query is not None:
            inner = self.catalog.evaluate(query.this if isinstance(query, exp.Subquery) else query)
            if not inner.rows:
                return lambda ctx: False
            members = {row[0] for row in inner.rows} - {None}
            missing = None if any(row[0] is None for row in inner.rows) else False

            def within(ctx):
                v = value(ctx)
                if v is None:
                    return None
                return True if v in members else missing
            return within
        options = [self.compile(e) for e in node.expressions]
        equal = BINARY[exp.EQ]

        def among(ctx):
            v = value(ctx)
            if v is None:
                return None
            answer = False
            for option in options:
                same = equal(v, option(ctx))
                if same:
                    return True
                if same is None:
                    answer = None  # unless a later member equals x
            return answer
        return among

    def _case(self, node: exp.Case):
        subject = self.compile(node.this) if node.this else None
        branches = [(self.compile(i.this), self.compile(i.args["true"])) for i in node.args["ifs"]]
        default = self.compile(node.args["default"]) if node.args.get("default") else (lambda ctx: None)

        def case(ctx):
            key = subject(ctx) if subject else None
            for cond, value in branches:
                if (cond(ctx) == key and key is not None) if subject else cond(ctx) is True:
                    return value(ctx)
            return default(ctx)
        return case

    def _filtered(self, node: exp.Filter):
        """An aggregate over the rows of its group for which the FILTER's condition is true."""
        inner, test = self.compile(node.this), self.compile(node.expression.this)
        return lambda ctx: inner((ctx[0], [r for r in ctx[1] if test((r, None)) is True]))

    def over(self, node: exp.Window):
        """``f(...) OVER (...)``: its value per row, computed over the whole SELECT (``over.py``)."""
        values = getattr(self, "window_values", {}).get(id(node))
        if values is None:
            raise QueryError("a window function (OVER) runs only in a SELECT list")
        return lambda ctx: values[ctx[2]]

    def _cast(self, node: exp.Cast):
        """``CAST(x AS type)``: a value that does not fit the type (text that is no number, a number
        out of an integer type's range) stops the query; ``TRY_CAST`` gives NULL for it."""
        inner, kind = self.compile(node.this), node.to.sql().lower()
        lenient = isinstance(node, exp.TryCast)

        def cast(ctx):
            value = inner(ctx)
            try:
                return cast_value(value, kind)
            except (ValueError, OverflowError) as exc:
                if lenient:
                    return None
                raise row_error(QueryError(str(exc)), node, ctx[0], ctx[1] is not None,
                                self.relation.columns) from None
        return cast

    def _scalar_subquery(self, node):
        inner = self.catalog.evaluate(node.this if isinstance(node, exp.Subquery) else node)
        value = inner.rows[0][0] if inner.rows else None
        return lambda ctx: value

    def _function(self, node: exp.Func):
        name = function_name(node)
        if name.startswith("__sub_") and getattr(self.catalog, "subquery_compiler", None):
            return self.catalog.subquery_compiler(self, int(name[len("__sub_"):]))
        if self.is_aggregate(node):
            return self._aggregate(node, name)
        args = [self.compile(a) for a in function_args(node)]
        fn = self.catalog.scalar(name)
        if fn is None:
            raise _no_function(node, name)

        def call(ctx):
            values = [a(ctx) for a in args]
            try:
                return fn(*values)
            except TypeError:  # a value of a type the function does not take
                cause = QueryError(f"{name.upper()} cannot take ({', '.join(map(repr, values))})")
                raise row_error(cause, node, ctx[0], ctx[1] is not None, self.relation.columns) from None
        return call

    def _aggregate(self, node: exp.Func, name: str):
        args = function_args(node)
        distinct = False
        if args and isinstance(args[0], exp.Distinct):
            distinct, args = True, list(args[0].expressions) + args[1:]
        if name == "count" and (not args or isinstance(args[0], exp.Star)):
            return lambda ctx: len(ctx[1])
        parameter = self.catalog.aggregate_parameter(name)
        if parameter is not None:
            column, fraction = self.compile(args[0]), self.compile(args[1])
            return lambda ctx: parameter([column((r, None)) for r in ctx[1]], fraction(ctx))
        fn = self.catalog.aggregate(name)
        if fn is None:  # sqlglot knows it (MEDIAN, STRING_AGG, ...): gyreflow has no implementation
            raise _no_function(node, name)
        refuse_text_aggregate(node, name, args, self)
        compiled = [self.compile(a) for a in args]
        if len(compiled) == 1:
            one = compiled[0]

            def values(group):
                return [one((r, None)) for r in group]
        else:
            def values(group):
                return [tuple(c((r, None)) for c in compiled) for r in group]

        def aggregate(ctx):
            found = values(ctx[1])
            if distinct:  # every NaN one value (Java's Double.equals, DuckDB)
                found = list(dict.fromkeys(_one_nan(v) for v in found if v is not None))
            try:
                return fn(found)
            except TypeError:  # a value of a type the aggregate does not take: name one
                odd = next((v for v in found if v is not None and type(v) not in (int, float)), None)
                cause = QueryError(f"{name.upper()} cannot take {odd!r}")
                raise row_error(cause, node, ctx[0], True, self.relation.columns) from None
        return aggregate


def _one_nan(value):
    """``value``, every NaN as one object: a dict's keys take them as one."""
    return math.nan if type(value) is float and value != value else value


def _no_function(node: exp.Func, name: str) -> QueryError:
    """A function gyreflow has no implementation of, at the place its name is written (sqlglot keeps
    the name's end and length; some functions it rebuilds keep none: their first argument's place)."""
    meta = node.this.meta if isinstance(node, exp.Anonymous) and isinstance(node.this, exp.Identifier) \
        else node.meta
    line, column = meta.get("line"), None
    if "col" in meta:
        column = meta["col"] - (meta["end"] - meta["start"] if "end" in meta else len(name) - 1)
    else:
        inner = next((i.meta for i in node.find_all(exp.Identifier) if "col" in i.meta), {})
        line, column = inner.get("line"), inner.get("col")
    return QueryError(f"no function {name.upper()}", line=line, column=column,
                      hint="see docs/dsl.md for GeaFlow's built-in functions gyreflow has")


def own_nodes(node: exp.Expression):
    """The nodes of ``node`` that belong to its own query: a sub-query's are left out (it aggregates
    and numbers its own rows)."""
    return node.walk(prune=lambda n: n is not node and isinstance(n, (exp.Subquery, exp.Select)))


def _over(node: exp.Expression) -> bool:
    """Whether ``node`` is the function of a window (``AVG(x) OVER (...)``) or inside one."""
    while node.parent is not None:
        if isinstance(node.parent, exp.Window) and node.arg_key == "this":
            return True
        node = node.parent
    return False


def _property(element, key: str):
    if not isinstance(element, dict):
        return None
    if key == "__label":
        return getattr(element, "label", None)
    if key == "__id":
        return getattr(element, "id", None)
    for name, value in element.items():
        if name.lower() == key:
            return value
    return None


def _number(text: str):
    try:
        return int(text)
    except ValueError:
        return float(text)
