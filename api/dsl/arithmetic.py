"""SQL arithmetic (``+ - * / %`` and negation) with Java's rules and gyreflow's checks: an integer
result must fit its static type (INT 32 bits, BIGINT 64, 64 when the type is not known) or the query
stops, text is refused before anything runs, and a run-time error names the expression and the row."""

from __future__ import annotations

import operator

from sqlglot import exp

from gyreflow.api.dsl.errors import QueryError
from gyreflow.api.dsl.java_math import integer_range, java_div, java_mod, overflow
from gyreflow.api.dsl.row_errors import row_error
from gyreflow.api.dsl.rows import java_string
from gyreflow.api.dsl.sql_types import declared_type, static_kind

OPERATORS = {exp.Add: (operator.add, "+"), exp.Sub: (operator.sub, "-"), exp.Mul: (operator.mul, "*"),
             exp.Div: (java_div, "/"), exp.Mod: (java_mod, "%")}
_NOT_NUMBERS = ("text", "boolean")


def _refuse_text(node: exp.Expression, operands: list, scope, symbol: str) -> None:
    """Arithmetic on a text or boolean column or literal is refused before anything runs."""
    for operand in operands:
        if static_kind(operand, scope) in _NOT_NUMBERS:
            declared = declared_type(operand, scope) or static_kind(operand, scope)
            inner = operand
            while isinstance(inner, exp.Paren):
                inner = inner.this
            meta = inner.this.meta if isinstance(inner, exp.Column) and isinstance(
                inner.this, exp.Identifier) else {}
            column = meta["col"] - len(inner.name) + 1 if "col" in meta else None
            raise QueryError(f"{node.sql()}: {symbol} needs numbers, {operand.sql()} is {declared.upper()}",
                             line=meta.get("line"), column=column,
                             hint="CAST it to a number, or join text with ||")


# aggregates of numbers only: SUM of a text column is refused before anything runs
_NUMERIC_AGGREGATES = {"sum", "avg", "stddev", "stddev_samp", "stddev_pop", "variance", "var_samp",
                       "percentile"}


def refuse_text_aggregate(node: exp.Expression, name: str, args: list, scope) -> None:
    """``SUM(text)`` and the like refused before anything runs."""
    if name in _NUMERIC_AGGREGATES and args:
        _refuse_text(node, args[:1], scope, name.upper())


def _checked_kind(node: exp.Expression, scope) -> str:
    """The integer type whose range an integer value of ``node`` must fit: its static type's, BIGINT's
    when that is not known (nothing in GeaFlow's SQL is wider)."""
    kind = static_kind(node, scope)
    return kind if kind in ("int", "bigint") else "bigint"


class Arithmetic:
    """One arithmetic node: ``self(a, b, row)`` its value for operand values ``a`` and ``b`` (NULL
    when one is), ``check(a, b, value, row)`` the checks of a value computed elsewhere (codegen).
    An error names the expression and the row (the group's first row when ``grouped``)."""

    def __init__(self, node: exp.Expression, scope) -> None:
        self.fn, self.symbol = OPERATORS[type(node)]
        _refuse_text(node, [node.this, node.expression], scope, self.symbol)
        self.node = node
        self.columns = scope.relation.columns  # to name the row of an error
        static = static_kind(node, scope)
        self.double = static == "double"  # no integer to check
        self.integers = static in ("int", "bigint")  # only integers (or NULL)
        self.kind = _checked_kind(node, scope)
        self.low, self.high = integer_range(self.kind)

    def __call__(self, a, b, row, grouped: bool = False):
        if a is None or b is None:
            return None
        try:
            value = self.fn(a, b)
        except TypeError:
            raise self._not_numbers(a, b, row, grouped) from None
        except QueryError as exc:  # an integer division by zero
            raise row_error(exc, self.node, row, grouped, self.columns) from None
        if type(value) is float:
            return value
        return self.check(a, b, value, row, grouped)

    def check(self, a, b, value, row, grouped: bool = False):
        """``value`` (``a op b``) if SQL allows it: an integer in its type's range, a double, a time
        plus or minus an interval (text is refused)."""
        kind = type(value)
        if kind is str:  # Python joined or repeated text
            raise self._not_numbers(a, b, row, grouped)
        if kind is int and not self.low <= value <= self.high:
            cause = overflow(f"{java_string(a)} {self.symbol} {java_string(b)}", self.kind, value)
            raise row_error(QueryError(cause), self.node, row, grouped, self.columns)
        return value

    def _not_numbers(self, a, b, row, grouped: bool) -> QueryError:
        return row_error(QueryError(f"{self.symbol} needs numbers, got {a!r} and {b!r}"), self.node, row,
                         grouped, self.columns)


class Negation:
    """``-x``: ``self(x, row)``, an integer checked against its type's range (``-(-2147483648)``)."""

    def __init__(self, node: exp.Neg, scope) -> None:
        _refuse_text(node, [node.this], scope, "-")
        self.node = node
        self.columns = scope.relation.columns  # to name the row of an error
        self.kind = _checked_kind(node, scope)
        self.low, self.high = integer_range(self.kind)

    def __call__(self, x, row, grouped: bool = False):
        if x is None:
            return None
        try:
            if type(x) is str:
                raise TypeError
            value = -x
        except TypeError:
            raise row_error(QueryError(f"- needs a number, got {x!r}"), self.node, row, grouped,
                            self.columns) from None
        if type(value) is int and not self.low <= value <= self.high:
            cause = overflow(f"-({java_string(x)})", self.kind, value)
            raise row_error(QueryError(cause), self.node, row, grouped, self.columns)
        return value


def compile_arithmetic(scope, node: exp.Expression):
    """``node`` (``a + b``, ...) as a function of ``(row, group)``."""
    arithmetic = Arithmetic(node, scope)
    left, right = scope.compile(node.this), scope.compile(node.expression)
    return lambda ctx: arithmetic(left(ctx), right(ctx), ctx[0], ctx[1] is not None)


def compile_negation(scope, node: exp.Neg):
    negation = Negation(node, scope)
    inner = scope.compile(node.this)
    return lambda ctx: negation(inner(ctx), ctx[0], ctx[1] is not None)
