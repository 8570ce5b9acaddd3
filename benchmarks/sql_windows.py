"""Queries over tables read in windows that run in the query operator, per window's CPU time and
snapshot bytes over many windows: a Top-N (``ORDER BY ... LIMIT``), a MATCH of one edge over a
graph the script's INSERTs grow, and the SQL stream join for comparison.

Each path runs ``--windows`` windows of ``--rows`` rows, state on RocksDB, one window in flight,
one task. ``--before`` adds the same queries with the query operator's Top-N and kept graphs
switched off (every row so far kept and queried, the graph loaded again each window) over
``--before-windows`` windows. Each run's rows are checked against a plain-Python oracle.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from _common import command_line, format_ratio, machine_line, print_table, update_docs_section

import gyreflow.api.dsl.planning as planning
import gyreflow.api.dsl.query_state as query_state
from gyreflow.api import Environment, JobListener
from gyreflow.api.dsl.runner import run as run_script

TOP = "SELECT id, amount FROM a ORDER BY amount DESC, id LIMIT 10"
JOIN = "SELECT a.id, b.id, a.amount + b.amount FROM a JOIN b ON a.k = b.k"
MATCH = """
CREATE GRAPH g (Vertex person (id bigint ID), Edge knows (srcId bigint SOURCE ID,
  targetId bigint DESTINATION ID));
CREATE TABLE e (src bigint, dst bigint) WITH (type='file', geaflow.dsl.file.path='{folder}/e.txt');
CREATE TABLE out (a bigint, b bigint) WITH (type='file', geaflow.dsl.file.path='{folder}/out');
INSERT INTO g.person SELECT src FROM e;
INSERT INTO g.knows SELECT src, dst FROM e;
USE GRAPH g;
INSERT INTO out SELECT a, b FROM (MATCH (a:person)-[:knows]->(b:person) RETURN a.id AS a, b.id AS b);
"""


class Windows(JobListener):
    """Each window's CPU time (the process's: the local environment runs every task in it) from
    the end of the window before, and its snapshot's bytes."""

    def __init__(self) -> None:
        self.cpu: list[float] = []
        self.bytes: dict[int, int] = {}
        self.last = time.process_time()

    def on_window(self, metrics) -> None:
        now = time.process_time()
        self.cpu.append(now - self.last)
        self.last = now

    def on_checkpoint(self, checkpoint) -> None:
        self.bytes[checkpoint.window] = checkpoint.bytes


def tables(folder: Path, rows: int, windows: int, seed: int) -> tuple[list, list, list]:
    rng = random.Random(seed)
    count = rows * windows
    a = [(i, rng.randrange(count), rng.randrange(1_000_000)) for i in range(count)]
    b = [(i, rng.randrange(count), rng.randrange(100)) for i in range(count)]
    edges: dict = {}  # distinct: a path's unnamed edges are not told apart
    while len(edges) < count:  # vertices come as edges do: a vertex's degree does not grow with them
        vertices = 10 + len(edges) // 2
        edges[(rng.randrange(vertices), rng.randrange(vertices))] = None
    e = list(edges)
    for name, listed in (("a", a), ("b", b), ("e", e)):
        with open(folder / f"{name}.txt", "w", encoding="utf-8") as out:
            out.writelines(",".join(map(str, row)) + "\n" for row in listed)
    return a, b, e


def sql(folder: Path, rows: int, query: str) -> str:
    return (f"SET geaflow.dsl.window.size = {rows};\n"
            f"CREATE TABLE a (id bigint, k bigint, amount int) WITH (type='file', "
            f"geaflow.dsl.file.path='{folder / 'a.txt'}');\n"
            f"CREATE TABLE b (id bigint, k bigint, amount int) WITH (type='file', "
            f"geaflow.dsl.file.path='{folder / 'b.txt'}');\n{query};\n")


@contextlib.contextmanager
def before(switched: bool):
    """The query operator without its Top-N and kept graphs (``switched``)."""
    top, kept = planning.top_n, query_state.KeptGraphs.grown
    if switched:
        planning.top_n = lambda *args: None
        query_state.KeptGraphs.grown = lambda self, value, added: {}
    try:
        yield
    finally:
        planning.top_n, query_state.KeptGraphs.grown = top, kept


def env(state: Path) -> Environment:
    return Environment.local(1, progress=False, config={
        "state.backend": "rocksdb", "state.path": str(state), "scheduler.max_flying_windows": 1})


def top_oracle(a: list, rows: int, windows: int) -> dict[int, Counter]:
    out, last = {}, Counter()
    for w in range(1, windows + 1):
        now = Counter((i, x) for i, _, x in sorted(a[:w * rows], key=lambda r: (-r[2], r[0]))[:10])
        if now - last:
            out[w] = now - last
        last = now
    return out


