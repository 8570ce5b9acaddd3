"""The changing graph's store: what a window of few changes writes to its checkpoint, per backend.

A random undirected graph (``--vertices``, ``--edges``; or several, ``--sizes``) arrives in window 1;
each later window makes ``--changes`` changes (or ``--share`` of its edges; ``--removal-share`` of
them remove present edges, the rest add new ones) and ``incremental_wcc`` keeps the components.
For each state backend (memory, rocksdb, sqlite, postgresql) the table shows the checkpoint bytes of
window 1 (the whole graph) and, over the later windows, the bytes per change (every byte a window
makes durable, as ``--events`` and the metrics report them: a fold of a key group's logged changes
into a new base counts in the window that runs it), the largest later window, the median window
time and the time of ``scipy.sparse.csgraph`` recomputing the components once on the last version.
The first backend runs ``--windows`` windows: with about 9,900, every key group folds at least
once (by count, at the latest when level 2 is full: 9,801 windows), so its bytes per change are
the amortised cost; the
other backends run ``--backend-windows`` and must write the same bytes, window by window. Every
run's output after its last window is checked against scipy.

    python benchmarks/graph_store.py [--sizes 200000x1000000,1000000x5000000] [--changes 1000]
        [--windows 9900] [--backend-windows 40] [--backends memory,rocksdb,sqlite,postgresql]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import statistics
import sys
import tempfile
import time

import numpy as np
import scipy.sparse as sparse
from _common import command_line, machine_line, markdown_table, print_table, update_docs_section
from graph_changes import Upkeep
from rich.console import Console
from scipy.sparse import csgraph

from gyreflow.api import Environment, SizeTumblingWindow
from gyreflow.api import graph_algorithms as algorithms
from gyreflow.api.connectors.sources import GeneratorSource
from gyreflow.api.graph import Edge, GraphView, RemoveEdge
from gyreflow.runtime.driver import JobListener

TARGET_BYTES = 200
err = Console(stderr=True)


def make_windows(vertices: int, edges: int, windows: int, changes: int, removal_share: float,
                 seed: int) -> tuple[tuple, list, set]:
    """``(window 1's edges as arrays, later windows' changes, final edges)``: window 1 the whole
    graph, then ``changes`` changes a window, each window's as an array of rows ``(removal, a,
    b)`` (``change_records`` makes the records: ten thousand windows of records held would make
    every garbage collection walk them)."""
    rng = np.random.default_rng(seed)
    present: dict = {}
    while len(present) < edges:
        a, b = rng.integers(0, vertices, 2 * edges), rng.integers(0, vertices, 2 * edges)
        for x, y in zip(a.tolist(), b.tolist(), strict=True):
            if x != y:
                present.setdefault((min(x, y), max(x, y)), None)
                if len(present) == edges:
                    break
    first = np.array(list(present), dtype=np.int64).reshape(-1, 2)
    order = list(present)
    later = []
    for _ in range(windows - 1):
        batch = []
        for _ in range(changes):
            if rng.random() < removal_share and order:
                at = int(rng.integers(len(order)))
                order[at], order[-1] = order[-1], order[at]
                pair = order.pop()
                del present[pair]
                batch.append((1, *pair))
            else:
                a, b = (int(v) for v in rng.integers(0, vertices, 2))
                pair = (min(a, b), max(a, b))
                if a == b or pair in present:
                    continue
                present[pair] = None
                order.append(pair)
                batch.append((0, *pair))
        later.append(np.array(batch, dtype=np.int64).reshape(-1, 3))
    return (first[:, 0], first[:, 1]), later, set(present)


def batches_of(first: tuple, later: list):
    """A factory of the windows' records: window 1's ``Edge`` records are made as the source reads
    them, not kept (millions of records held would make every garbage collection walk them)."""
    def windows():
        yield [Edge(a, b) for a, b in zip(first[0].tolist(), first[1].tolist(), strict=True)]
        for rows in later:
            yield change_records(rows)
    return windows


def change_records(rows: np.ndarray) -> list:
    """A window's ``Edge`` and ``RemoveEdge`` records from its rows ``(removal, a, b)``."""
    return [RemoveEdge(a, b) if removal else Edge(a, b) for removal, a, b in rows.tolist()]


class Bytes(JobListener):
    """Checkpoint bytes by window."""

    def __init__(self) -> None:
        self.by_window: dict[int, int] = {}

    def on_checkpoint(self, checkpoint) -> None:
        self.by_window[checkpoint.window] = checkpoint.bytes


