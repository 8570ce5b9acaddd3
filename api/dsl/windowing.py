"""Flink's window table functions (TUMBLE, HOP, SESSION over DESCRIPTOR(ts)) and WATERMARK FOR ts."""

from __future__ import annotations

import datetime as dt
import math

import attrs
from sqlglot import exp

from gyreflow.api.dsl.errors import QueryError
from gyreflow.api.dsl.window_text import SESSION_NAME, UNITS, WATERMARK_COLUMN, WATERMARK_DELAY
from gyreflow.runtime.dataflow.time.window_assignment import starts_of
from gyreflow.runtime.dataflow.time.window_grid import end_of_start

KINDS = ("tumble", "hop", "session")
WINDOW_COLUMNS = ("window_start", "window_end")
EPOCH = dt.datetime(1970, 1, 1)


@attrs.frozen
class WindowCall:
    """``TUMBLE(TABLE t, DESCRIPTOR(ts), size)``, ``HOP(..., slide, size)`` or ``SESSION(..., gap)``;
    ``size`` and ``slide`` in seconds (a session's gap is its ``size``)."""

    kind: str
    table: str
    column: str
    size: float
    slide: float | None = None

    def assigner(self):
        """The event-time window assigner of gyreflow's Python API that this call stands for."""
        from gyreflow.api.language.windows import Session, Sliding, Tumbling

        if self.kind == "tumble":
            return Tumbling(self.size)
        if self.kind == "hop":
            return Sliding(self.size, self.slide)
        return Session(self.size)


def interval_seconds(node: exp.Expression) -> float:
    """``INTERVAL '10' SECOND`` (or MINUTE, HOUR, DAY, MILLISECOND, plural too) in seconds."""
    if isinstance(node, exp.Interval) and node.args.get("unit") is not None:
        unit = node.args["unit"].name.lower()
        unit = unit[:-1] if unit.endswith("s") else unit
        try:
            value = float(node.this.this)
        except (AttributeError, TypeError, ValueError):
            value = None
        if unit in UNITS and value is not None:
            return value * UNITS[unit]
    raise QueryError(f"{node.sql()[:40]!r} is not an interval gyreflow reads: write INTERVAL 'n' "
                     f"{'|'.join(u.upper() for u in UNITS)}")


def window_call(node: exp.Expression) -> WindowCall | None:
    """The window table function a FROM item calls (``TABLE(TUMBLE(...))``), else None."""
    if not isinstance(node, exp.Table) or not isinstance(node.this, exp.Anonymous):
        return None
    call = node.this
    if call.name.lower() == "table" and len(call.expressions) == 1:
        call = call.expressions[0]
    if not isinstance(call, exp.Anonymous):
        return None
    kind = "session" if call.name.lower() == SESSION_NAME else call.name.lower()
    if kind not in KINDS:
        return None
    args = call.expressions
    times = "INTERVAL slide, INTERVAL size" if kind == "hop" else (
        "INTERVAL gap" if kind == "session" else "INTERVAL size")
    usage = f"{kind.upper()}(TABLE t, DESCRIPTOR(ts), {times})"
    descriptor = args[1] if len(args) > 1 else None
    if (len(args) != (4 if kind == "hop" else 3) or not isinstance(args[0], exp.Column)
            or not isinstance(descriptor, exp.Anonymous) or descriptor.name.lower() != "descriptor"
            or len(descriptor.expressions) != 1 or not isinstance(descriptor.expressions[0], exp.Column)):
        raise QueryError(f"a window table function is written {usage}")
    seconds = [interval_seconds(a) for a in args[2:]]
    if any(s <= 0 for s in seconds):
        raise QueryError(f"{usage}: intervals must be longer than 0")
    table, column = args[0].name.lower(), descriptor.expressions[0].name.lower()
    if kind == "hop":
        slide, size = seconds
        if slide > size:
            raise QueryError(f"{usage}: the slide ({slide:g} s) is longer than the size ({size:g} s)")
        return WindowCall(kind, table, column, size, slide)
    return WindowCall(kind, table, column, seconds[0])


def window_calls(query: exp.Expression) -> list[WindowCall]:
    """Every window table function a query calls."""
    return [c for c in (window_call(t) for t in query.find_all(exp.Table)) if c is not None]


