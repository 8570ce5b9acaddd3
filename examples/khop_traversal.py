"""k-hop neighbourhoods for a stream of requests on a graph loaded from files.

The graph (Graphalytics format: a vertex file with one id per line, an edge file with ``src dst
[weight]`` per line) is loaded in the first window. Requests are ``key start`` lines, cut into windows
of ``--request-window`` requests; each request gets exactly one answer, in its window's JSON-lines
file: ``{"window": w, "request": key, "vertices": [[vertex, hops], ...]}`` with every vertex within
``--k`` hops of ``start`` along out-edges (``start`` itself at 0), nearest first. A request whose start
vertex is not in the graph gets an empty list.

Without ``--vertices``/``--edges``/``--requests`` the script generates a graph and requests under
``examples/data/graph/`` (fixed seed) when missing::

    gyreflow run examples/khop_traversal.py -- --output out/khop --k 2
"""

from __future__ import annotations

import argparse
import json
import os
import random
from pathlib import Path

from gyreflow.api import Environment, FileSink, FileSource, SizeTumblingWindow
from gyreflow.api.graph import GraphView
from gyreflow.api.graph_algorithms import khop

DATA = Path(__file__).parent / "data" / "graph"
DEFAULT_VERTICES = DATA / "social.v"
DEFAULT_EDGES = DATA / "social.e"
DEFAULT_REQUESTS = DATA / "social.requests"


def generate(vertices: str | os.PathLike, edges: str | os.PathLike, requests: str | os.PathLike,
             n: int = 1_000, m: int = 3_000, r: int = 40, seed: int = 3) -> None:
    """Write a deterministic directed graph and ``r`` requests (a few start outside the graph)."""
    rng = random.Random(seed)
    pairs = set()
    while len(pairs) < m:
        src, dst = rng.randrange(n), rng.randrange(n)
        if src != dst:
            pairs.add((src, dst))
    asks = []
    for number in range(r):
        start = rng.randrange(n) if rng.random() > 0.1 else n + rng.randrange(n)
        asks.append(f"q{number:04d} {start}\n")
    for path, lines in ((vertices, [f"{v}\n" for v in range(n)]),
                        (edges, [f"{s} {d}\n" for s, d in sorted(pairs)]),
                        (requests, asks)):
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
    """``src dst [weight]`` -> ``[(src, dst)]`` (``[]`` for a blank line)."""
    columns = line.split()
    return [(int(columns[0]), int(columns[1]))] if columns else []


def parse_request(line: str) -> list[tuple[str, int]]:
    """``key start`` -> ``[(key, start)]`` (``[]`` for a blank line)."""
    columns = line.split()
    return [(columns[0], int(columns[1]))] if columns else []


def format_answer(window: int, record: tuple[str, dict]) -> str:
    """One output line: the window, the request key and its neighbourhood, nearest first."""
    key, reached = record
    return json.dumps({"window": window, "request": key,
                       "vertices": [[vertex, hops] for vertex, hops in reached.items()]})


def build(pipeline, vertices_path: str, edges_path: str, requests_path: str, output: str, *,
          k: int = 2, request_window: int = 10, directed: bool = True,
          parallelism: int | None = None):
    """Add the k-hop task to ``pipeline``."""

    @pipeline.task(name="khop")
    def neighbourhoods(ctx):
        vertices = ctx.source(FileSource(vertices_path), name="vertices").flat_map(parse_vertex)
        edges = ctx.source(FileSource(edges_path), name="edges").flat_map(parse_edge)
        requests = (ctx.source(FileSource(requests_path), SizeTumblingWindow(request_window),
                               name="requests", parallelism=1)  # window w: the w-th lines
                    .flat_map(parse_request))
        graph = GraphView(vertices, edges, directed=directed, parallelism=parallelism)
        khop(graph, requests, k).sink(FileSink(output, format=format_answer)).with_name("files")

    return pipeline


def main(argv: list[str] | None = None):
    """Parse arguments, generate the default inputs if needed and answer the requests."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vertices", default=None, help=f"vertex file (default {DEFAULT_VERTICES})")
    parser.add_argument("--edges", default=None, help=f"edge file (default {DEFAULT_EDGES})")
    parser.add_argument("--requests", default=None,
                        help=f"request file, 'key start' per line (default {DEFAULT_REQUESTS})")
    parser.add_argument("--k", type=int, default=2, help="hops")
    parser.add_argument("--request-window", type=int, default=10, help="requests per window")
    parser.add_argument("--undirected", action="store_true", help="follow edges both ways")
    parser.add_argument("--output", default="out/khop", help="directory for window files")
    parser.add_argument("--parallelism", type=int, default=None, help="tasks for the graph")
    parser.add_argument("--config", default=None, help="TOML config file")
    args = parser.parse_args(argv)
    paths = [args.vertices, args.edges, args.requests]
    defaults = [DEFAULT_VERTICES, DEFAULT_EDGES, DEFAULT_REQUESTS]
    if None in paths:
        if not all(path.is_file() for path in defaults):
            generate(*defaults)
        paths = [given or str(default) for given, default in zip(paths, defaults, strict=True)]
    env = Environment.from_config(args.config)
    pipeline = build(env.pipeline("khop"), *paths, args.output, k=args.k,
                     request_window=args.request_window, directed=not args.undirected,
                     parallelism=args.parallelism)
    return pipeline.execute()


if __name__ == "__main__":
    main()
