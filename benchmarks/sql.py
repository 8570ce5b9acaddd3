"""gyreflow's SQL against the same pipelines written in its Python API, and the event-time TUMBLE
count against PyFlink's SQL (each a whole process), in one run, on the same generated events; every
engine's rows are checked equal.

Queries: a filter and GROUP BY count/sum over a table read in windows of 100,000 rows (running
totals per key, the groups that changed each window), the event-time 10 s TUMBLE count per key
of the events of ``benchmarks/peers.py``, and Nexmark's q0 (pass-through), q1 (currency
conversion) and q2 (a filter) in nexmark-flink's SQL over the bids of ``benchmarks/nexmark.py``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import subprocess
import sys
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
from nexmark import make_bids
from peers import JOBS, ROOT, install_peers, last_line, peer_python, write_events

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


# --- the event-time workload of benchmarks/peers.py as processes: gyreflow sql and PyFlink's SQL ----


def seconds_rows(rows) -> Counter:
    """``(key, window start in whole seconds, count)`` of TUMBLE rows, whatever their start's form."""
    return Counter((k, start if isinstance(start, int) else round((start - EPOCH).total_seconds()), n)
                   for k, start, n in rows)


def sql_process(scratch: Path, path: Path) -> list:
    """The TUMBLE count run by ``gyreflow sql FILE.sql`` in a process of its own (an INSERT into a
    file table), its rows read back from the table's files."""
    out = scratch / "tumble-out"
    if out.exists():
        shutil.rmtree(out)
    script = scratch / "tumble.sql"
    script.write_text(table(path) + (
        f"CREATE TABLE counts (k varchar, start timestamp, n bigint) WITH (type='file', "
        f"geaflow.dsl.file.path='{out}');\nINSERT INTO counts {TUMBLE_SQL}"), encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "gyreflow", "sql", str(script)], capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"gyreflow sql failed: {done.stderr.strip()[-300:]}")
    rows = []
    for part in sorted(out.iterdir()):
        for line in part.read_text(encoding="utf-8").splitlines():
            k, start, n = line.split(",")
            rows.append((k, dt.datetime.fromisoformat(start), int(n)))
    return rows


def pyflink_process(python: Path, events: Path, scratch: Path) -> list:
    """The same TUMBLE count in PyFlink's SQL (``benchmarks/_peers_jobs.py``'s job for the events
    workload: a batch TableEnvironment over the events' JSON lines), in a process of its own."""
    output = scratch / "pyflink-tumble.jsonl"
    done = subprocess.run([str(python), str(JOBS), "pyflink", "events", str(events), str(output), "0"],
                          capture_output=True, text=True, check=False, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"PyFlink failed: {last_line(done.stderr)}")
    with output.open(encoding="utf-8") as lines:
        return [tuple(json.loads(line)) for line in lines]


# --- Nexmark q0, q1, q2 (nexmark-flink's SQL) on the bids of benchmarks/nexmark.py -----------------

NEXMARK = {
    "q0": "SELECT auction, price, datetime FROM bid;\n",  # pass-through
    "q1": "SELECT auction, 0.908 * price AS price, datetime FROM bid;\n",  # dollars to euros
    "q2": "SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0;\n",  # a filter
}


def write_bids(folder: Path, count: int, seed: int) -> Path:
    """``make_bids``'s ``(ts, auction, price)`` as a text table ``auction,price,ms``."""
    path = folder / "bids.csv"
    with path.open("w", encoding="utf-8") as out:
        for ts, auction, price in make_bids(count, 2.0, seed):
            out.write(f"{auction},{price},{round(ts * 1000)}\n")
    return path


def nexmark_sql(path: Path, query: str) -> list:
    script = (f"SET gyreflow.dsl.time.zone = 'UTC';\n"
              f"CREATE TABLE bid (auction bigint, price bigint, datetime timestamp) WITH ("
              f"type='file', geaflow.dsl.file.path='{path}', geaflow.dsl.window.size = {WINDOW_ROWS});\n")
    return Environment.local(progress=False).sql(script + query).output("rows-3")


def bid_of(line: str) -> tuple:
    auction, price, ms = line.split(",")
    return int(auction), int(price), EPOCH + dt.timedelta(milliseconds=int(ms))


def in_euros(bid: tuple) -> tuple:
    return bid[0], 0.908 * bid[1], bid[2]


def q2_kept(bid: tuple) -> bool:
    return bid[0] % 123 == 0


def auction_price(bid: tuple) -> tuple:
    return bid[0], bid[1]


