"""Soak: a stream job of many small windows on every state backend; cost per window must stay flat.

Each backend runs the same keyed word count (two lines per window, a bounded vocabulary, every window
snapshotted and committed) in a process of its own, for ``--windows`` windows (100,000 by default).
The table gives, per backend: the mean wall-clock time per window (from one window's end to the
next's) over the first and over the last 10% of the run and their ratio, the process's memory after
window 1,000 and at the end, its peak, and the size of the job's state after window 1,000 and at the
end. The targets (checked, and printed as pass/fail):
last/first at most 1.2, memory growth after window 1,000 at most 16 MB, final state at most 2x its
size at window 1,000. The reference row is a plain-Python loop doing the same counting per window.

With ``--job graph`` the job is a changing graph instead: each window adds two edges between 300
vertices and removes the two added ``KEPT_EDGE_WINDOWS`` windows before (so the graph's size is
steady), keeps ``RETAINED_VERSIONS`` past versions (``retained_versions``), computes the
components of the latest completed version (``snapshot()``) and answers a 2-hop request on the version
two windows back. Versions, their history and the snapshots must cost the same per window at
the end of the run as after window 1,000; the columns and targets are the word count's.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from _common import command_line, machine_line, print_table, update_docs_section

ROOT = Path(__file__).resolve().parent.parent
BACKENDS = ("memory", "rocksdb", "sqlite", "postgresql")
LINES_PER_WINDOW = 2
VOCABULARY = 500
CHECKPOINT = 1_000  # the window after which memory and state size are read the first time
GRAPH_VERTICES = 300
KEPT_EDGE_WINDOWS = 200  # an edge lives this many windows: 400 edges in the steady graph
RETAINED_VERSIONS = 3
TIME_RATIO_TARGET = 1.2
MEMORY_GROWTH_TARGET_MB = 16
STATE_GROWTH_TARGET = 2.0


def lines(windows: int) -> list[str]:
    """Deterministic input: ``LINES_PER_WINDOW`` lines of three words per window."""
    return [f"w{(i * 7) % VOCABULARY} w{(i * 13 + 1) % VOCABULARY} w{(i * 31 + 2) % VOCABULARY}"
            for i in range(windows * LINES_PER_WINDOW)]


def graph_windows(windows: int) -> tuple[list[list], list[list]]:
    """Deterministic changes and requests: per window two new edges, the removal of the two added
    ``KEPT_EDGE_WINDOWS`` windows before, and one request ``(key, start, version)``."""
    from gyreflow.api.graph import RemoveEdge

    def edge(i: int) -> tuple[int, int]:
        return (i * 7) % GRAPH_VERTICES, (i * 37 + 11) % GRAPH_VERTICES

    changes, requests = [], []
    for w in range(windows):
        here = [edge(2 * w), edge(2 * w + 1)]
        if w >= KEPT_EDGE_WINDOWS:
            old = 2 * (w - KEPT_EDGE_WINDOWS)
            here = [RemoveEdge(*edge(old)), RemoveEdge(*edge(old + 1)), *here]
        changes.append(here)
        requests.append([(f"r{w}", (w * 11) % GRAPH_VERTICES, max(0, w - 1))])  # 2 windows back
    return changes, requests


def memory_kb(field: str) -> int:
    """``VmRSS`` or ``VmHWM`` of this process, in KiB."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def directory_bytes(path: str) -> int:
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(folder, name))
            except OSError:
                pass
    return total


# The child: one backend, one run ---------------------------------------------------------------


