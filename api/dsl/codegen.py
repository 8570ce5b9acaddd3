"""A query's expressions over one row compiled to one Python function each (``row_function``), so a
row costs one call, not one call per node of the expression: columns become ``row[i]``, numbers
constants, arithmetic and comparisons inline with SQL's NULL rules; anything else calls the
expression's compiled closure (``Scope.compile``), which gives the same values. An inline ``+ - *``
whose value may be an integer is checked against its type's range (two comparisons; none where the
type is a double); a Python TypeError (text where a number belongs) is explained by running the
closures on the same row, which name the expression.

Functions are made where a query runs (they are not picklable), once per operator instance."""

from __future__ import annotations

import itertools

from sqlglot import exp

from gyreflow.api.dsl.arithmetic import OPERATORS, Arithmetic
from gyreflow.api.dsl.errors import QueryError
from gyreflow.api.dsl.queries import BINARY, Scope, _and, _number, _or
from gyreflow.api.dsl.row_errors import row_error

_INLINE = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*"}
_ORDER = {exp.EQ: "==", exp.NEQ: "!=", exp.GT: ">", exp.GTE: ">=", exp.LT: "<", exp.LTE: "<="}


class _Writer:
    """The text of one expression and the names its text refers to."""

    def __init__(self, scope: Scope) -> None:
        self.scope, self.names, self._ids = scope, {}, itertools.count()

    def name(self, value, prefix: str = "_k") -> str:
        name = f"{prefix}{next(self._ids)}"
        self.names[name] = value
        return name

    def text(self, node: exp.Expression) -> str:
        if isinstance(node, exp.Paren):
            return self.text(node.this)
        if isinstance(node, exp.Column):
            at = self.scope.index(node.name, node.table or None)
            if at is not None:
                return f"row[{at}]"
        elif isinstance(node, exp.Literal) and not node.is_string:
            return repr(_number(node.this))
        elif isinstance(node, exp.Literal):
            return repr(node.this)
        elif type(node) in OPERATORS:  # + - * / %: Java's, an integer result's range checked
            a, b = self.name(None, "_a"), self.name(None, "_b")
            arithmetic = Arithmetic(node, self.scope)
            full = self.name(arithmetic, "_ar")  # the whole operation: names what goes wrong
            if type(node) in _INLINE:
                value, guard = f"{a} {_INLINE[type(node)]} {b}", ""
            else:  # by zero: the whole operation (an integer's is an error, a double's Java's answer)
                value, guard = f"{self.name(arithmetic.fn, '_fn')}({a}, {b})", f"{b} != 0 and "
            if arithmetic.double:  # a double on one side: no integer, and by zero Java's answer
                checked = value
            else:  # an integer in its type's range passes; anything else goes to the whole operation
                r = self.name(None, "_r")
                test = (f"{arithmetic.low} <= ({r} := {value}) <= {arithmetic.high}" if arithmetic.integers
                        else f"(type({r} := {value}) is float or type({r}) is int and "
                             f"{arithmetic.low} <= {r} <= {arithmetic.high})")
                checked = f"({r} if {guard}{test} else {full}({a}, {b}, row))"
            # both sides evaluated, as the closures evaluate them (an error on the right counts)
            return (f"(None if (({a} := {self.text(node.this)}) is None) + (({b} := "
                    f"{self.text(node.expression)}) is None) else {checked})")
        elif type(node) in _ORDER and isinstance(node.expression, exp.Literal) \
                and not node.expression.is_string:
            # a number against a number at once; NULL, text, booleans as the closures compare them
            v, op = self.name(None, "_v"), self.name(BINARY[type(node)], "_op")
            number = repr(_number(node.expression.this))
            return (f"({v} {_ORDER[type(node)]} {number} if type({v} := {self.text(node.this)}) is int "
                    f"or type({v}) is float else {op}({v}, {number}))")
        elif isinstance(node, (exp.And, exp.Or)):
            both = self.name(_and if isinstance(node, exp.And) else _or, "_l")
            return f"{both}({self.text(node.this)}, {self.text(node.expression)})"
        elif type(node) in BINARY:
            op = self.name(BINARY[type(node)], "_op")
            return f"{op}({self.text(node.this)}, {self.text(node.expression)})"
        fn = self.name(self.scope.compile(node), "_c")  # the closure: same values, one call more
        return f"{fn}((row, None))"


def row_method(node: exp.Expression, scope: Scope, test: bool = False):
    """``node`` as a method ``__call__(self, row)`` of one row (a condition: whether it is true,
    not false or NULL); a QueryError goes out as ``self.failed(error)`` (naming the statement)."""
    writer = _Writer(scope)
    body = writer.text(node)
    return _method(f"({body}) is True" if test else body, writer.names,
                   lambda row: scope.compile(node)((row, None)))


