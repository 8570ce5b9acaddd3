"""User function interfaces: aggregate functions and process functions with notifications."""

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


class ProcessFunction:
    """Records of a keyed stream one by one, with their window, and a callback when a window's
    input is complete (Naiad's progress notifications).

    ``process(record, ctx)`` sees ``ctx.window`` and ``ctx.key``, reads and writes the key's state
    (``ctx.get_state()``, ``ctx.set_state(v)``, ``ctx.clear_state()``), may ``ctx.emit(value)`` and
    ask ``ctx.notify_at(window)`` (the current window or a later one). ``on_notify(window, ctx)``
    then runs once for that key when every record of ``window`` has arrived, before the window
    ends; it may emit, change the key's state and ask for a later window. A requested callback runs
    exactly once, also when the job resumes after a crash, provided its window comes: a callback
    asked for a window after the input's last one never runs (unlike Flink's event-time timers,
    which all fire at the end of input: these are processing windows, and none follows the last;
    to act at the end, ask for the current window). ``ctx.parameter(name, default)`` reads a
    parameter set on the running job with ``gyreflow control set``.

    >>> class SumPerWindow(ProcessFunction):
    ...     def process(self, record, ctx):
    ...         ctx.set_state(ctx.get_state(0) + record[1])
    ...         ctx.notify_at(ctx.window)
    ...     def on_notify(self, window, ctx):
    ...         ctx.emit((ctx.key, window, ctx.get_state()))
    ...         ctx.clear_state()
    >>> from gyreflow.api import Environment, SizeTumblingWindow
    >>> p = Environment.local(progress=False).pipeline("sums")
    >>> @p.task
    ... def sums(ctx):
    ...     pairs = ctx.source([("a", 1), ("b", 2), ("a", 3), ("a", 4)], SizeTumblingWindow(2))
    ...     pairs.key_by(lambda r: r[0]).process(SumPerWindow()).collect()
    >>> p.execute().by_window()
    {1: [('a', 1, 1), ('b', 1, 2)], 2: [('a', 2, 7)]}
    """

    def open(self, ctx) -> None:
        """Called once per task before its first record (``ctx.task_index``, ``ctx.parallelism``)."""

    def process(self, record, ctx) -> None:
        """Handle one record of the current window."""
        raise NotImplementedError

    def on_notify(self, window: int, ctx) -> None:
        """Every record of ``window`` has arrived (``ctx.key`` asked for this)."""
