"""``gyreflow graph``: run a library graph algorithm on vertex and edge files."""

from __future__ import annotations

import os
import time

import click

from gyreflow.api.cli.errors import fail as _fail
from gyreflow.api.connectors.folders import folder_problem
from gyreflow.plan.words import plural

ALGORITHMS = ("bfs", "pr", "wcc", "cdlp", "lcc", "sssp")
NEEDS_SOURCE = ("bfs", "sssp")
DEFAULT_ITERATIONS = {"pr": 20, "cdlp": 10}


BLOCK = 1 << 17  # edges per EdgeBlock record
# Below this many edges a graph runs on the local environment unless Spark is asked for (--env
# spark, or environment.type in the configuration): the local run takes about a second where
# starting Spark's JVM alone takes 15-25 s (docs/spark.md).
SMALL_GRAPH_EDGES = 1_000_000


def build_pipeline(env, algorithm: str, vertex_ids, edges: tuple, directed: bool, *,
                   source=None, iterations: int | None = None, damping: float = 0.85):
    """A pipeline with one task that runs ``algorithm`` and collects ``(vertex, value)`` as
    ``"result"``. ``vertex_ids`` is an int64 array and ``edges`` the arrays ``(src, dst,
    weights)``: they reach the graph as blocks of arrays (``GraphView.from_arrays``)."""
    from gyreflow.api.graph import algorithms
    from gyreflow.api.graph.views import EdgeBlock, GraphView, VertexBlock

    pipeline = env.pipeline(f"graph-{algorithm}")
    src, dst, weights = edges
    vertex_blocks = [VertexBlock(vertex_ids[i:i + BLOCK]) for i in range(0, len(vertex_ids), BLOCK)]
    edge_blocks = [EdgeBlock(src[i:i + BLOCK], dst[i:i + BLOCK],
                             None if weights is None else weights[i:i + BLOCK])
                   for i in range(0, len(src), BLOCK)]

    @pipeline.task(name=algorithm)
    def run(ctx):
        graph = GraphView.from_arrays(ctx.source(vertex_blocks, name="vertices"),
                                      ctx.source(edge_blocks, name="edges"), directed=directed)
        if algorithm == "bfs":
            result = algorithms.bfs(graph, source)
        elif algorithm == "sssp":
            result = algorithms.sssp(graph, source)
        elif algorithm == "pr":
            result = algorithms.pagerank(graph, damping, iterations)
        elif algorithm == "cdlp":
            result = algorithms.cdlp(graph, iterations)
        elif algorithm == "wcc":
            result = algorithms.wcc(graph)
        else:
            result = algorithms.lcc(graph)
        result.collect("result")

    return pipeline


def _unwritable_output(path: str) -> str | None:
    """Why the result file cannot be written at ``path`` (its folder, created if missing, must be
    a folder the user can write), or None: asked before the graph is read and computed, which a
    large graph takes minutes to do."""
    problem = folder_problem(os.path.dirname(os.path.abspath(path)))
    return None if problem is None else f"--output {path}: {problem}"


@click.command(name="graph")
@click.argument("algorithm", type=click.Choice(ALGORITHMS))
@click.option("--vertices", "vertices_path", required=True, type=click.Path(dir_okay=False),
              help="Vertex file: one integer id per line.")
@click.option("--edges", "edges_path", required=True, type=click.Path(dir_okay=False),
              help="Edge file: 'src dst [weight]' per line (the weight is required for sssp).")
@click.option("--directed", is_flag=True, help="Edges go from src to dst (default: undirected).")
@click.option("--source-vertex", type=int, default=None, help="Source vertex of bfs and sssp.")
@click.option("--iterations", type=click.IntRange(min=0), default=None,
              help="Iterations of pr (default 20) and cdlp (default 10).")
@click.option("--damping", type=click.FloatRange(0.0, 1.0), default=0.85, show_default=True,
              help="Damping factor of pr.")
@click.option("--output", "output_path", required=True, type=click.Path(dir_okay=False),
              help="Result file: one 'vertex value' line per vertex, in vertex file order.")
