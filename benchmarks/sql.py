"""gyreflow's SQL against the same pipelines written in its Python API (and PyFlink's SQL when it is
installed: it is not so far), in one run, on the same generated table; every engine's rows are checked equal.

Queries: a filter and GROUP BY count/sum over a table read in windows of 100,000 rows (running
totals per key, the groups that changed each window), and the event-time 10 s TUMBLE count per key
of the events of ``benchmarks/peers.py``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import tempfile
from collections import Counter
from pathlib import Path

from _common import (
    DEFAULT_SEED,
    command_line,
    format_rate,
    format_ratio,
    format_seconds,
    interleaved_best_of,
    machine_line,
    print_table,
    update_docs_section,
)
from peers import write_events

from gyreflow.api import Environment, FileSource, SizeTumblingWindow, Tumbling
from gyreflow.api.language.functions import AggregateFunction

WINDOW_ROWS = 100_000
TUMBLE_SECONDS = 10
EPOCH = dt.datetime(1970, 1, 1)


def write_table(folder: Path, count: int, seed: int) -> Path:
    """The events of ``peers.write_events`` as a text table ``id,key,ts (epoch ms),value``."""
    events = folder / "events.jsonl"
    write_events(events, count, seed)
    path = folder / "events.csv"
    with events.open(encoding="utf-8") as lines, path.open("w", encoding="utf-8") as out:
        for i, line in enumerate(lines):
            event = json.loads(line)
            out.write(f"{i},{event['key']},{round(event['ts'] * 1000)},{event['value']}\n")
    return path


def table(path: Path) -> str:
    return (f"SET gyreflow.dsl.time.zone = 'UTC';\n"
            f"CREATE TABLE ev (id bigint, k varchar, ts timestamp, v int) WITH (type='file', "
            f"geaflow.dsl.file.path='{path}', geaflow.dsl.window.size = {WINDOW_ROWS});\n")


GROUP_SQL = "SELECT k, count(*) AS n, sum(v) AS total FROM ev WHERE v >= 10 GROUP BY k;\n"
TUMBLE_SQL = ("SELECT k, window_start, count(*) FROM TABLE(TUMBLE(TABLE ev, DESCRIPTOR(ts), "
              f"INTERVAL '{TUMBLE_SECONDS}' SECOND)) GROUP BY window_start, window_end, k;\n")


def sql_rows(path: Path, query: str) -> list:
    result = Environment.local(progress=False).sql(table(path) + query)
    return result.output("rows-3")


# --- the same pipelines in the Python API ----------------------------------------------------------


def parse(line: str) -> tuple:
    i, k, ts, v = line.split(",")
    return int(i), k, int(ts), int(v)


def kept(row: tuple) -> bool:
    return row[3] >= 10


def key_of(row: tuple) -> str:
    return row[1]


def seconds_of(row: tuple) -> float:
    return row[2] / 1000


class CountSum(AggregateFunction):
    """``(count, sum of v)`` of a key's rows."""

    def init(self):
        return (0, 0)

    def add(self, acc, row):
        return (acc[0] + 1, acc[1] + row[3])

    def merge(self, a, b):
        return (a[0] + b[0], a[1] + b[1])


def api_group(path: Path) -> list:
    pipeline = Environment.local(progress=False).pipeline("group")

    @pipeline.task
    def group(ctx):
        (ctx.source(FileSource(str(path)), SizeTumblingWindow(WINDOW_ROWS)).with_parallelism(1)
         .map(parse).filter(kept).key_by(key_of).aggregate(CountSum()).collect("rows"))

    return [(k, n, total) for k, (n, total) in pipeline.execute()["group"].output("rows")]


def api_tumble(path: Path) -> list:
    pipeline = Environment.local(progress=False).pipeline("tumble")

    @pipeline.task
    def tumble(ctx):
        (ctx.source(FileSource(str(path)), SizeTumblingWindow(WINDOW_ROWS)).with_parallelism(1)
         .map(parse).with_timestamps(seconds_of, max_delay=0.0)
         .key_by(key_of).window(Tumbling(TUMBLE_SECONDS)).count().collect("rows"))

    return [(r.key, EPOCH + dt.timedelta(seconds=r.start), r.value)
            for r in pipeline.execute()["tumble"].output("rows")]


# --- PyFlink's SQL, when installed ------------------------------------------------------------------


def pyflink_installed() -> bool:
    try:
        import pyflink  # noqa: F401
    except ImportError:
        return False
    return True


# --- main -----------------------------------------------------------------------------------------


def same(want: Counter):
    def check(rows) -> None:
        if Counter(rows) != want:
            msg = f"rows differ: {len(rows)} rows, {len(want)} expected"
            raise AssertionError(msg)
    return check


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        path = write_table(Path(scratch), args.rows, args.seed)
        want = {"group": Counter(api_group(path)), "tumble": Counter(api_tumble(path))}
        cases = {"filter + GROUP BY: SQL": lambda: sql_rows(path, GROUP_SQL),
                 "filter + GROUP BY: Python API": lambda: api_group(path),
                 "TUMBLE count: SQL": lambda: sql_rows(path, TUMBLE_SQL),
                 "TUMBLE count: Python API": lambda: api_tumble(path)}
        checks = {name: same(want["group" if name.startswith("filter") else "tumble"]) for name in cases}
        flink = pyflink_installed()  # not in gyreflow's environment so far: no PyFlink row yet
        timings = interleaved_best_of(cases, args.repeat, check=checks)
    rows = []
    for name, timing in timings.items():
        reference = timings[name.split(":")[0] + ": Python API"]
        rows.append([name, format_seconds(timing.best), format_rate(args.rows / timing.best),
                     format_ratio(timing.best / reference.best)])
    columns = ["query and engine", "seconds", "rows/s", "time vs Python API"]
    markdown = print_table(f"SQL against the Python API, {args.rows:,} rows", columns, rows)
    if not flink:
        print("PyFlink is not installed in this environment: its rows are left out.")
    if args.write_docs:
        note = (f"{args.rows:,} rows (the events of `benchmarks/peers.py` as a text table), read in "
                f"windows of {WINDOW_ROWS:,} rows; both forms parse the same file. "
                + ("" if flink else "PyFlink was not installed, so it has no row. ")
                + f"Best of {args.repeat}; {machine_line()}.\n\n`{command_line()}`")
        update_docs_section("sql", f"## SQL against the Python API\n\n{note}\n\n{markdown}\n")


if __name__ == "__main__":
    main()
