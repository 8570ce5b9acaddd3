"""Single-source shortest paths on a weighted graph stored in files: one ``vertex distance`` line per
vertex (``infinity`` when unreachable), in the LDBC Graphalytics format.

The vertex file has one integer id per line, the edge file ``src dst weight`` per line. The result is
written by a ``FileSink``: one file, ``window-000001.txt``, in ``--output``. Long computations can
snapshot their supersteps (``state.iteration_checkpoint_interval``), so that ``gyreflow run --resume``
after a crash goes on from the last such superstep::

    gyreflow run examples/shortest_paths.py -- --vertices g.v --edges g.e --source 1 --output out/sssp
"""

from __future__ import annotations

import argparse

from gyreflow.api import Environment, FileSink, FileSource
from gyreflow.api.graph import GraphView
from gyreflow.api.graph.files import format_float
from gyreflow.api.graph_algorithms import sssp


def parse_vertex(line: str) -> list[int]:
    """A vertex file line -> ``[id]`` (``[]`` for a blank line)."""
    text = line.strip()
    return [int(text)] if text else []


def parse_edge(line: str) -> list[tuple[int, int, float]]:
    """An edge file line ``src dst weight`` -> ``[(src, dst, weight)]`` (``[]`` for a blank line)."""
    columns = line.split()
    return [(int(columns[0]), int(columns[1]), float(columns[2]))] if columns else []


def format_distance(window: int, record: tuple[int, float]) -> str:
    """One output line: ``vertex distance``."""
    vertex, distance = record
    return f"{vertex} {format_float(distance)}"


def build(pipeline, vertices_path: str, edges_path: str, source: int, output: str, *,
          directed: bool = True, parallelism: int | None = None):
    """Add the shortest-paths task to ``pipeline``."""

    @pipeline.task(name="sssp")
    def distances(ctx):
        vertices = ctx.source(FileSource(vertices_path), name="vertices").flat_map(parse_vertex)
        edges = ctx.source(FileSource(edges_path), name="edges").flat_map(parse_edge)
        graph = GraphView(vertices, edges, directed=directed, parallelism=parallelism)
        (sssp(graph, source)
         .sink(FileSink(output, format=format_distance, extension=".txt")).with_name("distances"))

    return pipeline


def main(argv: list[str] | None = None):
    """Parse arguments and run the job."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vertices", required=True, help="vertex file")
    parser.add_argument("--edges", required=True, help="edge file: src dst weight")
    parser.add_argument("--source", type=int, required=True, help="the source vertex")
    parser.add_argument("--undirected", action="store_true", help="every edge counts both ways")
    parser.add_argument("--output", default="out/sssp", help="directory for the result file")
    parser.add_argument("--parallelism", type=int, default=None, help="tasks for the graph")
    args = parser.parse_args(argv)
    env = Environment.from_config()
    pipeline = build(env.pipeline("sssp"), args.vertices, args.edges, args.source, args.output,
                     directed=not args.undirected, parallelism=args.parallelism)
    return pipeline.execute()


if __name__ == "__main__":
    main()