@click.option("--env", "environment", type=click.Choice(("spark", "local")),
              help="Environment to run on (default: environment.type where the configuration "
                   "sets it; else local below 1,000,000 edges, the configuration's above).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="TOML config file (see conf/default.toml).")
@click.option("--quiet", "-q", is_flag=True, help="No progress display and no summary.")
def graph(algorithm: str, vertices_path: str, edges_path: str, directed: bool,
          source_vertex: int | None, iterations: int | None, damping: float, output_path: str,
          environment: str | None, config_path: str | None, quiet: bool) -> None:
    """Run a graph algorithm (bfs, pr, wcc, cdlp, lcc, sssp) on vertex and edge files.

    Values follow LDBC Graphalytics: bfs hops (9223372036854775807 when unreachable), pr ranks,
    wcc and cdlp integer labels, lcc coefficients, sssp distances (infinity when unreachable).
    """
    from rich.console import Console

    from gyreflow.api.cli.errors import fail_user_function
    from gyreflow.api.cli.query import query_state
    from gyreflow.api.config.loading import Config, ConfigError, chosen_environment
    from gyreflow.api.config.session import RunSettings, using_settings
    from gyreflow.api.graph.files import (
        FORMATS,
        GraphFileError,
        read_edge_arrays,
        read_vertex_ids,
        write_results,
    )
    from gyreflow.runtime.errors import UserFunctionError
    from gyreflow.runtime.spark.session import SparkStartError
    from gyreflow.state.shared.job_lock import JobLockedError
    from gyreflow.state.shared.snapshot import BackendUnavailableError, SnapshotCorruptedError

    console = Console(stderr=True)
    if algorithm in NEEDS_SOURCE and source_vertex is None:
        _fail(console, f"{algorithm} needs --source-vertex", 2)
    if iterations is None:
        iterations = DEFAULT_ITERATIONS.get(algorithm)
    problem = _unwritable_output(output_path)
    if problem is not None:
        _fail(console, problem, 2)
    try:
        if config_path is not None:
            Config.load(config_path)  # bad configuration fails before the files are read
        started = time.perf_counter()
        vertex_ids = read_vertex_ids(vertices_path)
        edges = read_edge_arrays(edges_path, vertex_ids, weighted=algorithm == "sssp",
                                 vertices_path=vertices_path)
        if algorithm in NEEDS_SOURCE and not (vertex_ids == source_vertex).any():
            _fail(console, f"--source-vertex {source_vertex} is not in {vertices_path}", 2)
        read_seconds = time.perf_counter() - started
        if environment is None:
            environment = chosen_environment(config_path)
        if environment is None and len(edges[0]) < SMALL_GRAPH_EDGES:
            environment = "local"
        env_type = environment or Config.load(config_path)["environment.type"]
        settings = RunSettings(config_path=config_path, environment=environment, quiet=quiet,
                               show_progress=not quiet, summaries=[])
        with using_settings(settings):
            from gyreflow.api.language.environment import Environment

            # Its own state: the configured store, and any job of the same name, are left alone.
            env = Environment.from_config(overrides=query_state(config_path, env_type))
            pipeline = build_pipeline(env, algorithm, vertex_ids, edges, directed,
                                      source=source_vertex, iterations=iterations, damping=damping)
            started = time.perf_counter()
            # A one-shot batch computation: state left by an earlier run of the same command is
            # not resumable work, so it is replaced.
            values = dict(pipeline.execute(fresh=True).output("result"))
            compute_seconds = time.perf_counter() - started
    except GraphFileError as exc:
        _fail(console, str(exc), 2)
    except ConfigError as exc:
        _fail(console, f"configuration: {exc}", 2)
    except SparkStartError as exc:  # no Java, no master: nothing ran
        _fail(console, str(exc), 2)
    except UserFunctionError as exc:
        fail_user_function(console, exc, None)
    except (BackendUnavailableError, SnapshotCorruptedError) as exc:
        _fail(console, str(exc), 3)
    except JobLockedError as exc:  # a cluster's run, which keeps its state in the store
        _fail(console, str(exc), 4)
    vertices = vertex_ids.tolist()
    missing = [v for v in vertices if v not in values]
    if missing:
        _fail(console, f"internal error: no {algorithm} result for "
                       f"{plural(len(missing), 'vertex', 'vertices')} "
                       f"(e.g. {missing[:5]})", 1)
    count = write_results(output_path, vertices, values, FORMATS[algorithm])
    if not quiet:
        kind = "directed" if directed else "undirected"
        console.print(f"{algorithm}: {plural(count, 'vertex', 'vertices')}, "
                      f"{plural(len(edges[0]), 'edge')} ({kind}); read "
                      f"{read_seconds:.2f} s, computed on {env.type_name} in {compute_seconds:.2f} s; "
                      f"wrote {output_path}", markup=False, highlight=False, soft_wrap=True)
