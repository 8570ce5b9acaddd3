"""Components of the latest completed version of a changing graph, while the next window changes it.

Edges arrive as ``src dst`` lines (``- src dst`` removes the edges between the two), cut into windows
of ``--window`` lines. Every window is a version of the graph. In window ``w`` the job computes the
connected components of version ``w - 1``, the last one completed, on a snapshot that window ``w``'s
own changes do not reach, and writes one JSON-lines file per window with a line ``{"window": w,
"version": w - 1, "vertex": v, "component": c}`` for every vertex of that version.

With ``--requests``, a file of ``key start version`` lines (``--requests-window`` lines a window),
each request is answered on the version it names, one of the last two windows' or the current one
(``-``): the vertices within two hops of ``start``, a line ``{"key": ..., "vertex": v, "hops": h}``
each, in ``OUTPUT-khop``. ``--arrays`` computes the components with the library's array program
(``wcc(graph.snapshot())``) instead of the per-vertex one::

    gyreflow run examples/graph_versions.py -- --edges changes.txt --window 200 --output out/versions
"""

from __future__ import annotations

import argparse
import json

from gyreflow.api import Environment, FileSink, FileSource, SizeTumblingWindow
from gyreflow.api.graph import GraphView, RemoveEdge
from gyreflow.api.graph_algorithms import ConnectedComponents, KHopNeighbourhood, wcc


def parse_change(line: str) -> list:
    """``src dst`` -> ``[(src, dst)]``, ``- src dst`` -> ``[RemoveEdge(src, dst)]``, blank -> ``[]``."""
    columns = line.split()
    if not columns:
        return []
    if columns[0] == "-":
        return [RemoveEdge(int(columns[1]), int(columns[2]))]
    return [(int(columns[0]), int(columns[1]))]


def format_label(window: int, record: tuple[int, int]) -> str:
    """One output line: the window, the version it read, a vertex and its component."""
    vertex, component = record
    return json.dumps({"window": window, "version": window - 1, "vertex": vertex,
                       "component": component})


def parse_request(line: str) -> list:
    """``key start version`` -> ``[(key, start, version)]`` (version ``-``: the current one)."""
    columns = line.split()
    if not columns:
        return []
    return [(columns[0], int(columns[1]), None if columns[2] == "-" else int(columns[2]))]


def request_version(request: tuple):
    """The version a request names."""
    return request[2]


def format_hop(window: int, record: tuple) -> str:
    """One k-hop answer line."""
    key, vertex, hops = record
    return json.dumps({"window": window, "key": key, "vertex": vertex, "hops": hops})


def build(pipeline, edges_path: str, window: int, output: str, parallelism: int | None = None,
          requests_path: str | None = None, requests_window: int = 1, arrays: bool = False):
    """Add the snapshot components task (and the versioned k-hop answers) to ``pipeline``."""

    @pipeline.task(name="graph_versions")
    def versions(ctx):
        # One source task each: window w is the w-th ``window`` lines of the file, whatever the
        # configured parallelism (each source task would cut its own byte range into windows).
        edges = (ctx.source(FileSource(edges_path), SizeTumblingWindow(window), name="edges",
                            parallelism=1)
                 .flat_map(parse_change))
        graph = GraphView(None, edges, directed=False, parallelism=parallelism, name="graph",
                          retained_versions=2)
        completed = graph.snapshot()
        components = (wcc(completed).with_name("components") if arrays else
                      completed.compute(ConnectedComponents(directed=False), name="components"))
        components.sink(FileSink(output, format=format_label)).with_name("files")
        if requests_path is not None:
            requests = (ctx.source(FileSource(requests_path), SizeTumblingWindow(requests_window),
                                   name="requests", parallelism=1).flat_map(parse_request))
            (graph.traversal(requests, KHopNeighbourhood(2, "both"), name="khop",
                             version=request_version)
             .sink(FileSink(f"{output}-khop", format=format_hop)).with_name("khop-files"))

    return pipeline


def main(argv: list[str] | None = None):
    """Parse arguments and run."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--edges", required=True, help="change file: src dst, or - src dst")
    parser.add_argument("--window", type=int, default=200, help="lines per window")
    parser.add_argument("--output", default="out/graph-versions", help="directory for window files")
    parser.add_argument("--parallelism", type=int, default=None, help="tasks for the graph")
    parser.add_argument("--requests", default=None, help="request file: key start version")
    parser.add_argument("--requests-window", type=int, default=1, help="request lines per window")
    parser.add_argument("--arrays", action="store_true",
                        help="compute the components with the array program")
    parser.add_argument("--config", default=None, help="TOML config file")
    args = parser.parse_args(argv)
    env = Environment.from_config(args.config)
    pipeline = build(env.pipeline("graph-versions"), args.edges, args.window, args.output,
                     args.parallelism, args.requests, args.requests_window, args.arrays)
    return pipeline.execute()


if __name__ == "__main__":
    main()