def run(batches, backend: str, folder: str, url: str = "",
        program: str = "wcc") -> tuple[dict, list[float], dict]:
    """Checkpoint bytes by window, window times and the components after the last window
    (``program`` "upkeep": the job keeps the graph and computes nothing; each vertex's value is
    0)."""
    config = {"state.backend": "jdbc" if backend in ("sqlite", "postgresql") else backend,
              "state.path": folder, "control.enabled": False, "scheduler.max_flying_windows": 1}
    if backend == "sqlite":
        config["state.url"] = f"sqlite:///{folder}/state.db"
    elif backend == "postgresql":
        config["state.url"] = url
        config["state.secret"] = "graph-store-benchmark"  # a shared database needs a secret
    env = Environment.local(1, progress=False, config=config)
    pipeline = env.pipeline("graph-store")

    @pipeline.task(name="changes")
    def changes(ctx):
        edges = ctx.source(GeneratorSource(batches), SizeTumblingWindow(1),
                           parallelism=1).flat_map(list)
        graph = GraphView(None, edges, directed=False)
        (graph.incremental_compute(Upkeep()) if program == "upkeep"
         else algorithms.incremental_wcc(graph)).collect("out")

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


def postgres_database(server_url: str):
    """A database of its own on the server at ``server_url``, and a function dropping it."""
    import uuid

    import sqlalchemy as sa
    from sqlalchemy.engine import make_url

    server = make_url(server_url)
    name = f"gyreflow_store_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(server.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))

    def drop() -> None:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()

    return server.set(database=name).render_as_string(hide_password=False), drop


def scipy_components(first: tuple, later: list, vertices: int) -> tuple[dict, float]:
    """Min-id labels of the components of the vertices seen, after window 1's edges and the
    ``later`` windows' changes, and the seconds scipy took."""
    gc.disable()  # millions of edge tuples: each collection would walk them all again
    try:
        return _scipy_components(first, later, vertices)
    finally:
        gc.enable()


def _scipy_components(first: tuple, later: list, vertices: int) -> tuple[dict, float]:
    present = set(zip(first[0].tolist(), first[1].tolist(), strict=True))
    seen = set(first[0].tolist()) | set(first[1].tolist())
    for rows in later:
        for removal, a, b in rows.tolist():
            if removal:
                present.discard((a, b))
            else:
                present.add((a, b))
                seen.update((a, b))
    pairs = np.array(sorted(present), dtype=np.int64)
    started = time.perf_counter()  # from the edges as arrays: the matrix, then the components
    matrix = sparse.coo_matrix((np.ones(len(pairs)), (pairs[:, 0], pairs[:, 1])),
                               shape=(vertices, vertices)).tocsr()
    _, labels = csgraph.connected_components(matrix, directed=False)
    seconds = time.perf_counter() - started
    smallest = np.full(labels.max() + 1, vertices, dtype=np.int64)
    np.minimum.at(smallest, labels, np.arange(vertices))
    found = smallest[labels].tolist()
    return {v: found[v] for v in seen}, seconds


