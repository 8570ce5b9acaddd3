"""``gyreflow query``: run a graph query (an openCypher MATCH subset) on files, a folder or a job's graph."""

from __future__ import annotations

import json
import os
import sys

import click

from gyreflow.api.cli.errors import fail as _fail
from gyreflow.plan.words import plural


def _parse_param(text: str) -> tuple[str, object]:
    name, sep, raw = text.partition("=")
    if not sep or not name:
        raise click.BadParameter(f"expected NAME=VALUE, got {text!r}", param_hint="--param")
    try:
        return name, json.loads(raw)
    except ValueError:
        return name, raw  # a bare word is a string


def _read_json_lines(path: str, kind: str) -> list:
    """Vertices ``{"id": ..., "label": ..., props}`` or edges ``{"src": ..., "dst": ..., "label":
    ..., props}``, one JSON object a line (blank lines skipped)."""
    from gyreflow.api.graph.files import GraphFileError

    records = []
    try:
        with open(path, encoding="utf-8") as file:
            for number, line in enumerate(file, 1):
                if not line.strip():
                    continue
                try:
                    item = json.loads(line)
                except ValueError as exc:
                    raise GraphFileError(path, number, f"not a JSON object ({exc.msg})") from None
                keys = ("id",) if kind == "vertex" else ("src", "dst")
                if not isinstance(item, dict) or any(k not in item for k in keys):
                    article = "an" if kind == "edge" else "a"
                    problem = f"{article} {kind} line is a JSON object with {', '.join(keys)}"
                    raise GraphFileError(path, number, problem)
                value = {k: v for k, v in item.items() if k not in keys}
                records.append((*(item[k] for k in keys), value))
    except OSError as exc:
        raise GraphFileError(path, None, f"cannot read it: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise GraphFileError(path, None, f"not UTF-8 text at byte {exc.start}") from None
    return records


def read_graph(vertices_path: str, edges_path: str) -> tuple[list, list]:
    """``(vertices, edges)`` from JSON-lines files (``.jsonl``/``.json``) or Graphalytics files
    (ids, and ``src dst [weight]`` lines: a weight becomes the edge property ``weight``).

    A JSON-lines edge may name a vertex the vertex file does not have: the vertex exists, without
    a label or properties, as in a graph built by a pipeline (Graphalytics files refuse it)."""
    from gyreflow.api.graph.files import read_edges, read_vertices

    if vertices_path.endswith((".jsonl", ".json")):
        vertices = _read_json_lines(vertices_path, "vertex")
    else:
        vertices = [(v, None) for v in read_vertices(vertices_path)]
    if edges_path.endswith((".jsonl", ".json")):
        edges = _read_json_lines(edges_path, "edge")
        vertices = vertices + _named_only_by_edges(vertices, edges)
    else:
        known = {v for v, _ in vertices}
        with open(edges_path, encoding="utf-8") as file:
            weighted = any(len(line.split()) == 3 for line in file)
        edges = [(e[0], e[1], {"weight": e[2]} if weighted else None)
                 for e in read_edges(edges_path, known, weighted=weighted,
                                     vertices_path=vertices_path)]
    return vertices, edges


def _named_only_by_edges(vertices: list, edges: list) -> list:
    """``(id, {})`` for each vertex an edge names that ``vertices`` lacks, in the edges' order."""
    known = {vertex for vertex, _ in vertices}
    implied: dict = {}
    for source, target, _ in edges:
        for end in (source, target):
            if end not in known and end not in implied:
                implied[end] = {}
    return list(implied.items())


def query_state(config_path: str | None, environment: str) -> dict:
    """The state of a command's own one-shot pipeline: in memory (it leaves the configured store,
    and any job of the same name there, alone, and two runs at once do not meet), except on a
    Spark cluster, whose executors cannot reach this process's memory."""
    from gyreflow.api.config.loading import Config
    from gyreflow.api.language.cluster import is_cluster_master

    if environment == "spark":
        config = Config.load(config_path, {"environment.type": "spark"})
        if is_cluster_master(config["spark.master"]):
            return {}
    return {"state.backend": "memory"}


def _properties_directed(path: str) -> bool | None:
    """``graph.NAME.directed`` of a Graphalytics properties file, when it says."""
    with open(path, encoding="utf-8") as file:
        for line in file:
            key, sep, value = line.partition("=")
            if sep and key.strip().endswith(".directed"):
                return value.strip().lower() == "true"
    return None


def graph_files(path: str) -> tuple[str, str, bool | None]:
    """``(vertices, edges, directed or None)`` of a graph folder or a Graphalytics properties file.

    A folder holds ``vertices.jsonl`` and ``edges.jsonl``, or one Graphalytics dataset
    (``NAME.v``, ``NAME.e`` and optionally ``NAME.properties``, which says whether it is directed).
    """
    from gyreflow.api.graph.files import GraphFileError

    if os.path.isfile(path) and path.endswith(".properties"):
        base = path[: -len(".properties")]
        if not (os.path.isfile(base + ".v") and os.path.isfile(base + ".e")):
            raise GraphFileError(path, None, f"no {os.path.basename(base)}.v and .e beside it")
        return base + ".v", base + ".e", _properties_directed(path)
    names = sorted(os.listdir(path))
    if "vertices.jsonl" in names and "edges.jsonl" in names:
        return os.path.join(path, "vertices.jsonl"), os.path.join(path, "edges.jsonl"), None
    datasets = [name[:-2] for name in names if name.endswith(".v") and f"{name[:-2]}.e" in names]
    if len(datasets) != 1:
        found = f": {', '.join(datasets)}; pass NAME.properties" if datasets else ""
        problem = (f"a graph folder holds vertices.jsonl and edges.jsonl, or one NAME.v and NAME.e "
                   f"pair; it has {len(datasets)} pairs{found}")
        raise GraphFileError(path, None, problem)
    base = os.path.join(path, datasets[0])
    properties = base + ".properties"
    return (base + ".v", base + ".e",
            _properties_directed(properties) if os.path.isfile(properties) else None)


def _job_graph(job: str, config_path: str | None, window: int | None, graph: str | None):
    """The graph a job's state holds (see ``gyreflow.api.graph.stored``)."""
    from gyreflow.api.config.loading import Config
    from gyreflow.api.graph.stored import read_job_graph
    from gyreflow.state.backends import backend_from_config

    backend = backend_from_config(Config.load(config_path))
    store = backend.open_store()
    try:
        return read_job_graph(store, job, backend.max_parallelism, window=window, graph=graph)
    finally:
        store.close()


@click.command(name="query")
@click.argument("arguments", metavar="GRAPH QUERY | VERTICES EDGES QUERY", nargs=-1, required=True)
@click.option("--param", "params", multiple=True, metavar="NAME=VALUE",
              help="A query parameter $NAME; VALUE is read as JSON, else as a string.")
@click.option("--directed/--undirected", default=None,
              help="Whether edges go from src to dst (default: what the graph says, else directed).")
@click.option("--graph", "graph_name", default=None, metavar="NAME",
              help="A job's graph, when the job has more than one.")
@click.option("--window", type=int, default=None, metavar="W",
              help="A job's graph as a retained completed window left it (default: the last).")
@click.option("--explain", is_flag=True, help="Print the query's plan instead of running it.")
@click.option("--env", "environment", type=click.Choice(("spark", "local")),
              help="Environment to run on (default: environment.type where the configuration "
                   "sets it, else local: a query does not wait for Spark's JVM).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="TOML config file (see conf/default.toml); a job's state is found through it.")
def query(arguments: tuple[str, ...], params: tuple[str, ...], directed: bool | None,
          graph_name: str | None, window: int | None, explain: bool, environment: str | None,
          config_path: str | None) -> None:
    """Run QUERY on a graph and print one JSON object per result row (keys: the RETURN columns).

    GRAPH is a folder (vertices.jsonl and edges.jsonl, or one Graphalytics dataset
    NAME.v/NAME.e/NAME.properties), a Graphalytics .properties file, or the name of a job with
    stored state (gyreflow snapshots lists them): its graph as its last completed window left it.
    VERTICES and EDGES are Graphalytics files or JSON-lines files (.jsonl): a vertex line
    {"id": 1, "label": "Person", "name": "Ann"}, an edge line {"src": 1, "dst": 2, "label":
    "KNOWS"}. Exit status 2: a query that does not parse or is outside the subset, a missing
    parameter, an unreadable file, a job, window or graph the store does not have.
    """
    from rich.console import Console

    from gyreflow.api.cli.errors import fail_user_function
    from gyreflow.api.config.loading import Config, ConfigError, chosen_environment
    from gyreflow.api.config.session import RunSettings, using_settings
    from gyreflow.api.graph.files import GraphFileError
    from gyreflow.api.graph.query import Query, QuerySyntaxError
    from gyreflow.api.graph.query.run import MatchRun
    from gyreflow.api.graph.stored import StoredGraphError
    from gyreflow.api.graph.views import GraphView
    from gyreflow.runtime.errors import DataError, UserFunctionError
    from gyreflow.runtime.spark.session import SparkStartError
    from gyreflow.state.shared.job_lock import JobLockedError
    from gyreflow.state.shared.snapshot import BackendUnavailableError, SnapshotCorruptedError

    console = Console(stderr=True)
    if len(arguments) not in (2, 3):
        raise click.UsageError("expected GRAPH QUERY or VERTICES EDGES QUERY, got "
                               f"{plural(len(arguments), 'argument')}")
    *where, text = arguments
    try:
        parsed = Query(text)
        values = dict(_parse_param(p) for p in params)
        if explain:
            click.echo(parsed.explain())
            return
        parsed.check_parameters(values)
        if config_path is not None:
            Config.load(config_path)
        if len(where) == 2 or os.path.isdir(where[0]) or where[0].endswith(".properties"):
            only_jobs = [option for option, value in (("--window", window),
                                                      ("--graph", graph_name)) if value is not None]
            if only_jobs:
                raise click.UsageError(f"{' and '.join(only_jobs)} choose among a job's stored "
                                       "graphs: files and folders hold one graph")
        if len(where) == 2:
            vertices, edges = read_graph(*where)
        elif os.path.isdir(where[0]) or where[0].endswith(".properties"):
            vertices_path, edges_path, said = graph_files(where[0])
            vertices, edges = read_graph(vertices_path, edges_path)
            directed = said if directed is None else directed
        else:
            stored = _job_graph(where[0], config_path, window, graph_name)
            vertices, edges = stored.vertices, stored.edges
            directed = stored.directed if directed is None else directed
        directed = True if directed is None else directed
        # A query's work is small: it runs in this process unless Spark is asked for (--env
        # spark, or environment.type set in the configuration), not after a JVM's start.
        environment = environment or chosen_environment(config_path) or "local"
        # A job's graph is read from its state store: the query's own pipeline leaves it alone.
        overrides = query_state(config_path, environment)
        settings = RunSettings(config_path=config_path, environment=environment, quiet=True,
                               show_progress=False, summaries=[])
        with using_settings(settings):
            from gyreflow.api.language.environment import Environment

            env = Environment.from_config(overrides=overrides)
            pipeline = env.pipeline("query")
            # array joins where the query allows them, else partial paths as messages
            matching = MatchRun(parsed, values, [vertex for vertex, _ in vertices], directed)

            @pipeline.task(name="query")
            def run(ctx):
                graph = GraphView(ctx.source(vertices, name="vertices"),
                                  ctx.source(edges, name="edges"), directed=directed)
                matching.stream(ctx, graph).collect("matches")

            output = pipeline.execute(fresh=True).output("matches")
        rows = matching.rows(output, dict(vertices))
    except StoredGraphError as exc:
        nothing = "; and no folder or file has that name" if exc.no_job else ""
        _fail(console, f"{exc}{nothing}", 2)
    except (QuerySyntaxError, GraphFileError, DataError) as exc:  # DataError: an integer / by 0
        _fail(console, str(exc), 2)
    except (KeyError, ValueError, TypeError) as exc:
        _fail(console, str(exc.args[0] if exc.args else exc), 2)
    except (ConfigError, BackendUnavailableError) as exc:
        _fail(console, f"configuration: {exc}", 2)
    except SparkStartError as exc:  # no Java, no master: nothing ran
        _fail(console, str(exc), 2)
    except SnapshotCorruptedError as exc:
        _fail(console, str(exc), 3)
    except JobLockedError as exc:  # a cluster's query, which keeps its state in the store
        _fail(console, str(exc), 4)
    except UserFunctionError as exc:
        fail_user_function(console, exc, None)
    for row in rows:
        sys.stdout.write(json.dumps(row, default=str) + "\n")
