"""A plain-Python reading of the event-time rules (``examples/event_time.py``), record by record:
which records are late and what each key's windows hold. Independent of gyreflow."""

from __future__ import annotations

import math

AGGREGATES = {
    "count": lambda values: len(values),
    "sum": sum,
    "min": min,
    "max": max,
}


def windows_of(ts: float, size: float, slide: float) -> list[tuple[float, float]]:
    """Every ``[k * slide, k * slide + size)`` holding ``ts``."""
    found = []
    k = math.floor(ts / slide) + 1
    while True:
        k -= 1
        start = k * slide
        if start + size <= ts:
            break
        if start <= ts:
            found.append((start, start + size))
    return sorted(found)


def fixed(events: list[dict], size: float, slide: float, max_delay: float):
    """``(results {(key, start, end): [values]}, late events)`` for tumbling/sliding windows."""
    latest = -math.inf
    groups: dict = {}
    late = []
    for event in events:
        watermark = latest - max_delay
        ts = event["ts"]
        joined = False
        for start, end in windows_of(ts, size, slide):
            if end <= watermark:
                continue  # fired before this record
            groups.setdefault((event["key"], start, end), []).append(event["value"])
            joined = True
        if not joined:
            late.append(event)
        latest = max(latest, ts)
    return groups, late


def sessions(events: list[dict], gap: float, max_delay: float):
    """``(results {(key, start, end): [values]}, late events)`` for session windows."""
    latest = -math.inf
    open_sessions: dict = {}  # key -> [[start, last, values]]
    done: dict = {}
    late = []
    for event in events:
        watermark = latest - max_delay
        ts, key = event["ts"], event["key"]
        still = []
        for start, last, values in open_sessions.get(key, []):
            if last + gap <= watermark:
                done[(key, start, last + gap)] = values
            else:
                still.append([start, last, values])
        merged = [s for s in still if ts <= s[1] + gap and s[0] <= ts + gap]
        if not merged and ts + gap <= watermark:
            late.append(event)
        else:
            rest = [s for s in still if s not in merged]
            start = min([ts, *(s[0] for s in merged)])
            last = max([ts, *(s[1] for s in merged)])
            values = [v for s in merged for v in s[2]] + [event["value"]]
            rest.append([start, last, values])
            still = rest
        open_sessions[key] = still
        latest = max(latest, ts)
    for key, remaining in open_sessions.items():
        for start, last, values in remaining:
            done[(key, start, last + gap)] = values
    return done, late


def expected(events: list[dict], window: str, agg: str, max_delay: float):
    """``(sorted result lines as (key, start, end, value), late events)`` for the example."""
    kind, _, rest = window.partition(":")
    numbers = [float(x) for x in rest.split(":")]
    if kind == "session":
        groups, late = sessions(events, numbers[0], max_delay)
    else:
        size = numbers[0]
        slide = numbers[1] if kind == "sliding" else size
        groups, late = fixed(events, size, slide, max_delay)
    lines = sorted((key, start, end, AGGREGATES[agg](values))
                   for (key, start, end), values in groups.items())
    return lines, late
