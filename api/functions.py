"""User function interfaces: aggregate functions."""

from __future__ import annotations


class AggregateFunction:
    """Aggregate records per key: ``init`` an accumulator, ``add`` records, ``merge`` two
    accumulators, and turn one into a ``result``.

    Each window aggregates into fresh accumulators; at the window's end they are merged into the
    stored accumulator of their key, and ``(key, result(stored))`` is emitted.

    >>> class Mean(AggregateFunction):
    ...     def init(self): return (0, 0)
    ...     def add(self, acc, x): return (acc[0] + x, acc[1] + 1)
    ...     def merge(self, a, b): return (a[0] + b[0], a[1] + b[1])
    ...     def result(self, acc): return acc[0] / acc[1]
    >>> m = Mean(); m.result(m.merge(m.add(m.init(), 2), m.add(m.init(), 4)))
    3.0
    """

    def init(self):
        """Return a new, empty accumulator."""
        raise NotImplementedError

    def add(self, accumulator, record):
        """Return the accumulator with ``record`` added."""
        raise NotImplementedError

    def merge(self, left, right):
        """Return the accumulator combining two accumulators."""
        raise NotImplementedError

    def result(self, accumulator):
        """Return the value emitted for an accumulator."""
        return accumulator
