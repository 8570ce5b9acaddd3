"""What iteration snapshots cost: PageRank with ``state.iteration_checkpoint_interval`` 0 (off), 5
and 1, in one run.

Each case runs the library PageRank on the same generated graph (local environment, rocksdb state
in a fresh directory, parallelism 2) and is checked against a plain-Python PageRank loop, which is
also timed as the peer. The table gives the time per superstep, the cost of one iteration snapshot
(the extra time over the run without snapshots, divided by the number of snapshots taken) and the
bytes one snapshot writes (vertex values plus the messages in flight, all tasks). Cases run
interleaved, best of N. ``python benchmarks/iteration_snapshots.py --vertices 5000 --edges 40000
--repeat 1`` is a quick run.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile

from _common import (
    command_line,
    format_seconds,
    interleaved_best_of,
    machine_line,
    print_table,
    update_docs_section,
)
from graph import DAMPING, check_ranks, plain_pagerank, random_edges

from gyreflow.api import Environment
from gyreflow.api.graph import GraphView
from gyreflow.api.graph_algorithms import pagerank
from gyreflow.runtime.dataflow.graph.operator import GraphOperator

INTERVALS = (0, 5, 1)


def snapshots_taken(every: int, iterations: int) -> int:
    """How many iteration snapshots a window of ``iterations + 1`` supersteps takes."""
    if every == 0:
        return 0
    return sum(1 for step in range(2, iterations + 2) if (step - 1) % every == 0)


class SnapshotSizes:
    """Bytes of every iteration snapshot the tasks of this process write (all tasks, per run)."""

    def __init__(self) -> None:
        self.written: list[int] = []
        original = GraphOperator.progress

        def measured(operator, *args, **kwargs):
            blob = original(operator, *args, **kwargs)
            self.written.append(len(blob))
            return blob

        GraphOperator.progress = measured

    def take(self) -> list[int]:
        written, self.written = self.written, []
        return written


def case(vertices: list, edges: list, iterations: int, every: int, sizes: dict,
         measure: SnapshotSizes):
    def run() -> dict:
        directory = tempfile.mkdtemp(prefix="gyreflow-iteration-bench-")
        try:
            env = Environment.local(progress=False, config={
                "state.backend": "rocksdb", "state.path": directory,
                "state.iteration_checkpoint_interval": every, "control.enabled": False})
            pipeline = env.pipeline("iteration-snapshots")

            @pipeline.task
            def ranks(ctx):
                graph = GraphView(ctx.source(vertices), ctx.source(edges), directed=True,
                                  parallelism=2)
                pagerank(graph, DAMPING, iterations).collect("ranks")

            measure.take()
            result = dict(pipeline.execute(fresh=True).output("ranks"))
            sizes[every] = sum(measure.take())  # every task's snapshots of the run
            return result
        finally:
            shutil.rmtree(directory, ignore_errors=True)
    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vertices", type=int, default=20_000)
    parser.add_argument("--edges", type=int, default=200_000)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--write-docs", action="store_true", help="update docs/benchmarks.md")
    args = parser.parse_args(argv)
    vertices = list(range(args.vertices))
    edges = random_edges(args.vertices, args.edges, 20241126)
    expected = plain_pagerank(vertices, edges, DAMPING, args.iterations)
    sizes: dict[int, int] = {}
    measure = SnapshotSizes()
    cases = {"plain loop": lambda: plain_pagerank(vertices, edges, DAMPING, args.iterations)}
    cases.update({f"every {k}" if k else "off": case(vertices, edges, args.iterations, k, sizes, measure)
                  for k in INTERVALS})
    checks = {name: (lambda got, name=name: check_ranks(name, got, expected)) for name in cases}
    timings = interleaved_best_of(cases, args.repeat, check=checks)
    supersteps = args.iterations + 1
    off = timings["off"].best
    rows = []
    for name, timing in timings.items():
        every = None if name == "plain loop" else (0 if name == "off" else int(name.split()[1]))
        taken = snapshots_taken(every, args.iterations) if every else 0
        per_snapshot = (timing.best - off) / taken * 1000 if taken else None
        rows.append([
            "plain-Python loop" if every is None else f"gyreflow, {name}",
            format_seconds(timing.best),
            f"{timing.best / (args.iterations if every is None else supersteps) * 1000:.1f}",
            taken if every is not None else "",
            "" if per_snapshot is None else f"{per_snapshot:.1f}",
            "" if not taken else f"{sizes.get(every, 0) / taken / 1e6:.2f}",
            f"{timing.best / off:.2f}x",
        ])
    columns = ["case", "seconds", "ms per superstep", "snapshots", "ms per snapshot",
               "MB per snapshot", "vs off"]
    table = print_table("PageRank with iteration snapshots", columns, rows)
    if args.write_docs:
        content = "\n\n".join([
            "## Iteration snapshots",
            f"PageRank, {args.vertices:,} vertices, {args.edges:,} edges, {args.iterations} "
            f"iterations ({supersteps} supersteps), parallelism 2, rocksdb state; every result "
            "checked against the plain loop (1e-9). A snapshot holds every task's vertex values "
            "and the messages in flight; the superstep that takes one reports only once it is "
            "durable. Best of "
            f"{args.repeat}; {machine_line()}.",
            table, f"`{command_line()}`"])
        update_docs_section("iteration-snapshots", content)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