def rows_method(nodes: list, scope: Scope):
    """``nodes`` as one method ``__call__(self, row)`` giving the tuple of their values."""
    writer = _Writer(scope)
    nodes = [n.this if isinstance(n, exp.Alias) else n for n in nodes]
    body = ", ".join(writer.text(n) for n in nodes)
    return _method(f"({body}{',' if len(nodes) == 1 else ''})", writer.names,
                   lambda row: [scope.compile(n)((row, None)) for n in nodes])


def _method(body: str, names: dict, explain):
    """The method of ``body``; a TypeError (a value of the wrong type met inline) is explained by
    ``explain(row)``, the closures' evaluation of the same row, whose QueryError names the expression."""
    source = ("def run(self, row):\n    try:\n        return " + body +
              "\n    except QueryError as exc:\n        raise self.failed(exc) from None\n"
              "    except TypeError:\n        try:\n            _explain(row)\n"
              "        except QueryError as exc:\n            raise self.failed(exc) from None\n"
              "        raise\n")
    return _made(source, {**names, "QueryError": QueryError, "_explain": explain})


def _made(source: str, names: dict, made: str = "run"):
    """The function ``made`` that ``source`` (text made here, not a user's) defines."""
    namespace = dict(names)
    exec(compile(source, "<sql expression>", "exec"), namespace)
    return namespace[made]


_UPDATES = {
    "count": "if ({x}) is not None:\n            acc[{i}] += 1",
    "sum": ("if (_v := {x}) is not None:\n            _s = acc[{i}]\n            _s[0] += 1\n"
            "            if isinstance(_v, float):\n                _exact_add(_s[2], _v)\n"
            "            else:\n                _s[1] += _v"),
    # NaN is the largest double (Java's compareTo): MAX keeps one once met, MIN replaces one
    "min": ("if (_v := {x}) is not None and (acc[{i}] is None or _v < acc[{i}] or acc[{i}] != acc[{i}]):"
            "\n            acc[{i}] = _v"),
    "max": ("if (_v := {x}) is not None and (acc[{i}] is None or _v > acc[{i}] or _v != _v):"
            "\n            acc[{i}] = _v"),
}
_UPDATES["avg"] = _UPDATES["sum"]


def adder(calls: list, scope: Scope, where: exp.Expression | None, prefix: str, names: dict):
    """``add(acc, row)`` of running aggregates as one function: ``calls`` are ``(name, argument
    node or None for COUNT(*))`` for the slots 1, 2, ... of ``acc`` (slot 0: the group's first row);
    a row for which ``where`` is not true is left out; a QueryError names the statement (``prefix``)."""
    writer = _Writer(scope)
    lines = ["def add(acc, row):", "    try:"]
    if where is not None:
        lines.append(f"        if ({writer.text(where)}) is not True:\n            return acc")
    lines.append("        if acc[0] is None:\n            acc[0] = row")
    for slot, (name, node) in enumerate(calls, 1):
        if node is None:
            lines.append(f"        acc[{slot}] += 1")
        else:
            lines.append("        " + _UPDATES[name].format(x=writer.text(node), i=slot))
    lines += ["    except QueryError as exc:",
              "        raise QueryError(_prefix + exc.message) from None",
              "    except TypeError:",
              "        try:\n            _explain(row)",
              "        except QueryError as exc:",
              "            raise QueryError(_prefix + exc.message) from None",
              "        raise",
              "    return acc"]
    return _made("\n".join(lines) + "\n", {**writer.names, **names, "QueryError": QueryError,
                                              "_prefix": prefix, "_explain": _explainer(calls, scope, where)},
                 "add")


def _explainer(calls: list, scope: Scope, where: exp.Expression | None):
    """``explain(row)``: raises the QueryError that names why ``add`` met a TypeError on ``row``: an
    expression's (from its closure), or an aggregate's value that is no number (SUM of text)."""
    def explain(row):
        ctx = (row, None)
        if where is not None and scope.compile(where)(ctx) is not True:
            return
        for name, node in calls:
            if node is None:
                continue
            value = scope.compile(node)(ctx)
            if name in ("sum", "avg") and value is not None and type(value) not in (int, float):
                called = node.parent if isinstance(node.parent, exp.Func) else node  # SUM(x), not x
                raise row_error(QueryError(f"{name.upper()} cannot take {value!r}"), called, row,
                                columns=scope.relation.columns)
    return explain
