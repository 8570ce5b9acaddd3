"""GROUP BY over a table read in windows (``geaflow.dsl.window.size``) as running aggregates: each
group keeps accumulators (COUNT, an exact SUM, AVG, MIN, MAX), not its rows, and a group's row is
emitted in a window only when it changed, as the query operator that re-runs the query over every row
so far emits it."""

from __future__ import annotations

import math

from sqlglot import exp

import gyreflow.api.dsl.functions as fns
from gyreflow.api.dsl.codegen import adder
from gyreflow.api.dsl.grouping import key_value, same_key
from gyreflow.api.dsl.queries import QueryError, Relation, Scope, function_args
from gyreflow.api.dsl.windowing import moment
from gyreflow.api.language.functions import AggregateFunction, ProcessFunction

RUNNING = ("count", "sum", "avg", "min", "max")


class NotRunningError(QueryError):
    """An aggregate that needs the group's rows (DISTINCT, a user's or another function)."""


class RunningScope(Scope):
    """A scope whose aggregate calls read slots of a group's accumulators: a compiled item or
    HAVING is a function of ``(first row, results)``; ``calls`` gets ``(name, argument)`` per call,
    the argument a function of one row (None for COUNT(*))."""

    def __init__(self, relation: Relation, catalog, aliases=None) -> None:
        super().__init__(relation, catalog, aliases)
        self.calls: list[tuple[str, object]] = []
        self.nodes: list[tuple[str, exp.Expression | None]] = []  # the same calls, their argument nodes

    def _aggregate(self, node: exp.Func, name: str):
        args = function_args(node)
        if (name not in RUNNING or isinstance(node, exp.Anonymous) or len(args) > 1
                or self.catalog.aggregate(name) is not fns.AGGREGATE[name]
                or (args and isinstance(args[0], exp.Distinct))):
            raise NotRunningError(f"{name.upper()} needs the group's rows")
        argument = None if name == "count" and (not args or isinstance(args[0], exp.Star)) \
            else Scope(self.relation, self.catalog, self.aliases).compile(args[0])
        slot = len(self.calls)
        self.calls.append((name, argument))
        self.nodes.append((name, None if argument is None else args[0]))
        return lambda ctx: ctx[1][slot]

    def _filtered(self, node: exp.Filter):
        raise NotRunningError("an aggregate with FILTER (WHERE ...) needs the group's rows")


def runs_as_running(items: list, keys: list | None, having, scope: Scope) -> bool:
    """Whether a GROUP BY can run on accumulators: every aggregate is one of COUNT, SUM, AVG, MIN,
    MAX without DISTINCT, and (unless ``keys`` is None: per event-time window, where each group
    gives one row) every key is an output item, so that a group's changed row is a changed output
    row (groups give distinct rows)."""
    shown = {(i.this if isinstance(i, exp.Alias) else i).sql().lower() for i in items}
    if keys is not None and (not keys or any(k.sql().lower() not in shown for k in keys)):
        return False
    running = RunningScope(scope.relation, scope.catalog, scope.aliases)
    try:
        for node in [*items, *([having] if having is not None else [])]:
            running.compile(node)
    except NotRunningError:
        return False
    return True


def _read_outside_aggregates(nodes: list, scope: Scope) -> frozenset:
    """Positions of the columns that ``nodes`` read outside their aggregate calls (or through an
    alias, which may name any column)."""
    read = set()
    for node in nodes:
        if node is None:
            continue
        for column in node.find_all(exp.Column):
            if column.find_ancestor(exp.AggFunc) is not None:  # COUNT, SUM, ... (no user's function)
                continue
            at = scope.index(column.name, column.table or None)
            if at is None:
                return frozenset(range(len(scope.relation.columns)))
            read.add(at)
    return frozenset(read)


def _exact_add(partials: list, x: float) -> None:
    """Adds ``x`` to ``partials``, non-overlapping floats whose exact sum is the sum so far
    (Shewchuk's algorithm, as ``math.fsum``): ``fsum(partials)`` rounds once, as SUM does."""
    i = 0
    for y in partials:
        if abs(x) < abs(y):
            x, y = y, x
        high = x + y
        low = y - (high - x)
        if low:
            partials[i] = low
            i += 1
        x = high
    partials[i:] = [x]


def _start(name: str):
    if name == "count":
        return 0
    if name in ("min", "max"):
        return None
    return [0, 0, []]  # values seen, sum of the ints, partials of the doubles


def _add(name: str, state, value):
    if name == "count":
        return state + 1
    # NaN is the largest double (Java's compareTo, DuckDB): MIN takes any value over a NaN, MAX
    # keeps a NaN once met (< and > alone are false for every NaN)
    if name == "min":
        return value if state is None or value < state or state != state else state
    if name == "max":
        return value if state is None or value > state or value != value else state
    state[0] += 1
    if isinstance(value, float):
        _exact_add(state[2], value)
    else:
        state[1] += value
    return state


def _merge(name: str, left, right):
    if name == "count":
        return left + right
    if name in ("min", "max"):
        return right if left is None else left if right is None else _add(name, left, right)
    left[0] += right[0]
    left[1] += right[1]
    for part in right[2]:
        _exact_add(left[2], part)
    return left


def _result(name: str, state):
    if name in ("count", "min", "max"):
        return state
    seen, whole, partials = state
    total = (math.fsum([*partials, whole]) if whole else math.fsum(partials)) if partials else whole
    if name == "sum":
        return total  # GeaFlow's SUM of no value is 0
    return total / seen if seen else None


