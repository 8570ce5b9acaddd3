"""Graph benchmark: PageRank against a plain-Python loop and on Spark; incremental WCC as the graph grows.

One run measures:

1. PageRank, 20 iterations (Graphalytics definition) on a seeded random directed graph of 100,000
   vertices and 1,000,000 edges: a hand-written plain-Python loop (the reference every other result
   is checked against), gyreflow's local environment, and gyreflow on Spark ``local[2]``.
2. Incremental WCC: 2,000,000 edges over the same 100,000 vertices arrive in windows of 100,000 edges;
   the time of every window as the graph grows 20x, checked after every window against union-find.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import random
import statistics
import sys
import time
from collections.abc import Callable

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
from rich.console import Console

from gyreflow.api import Environment, SizeTumblingWindow
from gyreflow.api.graph import GraphView
from gyreflow.api.graph_algorithms import incremental_wcc, pagerank

SPARK_MASTER = "local[2]"
DAMPING = 0.85
LOOP = "plain-Python PageRank loop"
LOCAL = "gyreflow local"
SPARK = f"gyreflow on Spark {SPARK_MASTER}"
LOOP_SHARE_TARGET = 0.5  # gyreflow local >= half the plain loop's speed
GROWTH_TARGET = 2.0  # per-window time grows less than 2x while the graph grows 20x

err = Console(stderr=True)


class ResultMismatchError(Exception):
    """An engine's result differs from the reference."""


# ---------------------------------------------------------------------------------------------
# Input


def random_edges(n: int, m: int, seed: int) -> list[tuple[int, int]]:
    """``m`` distinct directed edges ``src != dst`` between ``n`` vertices; destinations skewed towards
    low ids (some vertices are popular), and the last 2% of the ids never a source (dangling)."""
    rng = random.Random(seed)
    sources = n - n // 50
    seen: set[tuple[int, int]] = set()
    edges = []
    rand, randrange = rng.random, rng.randrange
    while len(edges) < m:
        edge = (randrange(sources), int(n * rand() ** 1.5))
        if edge[0] != edge[1] and edge not in seen:
            seen.add(edge)
            edges.append(edge)
    return edges


# ---------------------------------------------------------------------------------------------
# PageRank engines


def plain_pagerank(vertices: list, edges: list, damping: float, iterations: int) -> dict:
    """A hand-written PageRank over dicts: adjacency lists, then ``iterations`` synchronous updates
    with the dangling rank spread evenly."""
    out: dict = {v: [] for v in vertices}
    for src, dst in edges:
        out[src].append(dst)
    n = len(vertices)
    rank = dict.fromkeys(vertices, 1.0 / n)
    for _ in range(iterations):
        incoming = dict.fromkeys(vertices, 0.0)
        dangling = 0.0
        for vertex, targets in out.items():
            if targets:
                share = rank[vertex] / len(targets)
                for target in targets:
                    incoming[target] += share
            else:
                dangling += rank[vertex]
        base = (1.0 - damping) / n + damping * dangling / n
        rank = {v: base + damping * incoming[v] for v in vertices}
    return rank


def gyreflow_pagerank(env: Environment, vertices: list, edges: list, iterations: int,
                      parallelism: int) -> Callable[[], dict]:
    """A pipeline: the graph from two in-memory sources, library PageRank, collected."""

    def run() -> dict:
        pipeline = env.pipeline("pagerank-benchmark")

        @pipeline.task
        def ranks(ctx):
            graph = GraphView(ctx.source(vertices), ctx.source(edges), directed=True,
                              parallelism=parallelism)
            pagerank(graph, DAMPING, iterations).collect("ranks")

        return dict(pipeline.execute(fresh=True).output("ranks"))

    return run


def check_ranks(name: str, got: dict, expected: dict) -> None:
    """Raise ResultMismatchError unless every rank is within 1e-9 (relative) of the reference."""
    if got.keys() != expected.keys():
        msg = f"{name}: {len(got)} vertices, expected {len(expected)}"
        raise ResultMismatchError(msg)
    wrong = [v for v, r in expected.items() if abs(got[v] - r) > 1e-9 * max(r, 1e-12)]
    if wrong:
        examples = ", ".join(f"{v}: {got[v]!r} != {expected[v]!r}" for v in wrong[:3])
        msg = f"{name}: {len(wrong)} ranks differ from the plain loop, e.g. {examples}"
        raise ResultMismatchError(msg)


# ---------------------------------------------------------------------------------------------
# Incremental WCC


def run_incremental_wcc(env: Environment, edges: list, window: int, parallelism: int):
    """Incremental WCC over ``edges`` in windows of ``window``; returns the task result."""
    pipeline = env.pipeline("incremental-wcc-benchmark")

    @pipeline.task
    def components(ctx):
        stream = ctx.source(edges, SizeTumblingWindow(window), parallelism=1)
        graph = GraphView(None, stream, directed=False, parallelism=parallelism)
        incremental_wcc(graph).collect("labels")

    return pipeline.execute(fresh=True)["components"]


