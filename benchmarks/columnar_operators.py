"""Event time and the stream-table join on column batches against the same jobs on rows.

In one run (best of N, interleaved), every run's output checked against a plain loop first:

- event time: 1M events of an Arrow table (100 keys, 100 events a second), a 10 s tumbling count
  per key with ``with_timestamps``/``key_by``/``count``: on rows (dicts, key and time functions)
  and on columns (column names);
- the stream-table join: 1M orders enriched by 2,000 users (``join_table(..., merged=True)``), then
  the amount summed per city: on rows and on columns.

Usage: python benchmarks/columnar_operators.py [--events N] [--repeat N] [--write-docs]
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
from collections import Counter

from _common import (
    DEFAULT_SEED,
    command_line,
    format_ratio,
    format_seconds,
    interleaved_best_of,
    machine_line,
    print_table,
    update_docs_section,
)

from gyreflow.api import ArrowSource, Environment, SizeTumblingWindow, Tumbling

WINDOW_RECORDS = 100_000  # records per processing window
USERS = 2_000


def environment():
    return Environment.from_config(None, {"environment.type": "local", "progress.enabled": False,
                                          "state.backend": "memory"})


def make_inputs(count: int, seed: int):
    import pyarrow as pa

    rng = random.Random(seed)
    keys = [f"k{rng.randrange(100)}" for _ in range(count)]
    events = pa.table({"key": keys, "ts": [i / 100 for i in range(count)]})
    users = [{"id": f"u{i}", "city": rng.choice(["Oslo", "Rome", "Lima", "Pune"])}
             for i in range(USERS)]
    orders = pa.table({"user": [f"u{rng.randrange(USERS + USERS // 4)}" for _ in range(count)],
                       "amount": [rng.randrange(100) for _ in range(count)]})
    return events, users, orders


def event_time(events, columns: bool):
    def run():
        pipeline = environment().pipeline("event-time-bench")

        @pipeline.task
        def job(ctx):
            source = ctx.source(ArrowSource(events), SizeTumblingWindow(WINDOW_RECORDS))
            if columns:
                stream = source.with_timestamps("ts").key_by("key")
            else:
                stream = (source.map(dict).with_timestamps(lambda e: e["ts"])
                          .key_by(lambda e: e["key"]))
            stream.window(Tumbling(10)).count().collect("counts")

        return Counter({(r.key, r.start): r.value
                        for r in pipeline.execute()["job"].output("counts")})

    return run


def enrich(orders, users, columns: bool):
    def run():
        pipeline = environment().pipeline("join-bench")

        @pipeline.task
        def job(ctx):
            source = ctx.source(ArrowSource(orders), SizeTumblingWindow(WINDOW_RECORDS))
            if not columns:
                source = source.map(dict)
            table = ctx.source(users).key_by("id")
            (source.key_by("user").join_table(table, merged=True)
             .key_by("city").sum("amount").collect("totals"))

        totals: dict = {}
        for city, total in pipeline.execute()["job"].output("totals"):
            totals[city] = total
        return totals

    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--write-docs", action="store_true", help="update docs/benchmarks.md")
    args = parser.parse_args(argv)
    events, users, orders = make_inputs(args.events, DEFAULT_SEED)
    expected_counts = Counter((key, math.floor(ts / 10) * 10.0) for key, ts in
                              zip(events["key"].to_pylist(), events["ts"].to_pylist(),
                                  strict=True))
    city = {u["id"]: u["city"] for u in users}
    expected_totals: Counter = Counter()
    for user, amount in zip(orders["user"].to_pylist(), orders["amount"].to_pylist(), strict=True):
        if user in city:
            expected_totals[city[user]] += amount
    cases = {"event time on rows": event_time(events, False),
             "event time on columns": event_time(events, True),
             "join on rows": enrich(orders, users, False),
             "join on columns": enrich(orders, users, True)}

    def check(name):
        want = expected_counts if name.startswith("event") else dict(expected_totals)

        def verify(result) -> None:
            if dict(result) != dict(want):
                msg = f"{name}: the output differs from the plain loop's"
                raise SystemExit(msg)
        return verify

    timings = interleaved_best_of(cases, args.repeat,
                                  check={name: check(name) for name in cases},
                                  on_run=lambda rep, name, s: print(
                                      f"repetition {rep}: {name}: {s:.3f} s", file=sys.stderr))
    rows = []
    for kind in ("event time", "join"):
        on_rows, on_columns = timings[f"{kind} on rows"].best, timings[f"{kind} on columns"].best
        rows.append([f"{kind} on rows", format_seconds(on_rows), "1.00x"])
        rows.append([f"{kind} on columns", format_seconds(on_columns),
                     format_ratio(on_rows / on_columns)])
    table = print_table(f"Event time and the stream-table join, {args.events:,} records",
                        ["case", "seconds", "vs rows"], rows)
    notes = [f"Machine: {machine_line()}.",
             f"Command: `{command_line()}`; best of {args.repeat}, interleaved; every run's output "
             "equals a plain loop's (counts per key and window; totals per city).",
             "Event time: an Arrow table of 100 keys, 100 events a second, a 10 s tumbling count "
             f"per key, {WINDOW_RECORDS:,} records a processing window; rows: `map(dict)` first, "
             "then key and time functions; columns: `with_timestamps(\"ts\").key_by(\"key\")`.",
             f"Join: orders of {USERS + USERS // 4:,} users, {USERS:,} of them in the table; "
             "`join_table(users, merged=True)`, then `key_by(\"city\").sum(\"amount\")`."]
    for note in notes:
        print(note)
    if args.write_docs:
        update_docs_section("columnar-operators", "\n".join(
            ["## Columnar event time and join", "", table, "", *[f"- {n}" for n in notes]]))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("GYREFLOW_PROGRESS__ENABLED", "false")
    sys.exit(main())
