"""Static SQL types of a query's expressions, from the declared types of the table columns they read.

A relation's column is ``(qualifier, name)``; one read from a table is a ``Column``, which also
carries the type the table declares, and keeps it through joins (``left.columns + right.columns``).
A column reference resolved against such a column records the type on its node (``meta``), so that
the type travels with the parsed query to where it runs, also when the operator there knows the
table's columns by name only. Where nothing says, a type is None: unknown."""

from __future__ import annotations

from sqlglot import exp

from gyreflow.api.dsl.java_math import BIGINT_MAX, BIGINT_MIN, INT_MAX, INT_MIN

_META = "gyreflow_type"
# declared type names by the kind of value they hold
_KINDS = {
    "int": ("int", "integer", "smallint", "tinyint"), "bigint": ("bigint", "long"),
    "double": ("double", "float", "real", "decimal"),
    "text": ("varchar", "string", "char", "text", "binary_string"),
    "boolean": ("boolean",), "timestamp": ("timestamp",), "date": ("date",),
}
_KIND = {name: kind for kind, names in _KINDS.items() for name in names}
# aggregates and functions whose value is a double or a bigint whatever they read
_DOUBLE_FUNCTIONS = {"avg", "stddev", "stddev_samp", "stddev_pop", "variance", "var_samp", "percentile",
                     "sqrt", "ln", "log", "log10", "exp", "power", "pow", "sin", "cos", "tan", "cot",
                     "asin", "acos", "atan", "atan2", "degrees", "radians", "cbrt", "rand", "sign"}


def kind_of(sql_type: str | None) -> str | None:
    """The kind of value a declared type holds: int (32 bits or fewer), bigint, double, text,
    boolean, timestamp, date; None for another or no type.

    >>> kind_of("VARCHAR(10)"), kind_of("integer"), kind_of("long")
    ('text', 'int', 'bigint')
    """
    if not sql_type:
        return None
    return _KIND.get(sql_type.strip().lower().split("(")[0].strip())


class Column(tuple):
    """A relation's column ``(qualifier, name)`` that knows its declared type (``type``)."""

    def __new__(cls, pair, sql_type: str | None = None):
        column = super().__new__(cls, pair)
        column.type = sql_type
        return column

    def __reduce__(self):
        return (Column, (tuple(self), self.type))


def typed_columns(qualifier: str | None, columns: list[tuple[str, str]]) -> list[Column]:
    """A table's ``(name, type)`` columns as a relation's columns under ``qualifier``."""
    return [Column((qualifier, name.lower()), sql_type) for name, sql_type in columns]


def requalified(column: tuple, qualifier: str | None) -> tuple:
    """``column`` under another qualifier, its type kept."""
    if isinstance(column, Column):
        return Column((qualifier, column[1]), column.type)
    return (qualifier, column[1])


def _literal_kind(node: exp.Literal) -> str | None:
    if node.is_string:
        return "text"
    try:
        value = int(node.this)
    except ValueError:
        return "double"
    if INT_MIN <= value <= INT_MAX:
        return "int"
    return "bigint" if BIGINT_MIN <= value <= BIGINT_MAX else None


def _wider(a: str | None, b: str | None) -> str | None:
    """The kind of ``a op b`` for arithmetic: double over bigint over int (Calcite's widening)."""
    if a is None or b is None:
        return None
    if "double" in (a, b) and {a, b} <= {"int", "bigint", "double"}:
        return "double"
    if {a, b} <= {"int", "bigint"}:
        return "bigint" if "bigint" in (a, b) else "int"
    return None


ARITHMETIC = (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod)


def static_kind(node: exp.Expression, scope, seen: frozenset = frozenset()) -> str | None:
    """The kind of value ``node`` gives over ``scope``'s relation (see ``kind_of``), None if unknown."""
    if isinstance(node, (exp.Paren, exp.Alias)):
        return static_kind(node.this, scope, seen)
    if isinstance(node, exp.Literal):
        return _literal_kind(node)
    if isinstance(node, exp.Boolean):
        return "boolean"
    if isinstance(node, exp.Column):
        return _column_kind(node, scope, seen)
    if isinstance(node, exp.Neg):
        return static_kind(node.this, scope, seen)
    if isinstance(node, ARITHMETIC):
        return _wider(static_kind(node.this, scope, seen), static_kind(node.expression, scope, seen))
    if isinstance(node, (exp.Cast, exp.TryCast)):
        return kind_of(node.to.sql())
    if isinstance(node, exp.Count):
        return "bigint"
    if isinstance(node, exp.Func):
        name = node.name.lower() if isinstance(node, exp.Anonymous) else node.sql_name().lower()
        return "double" if name in _DOUBLE_FUNCTIONS else None
    return None


def _column_kind(node: exp.Column, scope, seen: frozenset) -> str | None:
    at = scope.index(node.name, node.table or None)
    if at is not None:
        declared = getattr(scope.relation.columns[at], "type", None)
        if declared is not None:
            node.meta[_META] = declared  # for where the query runs (see the module's docstring)
            return kind_of(declared)
        return kind_of(node.meta.get(_META))
    name = node.name.lower()
    if not node.table and name in scope.aliases and name not in seen:
        return static_kind(scope.aliases[name], scope, seen | {name})
    return None


def declared_type(node: exp.Expression, scope) -> str | None:
    """The declared type (as written, lower case) of the column ``node`` reads, if it is one."""
    while isinstance(node, (exp.Paren, exp.Alias)):
        node = node.this
    if not isinstance(node, exp.Column):
        return None
    at = scope.index(node.name, node.table or None)
    declared = getattr(scope.relation.columns[at], "type", None) if at is not None else None
    declared = declared or node.meta.get(_META)
    return declared.lower() if declared else None