class UnionFind:
    """Union-find with the smallest id as each root: the reference labelling after each window."""

    def __init__(self) -> None:
        self.parent: dict = {}

    def find(self, v):
        parent = self.parent
        root = v
        while parent[root] != root:
            root = parent[root]
        while parent[v] != root:
            parent[v], v = root, parent[v]
        return root

    def add(self, a, b) -> None:
        for v in (a, b):
            self.parent.setdefault(v, v)
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def check_windows(result, edges: list, window: int) -> None:
    """Fold each window's changed labels and compare with union-find over the edges so far."""
    by_window = result.by_window("labels")
    windows = math.ceil(len(edges) / window)
    union = UnionFind()
    labels: dict = {}
    for number in range(1, windows + 1):
        for a, b in edges[(number - 1) * window:number * window]:
            union.add(a, b)
        labels.update(by_window.get(number, []))
        expected = {v: union.find(v) for v in union.parent}
        if labels != expected:
            wrong = [v for v in expected if labels.get(v) != expected[v]][:3]
            msg = f"incremental WCC after window {number}: labels differ, e.g. vertices {wrong}"
            raise ResultMismatchError(msg)


# ---------------------------------------------------------------------------------------------
# Main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--vertices", type=int, default=100_000, help="vertices (default 100,000)")
    parser.add_argument("--edges", type=int, default=1_000_000,
                        help="PageRank edges (default 1,000,000)")
    parser.add_argument("--iterations", type=int, default=20, help="PageRank iterations")
    parser.add_argument("--wcc-edges", type=int, default=2_000_000,
                        help="incremental WCC edges in all (default 2,000,000)")
    parser.add_argument("--wcc-window", type=int, default=100_000,
                        help="incremental WCC edges per window (default 100,000)")
    parser.add_argument("--parallelism", type=int, default=1,
                        help="gyreflow local graph parallelism (default 1)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="PageRank repetitions; the best run counts (default 1)")
    parser.add_argument("--no-spark", action="store_true", help="skip gyreflow on Spark")
    parser.add_argument("--no-wcc", action="store_true", help="skip incremental WCC")
    parser.add_argument("--write-docs", action="store_true",
                        help="update the 'graph' section of docs/benchmarks.md")
    args = parser.parse_args(argv)
    for flag in ("vertices", "edges", "iterations", "wcc_edges", "wcc_window", "parallelism",
                 "repeat"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be >= 1")
    return args


def pagerank_section(args, vertices, edges, notes: list[str]) -> tuple[str, list[str]]:
    """Time the PageRank engines; returns the Markdown table and the target lines."""
    expected: dict = {}

    def loop() -> dict:
        return plain_pagerank(vertices, edges, DAMPING, args.iterations)

    cases: dict[str, Callable[[], object]] = {LOOP: loop}
    local = Environment.local(parallelism=args.parallelism, progress=False,
                              config={"state.backend": "memory"})
    cases[LOCAL] = gyreflow_pagerank(local, vertices, edges, args.iterations, args.parallelism)
    spark_env = None
    if args.no_spark:
        notes.append("gyreflow on Spark skipped (--no-spark).")
    else:
        err.print(f"[dim]starting Spark ({SPARK_MASTER})...[/dim]")
        started = time.perf_counter()
        spark_env = Environment.spark(master=SPARK_MASTER, parallelism=2, progress=False,
                                      config={"state.backend": "memory"})
        # Start the session and its Python workers before the timed runs.
        spark_env.session().sparkContext.parallelize(range(2), 2).map(abs).collect()
        notes.append(f"gyreflow on Spark: parallelism 2; the SparkSession start-up and a warm-up job "
                     f"({time.perf_counter() - started:.1f} s) are excluded.")
        cases[SPARK] = gyreflow_pagerank(spark_env, vertices, edges, args.iterations, 2)

    def check(name: str) -> Callable[[object], None]:
        def verify(result) -> None:
            if name == LOOP:
                expected.clear()
                expected.update(result)
            else:
                check_ranks(name, result, expected)
        return verify

    def progress(rep: int, name: str, seconds: float) -> None:
        err.print(f"[dim]PageRank repetition {rep}/{args.repeat}: {name}: {seconds:.2f} s[/dim]")

    # The loop runs first in every repetition (rotate=False): it is the reference of the others.
    timings = interleaved_best_of(cases, args.repeat, check={n: check(n) for n in cases},
                                  rotate=False, on_run=progress)
    loop_seconds = timings[LOOP].best
    rows = []
    for name, timing in timings.items():
        rows.append([name, format_seconds(timing.best),
                     format_rate(len(edges) * args.iterations / timing.best),
                     format_ratio(loop_seconds / timing.best)])
    table = print_table(f"PageRank, {len(vertices):,} vertices, {len(edges):,} edges, "
                        f"{args.iterations} iterations",
                        ["engine", "seconds", "edges/s", "vs plain loop"], rows)
    share = loop_seconds / timings[LOCAL].best
    targets = [f"{LOCAL} >= {LOOP_SHARE_TARGET:.0%} of the plain loop's speed: {share:.0%} -> "
               f"{'met' if share >= LOOP_SHARE_TARGET else 'NOT met'}"]
    return table, targets


def wcc_section(args, notes: list[str]) -> tuple[str, list[str]]:
    """Run incremental WCC once; returns the per-window Markdown table and the target line."""
    edges = random_edges(args.vertices, args.wcc_edges, DEFAULT_SEED + 1)
    # One window in flight at a time, so that each window's time is its own.
    env = Environment.local(parallelism=args.parallelism, progress=False,
                            config={"state.backend": "memory", "scheduler.max_flying_windows": 1})
    err.print("[dim]incremental WCC...[/dim]")
    started = time.perf_counter()
    result = run_incremental_wcc(env, edges, args.wcc_window, args.parallelism)
    total = time.perf_counter() - started
    check_windows(result, edges, args.wcc_window)
    seconds = {w.window: w.seconds for w in result.windows}
    changed = {w: len(records) for w, records in result.by_window("labels").items()}
    rows = []
    for number in sorted(seconds):
        rows.append([str(number), f"{min(number * args.wcc_window, len(edges)):,}",
                     f"{changed.get(number, 0):,}", f"{seconds[number] * 1000:.0f}"])
    table = print_table("Incremental WCC per window", ["window", "edges so far",
                        "vertices changed", "window ms"], rows)
    ordered = [seconds[w] for w in sorted(seconds)]
    head = statistics.mean(ordered[1:4]) if len(ordered) > 4 else ordered[0]
    tail = statistics.mean(ordered[-3:])
    growth = tail / head
    notes.append(f"Incremental WCC: {len(edges):,} edges (same generator, seed {DEFAULT_SEED + 1}) "
                 f"over {args.vertices:,} vertices in windows of {args.wcc_window:,}, "
                 f"undirected, parallelism {args.parallelism}, one window in flight; {total:.1f} s "
                 "in all. Every window's folded output was checked against union-find. Window 1 "
                 "also creates every vertex.")
    targets = [f"incremental WCC per-window time (mean of the last 3 windows / mean of windows "
               f"2-4) < {GROWTH_TARGET:g}x while the graph grows "
               f"{len(edges) // args.wcc_window}x: {growth:.2f}x -> "
               f"{'met' if growth < GROWTH_TARGET else 'NOT met'}"]
    return table, targets


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    started = time.perf_counter()
    vertices = list(range(args.vertices))
    edges = random_edges(args.vertices, args.edges, DEFAULT_SEED)
    dangling = args.vertices - len({src for src, _ in edges})
    notes = [f"PageRank input: {args.vertices:,} vertices, {args.edges:,} distinct directed edges "
             f"(seed {DEFAULT_SEED}; {dangling:,} vertices without out-edges), damping {DAMPING}; "
             "edges/s is edges x iterations per second. Every gyreflow result was checked against "
             "the plain loop's ranks (relative error 1e-9).",
             f"gyreflow local: parallelism {args.parallelism}, memory state backend; the time "
             "includes building the graph from the two in-memory sources."]
    try:
        pr_table, targets = pagerank_section(args, vertices, edges, notes)
        wcc_table = ""
        if args.no_wcc:
            notes.append("Incremental WCC skipped (--no-wcc).")
        else:
            wcc_table, wcc_targets = wcc_section(args, notes)
            targets += wcc_targets
    except ResultMismatchError as exc:
        err.print(f"[bold red]error:[/bold red] {exc} (aborting the benchmark)")
        return 1
    machine = machine_line()
    print()
    for note in [f"Machine: {machine}.", *notes, "Targets:", *targets]:
        print(note)
    if args.write_docs:
        today = datetime.datetime.now(datetime.UTC).date().isoformat()
        section = "\n".join([
            "## Graph",
            "",
            "PageRank (Graphalytics definition) with gyreflow's algorithm library on the local "
            "environment and on Spark, against a hand-written plain-Python loop over dicts; then "
            "incremental WCC on a graph that grows window by window.",
            "",
            f"Run on {today} with `{command_line()}` "
            f"({time.perf_counter() - started:.0f} s in all).  ",
            f"Machine: {machine}.",
            "",
            "### PageRank",
            "",
            pr_table,
            "",
            *([] if not wcc_table else ["### Incremental WCC", "", wcc_table, ""]),
            *(f"- {note}" for note in notes),
            "",
            "Targets:",
            "",
            *(f"- {line}" for line in targets),
        ])
        path = update_docs_section("graph", section)
        print(f"\nUpdated the 'graph' section of {path}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