def nexmark_api(path: Path, query: str) -> list:
    pipeline = Environment.local(progress=False).pipeline(query)

    @pipeline.task
    def job(ctx):
        bids = ctx.source(FileSource(str(path)), SizeTumblingWindow(WINDOW_ROWS)).map(bid_of)
        if query == "q1":
            bids = bids.map(in_euros)
        elif query == "q2":
            bids = bids.filter(q2_kept).map(auction_price)
        bids.collect("rows")

    return pipeline.execute()["job"].output("rows")


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
    parser.add_argument("--no-pyflink", action="store_true", help="leave PyFlink's SQL out")
    parser.add_argument("--venvs", default=str(ROOT / ".cache" / "peers"),
                        help="where the peers' virtual environments are (as benchmarks/peers.py)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        path = write_table(Path(scratch), args.rows, args.seed)
        want = {"group": Counter(api_group(path)), "tumble": Counter(api_tumble(path))}
        cases = {"filter + GROUP BY: SQL": lambda: sql_rows(path, GROUP_SQL),
                 "filter + GROUP BY: Python API": lambda: api_group(path),
                 "TUMBLE count: SQL": lambda: sql_rows(path, TUMBLE_SQL),
                 "TUMBLE count: Python API": lambda: api_tumble(path)}
        checks = {name: same(want["group" if name.startswith("filter") else "tumble"]) for name in cases}
        bids = write_bids(Path(scratch), args.rows, args.seed)
        for query, text in NEXMARK.items():
            want[query] = Counter(nexmark_api(bids, query))
            cases[f"Nexmark {query}: SQL"] = lambda text=text: nexmark_sql(bids, text)
            cases[f"Nexmark {query}: Python API"] = lambda query=query: nexmark_api(bids, query)
            checks[f"Nexmark {query}: SQL"] = checks[f"Nexmark {query}: Python API"] = same(want[query])
        flink = None
        if not args.no_pyflink:  # in a virtual environment of its own, as benchmarks/peers.py keeps it
            venvs = Path(args.venvs)
            failed = install_peers(venvs, ["pyflink"])
            flink = None if failed else peer_python(venvs, "pyflink")
            if failed:
                print(f"PyFlink left out: {failed['pyflink']}")
        if flink is not None:
            scratch_dir, events = Path(scratch), Path(scratch) / "events.jsonl"
            want["process"] = seconds_rows(api_tumble(path))
            cases["TUMBLE count, process: gyreflow sql"] = lambda: sql_process(scratch_dir, path)
            cases["TUMBLE count, process: PyFlink SQL"] = lambda: pyflink_process(flink, events, scratch_dir)
            for name in ("TUMBLE count, process: gyreflow sql", "TUMBLE count, process: PyFlink SQL"):
                checks[name] = lambda rows: same(want["process"])(list(seconds_rows(rows).elements()))
        timings = interleaved_best_of(cases, args.repeat, check=checks)
    rows = []
    for name, timing in timings.items():
        reference = timings.get(name.split(":")[0] + ": Python API")
        if reference is None:  # the processes: against gyreflow sql's
            reference = timings[name.split(":")[0] + ": gyreflow sql"]
        rows.append([name, format_seconds(timing.best), format_rate(args.rows / timing.best),
                     format_ratio(timing.best / reference.best)])
    columns = ["query and engine", "seconds", "rows/s", "time vs Python API (processes: vs gyreflow sql)"]
    markdown = print_table(f"SQL against the Python API, {args.rows:,} rows", columns, rows)
    if args.write_docs:
        note = (f"{args.rows:,} rows (the events of `benchmarks/peers.py` as a text table; for Nexmark "
                f"q0-q2, as many bids of `benchmarks/nexmark.py`), read in windows of {WINDOW_ROWS:,} "
                "rows; both forms parse the same file and their rows are checked equal. The SQL "
                "side reads only the columns a query uses, types them a column at a time, and runs "
                "each expression as one compiled function of the row. The process rows run the "
                "TUMBLE count as a whole process each, start-up included: `gyreflow sql FILE.sql` "
                "over the text table, and PyFlink's SQL (`apache-flink` in a virtual environment of "
                "its own, a batch TableEnvironment over the same events as JSON lines, the job of "
                "`benchmarks/_peers_jobs.py`), both checked against the Python API's rows. "
                + ("" if flink else "PyFlink could not be installed, so it has no row. ")
                + f"Best of {args.repeat}; {machine_line()}.\n\n`{command_line()}`")
        update_docs_section("sql", f"## SQL against the Python API\n\n{note}\n\n{markdown}\n")


if __name__ == "__main__":
    main()
