"""SQL's rules for groups: every NaN is one group value, and a SELECT of groups reads nothing else."""

from __future__ import annotations

from sqlglot import exp

from gyreflow.api.dsl.errors import QueryError
from gyreflow.api.dsl.queries import _over

# Stands for every NaN in a key. Python's NaN is unequal to itself, so two rows' NaNs would make
# two groups; SQL groups them as one (Java's Double.equals, DuckDB). No SQL value is bytes, so the
# marker equals nothing else; it pickles, hashes and partitions (``stable_hash``) the same everywhere.
NAN = b"\x00NaN"


def same_key(values: tuple) -> tuple:
    """``values`` as a grouping key: each NaN replaced by ``NAN``, so that NaN groups with NaN.

    >>> same_key((1, float("nan"))) == same_key((1, float("nan")))
    True
    """
    for value in values:
        if value.__class__ is float and value != value:
            return tuple(NAN if v.__class__ is float and v != v else v for v in values)
    return values


def same_value(value):
    """One key value as ``same_key`` has it: ``NAN`` for a NaN, else the value itself."""
    return NAN if value.__class__ is float and value != value else value


def key_value(value):
    """A key value as the query reads it again (``CountRows`` outputs its key): NaN for ``NAN``."""
    return float("nan") if value.__class__ is bytes and value == NAN else value


class SameKeyOf:
    """A row's key by ``getter`` (``operator.itemgetter``: one value, or a tuple of them when
    ``many``), each NaN in it made ``NAN`` so that NaN groups with NaN. Picklable: keys are made on
    Spark's executors and worker processes too.

    >>> import operator
    >>> key = SameKeyOf(operator.itemgetter(1), many=False)
    >>> key((1, float("nan"))) == key((2, float("nan")))
    True
    """

    __slots__ = ("getter", "many")

    def __init__(self, getter, many: bool) -> None:
        self.getter, self.many = getter, many

    def __reduce__(self):
        return (SameKeyOf, (self.getter, self.many))

    def __call__(self, row):
        key = self.getter(row)
        if self.many:
            return same_key(key)
        return NAN if key.__class__ is float and key != key else key


def check_grouped(nodes: list, keys: list, scope, outputs: dict | None = None) -> None:
    """Refuses a column of a SELECT of groups (GROUP BY, an aggregate or HAVING) that is neither one
    of the GROUP BY expressions (or inside one of them) nor read inside an aggregate: a group has
    no one value of it. Expressions of grouped columns (``g + 1``, ``upper(g)``) and constants are
    fine, as in Calcite and DuckDB. ``nodes`` are the SELECT list, HAVING and ORDER BY expressions;
    ``outputs`` the SELECT list by output name: a key may name one (``RETURN forum.title ...
    GROUP BY title``, as GeaFlow's GQL has it), and then stands for its expression too."""
    resolved = [_resolved(k, scope) for k in keys]
    for key in keys:
        if isinstance(key, exp.Column) and not key.table and key.name.lower() in (outputs or {}):
            resolved.append(_resolved(outputs[key.name.lower()], scope))
    forms = {_form(k, scope) for k in keys} | {_form(r, scope) for r in resolved}
    kinds = tuple({type(r) for r in resolved if not isinstance(r, exp.Column)})
    for node in nodes:
        column = _ungrouped(node, scope, forms, kinds, set())
        if column is not None:
            full = f"{column.table}.{column.name}" if column.table else column.name
            meta = column.this.meta if isinstance(column.this, exp.Identifier) else {}
            at = meta["col"] - len(column.name) + 1 if "col" in meta else None
            raise QueryError(f"column {full} is neither in GROUP BY nor inside an aggregate: a group has "
                             f"no one value of it", line=meta.get("line"), column=at,
                             hint=f"add {full} to GROUP BY, or read it inside an aggregate "
                                  f"(MIN({full}), MAX({full}), ...)")


def _ungrouped(node, scope, forms: set, kinds: tuple, seen: set):
    """The first column ``node`` reads outside its GROUP BY expressions and aggregates, else None."""
    if isinstance(node, exp.Column):
        if isinstance(node.this, exp.Star):
            return None
        if _form(node, scope) in forms:
            return None
        name = node.name.lower()
        if _position(node, scope) is None and not node.table and name in scope.aliases \
                and name not in seen:  # an output alias: what it stands for
            return _ungrouped(scope.aliases[name], scope, forms, kinds, seen | {name})
        return node if _position(node, scope) is not None else None
    if kinds and isinstance(node, kinds) and _form(node, scope) in forms:
        return None
    if isinstance(node, (exp.Subquery, exp.Select)):
        return None  # a sub-query is a query of its own
    if isinstance(node, exp.Func) and scope.is_aggregate(node) and not _over(node):
        return None
    if isinstance(node, exp.Filter) and scope.has_aggregate(node.this):
        return None  # COUNT(*) FILTER (WHERE ...): the condition runs over the group's rows
    for child in node.iter_expressions():
        found = _ungrouped(child, scope, forms, kinds, seen)
        if found is not None:
            return found
    return None


def _resolved(node, scope, seen: frozenset = frozenset()):
    """A GROUP BY expression as it reads the input: an output alias (``GROUP BY groupId``, as
    GeaFlow allows) is the expression it names, parentheses are left out."""
    if isinstance(node, (exp.Paren, exp.Alias)):
        return _resolved(node.this, scope, seen)
    if isinstance(node, exp.Column) and not node.table and _position(node, scope) is None:
        name = node.name.lower()
        if name in scope.aliases and name not in seen:
            return _resolved(scope.aliases[name], scope, seen | {name})
    return node


def _position(column: exp.Column, scope):
    """Where a column of the input is (a property of a vertex or edge: ``(holder, key)``), else None."""
    at = scope.index(column.name, column.table or None)
    if at is not None:
        return at
    if column.table:
        holder = scope.index(column.table, None)
        if holder is not None:
            return (holder, column.name.lower())
    return None


def _form(node, scope):
    """An expression in a form that equals another's when both read the same columns the same way
    (``t.g`` and ``g`` are one column; an output alias stands for its expression)."""
    if isinstance(node, exp.Column):
        at = _position(node, scope)
        if at is not None:
            return ("column", at)
        name = node.name.lower()
        if not node.table and name in scope.aliases:
            return _form(scope.aliases[name], scope)
        return ("unknown", node.sql().lower())
    if isinstance(node, (exp.Paren, exp.Alias)):
        return _form(node.this, scope)

    def plain(n):
        if isinstance(n, exp.Column):
            return exp.Var(this=repr(_form(n, scope)))
        return n
    return ("expression", node.transform(plain).sql().lower())
