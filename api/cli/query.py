"""``gyreflow query``: run a graph query (an openCypher MATCH subset) on vertex and edge files."""

from __future__ import annotations

import json
import sys

import click

from gyreflow.api.cli.errors import fail as _fail


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
                    msg = f"{path}:{number}: not a JSON object ({exc.msg})"
                    raise GraphFileError(msg) from None
                keys = ("id",) if kind == "vertex" else ("src", "dst")
                if not isinstance(item, dict) or any(k not in item for k in keys):
                    msg = f"{path}:{number}: a {kind} line is a JSON object with {', '.join(keys)}"
                    raise GraphFileError(msg)
                value = {k: v for k, v in item.items() if k not in keys}
                records.append((*(item[k] for k in keys), value))
    except OSError as exc:
        msg = f"cannot read {path}: {exc.strerror}"
        raise GraphFileError(msg) from None
    except UnicodeDecodeError as exc:
        msg = f"{path}: not UTF-8 text at byte {exc.start}"
        raise GraphFileError(msg) from None
    return records


def read_graph(vertices_path: str, edges_path: str) -> tuple[list, list]:
    """``(vertices, edges)`` from JSON-lines files (``.jsonl``/``.json``) or Graphalytics files
    (ids, and ``src dst [weight]`` lines: a weight becomes the edge property ``weight``)."""
    from gyreflow.api.graph.files import read_edges, read_vertices

    if vertices_path.endswith((".jsonl", ".json")):
        vertices = _read_json_lines(vertices_path, "vertex")
    else:
        vertices = [(v, None) for v in read_vertices(vertices_path)]
    if edges_path.endswith((".jsonl", ".json")):
        edges = _read_json_lines(edges_path, "edge")
    else:
        known = {v for v, _ in vertices}
        with open(edges_path, encoding="utf-8") as file:
            weighted = any(len(line.split()) == 3 for line in file)
        edges = [(e[0], e[1], {"weight": e[2]} if weighted else None)
                 for e in read_edges(edges_path, known, weighted=weighted,
                                     vertices_path=vertices_path)]
    return vertices, edges


@click.command(name="query")
@click.argument("vertices_path", metavar="VERTICES", type=click.Path(dir_okay=False))
@click.argument("edges_path", metavar="EDGES", type=click.Path(dir_okay=False))
@click.argument("text", metavar="QUERY")
@click.option("--param", "params", multiple=True, metavar="NAME=VALUE",
              help="A query parameter $NAME; VALUE is read as JSON, else as a string.")
@click.option("--directed/--undirected", default=True, show_default=True,
              help="Whether edges go from src to dst.")
@click.option("--explain", is_flag=True, help="Print the query's plan instead of running it.")
@click.option("--env", "environment", type=click.Choice(("spark", "local")),
              help="Environment to run on (default: environment.type of the configuration).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="TOML config file (see conf/default.toml).")
def query(vertices_path: str, edges_path: str, text: str, params: tuple[str, ...], directed: bool,
          explain: bool, environment: str | None, config_path: str | None) -> None:
    """Run QUERY on a graph and print one JSON object per result row (keys: the RETURN columns).

    VERTICES and EDGES are Graphalytics files or JSON-lines files (``.jsonl``): a vertex line
    ``{"id": 1, "label": "Person", "name": "Ann"}``, an edge line ``{"src": 1, "dst": 2, "label":
    "KNOWS"}``. Exit status 2: a query that does not parse or is outside the subset, a missing
    parameter, an unreadable file.
    """
    from rich.console import Console

    from gyreflow.api.cli.errors import fail_user_function
    from gyreflow.api.config.loading import Config, ConfigError
    from gyreflow.api.config.session import RunSettings, using_settings
    from gyreflow.api.graph.files import GraphFileError
    from gyreflow.api.graph.query import Query, QuerySyntaxError, query_graph
    from gyreflow.api.graph.views import GraphView
    from gyreflow.runtime.errors import UserFunctionError

    console = Console(stderr=True)
    try:
        parsed = Query(text)
        values = dict(_parse_param(p) for p in params)
        if explain:
            click.echo(parsed.explain())
            return
        parsed.check_parameters(values)
        if config_path is not None:
            Config.load(config_path)
        vertices, edges = read_graph(vertices_path, edges_path)
        settings = RunSettings(config_path=config_path, environment=environment, quiet=True,
                               show_progress=False, summaries=[])
        with using_settings(settings):
            from gyreflow.api.language.environment import Environment

            env = Environment.from_config()
            pipeline = env.pipeline("query")
            ids = [vertex for vertex, _ in vertices]

            @pipeline.task(name="query")
            def run(ctx):
                graph = GraphView(ctx.source(vertices, name="vertices"),
                                  ctx.source(edges, name="edges"), directed=directed)
                query_graph(graph, parsed, ctx.source([(0, values)], name="request"),
                            ids).collect("matches")

            matches = [bindings for _, bindings in
                       pipeline.execute(fresh=True).output("matches")]
        rows = parsed.rows(matches, values)
    except (QuerySyntaxError, GraphFileError) as exc:
        _fail(console, str(exc), 2)
    except (KeyError, ValueError, TypeError) as exc:
        _fail(console, str(exc.args[0] if exc.args else exc), 2)
    except ConfigError as exc:
        _fail(console, f"configuration: {exc}", 2)
    except UserFunctionError as exc:
        fail_user_function(console, exc, None)
    for row in rows:
        sys.stdout.write(json.dumps(row, default=str) + "\n")
