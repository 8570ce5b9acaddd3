"""Window table functions and watermarks as text: what sqlglot cannot read is rewritten before it
parses (``readable``), and CREATE TABLE's ``WATERMARK FOR`` clause read (``watermark_options``)."""

from __future__ import annotations

import re

from gyreflow.api.dsl.errors import QueryError

WATERMARK_COLUMN = "gyreflow.watermark.column"  # set by CREATE TABLE's WATERMARK FOR ts AS ts - INTERVAL
WATERMARK_DELAY = "gyreflow.watermark.delay"  # seconds
UNITS = {"millisecond": 0.001, "second": 1.0, "minute": 60.0, "hour": 3600.0, "day": 86400.0}

# sqlglot reads neither ``TUMBLE(TABLE t, ...)`` (a TABLE keyword in an argument) nor ``SESSION(`` (a
# keyword): both are rewritten before parsing, keeping the text's length so columns stay right.
_TABLE_ARGUMENT = re.compile(r"(\b(?:tumble|hop|session)\s*\(\s*)table(\s+)", re.I)
# TABLE(SESSION(...)) and GROUP BY SESSION(...), not in a string: quoted text matches as a whole
_SESSION_CALL = re.compile(r"('(?:[^']|'')*'|\"(?:[^\"]|\"\")*\")|\bsession(\s*\()", re.I)
SESSION_NAME = "sesswin"


def readable(text: str) -> str:
    """A query's text with window table functions written the way sqlglot parses them."""
    if not re.search(r"\b(tumble|hop|session)\b", text, re.I):
        return text
    text = _TABLE_ARGUMENT.sub(lambda m: m.group(1) + " " * 5 + m.group(2), text)
    return _SESSION_CALL.sub(lambda m: m.group(1) or SESSION_NAME + m.group(2), text)


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
