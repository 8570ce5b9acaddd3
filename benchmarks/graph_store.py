"""The changing graph's store: what a window of few changes writes to its checkpoint, per backend.

A random undirected graph (``--vertices``, ``--edges``) arrives in window 1; each later window
changes ``--share`` of its edges (``--removal-share`` of the changes remove present edges, the rest
add new ones) and ``incremental_wcc`` keeps the components. For each state backend the table shows
the checkpoint bytes of window 1 (the whole graph) and, over the later windows, the bytes per change
(every byte a window makes durable, as ``--events`` and the metrics report them: a fold of the
logged changes into a new base counts in the window that runs it), the median window time and the
time of ``scipy.sparse.csgraph`` recomputing the components once on the last version. The output
after the last window is checked against scipy.

    python benchmarks/graph_store.py [--vertices 20000] [--edges 100000] [--windows 40]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time

import numpy as np
import scipy.sparse as sparse
from _common import command_line, machine_line, markdown_table, print_table, update_docs_section
from rich.console import Console
from scipy.sparse import csgraph

from gyreflow.api import Environment, SizeTumblingWindow
from gyreflow.api import graph_algorithms as algorithms
from gyreflow.api.graph import Edge, GraphView, RemoveEdge
from gyreflow.runtime.driver import JobListener

TARGET_BYTES = 200
err = Console(stderr=True)


def make_windows(vertices: int, edges: int, windows: int, share: float, removal_share: float,
                 seed: int) -> tuple[list, set]:
    """``(batches, final edges)``: window 1 the whole graph, then ``share`` changes a window."""
    rng = np.random.default_rng(seed)
    present: dict = {}
    while len(present) < edges:
        a, b = rng.integers(0, vertices, 2 * edges), rng.integers(0, vertices, 2 * edges)
        for x, y in zip(a.tolist(), b.tolist(), strict=True):
            if x != y:
                present.setdefault((min(x, y), max(x, y)), None)
                if len(present) == edges:
                    break
    batches = [[Edge(a, b) for a, b in present]]
    order = list(present)
    changes = max(1, int(edges * share))
    for _ in range(windows - 1):
        batch = []
        for _ in range(changes):
            if rng.random() < removal_share and order:
                at = int(rng.integers(len(order)))
                order[at], order[-1] = order[-1], order[at]
                pair = order.pop()
                del present[pair]
                batch.append(RemoveEdge(*pair))
            else:
                a, b = (int(v) for v in rng.integers(0, vertices, 2))
                pair = (min(a, b), max(a, b))
                if a == b or pair in present:
                    continue
                present[pair] = None
                order.append(pair)
                batch.append(Edge(*pair))
        batches.append(batch)
    return batches, set(present)


class Bytes(JobListener):
    """Checkpoint bytes by window."""

    def __init__(self) -> None:
        self.by_window: dict[int, int] = {}

    def on_checkpoint(self, checkpoint) -> None:
        self.by_window[checkpoint.window] = checkpoint.bytes


def run(batches: list, backend: str, folder: str) -> tuple[dict, list[float], dict]:
    """Checkpoint bytes by window, window times and the components after the last window."""
    config = {"state.backend": backend, "state.path": folder, "control.enabled": False,
              "scheduler.max_flying_windows": 1}
    if backend == "jdbc":
        config["state.url"] = f"sqlite:///{folder}/state.db"
    env = Environment.local(1, progress=False, config=config)
    pipeline = env.pipeline("graph-store")

    @pipeline.task(name="changes")
    def changes(ctx):
        edges = ctx.source(batches, SizeTumblingWindow(1), parallelism=1).flat_map(list)
        algorithms.incremental_wcc(GraphView(None, edges, directed=False)).collect("out")

    listener = Bytes()
    result = pipeline.execute(listener=listener)["changes"]
    folded: dict = {}
    for window in sorted(result.collected["out"]):
        for vertex, value in result.collected["out"][window]:
            if value is None:
                folded.pop(vertex, None)
            else:
                folded[vertex] = value
    return listener.by_window, [m.seconds for m in result.windows], folded


def scipy_components(present: set, vertices: int) -> tuple[dict, float]:
    """Min-id labels of the components of the edges' vertices, and the seconds scipy took."""
    pairs = np.array(sorted(present), dtype=np.int64)
    started = time.perf_counter()  # from the edges as arrays: the matrix, then the components
    matrix = sparse.coo_matrix((np.ones(len(pairs)), (pairs[:, 0], pairs[:, 1])),
                               shape=(vertices, vertices)).tocsr()
    _, labels = csgraph.connected_components(matrix, directed=False)
    seconds = time.perf_counter() - started
    smallest: dict = {}
    for vertex, label in enumerate(labels.tolist()):
        smallest.setdefault(label, vertex)
    return {v: smallest[label] for v, label in enumerate(labels.tolist())}, seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vertices", type=int, default=20_000)
    parser.add_argument("--edges", type=int, default=100_000)
    parser.add_argument("--windows", type=int, default=40)
    parser.add_argument("--share", type=float, default=0.001, help="changes per window / edges")
    parser.add_argument("--removal-share", type=float, default=0.1)
    parser.add_argument("--backends", default="memory,rocksdb,jdbc")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--write-docs", action="store_true", help="update docs/benchmarks.md")
    args = parser.parse_args(argv)
    batches, present = make_windows(args.vertices, args.edges, args.windows, args.share,
                                    args.removal_share, args.seed)
    changes = sum(len(b) for b in batches[1:])
    err.print(f"{machine_line()}; {args.edges:,} edges, {changes // (len(batches) - 1):,} changes "
              "per window")
    seen = {v for batch in batches for r in batch if isinstance(r, Edge) for v in (r.src, r.dst)}
    want, scipy_seconds = scipy_components(present, args.vertices)
    want = {v: label for v, label in want.items() if v in seen}
    rows = []
    for backend in args.backends.split(","):
        with tempfile.TemporaryDirectory() as folder:
            by_window, seconds, folded = run(batches, backend, folder)
        if folded != want:
            raise AssertionError(f"{backend}: the components after the last window differ "
                                 "from scipy")
        later = sum(size for window, size in by_window.items() if window > 1)
        per_change = later / changes
        rows.append([backend, f"{by_window.get(1, 0):,}", f"{later // (len(batches) - 1):,}",
                     f"{per_change:,.0f}", f"{1000 * statistics.median(seconds[1:]):.1f} ms",
                     f"{1000 * scipy_seconds:.1f} ms"])
    headers = ["backend", "window 1 bytes (whole graph)", "bytes per later window",
               "bytes per change", "window time (median)", "scipy recompute once"]
    print_table(f"Changing graph store: {args.edges:,} edges, {args.share:.1%} changes a window "
                f"(target: at most {TARGET_BYTES} bytes per change)", headers, rows)
    if args.write_docs:
        body = "\n".join([
            "## Changing graph store", "",
            "What a window of few changes writes to its checkpoint (`benchmarks/graph_store.py`): "
            "window 1 writes the whole graph, later windows the changes they made; a fold of a "
            "key group's changes into a new base counts in the window that runs it. Window "
            "times were taken on a loaded machine.", "",
            f"`{command_line()}` — {machine_line()}", "", markdown_table(headers, rows)])
        update_docs_section("graph-store", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
