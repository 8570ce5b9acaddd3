"""Event-time windows over a JSON-lines event stream: per key and window a count, sum, min or max;
late events to their own files.

    gyreflow run examples/event_time.py -- --input events.jsonl --window tumbling:60 \
        --agg sum --max-delay 5 --output out/events

Input lines: ``{"ts": <seconds>, "key": <string>, "value": <integer>}`` in arrival order. Output:
``results-*.jsonl`` with ``{"key", "start", "end", "value"}`` per key and fired window, and
``late-*.jsonl`` with the late input records unchanged.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
from json.encoder import encode_basestring_ascii

from gyreflow.api import (
    DirectorySource,
    Environment,
    FileSink,
    Session,
    SizeTumblingWindow,
    Sliding,
    Tumbling,
)

LINES_PER_WINDOW = 10_000  # processing windows: how often results are published and state snapshotted


def parse_window(text: str):
    """``tumbling:SIZE``, ``sliding:SIZE:SLIDE`` or ``session:GAP`` as an assigner."""
    kind, _, rest = text.partition(":")
    try:
        numbers = [float(x) for x in rest.split(":")] if rest else []
        if kind == "tumbling" and len(numbers) == 1:
            return Tumbling(numbers[0])
        if kind == "sliding" and len(numbers) == 2:
            return Sliding(numbers[0], numbers[1])
        if kind == "session" and len(numbers) == 1:
            return Session(numbers[0])
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--window {text!r}: {exc}") from None
    msg = f"--window {text!r}: expected tumbling:SIZE, sliding:SIZE:SLIDE or session:GAP"
    raise argparse.ArgumentTypeError(msg)


def number(value: float):
    """Seconds as written: an integral value as an int."""
    return int(value) if float(value).is_integer() else value


def format_result(_window: int, result) -> str:
    """``json.dumps({"key", "start", "end", "value"})`` of a result, the times as ``number`` writes
    them. A string key and an integer value (every count, and sums, minima and maxima of integers)
    are written directly, the key quoted by the json module's own encoder: the same text without
    building a dict and walking it per result."""
    key, start, end, value = result
    if (type(key) is str and type(value) is int and type(start) is float and type(end) is float
            and start.is_integer() and end.is_integer()):  # whole seconds: the usual windows
        return (f'{{"key": {encode_basestring_ascii(key)}, "start": {int(start)}, '
                f'"end": {int(end)}, "value": {int.__repr__(value)}}}')
    if type(key) is str and type(value) is int:
        start_text, end_text = _seconds_text(start), _seconds_text(end)
        if start_text is not None and end_text is not None:
            return (f'{{"key": {encode_basestring_ascii(key)}, "start": {start_text}, '
                    f'"end": {end_text}, "value": {int.__repr__(value)}}}')
    return json.dumps({"key": key, "start": number(start), "end": number(end), "value": value})


def _seconds_text(value) -> str | None:
    """The JSON text of ``number(value)`` for an int or a finite float; None for anything else."""
    if type(value) is int:
        return int.__repr__(value)
    if type(value) is float and math.isfinite(value):
        return int.__repr__(int(value)) if value.is_integer() else float.__repr__(value)
    return None


def format_late(_window: int, event: dict) -> str:
    return json.dumps(event)


def build(pipeline, input_path: str, window, agg: str, max_delay: float, output: str,
          lines_per_window: int = LINES_PER_WINDOW):
    """Add the event-time task to ``pipeline``."""
    folder, name = os.path.split(os.path.abspath(input_path))

    @pipeline.task(name="event_time")
    def event_time(ctx):
        # The lines are parsed as columns (pyarrow); times, windows and counts, sums, minima and
        # maxima stay columnar. One source task keeps the input's order: the watermark follows
        # the lines as they are.
        events = ctx.source(DirectorySource(folder, glob.escape(name), format="jsonl",
                                            columnar=True),
                            SizeTumblingWindow(lines_per_window)).with_name("lines")
        windowed = (events.with_parallelism(1)
                    .with_timestamps("ts", max_delay=max_delay)
                    .with_name("timestamps").with_parallelism(1)
                    .key_by("key").window(window))
        if agg == "count":
            results = windowed.count()
        else:
            results = getattr(windowed, agg)("value")
        results.sink(FileSink(output, format=format_result, prefix="results")).with_name("results")
        results.late().sink(FileSink(output, format=format_late, prefix="late")).with_name("late")

    return pipeline


def main(argv: list[str] | None = None):
    """Parse arguments and run the job."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", required=True, help="JSON lines: ts, key, value")
    parser.add_argument("--window", required=True, type=parse_window,
                        help="tumbling:SIZE | sliding:SIZE:SLIDE | session:GAP (seconds)")
    parser.add_argument("--agg", default="count", choices=["count", "sum", "min", "max"])
    parser.add_argument("--max-delay", type=float, default=0.0,
                        help="seconds of out-of-orderness allowed")
    parser.add_argument("--output", required=True, help="directory for results and late events")
    parser.add_argument("--lines-per-window", type=int, default=LINES_PER_WINDOW,
                        help="input lines per processing window (results are published and "
                        f"state snapshotted once a window; default {LINES_PER_WINDOW})")
    parser.add_argument("--config", default=None, help="TOML config file")
    args = parser.parse_args(argv)
    if args.lines_per_window < 1:
        parser.error("--lines-per-window must be at least 1")
    if not os.path.isfile(args.input) or os.path.basename(args.input).startswith((".", "_")):
        parser.error(f"--input {args.input!r} is not a file (or its name starts with . or _, "
                     "which marks a file being written)")
    os.makedirs(args.output, exist_ok=True)
    env = Environment.from_config(args.config)
    pipeline = build(env.pipeline("event-time"), args.input, args.window, args.agg,
                     args.max_delay, args.output, args.lines_per_window)
    return pipeline.execute()


if __name__ == "__main__":
    main()