def match_oracle(e: list, rows: int, windows: int) -> list[Counter]:
    """Per window, the edges out of the vertices its edges touched, over the graph so far."""
    out, adjacency = [], {}
    for w in range(windows):
        new = e[w * rows:(w + 1) * rows]
        for s, d in new:
            adjacency.setdefault(s, []).append(d)
        touched = {v for edge in new for v in edge}  # the vertices: the edges' sources
        out.append(Counter((s, d) for s in touched for d in adjacency.get(s, ()) if d in adjacency))
    return out


def measure(kind: str, folder: Path, rows: int, windows: int, switched: bool, scratch: Path) -> Windows:
    heard = Windows()
    with before(switched):
        if kind == "match":
            run_script(env(scratch), MATCH.format(folder=folder), {
                "geaflow.dsl.window.size": str(rows),
                "geaflow.file.persistent.root": str(scratch / "graphs")}, root=str(folder),
                name="match", listener=heard)
            got = []
            for part in sorted((folder / "out").iterdir()):
                got.append(Counter(tuple(map(int, line.split(","))) for line in part.read_text().split()))
            shutil.rmtree(folder / "out")
            want = [c for c in match_oracle(read(folder / "e.txt"), rows, windows) if c]
            if [c for c in got if c] != want:
                sys.exit(f"error: the MATCH's rows differ from the oracle's ({len(got)} windows)")
        else:
            result = env(scratch).sql(sql(folder, rows, TOP if kind == "top" else JOIN), listener=heard)
            if kind == "top":
                got = {w: Counter(r) for w, r in result.by_window("rows-4").items() if r}
                if got != top_oracle(read(folder / "a.txt"), rows, windows):
                    sys.exit("error: the Top-N's rows differ from the oracle's")
    return heard


def read(path: Path) -> list[tuple]:
    return [tuple(map(int, line.split(","))) for line in path.read_text().split()]


def tenth(values: list, first: bool) -> float:
    n = max(1, len(values) // 10)
    part = values[:n] if first else values[-n:]
    return statistics.median(part)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=200, help="rows a window")
    parser.add_argument("--windows", type=int, default=200)
    parser.add_argument("--before", action="store_true")
    parser.add_argument("--before-windows", type=int, default=200)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="gyreflow-sql-windows-"))
    table = []
    try:
        runs = [(kind, args.windows, False) for kind in ("top", "match", "join")]
        if args.before:
            runs += [(kind, args.before_windows, True) for kind in ("top", "match")]
        for number, (kind, windows, switched) in enumerate(runs):
            folder = scratch / f"run{number}"
            folder.mkdir()
            tables(folder, args.rows, windows, args.seed)
            heard = measure(kind, folder, args.rows, windows, switched, scratch / f"state{number}")
            sizes = [heard.bytes[w] for w in sorted(heard.bytes)]
            first, last = tenth(heard.cpu, True), tenth(heard.cpu, False)
            name = {"top": "ORDER BY amount DESC LIMIT 10", "match": "MATCH (a)-[:knows]->(b)",
                    "join": "stream join"}[kind] + (" (before)" if switched else "")
            tenths = sizes[:len(sizes) // 10], sizes[-(len(sizes) // 10):]
            table.append([name, windows, f"{first * 1000:.1f}", f"{last * 1000:.1f}",
                          format_ratio(last / first), f"{statistics.mean(tenths[0]) / 1024:.1f}",
                          f"{statistics.mean(tenths[1]) / 1024:.1f}", f"{max(sizes) / 1024:.0f}"])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    markdown = print_table(
        f"SQL over tables read in windows, {args.rows} rows a window",
        ["query", "windows", "CPU ms/window, first 10%", "CPU ms/window, last 10%", "last/first",
         "KiB/snapshot, first 10%", "KiB/snapshot, last 10%", "KiB, largest snapshot"], table)
    if args.write_docs:
        note = (f"`{command_line()}` on {machine_line()}. {__doc__.split(chr(10) + chr(10))[1]} "
                "The Top-N is `" + TOP + "`; the MATCH's edges come between vertices whose number "
                "grows with the edges (a vertex's degree grows slowly), and it starts from the "
                "vertices each window touched. CPU times are medians over the first and the last "
                "tenth of the windows (CPU time of the process, on a shared machine); snapshot bytes "
                "are means over the tenth, the largest is a fold of the logged changes into a new "
                "base (the query operator's rows so far written whole now and then). The "
                "(before) rows snapshot as the others do; a query operator that wrote its rows "
                "so far in every snapshot wrote 121 KiB a snapshot by window 100 of 100 rows.")
        update_docs_section("sql-windows", f"## SQL query operator per window\n\n{note}\n\n{markdown}\n")


if __name__ == "__main__":
    main()
