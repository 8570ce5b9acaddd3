"""Column predicates: ``filter(col("price") > 10)`` keeps a column batch columnar, and reads a row too.

A predicate is built from ``col(name)`` with comparisons (``==``, ``!=``, ``<``, ``<=``, ``>``,
``>=``), ``isin``, ``is_null`` / ``is_not_null``, and combined with ``&``, ``|`` and ``~``. On a column
batch it is evaluated in Arrow (``pyarrow.compute``) and the batch is filtered as a whole; on a row (a
dict) it is a plain function. Nulls follow SQL: a comparison with a null value is not true, so the
record is dropped (``is_null`` asks for them).
"""

from __future__ import annotations

import abc
import operator
from collections.abc import Iterable

from gyreflow.runtime.dataflow.columns.batch import column_of, value_of

_COMPARISONS = {
    "==": (operator.eq, "equal"),
    "!=": (operator.ne, "not_equal"),
    "<": (operator.lt, "less"),
    "<=": (operator.le, "less_equal"),
    ">": (operator.gt, "greater"),
    ">=": (operator.ge, "greater_equal"),
}


class Predicate(abc.ABC):
    """A condition on a record's columns: callable on a row, ``mask(batch)`` on a column batch."""

    @abc.abstractmethod
    def __call__(self, row) -> bool:
        """Whether the row (a dict) passes."""

    @abc.abstractmethod
    def mask(self, data):
        """A boolean Arrow array, one value per row of ``data`` (a RecordBatch); null is false."""

    def __and__(self, other: Predicate) -> Predicate:
        return _Both(self, _predicate(other), all, "and_", "&")

    def __or__(self, other: Predicate) -> Predicate:
        return _Both(self, _predicate(other), any, "or_", "|")

    def __invert__(self) -> Predicate:
        return _Not(self)

    def __bool__(self) -> bool:
        msg = "a column predicate has no truth value: combine predicates with &, | and ~"
        raise TypeError(msg)


def _predicate(value) -> Predicate:
    if not isinstance(value, Predicate):
        msg = f"a column predicate combines with another predicate, not {type(value).__name__}"
        raise TypeError(msg)
    return value


def _value(row, name: str):
    return value_of(row, name, f"col({name!r})")


def _column(data, name: str):
    return column_of(data, name, f"col({name!r})")


class col:  # noqa: N801 - named as the expression it starts, like pyspark.sql.functions.col
    """A column of the records, to compare: ``col("price") > 10``, ``col("city").isin(["Oslo"])``.

    >>> (col("price") > 10)({"price": 12}), (col("price") > 10)({"price": None})
    (True, False)
    """

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        if not isinstance(name, str):
            msg = f"col() takes a column name, got {type(name).__name__}"
            raise TypeError(msg)
        self.name = name

    def _compare(self, symbol: str, value) -> Predicate:
        return _Compare(self.name, symbol, value)

    def __eq__(self, value) -> Predicate:  # type: ignore[override]
        return self._compare("==", value)

    def __ne__(self, value) -> Predicate:  # type: ignore[override]
        return self._compare("!=", value)

    def __lt__(self, value) -> Predicate:
        return self._compare("<", value)

    def __le__(self, value) -> Predicate:
        return self._compare("<=", value)

    def __gt__(self, value) -> Predicate:
        return self._compare(">", value)

    def __ge__(self, value) -> Predicate:
        return self._compare(">=", value)

    __hash__ = None

    def isin(self, values: Iterable) -> Predicate:
        """The value is one of ``values`` (a null value is not)."""
        return _IsIn(self.name, tuple(values))

    def is_null(self) -> Predicate:
        """The value is None (null)."""
        return _IsNull(self.name, True)

    def is_not_null(self) -> Predicate:
        """The value is not None."""
        return _IsNull(self.name, False)

    def __repr__(self) -> str:
        return f"col({self.name!r})"


class _Compare(Predicate):
    __slots__ = ("name", "symbol", "value")

    def __init__(self, name: str, symbol: str, value) -> None:
        if value is None:
            msg = (f"col({name!r}) {symbol} None is never true (a comparison with null is not, "
                   "as in SQL): use col(...).is_null() or .is_not_null()")
            raise ValueError(msg)
        self.name, self.symbol, self.value = name, symbol, value

    def __call__(self, row) -> bool:
        value = _value(row, self.name)
        return value is not None and bool(_COMPARISONS[self.symbol][0](value, self.value))

    def mask(self, data):
        import pyarrow.compute as pc

        compare = getattr(pc, _COMPARISONS[self.symbol][1])
        return pc.fill_null(compare(_column(data, self.name), self.value), False)

    def __repr__(self) -> str:
        return f"col({self.name!r}) {self.symbol} {self.value!r}"


class _IsIn(Predicate):
    __slots__ = ("name", "values")

    def __init__(self, name: str, values: tuple) -> None:
        self.name, self.values = name, values

    def __call__(self, row) -> bool:
        value = _value(row, self.name)
        return value is not None and value in self.values

    def mask(self, data):
        import pyarrow as pa
        import pyarrow.compute as pc

        column = _column(data, self.name)
        kept = [v for v in self.values if v is not None]
        value_type = column.type.value_type if pa.types.is_dictionary(column.type) else column.type
        found = pc.is_in(column, value_set=pa.array(kept, value_type), skip_nulls=True)
        return pc.fill_null(found, False)

    def __repr__(self) -> str:
        return f"col({self.name!r}).isin({list(self.values)!r})"


class _IsNull(Predicate):
    __slots__ = ("name", "null")

    def __init__(self, name: str, null: bool) -> None:
        self.name, self.null = name, null

    def __call__(self, row) -> bool:
        return (_value(row, self.name) is None) == self.null

    def mask(self, data):
        import pyarrow.compute as pc

        column = _column(data, self.name)
        return pc.is_null(column) if self.null else pc.is_valid(column)

    def __repr__(self) -> str:
        return f"col({self.name!r}).{'is_null' if self.null else 'is_not_null'}()"


class _Both(Predicate):
    """Two predicates joined by ``&`` (``combine`` is ``all``) or ``|`` (``any``)."""

    __slots__ = ("combine", "compute", "left", "right", "symbol")

    def __init__(self, left: Predicate, right: Predicate, combine, compute: str,
                 symbol: str) -> None:
        self.left, self.right = left, right
        self.combine, self.compute, self.symbol = combine, compute, symbol

    def __call__(self, row) -> bool:
        return self.combine(side(row) for side in (self.left, self.right))

    def mask(self, data):
        import pyarrow.compute as pc

        return getattr(pc, self.compute)(self.left.mask(data), self.right.mask(data))

    def __repr__(self) -> str:
        return f"({self.left!r}) {self.symbol} ({self.right!r})"


class _Not(Predicate):
    __slots__ = ("inner",)

    def __init__(self, inner: Predicate) -> None:
        self.inner = inner

    def __call__(self, row) -> bool:
        return not self.inner(row)

    def mask(self, data):
        import pyarrow.compute as pc

        return pc.invert(self.inner.mask(data))

    def __repr__(self) -> str:
        return f"~({self.inner!r})"
