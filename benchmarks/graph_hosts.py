"""Graph supersteps on every host: PageRank's superstep in-process, on local worker processes and on
Spark in workers mode, against the target 2x the in-process superstep + 10 ms.

The graph is ``graph.py``'s seeded random graph (100,000 vertices, 1,000,000 edges by default), the
program the library's ``pagerank`` (20 iterations: 21 supersteps). A superstep's time is measured
where the scheduler runs, in the driver: from the moment it sends the first superstep's events to the
moment it sends the end of the iterations, divided by the supersteps. That span holds every
superstep's work, the exchange of its messages and the barrier between supersteps, and nothing
else (not the graph's building, nor the results' collection, nor a Spark stage's start, which vary
by seconds from run to run on a shared machine and swamp the supersteps in a whole run's time).

Every run's ranks are checked against a ``scipy.sparse`` loop (relative error 1e-9). The hosts run
interleaved, ``--repeat`` times; the best and the median per host are shown, and the target of
each host is computed from the in-process superstep of the same run.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import queue
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

from _common import (
    DEFAULT_SEED,
    command_line,
    machine_line,
    print_table,
    update_docs_section,
)
from graph import (
    DAMPING,
    DriverSpan,
    ResultMismatchError,
    check_ranks,
    gyreflow_pagerank,
    random_edges,
    scipy_pagerank,
)
from rich.console import Console

from gyreflow.api import Environment
from gyreflow.runtime.dataflow.graph.array_supersteps import ArraySupersteps
from gyreflow.runtime.workers import worker as workers

SPARK_MASTER = "local[2]"
IN_PROCESS = "in-process, parallelism 1"
IN_PROCESS_2 = "in-process, parallelism 2"
WORKERS = "local workers, 2 processes"
SPARK = f"Spark workers mode, {SPARK_MASTER}"
TARGET_FACTOR = 2.0  # a superstep on workers <= 2x the in-process superstep ...
TARGET_EXTRA = 0.010  # ... plus 10 ms

err = Console(stderr=True)


class WorkerBreakdown:
    """Where a local worker's supersteps go: timers patched into this process before it forks its
    workers (Spark's workers are not forks: not measured), each worker appending its sums to a
    file when a window's supersteps end. ``compute``: the supersteps' array operations (the
    program, the inbox, the outgoing pieces); ``send``: pickling and writing this worker's
    messages (to the other worker and the driver); ``receive``: reading and unpickling those that
    arrived; ``wait``: nothing to do, waiting for the other worker's messages or the driver's
    next events (the barrier); ``other``: the rest (the tasks handling their events)."""

    PARTS = ("compute", "send", "receive", "wait", "other")

    def __init__(self) -> None:
        handle, self.path = tempfile.mkstemp(prefix="gyreflow-breakdown-", suffix=".jsonl")
        os.close(handle)
        sums: dict[str, float] = {}
        state = {"start": None, "steps": 0}
        path = self.path

        def timed(name: str, fn):
            def call(*args, **kwargs):
                if state["start"] is None:
                    return fn(*args, **kwargs)
                started = time.perf_counter()
                try:
                    return fn(*args, **kwargs)
                finally:
                    sums[name] = sums.get(name, 0.0) + time.perf_counter() - started
            return call

        superstep, finish = ArraySupersteps.superstep, ArraySupersteps.finish_iteration
        timed_superstep = timed("compute", superstep)

        def first_superstep(operator, iteration, *args, **kwargs):
            if iteration == 1 and state["start"] is None:
                sums.clear()
                state["start"], state["steps"] = time.perf_counter(), 0
            state["steps"] += 1
            return timed_superstep(operator, iteration, *args, **kwargs)

        def finish_iteration(operator, window):
            if state["start"] is not None:
                span = time.perf_counter() - state["start"]
                state["start"] = None
                with open(path, "a", encoding="utf-8") as out:
                    out.write(json.dumps({"span": span, "steps": state["steps"], **sums}) + "\n")
            return finish(operator, window)

        class TimedQueue(queue.SimpleQueue):
            def get(self, block=True, timeout=None):
                if not block or state["start"] is None:
                    return super().get(block, timeout)
                started = time.perf_counter()
                try:
                    return super().get(block, timeout)
                finally:
                    sums["wait"] = sums.get("wait", 0.0) + time.perf_counter() - started

        init = workers.Worker.__init__

        def worker_init(worker, *args, **kwargs):
            init(worker, *args, **kwargs)
            worker.inbound = TimedQueue()

        ArraySupersteps.superstep = first_superstep
        ArraySupersteps.finish_iteration = finish_iteration
        workers.Worker.__init__ = worker_init
        workers.Worker._flush = timed("send", workers.Worker._flush)
        workers.Worker._take = timed("take", workers.Worker._take)

    def take(self) -> dict[str, float]:
        """Per part, the seconds of a superstep (the mean over the workers) since the last call."""
        with open(self.path, encoding="utf-8") as lines:
            records = [json.loads(line) for line in lines]
        open(self.path, "w").close()
        parts = dict.fromkeys(self.PARTS, 0.0)
        for record in records:
            steps = record["steps"] * len(records)
            parts["compute"] += record.get("compute", 0.0) / steps
            parts["send"] += record.get("send", 0.0) / steps
            parts["wait"] += record.get("wait", 0.0) / steps
            parts["receive"] += (record.get("take", 0.0) - record.get("wait", 0.0)) / steps
            parts["other"] += (record["span"] - record.get("compute", 0.0) - record.get("send", 0.0)
                               - record.get("take", 0.0)) / steps
        return parts

    def close(self) -> None:
        os.unlink(self.path)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--vertices", type=int, default=100_000, help="vertices (default 100,000)")
    parser.add_argument("--edges", type=int, default=1_000_000, help="edges (default 1,000,000)")
    parser.add_argument("--iterations", type=int, default=20, help="PageRank iterations (20)")
    parser.add_argument("--repeat", type=int, default=5, help="runs per host (default 5)")
    parser.add_argument("--no-spark", action="store_true", help="skip Spark workers mode")
    parser.add_argument("--no-breakdown", action="store_true",
                        help="no timers in the local workers (where their supersteps go)")
    parser.add_argument("--write-docs", action="store_true",
                        help="update the 'graph-hosts' section of docs/benchmarks.md")
    args = parser.parse_args(argv)
    for flag in ("vertices", "edges", "iterations", "repeat"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag} must be >= 1")
    return args


def environments(no_spark: bool, notes: list[str]) -> dict[str, tuple[Environment, int]]:
    """Each host's environment and the graph's parallelism on it."""
    memory = {"state.backend": "memory"}
    hosts = {
        IN_PROCESS: (Environment.local(parallelism=1, progress=False,
                                       config={**memory, "environment.workers": 1}), 1),
        IN_PROCESS_2: (Environment.local(parallelism=2, progress=False,
                                         config={**memory, "environment.workers": 1}), 2),
        WORKERS: (Environment.local(parallelism=2, progress=False,
                                    config={**memory, "environment.workers": 2}), 2),
    }
    if no_spark:
        notes.append("Spark workers mode skipped (--no-spark).")
        return hosts
    err.print(f"[dim]starting Spark ({SPARK_MASTER})...[/dim]")
    started = time.perf_counter()
    spark = Environment.spark(master=SPARK_MASTER, parallelism=2, progress=False,
                              config={**memory, "spark.mode": "workers"})
    spark.session().sparkContext.parallelize(range(2), 2).map(abs).collect()
    notes.append(f"Spark: the SparkSession's start and a warm-up job ({time.perf_counter() - started:.1f}"
                 " s) came before the runs; each run starts its barrier stage of 2 workers anew "
                 "(in its whole time, not in its supersteps).")
    hosts[SPARK] = (spark, 2)
    return hosts


def measure(args, vertices: list, edges: list, expected: dict, notes: list[str],
            breakdown: WorkerBreakdown | None) -> tuple[dict, list[dict]]:
    """Per host the runs' ``(whole seconds, superstep seconds)``; the local workers' breakdowns."""
    hosts = environments(args.no_spark, notes)
    span = DriverSpan()
    parts: list[dict] = []
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in hosts}
    jobs: dict[str, Callable[[], dict]] = {
        name: gyreflow_pagerank(env, vertices, edges, args.iterations, parallelism)
        for name, (env, parallelism) in hosts.items()}
    for rep in range(args.repeat):
        for name, job in jobs.items():
            started = time.perf_counter()
            ranks = job()
            whole = time.perf_counter() - started
            seconds, steps = span.take()
            if breakdown is not None:
                measured = breakdown.take()
                if name == WORKERS:
                    parts.append(measured)
            check_ranks(name, ranks, expected)
            del ranks
            runs[name].append((whole, seconds / steps))
            err.print(f"[dim]{rep + 1}/{args.repeat} {name}: {whole:.2f} s, {steps} supersteps, "
                      f"{seconds / steps * 1000:.1f} ms each[/dim]")
    return runs, parts


def breakdown_table(parts: list[dict]) -> str:
    """The local workers' superstep by part: the median of the runs."""
    rows = [[part, f"{statistics.median(p[part] for p in parts) * 1000:.2f}"]
            for part in WorkerBreakdown.PARTS]
    total = sum(statistics.median(p[part] for p in parts) for part in WorkerBreakdown.PARTS)
    rows.append(["superstep (sum of the medians)", f"{total * 1000:.2f}"])
    return print_table("Where a local worker's superstep goes (ms, median of the runs)",
                       ["part", "ms per superstep"], rows)


def table(runs: dict) -> tuple[str, list[str]]:
    """The table and the targets' lines."""
    best_in_process = min(step for _, step in runs[IN_PROCESS])
    median_in_process = statistics.median(step for _, step in runs[IN_PROCESS])
    target = TARGET_FACTOR * best_in_process + TARGET_EXTRA
    median_target = TARGET_FACTOR * median_in_process + TARGET_EXTRA
    rows, lines = [], []
    for name, measured in runs.items():
        best = min(step for _, step in measured)
        median = statistics.median(step for _, step in measured)
        whole = min(w for w, _ in measured)
        judged = name not in (IN_PROCESS, IN_PROCESS_2)
        rows.append([name, f"{whole:.2f}", f"{best * 1000:.1f}", f"{median * 1000:.1f}",
                     f"{best / best_in_process:.2f}x",
                     f"{target * 1000:.1f}" if judged else "",
                     ("met" if best <= target else "NOT met") if judged else ""])
        if judged:
            lines.append(f"PageRank superstep on {name} <= {TARGET_FACTOR:g}x in-process + "
                         f"{TARGET_EXTRA * 1000:g} ms: best {best * 1000:.1f} ms <= "
                         f"{target * 1000:.1f} ms -> {'met' if best <= target else 'NOT met'}; "
                         f"median {median * 1000:.1f} ms <= {median_target * 1000:.1f} ms -> "
                         f"{'met' if median <= median_target else 'NOT met'}")
    markdown = print_table(
        "PageRank per superstep by host",
        ["host", "whole run s (best)", "superstep ms (best)", "superstep ms (median)",
         "vs in-process", "target ms", "target"], rows)
    return markdown, lines


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    started = time.perf_counter()
    vertices = list(range(args.vertices))
    edges = random_edges(args.vertices, args.edges, DEFAULT_SEED)
    expected = scipy_pagerank(vertices, edges, DAMPING, args.iterations)
    notes = [f"Input: {args.vertices:,} vertices, {args.edges:,} directed edges (graph.py's, seed "
             f"{DEFAULT_SEED}), PageRank with damping {DAMPING}, {args.iterations} iterations "
             f"({args.iterations + 1} supersteps), memory state backend; every run's ranks "
             "checked against a scipy.sparse loop (relative error 1e-9)."]
    breakdown = None if args.no_breakdown else WorkerBreakdown()
    try:
        runs, parts = measure(args, vertices, edges, expected, notes, breakdown)
    except ResultMismatchError as exc:
        err.print(f"[bold red]error:[/bold red] {exc} (aborting the benchmark)")
        return 1
    finally:
        if breakdown is not None:
            breakdown.close()
    markdown, targets = table(runs)
    tables = [markdown]
    if parts:
        tables.append("Where a local worker's superstep goes (the median of the runs):\n\n"
                      + breakdown_table(parts))
        notes.append("The local workers' breakdown: " + WorkerBreakdown.__doc__.split(": ", 1)[1]
                     .replace("\n", "").replace("    ", " ").replace("``", "*"))
    load = f"{os.getloadavg()[0]:.1f}"
    notes.append(f"{args.repeat} runs per host, interleaved; 1-minute load average at the end: "
                 f"{load}. The target column is computed from the best in-process superstep of "
                 "this run.")
    machine = machine_line()
    print()
    for note in [f"Machine: {machine}.", *notes, "Targets:", *targets]:
        print(note)
    if args.write_docs:
        today = datetime.datetime.now(datetime.UTC).date().isoformat()
        section = "\n".join([
            "## Graph supersteps by host",
            "",
            "PageRank's superstep in-process, on two local worker processes and on Spark in "
            "workers mode, measured in the driver from the first superstep's events to the end "
            "of the iterations (see `benchmarks/graph_hosts.py`).",
            "",
            f"Run on {today} with `{command_line()}` "
            f"({time.perf_counter() - started:.0f} s in all).  ",
            f"Machine: {machine}.",
            "",
            *(line for table in tables for line in (table, "")),
            *(f"- {note}" for note in notes),
            "",
            "Targets:",
            "",
            *(f"- {line}" for line in targets),
        ])
        path = update_docs_section("graph-hosts", section)
        print(f"\nUpdated the 'graph-hosts' section of {path}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