class RunningGroups(AggregateFunction):
    """A group's accumulator ``[first row, state per aggregate call]`` and its output row (None when
    HAVING drops it). Compiled where it runs (compiled functions are closures: not picklable)."""

    def __init__(self, shape, catalog, where: str = "", per_window: bool = False,
                 filters: bool = False) -> None:
        self.shape, self.catalog, self.where = shape, catalog, where
        # per event-time window: WHERE applied here (every record moves the watermark) and the
        # row made by ``finish``, which knows the window's bounds
        self.per_window = per_window
        self.filters = per_window or filters  # WHERE applied by ``add`` (else by a filter before)
        self._fns = self._read = self._add = None
        self._bounds: dict = {}  # window start -> (window_start, window_end, end): many keys, one window

    def __getstate__(self):
        return {**self.__dict__, "_fns": None, "_read": None, "_add": None, "_bounds": {}}

    def compiled(self):
        if self._fns is None:
            shape = self.shape
            relation = Relation(shape.columns, [])
            aliases = {i.alias.lower(): i.this for i in shape.items if isinstance(i, exp.Alias)}
            scope = RunningScope(relation, self.catalog, aliases)
            items = [scope.compile(i) for i in shape.items]
            having = scope.compile(shape.having) if shape.having is not None else None
            self._fns = (scope.calls, items, having)
            self._read = _read_outside_aggregates([*shape.items, shape.having], scope)
            self._add = adder(scope.nodes, Scope(relation, self.catalog, aliases),
                             shape.where if self.filters else None,
                             f"{self.where}: " if self.where else "", {"_exact_add": _exact_add})
        return self._fns

    def init(self):
        return [None, *(_start(name) for name, _ in self.compiled()[0])]

    @property
    def add(self):
        """``add(acc, row)``: the one function compiled for this query's aggregates (``codegen``),
        made where the query runs; the operator calls it per row."""
        if self._add is None:
            self.compiled()
        return self._add

    def merge(self, left, right):
        if left[0] is None:
            left[0] = right[0]
        for slot, (name, _) in enumerate(self.compiled()[0], 1):
            left[slot] = _merge(name, left[slot], right[slot])
        return left

    def result(self, acc):
        calls, items, having = self.compiled()
        if acc[0] is None:  # per window: WHERE kept none of the key's rows
            return None
        results = tuple([state if name == "count" else _result(name, state)
                         for (name, _), state in zip(calls, acc[1:], strict=True)])
        if self.per_window:  # the columns read besides the aggregates: a result of plain values
            keep = self._keep
            first = acc[0]
            return (tuple([first[at] if at in keep else None for at in range(len(first))])
                    if keep is not None else first, results)
        return self._row((acc[0], results))

    @property
    def _keep(self):
        """The positions of a group's first row that its result keeps (None: all of them)."""
        read = self._read
        return None if len(read) == len(self.shape.columns) else read

    def _row(self, context):
        _, items, having = self.compiled()
        if having is not None and having(context) is not True:
            return None
        return tuple([fn(context) for fn in items])

    def finish(self, window) -> list[tuple]:
        """The rows (one, or none) of an event-time window's result, its bounds added to its row."""
        if window.value is None:
            return []
        first, results = window.value
        bounds = self._bounds.get(window.start)
        if bounds is None or bounds[2] != window.end:
            if len(self._bounds) > 1024:
                self._bounds.clear()
            bounds = self._bounds[window.start] = (moment(window.start), moment(window.end), window.end)
        row = self._row((first + bounds[:2], results))
        return [] if row is None else [row]


class CountRows:
    """The rows of a per-window ``COUNT(*)`` GROUP BY of columns, from the window operator's own
    count: each output column a key column, a window bound or the count (``lowering._count_slots``)."""

    def __init__(self, slots: tuple) -> None:
        self.slots = slots
        self._bounds: dict = {}

    def __getstate__(self):
        return {**self.__dict__, "_bounds": {}}

    def __call__(self, window) -> list[tuple]:
        bounds = self._bounds.get(window.start)
        if bounds is None or bounds[2] != window.end:
            if len(self._bounds) > 1024:
                self._bounds.clear()
            bounds = self._bounds[window.start] = (moment(window.start), moment(window.end), window.end)
        key, row = window.key, []
        for slot in self.slots:
            kind = slot[0]
            if kind == "key":
                row.append(key_value(key if slot[1] is None else key[slot[1]]))
            elif kind == "count":
                row.append(window.value)
            else:
                row.append(bounds[0] if kind == "start" else bounds[1])
        return [tuple(row)]


class WindowRows:
    """``finish`` of a window's running aggregates: the ``flat_map`` after the window operator."""

    def __init__(self, groups: RunningGroups) -> None:
        self.groups = groups

    def __call__(self, window) -> list[tuple]:
        return self.groups.finish(window)


class ChangedRows(ProcessFunction):
    """A group's row when it differs from the row last emitted for the group (none while HAVING
    drops it): ``(key, row)`` pairs in, rows out."""

    def process(self, record, ctx) -> None:
        _, row = record
        last = ctx.get_state(None)
        # a row with a NaN is unequal to itself: compared as keys, so that NaN equals NaN
        if row != last and (row is None or last is None or same_key(row) != same_key(last)):
            if row is not None:
                ctx.emit(row)
            ctx.set_state(row)

    def on_notify(self, window, ctx) -> None:
        return None
