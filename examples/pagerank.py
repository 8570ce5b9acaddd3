"""PageRank on a graph stored in files: one ``vertex rank`` line per vertex.

The input is the LDBC Graphalytics text format: a vertex file with one integer id per line and an
edge file with ``src dst [weight]`` per line (the weight is ignored). The ranks follow the Graphalytics
definition (a fixed number of iterations; the rank of vertices without out-edges is spread over all
vertices). The result is written by a ``FileSink``: one file, ``window-000001.txt``, in ``--output``.

Without ``--vertices``/``--edges`` the script uses ``examples/data/graph/web.v`` and ``web.e``,
generating them first (fixed seed, so always the same graph) when missing::

    gyreflow run examples/pagerank.py -- --output out/pagerank --iterations 20
"""

from __future__ import annotations

import argparse
import os
import random
from pathlib import Path

from gyreflow.api import Environment, FileSink, FileSource
from gyreflow.api.graph import GraphView
from gyreflow.api.graph_algorithms import pagerank

DATA = Path(__file__).parent / "data" / "graph"
DEFAULT_VERTICES = DATA / "web.v"
DEFAULT_EDGES = DATA / "web.e"


def generate(vertices: str | os.PathLike, edges: str | os.PathLike, n: int = 2_000,
             m: int = 12_000, seed: int = 11) -> None:
    """Write a deterministic directed graph: popular pages get more links; a few pages link
    nowhere (dangling)."""
    rng = random.Random(seed)
    pairs = set()
    while len(pairs) < m:
        src = rng.randrange(n - n // 20)  # the last 5% of the pages have no out-links
        dst = int(n * rng.random() ** 2)  # low ids are popular
        if src != dst:
            pairs.add((src, dst))
    for path, lines in ((vertices, [f"{v}\n" for v in range(n)]),
                        (edges, [f"{s} {d}\n" for s, d in sorted(pairs)])):
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        partial.write_text("".join(lines), encoding="utf-8")
        os.replace(partial, path)  # never a half-written input, even with concurrent runs


def parse_vertex(line: str) -> list[int]:
    """A vertex file line -> ``[id]`` (``[]`` for a blank line)."""
    text = line.strip()
    return [int(text)] if text else []


def parse_edge(line: str) -> list[tuple[int, int]]:
    """An edge file line ``src dst [weight]`` -> ``[(src, dst)]`` (``[]`` for a blank line)."""
    columns = line.split()
    return [(int(columns[0]), int(columns[1]))] if columns else []


def format_rank(window: int, record: tuple[int, float]) -> str:
    """One output line: ``vertex rank``."""
    vertex, rank = record
    return f"{vertex} {rank!r}"


def build(pipeline, vertices_path: str, edges_path: str, output: str, *, directed: bool = True,
          damping: float = 0.85, iterations: int = 20, parallelism: int | None = None):
    """Add the PageRank task to ``pipeline``."""

    @pipeline.task(name="pagerank")
    def ranks(ctx):
        vertices = ctx.source(FileSource(vertices_path), name="vertices").flat_map(parse_vertex)
        edges = ctx.source(FileSource(edges_path), name="edges").flat_map(parse_edge)
        graph = GraphView(vertices, edges, directed=directed, parallelism=parallelism)
        (pagerank(graph, damping, iterations)
         .sink(FileSink(output, format=format_rank, extension=".txt")).with_name("ranks"))

    return pipeline


def main(argv: list[str] | None = None):
    """Parse arguments, generate the default graph if needed and run PageRank."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vertices", default=None, help=f"vertex file (default {DEFAULT_VERTICES})")
    parser.add_argument("--edges", default=None, help=f"edge file (default {DEFAULT_EDGES})")
    parser.add_argument("--undirected", action="store_true", help="every edge counts both ways")
    parser.add_argument("--damping", type=float, default=0.85, help="damping factor")
    parser.add_argument("--iterations", type=int, default=20, help="PageRank iterations")
    parser.add_argument("--output", default="out/pagerank", help="directory for the result file")
    parser.add_argument("--parallelism", type=int, default=None, help="tasks for the graph")
    parser.add_argument("--config", default=None, help="TOML config file")
    args = parser.parse_args(argv)
    vertices, edges = args.vertices, args.edges
    if vertices is None or edges is None:
        if not (DEFAULT_VERTICES.is_file() and DEFAULT_EDGES.is_file()):
            generate(DEFAULT_VERTICES, DEFAULT_EDGES)
        vertices = vertices or str(DEFAULT_VERTICES)
        edges = edges or str(DEFAULT_EDGES)
    env = Environment.from_config(args.config)
    pipeline = build(env.pipeline("pagerank"), vertices, edges, args.output,
                     directed=not args.undirected, damping=args.damping,
                     iterations=args.iterations, parallelism=args.parallelism)
    return pipeline.execute()


if __name__ == "__main__":
    main()