def seconds_of(value) -> float:
    """An event time in seconds since the epoch: a TIMESTAMP (read as UTC) or epoch milliseconds."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return (value - EPOCH).total_seconds()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value / 1000.0
    msg = f"an event time must be a TIMESTAMP or epoch milliseconds, got {value!r}"
    raise QueryError(msg)


def moment(seconds: float) -> dt.datetime:
    """The TIMESTAMP ``seconds`` after the epoch (``window_start``, ``window_end``)."""
    return EPOCH + dt.timedelta(seconds=seconds)


def window_rows(call: WindowCall, relation, catalog) -> list[tuple]:
    """The rows of TUMBLE or HOP over a table's rows, under a join or a sub-query: each row once per
    window it joins, ``window_start`` and ``window_end`` added. Rows are judged in the table's order
    as the plan's event-time windows judge them: a row joins the windows that have not fired by the
    watermark before it (the largest time read before it, minus the table's delay); one that joins
    none is dropped, as a late record is."""
    names = relation.names()
    if call.column not in names:
        raise QueryError(f"DESCRIPTOR({call.column}): {call.table} has no such column")
    table = catalog.tables.get(call.table)
    options = table.options if table is not None else {}
    if options.get(WATERMARK_COLUMN, call.column) != call.column:
        raise QueryError(f"the watermark of {call.table} is on {options[WATERMARK_COLUMN]}, the windows "
                         f"on {call.column}")
    if not relation.rows:
        return []
    if call.kind == "session":
        raise QueryError("SESSION runs only as the one table of a GROUP BY window_start, window_end "
                         "query (not under a join or a sub-query)")
    delay = float(options.get(WATERMARK_DELAY, "0"))
    at, size = names.index(call.column), call.size
    slide = call.slide or size
    highest, out = -math.inf, []
    for row in relation.rows:
        if row[at] is None:
            continue
        ts = seconds_of(row[at])
        mark = highest - delay
        for start in starts_of(ts, size, slide):  # as the runtime's windows assign them
            end = end_of_start(start, size, slide)  # the runtime's bound, not start + size
            if end > mark:
                out.append(row + (moment(start), moment(end)))
        highest = max(highest, ts)
    return out


_GROUP_WINDOWS = {"tumble": "tumble", "hop": "hop", SESSION_NAME: "session"}


def group_windows(query: exp.Expression) -> exp.Expression:
    """Calcite's group windows written as window table functions: ``SELECT k, SESSION_START(ts, gap)
    ... FROM t GROUP BY k, SESSION(ts, gap)`` (also TUMBLE(ts, size), HOP(ts, slide, size) and their
    ``_START``/``_END``) is ``SELECT k, window_start ... FROM TABLE(SESSION(TABLE t, DESCRIPTOR(ts),
    gap)) GROUP BY k, window_start, window_end`` (Nexmark q11 as nexmark-flink writes it)."""
    for select in list(query.find_all(exp.Select)):
        group = select.args.get("group")
        from_ = select.args.get("from_") or select.args.get("from")
        calls = [e for e in (group.expressions if group is not None else [])
                 if isinstance(e, exp.Anonymous) and e.name.lower() in _GROUP_WINDOWS]
        if len(calls) != 1 or from_ is None or not isinstance(from_.this, exp.Table) \
                or not isinstance(from_.this.this, exp.Identifier):
            continue
        call, table = calls[0], from_.this
        if not call.expressions or not isinstance(call.expressions[0], exp.Column):
            continue
        kind = _GROUP_WINDOWS[call.name.lower()]
        function = exp.Anonymous(this=call.name, expressions=[
            exp.column(table.name), exp.Anonymous(this="DESCRIPTOR", expressions=[
                exp.column(call.expressions[0].name)]), *call.expressions[1:]])
        from_.set("this", exp.Table(this=exp.Anonymous(this="TABLE", expressions=[function]),
                                    alias=table.args.get("alias")))
        group.set("expressions", [e for e in group.expressions if e is not call]
                  + [exp.column(c) for c in WINDOW_COLUMNS])
        bounds = {f"{kind}_start": "window_start", f"{kind}_end": "window_end"}
        for node in list(select.find_all(exp.Anonymous)):
            if node.name.lower() in bounds:
                node.replace(exp.column(bounds[node.name.lower()]))
    return query