def child(backend: str, windows: int, state_dir: str, url: str, job: str = "words") -> dict:
    from gyreflow.api import Environment, SizeTumblingWindow
    from gyreflow.api.connectors.sinks import Sink, SinkWriter
    from gyreflow.api.graph import GraphView
    from gyreflow.api.graph_algorithms import ConnectedComponents, KHopNeighbourhood
    from gyreflow.runtime.driver import JobListener

    class CountingWriter(SinkWriter):
        def __init__(self) -> None:
            self.records = 0

        def write(self, window: int, records: list) -> None:
            self.records += len(records)

    class CountingSink(Sink):
        def create_writer(self, task_index: int, parallelism: int) -> SinkWriter:
            return CountingWriter()

    config = {"environment.type": "local", "progress.enabled": False, "state.path": state_dir,
              "state.backend": "jdbc" if backend in ("sqlite", "postgresql") else backend}
    if backend == "postgresql":
        config["state.url"] = url
        config["state.secret"] = "soak-secret"  # a shared database authenticates with a secret
    size = state_size(backend, state_dir, url)
    first_from, last_from = windows // 10, windows - windows // 10

    class Soak(JobListener):
        """Sums of window times and of wall-clock time between windows over the first and the
        last 10% of the run (constant space: the benchmark must not grow either)."""

        def __init__(self) -> None:
            self.sums = {"first": [0.0, 0.0, 0], "last": [0.0, 0.0, 0]}
            self.previous = time.perf_counter()
            self.at_checkpoint: dict = {}

        def on_window(self, metrics) -> None:
            now = time.perf_counter()
            window = metrics.window
            part = "first" if window <= first_from else "last" if window > last_from else None
            if part is not None:
                sums = self.sums[part]
                sums[0] += now - self.previous
                sums[1] += metrics.seconds
                sums[2] += 1
            self.previous = now
            if window == CHECKPOINT:
                self.at_checkpoint = {"rss_kb": memory_kb("VmRSS"), "state_bytes": size()}

    listener = Soak()
    env = Environment.from_config(None, config)
    pipeline = env.pipeline("soak")

    @pipeline.task(name="count")
    def count(ctx):
        if job == "graph":
            changes, requests = graph_windows(windows)
            edges = ctx.source(changes, SizeTumblingWindow(1), parallelism=1).flat_map(list)
            asked = ctx.source(requests, SizeTumblingWindow(1), parallelism=1).flat_map(list)
            graph = GraphView(None, edges, directed=False, parallelism=2,
                              retained_versions=RETAINED_VERSIONS)
            graph.snapshot().compute(ConnectedComponents(directed=False)).sink(CountingSink())
            (graph.traversal(asked, KHopNeighbourhood(2), version=lambda request: request[2])
             .sink(CountingSink()))
            return
        (ctx.source(lines(windows), SizeTumblingWindow(LINES_PER_WINDOW)).with_name("lines")
         .flat_map(str.split).map(lambda word: (word, 1))
         .key_by(lambda pair: pair[0]).reduce(lambda a, b: (a[0], a[1] + b[1]))
         .sink(CountingSink()))

    started = time.perf_counter()
    result = pipeline.execute(listener=listener)["count"]
    return {
        "backend": backend, "windows": result.window_count, "seconds": time.perf_counter() - started,
        "first_ms": 1000 * listener.sums["first"][0] / listener.sums["first"][2],
        "last_ms": 1000 * listener.sums["last"][0] / listener.sums["last"][2],
        "first_window_ms": 1000 * listener.sums["first"][1] / listener.sums["first"][2],
        "last_window_ms": 1000 * listener.sums["last"][1] / listener.sums["last"][2],
        "rss_checkpoint_kb": listener.at_checkpoint["rss_kb"], "rss_end_kb": memory_kb("VmRSS"),
        "peak_kb": memory_kb("VmHWM"), "state_checkpoint": listener.at_checkpoint["state_bytes"],
        "state_end": size(),
    }


def state_size(backend: str, state_dir: str, url: str):
    """A function giving the bytes the job's state takes now."""
    if backend == "postgresql":
        import sqlalchemy as sa

        engine = sa.create_engine(url)

        def size() -> int:
            with engine.connect() as conn:
                return int(conn.execute(sa.text(
                    "select coalesce(sum(pg_total_relation_size(c.oid)), 0) from pg_class c "
                    "where c.relname like 'gyreflow_%' and c.relkind = 'r'")).scalar())
        return size
    return lambda: directory_bytes(state_dir)


def _find(parent: dict, v):
    while parent.setdefault(v, v) != v:
        parent[v] = parent[parent[v]]
        v = parent[v]
    return v


