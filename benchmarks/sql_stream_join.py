"""A SQL join over two tables read in windows of rows: the stream join (each window joins its own
rows with every row so far, state per key group) against the query operator it replaced (each
window evaluates the query again over every row so far), per window's time and snapshot bytes.

Orders ``(id, k, amount)`` and shipments ``(id, k, fee)``, ``--rows`` of each per window, joined on
the order id ``k``: a shipment arrives within two windows of its order (one in ten never does,
one in ten twice). ``SELECT a.id, b.id, a.amount + b.fee FROM a JOIN b ON a.k = b.k``, state on
RocksDB, one window in flight, one task. The query operator's windows grow with the rows so far
(its join is a loop over every pair), so it runs only the first ``--query-windows`` windows.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _common import command_line, format_ratio, machine_line, print_table, update_docs_section

import gyreflow.api.dsl.stream_queries as stream_queries
from gyreflow.api import Environment, JobListener

QUERY = "SELECT a.id, b.id, a.amount + b.fee FROM a JOIN b ON a.k = b.k"


def write_tables(folder: Path, rows: int, windows: int, seed: int) -> None:
    rng = random.Random(seed)
    count = rows * windows
    shipments: list[tuple[int, int]] = []  # (position, order)
    for order in range(count):
        roll = rng.random()
        for _ in range(0 if roll < 0.1 else 2 if roll > 0.9 else 1):
            shipments.append((order + rng.randrange(2 * rows), order))
    shipments.sort()
    with open(folder / "a.txt", "w", encoding="utf-8") as out:
        out.writelines(f"{i},{i},{rng.randrange(1, 1000)}\n" for i in range(count))
    with open(folder / "b.txt", "w", encoding="utf-8") as out:
        out.writelines(f"{i},{order},{rng.randrange(1, 50)}\n"
                       for i, (_, order) in enumerate(shipments[:count]))


def script(folder: Path, rows: int) -> str:
    return (f"SET geaflow.dsl.window.size = {rows};\n"
            f"CREATE TABLE a (id bigint, k bigint, amount int) WITH (type='file', "
            f"geaflow.dsl.file.path='{folder / 'a.txt'}');\n"
            f"CREATE TABLE b (id bigint, k bigint, fee int) WITH (type='file', "
            f"geaflow.dsl.file.path='{folder / 'b.txt'}');\n"
            f"{QUERY};\n")


class Windows(JobListener):
    """Each window's time from the end of the window before, wall and CPU (the process's: the
    local environment runs every task in it), and its snapshot's bytes."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self.cpu: list[float] = []
        self.bytes: dict[int, int] = {}
        self.last = (time.monotonic(), time.process_time())

    def on_window(self, metrics) -> None:
        now = (time.monotonic(), time.process_time())
        self.seconds.append(now[0] - self.last[0])
        self.cpu.append(now[1] - self.last[1])
        self.last = now

    def on_checkpoint(self, checkpoint) -> None:
        self.bytes[checkpoint.window] = checkpoint.bytes


def run(folder: Path, rows: int, stream_join: bool, state: Path) -> tuple[Windows, dict]:
    env = Environment.local(1, progress=False, config={
        "state.backend": "rocksdb", "state.path": str(state), "scheduler.max_flying_windows": 1})
    planned = stream_queries.plan_stream_query
    if not stream_join:  # the query operator, as before the stream join
        stream_queries.plan_stream_query = lambda *args, **kwargs: None
    heard = Windows()
    try:
        result = env.sql(script(folder, rows), listener=heard)
    finally:
        stream_queries.plan_stream_query = planned
    return heard, result.by_window("rows-4")


def tenth(values: list, first: bool, median: bool = False) -> float:
    """The mean (or median) of the first or last tenth of ``values``."""
    n = max(1, len(values) // 10)
    part = values[:n] if first else values[-n:]
    return statistics.median(part) if median else sum(part) / len(part)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=500, help="rows of each table per window")
    parser.add_argument("--windows", type=int, default=200)
    parser.add_argument("--query-windows", type=int, default=20,
                        help="windows the query operator runs (its windows grow)")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="gyreflow-sql-join-"))
    try:
        long, short = scratch / "long", scratch / "short"
        long.mkdir()
        short.mkdir()
        write_tables(long, args.rows, args.windows, args.seed)
        write_tables(short, args.rows, args.query_windows, args.seed)
        joined, joined_rows = run(long, args.rows, True, scratch / "s1")
        before, before_rows = run(short, args.rows, False, scratch / "s2")
        check, check_rows = run(short, args.rows, True, scratch / "s3")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    same = {w: sorted(r) for w, r in before_rows.items() if r} == {
        w: sorted(r) for w, r in check_rows.items() if r}
    if not same:
        sys.exit("error: the stream join's rows differ from the query operator's")
    table = []
    for name, heard, windows in (("stream join", joined, args.windows),
                                 ("query operator (before)", before, args.query_windows)):
        sizes = [heard.bytes[w] for w in sorted(heard.bytes)]
        # medians: window 1 also starts the job, a collection now and then stops the world
        first, last = tenth(heard.cpu, True, True), tenth(heard.cpu, False, True)
        wall = tenth(heard.seconds, True, True), tenth(heard.seconds, False, True)
        table.append([name, windows, f"{first * 1000:.1f}", f"{last * 1000:.1f}",
                      format_ratio(last / first), f"{wall[0] * 1000:.1f} / {wall[1] * 1000:.1f}",
                      f"{tenth(sizes, True) / 1024:.1f}", f"{tenth(sizes, False) / 1024:.1f}"])
    markdown = print_table(
        f"SQL stream join, {args.rows} rows of each table a window",
        ["path", "windows", "CPU ms/window, first 10%", "CPU ms/window, last 10%", "last/first",
         "wall ms/window, first / last 10%",
         "KiB/snapshot, first 10%", "KiB/snapshot, last 10%"], table)
    print(f"rows equal on the first {args.query_windows} windows: {same}")
    if args.write_docs:
        note = (f"`{command_line()}` on {machine_line()}. {__doc__.split(chr(10) + chr(10))[1]} "
                f"Both paths' rows were checked equal over the first {args.query_windows} "
                "windows. Times are medians over the first and the last tenth of the windows "
                "(CPU time of the process: the machine was shared, its load average "
                f"{os.getloadavg()[0]:.0f} at the end); snapshot bytes are means over the tenth: "
                "a key group's rows are "
                "written whole now and then (when its logged changes weigh as much).")
        update_docs_section("sql-stream-join",
                            f"## SQL stream join per window\n\n{note}\n\n{markdown}\n")


if __name__ == "__main__":
    main()