def measure(vertices: int, edges: int, args) -> list[list[str]]:
    """The table's rows of one graph size, a row per backend: the first backend runs
    ``--windows`` windows (long enough for every key group to fold, so that its bytes per change
    count the folds), the others ``--backend-windows``, whose bytes must be the first's window
    by window."""
    first, later, _ = make_windows(vertices, edges, args.windows,
                                   args.changes or max(1, int(edges * args.share)),
                                   args.removal_share, args.seed)
    err.print(f"{machine_line()}; {edges:,} edges, {sum(map(len, later)) // len(later):,} "
              "changes a window")
    rows, reference = [], None
    for backend in args.backends.split(","):
        windows = args.windows if reference is None else min(args.windows, args.backend_windows)
        here = later[:windows - 1]
        url, drop = ("", None)
        if backend == "postgresql":
            url, drop = postgres_database(args.postgres_url)
        try:
            with tempfile.TemporaryDirectory() as folder:
                by_window, seconds, folded = run(batches_of(first, here), backend, folder, url,
                                                 args.program)
        finally:
            if drop is not None:
                drop()
        want, scipy_seconds = scipy_components(first, here, vertices)
        if args.program == "upkeep":  # nothing computed: the vertices are the check
            want = dict.fromkeys(want, 0)
        if folded != want:
            raise AssertionError(f"{backend}: the components after window {windows} differ "
                                 "from scipy")
        del folded, want
        if reference is None:
            reference = by_window
        elif any(by_window[w] != reference[w] for w in by_window):
            raise AssertionError(f"{backend}: its checkpoints' bytes differ from "
                                 f"{args.backends.split(',')[0]}'s")
        written = [size for window, size in sorted(by_window.items()) if window > 1]
        per_change = sum(written) / sum(map(len, here))
        rows.append([f"{edges:,}", args.program, backend, f"{windows:,}", f"{by_window.get(1, 0):,}",
                     f"{sum(written) // len(written):,}", f"{max(written):,}",
                     f"{per_change:,.0f}",
                     (f"the same as {args.backends.split(',')[0]}'s" if by_window is not reference
                      else "met" if per_change <= TARGET_BYTES else "NOT MET"),
                     f"{1000 * statistics.median(seconds[1:]):.1f} ms",
                     f"{1000 * scipy_seconds:.1f} ms"])
        err.print(f"  {backend}: {rows[-1]}")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vertices", type=int, default=20_000)
    parser.add_argument("--edges", type=int, default=100_000)
    parser.add_argument("--sizes", default="",
                        help="graph sizes VERTICESxEDGES, comma-separated (instead of --vertices "
                        "and --edges), e.g. 200000x1000000,1000000x5000000")
    parser.add_argument("--windows", type=int, default=40)
    parser.add_argument("--backend-windows", type=int, default=40,
                        help="windows of the backends after the first")
    parser.add_argument("--changes", type=int, default=0,
                        help="changes a window (0: --share of the edges)")
    parser.add_argument("--share", type=float, default=0.001, help="changes per window / edges")
    parser.add_argument("--removal-share", type=float, default=0.1)
    parser.add_argument("--backends", default="memory,rocksdb,sqlite,postgresql",
                        help="of memory, rocksdb, sqlite, postgresql")
    parser.add_argument("--postgres-url", default=os.environ.get("GYREFLOW_TEST_POSTGRES_URL"),
                        help="a PostgreSQL server (a database of its own is made on it)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--program", choices=("wcc", "upkeep"), default="wcc",
                        help="incremental WCC, or a program that computes nothing (the graph's "
                        "store alone)")
    parser.add_argument("--save", help="write the table to this JSON file")
    parser.add_argument("--docs-from", help="write the docs section from --save files "
                        "(comma-separated) and stop")
    parser.add_argument("--note", default="", help="a paragraph under the table (--docs-from)")
    parser.add_argument("--write-docs", action="store_true", help="update docs/benchmarks.md")
    args = parser.parse_args(argv)
    if args.docs_from:  # several files: their rows in one table
        saved = []
        for path in args.docs_from.split(","):
            with open(path, encoding="utf-8") as file:
                saved.append(json.load(file))
        write_docs(saved[0]["headers"], [row for one in saved for row in one["rows"]],
                   [one["command"] for one in saved], saved[0]["machine"], args.note)
        return 0
    unknown = set(args.backends.split(",")) - {"memory", "rocksdb", "sqlite", "postgresql"}
    if unknown:
        parser.error(f"unknown backends {sorted(unknown)}")
    if "postgresql" in args.backends.split(",") and not args.postgres_url:
        parser.error("postgresql needs --postgres-url or GYREFLOW_TEST_POSTGRES_URL")
    sizes = ([tuple(map(int, size.split("x"))) for size in args.sizes.split(",")] if args.sizes
             else [(args.vertices, args.edges)])
    rows = [row for vertices, edges in sizes for row in measure(vertices, edges, args)]
    headers = ["edges", "program", "backend", "windows", "window 1 bytes (whole graph)",
               "bytes per later window",
               "largest later window bytes", "bytes per change", f"target <= {TARGET_BYTES}",
               "window time (median)", "scipy recompute once"]
    changes = args.changes or f"{args.share:.1%} of the edges"
    print_table(f"Changing graph store: {changes} changes a window, windows 2-{args.windows}",
                headers, rows)
    met = all(row[8] != "NOT MET" for row in rows)
    if args.save:
        with open(args.save, "w", encoding="utf-8") as file:
            json.dump({"headers": headers, "rows": rows,
                       "command": re.sub(r" --save \S+", "", command_line()),
                       "machine": machine_line(), "met": met}, file)
    if args.write_docs:
        write_docs(headers, rows, [command_line()], machine_line())
    return 0 if met else 1


def write_docs(headers: list, rows: list, commands: list[str], machine: str,
               note: str = "") -> None:
    """The "graph-store" section of docs/benchmarks.md (``note``: a paragraph under the
    table)."""
    update_docs_section("graph-store", "\n".join([
        "## Changing graph store", "",
        "What a window of few changes writes to its checkpoint (`benchmarks/graph_store.py`): "
        "window 1 writes the whole graph, later windows the changes they made; a fold of a key "
        "group's changes into a new base counts in the window that runs it. Bytes per change are "
        "those of windows 2 and later over their changes (the first backend's run is long enough "
        "for every key group to fold: amortised); the target is at most "
        f"{TARGET_BYTES}. Window times were taken on a loaded machine.", "",
        "; ".join(f"`{command}`" for command in commands) + f" — {machine}", "",
        markdown_table(headers, rows),
        *(["", note] if note else [])]))


if __name__ == "__main__":
    sys.exit(main())
