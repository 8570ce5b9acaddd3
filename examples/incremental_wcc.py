"""Incremental connected components over a stream of edges, window by window.

Edges arrive as ``src dst`` lines, cut into windows of ``--window`` lines; a line ``- src dst`` removes
the edges between ``src`` and ``dst``. The components are updated from the vertices the new edges
touched instead of being recomputed (a removal restarts only the component it was in): each window
writes one JSON-lines file with a line ``{"window": w, "vertex": v,
"component": c}`` for every vertex whose component label (the smallest vertex id in its component)
changed in window ``w``, new vertices included. Reading the files in order and keeping each vertex's
last label gives the components of the graph so far.

Without ``--edges`` the script uses ``examples/data/graph/stream.e``, generating it first (fixed seed)
when missing::

    gyreflow run examples/incremental_wcc.py -- --output out/wcc --window 500
"""

from __future__ import annotations

import argparse
import json
import os
import random
from pathlib import Path

from gyreflow.api import Environment, FileSink, FileSource, SizeTumblingWindow
from gyreflow.api.graph import GraphView, RemoveEdge
from gyreflow.api.graph_algorithms import incremental_wcc

DATA = Path(__file__).parent / "data" / "graph"
DEFAULT_EDGES = DATA / "stream.e"


def generate(edges: str | os.PathLike, n: int = 6_000, m: int = 6_000, seed: int = 5) -> None:
    """Write ``m`` random edges between ``n`` vertices: many small components that merge as the
    stream goes on."""
    rng = random.Random(seed)
    lines = []
    for _ in range(m):
        src, dst = rng.randrange(n), rng.randrange(n)
        lines.append(f"{src} {dst}\n")
    path = Path(edges)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    partial.write_text("".join(lines), encoding="utf-8")
    os.replace(partial, path)  # never a half-written input, even with concurrent runs


def parse_edge(line: str) -> list:
    """``src dst`` -> ``[(src, dst)]``, ``- src dst`` -> ``[RemoveEdge(src, dst)]`` (``[]`` for a
    blank line)."""
    columns = line.split()
    if not columns:
        return []
    if columns[0] == "-":
        return [RemoveEdge(int(columns[1]), int(columns[2]))]
    return [(int(columns[0]), int(columns[1]))]


def format_label(window: int, record: tuple[int, int]) -> str:
    """One output line: the window, a vertex whose component changed in it, and its new label."""
    vertex, component = record
    return json.dumps({"window": window, "vertex": vertex, "component": component})


def build(pipeline, edges_path: str, window: int, output: str, parallelism: int | None = None):
    """Add the incremental components task to ``pipeline``."""

    @pipeline.task(name="incremental_wcc")
    def components(ctx):
        # One source task: window w is the w-th ``window`` lines of the file, whatever the
        # configured parallelism (each source task would cut its own byte range into windows).
        edges = (ctx.source(FileSource(edges_path), SizeTumblingWindow(window), name="edges",
                            parallelism=1)
                 .flat_map(parse_edge))
        graph = GraphView(None, edges, directed=False, parallelism=parallelism, name="graph")
        incremental_wcc(graph).sink(FileSink(output, format=format_label)).with_name("files")

    return pipeline


def main(argv: list[str] | None = None):
    """Parse arguments, generate the default edges if needed and run."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--edges", default=None, help=f"edge file, src dst (default {DEFAULT_EDGES})")
    parser.add_argument("--window", type=int, default=500, help="edges per window")
    parser.add_argument("--output", default="out/incremental-wcc", help="directory for window files")
    parser.add_argument("--parallelism", type=int, default=None, help="tasks for the graph")
    parser.add_argument("--config", default=None, help="TOML config file")
    args = parser.parse_args(argv)
    edges = args.edges
    if edges is None:
        if not DEFAULT_EDGES.is_file():
            generate(DEFAULT_EDGES)
        edges = str(DEFAULT_EDGES)
    env = Environment.from_config(args.config)
    pipeline = build(env.pipeline("incremental-wcc"), edges, args.window, args.output,
                     args.parallelism)
    return pipeline.execute()


if __name__ == "__main__":
    main()
