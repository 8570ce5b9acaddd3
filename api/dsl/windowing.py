"""Flink's window table functions (TUMBLE, HOP, SESSION over DESCRIPTOR(ts)) and WATERMARK FOR ts."""

from __future__ import annotations

import datetime as dt
import re

import attrs
from sqlglot import exp

from gyreflow.api.dsl.queries import QueryError

KINDS = ("tumble", "hop", "session")
WINDOW_COLUMNS = ("window_start", "window_end")
WATERMARK_COLUMN = "gyreflow.watermark.column"  # set by CREATE TABLE's WATERMARK FOR ts AS ts - INTERVAL
WATERMARK_DELAY = "gyreflow.watermark.delay"  # seconds
EPOCH = dt.datetime(1970, 1, 1)
UNITS = {"millisecond": 0.001, "second": 1.0, "minute": 60.0, "hour": 3600.0, "day": 86400.0}

# sqlglot reads neither ``TUMBLE(TABLE t, ...)`` (a TABLE keyword in an argument) nor ``SESSION(`` (a
# keyword): both are rewritten before parsing, keeping the text's length so columns stay right.
_TABLE_ARGUMENT = re.compile(r"(\b(?:tumble|hop|session)\s*\(\s*)table(\s+)", re.I)
_SESSION_CALL = re.compile(r"(\btable\s*\(\s*)session(\s*\()", re.I)
SESSION_NAME = "sesswin"


def readable(text: str) -> str:
    """A query's text with window table functions written the way sqlglot parses them."""
    if not re.search(r"\b(tumble|hop|session)\b", text, re.I):
        return text
    text = _TABLE_ARGUMENT.sub(lambda m: m.group(1) + " " * 5 + m.group(2), text)
    return _SESSION_CALL.sub(lambda m: m.group(1) + SESSION_NAME + m.group(2), text)


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


def watermark_options(part_text: str) -> dict[str, str]:
    """The options a ``WATERMARK FOR ts AS ts - INTERVAL '5' SECOND`` clause of CREATE TABLE sets."""
    found = re.fullmatch(r"\s*watermark\s+for\s+`?(\w+)`?\s+as\s+`?(\w+)`?\s*"
                         r"(?:-\s*interval\s+'?([\d.]+)'?\s+(\w+?)s?)?\s*", part_text, re.I)
    if found is None or found.group(1).lower() != found.group(2).lower():
        raise QueryError("a watermark is written WATERMARK FOR ts AS ts - INTERVAL 'n' SECOND")
    delay = 0.0
    if found.group(3) is not None:
        unit = found.group(4).lower()
        if unit not in UNITS:
            raise QueryError(f"WATERMARK: {found.group(4)} is not a unit (units: "
                             f"{', '.join(u.upper() for u in UNITS)})")
        delay = float(found.group(3)) * UNITS[unit]
    return {WATERMARK_COLUMN: found.group(1).lower(), WATERMARK_DELAY: repr(delay)}


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