def plain_graph_loop(windows: int) -> dict:
    """The graph job's reference: the same changes, components by union-find and a 2-hop search on
    the version two windows back, per window, in plain Python (versions as whole copies)."""
    import collections

    changes, requests = graph_windows(windows)
    edges: collections.Counter = collections.Counter()
    versions: collections.deque = collections.deque(maxlen=RETAINED_VERSIONS + 1)
    times = []
    for here, asked in zip(changes, requests, strict=True):
        started = time.perf_counter()
        for change in here:
            if isinstance(change, tuple):
                edges[tuple(sorted(change))] += 1
            else:
                edges.pop(tuple(sorted((change.src, change.dst))), None)
        versions.append(dict(edges))
        parent: dict = {}
        for a, b in versions[-2] if len(versions) > 1 else {}:
            parent[_find(parent, a)] = _find(parent, b)
        _, start, _ = asked[0]
        adjacency = collections.defaultdict(set)
        for a, b in versions[0]:
            adjacency[a].add(b)
            adjacency[b].add(a)
        frontier = {start}
        for _ in range(2):
            frontier = {n for v in frontier for n in adjacency[v]}
        times.append(time.perf_counter() - started)
    tenth = max(1, windows // 10)
    return {"backend": "plain loop", "windows": windows, "seconds": sum(times),
            "first_ms": 1000 * statistics.fmean(times[:tenth]),
            "last_ms": 1000 * statistics.fmean(times[-tenth:])}


def plain_loop(windows: int) -> dict:
    """The reference: the same counting per window in a plain loop (no state kept elsewhere)."""
    data = lines(windows)
    counts: Counter = Counter()
    times = []
    for w in range(windows):
        started = time.perf_counter()
        changed = Counter()
        for line in data[w * LINES_PER_WINDOW:(w + 1) * LINES_PER_WINDOW]:
            for word in line.split():
                counts[word] += 1
                changed[word] = counts[word]
        times.append(time.perf_counter() - started)
    tenth = max(1, windows // 10)
    return {"backend": "plain loop", "windows": windows, "seconds": sum(times),
            "first_ms": 1000 * statistics.fmean(times[:tenth]),
            "last_ms": 1000 * statistics.fmean(times[-tenth:])}


# The parent: one child per backend, then the table ---------------------------------------------


def run_child(backend: str, windows: int, postgres_url: str | None, job: str = "words") -> dict:
    work = tempfile.mkdtemp(prefix=f"gyreflow-soak-{backend}-")
    try:
        url = ""
        if backend == "postgresql":
            url = fresh_database(postgres_url)
        command = [sys.executable, __file__, "--child", backend, "--windows", str(windows),
                   "--state", os.path.join(work, "state"), "--url", url, "--job", job]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            msg = f"{backend}: the soak run failed (exit {done.returncode}):\n{done.stderr[-3000:]}"
            raise SystemExit(msg)
        return json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(work, ignore_errors=True)


def fresh_database(server_url: str) -> str:
    import uuid

    import sqlalchemy as sa
    from sqlalchemy.engine import make_url

    server = make_url(server_url)
    name = f"gyreflow_soak_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(server.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return server.set(database=name).render_as_string(hide_password=False)


def start_postgres() -> tuple[str, str]:
    """A throwaway server (scripts/postgres.sh): its URL and folder."""
    import socket

    folder = tempfile.mkdtemp(prefix="gyreflow-soak-pg-", dir="/tmp")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = subprocess.run(["bash", str(ROOT / "scripts" / "postgres.sh"), "start", folder, str(port)],
                          capture_output=True, text=True, check=True)
    return done.stdout.strip().split("=", 1)[1], folder


def table(results: list[dict]) -> tuple[list[str], list[list[str]]]:
    columns = ["backend", "windows", "first 10% ms/window", "last 10% ms/window", "last/first",
               f"memory at {CHECKPOINT:,} MB", "memory at end MB", "peak MB",
               f"state at {CHECKPOINT:,} MB", "state at end MB", "targets"]
    rows = []
    for r in results:
        ratio = r["last_ms"] / r["first_ms"] if r["first_ms"] else float("nan")
        if "rss_end_kb" not in r:
            rows.append([r["backend"], f"{r['windows']:,}", f"{r['first_ms']:.3f}",
                         f"{r['last_ms']:.3f}", f"{ratio:.2f}", "", "", "", "", "", ""])
            continue
        growth_mb = (r["rss_end_kb"] - r["rss_checkpoint_kb"]) / 1024
        state_ratio = r["state_end"] / max(1, r["state_checkpoint"])
        ok = (ratio <= TIME_RATIO_TARGET and growth_mb <= MEMORY_GROWTH_TARGET_MB
              and state_ratio <= STATE_GROWTH_TARGET)
        rows.append([
            r["backend"], f"{r['windows']:,}", f"{r['first_ms']:.3f}", f"{r['last_ms']:.3f}",
            f"{ratio:.2f}", f"{r['rss_checkpoint_kb'] / 1024:.1f}", f"{r['rss_end_kb'] / 1024:.1f}",
            f"{r['peak_kb'] / 1024:.1f}", f"{r['state_checkpoint'] / 2**20:.2f}",
            f"{r['state_end'] / 2**20:.2f}", "pass" if ok else "FAIL",
        ])
    return columns, rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=100_000)
    parser.add_argument("--backends", default=",".join(BACKENDS),
                        help=f"comma-separated, of {', '.join(BACKENDS)}")
    parser.add_argument("--postgres-url", default=os.environ.get("GYREFLOW_TEST_POSTGRES_URL"),
                        help="a PostgreSQL server (default: start a throwaway one)")
    parser.add_argument("--job", choices=("words", "graph"), default="words",
                        help="the keyed word count, or a changing graph with retained versions")
    parser.add_argument("--write-docs", action="store_true", help="refresh docs/benchmarks.md")
    parser.add_argument("--save", help="write the results to this JSON file")
    parser.add_argument("--docs-from", help="write the docs section from --save files "
                        "(comma-separated) and stop")
    parser.add_argument("--note", default="", help="a paragraph under the table (--docs-from)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--state", help=argparse.SUPPRESS)
    parser.add_argument("--url", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.docs_from:
        return docs_from(args.docs_from.split(","), args.note)
    if args.child:
        print(json.dumps(child(args.child, args.windows, args.state, args.url, args.job)))
        return 0
    if args.windows < 10 * CHECKPOINT // 5:
        parser.error(f"--windows must be at least {10 * CHECKPOINT // 5:,} (memory is read at "
                     f"window {CHECKPOINT:,})")
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = sorted(set(backends) - set(BACKENDS))
    if unknown:
        parser.error(f"unknown backends {unknown}; valid choices: {', '.join(BACKENDS)}")
    postgres_folder = None
    if "postgresql" in backends and not args.postgres_url:
        args.postgres_url, postgres_folder = start_postgres()
    try:
        results = [plain_graph_loop(args.windows) if args.job == "graph" else plain_loop(args.windows)]
        for backend in backends:
            results.append(run_child(backend, args.windows, args.postgres_url, args.job))
            # each backend's figures as soon as they are known (a long run cut short keeps them)
            print(f"{backend}: {results[-1]['seconds']:.0f} s {json.dumps(results[-1])}",
                  file=sys.stderr, flush=True)
    finally:
        if postgres_folder is not None:
            subprocess.run(["bash", str(ROOT / "scripts" / "postgres.sh"), "stop", postgres_folder],
                           check=False, capture_output=True)
    if args.save:
        with open(args.save, "w", encoding="utf-8") as file:
            json.dump({"results": results, "windows": args.windows, "job": args.job,
                       "command": re.sub(r" --save \S+", "", command_line()),
                       "machine": machine_line()}, file)
    return report(results, args.windows, args.job, [command_line()], machine_line(),
                  args.write_docs)


def report(results: list[dict], windows: int, job: str, commands: list[str], machine: str,
           write_docs: bool, note: str = "") -> int:
    """Print the table (and write the docs section); 0 if every backend met the targets."""
    columns, rows = table(results)
    what = (f"a changing graph keeping {RETAINED_VERSIONS} versions" if job == "graph"
            else f"{LINES_PER_WINDOW} lines")
    markdown = print_table(f"Soak: {windows:,} windows of {what}", columns, rows)
    if write_docs:
        section, heading = (("soak-graph", "## Soak: a changing graph with retained versions")
                            if job == "graph" else ("soak", "## Soak: constant cost per window"))
        paragraphs = __doc__.split("\n", 2)[2].strip().split("\n\n")
        update_docs_section(section, "\n\n".join([
            heading,
            paragraphs[-1] if job == "graph" else paragraphs[0],
            machine, "; ".join(f"`{command}`" for command in commands), markdown,
            *([note] if note else [])]))
    return 0 if all(row[-1] in ("pass", "") for row in rows) else 1


def docs_from(paths: list[str], note: str) -> int:
    """The table and docs section of several ``--save`` files (runs of other backends, e.g. at
    the same time): the first file's reference loop, then every file's backends."""
    saved = []
    for path in paths:
        with open(path, encoding="utf-8") as file:
            saved.append(json.load(file))
    results = [saved[0]["results"][0]] + [r for one in saved for r in one["results"][1:]]
    return report(results, saved[0]["windows"], saved[0]["job"],
                  [one["command"] for one in saved], saved[0]["machine"], True, note)


if __name__ == "__main__":
    sys.exit(main())
